"""`wattsched experiment hkbu-online-pd`: HKBU-OnlinePD-reconstructed against the offline optimum of the same ILP,
and on the Philly trace against greedy first-fit and EDF at default clocks.

1. **Empirical ratio** (offline optimum / online objective) on small instances of one family (docs/hkbu-online-pd.md
   §4), for which the proven bound is printed: random instances in their arrival order, and adversarial ones (the
   value ladder, and arrival orders of simultaneous jobs found by local search). The offline optimum is HiGHS
   through ``scipy.optimize.milp`` (``policies.hkbu_online_pd.solve_offline``). One cell per instance; these are
   not runs to compare (no energy, no JCT), so they appear only in ``ratios.csv`` and the summary's own sections.
2. **Philly**: `hkbu-online-pd`, `arrival-greedy` + first-fit and `edf-greedy` + first-fit (default clocks) with
   deadlines at submit + slack x duration, charged over one common window; utility of the jobs done by their
   deadline, energy, net value. These are the runs of ``records.csv``.

Outputs in DIR: ``records.csv``, ``summary.md``, ``config.yaml`` (the protocol's), ``ratios.csv``, ``philly.csv``
(when run), ``summary.json`` and PNG plots. The summary's sentences, tables and plots: ``hkbu_online_pd_tables.py``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ..core.errors import DataNotFoundError, WattschedError
from ..policies.hkbu_online_pd import (
    LABEL,
    ladder_instance,
    random_instance,
    run_online,
    simultaneous,
    solve_offline,
    worst_order,
)
from .config import SimulationConfig, same_setting
from .protocol import EXPERIMENTS, Cell, Experiment, Outcome, Section

DEFAULT_RANDOM = 120
DEFAULT_ORDER_SEARCHES = 20
ORDER_SEARCH_STEPS = 150
LADDER_BATCHES = tuple(range(1, 9))
ADVERSARY_SEED = 1000  # order searches use instances 1000, 1001, ... (apart from the random ones)
# Read by compare.py (the reconstruction marks of an old philly.csv): keep the name.
PHILLY_POLICIES: dict[str, dict[str, str]] = {
    "hkbu-online-pd": {"allocation": "hkbu-online-pd"},
    "greedy-first-fit": {"queue": "arrival-greedy", "placement": "first-fit"},
    "edf-first-fit": {"queue": "edf-greedy", "placement": "first-fit"},
}
RATIOS_FILE, PHILLY_FILE, SUMMARY_JSON = "ratios.csv", "philly.csv", "summary.json"


class HkbuOnlinePdConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instances: int = Field(DEFAULT_RANDOM, ge=1, description="random small instances (seeds 0, 1, ...)")
    order_searches: int = Field(
        DEFAULT_ORDER_SEARCHES,
        ge=0,
        description="adversarial arrival orders found by local search (one instance each)",
    )
    eta: float = Field(1.0, description="price-function tuning parameter eta")
    philly: bool = Field(True, description="also replay Philly against greedy first-fit and EDF")
    max_jobs: int | None = Field(
        None, ge=0, description="Philly: keep the first N jobs by submission (0: all)"
    )
    deadline_slack: float = Field(
        3.0, description="Philly: deadline = submit + slack x duration (reconstructed)"
    )
    data_dir: str | None = same_setting("data_dir")


# --- the small instances ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """One small instance of the ratio study: `kind` random (seed `index`), ladder (`index` batches) or order (a
    worst-order search on instance `index`, from the search generator's state `rng_state`)."""

    kind: str
    index: int
    eta: float
    rng_state: Mapping[str, Any] | None = None


def order_search_states(count: int) -> list[Mapping[str, Any]]:
    """The state of the one search generator (seeded ADVERSARY_SEED) at the start of each order search, as if the
    searches ran one after another: each draws one pair per step whatever it finds, so the states are known up
    front and every search is a cell of its own with the same result."""
    rng = np.random.default_rng(ADVERSARY_SEED)
    states = []
    for i in range(count):
        states.append(rng.bit_generator.state)
        n = len(random_instance(ADVERSARY_SEED + i)[1])
        for _ in range(ORDER_SEARCH_STEPS if n > 1 else 0):  # as worst_order draws
            rng.choice(n, size=2, replace=False)
    return states


def ratio_row(instance: Instance) -> dict[str, Any]:
    """One row of ``ratios.csv``: the instance's online objective, offline optimum and their ratio."""
    eta, online_objective = instance.eta, None
    if instance.kind == "random":
        form, jobs = random_instance(instance.index)
        name, kind, how = f"random-{instance.index}", "random", "seeded random instance, arrival order"
    elif instance.kind == "ladder":
        form, jobs = ladder_instance(instance.index)
        name, kind = f"ladder-{instance.index}", "adversarial"
        how = f"value ladder, {instance.index} batch(es) of 8 rising from L to U"
    else:
        assert instance.rng_state is not None
        rng = np.random.default_rng()
        rng.bit_generator.state = dict(instance.rng_state)
        form, jobs = random_instance(instance.index)
        jobs, online_objective = worst_order(form, simultaneous(jobs), rng, ORDER_SEARCH_STEPS, eta)
        name, kind = f"order-{instance.index}", "adversarial"
        how = f"simultaneous arrivals, worst order of {ORDER_SEARCH_STEPS} local-search steps"
    pd_, offers = run_online(form, jobs, eta)
    online = pd_.objective if online_objective is None else online_objective
    off = solve_offline(form, jobs)
    if off.status != "optimal":
        raise WattschedError(f"{name}: the MILP stopped at '{off.status}' (gap {off.mip_gap:g}), not optimal")
    return {
        "instance": name,
        "kind": kind,
        "construction": how,
        "online_objective": online,
        "offline_optimum": off.objective,
        "empirical_ratio": off.objective / online if online > 0 else (1.0 if off.objective <= 0 else np.inf),
        "jobs": len(jobs),
        "online_admitted": sum(o.admitted for o in offers) if online_objective is None else np.nan,
        "offline_admitted": sum(c is not None for c in off.chosen),
        "instance_bound": pd_.bound()["competitive_ratio_bound"],
        "milp_variables": off.variables,
        "milp_solve_s": off.solve_s,
    }


# --- Philly -------------------------------------------------------------------------------------------------------


def philly_config(cfg: HkbuOnlinePdConfig, policy: str) -> SimulationConfig:
    return SimulationConfig(
        workload="philly", cluster="philly", max_jobs=cfg.max_jobs or None, deadline_slack=cfg.deadline_slack,
        data_dir=cfg.data_dir, performance="tables",  # one job model for every policy
        **PHILLY_POLICIES[policy],
    )  # fmt: skip


def philly_row(policy: str, result: Any, started: float) -> dict[str, Any]:
    """One row of ``philly.csv`` from a finished replay (`started`: when its cell began, for ``wall_s``)."""
    from ..policies.allocation.hkbu_online_pd import ENERGY_USD_PER_KWH, VALUE_USD_PER_GPU_H

    jobs, s = result.jobs, result.summary
    end, deadline = jobs["end_s"].to_numpy(float), jobs["deadline_s"].to_numpy(float)
    submit = jobs["submit_s"].to_numpy(float)
    on_time = np.isfinite(end) & (end <= deadline + 1e-6)
    # The policy's utility model, for every policy alike: value x GPU-hours x (1 - lam (T - a)/(d - a)).
    gpu_h = jobs["num_gpu"].to_numpy(float) * jobs["duration_s"].to_numpy(float) / 3600.0
    lateness = np.where(on_time, (end - submit) / np.maximum(deadline - submit, 1e-9), 0.0)
    utility = float((VALUE_USD_PER_GPU_H * gpu_h * (1.0 - 0.5 * lateness))[on_time].sum())
    energy = float(s.get("energy_kwh", 0.0))
    params = (s["policies"].get("allocation") or {}).get("parameters") or {}
    started_jobs = int(np.isfinite(jobs["start_s"].to_numpy(float)).sum())
    return {
        "policy": policy,
        "jobs": int(s["jobs_submitted"]),
        "started": started_jobs,
        "started_gpu_hours_share": float(
            gpu_h[np.isfinite(jobs["start_s"].to_numpy(float))].sum() / gpu_h.sum()
        ),
        "rejected": int(s["jobs_dropped"]),
        "completed": int(s["jobs_completed"]),
        "on_time": int(on_time.sum()),
        "deadline_misses": int(s.get("deadline_misses", 0)),
        "utility_usd": utility,
        "energy_kwh": energy,
        "energy_cost_usd": energy * ENERGY_USD_PER_KWH,
        "net_value_usd": utility - energy * ENERGY_USD_PER_KWH,
        "jct_mean_s": float(s["jct_s"].get("mean", np.nan) or np.nan),
        "gpu_allocation_mean": float(s["gpu_allocation_mean"]),
        "late_starts": int(params.get("late_starts", 0)),
        "non_default_clock_jobs": int(
            sum(v for k, v in (params.get("clock_choices") or {}).items() if k != "1")
        ),
        "wall_s": time.perf_counter() - started,
    }


def _records_extra(row: dict[str, Any]) -> dict[str, Any]:
    """The replay's own columns in ``records.csv`` beside the shared metrics (whole dollars)."""
    return {
        "started": row["started"],
        "rejected": row["rejected"],
        "on_time": row["on_time"],
        "utility_usd": round(row["utility_usd"]),
        "net_value_usd": round(row["net_value_usd"]),
    }


def ratio_frame(outcomes: Sequence[Outcome]) -> pd.DataFrame:
    """The rows of ``ratios.csv``: the small instances' outcomes (those that are not runs), in grid order."""
    return pd.DataFrame([o.raw for o in outcomes if o.metrics is None])


# --- the experiment -----------------------------------------------------------------------------------------------


@EXPERIMENTS.register("hkbu-online-pd")
class HkbuOnlinePd(Experiment):
    name = "hkbu-online-pd"
    description = (
        f"{LABEL} (a reconstruction): the online primal-dual algorithm's objective against the offline ILP "
        "optimum on small instances, beside its proven competitive ratio, and a Philly replay against greedy "
        "first-fit and EDF at default clocks (docs/hkbu-online-pd.md)."
    )
    config_model = HkbuOnlinePdConfig

    def __init__(self) -> None:
        # What the summary needs beyond the records (set by grid and charge, in the main process).
        self.notes: list[str] = []
        self.window = ""

    def grid(self, cfg: BaseModel) -> list[Cell]:
        assert isinstance(cfg, HkbuOnlinePdConfig)
        if not cfg.eta > 0:
            raise WattschedError(f"--eta must be positive, got {cfg.eta}")
        if not cfg.deadline_slack >= 1:
            raise WattschedError(
                f"--deadline-slack must be at least 1 (a job needs its duration), got {cfg.deadline_slack}"
            )
        self.notes, self.window = [], ""
        names = list(PHILLY_POLICIES) if cfg.philly else []
        if names:  # fail early (and cheaply) on missing data
            from ..data.registry import locate
            from .jobmodel import require_one_job_model

            try:
                locate("philly-pollux", "philly.csv", cfg.data_dir)
            except DataNotFoundError as exc:
                self.notes.append(f"Philly comparison skipped: {exc}")
                names = []
            else:
                require_one_job_model({n: philly_config(cfg, n) for n in names}, "hkbu-online-pd on Philly")
        # The replays first (they take longest); a replay's key is the registered policies it runs, its policy
        # label the name compare has always shown.
        cells = [
            Cell({"replay": "+".join(PHILLY_POLICIES[n].values())}, philly_config(cfg, n), n) for n in names
        ]
        cells += [
            Cell({"instance": f"random-{s}"}, task=Instance("random", s, cfg.eta))
            for s in range(cfg.instances)
        ]
        cells += [
            Cell({"instance": f"ladder-{b}"}, task=Instance("ladder", b, cfg.eta)) for b in LADDER_BATCHES
        ]
        for i, state in enumerate(order_search_states(cfg.order_searches)):
            seed = ADVERSARY_SEED + i
            cells.append(Cell({"instance": f"order-{seed}"}, task=Instance("order", seed, cfg.eta, state)))
        return cells

    def run_cell(self, cell: Cell) -> Outcome:
        if isinstance(cell.task, Instance):
            return Outcome(None, LABEL, raw=ratio_row(cell.task))
        from .compare import summary_metrics, summary_policy
        from .run import run_simulation
        from .window import window_input

        assert cell.config is not None
        policy, started = str(cell.task), time.perf_counter()
        try:
            result = run_simulation(cell.config, None)
        except WattschedError as exc:
            raise WattschedError(f"philly, {policy}: {exc}") from None
        row = philly_row(policy, result, started)
        metrics = summary_metrics(result.summary)
        metrics["cost_usd"] = row["energy_cost_usd"]  # at the policy's flat price (charged again in charge)
        _, bases = summary_policy(result.summary)
        return Outcome(metrics, policy, bases, _records_extra(row), window_input(result.summary), row)

    def charge(self, cells: Sequence[Cell], outcomes: Sequence[Outcome]) -> str:
        """The replays over their common window: energy, its cost at the flat price and the net value become
        common-window figures (in ``records.csv`` and ``philly.csv``), ``own_window_kwh`` keeps each run's own."""
        from ..policies.allocation.hkbu_online_pd import ENERGY_USD_PER_KWH

        self.window = super().charge(cells, outcomes)
        for o in outcomes:
            if o.metrics is None:
                continue
            row = o.raw
            row["energy_kwh"], row["own_window_kwh"] = o.metrics["energy_kwh"], o.metrics["own_window_kwh"]
            row["energy_cost_usd"] = row["energy_kwh"] * ENERGY_USD_PER_KWH
            row["net_value_usd"] = row["utility_usd"] - row["energy_cost_usd"]
            o.metrics["cost_usd"] = row["energy_cost_usd"]
            o.extra.update(_records_extra(row))
        return self.window

    def tables(
        self, cfg: BaseModel, cells: Sequence[Cell], outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from ..core.atomic import write_json
        from .grid import write_csv
        from .hkbu_online_pd_tables import summary_data

        assert isinstance(cfg, HkbuOnlinePdConfig)
        ratios = ratio_frame(outcomes)
        files = [out / RATIOS_FILE]
        write_csv(files[0], ratios)
        runs = [o.raw for o in outcomes if o.metrics is not None]
        if runs:
            files.append(out / PHILLY_FILE)
            write_csv(files[-1], pd.DataFrame(runs))
        else:  # a replay table of an earlier run here would be read as this one's
            (out / PHILLY_FILE).unlink(missing_ok=True)
        notes = [*self.notes, *([self.window] if self.window else [])]
        files.append(out / SUMMARY_JSON)
        write_json(files[-1], summary_data(cfg, ratios, runs, notes))
        return files

    def headline(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[str]:
        from .hkbu_online_pd_tables import headline

        assert isinstance(cfg, HkbuOnlinePdConfig)
        return headline(cfg, ratio_frame(outcomes), records)

    def sections(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[Section]:
        from .hkbu_online_pd_tables import sections

        assert isinstance(cfg, HkbuOnlinePdConfig)
        runs = [o.raw for o in outcomes if o.metrics is not None]
        return sections(cfg, ratio_frame(outcomes), runs, self.notes)

    def plots(
        self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from .hkbu_online_pd_tables import write_plots

        assert isinstance(cfg, HkbuOnlinePdConfig)
        return write_plots(out, ratio_frame(outcomes), cfg.eta)
