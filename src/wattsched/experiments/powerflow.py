"""`wattsched experiment powerflow`: PowerFlow-reconstructed against baselines at equal energy.

For every seed (42, 43, ...) and baseline the baseline runs at the maximum clock; its total energy E_b becomes the
budget of a PowerFlow run (``energy_budget_kwh = E_b``), and the two are compared on mean JCT, p95 JCT and makespan
("under the same energy consumption", docs/seed-systems.md §2). Each seed also runs

* every baseline at static SM-clock caps (``power_model: dvfs``, ``gpu_sm_clock``), so that a baseline spans several
  energy levels;
* PowerFlow at budgets from 60 % to 120 % of the seed's largest E_b, and once without a budget (its shortest-JCT
  operating point, which tells whether an under-spent budget was more than PowerFlow can use).

All runs share the performance model (throughput tables, ``performance: tables``), the model assignment
(``assign_models: always`` with the same seed), the power model (``dvfs``), the power manager and the cluster.
:func:`run_power_managers` runs the whole grid once per power manager (always-on and idle-timeout by default), so
that each budget is the energy its baseline measured under the same manager, and reports the headline per manager.
Runs go to a process pool; a PowerFlow run is submitted as soon as the baseline run that sets its budget is done.

Outputs in DIR: ``results.csv`` (one row per baseline and seed), ``sweep.csv`` (the JCT-vs-energy points),
``runs.csv`` (every run), ``summary.md`` and PNG plots.

Still one file (~1,300 lines): the whole experiment (its runs, equal-energy grid, tables, summary and plots) as it
was written before the experiment protocol (``experiments/protocol.py``); moving it onto the protocol takes the
executor, the summary renderer and the table mapping out of it, and splits what stays (grid, tables, plots).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import platform
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.atomic import write_text, write_with
from ..core.errors import UnknownNameError, WattschedError
from .config import SimulationConfig
from .grid import parse_list, plots_if_available
from .jobmodel import require_one_job_model
from .parallel import FIRST_SEED, Execution, GridRun, ProgressFn, grid_done, grid_executor
from .window import rebase, window_input

POLICY = "powerflow"
LABEL = "PowerFlow-reconstructed"
DEFAULT_BASELINES = ("fifo", "tiresias", "gandiva", "optimus-greedy")
DEFAULT_CAPS = (
    1.0,
    0.9,
    0.8,
    0.7,
    0.6,
)  # SM-clock fractions of f_max (dvfs accepts 0.5-1 on the catalog GPUs)
BUDGET_RANGE = (0.6, 1.2)  # sweep: fractions of the seed's largest baseline energy
TARGET_RATIO = 1.5  # target: PowerFlow's mean JCT at least 1.5x shorter than each baseline's at equal energy
PAPER_RATIO = (1.57, 3.39)  # arXiv 2304.06381 abstract: "1.57-3.39x at most" (docs/seed-systems.md §2)
BUDGET_TOLERANCE_PCT = 2.0
QUEUE_BASELINE = "fifo"  # queue fifo + placement first-fit at the trace GPU count

RESULT_COLUMNS = (
    "baseline",
    "seed",
    "energy_kwh_baseline",
    "energy_kwh_powerflow",
    "budget_kwh",
    "budget_error_pct",
    "budget_status",
    "mean_jct_s_baseline",
    "mean_jct_s_powerflow",
    "jct_ratio",
    "p95_jct_s_baseline",
    "p95_jct_s_powerflow",
    "p95_jct_ratio",
    "makespan_s_baseline",
    "makespan_s_powerflow",
    "makespan_ratio",
    "jobs_completed_baseline",
    "jobs_completed_powerflow",
    "energy_kwh_powerflow_no_budget",
    "mean_jct_s_powerflow_no_budget",
    "window_kwh_baseline",
    "window_kwh_powerflow",
    "window_energy_change_pct",
    "mean_jct_s_powerflow_run",
)
# Per baseline, the means over seeds of these results.csv columns (summary.json per_baseline, the headline).
PER_BASELINE_MEANS = (
    "p95_jct_ratio",
    "makespan_ratio",
    "energy_kwh_baseline",
    "energy_kwh_powerflow",
    "budget_error_pct",
    "mean_jct_s_baseline",
    "mean_jct_s_powerflow",
    "window_kwh_baseline",
    "window_kwh_powerflow",
    "window_energy_change_pct",
)
SWEEP_COLUMNS = (
    "policy",
    "kind",
    "sm_clock_cap",
    "budget_fraction",
    "budget_kwh",
    "seed",
    "energy_kwh",
    "mean_jct_s",
    "p95_jct_s",
    "makespan_s",
    "jobs_completed",
    "budget_error_pct",
    "window_kwh",
)
RUN_COLUMNS = (
    "kind",
    "policy",
    "baseline",
    "seed",
    "sm_clock_cap",
    "budget_fraction",
    "budget_kwh",
    "energy_kwh",
    "own_window_kwh",
    "energy_static_kwh",
    "mean_jct_s",
    "p95_jct_s",
    "makespan_s",
    "jobs_completed",
    "jobs_submitted",
    "queue_delay_mean_s",
    "gpu_allocation_mean",
    "restarts",
    "model_digest",
    "wall_s",
)


# -- runs ---------------------------------------------------------------------------------------------------
def policy_knobs(policy: str) -> dict[str, str]:
    """The config settings that name a run's policies: a baseline name or ``powerflow``."""
    if policy == QUEUE_BASELINE:
        return {"queue": "fifo", "placement": "first-fit"}
    return {"allocation": policy}


@dataclass(frozen=True)
class Setup:
    """What every run of the experiment shares (picklable)."""

    workload: str
    cluster: str
    gpu_type: str | None = None
    power_manager: str = "always-on"
    data_dir: str | None = None
    columns: dict[str, str] = field(default_factory=dict)  # of a generic job CSV workload
    profiles: str | None = None  # measured profiles (docs/perf.md §9), the same for every run

    def config(
        self,
        policy: str,
        seed: int,
        cap: float | None = None,
        budget_kwh: float | None = None,
        until_s: float | None = None,
    ):
        """The run's config: `policy` is a baseline name or ``powerflow``; `cap` an SM-clock fraction (1 or
        None: maximum clock); `budget_kwh` PowerFlow's energy budget (None: no budget)."""
        knobs: dict[str, Any] = {**policy_knobs(policy)}
        if budget_kwh is not None:
            knobs["energy_budget_kwh"] = budget_kwh
            if until_s is not None:
                knobs["energy_budget_until_s"] = until_s
        if cap is not None and cap < 1.0:
            knobs["gpu_sm_clock"] = cap
        return SimulationConfig(
            workload=self.workload,
            columns=self.columns,
            cluster=self.cluster,
            gpu_type=self.gpu_type,
            data_dir=self.data_dir,
            seed=seed,
            # The same job model for every run: throughput tables (a FIFO job does iterations like the others)
            # and the seeded model assignment (identical for every run of one seed).
            performance="tables",
            assign_models="always",
            power_model="dvfs",
            power_manager=self.power_manager,
            profiles=self.profiles,
            **knobs,
        )


@dataclass(frozen=True)
class Task:
    """One run. kind: ``baseline`` (a baseline at an SM-clock cap; 1.0 = max clock), ``equal`` (PowerFlow with a
    baseline's energy as budget), ``sweep`` (PowerFlow at a fraction of the seed's largest baseline energy),
    ``no-budget`` (PowerFlow without a budget)."""

    kind: str
    policy: str
    seed: int
    cap: float | None = None
    budget_kwh: float | None = None
    budget_fraction: float | None = None
    baseline: str | None = None
    until_s: float | None = (
        None  # the budget's window end: the seed's common window (baselines, no-budget run)
    )

    def describe(self) -> str:
        what = f"{self.policy} seed {self.seed}"
        if self.cap is not None and self.cap < 1.0:
            what += f" at SM clock {self.cap:g}"
        if self.budget_kwh is not None:
            what += f" with budget {self.budget_kwh:.3f} kWh"
        return what


