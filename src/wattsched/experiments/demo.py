"""`wattsched demo` (`make demo`): the energy-aware policies beside an energy-blind baseline, on built-in data only
(docs/demo.md).

One seeded synthetic workload on the default cluster (16 nodes x 8 A100), run once per policy:

* the energy-blind baseline: FIFO + best-fit, every node always on;
* dynamic right-sizing: the same, idle nodes off after the idle timeout;
* PWR+FGD placement (0.2 PWR + 0.8 FGD) with right-sizing;
* PowerFlow (reconstructed) with the baseline's measured energy as its budget, nodes always on like the baseline;
* EaCO co-location (reconstructed parameters) with right-sizing;
* CE-DLA (reconstructed) against the price series, with right-sizing.

No dataset is read. Job speeds come from generated scaling tables (``perf/generated.py``) and the price and carbon
series are generated daily sines (:func:`write_generated_signals`); both are labelled as generated in every run's
notes, in the report and on screen. All runs share the job model (tables, seeded model assignment, the sharing
model fitted to EaCO's measurements, DVFS power model, deadlines at 3 x the trace duration), so they differ only in
their policies; :func:`run_demo` refuses to run otherwise (experiments/jobmodel.py).
"""

from __future__ import annotations

import datetime as dt
import math
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.atomic import write_text, write_with
from ..engine.tail import PowerTail
from .config import SimulationConfig
from .parallel import ProgressFn, grid_executor

SIGNAL_YEAR = 2023
# What every run shares besides the workload: a job model that allocation policies can scale (generated tables
# for every job), one sharing model for every run (the one fitted to measured co-location, EaCO's; it changes only
# jobs on shared GPUs, which every policy here has: a share of the synthetic jobs asks for part of a GPU), the DVFS
# power model (clocks matter), and deadlines so that misses are counted for every policy.
COMMON_KNOBS: dict[str, Any] = {
    "performance": "generated",
    "assign_models": "always",
    "sharing_model": "eaco",
    "power_model": "dvfs",
    "deadline_slack": 3.0,
}
BASELINE = "energy-blind"


@dataclass(frozen=True)
class DemoRun:
    name: str
    what: str
    knobs: dict[str, Any] = field(default_factory=dict)
    budget_is_baseline_energy: bool = False  # run after the baseline, with its energy as the budget


DEMO_RUNS = (
    DemoRun(
        BASELINE,
        "the baseline: FIFO + best-fit, every node always on, no energy awareness",
        {"queue": "fifo", "placement": "best-fit", "power_manager": "always-on"},
    ),
    DemoRun(
        "idle-timeout",
        "dynamic right-sizing: FIFO + best-fit, idle nodes off after the idle timeout",
        {"queue": "fifo", "placement": "best-fit", "power_manager": "idle-timeout"},
    ),
    DemoRun(
        "pwr-fgd",
        "PWR+FGD placement (0.2 x PWR + 0.8 x FGD, Lettich et al.) with right-sizing",
        {"queue": "fifo", "placement": "pwr_200_fgd_800", "power_manager": "idle-timeout"},
    ),
    DemoRun(
        "powerflow",
        "PowerFlow (reconstructed): GPU counts and clocks under the baseline's energy as budget, nodes always on",
        {"allocation": "powerflow", "power_manager": "always-on"},
        budget_is_baseline_energy=True,
    ),
    DemoRun(
        "eaco",
        "EaCO (reconstructed parameters): energy-aware co-location on shared GPUs with right-sizing",
        {"allocation": "eaco", "power_manager": "idle-timeout"},
    ),
    DemoRun(
        "cedla",
        "CE-DLA (reconstructed): price-aware start times and placement with right-sizing",
        {"allocation": "cedla", "power_manager": "idle-timeout"},
    ),
)
RUNS_BY_NAME = {r.name: r for r in DEMO_RUNS}


