"""The `hkbu-dvfs` experiment: the HKBU-DVFS list scheduler over the paper's task-set sweep, and on a DL trace.

Task sets: for each task model (the fitted 2070S and 1080Ti models and the upstream simulator's own synthetic
draws, workloads/hkbu_tasks.py), each task-set utilisation U (0.2 to 1.6) and seed, one task set is drawn and
scheduled by every combination of the paper (offline: edf+spt, edf+bf, edf+wf, lpt+ff; online: edf+spt, edf+bin),
each with DVFS on and off and DRS on and off (policies/hkbu_dvfs.py, docs/hkbu.md). Each schedule is one cell
(its task set drawn again from its seed, the same set for every combination). The DVFS saving of a combination is
measured against the same combination at default clocks on the same task set.

DL trace (``--trace``, default: the first 5,000 Philly jobs, deadlines at submit + 3 × duration): the same rules run
on DL training jobs in the simulator (``--allocation hkbu-dvfs`` against ``hkbu-dvfs-default-clocks``, DRS by the
idle-timeout power manager) on each GPU type whose power-limit response was measured (Zeus: P100, V100, A40,
RTX6000), one simulation cell each; the two variants on one GPU type under one power manager are charged over
their common window.

Outputs in DIR: ``records.csv`` (the shared run records: one per schedule, keyed by model, mode, utilisation, seed,
algorithm, dvfs, drs, and one per trace run, keyed by gpu, power_manager, variant; NaN where a key does not apply),
``results.csv`` (one row per schedule), ``savings.csv`` (DVFS on vs off per model, mode, U, algorithm and DRS, means
over seeds), ``trace.csv`` (one row per trace run, when the trace part ran), ``summary.json``, ``summary.md``
(measured savings beside the published ones), ``config.yaml`` and the plots ``energy_vs_u.png``,
``savings_vs_u.png`` and ``nodes_vs_u.png``. The tables, the summary's sections and the plots are in
``hkbu_dvfs_tables.py``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ..core.errors import WattschedError
from ..policies.hkbu_dvfs import OFFLINE_ALGORITHMS, ONLINE_ALGORITHMS, ListConfig, list_schedule
from ..workloads.catalog import missing_data
from ..workloads.hkbu_tasks import TASK_MODELS, UTILISATIONS, synthetic_task_set
from .config import SimulationConfig, same_setting
from .parallel import FIRST_SEED
from .protocol import EXPERIMENTS, Cell, Experiment, Outcome, Section

LABEL = "HKBU-DVFS"
DEFAULT_GPUS = 512  # upstream simulates 2,048 GPUs; --gpus 2048 reproduces that scale
MODES = ("offline", "online")
ALGORITHMS = {"offline": OFFLINE_ALGORITHMS, "online": ONLINE_ALGORITHMS}
DRS_IDLE_TICKS = {"offline": 5, "online": 2}  # the simulator's default and its online experiments' threshold
# Published savings (docs/seed-systems.md §4.1): TPDS 2022 on its synthetic sets; Tang et al., e-Energy'19, the
# optimal core clock against the default on three GPUs for DNN training.
TPDS_SAVING_PCT = (33.0, 35.0)
EENERGY_TRAINING_SAVING_PCT = (8.7, 23.1)

TRACE_GPUS = (
    "P100",
    "V100",
    "A40",
    "RTX6000",
)  # the GPU types with a measured power-limit response (docs/dvfs.md)
TRACE_POLICIES = {"dvfs": "hkbu-dvfs", "default": "hkbu-dvfs-default-clocks"}
# always-on: deadlines depend on the scheduler alone (the target's "equal deadline satisfaction"); idle-timeout: DRS,
# where 300-s boots make a few short jobs late either way, differently in each run
TRACE_POWER_MANAGERS = ("always-on", "idle-timeout")
DEFAULT_TRACE_JOBS = 5000
DEFAULT_DEADLINE_SLACK = 3.0

# The keys of a record: a schedule's, then a trace run's (each cell has them all, NaN where one does not apply).
SET_KEYS = ("model", "mode", "utilisation", "seed", "algorithm", "dvfs", "drs")
TRACE_KEYS = ("gpu", "power_manager", "variant")
# The metrics of a record (compare's names; NaN where a kind of run has none) and the experiment's own columns.
RECORD_METRICS = ("jobs_completed", "energy_kwh", "own_window_kwh", "energy_gpu_active_kwh", "cost_usd", "co2_kg",
                  "jct_mean_s", "makespan_s", "deadline_misses")  # fmt: skip
RECORD_EXTRA = ("tasks", "run_j", "deadline_met_fraction", "nodes_switched_on", "mean_chosen_speed")


class HkbuDvfsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[str] = Field(
        default_factory=lambda: list(TASK_MODELS),
        description="comma-separated task models: 2070S, 1080Ti, tpds-synthetic",
    )
    modes: list[str] = Field(
        default_factory=lambda: list(MODES), description="comma-separated: offline, online"
    )
    utilisations: list[float] = Field(
        default_factory=lambda: list(UTILISATIONS),
        description="comma-separated task-set utilisations U (tasks per GPU)",
    )
    seeds: int = Field(3, description="task sets per point, seeds 42, 43, ...")
    gpus: int = Field(DEFAULT_GPUS, description="cluster GPUs: a set has U x GPUs tasks (upstream: 2048)")
    gpus_per_node: int = Field(16, description="GPUs per node (the paper: 16)")
    theta: float = Field(
        0.0, description="t_theta = max(theta x t_hat, t_min); 1 never theta-adjusts (upstream scripts)"
    )
    trace: str = Field(
        "philly", description="DL trace for the simulator part ('none' to skip): hkbu-dvfs vs default clocks"
    )
    trace_cluster: str = Field("philly", description="cluster of the trace part (rewritten to each GPU type)")
    trace_jobs: int = Field(DEFAULT_TRACE_JOBS, ge=0, description="first N jobs of the trace (0: all)")
    trace_gpus: list[str] = Field(
        default_factory=lambda: list(TRACE_GPUS), description="comma-separated GPU types for the trace part"
    )
    deadline_slack: float = Field(
        DEFAULT_DEADLINE_SLACK, description="trace deadlines at submit + slack x duration (reconstructed)"
    )
    columns: dict[str, str] = same_setting("columns")
    data_dir: str | None = same_setting("data_dir")


@dataclass(frozen=True)
class TraceSetup:
    """The DL-trace part: one simulation per GPU type, variant (DVFS or default clocks) and power manager."""

    workload: str = "philly"
    cluster: str = "philly"
    max_jobs: int | None = DEFAULT_TRACE_JOBS
    deadline_slack: float = DEFAULT_DEADLINE_SLACK
    data_dir: str | None = None
    columns: dict[str, str] = field(default_factory=dict)  # of a generic job CSV workload

    def config(self, gpu: str, variant: str, power_manager: str) -> SimulationConfig:
        return SimulationConfig(
            workload=self.workload,
            columns=self.columns,
            cluster=self.cluster,
            gpu_type=gpu,
            allocation=TRACE_POLICIES[variant],
            deadline_slack=self.deadline_slack,
            max_jobs=self.max_jobs,
            data_dir=self.data_dir,
            power_manager=power_manager,
            seed=FIRST_SEED,
        )

    @classmethod
    def of(cls, cfg: HkbuDvfsConfig) -> TraceSetup | None:
        """The trace part as the config asks for it; None for ``--trace none``."""
        if cfg.trace == "none":
            return None
        return cls(cfg.trace, cfg.trace_cluster, cfg.trace_jobs or None, cfg.deadline_slack, cfg.data_dir,
                   dict(cfg.columns))  # fmt: skip


@dataclass(frozen=True)
class Setup:
    """What every schedule of a task set shares (picklable)."""

    gpus: int
    gpus_per_node: int
    theta: float


def trace_skipped(cfg: HkbuDvfsConfig) -> str | None:
    """Why the trace part does not run (not asked for, or its data are not here), or None when it runs."""
    trace = TraceSetup.of(cfg)
    return "not requested (--trace none)" if trace is None else missing_data(trace.workload, trace.data_dir)


def schedule(
    setup: Setup, model: str, mode: str, utilisation: float, seed: int, algorithm: str, dvfs: bool, drs: bool
) -> dict[str, Any]:
    """One combination on one drawn task set (drawn from its seed: the same set for every combination)."""
    tasks = synthetic_task_set(utilisation, model, gpus=setup.gpus, online=mode == "online", seed=seed)
    order, rule = algorithm.split("+")
    cfg = ListConfig(
        order=order,
        gpu_rule=rule,
        dvfs=dvfs,
        drs=drs,
        drs_idle_ticks=DRS_IDLE_TICKS[mode],
        gpus_per_node=setup.gpus_per_node,
        theta=setup.theta,
    )
    r = list_schedule(tasks, cfg)
    return {
        "model": model,
        "mode": mode,
        "utilisation": utilisation,
        "seed": seed,
        "algorithm": algorithm,
        "dvfs": dvfs,
        "drs": drs,
        "tasks": len(tasks),
        "run_j": r.run_j,
        "idle_j": r.idle_j,
        "turn_on_j": r.turn_on_energy_j,
        "total_j": r.energy_j,
        "deadline_met_fraction": r.deadline_met_fraction,
        "nodes_switched_on": r.nodes,
        "turn_ons": r.turn_ons,
        "makespan_ticks": r.makespan_s,
    }


def trace_run(config: SimulationConfig, gpu: str, variant: str, power_manager: str) -> tuple[dict, dict]:
    """One trace simulation: its row of trace.csv (own-window energy until charged) and its run summary."""
    from .run import run_simulation

    try:
        result = run_simulation(config)
    except WattschedError as exc:  # name the run; a plain message pickles across processes
        raise WattschedError(
            f"trace run {TRACE_POLICIES[variant]} on {gpu} ({power_manager}): {exc}"
        ) from None
    s = result.summary
    params = s["policies"]["allocation"]["parameters"]
    row = {
        "gpu": gpu,
        "power_manager": power_manager,
        "variant": variant,
        "policy": TRACE_POLICIES[variant],
        "jobs": s["jobs_submitted"],
        "jobs_completed": s["jobs_completed"],
        "training_energy_kwh": s["energy_by_component_kwh"]["gpu_active"],
        "total_energy_kwh": s["energy_kwh"],
        "deadline_jobs": s.get("deadline_jobs", 0),
        "deadline_misses": s.get("deadline_misses", 0),
        "jct_mean_s": s["jct_s"]["mean"],
        "makespan_s": s["makespan_s"],
        "mean_chosen_speed": params["mean_chosen_speed"],
    }
    return row, s


def check_choices(values: Sequence[str], known: Sequence[str], what: str) -> list[str]:
    for v in values:
        if v not in known:
            raise WattschedError(f"unknown {what} '{v}'; choose from {', '.join(known)}")
    if not values:
        raise WattschedError(f"no {what} given")
    return list(dict.fromkeys(values))


def _record(metrics: dict[str, float], extra: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """Every record with the same metric and own columns, in one order (NaN where a kind of run has none)."""
    return (
        {k: float(metrics.get(k, math.nan)) for k in RECORD_METRICS},
        {k: extra.get(k, math.nan) for k in RECORD_EXTRA},
    )


@EXPERIMENTS.register("hkbu-dvfs")
class HkbuDvfs(Experiment):
    name = "hkbu-dvfs"
    description = (
        "HKBU-DVFS list scheduling (TPDS'22): energy vs U per combination, DVFS and DRS on/off, deadline "
        "satisfaction; and the same rules on a DL trace in the simulator against default clocks."
    )
    config_model = HkbuDvfsConfig

    def grid(self, cfg: BaseModel) -> list[Cell]:
        """Every schedule (model x mode x U x seed x combination), then the trace runs (GPU x variant x power
        manager) when the trace part runs; checked first, with the hand-written command's messages."""
        from .jobmodel import require_one_job_model

        assert isinstance(cfg, HkbuDvfsConfig)
        models = check_choices(cfg.models, TASK_MODELS, "task model")
        modes = check_choices(cfg.modes, MODES, "mode")
        if cfg.seeds < 1:
            raise WattschedError(f"--seeds must be at least 1, got {cfg.seeds}")
        if not cfg.utilisations or any(not u > 0 for u in cfg.utilisations):
            raise WattschedError(f"every utilisation U must be positive, got {list(cfg.utilisations)}")
        if not 0 <= cfg.theta <= 1:
            raise WattschedError(f"--theta must lie in [0, 1], got {cfg.theta}")
        if cfg.gpus_per_node < 1 or cfg.gpus < 1:
            raise WattschedError("--gpus and --gpus-per-node must be at least 1")
        setup = Setup(cfg.gpus, cfg.gpus_per_node, cfg.theta)
        no_trace = dict.fromkeys(TRACE_KEYS, math.nan)
        cells = []
        for model, mode, u, k in itertools.product(models, modes, cfg.utilisations, range(cfg.seeds)):
            for algorithm, dvfs, drs in itertools.product(ALGORITHMS[mode], (True, False), (True, False)):
                task = (setup, model, mode, float(u), FIRST_SEED + k, algorithm, dvfs, drs)
                cells.append(Cell({**dict(zip(SET_KEYS, task[1:], strict=True)), **no_trace}, task=task))
        trace = TraceSetup.of(cfg)
        if trace is None or trace_skipped(cfg) is not None:
            return cells
        if not cfg.trace_gpus:
            raise WattschedError("--trace-gpus: no GPU type given (--trace none skips the trace part)")
        no_set = dict.fromkeys(SET_KEYS, math.nan)
        # the variants and power managers on one GPU type are compared: one job model
        for gpu in cfg.trace_gpus:
            require_one_job_model(
                {
                    f"{v} {pm}": trace.config(gpu, v, pm)
                    for v in TRACE_POLICIES
                    for pm in TRACE_POWER_MANAGERS
                },
                f"hkbu-dvfs trace on {gpu}",
            )
        for gpu, variant, pm in itertools.product(cfg.trace_gpus, TRACE_POLICIES, TRACE_POWER_MANAGERS):
            keys = {**no_set, "gpu": gpu, "power_manager": pm, "variant": variant}
            cells.append(Cell(keys, trace.config(gpu, variant, pm), task=(gpu, variant, pm)))
        return cells

    def window_group(self, keys: dict[str, Any]) -> Any:
        return keys["gpu"], keys["power_manager"]  # DVFS against default clocks on one GPU type and manager

    def run_cell(self, cell: Cell) -> Outcome:
        # the marks compare gave this experiment's runs before the protocol
        from .compare import reconstruction_bases
        from .window import finite, window_input

        if cell.config is None:
            row = schedule(*cell.task)
            policy = " ".join([row["algorithm"], *(k for k in ("dvfs", "drs") if row[k])])
            misses = round(row["tasks"] * (1.0 - row["deadline_met_fraction"]))
            # run_j to 0.1 J: the summary's runs table shows own columns as they are
            own = {**row, "run_j": round(row["run_j"], 1)}
            metrics, extra = _record({"energy_kwh": row["total_j"] / 3.6e6, "deadline_misses": misses}, own)
            return Outcome(metrics, policy, [], extra, raw=row)
        gpu, variant, pm = cell.task
        row, s = trace_run(cell.config, gpu, variant, pm)
        metrics, extra = _record(
            {
                "jobs_completed": row["jobs_completed"], "energy_kwh": row["total_energy_kwh"],
                "energy_gpu_active_kwh": row["training_energy_kwh"], "cost_usd": finite(s.get("cost_usd")),
                "co2_kg": finite(s.get("co2_kg")), "jct_mean_s": row["jct_mean_s"],
                "makespan_s": row["makespan_s"], "deadline_misses": row["deadline_misses"],
            },
            row,
        )  # fmt: skip
        bases = reconstruction_bases({"allocation": row["policy"], "power_manager": pm})
        return Outcome(metrics, row["policy"], bases, extra, window_input(s), raw=row)

    def tables(
        self, cfg: BaseModel, cells: Sequence[Cell], outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from .hkbu_dvfs_tables import built, write_tables

        assert isinstance(cfg, HkbuDvfsConfig)
        return write_tables(built(cfg, outcomes), out)

    def headline(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[str]:
        from .hkbu_dvfs_tables import headline_lines

        assert isinstance(cfg, HkbuDvfsConfig)
        return headline_lines(cfg, records)

    def sections(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[Section]:
        from .hkbu_dvfs_tables import built, summary_sections

        assert isinstance(cfg, HkbuDvfsConfig)
        return summary_sections(built(cfg, outcomes))

    def plots(
        self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from .hkbu_dvfs_tables import built, write_plots

        assert isinstance(cfg, HkbuDvfsConfig)
        b = built(cfg, outcomes)
        return write_plots(out, b.results, b.savings)
