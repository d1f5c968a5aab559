"""The powerflow experiment's own tables (``experiments/powerflow.py``), one set per power manager.

``runs.csv``: every run; ``results.csv``: one row per baseline and seed, the baseline against PowerFlow at the
baseline's energy E_b; ``sweep.csv``: the JCT-vs-energy points (baselines at SM-clock caps, PowerFlow over budgets
and without one). Rows are sorted by their keys, never by completion order, so the files are the same byte for
byte whatever runs the grid.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from .powerflow_runs import RunRecord

POLICY = "powerflow"
LABEL = "PowerFlow-reconstructed"
TARGET_RATIO = 1.5  # target: PowerFlow's mean JCT at least 1.5x shorter than each baseline's at equal energy
PAPER_RATIO = (1.57, 3.39)  # arXiv 2304.06381 abstract: "1.57-3.39x at most" (docs/seed-systems.md §2)
BUDGET_TOLERANCE_PCT = 2.0

# How an equal-energy row's PowerFlow JCT was obtained (results.csv `budget_status`).
STATUS_RUN = "within"  # the equal-energy run landed within ±2 % of the baseline's energy: its own JCT
STATUS_INTERPOLATED = "interpolated"  # outside ±2 %: JCT at E_b interpolated on the seed's PowerFlow runs
STATUS_UNUSED = "unused"  # E_b above every PowerFlow run's energy: PowerFlow cannot use it; its no-budget JCT
STATUS_BELOW = (
    "below range"  # E_b below every PowerFlow run's energy: its lowest-energy run's JCT (it uses more)
)

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


def runs_frame(records: Sequence[RunRecord]) -> pd.DataFrame:
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


def budget_error(energy: float, budget: float) -> float:
    return 100.0 * (energy - budget) / budget


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


def results_frame(
    records: Sequence[RunRecord], baselines: Sequence[str], seeds: Sequence[int]
) -> pd.DataFrame:
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
    for b in baselines:
        for s in seeds:
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
            err = budget_error(landed, target)
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


def sweep_frame(records: Sequence[RunRecord]) -> pd.DataFrame:
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
                "budget_error_pct": budget_error(r.energy_kwh, budget)
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