@dataclass
class RunRecord:
    task: Task
    energy_kwh: float
    energy_static_kwh: float  # node base + CPU + idle GPU draw
    mean_jct_s: float
    p95_jct_s: float
    makespan_s: float
    jobs_completed: int
    jobs_submitted: int
    queue_delay_mean_s: float
    gpu_allocation_mean: float
    restarts: int
    budget_seen_kwh: float | None  # the budget the policy reports it ran with
    model_digest: str  # sha1 of the jobs' model names in job order
    wall_s: float
    # energy_kwh is the run's own (to its own last completion: budgets are defined on it); window_kwh the
    # common window of its seed's runs, which every comparison between runs uses (docs/energy.md)
    window_kwh: float = float("nan")
    window_input: dict = field(default_factory=dict, repr=False)
    refused: str = ""  # a sweep budget below PowerFlow's floor: the policy's message (the run did not start)


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def run_config(setup: Setup, task: Task) -> SimulationConfig:
    return setup.config(task.policy, task.seed, task.cap, task.budget_kwh, task.until_s)


def run_task(setup: Setup, task: Task) -> RunRecord:
    """One simulation, reduced to the figures the experiment reports."""
    from ..policies.allocation.powerflow import BudgetBelowFloorError
    from .run import run_simulation

    started = time.perf_counter()
    try:
        result = run_simulation(run_config(setup, task))
    except BudgetBelowFloorError as exc:
        if task.kind != "sweep":
            raise WattschedError(f"{task.describe()}: {exc}") from None
        nan = float("nan")
        return RunRecord(
            task, nan, nan, nan, nan, nan, 0, 0, nan, nan, 0, task.budget_kwh, "", 0.0, refused=str(exc)
        )
    except WattschedError as exc:  # name the run; a plain message pickles across processes
        raise WattschedError(f"{task.describe()}: {exc}") from None
    s = result.summary
    parts = s.get("energy_by_component_kwh") or {}
    static = sum(float(parts.get(k, 0.0)) for k in ("node_base", "cpu", "gpu_idle"))
    params = (s.get("policies", {}).get("allocation") or {}).get("parameters") or {}
    names = result.jobs["job_id"].astype(str) + "\x1f" + result.jobs["model_name"].astype(str)
    digest = hashlib.sha1("\x1e".join(names).encode()).hexdigest()[:16]
    return RunRecord(
        task=task,
        energy_kwh=float(s["energy_kwh"]),
        energy_static_kwh=static,
        mean_jct_s=_num(s["jct_s"].get("mean")),
        p95_jct_s=_num(s["jct_s"].get("p95")),
        makespan_s=_num(s["makespan_s"]),
        jobs_completed=int(s["jobs_completed"]),
        jobs_submitted=int(s["jobs_submitted"]),
        queue_delay_mean_s=_num(s["queue_delay_s"].get("mean")),
        gpu_allocation_mean=_num(s["gpu_allocation_mean"]),
        restarts=int(s.get("restarts", 0)),
        budget_seen_kwh=params.get("energy_budget_kwh"),
        model_digest=digest,
        wall_s=time.perf_counter() - started,
        window_input=window_input(s),
    )


# -- validation ---------------------------------------------------------------------------------------------
def baseline_names() -> list[str]:
    from ..policies.contract import ALLOCATION_POLICIES

    return [QUEUE_BASELINE] + [n for n in ALLOCATION_POLICIES.names() if n != POLICY]


def check_baselines(names: Sequence[str]) -> list[str]:
    """Validate baseline names (``fifo`` or an allocation policy other than powerflow); drop duplicates."""
    valid = baseline_names()
    out: list[str] = []
    for name in names:
        if name not in valid:
            raise UnknownNameError("baseline", name, valid)
        if name not in out:
            out.append(name)
    if not out:
        raise WattschedError("no baselines given")
    return out


def parse_caps(text: str) -> list[float]:
    caps = []
    for part in parse_list(text):
        try:
            caps.append(float(part))
        except ValueError:
            raise WattschedError(
                f"--caps: '{part}' is not a number (SM-clock fractions such as 0.8)"
            ) from None
    return caps


def budget_fractions(points: int) -> list[float]:
    if points < 1:
        raise WattschedError(f"--budget-points must be at least 1, got {points}")
    if points == 1:
        return [1.0]
    return [round(float(f), 6) for f in np.linspace(*BUDGET_RANGE, points)]


def check_caps(caps: Sequence[float], gpu_models: Sequence[str]) -> list[float]:
    """SM-clock caps, highest first, always including 1.0 (the baselines' own run); each must be a clock the dvfs
    model accepts for every GPU model of the cluster."""
    from ..energy.dvfs import sm_clock_range

    out = sorted({round(float(c), 6) for c in caps} | {1.0}, reverse=True)
    for cap in out:
        if not (0 < cap <= 1) or not math.isfinite(cap):
            raise WattschedError(
                f"--caps: SM-clock caps are fractions of the maximum clock in (0, 1], got {cap}"
            )
        for gpu in gpu_models:
            lo, hi = sm_clock_range(gpu)
            if not lo - 1e-9 <= cap <= hi + 1e-9:
                raise WattschedError(
                    f"--caps: SM clock {cap:g} is outside the range {lo:g}-{hi:g} modelled for {gpu}"
                )
    return out


@dataclass
class Prepared:
    setup: Setup
    baselines: list[str]
    seeds: list[int]
    caps: list[float]
    fractions: list[float]
    jobs: int
    cluster: dict[str, Any]
    gpu_models: list[str]


def prepare(
    workload: str,
    cluster: str,
    gpu_type: str | None = None,
    seeds: int = 3,
    baselines: Sequence[str] | None = None,
    budget_points: int = 7,
    caps: Sequence[float] | None = None,
    power_manager: str = "always-on",
    data_dir: str | Path | None = None,
    columns: Mapping[str, str] | None = None,
    profiles: str | None = None,
) -> Prepared:
    """Check every setting and load the workload and cluster once, before any run starts."""
    from ..engine.power import PowerStateConfig
    from ..policies.power import power_manager_from_config
    from .run import load_inputs

    names = check_baselines(list(baselines) if baselines is not None else list(DEFAULT_BASELINES))
    if seeds < 1:
        raise WattschedError(f"--seeds must be at least 1, got {seeds}")
    fractions = budget_fractions(budget_points)
    power_manager_from_config(power_manager, PowerStateConfig())
    data_dir = None if data_dir is None else str(data_dir)
    setup = Setup(workload, cluster, gpu_type, power_manager, data_dir, dict(columns or {}), profiles)
    inputs = load_inputs(setup.config(names[0], FIRST_SEED))
    require_one_job_model(
        {n: setup.config(n, FIRST_SEED) for n in [*names, "powerflow"]}, "the powerflow experiment"
    )
    if len(inputs.jobs) == 0:
        raise WattschedError(f"workload '{workload}' has no jobs")
    if not inputs.has_times:
        raise WattschedError(
            f"workload '{workload}' has no submission times; the experiment needs a trace in time"
        )
    models = list(inputs.cluster.gpu_models)
    return Prepared(
        setup=setup,
        baselines=names,
        seeds=list(range(FIRST_SEED, FIRST_SEED + seeds)),
        caps=check_caps(DEFAULT_CAPS if caps is None else caps, models),
        fractions=fractions,
        jobs=len(inputs.jobs),
        cluster=inputs.cluster.describe(),
        gpu_models=models,
    )