def write_generated_signals(out: Path, year: int = SIGNAL_YEAR) -> tuple[Path, Path]:
    """A generated hourly price (USD/MWh) and carbon intensity (gCO2/kWh) for `year`, UTC: daily sines, the price
    lowest at 09:00 and highest at 21:00, carbon highest at midnight and lowest at noon. Not market data: it only
    gives the price-aware policy a daily cycle to use. Named generated-*.csv so that every run records the name."""
    start = dt.datetime(year, 1, 1)
    hours = int((dt.datetime(year + 1, 1, 1) - start).total_seconds() // 3600)
    price, carbon = ["time,price_usd_per_mwh"], ["time,carbon_g_per_kwh"]
    for h in range(hours):
        stamp = (start + dt.timedelta(hours=h)).isoformat()
        phase = 2 * math.pi * (h % 24) / 24
        price.append(f"{stamp},{60 - 35 * math.cos(phase - math.pi * 0.75):.2f}")
        carbon.append(f"{stamp},{320 + 120 * math.cos(phase):.1f}")
    price_csv, carbon_csv = out / "generated-price.csv", out / "generated-carbon.csv"
    out.mkdir(parents=True, exist_ok=True)
    write_text(price_csv, "\n".join(price) + "\n")
    write_text(carbon_csv, "\n".join(carbon) + "\n")
    return price_csv, carbon_csv


@dataclass(frozen=True)
class DemoSetup:
    """What every run shares (picklable)."""

    out: str
    num_jobs: int
    seed: int
    price_csv: str
    carbon_csv: str

    def config(
        self, run: DemoRun, budget_kwh: float | None = None, until_s: float | None = None
    ) -> SimulationConfig:
        knobs = {**COMMON_KNOBS, **run.knobs}
        if budget_kwh is not None:
            knobs["energy_budget_kwh"] = budget_kwh
            knobs["energy_budget_until_s"] = until_s
        return SimulationConfig(
            seed=self.seed,
            synthetic={"num_jobs": self.num_jobs},
            year=SIGNAL_YEAR,
            price_csv=self.price_csv,
            carbon_csv=self.carbon_csv,
            **knobs,
        )


def run_one(
    setup: DemoSetup, name: str, budget_kwh: float | None, until_s: float | None = None
) -> tuple[str, PowerTail]:
    """Run one policy into OUT/<name>; its name and power tail (energy to any time from its own end on)."""
    from .run import run_simulation

    result = run_simulation(setup.config(RUNS_BY_NAME[name], budget_kwh, until_s), Path(setup.out) / name)
    return name, PowerTail.from_summary(result.summary)


@dataclass
class DemoResult:
    out: Path
    runs: list[Path]
    comparison: pd.DataFrame
    report: Path
    notes: list[str]


def demo_notes(setup: DemoSetup, baseline_kwh: float) -> list[str]:
    return [
        f"Built-in data only: {setup.num_jobs} synthetic jobs (seed {setup.seed}) on the default cluster "
        "(16 nodes x 8 A100); the same workload and job model for every run (jobs on shared GPUs: the "
        "sharing model fitted to EaCO's measurements).",
        "Job speeds come from GENERATED scaling tables (an analytic data-parallel law, perf/generated.py), "
        "not measurements.",
        f"The price and carbon series are GENERATED daily sines ({Path(setup.price_csv).name}, "
        f"{Path(setup.carbon_csv).name}), not market data.",
        f"PowerFlow's energy budget is the baseline's energy over the baseline's window (first submission to its "
        f"last completion), {baseline_kwh:,.1f} kWh, and covers PowerFlow's energy over that same window (its "
        "idle tail included, energy_budget_until_s); the table compares every run over the common window of all.",
    ]


def budget_landing_note(name: str, run: PowerTail, baseline: PowerTail) -> str:
    """Where a budgeted run landed against the baseline's energy, both over the window its budget covered."""
    end = max(run.end_s, baseline.end_s)
    used, budget = run.energy_kwh_to(end), baseline.energy_kwh_to(end)
    off = used / budget - 1.0
    if abs(off) <= 0.02:
        return f"{name} used {used:,.1f} kWh against its {budget:,.1f} kWh budget ({off:+.1%}: within ±2 %)."
    why = (
        "more than it can use: without a budget it needs no more (docs/powerflow.md)"
        if off < 0
        else "a budget below the least energy this policy reaches (docs/powerflow.md)"
    )
    return (
        f"{name} used {used:,.1f} kWh against its {budget:,.1f} kWh budget ({off:+.1%}): the budget is {why}."
    )


def run_demo(
    out: Path, num_jobs: int = 1000, seed: int = 42, workers: int = 2, progress: ProgressFn | None = None
) -> DemoResult:
    """Every run of DEMO_RUNS into OUT/<name>, then OUT/comparison.csv and OUT/report.html."""
    from .compare import comparison
    from .jobmodel import require_one_job_model
    from .report import build_report
    from .report_plots import PLOTS_SKIPPED, plots_available
    from .window import record_in_run_dirs

    price, carbon = write_generated_signals(out / "signals")
    setup = DemoSetup(str(out), num_jobs, seed, str(price), str(carbon))
    require_one_job_model({r.name: setup.config(r) for r in DEMO_RUNS}, "the demo")
    after_baseline = [r.name for r in DEMO_RUNS if r.budget_is_baseline_energy]
    first = [r.name for r in DEMO_RUNS if not r.budget_is_baseline_energy]
    total = len(DEMO_RUNS)
    tails: dict[str, PowerTail] = {}
    if progress:
        progress(0, total)
    with grid_executor(setup, workers, total, out=None) as pool:
        pending: set[Future] = {pool.submit(run_one, name, None) for name in first}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                name, tail = fut.result()
                tails[name] = tail
                if name == BASELINE:  # the budgeted runs start as soon as the baseline's energy is known
                    kwh = tail.energy_kwh_to(tail.end_s)
                    pending |= {pool.submit(run_one, n, kwh, tail.end_s) for n in after_baseline}
                if progress:
                    progress(len(tails), total)

    runs = [out / r.name for r in DEMO_RUNS]
    record_in_run_dirs(runs)  # each run's summary.json gains its common_window block
    frame = comparison(runs, out / BASELINE)
    table = frame.assign(run=[Path(s).name for s in frame["source"]])  # the run's name, not its path
    write_with(out / "comparison.csv", lambda p: table.to_csv(p, index=False, float_format="%.10g"))
    base = tails[BASELINE]
    notes = demo_notes(setup, base.energy_kwh_to(base.end_s))
    for name in after_baseline:
        notes.append(budget_landing_note(name, tails[name], base))
    described = [*notes, *(f"{r.name}: {r.what}" for r in DEMO_RUNS)]
    html = build_report(
        runs, out / BASELINE, title="wattsched demo: energy-aware policies", notes=described, frame=frame
    )
    write_text(out / "report.html", html)
    if not plots_available():
        notes.append(PLOTS_SKIPPED)
    return DemoResult(out, runs, table, out / "report.html", notes)
