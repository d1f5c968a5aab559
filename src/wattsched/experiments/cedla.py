"""`wattsched experiment cedla`: CE-DLA-reconstructed against price-unaware and DRS-less baselines, per region
(docs/cedla.md §6).

Five configurations of the same engine, on the Philly training trace plus the built-in inference services, with
deadlines at submit + slack x duration:

* ``price-unaware-always-on``: strict FIFO, best-fit, every node on;
* ``price-unaware-drs``: the same FIFO with idle-timeout dynamic right-sizing (no headroom);
* ``price-unaware-drs-forecast``: the same FIFO with the ``forecast`` power manager, the strongest DRS the project
  has (a buffer of nodes sized from recent and day-ago demand), as the price-unaware DRS baseline;
* ``price-aware-no-drs``: the ``cedla`` planner with every node on;
* ``cedla``: the planner with idle-timeout right-sizing (its deferrals and headroom drive the power manager).

Each runs per region on that region's day-ahead prices and carbon intensity of one year. The saving is split into
the part that comes from shifting work to cheaper hours and the part from switched-off nodes.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.atomic import write_text
from ..core.errors import UnknownNameError, WattschedError
from ..core.states import STATUS_DONE, STATUS_NAMES
from .config import SimulationConfig
from .grid import (
    ExperimentResult,
    check_policy_names,
    plots_if_available,
    require_times,
    save_figure,
    thinned,
    write_results,
)
from .jobmodel import require_one_job_model
from .parallel import Execution, ProgressFn, grid_done, run_tasks
from .window import rebase, window_input

REGIONS = ("US-CAL-CISO", "US-NY-NYIS", "US-MIDA-PJM", "DE-LU")
BASELINE = "price-unaware-always-on"
POLICIES: dict[str, dict[str, Any]] = {
    BASELINE: {"queue": "fifo", "placement": "best-fit", "power_manager": "always-on"},
    "price-unaware-drs": {"queue": "fifo", "placement": "best-fit", "power_manager": "idle-timeout"},
    # The strongest DRS the project has: the forecast buffer, with the run's forecast settings (the same fields,
    # at their defaults, that every run of the grid gets), beside the plain idle timeout above.
    "price-unaware-drs-forecast": {"queue": "fifo", "placement": "best-fit", "power_manager": "forecast"},
    "price-aware-no-drs": {"allocation": "cedla", "power_manager": "always-on"},
    "cedla": {"allocation": "cedla", "power_manager": "idle-timeout"},
}
DEFAULT_SLACK = 3.0  # deadline = submit + 3 x duration (reconstructed; ElasticFlow-style, docs/cedla.md §1.3)
WEEK_S = 7 * 86400.0
SERIES_POINTS = 4000


@dataclass(frozen=True)
class Signals:
    """Where prices and carbon come from: the region's series, or a user's own market (hourly CSVs), and the gap
    rules (docs/signals.md)."""

    price_csv: str | None = None
    carbon_csv: str | None = None
    signal_tz: str = "UTC"
    signal_fill: str | None = None
    signal_max_gap_hours: int = 6

    def own_market(self) -> str | None:
        """The region label of a user's own market, None for the built-in regions."""
        return None if self.price_csv is None else f"own:{Path(self.price_csv).name}"


@dataclass(frozen=True)
class Setup:
    workload: str
    cluster: str
    year: int
    deadline_slack: float
    services: str
    max_jobs: int | None
    data_dir: str | None
    signals: Signals = field(default_factory=Signals)
    columns: dict[str, str] = field(default_factory=dict)  # of a generic job CSV workload
    profiles: str | None = None  # measured profiles (docs/perf.md §9), the same for every run

    def config(self, policy: str, region: str) -> SimulationConfig:
        return SimulationConfig(
            workload=self.workload,
            columns=self.columns,
            cluster=self.cluster,
            region=None if self.signals.own_market() else region,
            year=self.year,
            **asdict(self.signals),
            deadline_slack=self.deadline_slack,
            services=self.services,
            max_jobs=self.max_jobs,
            data_dir=self.data_dir,
            performance="tables",  # one job model for queue + placement and allocation policies alike
            profiles=self.profiles,
            **POLICIES[policy],
        )