# -- the grid -----------------------------------------------------------------------------------------------
def _cost_rank(task: Task) -> tuple[int, float]:
    # Longest first keeps both workers busy to the end: Gandiva, then PowerFlow, then the rest; low clocks last.
    order = {"gandiva": 0, POLICY: 1}.get(task.policy, 2)
    return (order, -(task.cap or 1.0))


def second_phase(
    seed: int, firsts: dict[str, RunRecord], baselines: Sequence[str], fractions: Sequence[float]
) -> list[Task]:
    """The seed's equal-energy runs (each baseline's energy over the window of the seed's baselines and no-budget
    run as budget, that window's end as the budget's) and its budget sweep (fractions of the largest of them)."""
    from ..engine.tail import PowerTail

    tails = {name: PowerTail.from_summary(r.window_input) for name, r in firsts.items()}
    until = max(t.end_s for t in tails.values())
    energies = {b: tails[b].energy_kwh_to(until) for b in baselines}
    tasks = [
        Task("equal", POLICY, seed, budget_kwh=energies[b], baseline=b, until_s=until) for b in baselines
    ]
    top = max(energies.values())
    tasks += [
        Task("sweep", POLICY, seed, budget_kwh=f * top, budget_fraction=f, until_s=until) for f in fractions
    ]
    return tasks


def run_grid(
    prep: Prepared,
    workers: int | None = None,
    progress: ProgressFn | None = None,
    out: str | Path | None = None,
    execution: Execution | None = None,
) -> GridRun:
    """Every run of the experiment. A seed's equal-energy runs start when their baseline is done, its budget
    sweep when all its baselines are."""
    seeds, baselines = prep.seeds, prep.baselines
    uncapped = [Task("baseline", b, s, 1.0) for s in seeds for b in baselines]
    capped = [Task("baseline", b, s, c) for s in seeds for b in baselines for c in prep.caps if c < 1.0]
    first = sorted(uncapped, key=_cost_rank) + [Task("no-budget", POLICY, s) for s in seeds]
    first += sorted(capped, key=_cost_rank)
    total = len(first) + len(seeds) * (len(baselines) + len(prep.fractions))
    # A seed's equal-energy runs and budget sweep start once its baselines and its no-budget run are done: their
    # budgets are energies over that seed's common window, which the budgets then cover too (until_s).
    firsts: dict[int, dict[str, RunRecord]] = {s: {} for s in seeds}
    records: list[RunRecord] = []
    if progress:
        progress(0, total)
    with grid_executor(prep.setup, workers, total, out, execution) as pool:
        pending: set[Future] = set()

        def submit(task: Task) -> None:
            pending.add(pool.submit(run_task, task))

        for task in first:
            submit(task)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                rec = fut.result()
                records.append(rec)
                t = rec.task
                if (t.kind == "baseline" and t.cap == 1.0) or t.kind == "no-budget":
                    firsts[t.seed][t.policy if t.kind == "baseline" else POLICY] = rec
                    if len(firsts[t.seed]) == len(baselines) + 1:
                        for task in second_phase(t.seed, firsts[t.seed], baselines, prep.fractions):
                            submit(task)
                if progress:
                    progress(len(records), total)
    return GridRun(records, pool.workers)


# -- the experiment -----------------------------------------------------------------------------------------
@dataclass
class ExperimentResult:
    out: Path
    results: pd.DataFrame
    sweep: pd.DataFrame
    runs_frame: pd.DataFrame
    summary: dict[str, Any]
    runs: list[RunRecord] = field(repr=False, default_factory=list)


def run_experiment(
    workload: str,
    cluster: str,
    gpu_type: str | None = None,
    seeds: int = 3,
    baselines: Sequence[str] | None = None,
    budget_points: int = 7,
    caps: Sequence[float] | None = None,
    power_manager: str = "always-on",
    out: str | Path = "runs/powerflow",
    workers: int | None = None,
    data_dir: str | Path | None = None,
    progress: ProgressFn | None = None,
    prepared: Prepared | None = None,
    plots: bool = True,
    columns: Mapping[str, str] | None = None,
    execution: Execution | None = None,
    profiles: str | None = None,
) -> ExperimentResult:
    """Run the equal-energy comparison and the sweeps; write the CSVs, summary.md and the plots into `out`."""
    started = time.perf_counter()
    prep = prepared or prepare(
        workload, cluster, gpu_type, seeds, baselines, budget_points, caps, power_manager, data_dir, columns,
        profiles,
    )  # fmt: skip
    execution = execution or Execution()
    grid_started = time.perf_counter()
    records, workers = run_grid(prep, workers, progress, out, execution)
    grid_wall = time.perf_counter() - grid_started
    refused = [r for r in records if r.refused]
    records = [r for r in records if not r.refused]
    window = rebase(
        records, lambda r: r.task.seed, lambda r: run_config(prep.setup, r.task), "seed", target="window_kwh"
    )
    runs = runs_frame(records)
    results = results_frame(records, prep)
    sweep = sweep_frame(records)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_with(out / "results.csv", lambda p: results.to_csv(p, index=False, float_format="%.6g"))
    write_with(out / "sweep.csv", lambda p: sweep.to_csv(p, index=False, float_format="%.6g"))
    write_with(out / "runs.csv", lambda p: runs.to_csv(p, index=False, float_format="%.6g"))
    summary = summarise(prep, records, results, sweep, min(workers, len(records)), grid_wall)
    summary["backend"] = execution.backend
    summary["window"] = window
    summary["refused"] = [(r.task.seed, r.task.budget_kwh, r.refused) for r in refused]
    if plots:
        summary["plots"] = plots_if_available(write_plots, out, summary, results, sweep)
    summary["wall_s"] = time.perf_counter() - started  # checks, runs, tables and plots
    write_text(out / "summary.md", render_summary(summary))
    grid_done(out)
    return ExperimentResult(out, results, sweep, runs, summary, records)


# -- one grid per power manager -----------------------------------------------------------------------------
DEFAULT_POWER_MANAGERS = ("always-on", "idle-timeout")
HEADLINE_COLUMNS = ("power_manager", "baseline", "jct_ratio", "jct_ratio_std", "how", *PER_BASELINE_MEANS)


def check_power_managers(names: Sequence[str]) -> list[str]:
    """Registered power managers, each once, in the order given."""
    from ..engine.power import PowerStateConfig
    from ..policies.power import power_manager_from_config

    names = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not names:
        raise WattschedError("--power-manager needs at least one power manager")
    for name in names:
        power_manager_from_config(name, PowerStateConfig())  # unknown: UnknownNameError listing the names
    return names


@dataclass
class PowerManagerResults:
    """One complete experiment per power manager (``out/<power manager>/``) and the headline of each."""

    out: Path
    per_manager: dict[str, ExperimentResult]
    headline: pd.DataFrame
    wall_s: float


