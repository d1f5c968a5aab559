"""`wattsched experiment powerflow`: PowerFlow-reconstructed against baselines at equal energy.

For every seed (42, 43, ...) and baseline the baseline runs at the maximum clock; its energy E_b over the seed's
common window becomes the budget of a PowerFlow run (``energy_budget_kwh = E_b`` over that window), and the two
are compared on mean JCT, p95 JCT and makespan ("under the same energy consumption", docs/seed-systems.md §2).
Each seed also runs

* every baseline at static SM-clock caps (``power_model: dvfs``, ``gpu_sm_clock``), so that a baseline spans several
  energy levels;
* PowerFlow at budgets from 60 % to 120 % of the seed's largest E_b, and once without a budget (its shortest-JCT
  operating point, which tells whether an under-spent budget was more than PowerFlow can use).

All runs share the performance model (throughput tables, ``performance: tables``), the model assignment
(``assign_models: always`` with the same seed), the power model (``dvfs``) and the cluster. The whole grid runs
once per power manager (always-on and idle-timeout by default), each budget the energy its baseline measured
under the same manager.

A seed's budgets come from its own runs, so those runs are one cell (:class:`SeedRuns`: its baselines at the
maximum clock and PowerFlow without a budget, then its equal-energy runs and budget sweep); each of them still has
its own row (an :class:`OfSeed` cell, filled in from the seed's cell when the runs are charged). The clock-capped
baselines are cells of their own.

Outputs in DIR, besides the protocol's ``records.csv``, ``summary.md`` and ``config.yaml``: per power manager
``results.csv`` (one row per baseline and seed), ``sweep.csv`` (the JCT-vs-energy points) and ``runs.csv`` (every
run), in ``DIR/<power manager>/`` with several managers (and ``headline.csv``, one row per manager and baseline),
else in DIR; PNG plots (``powerflow_plots.py``). Tables: ``powerflow_tables.py``; findings and summary sections:
``powerflow_summary.py``.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ..core.errors import UnknownNameError, WattschedError
from .config import same_setting
from .jobmodel import require_one_job_model
from .parallel import FIRST_SEED
from .powerflow_runs import QUEUE_BASELINE, RunRecord, Setup, Task, policy_knobs, run_config, run_task
from .powerflow_tables import POLICY, results_frame, runs_frame, sweep_frame
from .protocol import EXPERIMENTS, Cell, Experiment, Outcome, Section
from .window import rebase

DEFAULT_BASELINES = ("fifo", "tiresias", "gandiva", "optimus-greedy")
# SM-clock fractions of f_max (dvfs accepts 0.5-1 on the catalog GPUs)
DEFAULT_CAPS = (1.0, 0.9, 0.8, 0.7, 0.6)
DEFAULT_POWER_MANAGERS = ("always-on", "idle-timeout")
BUDGET_RANGE = (0.6, 1.2)  # sweep: fractions of the seed's largest baseline energy


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


# -- the config ---------------------------------------------------------------------------------------------


class PowerFlowConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workload: str = Field(description="workload name or CSV path, e.g. pollux/workload-6")
    cluster: str = Field(description="cluster name or YAML path, e.g. n16g4")
    gpu_type: str | None = Field(
        None, description="GPU model for every node of a single-model cluster (e.g. T4)"
    )
    seeds: int = Field(3, ge=1, description="runs per setting, seeds 42, 43, ...")
    baselines: list[str] = Field(
        default_factory=lambda: list(DEFAULT_BASELINES),
        description="comma-separated: fifo (queue fifo + first-fit) and allocation policies",
    )
    budget_points: int = Field(
        7, ge=1, description="PowerFlow budgets from 60 % to 120 % of the largest baseline energy"
    )
    caps: list[float] = Field(
        default_factory=lambda: list(DEFAULT_CAPS),
        description="comma-separated SM-clock caps (fractions of f_max) for the baselines",
    )
    power_manager: list[str] = Field(
        default_factory=lambda: list(DEFAULT_POWER_MANAGERS),
        description="comma-separated power managers (always-on, idle-timeout, forecast): the whole grid runs once "
        "under each, every run of a grid under the same one; with several, each one's tables in DIR/<manager>/ "
        "and DIR/headline.csv",
    )
    # The same options as simulate's, from the same config fields.
    profiles: str | None = same_setting("profiles")
    columns: dict[str, str] = same_setting("columns")
    data_dir: str | None = same_setting("data_dir")


@dataclass
class Prepared:
    """The checked settings and what the loaded inputs say (the job count, the cluster)."""

    setup: Setup
    baselines: list[str]
    seeds: list[int]
    caps: list[float]
    fractions: list[float]
    jobs: int
    cluster: dict[str, Any]
    gpu_models: list[str]
    power_managers: list[str]


def prepare(cfg: PowerFlowConfig) -> Prepared:
    """Check every setting and load the workload and cluster once, before any run starts."""
    from .run import load_inputs

    managers = check_power_managers(cfg.power_manager)
    names = check_baselines(cfg.baselines)
    fractions = budget_fractions(cfg.budget_points)
    setup = Setup(
        cfg.workload, cfg.cluster, cfg.gpu_type, managers[0], cfg.data_dir, dict(cfg.columns), cfg.profiles
    )
    inputs = load_inputs(setup.config(names[0], FIRST_SEED))
    require_one_job_model(
        {n: setup.config(n, FIRST_SEED) for n in [*names, "powerflow"]}, "the powerflow experiment"
    )
    if len(inputs.jobs) == 0:
        raise WattschedError(f"workload '{cfg.workload}' has no jobs")
    if not inputs.has_times:
        raise WattschedError(
            f"workload '{cfg.workload}' has no submission times; the experiment needs a trace in time"
        )
    models = list(inputs.cluster.gpu_models)
    return Prepared(
        setup=setup,
        baselines=names,
        seeds=list(range(FIRST_SEED, FIRST_SEED + cfg.seeds)),
        caps=check_caps(cfg.caps, models),
        fractions=fractions,
        jobs=len(inputs.jobs),
        cluster=inputs.cluster.describe(),
        gpu_models=models,
        power_managers=managers,
    )


@functools.lru_cache(maxsize=4)
def _prepared(cfg_json: str) -> Prepared:
    # the grid, its second round, the tables, sections and plots all need it: the workload is loaded once
    return prepare(PowerFlowConfig.model_validate_json(cfg_json))


# -- the grid -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OneRun:
    """One run of the grid: its setup (the power manager's) and its task."""

    setup: Setup
    task: Task


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


def _keys(power_manager: str, task: Task) -> dict[str, Any]:
    # "" rather than None where a key does not apply: an empty cell in records.csv and in summary.md
    return {
        "power_manager": power_manager,
        "kind": task.kind,
        "baseline": task.baseline or "",
        "seed": task.seed,
        "sm_clock_cap": "" if task.cap is None else task.cap,
        "budget_fraction": "" if task.budget_fraction is None else task.budget_fraction,
    }


def _metrics(r: RunRecord) -> dict[str, float]:
    """A run's figures under the comparison's names: energy over the seed's common window, the run's own beside."""
    return {
        "jobs_completed": float(r.jobs_completed),
        "energy_kwh": r.window_kwh,
        "own_window_kwh": r.energy_kwh,
        "jct_mean_s": r.mean_jct_s,
        "jct_p95_s": r.p95_jct_s,
        "queue_delay_mean_s": r.queue_delay_mean_s,
        "makespan_s": r.makespan_s,
        "gpu_allocation": r.gpu_allocation_mean,
        "restarts": float(r.restarts),
    }


@dataclass
class ManagerGrid:
    """One power manager's runs and tables."""

    runs: list[RunRecord]  # charged over their seed's common window
    refused: list[RunRecord]
    results: pd.DataFrame
    sweep: pd.DataFrame
    summary: dict[str, Any]


# -- the experiment -----------------------------------------------------------------------------------------
@EXPERIMENTS.register("powerflow")
class PowerFlowExperiment(Experiment):
    name = "powerflow"
    description = (
        "PowerFlow-reconstructed against baselines at equal energy (each baseline's energy is PowerFlow's "
        "budget), with budget and clock-cap sweeps; one grid per power manager."
    )
    config_model = PowerFlowConfig

    def grid(self, cfg: BaseModel) -> list[Cell]:
        """The first round: every baseline at every clock cap and PowerFlow without a budget, per power manager
        and seed (the second, :meth:`next_cells`, uses their energies as budgets)."""
        assert isinstance(cfg, PowerFlowConfig)
        prep = _prepared(cfg.model_dump_json())
        cells = []
        for pm in prep.power_managers:
            setup = replace(prep.setup, power_manager=pm)
            for s in prep.seeds:
                runs = [Task("baseline", b, s, cap) for b in prep.baselines for cap in prep.caps]
                runs.append(Task("no-budget", POLICY, s))
                cells += [Cell(_keys(pm, t), task=OneRun(setup, t)) for t in runs]
        return cells

    def next_cells(self, cfg: BaseModel, cells: Sequence[Cell], outcomes: Sequence[Outcome]) -> list[Cell]:
        """The second round, once: per power manager and seed, PowerFlow at each full-clock baseline's energy
        (over the window of the seed's baselines and no-budget run) and the budget sweep."""
        assert isinstance(cfg, PowerFlowConfig)
        if any(c.task.task.kind in ("equal", "sweep") for c in cells):
            return []
        prep = _prepared(cfg.model_dump_json())
        firsts: dict[tuple[str, int], dict[str, RunRecord]] = {}
        setups: dict[str, Setup] = {}
        for c, o in zip(cells, outcomes, strict=True):
            run, t = o.raw, c.task.task
            setups[c.keys["power_manager"]] = c.task.setup
            if t.kind == "no-budget" or (t.kind == "baseline" and t.cap == 1.0):
                firsts.setdefault((c.keys["power_manager"], t.seed), {})[t.policy] = run
        out = []
        for (pm, seed), runs in firsts.items():
            for t in second_phase(seed, runs, prep.baselines, prep.fractions):
                out.append(Cell(_keys(pm, t), task=OneRun(setups[pm], t)))
        return out

    def start_order(self, cells: Sequence[Cell]) -> list[int]:
        return sorted(
            range(len(cells)), key=lambda i: cells[i].task.task.policy != POLICY
        )  # PowerFlow's longest

    def run_cell(self, cell: Cell) -> Outcome:
        task = cell.task
        assert isinstance(task, OneRun)
        return Outcome(None, task.task.policy, raw=run_task(task.setup, task.task))

    def charge(self, cells: Sequence[Cell], outcomes: Sequence[Outcome]) -> str:
        """Charge the runs over the common window of their seed and power manager into ``window_kwh`` (rebase's
        `target`: the record's own energy stays, as budgets are defined on it), and set the rows' metrics,
        reconstruction bases and own columns (on PowerFlow's equal-energy rows, the comparison of
        ``results.csv``). A run PowerFlow refused (a budget below what it can use) has no row."""
        from .compare import reconstruction_bases

        setups = {c.keys["power_manager"]: c.task.setup for c in cells}
        rows = [o for o in outcomes if not o.raw.refused]
        line = rebase(
            [o.raw for o in rows],
            lambda r: (r.power_manager, r.task.seed),
            lambda r: run_config(setups[r.power_manager], r.task),
            "seed and power manager",
            target="window_kwh",
        )
        tasks = [c.task.task for c in cells]
        baselines = list(dict.fromkeys(t.policy for t in tasks if t.kind == "baseline"))
        seeds = list(dict.fromkeys(t.seed for t in tasks))
        results = {}
        for pm in setups:
            runs = [o.raw for o in rows if o.raw.power_manager == pm]
            results[pm] = results_frame(runs, baselines, seeds).set_index(["baseline", "seed"])
        for o in rows:
            r: RunRecord = o.raw
            budget = r.budget_seen_kwh if r.budget_seen_kwh is not None else r.task.budget_kwh
            extra: dict[str, Any] = {"budget_kwh": "" if budget is None else budget, "budget_error_pct": "",
                                     "budget_status": "", "jct_ratio": ""}  # fmt: skip
            if r.task.kind == "equal":
                row = results[r.power_manager].loc[(r.task.baseline, r.task.seed)]
                extra.update(
                    budget_error_pct=row["budget_error_pct"],
                    budget_status=row["budget_status"],
                    jct_ratio=row["jct_ratio"],
                )
            # as the tables write them (six significant digits): also how summary.md shows them
            extra = {k: float(f"{v:.6g}") if isinstance(v, float) else v for k, v in extra.items()}
            o.metrics = _metrics(r)
            o.bases = reconstruction_bases(policy_knobs(o.policy))
            o.extra = extra
            o.window_input = r.window_input
        return line

    def manager_grids(
        self, cfg: BaseModel, outcomes: Sequence[Outcome]
    ) -> tuple[Prepared, dict[str, ManagerGrid]]:
        """Each power manager's runs (charged) and tables; the records come from the rows' outcomes."""
        from .powerflow_summary import summarise

        about = _prepared(cfg.model_dump_json())
        records = [o.raw for o in outcomes if isinstance(o.raw, RunRecord)]
        grids = {}
        for pm in about.power_managers:
            runs = [r for r in records if r.power_manager == pm and not r.refused]
            refused = [r for r in records if r.power_manager == pm and r.refused]
            results = results_frame(runs, about.baselines, about.seeds)
            sweep = sweep_frame(runs)
            grids[pm] = ManagerGrid(
                runs, refused, results, sweep, summarise(about, pm, runs, results, sweep, refused)
            )
        return about, grids

    def tables(
        self, cfg: BaseModel, cells: Sequence[Cell], outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from .grid import write_csv
        from .powerflow_summary import headline_frame

        _, grids = self.manager_grids(cfg, outcomes)
        folders = len(grids) > 1
        files = []
        for pm, g in grids.items():
            where = out / pm if folders else out
            where.mkdir(parents=True, exist_ok=True)
            for name, frame in (
                ("results.csv", g.results),
                ("sweep.csv", g.sweep),
                ("runs.csv", runs_frame(g.runs)),
            ):
                write_csv(where / name, frame)
                files.append(where / name)
        if folders:
            write_csv(out / "headline.csv", headline_frame({pm: g.summary for pm, g in grids.items()}))
            files.append(out / "headline.csv")
        return files

    def headline(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[str]:
        from .powerflow_summary import headline_lines

        return headline_lines(records)

    def sections(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[Section]:
        from .powerflow_summary import summary_sections

        about, grids = self.manager_grids(cfg, outcomes)
        starts = [r.started_at for g in grids.values() for r in g.runs]
        wall = time.time() - min(starts)  # resumed runs count from their first start
        return summary_sections(about, {pm: g.summary for pm, g in grids.items()}, wall, len(grids) > 1)

    def plots(
        self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from .powerflow_plots import write_plots

        about, grids = self.manager_grids(cfg, outcomes)
        files = []
        for pm, g in grids.items():
            suffix = f"_{pm}" if len(grids) > 1 else ""
            files += write_plots(out, about, g.summary, g.results, g.sweep, suffix)
        return files
