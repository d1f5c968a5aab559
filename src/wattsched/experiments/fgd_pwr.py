"""`wattsched experiment fgd-pwr`: the FGD (ATC'23) and PWR (CCGrid'25) packing experiments on the Alibaba traces.

Runs every policy x seed (seeds 42, 43, ...) in packing mode (docs/fgd-pwr.md §5) in a process pool. After every pod an
observer records arrived and allocated GPU milli, the cluster fragmentation against the trace's typical pods
(§2) and the cluster power under the PWR binary model (§7.1). Each run is then reduced the way the papers'
scripts do it (§6):

* FGD style: rows binned by ``round(arrived / capacity * 100)`` for 0..130, mean per bin (empty bins use the rows of
  the neighbouring bins); allocation rounded per row to 0.01 % first, as ``merge_alloc_discrete.py`` does;
* PWR style: each run interpolated linearly onto ``x = arrived / capacity`` in ``arange(0, 1.005, 0.005)``
  (first row kept for repeated x), then averaged over seeds; GRAR = mean used / mean arrived.

Outputs in DIR: ``curves.csv`` (integer arrived %), ``grid.csv`` (the 0.005 grid), ``summary.md`` and PNG plots.

Still one file (~780 lines): the packing experiment (grid, curves, tables, summary, plots) as it was written
before the experiment protocol (``experiments/protocol.py``), onto which it is still to move.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.atomic import write_text, write_with
from ..core.cluster import MILLI, ClusterSpec, ClusterState
from ..core.errors import UnknownNameError, WattschedError
from ..core.jobs import JobTable
from ..core.placement import Placement
from ..energy.binary import BinaryPowerModel
from ..engine.packing import PackingObserver, run_packing
from ..policies import PLACEMENT_POLICIES
from ..policies.fgd import FragModel, typical_pods
from .grid import plots_if_available
from .parallel import FIRST_SEED, Execution, GridRun, ProgressFn, grid_done, run_tasks

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
SAVINGS_BAND = (0.15, 0.80)  # x range over which power savings are averaged
CURVE_COLUMNS = ("trace", "policy", "seed", "arrived_pct", "alloc_pct", "frag_ratio_pct", "power_w", "grar")

# Published figures, default trace only (docs/fgd-pwr.md §8).
PUBLISHED_ALLOC = {  # FGD repo expected_results/analysis_allo_discrete.csv: % at 100 / 130 % arrived
    "random": (86.30, 87.47),
    "dotprod": (90.62, 90.85),
    "gpu-clustering": (91.65, 91.88),
    "gpu-packing": (91.78, 92.00),
    "best-fit": (92.86, 93.08),
    "fgd": (95.23, 95.39),
}
PUBLISHED_FRAG = {  # analysis_frag_ratio_discrete.csv: % at 50 / 80 / 90 % arrived
    "fgd": (17.9, 29.9, 50.0),
    "best-fit": (21.6, 41.5, 74.1),
    "random": (30.2, 74.6, 96.7),
}
PUBLISHED_GRAR = {  # PWR paper plots, read off by eye, at x = 1.0
    "fgd": "0.952",
    "pwr": "0.904",
    "pwr_200_fgd_800": "0.927-0.928",
    "pwr_100_fgd_900": "0.927-0.928",
    "pwr_50_fgd_950": "0.927-0.928",
    "best-fit": "~0.927",
    "dotprod": "~0.906",
    "gpu-clustering": "~0.917",
    "gpu-packing": "~0.917",
}
PUBLISHED_SAVINGS = {  # PWR paper plots: savings vs FGD over x ~ 0.15-0.8 (Random is not plotted there)
    "pwr": "similar to the combinations",
    "pwr_500_fgd_500": "13-16",
    "pwr_300_fgd_700": "13-16",
    "pwr_200_fgd_800": "13-16",
    "pwr_100_fgd_900": "13-16",
    "pwr_50_fgd_950": "13-16",
    "pwr_25_fgd_975": "13-16",
    "dotprod": "0-5",
    "gpu-clustering": "0-5",
    "gpu-packing": "0-5",
    "best-fit": "0-5",
}
ALLOC_TOLERANCE_PP = 1.0
SAVINGS_TARGET = (13.0, 16.0)
GRAR_TARGET = ("pwr_200_fgd_800", 0.927, 0.01)


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
        raise WattschedError("no policies given")
    return out


def _cost_rank(policy: str) -> int:
    # Longest runs first keeps both workers busy to the end.
    return 0 if ("fgd" in policy or policy == "pwr") else 1


def run_grid(
    inputs: GridInputs,
    policies: Sequence[str],
    seeds: Sequence[int],
    workers: int | None = None,
    inflate: float = 1.3,
    progress: ProgressFn | None = None,
    out: str | Path | None = None,
    execution: Execution | None = None,
) -> GridRun:
    """Every policy x seed, longest first; runs sorted by policy (in the order given) and seed."""
    tasks = sorted(((p, s, inflate) for p in policies for s in seeds), key=lambda t: _cost_rank(t[0]))
    runs, width = run_tasks(run_one, inputs, tasks, workers, progress, out, execution)
    order = {p: i for i, p in enumerate(policies)}
    runs.sort(key=lambda r: (order[r.policy], r.seed))
    return GridRun(runs, width)


@dataclass
class ExperimentResult:
    out: Path
    curves: pd.DataFrame
    grid: pd.DataFrame
    summary: dict[str, Any]
    runs: list[RunCurves] = field(repr=False, default_factory=list)


def run_experiment(
    trace: str = "default",
    seeds: int = 10,
    out: str | Path = "runs/fgd-pwr",
    policies: Sequence[str] | None = None,
    workers: int | None = None,
    data_dir: str | Path | None = None,
    inflate: float = 1.3,
    progress: ProgressFn | None = None,
    inputs: GridInputs | None = None,
    plots: bool = True,
    execution: Execution | None = None,
) -> ExperimentResult:
    """Run the grid and write curves.csv, grid.csv, summary.md and the plots into `out`."""
    if seeds < 1:
        raise WattschedError(f"--seeds must be at least 1, got {seeds}")
    names = check_policies(list(policies) if policies else list(DEFAULT_POLICIES))
    if inputs is None:
        inputs = trace_inputs(trace, data_dir)
    seed_list = list(range(FIRST_SEED, FIRST_SEED + seeds))
    execution = execution or Execution()
    started = time.perf_counter()
    runs, workers = run_grid(inputs, names, seed_list, workers, inflate, progress, out, execution)
    wall = time.perf_counter() - started
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    curves = curves_frame(inputs.label, runs)
    grid = grid_frame(inputs.label, runs)
    write_with(out / "curves.csv", lambda p: curves.to_csv(p, index=False, float_format="%.6g"))
    write_with(out / "grid.csv", lambda p: grid.to_csv(p, index=False, float_format="%.8g"))
    summary = summarise(inputs, runs, names, seed_list, inflate, workers, wall)
    summary["backend"] = execution.backend
    if plots:
        summary["plots"] = plots_if_available(write_plots, out, inputs.label, curves, grid, names)
    write_text(out / "summary.md", render_summary(summary))
    grid_done(out)
    return ExperimentResult(out, curves, grid, summary, runs)


# -- aggregation --------------------------------------------------------------------------------------------
def _runs_frame(label: str, runs: list[RunCurves], field: str) -> pd.DataFrame:
    """One table of a per-run field (`curve` or `grid`), prefixed with trace, policy and seed."""
    parts = []
    for r in runs:
        df = pd.DataFrame(getattr(r, field))
        df.insert(0, "seed", r.seed)
        df.insert(0, "policy", r.policy)
        df.insert(0, "trace", label)
        parts.append(df)
    return pd.concat(parts, ignore_index=True)


def curves_frame(label: str, runs: list[RunCurves]) -> pd.DataFrame:
    return _runs_frame(label, runs, "curve")[list(CURVE_COLUMNS)]


def grid_frame(label: str, runs: list[RunCurves]) -> pd.DataFrame:
    return _runs_frame(label, runs, "grid")


def _mean_grid(runs: list[RunCurves], policy: str) -> dict[str, np.ndarray] | None:
    mine = [r.grid for r in runs if r.policy == policy]
    if not mine:
        return None
    return {k: np.mean([g[k] for g in mine], axis=0) for k in mine[0]}


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)]


def _curve_at(runs: list[RunCurves], policy: str, column: str, pct: int) -> np.ndarray:
    return np.array([r.curve[column][pct] for r in runs if r.policy == policy], dtype=np.float64)


def summarise(
    inputs: GridInputs,
    runs: list[RunCurves],
    policies: list[str],
    seeds: list[int],
    inflate: float,
    workers: int,
    wall_s: float,
) -> dict[str, Any]:
    published = inputs.label == "default"
    rows: dict[str, dict[str, Any]] = {}
    fgd_grid = _mean_grid(runs, "fgd")
    lo, hi = SAVINGS_BAND
    band = (np.round(GRID, 3) >= lo) & (np.round(GRID, 3) <= hi)  # grid points 0.150 ... 0.800
    at1 = int(np.argmin(np.abs(GRID - 1.0)))
    at09 = int(np.argmin(np.abs(GRID - 0.9)))
    at005 = int(np.argmin(np.abs(GRID - 0.05)))
    for p in policies:
        row: dict[str, Any] = {}
        for pct in (100, 130):
            vals = _finite(_curve_at(runs, p, "alloc_pct", pct))
            row[f"alloc_{pct}"] = float(vals.mean()) if vals.size else float("nan")
            row[f"alloc_{pct}_std"] = float(vals.std()) if vals.size else float("nan")
        for pct in (50, 80, 90):
            vals = _finite(_curve_at(runs, p, "frag_ratio_pct", pct))
            row[f"frag_{pct}"] = float(vals.mean()) if vals.size else float("nan")
        g = _mean_grid(runs, p)
        assert g is not None
        row["grar_1"] = float(g["used_milli"][at1] / g["arrived_milli"][at1])
        row["power_1_w"] = float(g["power_w"][at1])
        grar_runs = [r.grid["used_milli"][at1] / r.grid["arrived_milli"][at1] for r in runs if r.policy == p]
        row["grar_1_std"] = float(np.std(grar_runs))
        with np.errstate(invalid="ignore", divide="ignore"):
            grar = g["used_milli"] / g["arrived_milli"]
        failing = np.flatnonzero((GRID > 0) & (grar < 0.999))
        row["grar_drop_x"] = float(GRID[failing[0]]) if failing.size else float("nan")
        if fgd_grid is not None:
            sav = (fgd_grid["power_w"] - g["power_w"]) / fgd_grid["power_w"] * 100.0
            row["savings_band"] = float(sav[band].mean())
            row["savings_peak"] = float(sav.max())
            row["savings_peak_x"] = float(GRID[int(np.argmax(sav))])
            row["savings_005"] = float(sav[at005])
            row["savings_09"] = float(sav[at09])
            row["savings_1"] = float(sav[at1])
        row["wall_s_mean"] = float(np.mean([r.wall_s for r in runs if r.policy == p]))
        rows[p] = row
    typical = typical_pods(inputs.jobs)
    return {
        "trace": inputs.label,
        "published_available": published,
        "policies": policies,
        "seeds": seeds,
        "inflate": inflate,
        "workers": workers,
        "wall_s": wall_s,
        "runs": len(runs),
        "cpu_s": float(sum(r.wall_s for r in runs)),
        "machine": f"{platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} logical CPUs, Python {platform.python_version()}",
        "load": " / ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a",
        "cluster": f"{inputs.cluster.num_nodes} nodes, {inputs.cluster.total_gpus} GPUs",
        "pods": len(inputs.jobs),
        "typical": f"{len(typical)} of {typical.total_classes} classes, covering {typical.coverage:.1%} of pods",
        "rows": rows,
        "has_fgd": fgd_grid is not None,
    }


# -- report -------------------------------------------------------------------------------------------------
def _f(v: float, nd: int = 2) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.{nd}f}"


def render_summary(s: dict[str, Any]) -> str:
    rows = s["rows"]
    pub = s["published_available"]
    lines = [
        f"# FGD / PWR packing experiment: trace `{s['trace']}`",
        "",
        f"- Policies: {', '.join(s['policies'])}",
        f"- Seeds: {s['seeds'][0]}..{s['seeds'][-1]} ({len(s['seeds'])} per policy), inflation {s['inflate']}x "
        f"of cluster GPU capacity, shuffled arrivals, no departures (docs/fgd-pwr.md §5)",
        f"- Cluster: {s['cluster']}; workload: {s['pods']} pods; typical pods: {s['typical']}",
        f"- Run time: **{s['wall_s']:.1f} s wall** for {s['runs']} runs on {s['workers']} worker(s) of the "
        f"{s.get('backend', 'process')} backend "
        f"({s['cpu_s']:.1f} s summed over runs); machine: {s['machine']}; load average at the end "
        f"{s['load']} (other processes on the machine slow the runs down)",
        "- **Published** = numbers from the FGD repository's expected results or read off the PWR paper's plots "
        "(docs/fgd-pwr.md §8); **measured** = this run. Measured values are means over seeds (± one standard "
        "deviation across seeds).",
        "",
        "## GPU allocation ratio at 100 % and 130 % arrived (FGD paper Fig. 9a)",
        "",
    ]
    if pub:
        lines += [
            "| policy | measured @100 % | published @100 % | diff (pp) | within 1.0 pp | measured @130 % "
            "| published @130 % | diff (pp) |",
            "|---|---|---|---|---|---|---|---|",
        ]
    else:
        lines += [
            "No published figures for this trace (docs/fgd-pwr.md §8 lists the default trace only).",
            "",
            "| policy | measured @100 % | measured @130 % |",
            "|---|---|---|",
        ]
    for p in s["policies"]:
        r = rows[p]
        m100 = f"{_f(r['alloc_100'])} ± {_f(r['alloc_100_std'])}"
        m130 = f"{_f(r['alloc_130'])} ± {_f(r['alloc_130_std'])}"
        if pub and p in PUBLISHED_ALLOC:
            p100, p130 = PUBLISHED_ALLOC[p]
            d100, d130 = r["alloc_100"] - p100, r["alloc_130"] - p130
            ok = "yes" if abs(d100) <= ALLOC_TOLERANCE_PP else "**no**"
            lines.append(
                f"| {p} | {m100} | {p100:.2f} | {d100:+.2f} | {ok} | {m130} | {p130:.2f} | {d130:+.2f} |"
            )
        elif pub:
            lines.append(f"| {p} | {m100} | – | – | – | {m130} | – | – |")
        else:
            lines.append(f"| {p} | {m100} | {m130} |")
    lines += ["", "## Fragmentation ratio F(M) / idle GPU milli at 50 / 80 / 90 % arrived", ""]
    lines += ["| policy | measured 50 / 80 / 90 % | published 50 / 80 / 90 % |", "|---|---|---|"]
    for p in s["policies"]:
        r = rows[p]
        meas = " / ".join(_f(r[f"frag_{k}"], 1) for k in (50, 80, 90))
        ref = " / ".join(f"{v:.1f}" for v in PUBLISHED_FRAG[p]) if pub and p in PUBLISHED_FRAG else "–"
        lines.append(f"| {p} | {meas} | {ref} |")
    lines += ["", "## Power savings vs FGD (PWR paper; binary power model, docs/fgd-pwr.md §7.1)", ""]
    if s["has_fgd"]:
        lo, hi = SAVINGS_BAND
        lines += [
            f"Savings = (P_FGD − P_policy) / P_FGD on seed-averaged power, x = arrived / capacity on the 0.005 "
            f"grid; 'band' = mean over x = {lo:.2f}–{hi:.2f}; 'peak' over the whole grid.",
            "",
            "| policy | measured band mean (%) | published band (%) | peak (%) at x | at x = 0.05 (%) "
            "| at x = 0.9 (%) | at x = 1.0 (%) | cluster power at x = 1.0 (kW) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for p in s["policies"]:
            r = rows[p]
            ref = PUBLISHED_SAVINGS.get(p, "–") if pub else "–"
            lines.append(
                f"| {p} | {_f(r['savings_band'])} | {ref} | {_f(r['savings_peak'])} at {r['savings_peak_x']:.3f} "
                f"| {_f(r['savings_005'])} | {_f(r['savings_09'])} | {_f(r['savings_1'])} "
                f"| {r['power_1_w'] / 1000:.1f} |"
            )
        if pub:
            lines += [
                "",
                "Published shape (read off the PWR paper's plots, docs/fgd-pwr.md §8): the PWR+FGD combinations peak "
                "at ≈16 % near x ≈ 0.13–0.2, hold 13–16 % over x ≈ 0.15–0.8, fall to ≈3–5 % near x ≈ 0.9 and end at "
                "≈5–7.5 % at x = 1.0; PWR alone is similar; other baselines save ≈0–5 %, with DotProduct and "
                "BestFit at −11 to −13 % around x ≈ 0.05. Random is not plotted in the paper.",
            ]
    else:
        lines.append("FGD is not among the policies, so savings vs FGD are not computed.")
    lines += [
        "",
        "## GRAR (used / arrived GPU milli) at x = 1.0",
        "",
        "| policy | measured | published | GRAR first below 0.999 at x |",
        "|---|---|---|---|",
    ]
    for p in s["policies"]:
        r = rows[p]
        ref = PUBLISHED_GRAR.get(p, "–") if pub else "–"
        drop = _f(r["grar_drop_x"], 3)
        lines.append(f"| {p} | {r['grar_1']:.4f} ± {r['grar_1_std']:.4f} | {ref} | {drop} |")
    if pub:
        lines += [
            "",
            "Published (read off plots): FGD stays at 1.0 until x ≈ 0.95; PWR alone starts failing at x ≈ 0.90.",
        ]
    lines += ["", "## Targets", ""]
    lines += _target_lines(s)
    lines += ["", "## Explanations for figures off target", ""]
    lines += _explanations(s)
    lines += [
        "",
        "## Mean wall time per run (s, measured inside its worker process; one core per worker)",
        "",
        "| policy | s |",
        "|---|---|",
    ]
    for p in s["policies"]:
        lines.append(f"| {p} | {rows[p]['wall_s_mean']:.2f} |")
    if s.get("plots"):
        lines += ["", "## Plots", ""] + [f"- `{name}`" for name in s["plots"]]
    return "\n".join(lines) + "\n"


def _off_targets(s: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(kind, policy, text) for each figure outside its acceptance band."""
    if not s["published_available"]:
        return []
    rows = s["rows"]
    out = []
    for p, (p100, _) in PUBLISHED_ALLOC.items():
        if p in rows and abs(rows[p]["alloc_100"] - p100) > ALLOC_TOLERANCE_PP:
            out.append(("alloc", p, f"{p}: allocation at 100 % is {rows[p]['alloc_100']:.2f} vs {p100:.2f}"))
    if s["has_fgd"]:
        for p in rows:
            if p.startswith("pwr_"):
                v = rows[p]["savings_band"]
                if not SAVINGS_TARGET[0] <= v <= SAVINGS_TARGET[1]:
                    out.append(("savings", p, f"{p}: band power savings {v:.2f} % outside 13–16 %"))
    gp, gv, gtol = GRAR_TARGET
    if gp in rows and abs(rows[gp]["grar_1"] - gv) > gtol:
        out.append(("grar", gp, f"{gp}: GRAR at x = 1.0 is {rows[gp]['grar_1']:.4f} vs {gv}"))
    return out