def run_power_managers(
    prepared: Prepared,
    power_managers: Sequence[str] = DEFAULT_POWER_MANAGERS,
    out: str | Path = "runs/powerflow",
    workers: int | None = None,
    progress: ProgressFn | None = None,
    plots: bool = True,
    execution: Execution | None = None,
) -> PowerManagerResults:
    """The whole experiment once per power manager, every run of a grid (baselines, their equal-energy PowerFlow
    runs, the sweeps) under that one manager, so that each budget is the energy a baseline measured under the
    same manager. Writes each grid into ``out/<power manager>/`` and the headline of every manager into
    ``out/headline.csv`` and ``out/summary.md``."""
    from dataclasses import replace

    started = time.perf_counter()
    names = check_power_managers(power_managers)
    out = Path(out)
    per: dict[str, ExperimentResult] = {}
    for k, pm in enumerate(names):
        prep = replace(prepared, setup=replace(prepared.setup, power_manager=pm))

        def step(done: int, total: int, k: int = k) -> None:
            if progress:
                progress(k * total + done, total * len(names))

        per[pm] = run_experiment(
            prep.setup.workload,
            prep.setup.cluster,
            out=out / pm,
            workers=workers,
            progress=step,
            prepared=prep,
            plots=plots,
            execution=execution,
        )
    headline = headline_frame(per)
    out.mkdir(parents=True, exist_ok=True)
    write_with(out / "headline.csv", lambda p: headline.to_csv(p, index=False, float_format="%.6g"))
    wall = time.perf_counter() - started
    write_text(out / "summary.md", render_power_managers(per, headline, wall))
    return PowerManagerResults(out, per, headline, wall)


def headline_frame(per: Mapping[str, ExperimentResult]) -> pd.DataFrame:
    rows = []
    for pm, res in per.items():
        for b in res.summary["baselines"]:
            r = res.summary["per_baseline"][b]
            rows.append(
                {
                    "power_manager": pm,
                    "baseline": b,
                    "jct_ratio": r["ratio"],
                    "jct_ratio_std": r["ratio_std"],
                    "how": " / ".join(f"{n} {k}" for k, n in sorted(Counter(r["statuses"]).items())),
                    **{c: r[c] for c in PER_BASELINE_MEANS},
                }
            )
    return pd.DataFrame(rows, columns=list(HEADLINE_COLUMNS))


def render_power_managers(per: Mapping[str, ExperimentResult], headline: pd.DataFrame, wall_s: float) -> str:
    first = next(iter(per.values())).summary
    lines = [
        f"# {LABEL} against baselines at equal energy, per power manager",
        "",
        f"Workload `{first['workload']}`, cluster `{first['cluster_name']}`, {first['jobs']} jobs, seeds "
        f"{', '.join(str(x) for x in first['seeds'])}. Every run of a grid (each baseline, PowerFlow at each "
        "baseline's energy, the sweeps) runs under the same power manager, and each PowerFlow budget is the "
        "energy its baseline measured under that manager. Full results of each grid: `<power manager>/summary.md`.",
        "",
        f"JCT ratio = baseline mean JCT / {LABEL} mean JCT at the baseline's energy (> 1: PowerFlow faster; "
        f"target {TARGET_RATIO}x, paper {PAPER_RATIO[0]}-{PAPER_RATIO[1]}x at most).",
        "",
        "E_b: the baseline's energy over the window of the seed's baselines and PowerFlow without a budget (the "
        "seed's common window; docs/energy.md, Accounting window), PowerFlow's budget over that same window; E "
        "PowerFlow: its equal-energy run over it; off by: E PowerFlow against E_b. Where that run is more than 2 % "
        "off, PowerFlow's JCT at E_b is read off its budget sweep (interpolated) or, where E_b is more than "
        "PowerFlow can use, is its JCT without a budget (unused): `how`, per seed.",
        "",
        "| power manager | baseline | JCT ratio at E_b | how | p95 ratio | makespan ratio | E_b (kWh) "
        "| E PowerFlow (kWh) | off by | target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in headline.itertuples(index=False):
        met = "met" if r.jct_ratio >= TARGET_RATIO else "**missed**"
        lines.append(
            f"| {r.power_manager} | {r.baseline} | **{r.jct_ratio:.2f}** ± {r.jct_ratio_std:.2f} | {r.how} "
            f"| {r.p95_jct_ratio:.2f} | {r.makespan_ratio:.2f} | {r.window_kwh_baseline:.3f} "
            f"| {r.window_kwh_powerflow:.3f} | {r.budget_error_pct:+.1f} % | {met} |"
        )
    walls = ", ".join(f"{pm}: {res.summary['wall_s']:.1f} s" for pm, res in per.items())
    lines += ["", f"Wall time: {wall_s:.1f} s for {len(per)} grid(s) ({walls}).", ""]
    return "\n".join(lines)


# -- tables -------------------------------------------------------------------------------------------------
def runs_frame(records: list[RunRecord]) -> pd.DataFrame:
    rows = []
    for r in records:
        t = r.task
        row = {k: v for k, v in asdict(r).items() if k not in ("task", "window_input", "window_kwh")}
        row.update(
            energy_kwh=r.window_kwh,  # the common window, as every comparison of runs
            own_window_kwh=r.energy_kwh,
            kind=t.kind,
            policy=t.policy,
            baseline=t.baseline,
            seed=t.seed,
            sm_clock_cap=t.cap,
            budget_fraction=t.budget_fraction,
            budget_kwh=r.budget_seen_kwh if r.budget_seen_kwh is not None else t.budget_kwh,
        )
        rows.append(row)
    df = pd.DataFrame(rows, columns=list(RUN_COLUMNS))
    df["_k"] = df["kind"].map({"baseline": 0, "equal": 1, "no-budget": 2, "sweep": 3})
    keys = ["_k", "policy", "baseline", "seed", "sm_clock_cap", "budget_kwh"]
    df = df.sort_values(keys, ascending=[True, True, True, True, False, True], na_position="first")
    df = df.drop(columns="_k")
    return df.reset_index(drop=True)


def _budget_error(energy: float, budget: float) -> float:
    return 100.0 * (energy - budget) / budget


# How an equal-energy row's PowerFlow JCT was obtained (results.csv `budget_status`).
STATUS_RUN = "within"  # the equal-energy run landed within ±2 % of the baseline's energy: its own JCT
STATUS_INTERPOLATED = "interpolated"  # outside ±2 %: JCT at E_b interpolated on the seed's PowerFlow runs
STATUS_UNUSED = "unused"  # E_b above every PowerFlow run's energy: PowerFlow cannot use it; its no-budget JCT
STATUS_BELOW = (
    "below range"  # E_b below every PowerFlow run's energy: its lowest-energy run's JCT (it uses more)
)


def jct_at_energy(
    points: Sequence[tuple[float, float]], energy: float, no_budget_jct: float
) -> tuple[float, str]:
    """PowerFlow's mean JCT at `energy` from its runs of one seed, (energy, mean JCT) each: linear between the
    two runs around it on the lower envelope (the shortest JCT at each energy or less); above every run, the
    no-budget JCT (PowerFlow cannot use more); below every run, the lowest-energy run's."""
    pts = sorted(points)
    envelope: list[tuple[float, float]] = []
    for e, j in pts:  # keep only runs that a larger energy improves on
        if not envelope or j < envelope[-1][1]:
            envelope.append((e, j))
    if energy >= envelope[-1][0]:
        return min(no_budget_jct, envelope[-1][1]), STATUS_UNUSED
    if energy < envelope[0][0]:
        return envelope[0][1], STATUS_BELOW
    for (e0, j0), (e1, j1) in itertools.pairwise(envelope):
        if e0 <= energy <= e1:
            return j0 + (j1 - j0) * (energy - e0) / (e1 - e0), STATUS_INTERPOLATED
    return envelope[-1][1], STATUS_INTERPOLATED


def results_frame(records: list[RunRecord], prep: Prepared) -> pd.DataFrame:
    """One row per baseline and seed: the baseline against PowerFlow at the baseline's energy, both over the
    seed's common window. The equal-energy run's own JCT where it landed within ±2 % of that energy, else the
    JCT interpolated on the seed's PowerFlow runs at it (`budget_status` says which)."""
    from ..engine.tail import PowerTail

    base = {
        (r.task.policy, r.task.seed): r for r in records if r.task.kind == "baseline" and r.task.cap == 1.0
    }
    equal = {(r.task.baseline, r.task.seed): r for r in records if r.task.kind == "equal"}
    free = {r.task.seed: r for r in records if r.task.kind == "no-budget"}
    tails = {id(r): PowerTail.from_summary(r.window_input) for r in records}

    def over(r: RunRecord, end: float) -> float:
        return tails[id(r)].energy_kwh_to(end)

    rows = []
    for b in prep.baselines:
        for s in prep.seeds:
            rb, rp, rf = base[(b, s)], equal[(b, s)], free[s]
            if rp.budget_seen_kwh is not None:
                budget = float(rp.budget_seen_kwh)
            else:
                assert rp.task.budget_kwh is not None  # an "equal" run is given its baseline's energy
                budget = float(rp.task.budget_kwh)
            # The window the budget was set on: to the latest end of the seed's baselines and no-budget run,
            # or to the PowerFlow run's own end if it ran past it.
            end = max(rp.task.until_s or 0.0, tails[id(rp)].end_s, tails[id(rb)].end_s)
            target, landed = over(rb, end), over(rp, end)
            err = _budget_error(landed, target)
            if abs(err) <= BUDGET_TOLERANCE_PCT:
                jct, status = rp.mean_jct_s, STATUS_RUN
            else:
                points = [
                    (over(r, end), r.mean_jct_s)
                    for r in records
                    if r.task.policy == POLICY and r.task.seed == s
                ]
                jct, status = jct_at_energy(points, target, rf.mean_jct_s)
            rows.append(
                {
                    "baseline": b,
                    "seed": s,
                    "energy_kwh_baseline": rb.energy_kwh,
                    "energy_kwh_powerflow": rp.energy_kwh,
                    "budget_kwh": budget,
                    "budget_error_pct": err,
                    "budget_status": status,
                    "mean_jct_s_baseline": rb.mean_jct_s,
                    "mean_jct_s_powerflow": jct,
                    "jct_ratio": rb.mean_jct_s / jct,
                    "p95_jct_s_baseline": rb.p95_jct_s,
                    "p95_jct_s_powerflow": rp.p95_jct_s,
                    "p95_jct_ratio": rb.p95_jct_s / rp.p95_jct_s,
                    "makespan_s_baseline": rb.makespan_s,
                    "makespan_s_powerflow": rp.makespan_s,
                    "makespan_ratio": rb.makespan_s / rp.makespan_s,
                    "jobs_completed_baseline": rb.jobs_completed,
                    "jobs_completed_powerflow": rp.jobs_completed,
                    "energy_kwh_powerflow_no_budget": rf.energy_kwh,
                    "mean_jct_s_powerflow_no_budget": rf.mean_jct_s,
                    "window_kwh_baseline": target,
                    "window_kwh_powerflow": landed,
                    "window_energy_change_pct": err,
                    "mean_jct_s_powerflow_run": rp.mean_jct_s,
                }
            )
    return pd.DataFrame(rows, columns=list(RESULT_COLUMNS))


def sweep_frame(records: list[RunRecord]) -> pd.DataFrame:
    rows = []
    for r in records:
        t = r.task
        if t.kind == "equal":
            continue
        budget = r.budget_seen_kwh if r.budget_seen_kwh is not None else t.budget_kwh
        rows.append(
            {
                "policy": t.policy,
                "kind": {"baseline": "clock-cap", "sweep": "budget", "no-budget": "no-budget"}[t.kind],
                "sm_clock_cap": t.cap,
                "budget_fraction": t.budget_fraction,
                "budget_kwh": budget,
                "seed": t.seed,
                "energy_kwh": r.energy_kwh,
                "mean_jct_s": r.mean_jct_s,
                "p95_jct_s": r.p95_jct_s,
                "makespan_s": r.makespan_s,
                "jobs_completed": r.jobs_completed,
                "budget_error_pct": _budget_error(r.energy_kwh, budget)
                if budget is not None
                else float("nan"),
                "window_kwh": r.window_kwh,
            }
        )
    df = pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))
    df["_p"] = df["policy"] == POLICY
    df = df.sort_values(
        ["_p", "policy", "kind", "sm_clock_cap", "budget_fraction", "seed"],
        ascending=[True, True, True, False, True, True],
        na_position="last",
    )
    return df.drop(columns="_p").reset_index(drop=True)