@dataclass
class RunRecord:
    policy: str
    region: str
    cost_usd: float
    energy_kwh: float
    co2_kg: float
    deadline_misses: int
    slo_violation_hours: int
    slo_violation_requests: float
    mean_jct_s: float
    usd_per_kwh: float
    gpu_allocation: float
    node_hours_off: float
    node_boots: int
    wall_s: float
    week_t: list[float] = field(default_factory=list, repr=False)
    week_power_kw: list[float] = field(default_factory=list, repr=False)
    week_price: list[float] = field(default_factory=list, repr=False)
    series_t: list[float] = field(default_factory=list, repr=False)
    series_nodes_on: list[float] = field(default_factory=list, repr=False)
    own_window_kwh: float = float("nan")  # up to the run's own last completion; energy_kwh: the common window
    window_input: dict = field(default_factory=dict, repr=False)


def run_task(setup: Setup, policy: str, region: str) -> RunRecord:
    from .run import run_simulation

    started = time.perf_counter()
    try:
        result = run_simulation(setup.config(policy, region))
    except WattschedError as exc:  # name the run; a plain message pickles across processes
        raise WattschedError(f"{policy} in {region}: {exc}") from None
    s, jobs, series = result.summary, result.jobs, result.series
    training = (jobs["status"] == STATUS_NAMES[STATUS_DONE]) & (jobs["job_class"] == "training")
    t = series["time_s"].to_numpy(dtype=float)
    power = series["power_w"].to_numpy(dtype=float) / 1000.0
    price = series["price_usd_per_mwh"].to_numpy(dtype=float)
    on = series["nodes_on"].to_numpy(dtype=float) if "nodes_on" in series else np.full(t.size, np.nan)
    week = (t >= t[0]) & (t <= t[0] + WEEK_S) if t.size else np.zeros(0, dtype=bool)
    wk = np.flatnonzero(week)
    wk = wk[thinned(wk.size, SERIES_POINTS)]
    keep = thinned(t.size, SERIES_POINTS)
    energy = float(s["energy_kwh"])
    return RunRecord(
        policy=policy,
        region=region,
        cost_usd=float(s["cost_usd"]),
        energy_kwh=energy,
        co2_kg=float("nan") if s.get("co2_kg") is None else float(s["co2_kg"]),  # NaN: no carbon series
        deadline_misses=int(s.get("deadline_misses", 0)),
        slo_violation_hours=int(s.get("slo_violation_hours", 0)),
        slo_violation_requests=float(s.get("slo_violation_requests", 0.0)),
        mean_jct_s=float(jobs.loc[training, "jct_s"].mean()),
        usd_per_kwh=float(s["cost_usd"]) / energy if energy else float("nan"),
        gpu_allocation=float(s["gpu_allocation_mean"]),
        node_hours_off=float(s.get("node_hours_off", 0.0)),
        node_boots=int(s.get("node_boots", 0)),
        wall_s=time.perf_counter() - started,
        week_t=t[wk].tolist(),
        week_power_kw=power[wk].tolist(),
        window_input=window_input(s),
        week_price=price[wk].tolist(),
        series_t=t[keep].tolist(),
        series_nodes_on=on[keep].tolist(),
    )


def check_regions(regions: Sequence[str], year: int) -> list[str]:
    """Every region must be one of the experiment's and have prices and carbon for `year` (errors list them)."""
    from ..energy.signals.catalog import carbon_catalog, check_region_year, price_catalog

    for r in regions:
        if r not in REGIONS:
            raise UnknownNameError("CE-DLA experiment region", r, list(REGIONS))
        check_region_year("price", price_catalog(), r, year)
        check_region_year("carbon", carbon_catalog(), r, year)
    return list(dict.fromkeys(regions))


def check_policies(names: Sequence[str]) -> list[str]:
    return check_policy_names(names, list(POLICIES), BASELINE, "every saving is measured against it")


