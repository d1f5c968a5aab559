"""CE-DLA-reconstructed as an allocation policy: a rolling-horizon plan over day-ahead prices (docs/cedla.md §5).

Every hour, and at every arrival and completion, the policy plans the next `horizon_h` hours with the greedy
planner (``cedla_greedy.solve_greedy``) and carries out the plan's first hour:

* each training job's work left, in GPU-hours at its trace GPU count, must be done by its deadline (a deadline
  beyond the horizon leaves only the work that cannot fit after it); a job without a deadline, or one that can no
  longer meet it, runs now;
* jobs the plan gives GPUs in the first hour run (placed best-fit, at their trace GPU count); running jobs it
  defers are paused with their state saved;
* jobs the plan puts in a later hour are deferred (``Decision.defer``), so the run's power manager boots nothing
  for them and switches empty nodes off (dynamic right-sizing: use ``idle-timeout``).

Training only so far: inference services enter when the engine carries them (issue 10).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...core.errors import WattschedError
from ...core.gpus import gpu_model
from ...core.jobs import TRAINING
from ...energy.dvfs import DEFAULT_SETTING
from ...energy.power_models import idle_node_draw_w
from ..base import PLACEMENT_POLICIES
from ..contract import ALLOCATION_POLICIES, AllocationPolicy, BindContext, ClusterView, Decision
from ..planning import Plan, job_gpu_codes
from .cedla_greedy import solve_greedy
from .cedla_milp import PlanInstance


@ALLOCATION_POLICIES.register("cedla")
class CeDla(AllocationPolicy):
    name = "cedla"
    description = (
        "price-aware rolling 24-h plan of training work over day-ahead prices (CE-DLA-reconstructed)"
    )
    reconstructed = True
    basis = (
        "CE-DLA (Kang, Lee, Kim, Energies 15(2):474, 2022), abstract only: price-aware allocation over time slots "
        "with dynamic right-sizing; rolling-horizon greedy reconstructed (docs/cedla.md)"
    )
    default_round_s = 3600.0
    decide_on_arrival = True
    decide_on_completion = True

    def __init__(self, horizon_h: int = 24) -> None:
        if horizon_h < 1:
            raise ValueError(f"horizon_h must be at least 1, got {horizon_h}")
        self.horizon_h = int(horizon_h)
        self.placement = PLACEMENT_POLICIES.create("best-fit")
        self.deferred = 0
        self.plans = 0

    def bind(self, ctx: BindContext) -> None:
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        self.jobs, self.spec, self.perf = ctx.jobs, ctx.spec, ctx.perf
        self.codes = job_gpu_codes(ctx)
        spec = ctx.spec
        codes = np.maximum(spec.gpu_model_code, 0)
        self.gpu_idle_w = (
            np.array([gpu_model(spec.gpu_models[c]).idle_w for c in codes]) if spec.num_nodes else np.zeros(0)
        )
        self.node_on_w = idle_node_draw_w(spec)  # the price of keeping a node on
        self.gpus_per_node = int(spec.gpu_count.max()) if spec.num_nodes else 1

    def parameters(self) -> dict[str, Any]:
        return {
            "horizon_h": self.horizon_h,
            "planner": "greedy (cedla_greedy.solve_greedy), re-planned every round",
            "jobs_without_deadline": "run as soon as they fit (not deferrable)",
            "placement": "best-fit at the trace GPU count",
            "plans": self.plans,
            "deferrals": self.deferred,
        }

    def _gpu_hours_left(self, view: ClusterView, job: int) -> float:
        n = max(int(self.jobs.num_gpu[job]), 1)
        code = int(self.codes[job])
        per_node = self.gpus_per_node or 1
        rate = self.perf.solo_rate(job, code, n, -(-n // per_node), 1, DEFAULT_SETTING)
        return float(view.remaining_work(np.array([job]))[0]) / rate / 3600.0 * n

    def allocate(self, view: ClusterView) -> Decision:
        running, pending = view.running_jobs(), view.pending_jobs()
        active = np.concatenate([running, pending])
        if active.size == 0:
            return Decision()
        horizon = self.horizon_h
        prices = view.price_ahead_usd_per_mwh(horizon)
        if prices is None:
            prices = np.ones(horizon)  # no price: every hour alike, so the plan runs work as early as it can
        urgent, planned, work, last = [], [], [], []
        for j in active.tolist():
            n = int(self.jobs.num_gpu[j])
            if n == 0 or self.jobs.job_class[j] != TRAINING:
                urgent.append(j)
                continue
            left = self._gpu_hours_left(view, j)
            deadline = self.jobs.deadline_s[j]
            if math.isnan(deadline):
                urgent.append(j)
                continue
            slots = int((deadline - view.now) // 3600)
            inside = left - n * max(slots - horizon, 0)  # what cannot wait until after the horizon
            if slots <= 0 or left > n * slots:
                urgent.append(j)  # too late to plan: run now
            elif inside > 1e-9:
                planned.append(j)
                work.append(inside)
                last.append(min(slots, horizon))
            else:
                planned.append(j)  # nothing must run inside the horizon: it may wait
                work.append(0.0)
                last.append(horizon)
        run_now = set(urgent) | self._first_hour(planned, work, last, prices)
        plan = Plan(view)
        for j in running.tolist():
            if j not in run_now:
                plan.release(j)
                self.deferred += 1
        waiting = [j for j in pending.tolist() if j in run_now]
        waiting.sort(
            key=lambda j: (self.jobs.deadline_s[j] if not math.isnan(self.jobs.deadline_s[j]) else -1, j)
        )
        for j in waiting:
            plan.place(j, self.placement)
        # Jobs the plan puts in a later hour are deferred: power managers boot no node for them (DRS).
        later = [j for j in active.tolist() if j not in run_now]
        return plan.decision(running, save_on_stop=True, defer=later)

    def _first_hour(
        self, jobs: list[int], work: list[float], last: list[int], prices: np.ndarray
    ) -> set[int]:
        """Jobs the greedy plan gives GPUs in the first hour."""
        if not jobs:
            return set()
        spec = self.spec
        busy = np.array([self.perf.gpu_power_w(j, int(self.codes[j]), DEFAULT_SETTING) for j in jobs])
        idle = self.gpu_idle_w[0] if self.gpu_idle_w.size else 0.0
        inst = PlanInstance(
            gpus=spec.gpu_count.astype(np.int64),
            node_on_w=self.node_on_w,
            boot_j=np.zeros(spec.num_nodes),
            boot_share=np.zeros(spec.num_nodes),
            price=np.asarray(prices, dtype=float) / 1000.0,  # $/MWh -> $/kWh
            job_work_gpu_h=np.asarray(work),
            job_max_gpus=self.jobs.num_gpu[jobs].astype(float),
            job_first_slot=np.zeros(len(jobs), dtype=np.int64),
            job_deadline_slot=np.asarray(last, dtype=np.int64),
            job_busy_w=busy - idle,
            service_gpus=np.zeros((0, len(prices))),
            service_busy_w=np.zeros(0),
            initially_on=np.ones(spec.num_nodes, dtype=bool),
            job_names=tuple(str(self.jobs.job_id[j]) for j in jobs),
        )
        try:
            plan = solve_greedy(inst)
        except WattschedError:
            return set(jobs)  # no plan fits every deadline: run everything it can now
        self.plans += 1
        first = plan.job_gpus[:, :, 0].sum(axis=1)
        return {j for j, g in zip(jobs, first, strict=True) if g > 0}