# -- summary ------------------------------------------------------------------------------------------------
def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def summarise(
    prep: Prepared,
    records: list[RunRecord],
    results: pd.DataFrame,
    sweep: pd.DataFrame,
    workers: int,
    grid_wall_s: float,
) -> dict[str, Any]:
    digests = {s: sorted({r.model_digest for r in records if r.task.seed == s}) for s in prep.seeds}
    per_baseline: dict[str, dict[str, Any]] = {}
    for b in prep.baselines:
        d = results[results.baseline == b]
        ratio, ratio_std = _mean_std(d.jct_ratio)
        row: dict[str, Any] = {"ratio": ratio, "ratio_std": ratio_std}
        for col in PER_BASELINE_MEANS:
            row[col] = float(d[col].mean())
        base = [r for r in records if r.task.kind == "baseline" and r.task.policy == b and r.task.cap == 1.0]
        eq = [r for r in records if r.task.kind == "equal" and r.task.baseline == b]
        row["queue_delay_baseline"] = float(np.mean([r.queue_delay_mean_s for r in base]))
        row["queue_delay_powerflow"] = float(np.mean([r.queue_delay_mean_s for r in eq]))
        row["alloc_baseline"] = float(np.mean([r.gpu_allocation_mean for r in base]))
        row["alloc_powerflow"] = float(np.mean([r.gpu_allocation_mean for r in eq]))
        row["statuses"] = d.budget_status.tolist()
        per_baseline[b] = row
    free = [r for r in records if r.task.kind == "no-budget"]
    pf_runs = [r for r in records if r.task.policy == POLICY]
    lowest = min(pf_runs, key=lambda r: r.energy_kwh)
    incomplete = [
        f"{r.task.describe()} ({r.jobs_completed} of {r.jobs_submitted})"
        for r in records
        if r.jobs_completed < r.jobs_submitted
    ]
    return {
        "workload": prep.setup.workload,
        "cluster_name": prep.setup.cluster,
        "gpu_type": prep.setup.gpu_type,
        "power_manager": prep.setup.power_manager,
        "cluster": prep.cluster,
        "jobs": prep.jobs,
        "baselines": prep.baselines,
        "seeds": prep.seeds,
        "caps": prep.caps,
        "fractions": prep.fractions,
        "runs": len(records),
        "workers": workers,
        "grid_wall_s": grid_wall_s,
        "cpu_s": float(sum(r.wall_s for r in records)),
        "wall_by_policy": {
            p: float(np.mean([r.wall_s for r in records if r.task.policy == p]))
            for p in [*prep.baselines, POLICY]
        },
        "machine": f"{platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} logical CPUs, Python {platform.python_version()}",
        "load": " / ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a",
        "models_identical": all(len(v) == 1 for v in digests.values()),
        "model_digests": digests,
        "per_baseline": per_baseline,
        "no_budget_energy": _mean_std([r.energy_kwh for r in free]),
        "no_budget_jct": _mean_std([r.mean_jct_s for r in free]),
        "no_budget_static": float(np.mean([r.energy_static_kwh for r in free])),
        "lowest_pf_energy": lowest.energy_kwh,
        "lowest_pf_static": lowest.energy_static_kwh,
        "lowest_pf_makespan": lowest.makespan_s,
        "incomplete": incomplete,
        "results": results,
        "sweep": sweep,
    }