def run_experiment(
    regions: Sequence[str] = REGIONS,
    year: int = 2023,
    policies: Sequence[str] | None = None,
    workload: str = "philly",
    cluster: str = "philly",
    deadline_slack: float = DEFAULT_SLACK,
    services: str = "default",
    max_jobs: int | None = None,
    out: str | Path = "runs/cedla",
    workers: int | None = None,
    data_dir: str | Path | None = None,
    progress: ProgressFn | None = None,
    plots: bool = True,
    signals: Signals | None = None,
    columns: Mapping[str, str] | None = None,
    execution: Execution | None = None,
    profiles: str | None = None,
) -> ExperimentResult:
    """Every policy x region (or the user's own market of `signals.price_csv`); write results.csv, summary.md and
    the plots into `out`."""
    from .run import load_inputs

    started = time.perf_counter()
    signals = signals or Signals()
    names = check_policies(list(policies) if policies is not None else list(POLICIES))
    own = signals.own_market()
    regs = [own] if own else check_regions(regions, year)
    if deadline_slack < 1:
        raise WattschedError(f"--deadline-slack must be at least 1, got {deadline_slack}")
    setup = Setup(
        workload,
        cluster,
        year,
        deadline_slack,
        services,
        max_jobs,
        None if data_dir is None else str(data_dir),
        signals,
        dict(columns or {}),
        profiles,
    )
    inputs = load_inputs(setup.config(names[0], regs[0]))  # fail early on missing data
    for r in regs:  # the policies of one region are compared: one job model
        require_one_job_model({p: setup.config(p, r) for p in names}, f"cedla in {r}")
    require_times(inputs, workload)
    tasks = [(p, r) for r in regs for p in names]
    tasks.sort(key=lambda t: t[0] not in ("cedla", "price-aware-no-drs"))  # slowest first keeps workers busy
    execution = execution or Execution()
    records, workers = run_tasks(run_task, setup, tasks, workers, progress, out, execution)
    order = {p: i for i, p in enumerate(POLICIES)}
    records.sort(key=lambda r: (regs.index(r.region), order[r.policy]))
    window = rebase(records, lambda r: r.region, lambda r: setup.config(r.policy, r.region), "region")
    for r in records:
        r.usd_per_kwh = r.cost_usd / r.energy_kwh if r.energy_kwh else float("nan")
    hidden = ("week_", "series_", "window_input")
    results = pd.DataFrame(
        [{k: v for k, v in asdict(r).items() if not k.startswith(hidden)} for r in records]
    )
    out = write_results(out, results)
    summary = summarise(setup, inputs, results, workers)
    summary["window"] = window
    summary["backend"] = execution.backend
    if plots:
        summary["plots"] = plots_if_available(write_plots, out, records)
    summary["wall_s"] = time.perf_counter() - started
    write_text(out / "summary.md", render_summary(summary))
    grid_done(out)
    return ExperimentResult(out, results, summary, records)


def _pct_below(value: float, base: float) -> float:
    return 100.0 * (base - value) / base if base else float("nan")


def summarise(setup: Setup, inputs, results: pd.DataFrame, workers: int) -> dict[str, Any]:
    """Per region: each policy's figures, its saving against FIFO always-on, and where the saving comes from."""
    per: dict[str, Any] = {}
    for region, rows in results.groupby("region", sort=False):
        by = {r.policy: r._asdict() for r in rows.itertuples(index=False)}
        base = by[BASELINE]
        entry: dict[str, Any] = {"policies": by, "load": base["gpu_allocation"]}
        for r in by.values():
            r["cost_saving_pct"] = _pct_below(r["cost_usd"], base["cost_usd"])
        if "price-unaware-drs" in by and "price-aware-no-drs" in by:
            entry["from_switched_off_nodes_usd"] = base["cost_usd"] - by["price-unaware-drs"]["cost_usd"]
            entry["from_shifted_energy_usd"] = base["cost_usd"] - by["price-aware-no-drs"]["cost_usd"]
        per[str(region)] = entry
    return {
        "setup": asdict(setup),
        "jobs": len(inputs.jobs),
        "per": per,
        "workers": workers,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }


