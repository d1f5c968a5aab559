"""`wattsched experiment fgd-pwr`: the FGD (ATC'23) and PWR (CCGrid'25) packing experiments on the Alibaba traces.

Runs every policy x seed (seeds 42, 43, ...) in packing mode (docs/fgd-pwr.md §5), one cell each. After every pod
an observer records arrived and allocated GPU milli, the cluster fragmentation against the trace's typical pods
(§2) and the cluster power under the PWR binary model (§7.1). Each run is then reduced the way the papers'
scripts do it (§6):

* FGD style: rows binned by ``round(arrived / capacity * 100)`` for 0..130, mean per bin (empty bins use the rows of
  the neighbouring bins); allocation rounded per row to 0.01 % first, as ``merge_alloc_discrete.py`` does;
* PWR style: each run interpolated linearly onto ``x = arrived / capacity`` in ``arange(0, 1.005, 0.005)``
  (first row kept for repeated x), then averaged over seeds; GRAR = mean used / mean arrived.

Outputs in DIR: ``records.csv`` (one row per run: GPU allocation and GRAR once every pod has arrived, under the
comparison's metric names), ``curves.csv`` (integer arrived %), ``grid.csv`` (the 0.005 grid), ``summary.md``
(the measured figures beside the published ones, the targets), ``config.yaml`` and PNG plots.

This module is the run and the grid; ``fgd_pwr_tables.py`` writes the tables, the summary's sections and the plots.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ..core.cluster import MILLI, ClusterSpec, ClusterState
from ..core.errors import UnknownNameError, WattschedError
from ..core.jobs import JobTable
from ..core.placement import Placement
from ..energy.binary import BinaryPowerModel
from ..engine.packing import PackingObserver, run_packing
from ..policies import PLACEMENT_POLICIES
from ..policies.fgd import FragModel, typical_pods
from .config import same_setting
from .parallel import FIRST_SEED
from .protocol import EXPERIMENTS, Cell, Experiment, Outcome, Section

DEFAULT_POLICIES = (
    "random",
    "dotprod",
    "gpu-clustering",
    "gpu-packing",
    "best-fit",
    "fgd",
    "pwr",
    "pwr_500_fgd_500",
    "pwr_200_fgd_800",
    "pwr_100_fgd_900",
    "pwr_50_fgd_950",
)
ARRIVED_PCT = np.arange(0, 131)  # FGD-style bins (% of cluster GPU capacity)
GRID = np.arange(0, 1.005, 0.005)  # PWR-style grid (fraction of capacity)
CURVE_COLUMNS = ("trace", "policy", "seed", "arrived_pct", "alloc_pct", "frag_ratio_pct", "power_w", "grar")


# -- observer -----------------------------------------------------------------------------------------------
class FragPowerObserver(PackingObserver):
    """Cluster fragmentation (against fixed typical pods) and binary-model power, updated per changed node."""

    def __init__(self, spec: ClusterSpec, frag: FragModel) -> None:
        self.frag = frag
        self.power = BinaryPowerModel(spec)
        self._frag_scaled = np.zeros(0, dtype=np.int64)
        self._node_power = np.zeros(0)
        self._frag_total = 0
        self._power_total = 0.0

    def columns(self) -> tuple[str, ...]:
        return ("frag_milli", "idle_milli", "power_w")

    def on_start(self, state: ClusterState, jobs: JobTable) -> None:
        f = self.frag
        self._frag_scaled = f.frag_scaled(state.gpu_left, state.cpu_left, f.node_model).astype(np.int64)
        self._node_power = self.power.state_node_power(state).astype(np.float64)
        self._frag_total = int(self._frag_scaled.sum())
        self._power_total = float(self._node_power.sum())

    def native_packing_plan(self) -> dict[str, Any] | None:
        """The compiled packing loop computes these columns itself from this state (engine/native_packing.py)."""
        if type(self) is not FragPowerObserver:
            return None
        return {
            "frag": self.frag,
            "power": self.power,
            "frag_scaled": self._frag_scaled,
            "node_power": self._node_power,
            "frag_total": self._frag_total,
            "power_total": self._power_total,
        }

    def after_pod(self, state: ClusterState, pod: int, placement: Placement | None) -> tuple[float, ...]:
        if placement is not None:
            nodes = np.array(sorted({alloc[0] for alloc in placement}), dtype=np.int64)
            f = self.frag
            new_f = f.frag_scaled(state.gpu_left[nodes], state.cpu_left[nodes], f.node_model[nodes])
            new_p = self.power.node_power(state.cpu_left[nodes], state.free_gpus[nodes], nodes)
            self._frag_total += int(new_f.sum() - self._frag_scaled[nodes].sum())
            self._power_total += float(new_p.sum() - self._node_power[nodes].sum())
            self._frag_scaled[nodes] = new_f
            self._node_power[nodes] = new_p
        idle = state.spec.total_gpus * MILLI - state.allocated_milli
        return (self._frag_total / max(self.frag.scale, 1), float(idle), self._power_total)


# -- one run ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GridInputs:
    """The trace and cluster a grid runs on (picklable; sent once to each worker)."""

    label: str
    jobs: JobTable
    cluster: ClusterSpec


@dataclass
class RunCurves:
    policy: str
    seed: int
    wall_s: float
    pods: int
    placed: int
    curve: dict[str, np.ndarray]  # FGD-style bins over ARRIVED_PCT
    grid: dict[str, np.ndarray]  # PWR-style values over GRID


def _bin_mean(bins: np.ndarray, values: np.ndarray, nbins: int) -> np.ndarray:
    """Mean of `values` per bin 0..nbins-1; an empty bin takes the rows of bins k-1..k+1 (NaN if none)."""
    ok = (bins >= 0) & (bins < nbins) & ~np.isnan(values)
    b = bins[ok]
    v = values[ok]
    cnt = np.bincount(b, minlength=nbins)[:nbins].astype(np.float64)
    tot = np.bincount(b, weights=v, minlength=nbins)[:nbins]
    # Neighbour sums (bin k itself is empty when the fallback applies, so k-1..k+1 = k-1 and k+1).
    pad_c = np.pad(cnt, 1)
    pad_t = np.pad(tot, 1)
    n_cnt = pad_c[:-2] + pad_c[1:-1] + pad_c[2:]
    n_tot = pad_t[:-2] + pad_t[1:-1] + pad_t[2:]
    # Rows just above the last bin (e.g. arrived 131 %) also count as neighbours of bin 130.
    over = values[(bins == nbins) & ~np.isnan(values)]
    n_cnt[-1] += over.size
    n_tot[-1] += over.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.where(n_cnt > 0, n_tot / n_cnt, np.nan))


def packing_ratios(series: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per pod: fragmentation ratio in % of idle GPU milli (0 when nothing is idle) and GRAR (used / arrived
    GPU milli; NaN before anything arrived), from a packing time series (docs/fgd-pwr.md §6)."""
    arrived = series["arrived_gpu_milli"].to_numpy(np.float64)
    used = series["allocated_gpu_milli"].to_numpy(np.float64)
    frag = series["frag_milli"].to_numpy(np.float64)
    idle = series["idle_milli"].to_numpy(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(idle > 0, 100.0 * frag / idle, 0.0), np.where(arrived > 0, used / arrived, np.nan)


def reduce_series(
    series: pd.DataFrame, total_gpus: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per-pod series -> (FGD-style integer bins, PWR-style 0.005 grid)."""
    arrived = series["arrived_gpu_milli"].to_numpy(np.float64)
    used = series["allocated_gpu_milli"].to_numpy(np.float64)
    power = series["power_w"].to_numpy(np.float64)
    frag_ratio, grar = packing_ratios(series)
    cap10 = total_gpus * 10.0  # milli per 1 % of capacity
    bins = np.round(arrived / cap10).astype(np.int64)
    alloc_row = np.round(used / cap10, 2)
    n = ARRIVED_PCT.size
    curve = {
        "arrived_pct": ARRIVED_PCT.copy(),
        "alloc_pct": np.round(_bin_mean(bins, alloc_row, n), 2),
        "frag_ratio_pct": _bin_mean(bins, frag_ratio, n),
        "power_w": _bin_mean(bins, power, n),
        "grar": _bin_mean(bins, grar, n),
    }
    x = arrived / (total_gpus * MILLI)
    _, first = np.unique(x, return_index=True)  # x never decreases; keep the first row of each repeated x
    xs = x[first]
    grid = {"x": GRID.copy()}
    for name, values in (("power_w", power), ("used_milli", used), ("arrived_milli", arrived)):
        grid[name] = np.interp(GRID, xs, values[first])
    grid["frag_ratio_pct"] = np.interp(GRID, xs, frag_ratio[first])
    return curve, grid


def run_one(inputs: GridInputs, policy_name: str, seed: int, inflate: float = 1.3) -> RunCurves:
    """One packing run with the fragmentation/power observer, reduced to curves."""
    started = time.perf_counter()
    jobs, spec = inputs.jobs, inputs.cluster
    seeds = np.random.SeedSequence(seed).spawn(3)  # the same streams as `wattsched simulate --seed`
    rng_order, rng_policy = (np.random.default_rng(s) for s in seeds[:2])
    policy = PLACEMENT_POLICIES.create(policy_name)
    observer = FragPowerObserver(spec, FragModel(spec, typical_pods(jobs)))
    outcome = run_packing(
        jobs, spec, policy, rng_order, rng_policy, inflate=inflate, shuffle=True, observers=[observer]
    )
    curve, grid = reduce_series(outcome.series.frame(), spec.total_gpus)
    return RunCurves(
        policy=policy_name,
        seed=seed,
        wall_s=time.perf_counter() - started,
        pods=int(outcome.order.size),
        placed=int(outcome.placed.sum()),
        curve=curve,
        grid=grid,
    )


# -- the grid -----------------------------------------------------------------------------------------------
def trace_inputs(trace: str, data_dir: str | Path | None = None) -> GridInputs:
    """Load an Alibaba v2023 pod list (short name, e.g. ``default`` or ``gpushare40``) and its 1213-node cluster."""
    from ..workloads.catalog import ALIBABA_LISTS, load_workload
    from ..workloads.clusters import load_cluster
    from ..workloads.validate import check_against_cluster

    name = trace.removeprefix("alibaba-v2023/")
    if name not in ALIBABA_LISTS:
        raise UnknownNameError("trace", trace, ALIBABA_LISTS)
    cluster = load_cluster("alibaba-v2023", data_dir)
    loaded = load_workload(f"alibaba-v2023/{name}", data_dir)
    jobs, _, _ = check_against_cluster(loaded.jobs, cluster, False, loaded.path)
    return GridInputs(name, jobs, cluster)


def check_policies(policies: Sequence[str]) -> list[str]:
    """Validate policy names (UnknownNameError lists the valid ones); drop duplicates, keep order."""
    out: list[str] = []
    for p in policies:
        PLACEMENT_POLICIES.factory(p)
        if p not in out:
            out.append(p)
    if not out:
        raise WattschedError("--policies: no placement policy given")
    return out


def _cost_rank(policy: str) -> int:
    # Longest runs first keeps the workers busy to the end.
    return 0 if ("fgd" in policy or policy == "pwr") else 1


def final_metrics(run: RunCurves) -> dict[str, float]:
    """A run's figures under the comparison's metric names: GPU allocation (a fraction) and GRAR in the last
    arrived-% bin the run reached (130 % at the papers' 1.3x inflation), i.e. once every pod has arrived. Packing
    has no time, so no energy: ``energy_kwh`` is NaN (the column marks the shared record schema)."""
    reached = np.flatnonzero(np.isfinite(run.curve["alloc_pct"]))
    if not reached.size:
        return {"energy_kwh": math.nan, "gpu_allocation": math.nan, "grar": math.nan}
    last = int(reached[-1])
    return {
        "energy_kwh": math.nan,
        "gpu_allocation": float(run.curve["alloc_pct"][last]) / 100.0,
        "grar": float(run.curve["grar"][last]),
    }


# -- the experiment -----------------------------------------------------------------------------------------
class FgdPwrConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trace: str = Field("default", description="Alibaba v2023 pod list: default, gpushare40, multigpu20, ...")
    seeds: int = Field(10, description="runs per policy, seeds 42, 43, ...")
    policies: list[str] = Field(
        default_factory=lambda: list(DEFAULT_POLICIES),
        description="comma-separated placement policies (the 11 of the papers by default)",
    )
    inflate: float = Field(1.3, description="arrivals as a multiple of cluster GPU capacity")
    data_dir: str | None = same_setting("data_dir")


@EXPERIMENTS.register("fgd-pwr")
@dataclass(eq=False)
class FgdPwr(Experiment):
    """The packing grid. `given`: a trace and cluster to run instead of loading ``cfg.trace`` (tests, a trace of
    one's own). The trace run (`inputs`, set by :meth:`grid`) travels to each worker once, with the experiment;
    a cell carries only its policy, seed and inflation. A dataclass, so that the cell digest walks the trace's
    contents as it walks any shared setup."""

    name = "fgd-pwr"
    description = (
        "FGD (ATC'23) and PWR (CCGrid'25) packing experiments on an Alibaba GPU trace: GPU allocation, "
        "fragmentation, cluster power and GRAR per policy x seed, beside the papers' published figures."
    )
    config_model = FgdPwrConfig

    given: GridInputs | None = None
    inputs: GridInputs | None = field(default=None, init=False, repr=False)

    def grid(self, cfg: BaseModel) -> list[Cell]:
        assert isinstance(cfg, FgdPwrConfig)
        if cfg.seeds < 1:
            raise WattschedError(f"--seeds must be at least 1, got {cfg.seeds}")
        names = check_policies(cfg.policies)  # a bad name fails before any data is loaded
        inputs = self.given if self.given is not None else trace_inputs(cfg.trace, cfg.data_dir)
        self.inputs = inputs
        seeds = range(FIRST_SEED, FIRST_SEED + cfg.seeds)
        return [
            Cell({"trace": inputs.label, "placement": p, "seed": s}, task=(p, s, cfg.inflate))
            for p in names
            for s in seeds
        ]

    def start_order(self, cells: Sequence[Cell]) -> list[int]:
        return sorted(range(len(cells)), key=lambda i: _cost_rank(cells[i].task[0]))  # costliest first

    def run_cell(self, cell: Cell) -> Outcome:
        from .compare import reconstruction_bases

        assert self.inputs is not None
        policy, seed, inflate = cell.task
        run = run_one(self.inputs, policy, seed, inflate)
        return Outcome(
            final_metrics(run),
            policy,
            reconstruction_bases({"placement": policy}),
            {"pods": run.pods, "placed": run.placed},
            raw=run,
        )

    def tables(
        self, cfg: BaseModel, cells: Sequence[Cell], outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from .fgd_pwr_tables import write_tables

        assert isinstance(cfg, FgdPwrConfig) and self.inputs is not None
        return write_tables(out, self.inputs.label, ordered_runs(cfg, outcomes))

    def headline(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[str]:
        from .fgd_pwr_tables import headline

        assert isinstance(cfg, FgdPwrConfig)
        return headline(cfg, records)

    def sections(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[Section]:
        from .fgd_pwr_tables import summary_sections

        assert isinstance(cfg, FgdPwrConfig) and self.inputs is not None
        return summary_sections(cfg, self.inputs, ordered_runs(cfg, outcomes))

    def plots(
        self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from .fgd_pwr_tables import write_plots

        assert isinstance(cfg, FgdPwrConfig) and self.inputs is not None
        return write_plots(out, self.inputs.label, ordered_runs(cfg, outcomes), check_policies(cfg.policies))


def ordered_runs(cfg: FgdPwrConfig, outcomes: Sequence[Outcome]) -> list[RunCurves]:
    """The runs sorted by policy (in the order given) and seed, as every table lists them."""
    order = {p: i for i, p in enumerate(dict.fromkeys(cfg.policies))}
    return sorted((o.raw for o in outcomes), key=lambda r: (order[r.policy], r.seed))


# -- the lines of the figures ---------------------------------------------------------------------------------
_STYLES = {  # (colour, line style, width): baselines thin solid, FGD black, PWR red, combinations dashed
    "random": ("tab:blue", "-", 1.1),
    "dotprod": ("tab:orange", "-", 1.1),
    "gpu-clustering": ("tab:green", "-", 1.1),
    "gpu-packing": ("tab:olive", "-", 1.1),
    "best-fit": ("tab:purple", "-", 1.1),
    "fgd": ("black", "-", 2.0),
    "pwr": ("tab:red", "-", 1.8),
    "pwr_500_fgd_500": ("tab:pink", "--", 1.5),
    "pwr_300_fgd_700": ("gold", "--", 1.5),
    "pwr_200_fgd_800": ("tab:brown", "--", 1.5),
    "pwr_100_fgd_900": ("tab:cyan", "--", 1.5),
    "pwr_50_fgd_950": ("tab:gray", "--", 1.5),
    "pwr_25_fgd_975": ("navy", "--", 1.5),
}


def line_style(policy: str, spare) -> dict[str, Any]:
    """The line of a placement policy in the FGD/PWR figures (the report draws the same curves)."""
    color, ls, lw = _STYLES.get(policy, (next(spare), ":", 1.3))
    return {"color": color, "ls": ls, "lw": lw}