def _target_lines(s: dict[str, Any]) -> list[str]:
    if not s["published_available"]:
        return ["The acceptance targets refer to the default trace only."]
    rows = s["rows"]
    lines = []
    for p, (p100, _) in PUBLISHED_ALLOC.items():
        if p in rows:
            d = rows[p]["alloc_100"] - p100
            ok = "met" if abs(d) <= ALLOC_TOLERANCE_PP else "**missed**"
            lines.append(
                f"- {p}: allocation at 100 % within {ALLOC_TOLERANCE_PP} pp of {p100:.2f}: {ok} ({d:+.2f})"
            )
    if s["has_fgd"]:
        for p in rows:
            if p.startswith("pwr_"):
                v = rows[p]["savings_band"]
                ok = "met" if SAVINGS_TARGET[0] <= v <= SAVINGS_TARGET[1] else "**missed**"
                lines.append(f"- {p}: power savings vs FGD over x = 0.15–0.80 in 13–16 %: {ok} ({v:.2f} %)")
    gp, gv, gtol = GRAR_TARGET
    if gp in rows:
        v = rows[gp]["grar_1"]
        ok = "met" if abs(v - gv) <= gtol else "**missed**"
        lines.append(f"- {gp}: GRAR at x = 1.0 within {gtol} of {gv}: {ok} ({v:.4f})")
    return lines