def _h(seconds: float) -> str:
    return "n/a" if not np.isfinite(seconds) else f"{seconds / 3600:.2f}"


def _paper_position(ratio: float) -> str:
    lo, hi = PAPER_RATIO
    if ratio < lo:
        return "below"
    return "within" if ratio <= hi else "above"


def render_summary(s: dict[str, Any]) -> str:
    res: pd.DataFrame = s["results"]
    sweep: pd.DataFrame = s["sweep"]
    pb = s["per_baseline"]
    gpu = f" with {s['gpu_type']} GPUs" if s["gpu_type"] else ""
    c = s["cluster"]
    lo, hi = PAPER_RATIO
    n_seeds = len(s["seeds"])
    lines = [
        f"# {LABEL} vs baselines at equal energy: `{s['workload']}` on `{s['cluster_name']}`{gpu}",
        "",
        f"**PowerFlow here is `{LABEL}`, a reconstruction**: the paper (Gu et al., arXiv 2304.06381) has no public "
        "code and states its algorithm only in outline; the greedy (ΔJCT/JCT)/(ΔE/E) GPU allocation, energy-optimal "
        "clocks, budget rule and buddy placement used here are rebuilt from the abstract and a secondary "
        "description (docs/seed-systems.md §2, policy `powerflow`). Its figures are this reconstruction's, not the "
        "paper's system's.",
        "",
        "## Setup",
        "",
        f"- Workload `{s['workload']}`: {s['jobs']} jobs. Cluster `{c.get('name', s['cluster_name'])}`: "
        f"{c.get('nodes')} nodes, {c.get('gpus')} GPUs ({', '.join(c.get('gpu_models', {}))}).",
        f"- Baselines: {', '.join(s['baselines'])}. `fifo` = queue FIFO + placement first-fit at the trace's GPU "
        "count; the others are wattsched's allocation policies of those names (docs/baselines.md). All baselines "
        "run at the maximum clock for the equal-energy comparison.",
        "- Same models for every run: throughput tables (`performance: tables`, so FIFO's jobs do iterations like "
        "the others), the seeded model assignment (`assign_models: always`, same seed for all runs of a seed), "
        f"power model `dvfs`, power manager `{s['power_manager']}`, ElasticFlow restart costs.",
        f"- Model assignment identical across all runs of each seed (job ids and model names hashed per run): "
        f"**{'yes' if s['models_identical'] else 'NO'}**.",
        f"- Seeds {s['seeds'][0]}..{s['seeds'][-1]} ({n_seeds}); mean ± sample standard deviation over seeds.",
        "- Equal energy: PowerFlow's budget = the baseline's measured total energy E_b (summary `energy_kwh`) of "
        "the same seed.",
        f"- Sweeps: PowerFlow at {', '.join(f'{f:.0%}' for f in s['fractions'])} of the seed's largest E_b, and "
        f"without a budget; each baseline at SM-clock caps {', '.join(f'{x:g}' for x in s['caps'])} of f_max.",
        f"- **Wall time: {s['wall_s']:.1f} s** in all ({s['grid_wall_s']:.1f} s for {s['runs']} runs on "
        f"{s['workers']} worker(s) of the {s.get('backend', 'process')} backend, {s['cpu_s']:.1f} s summed over "
        f"runs); machine: {s['machine']}; "
        f"load average at the end {s['load']}.",
    ]
    if s["incomplete"]:
        lines.append(
            "- **Runs with unfinished jobs** (their JCTs cover finished jobs only): "
            + "; ".join(s["incomplete"])
        )
    lines += [
        "",
        "## Equal-energy comparison (mean JCT ratio = baseline / PowerFlow)",
        "",
        f'Paper: "under the same energy consumption, PowerFlow improves the average JCT by **{lo}-{hi}x at most**" '
        f"(docs/seed-systems.md §2). Target: at least {TARGET_RATIO}x per baseline.",
        "",
        "E_b and E PowerFlow are each run's own energy, from the first submission to its own last completion: the "
        "budget is defined on them. The comparison of energy between runs is over the common window (the last "
        "three columns): " + s.get("window", "not available"),
        "",
        "| baseline | mean JCT baseline (h) | mean JCT PowerFlow (h) | **JCT ratio** | paper 1.57-3.39x "
        f"| target {TARGET_RATIO}x | p95 ratio | makespan ratio | E_b (kWh) | E PowerFlow (kWh) | budget error "
        "| E baseline, common window (kWh) | E PowerFlow, common window (kWh) | **energy change, common window** |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in s["baselines"]:
        r = pb[b]
        margin = r["ratio"] - TARGET_RATIO
        met = "met" if margin >= 0 else "**missed**"
        lines.append(
            f"| {b} | {_h(r['mean_jct_s_baseline'])} | {_h(r['mean_jct_s_powerflow'])} "
            f"| **{r['ratio']:.2f} ± {r['ratio_std']:.2f}** | {_paper_position(r['ratio'])} "
            f"| {met} ({margin:+.2f}x, {margin / TARGET_RATIO:+.0%}) | {r['p95_jct_ratio']:.2f} "
            f"| {r['makespan_ratio']:.2f} | {r['energy_kwh_baseline']:.2f} | {r['energy_kwh_powerflow']:.2f} "
            f"| {r['budget_error_pct']:+.1f} % | {r['window_kwh_baseline']:.2f} | {r['window_kwh_powerflow']:.2f} "
            f"| **{r['window_energy_change_pct']:+.1f} %** |"
        )
    lines += [
        "",
        "Per run (`results.csv`):",
        "",
        "| baseline | seed | E_b = budget (kWh) | E PowerFlow (kWh) | budget error | status | JCT ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in res.itertuples():
        lines.append(
            f"| {row.baseline} | {row.seed} | {row.budget_kwh:.3f} | {row.energy_kwh_powerflow:.3f} "
            f"| {row.budget_error_pct:+.2f} % | {row.budget_status} | {row.jct_ratio:.3f} |"
        )
    lines += ["", "## Energy against the budget", ""]
    lines += _budget_lines(s)
    lines += ["", "## Targets", ""]
    lines += _target_lines(s)
    lines += ["", "## Why figures are off target", ""]
    lines += _explanations(s)
    lines += ["", "## JCT against energy (sweeps; means over seeds; `sweep.csv`)", ""]
    lines += [
        "Energies here are each run's own (first submission to its own last completion), the quantity the budgets "
        "and their errors are defined on; `sweep.csv` `window_kwh` holds each run's energy over the common window "
        "of its seed's runs.",
        "",
    ]
    lines += _sweep_lines(sweep)
    lines += ["", "## What differs from the paper's setup", ""]
    lines += [f"- {t}" for t in _differences(s)]
    lines += [
        "",
        "## Mean wall time per run (s, inside its worker process)",
        "",
        "| policy | s |",
        "|---|---|",
    ]
    for p, w in s["wall_by_policy"].items():
        lines.append(f"| {LABEL if p == POLICY else p} | {w:.2f} |")
    if s.get("plots"):
        lines += ["", "## Plots", ""] + [f"- `{name}`: {what}" for name, what in s["plots"]]
    return "\n".join(lines) + "\n"


def _budget_lines(s: dict[str, Any]) -> list[str]:
    res: pd.DataFrame = s["results"]
    free_e, free_e_sd = s["no_budget_energy"]
    free_j, _ = s["no_budget_jct"]
    n = len(res)
    counts = {k: int((res.budget_status == k).sum()) for k in (STATUS_RUN, STATUS_INTERPOLATED, STATUS_UNUSED,
                                                                 STATUS_BELOW)}  # fmt: skip
    lines = [
        "Each baseline's energy E_b is taken over the seed's common window (its baselines and PowerFlow without a "
        "budget; docs/energy.md), and PowerFlow runs with E_b as its budget over that window "
        "(`energy_budget_until_s`). Its energy is compared with E_b over the same window.",
        "",
        f"Target: every equal-energy run within ±{BUDGET_TOLERANCE_PCT:g} % of E_b, or interpolated and labelled. "
        f"**{counts[STATUS_RUN]} of {n}** landed within; {counts[STATUS_INTERPOLATED]} interpolated (PowerFlow's "
        f"JCT at E_b from the seed's PowerFlow runs: sweep, no-budget and equal-energy runs, on their lower "
        f"envelope); {counts[STATUS_UNUSED]} `unused` (E_b above the energy of every PowerFlow run: PowerFlow "
        f"cannot use it, and its no-budget JCT stands); {counts[STATUS_BELOW]} `below range` (E_b below every "
        "PowerFlow run: the lowest-energy run's JCT, at more energy than E_b).",
        "",
        f"Reference: PowerFlow **without any budget** uses {free_e:.2f} ± {free_e_sd:.2f} kWh (own window) for a "
        f"mean JCT of {_h(free_j)} h: its shortest-JCT operating point.",
    ]
    if s.get("refused"):
        lines += [
            "",
            f"{len(s['refused'])} sweep budget(s) were below PowerFlow's floor and refused before their run started "
            f"(e.g. seed {s['refused'][0][0]}: {s['refused'][0][2]}).",
        ]
    return lines


def _target_lines(s: dict[str, Any]) -> list[str]:
    res: pd.DataFrame = s["results"]
    lines = []
    for b in s["baselines"]:
        r = s["per_baseline"][b]
        margin = r["ratio"] - TARGET_RATIO
        if margin >= 0:
            lines.append(
                f"- vs {b}: mean JCT ratio ≥ {TARGET_RATIO}x: met ({r['ratio']:.2f}x, {margin:.2f}x above the target)"
            )
        else:
            lines.append(
                f"- vs {b}: mean JCT ratio ≥ {TARGET_RATIO}x: **missed** ({r['ratio']:.2f}x, {-margin:.2f}x = "
                f"{-margin / TARGET_RATIO:.0%} short of the target)"
            )
    within = int((res.budget_status == STATUS_RUN).sum())
    labelled = len(res) - within
    lines.append(
        f"- every equal-energy run within ±{BUDGET_TOLERANCE_PCT:g} % of its budget, or interpolated and labelled: "
        f"met ({within} of {len(res)} within; {labelled} labelled in results.csv `budget_status`)"
    )
    wall = s["wall_s"]
    lines.append(
        f"- whole experiment under 10 minutes: {'met' if wall < 600 else '**missed**'} ({wall:.0f} s on "
        f"{s['workers']} worker process(es); the 10-minute target is for 4 baselines, 3 seeds, 7 budget "
        "points on 2 cores)"
    )
    return lines


def _explanations(s: dict[str, Any]) -> list[str]:
    lines = []
    missed = [b for b in s["baselines"] if s["per_baseline"][b]["ratio"] < TARGET_RATIO]
    if not missed:
        lines.append(f"Every baseline's mean JCT ratio reaches {TARGET_RATIO}x.")
    for b in missed:
        r = s["per_baseline"][b]
        lines.append(
            f"- **{b}** ({r['ratio']:.2f}x): the baseline's own mean JCT is already {_h(r['mean_jct_s_baseline'])} h "
            f"against PowerFlow's {_h(r['mean_jct_s_powerflow'])} h. Mean delay to first start: {r['queue_delay_baseline']:.0f} s "  # noqa: E501
            f"for {b}, {r['queue_delay_powerflow']:.0f} s for PowerFlow; mean GPU allocation {r['alloc_baseline']:.1%} "
            f"vs {r['alloc_powerflow']:.1%}. What is left to gain is execution time: PowerFlow's only remaining "
            "lever is more GPUs (and higher clocks) per job, bounded by how well the throughput tables scale with "
            "GPU count and by restart costs."
        )
    over_sweep = s["sweep"]
    over_sweep = over_sweep[
        (over_sweep.kind == "budget") & (over_sweep.budget_error_pct > BUDGET_TOLERANCE_PCT)
    ]
    if len(over_sweep):
        lines += [
            "",
            f"- **{len(over_sweep)} sweep run(s) exceed their budget by more than {BUDGET_TOLERANCE_PCT:g} %** (up to "
            f"{over_sweep.budget_error_pct.max():+.1f} %): budgets above the floor PowerFlow checks (the least "
            "dynamic energy plus the least static draw) but below the least energy it reaches "
            f"({s['lowest_pf_energy']:.2f} kWh, of which {s['lowest_pf_static']:.2f} kWh is static draw with power "
            f"manager `{s['power_manager']}`): the floor is a lower bound, not the least energy any policy can reach.",
        ]
    return lines


def _sweep_lines(sweep: pd.DataFrame) -> list[str]:
    lines = [
        "| policy | point | energy (kWh) | mean JCT (h) | p95 JCT (h) | makespan (h) | budget error |",
        "|---|---|---|---|---|---|---|",
    ]
    g = sweep.copy()
    g["point"] = np.where(
        g.kind == "clock-cap",
        "SM clock " + g.sm_clock_cap.map(lambda v: f"{v:g}"),
        np.where(
            g.kind == "budget",
            g.budget_fraction.map(lambda v: f"{v:.0%}" if np.isfinite(v) else "") + " of max E_b",
            "no budget",
        ),
    )
    agg = g.groupby(["policy", "kind", "point"], sort=False).agg(
        energy=("energy_kwh", "mean"),
        jct=("mean_jct_s", "mean"),
        p95=("p95_jct_s", "mean"),
        mk=("makespan_s", "mean"),
        budget=("budget_kwh", "mean"),
        err=("budget_error_pct", "mean"),
    )
    for (policy, kind, point), r in agg.iterrows():
        name = LABEL if policy == POLICY else policy
        if kind == "budget":
            point = f"{point} = {r.budget:.1f} kWh"
        err = f"{r.err:+.1f} %" if kind == "budget" else "–"
        lines.append(
            f"| {name} | {point} | {r.energy:.2f} | {_h(r.jct)} | {_h(r.p95)} | {_h(r.mk)} | {err} |"
        )
    caps = sweep[sweep.kind == "clock-cap"]
    if len(caps):
        lines += ["", _cap_note(caps)]
    return lines


def _cap_note(caps: pd.DataFrame) -> str:
    mean = caps.groupby(["policy", "sm_clock_cap"]).energy_kwh.mean().unstack()
    top, bottom = mean.columns.max(), mean.columns.min()
    up = [p for p in mean.index if mean.loc[p, bottom] > mean.loc[p, top]]
    if not up:
        return "Lower clock caps lower every baseline's energy, at longer JCTs."
    return (
        f"Clock caps *raise* the total energy of {', '.join(up)} here (SM clock {bottom:g} vs {top:g}): a capped "
        "job draws less GPU power but runs longer, and the cluster's static draw (node base, CPU, idle GPUs under "
        "the power manager) runs on for the longer makespan. So a static cap is no way to run these baselines at "
        "lower energy on this setup; their curves go up and to the right."
    )


def _differences(s: dict[str, Any]) -> list[str]:
    gpus = ", ".join(s["cluster"].get("gpu_models", {})) or "?"
    return [
        f"PowerFlow is `{LABEL}`: the paper's equations (§4-5), budget granularity, batch-size rule and solver are "
        "not public; this reconstruction adjusts GPU counts (powers of two) and SM clocks, not batch sizes, and "
        "spends one budget over the whole run.",
        "The paper's baselines are not known; these are wattsched's FIFO + first-fit, Tiresias, Gandiva and "
        "Optimus-greedy reconstructions (docs/baselines.md), all energy-blind, on the same performance, power and "
        "restart models.",
        f"Testbed: the paper's GPU models and cluster size are not known; here {s['cluster'].get('gpus')} simulated "
        f"{gpus} GPUs with ElasticFlow's measured throughput tables, frequency response from the dvfs model "
        "(docs/dvfs.md), energy from the simulator's power model, not measured.",
        f'The paper\'s {PAPER_RATIO[0]}-{PAPER_RATIO[1]}x are maxima ("at most") over its settings; the figures '
        f"here are means over {len(s['seeds'])} seed(s) at one setting per baseline.",
        "Seeds change only the policies' random tie-breaks and the model assignment of jobs that have no model; "
        "a workload with fixed arrivals and models (the Pollux traces) gives nearly the same run for every seed.",
        f"Idle nodes follow power manager `{s['power_manager']}` for every policy, so static draw over the "
        "makespan is part of every run's energy.",
    ]


# -- plots --------------------------------------------------------------------------------------------------
_COLOURS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
)


def write_plots(
    out: Path, s: dict[str, Any], results: pd.DataFrame, sweep: pd.DataFrame
) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[tuple[str, str]] = []
    colour = {b: _COLOURS[i % len(_COLOURS)] for i, b in enumerate(s["baselines"])}
    title = f"{s['workload']} on {s['cluster_name']}" + (f" ({s['gpu_type']})" if s["gpu_type"] else "")

    def save(fig, name: str, what: str, layout: bool = True) -> None:
        if layout:
            fig.tight_layout()
        write_with(out / name, lambda p: fig.savefig(p, format="png", dpi=130))
        plt.close(fig)
        written.append((name, what))

    # 1. JCT against energy: one curve per policy (baselines over clock caps, PowerFlow over budgets).
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    mean = sweep.groupby(
        ["policy", "kind", "sm_clock_cap", "budget_fraction"], dropna=False, sort=False
    ).mean(numeric_only=True)
    mean = mean.reset_index()
    eq = results.groupby("baseline", sort=False).mean(numeric_only=True)
    for ax, col, label in ((axes[0], "mean_jct_s", "mean JCT (h)"), (axes[1], "p95_jct_s", "p95 JCT (h)")):
        for b in s["baselines"]:
            d = mean[(mean.policy == b) & (mean.kind == "clock-cap")].sort_values(
                "sm_clock_cap", ascending=False
            )
            ax.plot(d.energy_kwh, d[col] / 3600, "o-", color=colour[b], label=f"{b} (SM clock caps)")
            for e, v, cap in zip(d.energy_kwh, d[col] / 3600, d.sm_clock_cap, strict=True):
                ax.annotate(f"{cap:g}", (e, v), fontsize=6, xytext=(3, 3), textcoords="offset points")
        d = mean[(mean.policy == POLICY) & (mean.kind == "budget")].sort_values("budget_fraction")
        ax.plot(d.energy_kwh, d[col] / 3600, "s-", color="tab:red", lw=2, label=f"{LABEL} (budget sweep)")
        if len(d):
            # Budget points often land close together: label the sweep once rather than each point.
            ax.annotate(
                f"budgets {d.budget_kwh.min():.0f}-{d.budget_kwh.max():.0f} kWh\n"
                f"used {d.energy_kwh.min():.0f}-{d.energy_kwh.max():.0f} kWh",
                (d.energy_kwh.iloc[-1], d[col].iloc[-1] / 3600),
                fontsize=7,
                color="tab:red",
                xytext=(12, 18),
                textcoords="offset points",
                arrowprops={"arrowstyle": "-", "color": "tab:red", "lw": 0.6},
            )
        d = mean[(mean.policy == POLICY) & (mean.kind == "no-budget")]
        ax.plot(d.energy_kwh, d[col] / 3600, "*", color="black", ms=12, label=f"{LABEL}, no budget")
        pf_col = col.replace("_s", "_s_powerflow")
        for b in s["baselines"]:
            if b in eq.index:
                ax.plot(eq.loc[b, "energy_kwh_powerflow"], eq.loc[b, pf_col] / 3600, "D", mfc="none",
                        mec=colour[b], ms=9, label=f"{LABEL} at E_b of {b}")  # fmt: skip
        ax.set(xlabel="total energy (kWh)", ylabel=label, title=f"{label.split(' (')[0]} vs energy, {title}")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=4, frameon=False)
    fig.tight_layout(rect=(0, 0.06 + 0.025 * math.ceil(len(labels) / 4), 1, 1))
    save(
        fig,
        "jct_vs_energy.png",
        "mean and p95 JCT against total energy, one curve per policy (seed means)",
        layout=False,
    )

    # 2. The equal-energy JCT ratios.
    fig, ax = plt.subplots(figsize=(7, 4.6))
    stats = [(b, s["per_baseline"][b]["ratio"], s["per_baseline"][b]["ratio_std"]) for b in s["baselines"]]
    x = np.arange(len(stats))
    ax.bar(x, [r for _, r, _ in stats], yerr=[e for _, _, e in stats], capsize=4,
           color=[colour[b] for b, _, _ in stats])  # fmt: skip
    for i, (_, r, _) in enumerate(stats):
        top = r + (stats[i][2] if np.isfinite(stats[i][2]) else 0.0)
        ax.annotate(f"{r:.2f}x", (i, top), ha="center", xytext=(0, 4), textcoords="offset points", fontsize=8)
    ax.axhspan(
        *PAPER_RATIO, color="grey", alpha=0.15, label=f"paper: {PAPER_RATIO[0]}-{PAPER_RATIO[1]}x (at most)"
    )
    ax.axhline(TARGET_RATIO, color="tab:red", ls="--", lw=1, label=f"target {TARGET_RATIO}x")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [b for b, _, _ in stats])
    ax.set(ylabel="mean JCT baseline / PowerFlow", title=f"Equal-energy JCT ratio, {title}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    save(fig, "jct_ratio.png", "mean JCT ratio baseline / PowerFlow at equal energy (seed mean ± std)")

    # 3. Energy used against the budget.
    fig, ax = plt.subplots(figsize=(6.5, 5))
    pts = sweep[sweep.kind == "budget"]
    ax.plot(pts.budget_kwh, pts.energy_kwh, "s", color="tab:red", mfc="none", label="budget sweep")
    for b in s["baselines"]:
        d = results[results.baseline == b]
        ax.plot(d.budget_kwh, d.energy_kwh_powerflow, "D", color=colour[b], label=f"budget = E_b of {b}")
    lo = float(min(pts.budget_kwh.min() if len(pts) else np.inf, results.budget_kwh.min())) * 0.95
    hi = float(max(pts.budget_kwh.max() if len(pts) else 0, results.budget_kwh.max())) * 1.05
    grid = np.array([lo, hi])
    ax.plot(grid, grid, "k-", lw=0.8, label="energy = budget")
    ax.fill_between(grid, grid * (1 - BUDGET_TOLERANCE_PCT / 100), grid * (1 + BUDGET_TOLERANCE_PCT / 100),
                    color="grey", alpha=0.2, label=f"±{BUDGET_TOLERANCE_PCT:g} %")  # fmt: skip
    ax.axhline(s["no_budget_energy"][0], color="black", ls=":", lw=1, label="PowerFlow without a budget")
    ax.set(xlabel="budget (kWh)", ylabel="energy used by PowerFlow (kWh)", title=f"Budget tracking, {title}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "budget_tracking.png", "PowerFlow's energy against its budget, with the ±2 % band")
    return written
