"""`wattsched experiment eaco`: EaCO against FIFO, FIFO_packed and Gandiva on EaCO's two cluster sizes.

Every run shares the workload, the cluster, the jobs' GPU loads measured by EaCO (``gpu_loads: eaco-measured``),
the sharing model fitted to EaCO's measurements (``sharing_model: eaco``) with the same seeded prediction noise,
the power model and the idle-timeout power manager (nodes with no job are powered off alike in every run). Runs of
one cluster size and seed are compared, so they are charged over one common accounting window. Per run: total
energy, average active nodes, average runtime, average JCT (wait + run), GPU allocation, co-locations and
de-co-locations.

Outputs in DIR: the protocol's ``records.csv``, ``summary.md`` (the paper's figures beside the measured ones, the
targets) and ``config.yaml``; ``results.csv`` (one row per cluster, policy and seed, the experiment's own
columns); ``policies.png`` and ``active_nodes.png``. The summary's parts are in ``eaco_tables.py``.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ..core.errors import UnknownNameError, WattschedError
from ..core.states import STATUS_DONE, STATUS_NAMES
from .config import SimulationConfig, same_setting
from .grid import check_policy_names, require_times, thinned, write_results
from .jobmodel import require_one_job_model
from .parallel import FIRST_SEED
from .protocol import EXPERIMENTS, Cell, Experiment, Outcome, Section

DEFAULT_WORKLOAD = "gavel/msr/all"
DEFAULT_MAX_JOBS = 500
DEFAULT_NOISE = 0.05
CLUSTERS = {28: "eaco-28", 64: "eaco-64"}
# Each policy's scheduler settings: a name -> config knobs registry (no if/elif over names).
# `fifo` and `fifo-packed` are Gavel's FIFO and FIFO with packing (docs/baselines.md), the baselines of the
# simulator EaCO extends. `fifo-spread` (least-allocated) and `fifo-best-fit` (never co-locates) are the rows this
# experiment used to call fifo and fifo-packed, kept for reference only: they run when named with --policies.
POLICIES: dict[str, dict[str, str]] = {
    "eaco": {"allocation": "eaco"},
    "fifo": {"allocation": "gavel-fifo"},
    "fifo-packed": {"allocation": "gavel-fifo-packed"},
    "gandiva": {"allocation": "gandiva"},
    "fifo-spread": {"queue": "fifo", "placement": "least-allocated"},
    "fifo-best-fit": {"queue": "fifo", "placement": "best-fit"},
}
DEFAULT_POLICIES = ("eaco", "fifo", "fifo-packed", "gandiva")
BASELINES = ("fifo", "fifo-packed", "gandiva")
SERIES_POINTS = 400


@dataclass(frozen=True)
class Setup:
    """What every run shares (picklable)."""

    workload: str = DEFAULT_WORKLOAD
    max_jobs: int | None = DEFAULT_MAX_JOBS
    noise: float = DEFAULT_NOISE
    data_dir: str | None = None
    columns: dict[str, str] = field(default_factory=dict)  # of a generic job CSV workload
    # Measured profiles (docs/perf.md §9) and the GPU type of the cluster's nodes: with profiles, jobs get profiled
    # models, run and draw as measured, and share GPUs under the sharing model fitted to measurement.
    profiles: str | None = None
    gpu_type: str | None = None

    def config(self, policy: str, nodes: int, seed: int) -> SimulationConfig:
        measured = {"profiles": self.profiles, "sharing_model": "measured", "gpu_loads": "catalog"}
        eaco = {"gpu_loads": "eaco-measured", "sharing_model": "eaco"}
        return SimulationConfig(
            workload=self.workload,
            columns=self.columns,
            cluster=CLUSTERS[nodes],
            gpu_type=self.gpu_type,
            max_jobs=self.max_jobs,
            data_dir=self.data_dir,
            seed=seed,
            performance="tables",
            assign_models="always",
            sharing_noise=self.noise,
            power_manager="idle-timeout",
            **(measured if self.profiles else eaco),
            **POLICIES[policy],
        )


class EacoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: list[int] = Field(
        default_factory=lambda: [28, 64],
        description="cluster sizes: 28 and/or 64 nodes of 8 V100, comma-separated",
    )
    seeds: int = Field(3, description="runs per policy and size, seeds 42, 43, ...")
    policies: list[str] = Field(
        default_factory=lambda: list(DEFAULT_POLICIES),
        description="comma-separated: eaco, fifo, fifo-packed, gandiva; for reference fifo-spread, fifo-best-fit",
    )
    workload: str = Field(DEFAULT_WORKLOAD, description="workload name or CSV path")
    max_jobs: int = Field(DEFAULT_MAX_JOBS, ge=0, description="keep the first N jobs by submission (0: all)")
    noise: float = Field(
        DEFAULT_NOISE, description="prediction noise: std. dev. of a shared job's true speed around the model"
    )
    # The same options as simulate's, from the same config fields.
    profiles: str | None = same_setting("profiles")
    gpu_type: str | None = Field(
        None, description="GPU type of every node (e.g. H200) instead of the clusters' V100"
    )
    columns: dict[str, str] = same_setting("columns")
    data_dir: str | None = same_setting("data_dir")


@dataclass
class RunRecord:
    nodes: int
    policy: str
    seed: int
    energy_kwh: float
    avg_active_nodes: float
    avg_runtime_s: float
    avg_jct_s: float
    avg_queue_s: float
    makespan_s: float
    gpu_allocation: float
    jobs_completed: int
    colocations: int
    decolocations: int
    restarts: int
    wall_s: float
    own_window_kwh: float = float("nan")  # up to the run's own last completion; energy_kwh: the common window
    series_t: list[float] = field(default_factory=list, repr=False)
    series_nodes_on: list[float] = field(default_factory=list, repr=False)
    window_input: dict = field(default_factory=dict, repr=False)
    # Not results.csv columns: for the summary.
    jobs_submitted: int = field(default=0, repr=False)
    notes: list[str] = field(default_factory=list, repr=False)  # the run's notes (workload, cluster, models)


HIDDEN = {"series_t", "series_nodes_on", "window_input", "jobs_submitted", "notes"}  # not results.csv columns


def _time_mean(t: np.ndarray, v: np.ndarray) -> float:
    """Mean of a step function with value v[i] from t[i] to t[i+1]."""
    if t.size < 2 or t[-1] <= t[0]:
        return float(v[0]) if v.size else 0.0
    return float((v[:-1] * np.diff(t)).sum() / (t[-1] - t[0]))


def run_record(cfg: SimulationConfig, policy: str, nodes: int, seed: int) -> RunRecord:
    from .run import run_simulation
    from .window import window_input

    started = time.perf_counter()
    try:
        result = run_simulation(cfg)
    except WattschedError as exc:  # name the run; a plain message pickles across processes
        raise WattschedError(f"{policy} on {nodes} nodes, seed {seed}: {exc}") from None
    s, jobs, series = result.summary, result.jobs, result.series
    done = jobs["status"] == STATUS_NAMES[STATUS_DONE]
    t = series["time_s"].to_numpy(dtype=float)
    on = series["nodes_on"].to_numpy(dtype=float) if "nodes_on" in series else np.full(t.size, float(nodes))
    params = (s.get("policies", {}).get("allocation") or {}).get("parameters") or {}
    keep = thinned(t.size, SERIES_POINTS)
    return RunRecord(
        nodes=nodes,
        policy=policy,
        seed=seed,
        energy_kwh=float(s["energy_kwh"]),
        avg_active_nodes=_time_mean(t, on),
        avg_runtime_s=float((jobs.loc[done, "end_s"] - jobs.loc[done, "start_s"]).mean()),
        avg_jct_s=float(jobs.loc[done, "jct_s"].mean()),
        avg_queue_s=float(jobs.loc[done, "queue_delay_s"].mean()),
        makespan_s=float(s["makespan_s"]),
        gpu_allocation=float(s["gpu_allocation_mean"]),
        jobs_completed=int(s["jobs_completed"]),
        colocations=int(params.get("colocations", params.get("pairs_formed", 0))),
        decolocations=int(params.get("undone", 0)),
        restarts=int(s.get("restarts", 0)),
        wall_s=time.perf_counter() - started,
        series_t=t[keep].tolist(),
        series_nodes_on=on[keep].tolist(),
        window_input=window_input(s),
        jobs_submitted=int(s["jobs_submitted"]),
        notes=list(s.get("notes") or []),
    )


def _g6(value: float) -> float:
    return float(f"{value:.6g}")


def check_nodes(values: Sequence[int]) -> list[int]:
    for n in values:
        if n not in CLUSTERS:
            raise UnknownNameError("EaCO cluster size", str(n), [str(k) for k in CLUSTERS])
    return list(dict.fromkeys(values))


def check_policies(names: Sequence[str]) -> list[str]:
    return check_policy_names(names, list(POLICIES), "eaco", "every figure is EaCO against a baseline")


def setup_of(cfg: EacoConfig) -> Setup:
    return Setup(
        cfg.workload,
        cfg.max_jobs or None,
        cfg.noise,
        cfg.data_dir,
        dict(cfg.columns),
        cfg.profiles,
        cfg.gpu_type,
    )


def results_frame(records: Sequence[RunRecord]) -> pd.DataFrame:
    rows = [{k: v for k, v in asdict(r).items() if k not in HIDDEN} for r in records]
    df = pd.DataFrame(rows)
    return df.sort_values(["nodes", "policy", "seed"], kind="stable").reset_index(drop=True)


@EXPERIMENTS.register("eaco")
class Eaco(Experiment):
    name = "eaco"
    description = (
        "EaCO vs FIFO, FIFO_packed and Gandiva on 28 and 64 nodes of 8 V100: energy, active nodes, runtime, "
        "JCT."
    )
    config_model = EacoConfig

    def grid(self, cfg: BaseModel) -> list[Cell]:
        from .run import load_inputs

        assert isinstance(cfg, EacoConfig)
        sizes = check_nodes(cfg.nodes)
        names = check_policies(cfg.policies)
        if cfg.seeds < 1:
            raise WattschedError(f"--seeds must be at least 1, got {cfg.seeds}")
        if not 0.0 <= cfg.noise <= 1.0:
            raise WattschedError(f"--noise must be in [0, 1], got {cfg.noise}")
        setup = setup_of(cfg)
        inputs = load_inputs(setup.config(names[0], sizes[0], FIRST_SEED))  # fail early on missing data
        for n in sizes:  # the policies of one cluster size and seed are compared: one job model
            require_one_job_model({p: setup.config(p, n, FIRST_SEED) for p in names}, f"eaco on {n} nodes")
        require_times(inputs, cfg.workload)
        tasks = [(p, n, s) for n in sizes for s in range(FIRST_SEED, FIRST_SEED + cfg.seeds) for p in names]
        tasks.sort(key=lambda t: (t[0] not in ("gandiva", "eaco"), -t[1]))  # slowest first keeps workers busy
        # `variant` names the run's row of POLICIES (its policy label too): the label of a records row is its keys.
        return [Cell({"nodes": n, "variant": p, "seed": s}, setup.config(p, n, s)) for p, n, s in tasks]

    def window_group(self, keys: dict[str, Any]) -> Hashable:
        return keys["nodes"], keys["seed"]

    def run_cell(self, cell: Cell) -> Outcome:
        from .compare import reconstruction_bases

        assert cell.config is not None
        k = cell.keys
        r = run_record(cell.config, k["variant"], k["nodes"], k["seed"])
        metrics = {
            "jobs_completed": float(r.jobs_completed), "energy_kwh": r.energy_kwh, "own_window_kwh": float("nan"),
            "jct_mean_s": r.avg_jct_s, "queue_delay_mean_s": r.avg_queue_s, "makespan_s": r.makespan_s,
            "gpu_allocation": r.gpu_allocation, "restarts": float(r.restarts),
        }  # fmt: skip
        # At the precision records.csv keeps (the summary's tables and the headline read these).
        extra = {
            "avg_active_nodes": _g6(r.avg_active_nodes), "avg_runtime_s": _g6(r.avg_runtime_s),
            "colocations": r.colocations, "decolocations": r.decolocations,
        }  # fmt: skip
        return Outcome(metrics, r.policy, reconstruction_bases(POLICIES[r.policy]), extra, r.window_input, r)

    def charge(self, cells: Sequence[Cell], outcomes: Sequence[Outcome]) -> str:
        """The common window of each cluster size and seed, charged on the run records themselves (results.csv
        is written from them); no cost or carbon: the experiment has no region."""
        line = self.charge_records(cells, [o.raw for o in outcomes], "cluster size and seed")
        for o in outcomes:
            assert o.metrics is not None
            o.metrics.update(energy_kwh=o.raw.energy_kwh, own_window_kwh=o.raw.own_window_kwh)
        return line

    def tables(
        self, cfg: BaseModel, cells: Sequence[Cell], outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        write_results(out, results_frame([o.raw for o in outcomes]))
        return [out / "results.csv"]

    def headline(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[str]:
        from .eaco_tables import headline_lines

        return headline_lines(records)

    def sections(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[Section]:
        from .eaco_tables import summary_sections

        assert isinstance(cfg, EacoConfig)
        return summary_sections(cfg, records, [o.raw for o in outcomes])

    def plots(
        self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from .eaco_tables import write_plots

        return write_plots(out, records, [o.raw for o in outcomes])