def _explanations(s: dict[str, Any]) -> list[str]:
    off = _off_targets(s)
    lines = []
    if not off:
        lines.append("Every measured figure with an acceptance target is on target.")
    else:
        lines.append("Off target: " + "; ".join(t for _, _, t in off) + ".")
        lines.append("")
        for kind in dict.fromkeys(k for k, _, _ in off):
            lines.append(EXPLANATIONS[kind])
            lines.append("")
    lines += ["", "General differences from the published runs (docs/fgd-pwr.md §9, §10):", ""]
    lines += [f"- {t}" for t in GENERAL_NOTES]
    return lines


EXPLANATIONS = {
    "alloc": (
        "**Allocation.** The arrival order comes from numpy's generator, not Go's `math/rand`, so individual runs "
        "differ from the published ones and only the seed means are comparable; the seed-to-seed standard "
        "deviation is listed next to each mean. Scores, filters, tie-breaks (seeded node order) and the "
        "inflation rule follow the code as described in docs/fgd-pwr.md §3–§5."
    ),
    "savings": (
        "**Power savings.** The published band (13–16 %) is read off the PWR paper's plots, and its runs may have "
        "differed from the committed scripts (docs/fgd-pwr.md §9 items 1 and 6). Our savings are computed with the "
        "binary power model exactly as the PWR code does (fallback CPU for every node), against our own FGD runs."
    ),
    "grar": (
        "**GRAR.** The published value is read off a plot (±0.002 at best). GRAR at x = 1.0 is the ratio of "
        "seed-averaged used and arrived milli-GPU after linear interpolation onto the 0.005 grid."
    ),
}

