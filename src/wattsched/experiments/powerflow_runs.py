"""One run of the powerflow experiment (``experiments/powerflow.py``): the settings every run shares
(:class:`Setup`), what tells a run apart (:class:`Task`), and the figures the experiment keeps of it
(:class:`RunRecord`, from :func:`run_task`)."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import WattschedError
from .config import SimulationConfig
from .window import window_input

QUEUE_BASELINE = "fifo"  # queue fifo + placement first-fit at the trace GPU count


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
    ) -> SimulationConfig:
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
    power_manager: str = ""
    started_at: float = float("nan")  # time.time() at its start: the grid's span, in the summary


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def run_config(setup: Setup, task: Task) -> SimulationConfig:
    return setup.config(task.policy, task.seed, task.cap, task.budget_kwh, task.until_s)


def run_task(setup: Setup, task: Task) -> RunRecord:
    """One simulation, reduced to the figures the experiment reports."""
    from ..policies.allocation.powerflow import BudgetBelowFloorError
    from .run import run_simulation

    started, started_at = time.perf_counter(), time.time()
    try:
        result = run_simulation(run_config(setup, task))
    except BudgetBelowFloorError as exc:
        if task.kind != "sweep":
            raise WattschedError(f"{task.describe()}: {exc}") from None
        nan = float("nan")
        return RunRecord(
            task, nan, nan, nan, nan, nan, 0, 0, nan, nan, 0, task.budget_kwh, "", 0.0, refused=str(exc),
            power_manager=setup.power_manager, started_at=started_at,
        )  # fmt: skip
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
        power_manager=setup.power_manager,
        started_at=started_at,
    )