def _target_met(r: dict[str, Any]) -> bool:
    return r["cost_saving_pct"] >= 20.0 and r["deadline_misses"] == 0 and r["slo_violation_hours"] == 0


def _signal_line(setup: dict[str, Any]) -> str:
    sig = setup["signals"]
    if sig["price_csv"]:
        where = f"- Prices of your own market from `{sig['price_csv']}` ({sig['signal_tz']})" + (
            f", carbon from `{sig['carbon_csv']}`" if sig["carbon_csv"] else ", no carbon series"
        )
    else:
        where = f"- Prices and carbon of {setup['year']} per region (electricity-prices-greendcc)"
    fill = (
        f"gaps over {sig['signal_max_gap_hours']} h filled by `{sig['signal_fill']}`"
        if sig["signal_fill"]
        else f"gaps up to {sig['signal_max_gap_hours']} h interpolated, longer ones an error"
    )
    return f"{where}; {fill} (docs/signals.md)."


def render_summary(s: dict[str, Any]) -> str:
    setup = s["setup"]
    lines = [
        "# CE-DLA-reconstructed: electricity cost against price-unaware FIFO",
        "",
        "CE-DLA (Kang, Lee, Kim, Energies 15(2):474, 2022) publishes only its abstract; the formulation, the rolling "
        "greedy policy, the services and the deadlines here are **reconstructed** (docs/cedla.md).",
        "",
        "## Setup",
        "",
        f"- Workload `{setup['workload']}` on cluster `{setup['cluster']}`, plus the built-in inference services "
        f"(`{setup['services']}`): {s['jobs']} jobs in all (training jobs and service-hours).",
        f"- Training deadlines at submit + {setup['deadline_slack']:g} x duration (reconstructed slack).",
        _signal_line(setup),
        "- Policies: `price-unaware-always-on` (FIFO, best-fit, every node on), `price-unaware-drs` (FIFO with "
        "idle-timeout right-sizing, no headroom), `price-unaware-drs-forecast` (FIFO with the `forecast` power "
        "manager: the strongest DRS without price), `price-aware-no-drs` (`cedla` planner, every node on), "
        "`cedla` (planner with idle-timeout right-sizing).",
        "",
        "## Results",
        "",
        s.get("window", "Energy, cost and carbon: each run's own window."),
        "",
        "| region | policy | cost ($) | vs always-on | energy (kWh) | $/kWh | CO2 (kg) | deadline misses | "
        "late service-hours | mean JCT (h) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for region, e in s["per"].items():
        for p, r in e["policies"].items():
            lines.append(
                f"| {region} | {p} | {r['cost_usd']:,.0f} | {-r['cost_saving_pct'] + 0.0:+.1f} % | "
                f"{r['energy_kwh']:,.0f} | {r['usd_per_kwh']:.4f} | {r['co2_kg']:,.0f} | {r['deadline_misses']} | "
                f"{r['slo_violation_hours']} | {r['mean_jct_s'] / 3600:.2f} |"
            )
    lines += [
        "",
        "`late service-hours`: inference service-hours whose GPUs started after the hour began, or never, each "
        "counted once however late (summary.json `slo_violation_hours`: each such hour violates its latency SLO for "
        "part of the hour).",
    ]
    lines += ["", "## Where the saving comes from", ""]
    for region, e in s["per"].items():
        if "from_switched_off_nodes_usd" in e:
            lines.append(
                f"- {region}: switching idle nodes off alone saves ${e['from_switched_off_nodes_usd']:,.0f} "
                f"(FIFO always-on -> FIFO with DRS, the energy drops); shifting work to cheaper hours alone saves "
                f"${e['from_shifted_energy_usd']:,.0f} (FIFO always-on -> cedla always-on, the price paid per kWh "
                "drops)."
            )
    lines += ["", "## Target", ""]
    for region, e in s["per"].items():
        r = e["policies"].get("cedla")
        if r is None:
            continue
        verdict = "met" if _target_met(r) else "**not met**"
        lines.append(
            f"- {region} (load: mean GPU allocation {e['load']:.1%} under FIFO always-on): cedla costs "
            f"{r['cost_saving_pct']:.1f} % less, {r['deadline_misses']} deadline misses, "
            f"{r['slo_violation_hours']} late service-hours. Target (>= 20 %, zero misses, zero late "
            f"service-hours): {verdict}."
        )
        drs = e["policies"].get("price-unaware-drs-forecast")
        if drs is not None:
            lines.append(
                f"  - against the strongest right-sizing without price (`price-unaware-drs-forecast`, "
                f"${drs['cost_usd']:,.0f}, {drs['deadline_misses']} misses, {drs['slo_violation_hours']} late "
                f"service-hours): cedla costs {100.0 * (1.0 - r['cost_usd'] / drs['cost_usd']):.1f} % less."
            )
    if s.get("plots"):
        lines += ["", "## Plots", ""] + [f"- `{k}`: {v}" for k, v in s["plots"].items()]
    lines += [
        "",
        f"{s['workers']} worker(s) of the {s.get('backend', 'process')} backend; this machine: {s['cpus']} CPUs "
        f"({s['machine']}); wall {s.get('wall_s', 0):.0f} s.",
        "",
    ]
    return "\n".join(lines)


def write_plots(out: Path, records: list[RunRecord]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots: dict[str, str] = {}
    colour = dict(
        zip(POLICIES, ("tab:gray", "tab:blue", "tab:purple", "tab:orange", "tab:green"), strict=True)
    )
    regions = list(dict.fromkeys(r.region for r in records))
    # 1. Cost per policy and region.
    fig, ax = plt.subplots(figsize=(2.5 + 2.2 * len(regions), 4))
    shown = [p for p in POLICIES if any(r.policy == p for r in records)]
    width = 0.8 / len(shown)
    for i, p in enumerate(shown):
        vals = [
            next((r.cost_usd for r in records if r.region == g and r.policy == p), np.nan) for g in regions
        ]
        ax.bar(
            np.arange(len(regions)) + (i - (len(shown) - 1) / 2) * width,
            vals,
            width,
            color=colour[p],
            label=p,
        )
    ax.set_xticks(np.arange(len(regions)), regions)
    ax.set(ylabel="electricity cost ($)", title="cost per policy and region")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out / "cost.png")
    plots["cost.png"] = "electricity cost per policy and region"
    # 2. Price against cluster power over the first week, first region.
    first = regions[0]
    fig, ax = plt.subplots(figsize=(12, 4))
    twin = ax.twinx()
    for r in records:
        if r.region == first and r.policy in (BASELINE, "cedla") and r.week_t:
            t = np.asarray(r.week_t) / 86400
            ax.step(
                t, r.week_power_kw, where="post", color=colour[r.policy], lw=0.8, label=f"{r.policy} power"
            )
            if r.policy == "cedla":
                twin.step(t, r.week_price, where="post", color="tab:red", lw=1, alpha=0.7, label="price")
    ax.set(
        xlabel="days", ylabel="cluster power (kW)", title=f"price against cluster power, first week, {first}"
    )
    twin.set_ylabel("price ($/MWh)", color="tab:red")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out / "price_vs_power.png")
    plots["price_vs_power.png"] = (
        f"cluster power of FIFO always-on and cedla against the price, first week, {first}"
    )
    # 3. Nodes on over time, first region.
    fig, ax = plt.subplots(figsize=(12, 4))
    for r in records:
        if r.region == first and r.series_t:
            ax.step(np.asarray(r.series_t) / 86400, r.series_nodes_on, where="post", color=colour[r.policy],
                    lw=0.8, label=r.policy)  # fmt: skip
    ax.set(xlabel="days", ylabel="nodes on", title=f"nodes on over time, {first}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out / "nodes_on.png")
    plots["nodes_on.png"] = f"powered-on nodes over time per policy, {first}"
    return plots