GENERAL_NOTES = (
    "Random streams: Go's `math/rand` cannot be reproduced; agreement is statistical (10 seeds), not bit-exact.",
    "Ties: node scores tie often (FGD's integer sigmoid score); ties go to the smallest rank of a seeded random "
    "node permutation, as the patched kube-scheduler does with permuted node names.",
    "Inflation: the stopping check adds the per-GPU milli, not count × milli (code behaviour, §9 item 4).",
    "Power model: CPU power follows the code (2 vCPU per core, 16 cores per socket, 15/120 W for every node), "
    "which differs from the paper's formula on 104-vCPU T4 nodes (§9 item 3).",
    "The slides mention 1.2× inflation; the scripts use 1.3× (used here); PWR plots stop at x = 1.0.",
    "PWR figures (power savings, GRAR) are read off the paper's plots, so they carry a reading error of roughly "
    "±0.5 percentage points and ±0.003; only the FGD allocation and frag-ratio tables are exact published numbers.",
    "The PWR paper's figures include weight pairs (300/700, 25/975) that its committed run script lacks "
    "(§9 item 6); any pair runs here by name (`pwr_<W1>_fgd_<W2>`).",
)


# -- plots --------------------------------------------------------------------------------------------------
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


def write_plots(
    out: Path, label: str, curves: pd.DataFrame, grid: pd.DataFrame, policies: list[str]
) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    mean_curve = curves.groupby(["policy", "arrived_pct"], sort=False).mean(numeric_only=True).reset_index()
    mean_grid = grid.groupby(["policy", "x"], sort=False).mean(numeric_only=True).reset_index()
    # tab10 is a ListedColormap, whose colors are a tuple; the stubs know only Colormap (no .colors).
    spare = iter(plt.get_cmap("tab10").colors * 4)  # type: ignore[attr-defined]
    style = {p: line_style(p, spare) for p in policies}

    def save(fig, name: str) -> None:
        fig.tight_layout()
        write_with(out / name, lambda p: fig.savefig(p, format="png", dpi=130))
        plt.close(fig)
        written.append(name)

    # 1. allocation vs arrived, full range and zoom (FGD Fig. 9a style)
    fig, (ax, zoom) = plt.subplots(1, 2, figsize=(12, 4.6))
    for p in policies:
        d = mean_curve[mean_curve.policy == p]
        ax.plot(d.arrived_pct, d.alloc_pct, label=p, **style[p])
        zoom.plot(d.arrived_pct, d.alloc_pct, label=p, **style[p])
    ax.plot([0, 100], [0, 100], ls=":", c="grey", lw=0.8)
    ax.set(xlabel="arrived workload (% of cluster GPU capacity)", ylabel="GPU allocation ratio (%)",
           title=f"GPU allocation, trace {label}", xlim=(0, 130), ylim=(0, 100))  # fmt: skip
    zoom.set(xlabel="arrived workload (%)", ylabel="GPU allocation ratio (%)", title="zoom", xlim=(80, 130))
    lo = np.nanmin(mean_curve[mean_curve.arrived_pct >= 80].alloc_pct)
    zoom.set_ylim(max(lo - 1, 0), 100)
    zoom.legend(fontsize=7, loc="lower right", ncol=2)
    for a in (ax, zoom):
        a.grid(alpha=0.3)
    save(fig, "allocation.png")

    # 2. frag ratio vs arrived
    fig, ax = plt.subplots(figsize=(7, 4.6))
    for p in policies:
        d = mean_curve[mean_curve.policy == p]
        ax.plot(d.arrived_pct, d.frag_ratio_pct, label=p, **style[p])
    ax.set(xlabel="arrived workload (% of cluster GPU capacity)", ylabel="fragmentation ratio (%)",
           title=f"Fragmentation ratio F(M)/idle, trace {label}", xlim=(0, 130), ylim=(0, 100))  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    save(fig, "frag_ratio.png")

    # 3. power savings vs FGD and absolute power (PWR paper style, x up to 1.0)
    if "fgd" in policies:
        ref = mean_grid[mean_grid.policy == "fgd"].set_index("x").power_w
        fig, ax = plt.subplots(figsize=(7, 4.6))
        for p in policies:
            if p == "fgd":
                continue
            d = mean_grid[mean_grid.policy == p].set_index("x").power_w
            ax.plot(d.index, (ref - d) / ref * 100.0, label=p, **style[p])
        ax.axhline(0, c="k", lw=0.8)
        ax.axvspan(*SAVINGS_BAND, color="grey", alpha=0.08)
        ax.set(xlabel="arrived GPU requests / cluster GPU capacity", ylabel="power savings vs FGD (%)",
               title=f"Power savings vs FGD, trace {label}", xlim=(0, 1))  # fmt: skip
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        save(fig, "power_savings.png")
    fig, ax = plt.subplots(figsize=(7, 4.6))
    for p in policies:
        d = mean_grid[mean_grid.policy == p]
        ax.plot(d.x, d.power_w / 1e6, label=p, **style[p])
    ax.set(xlabel="arrived GPU requests / cluster GPU capacity", ylabel="cluster power (MW)",
           title=f"Estimated cluster power (binary model), trace {label}", xlim=(0, 1))  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    save(fig, "power.png")

    # 4. GRAR
    fig, (ax, zoom) = plt.subplots(1, 2, figsize=(12, 4.6))
    for p in policies:
        d = mean_grid[mean_grid.policy == p]
        grar = d.used_milli / d.arrived_milli.where(d.arrived_milli > 0)
        ax.plot(d.x, grar, label=p, **style[p])
        zoom.plot(d.x, grar, label=p, **style[p])
    ax.set(xlabel="arrived GPU requests / cluster GPU capacity", ylabel="GRAR (used / arrived)",
           title=f"GPU resource allocation ratio, trace {label}", xlim=(0, 1))  # fmt: skip
    zoom.set(
        xlabel="arrived GPU requests / cluster GPU capacity", ylabel="GRAR", title="zoom", xlim=(0.8, 1.0)
    )
    zoom.legend(fontsize=7, loc="lower left", ncol=2)
    for a in (ax, zoom):
        a.grid(alpha=0.3)
    save(fig, "grar.png")
    return written
