"""Tiresias discretised 2D-LAS (Gu et al., NSDI'19), on the allocation contract (docs/baselines.md, Tiresias).

* Attained service = GPUs held x time held (GPU-seconds). Every job enters queue Q0 and is demoted to Q(k+1) when
  its attained service passes threshold k.
* Order: queue, then running jobs before pending ones, then submission time. Walking that order, a job runs if
  its GPUs fit in what the jobs before it left; running jobs that no longer fit are preempted; a pending job
  that fits but cannot be placed now (fragmentation) is skipped and later jobs may start.
* Starvation guard: a pending job that has waited, since it last ran, at least `starvation_knob` x its executed
  time returns to Q0 with its attained service counted from zero.
* Placement: consolidated (`yarn`): one node when the job fits, else whole nodes under one switch.

Settings: thresholds (GPU-seconds) and the knob are parameters. Defaults: 2 queues split at 3,600 GPU-seconds
and knob 8, the paper's settings as a secondary source states them (heyfey/vodascheduler
``pkg/algorithm/tiresias.go``); the Tiresias simulator's defaults are [3,250, 7,200] without the guard. The
original simulator charges nothing for a preemption; wattsched charges its restart model to every policy alike.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ...core.states import STATUS_RUNNING
from ..contract import ALLOCATION_POLICIES, AllocationPolicy, BindContext, Capability, ClusterView, Decision
from ..planning import Consolidated, Plan


@ALLOCATION_POLICIES.register("tiresias")
class Tiresias(AllocationPolicy):
    name = "tiresias"
    needs = frozenset({Capability.PREEMPTS})
    learned_state = (
        "service_offset",
        "executed_offset",
    )  # kept when live jobs are added (contract.AllocationPolicy)
    description = "discretised 2D-LAS with starvation guard, preemptive, consolidated placement (Tiresias)"
    decide_on_arrival = True
    decide_on_completion = True

    def __init__(self, thresholds_gpu_s: tuple[float, ...] = (3600.0,), starvation_knob: float = 8.0):
        if any(b <= a for a, b in itertools.pairwise(thresholds_gpu_s)):
            raise ValueError("Tiresias thresholds must increase")
        self.thresholds = np.asarray(thresholds_gpu_s, dtype=np.float64)
        self.knob = float(starvation_knob)
        self.placement = Consolidated()

    def bind(self, ctx: BindContext) -> None:
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        n = len(ctx.jobs)
        self.service_offset = np.zeros(n)  # attained service forgiven by the starvation guard
        self.executed_offset = np.zeros(n)
        self.demand = ctx.jobs.num_gpu * ctx.jobs.gpu_milli / 1000.0
        self.submit = ctx.jobs.submit_s

    def parameters(self) -> dict[str, Any]:
        return {
            "queues": len(self.thresholds) + 1,
            "thresholds_gpu_s": self.thresholds.tolist(),
            "starvation_knob": self.knob,
            "placement": "consolidated (one node, else whole nodes under one switch)",
            "source": "paper settings as stated by heyfey/vodascheduler (2 queues, 3600, knob 8)",
        }

    def allocate(self, view: ClusterView) -> Decision:
        running = view.running_jobs()
        pending = view.pending_jobs()
        if pending.size == 0:
            return Decision(keep=running)
        active = np.concatenate([running, pending])
        is_running = np.zeros(active.size, dtype=bool)
        is_running[: running.size] = True
        # Starvation guard: long-waiting pending jobs go back to Q0.
        executed = view.executed_seconds(pending) - self.executed_offset[pending]
        waited = view.now - view.last_stop_s(pending)
        starved = (executed > 0) & (waited >= self.knob * executed)
        if starved.any():
            jobs = pending[starved]
            self.service_offset[jobs] = view.attained_gpu_seconds(jobs)
            self.executed_offset[jobs] = view.executed_seconds(jobs)
        service = view.attained_gpu_seconds(active) - self.service_offset[active]
        queue = np.searchsorted(self.thresholds, service, side="right")
        order = np.lexsort((self.submit[active], ~is_running, queue))
        demand = self.demand[active][order]
        capacity = float(view.spec.gpu_count[view.state.available].sum())
        plan = Plan(view)
        if float(demand.sum()) <= capacity:
            # Everyone fits: nobody is preempted; place the pending jobs in priority order.
            for job in active[order][~is_running[order]].tolist():
                plan.place(job, self.placement)
            return plan.decision(running)
        ordered = active[order]
        left = capacity
        chosen = np.zeros(ordered.size, dtype=bool)
        for k, need in enumerate(demand.tolist()):
            if need <= left:
                chosen[k] = True
                left -= need
        for job in ordered[~chosen].tolist():
            if view.status[job] == STATUS_RUNNING:
                plan.release(job)
        for job in ordered[chosen].tolist():
            if view.status[job] != STATUS_RUNNING:
                plan.place(job, self.placement)
        # GPUs a chosen job could not use (fragmentation) go, in priority order, back to a preempted job that
        # still fits where it was, or to a later pending job.
        state = plan.state
        free = float(state.gpu_left_total[state.available].sum()) / 1000.0
        for job in ordered[~chosen].tolist():
            if self.demand[job] > free:  # cannot fit in what is left: skip the search (queues of thousands)
                continue
            if view.status[job] == STATUS_RUNNING:
                fitted = plan.restore(job)
            else:
                fitted = plan.place(job, self.placement) is not None
            if fitted:
                free -= self.demand[job]
        return plan.decision(running)
