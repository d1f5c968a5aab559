"""``wattsched-green`` under an energy budget (docs/green.md, "Energy budget"): the budget is PowerFlow's
(``energy_budget.py``, shared with ``powerflow``: ``energy_budget_kwh`` and ``energy_budget_until_s`` from the
run's parameters, the energy metered so far, a budget below the run's floor refused before any job starts, and
``budget_binding`` in the parameters); what green does with it is its own rule:

* **projection**: the energy to go is every unfinished GPU job's remaining work at its trace GPU count and the
  default setting (its GPUs' draw plus their share of the node's base draw, as the mechanisms cost it), times a
  multiplier m = energy metered so far / the same model's energy of the work done so far (idle nodes, boots, CPU
  and the levers' own savings are in the meter, not the model), bounded as PowerFlow's static multiplier. m is 1
  until the work done reaches ``CALIBRATE_AFTER`` of all the work (too little to measure a ratio on);
* **rule**: from the first round where the metered energy plus m x the energy to go exceeds the budget, every
  round is *tight* (it stays so: loosening would spend again what the tight rounds saved): clocks
  take the power limit of least energy per unit of work that still meets the deadline (no ``max_slowdown``
  bound, also while jobs wait, and running jobs are retuned to it), shrink's weight falls to at most
  ``TIGHT_KWH_PER_JOB_HOUR`` (within ``max_stretch`` and the deadline) and ``gpus`` widens nothing.

The floor is green's own least: every GPU job's work on one GPU at its power limit of least energy per unit of
work (dynamic GPU draw above idle), plus the least static draw as PowerFlow counts it (a node's static draw per
GPU over the work's least GPU-seconds where idle nodes go off; the static draw over the arrival span where
every node stays on).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.gpus import gpu_model
from ...core.settings import DEFAULT_SETTING
from ...core.states import ON, STATUS_DONE, STATUS_DROPPED, STATUS_UNSCHEDULABLE
from ..contract import BindContext, ClusterView, Target
from ..planning import Plan, held_target
from . import energy_budget
from .energy_budget import NODES_STAY_ON

if TYPE_CHECKING:
    from .green import WattschedGreen

# The multiplier is measured once the work done reaches this fraction of all the work (before: 1).
CALIBRATE_AFTER = 0.01
# Shrink's weight in a tight round (kWh per job-hour): the least-energy point of shrink's measured grid on the
# tuning window (docs/green.md section 4: k = 0.25 used less energy than k = 0, whose stretched runs keep nodes on
# longer than the per-job model counts).
TIGHT_KWH_PER_JOB_HOUR = 0.25


class GreenBudget:
    """The budget state of one ``wattsched-green`` run (inert without a budget)."""

    def __init__(self) -> None:
        self.budget_j = math.inf
        self.until_s: float | None = None
        self.floor_kwh: float | None = None
        self.multiplier = 1.0
        self.rounds = self.rounds_tight = 0
        self.projected_kwh_last: float | None = None
        self.retuned = 0  # running jobs set to their least-energy limit in tight rounds
        self.tight_since: float | None = None  # when the projection first exceeded the budget

    @property
    def given(self) -> bool:
        return math.isfinite(self.budget_j)

    def bind(self, ctx: BindContext, policy: WattschedGreen) -> None:
        self.budget_j, self.until_s = energy_budget.bound_budget(ctx.params, self.budget_j, self.until_s)
        self.nodes_stay_on = ctx.params.get("power_manager", "always-on") in NODES_STAY_ON
        self.policy = policy
        self._energy_per_work: np.ndarray | None = None
        self._total_work: np.ndarray | None = None

    def parameters(self) -> dict[str, Any]:
        return {
            "energy_budget_kwh": energy_budget.budget_kwh_or_none(self.budget_j),
            "energy_budget_until_s": self.until_s,
            "floor_kwh": energy_budget.floor_or_none(self.floor_kwh),
            "budget_rule": "tight while metered + m x modelled energy to go > budget: least-energy power limits "
            f"(deadline kept), shrink weight at most {TIGHT_KWH_PER_JOB_HOUR}, no widening",
            "budget_multiplier_last": round(self.multiplier, 4),
            "budget_projected_kwh_last": self.projected_kwh_last,
            "budget_tight_since_s": self.tight_since,
            "rounds_budget_tight": self.rounds_tight,
            "budget_retuned_jobs": self.retuned,
            "budget_binding": energy_budget.budget_binding(self.budget_j, self.rounds_tight),
        }

    # --- the floor ------------------------------------------------------------------------------------------
    def check_floor(self, view: ClusterView) -> None:
        """On the first round: refuse a budget below the run's floor (module docstring)."""
        if self.floor_kwh is not None or not self.given:
            return
        p = self.policy
        jobs = np.flatnonzero(p.gpus > 0)
        work = view.remaining_work(jobs)
        dynamic = least_gpu_s = 0.0
        for j, w in zip(jobs.tolist(), work.tolist(), strict=True):
            code = int(p.codes[j])
            if code < 0:
                continue
            idle = gpu_model(p.spec.gpu_models[code]).idle_w
            rate1 = p.perf.solo_rate(j, code, 1, 1, 1, DEFAULT_SETTING)
            if rate1 <= 0:
                continue
            least_gpu_s += w / rate1
            dynamic += (
                w
                / rate1
                * min(
                    (p.perf.gpu_power_w(j, code, s) - idle) / speed
                    for s, speed, _ in p._limits(code)
                    if speed > 0
                )
            )
        on = max(int(np.count_nonzero(view.power_state == ON)), 1)
        static_now = float(view.power_w() or 0.0)
        gpu_jobs = p.gpus > 0
        span = 0.0
        if gpu_jobs.any():
            span = max(float(p.jobs.submit_s[gpu_jobs].max()), self.until_s or 0.0)
            span -= float(p.jobs.submit_s[gpu_jobs].min())
        static = energy_budget.least_static_j(
            self.nodes_stay_on, static_now, span, static_now / on, p.gpus_per_node, least_gpu_s
        )
        self.floor_kwh = energy_budget.refuse_below_floor(self.budget_j, dynamic, static)

    # --- the projection -------------------------------------------------------------------------------------
    def tight(self, view: ClusterView) -> bool:
        """Whether the metered energy plus the projected energy to go exceeds the budget (counted)."""
        if not self.given:
            return False
        p = self.policy
        if self._energy_per_work is None:
            jobs = np.arange(len(p.jobs))
            seconds_per_work = p._seconds_left(view, jobs) / np.maximum(view.remaining_work(jobs), 1e-12)
            draw = np.array([p._draw_w(j, DEFAULT_SETTING) if p.gpus[j] > 0 else 0.0 for j in jobs.tolist()])
            self._energy_per_work = draw * seconds_per_work
            self._total_work = view.remaining_work(jobs)
        done = np.isin(view.status, (STATUS_DONE, STATUS_DROPPED, STATUS_UNSCHEDULABLE))
        remaining = np.where(done, 0.0, view.remaining_work(np.arange(len(p.jobs))))
        assert self._total_work is not None
        to_go = float((remaining * self._energy_per_work).sum())
        done_j = float((np.maximum(self._total_work - remaining, 0.0) * self._energy_per_work).sum())
        used = float(view.energy_used_j() or 0.0)
        total = float((self._total_work * self._energy_per_work).sum())
        if total > 0 and done_j >= CALIBRATE_AFTER * total:
            self.multiplier = energy_budget.bounded_multiplier(used, done_j, self.multiplier)
        projected = used + self.multiplier * to_go
        self.projected_kwh_last = projected / energy_budget.J_PER_KWH
        self.rounds += 1
        # Once tight, tight for the rest of the run: levers set back to the default would spend again what the
        # tight rounds saved, and a projection near the budget would flip them every round.
        self.tight_since = (
            self.tight_since
            if self.tight_since is not None
            else (view.now if projected > self.budget_j else None)
        )
        tight = self.tight_since is not None
        self.rounds_tight += int(tight)
        return tight

    def shrink_weight(self, kwh_per_job_hour: float, tight: bool) -> float:
        """Shrink's weight this round: the operator's, or at most ``TIGHT_KWH_PER_JOB_HOUR`` when tight."""
        return min(kwh_per_job_hour, TIGHT_KWH_PER_JOB_HOUR) if tight else kwh_per_job_hour

    # --- the levers on running jobs -------------------------------------------------------------------------
    def retune_running(self, view: ClusterView, plan: Plan, running: np.ndarray, started: set[int]) -> None:
        """In a tight round, running training jobs at the default setting take the power limit of least energy
        that still meets their deadline at the GPUs they hold (a retune, no restart)."""
        p = self.policy
        if running.size == 0:
            return
        held = view.held_gpus(running).tolist()
        left_work = view.remaining_work(running).tolist()
        for job, gpus, work in zip(running.tolist(), held, left_work, strict=True):
            if job in started or job in p._slowed or p.service[job] or int(p.codes[job]) < 0 or gpus <= 0:
                continue
            now_target = held_target(view, job)
            if now_target.setting != DEFAULT_SETTING:
                continue
            code = int(p.codes[job])
            n = max(math.ceil(gpus - 1e-9), 1)
            rate = p.perf.solo_rate(job, code, n, -(-n // p.gpus_per_node), 1, DEFAULT_SETTING)
            if rate <= 0:
                continue
            seconds_left = work / rate
            if p._slack_s(job, view.now, seconds_left) < 0:
                continue
            setting = p._clock(job, view.now, seconds_left, unbounded=True)
            if setting is DEFAULT_SETTING:
                continue
            plan.release(job)
            plan.take(job, Target(now_target.placement, now_target.share_milli, setting))
            p._slowed.add(job)
            self.retuned += 1
