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

from ...core.cluster import MILLI
from ...core.states import STATUS_PENDING, STATUS_RUNNING
from ..contract import ALLOCATION_POLICIES, AllocationPolicy, BindContext, Capability, ClusterView, Decision
from ..planning import Consolidated, Plan

_FEW = 16  # waiting jobs put in order in plain Python; more in numpy


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
        self._submit = self.submit.tolist()
        # Whole GPUs only: every sum of demands is an exact integer, so the sum kept from one decision to the next
        # decides "everyone fits" exactly as the sum over all active jobs would.
        self._whole = bool((ctx.jobs.gpu_milli % MILLI == 0).all())
        self._gpus = (ctx.jobs.num_gpu * (ctx.jobs.gpu_milli // MILLI)).astype(np.int64).tolist()
        # The waiting and running jobs, kept from the view's change journal (read afresh from position -1).
        self._mark = -1
        self._pending: set[int] = set()
        self._running: set[int] = set()
        self._ran_before: set[int] = set()  # waiting jobs that ran before: the only ones the guard can reset
        self._active_gpus = 0  # GPUs asked for by the waiting and running jobs (whole GPUs only)
        self._all_tried = False  # the last decision tried every waiting job on the capacity there was

    def parameters(self) -> dict[str, Any]:
        return {
            "queues": len(self.thresholds) + 1,
            "thresholds_gpu_s": self.thresholds.tolist(),
            "starvation_knob": self.knob,
            "placement": "consolidated (one node, else whole nodes under one switch)",
            "source": "paper settings as stated by heyfey/vodascheduler (2 queues, 3600, knob 8)",
        }

    def native_round_plan(self) -> dict[str, Any] | None:
        """The compiled loop's plan (engine/replay_kernel.c, tiresias_pass): exactly this policy with consolidated
        placement on whole GPUs, before its first decision. The kernel mirrors `allocate` while it never
        contends (always `_start_waiting`) and hands the run back to the Python loop otherwise."""
        if type(self) is not Tiresias or type(self.placement) is not Consolidated or not self._whole:
            return None
        if self._mark != -1 or self._pending or self._running or self._all_tried:
            return None
        return {
            "rounds": "tiresias",
            "placement": "consolidated",
            "rank": self.placement.rank,
            "rank_weight": self.placement._rank_weight,
            "policy_done": self._native_done,
        }

    def _native_done(self) -> None:
        """After a compiled run: the sets are read afresh from the view if a decision ever follows."""
        self._mark = -1
        self._pending.clear()
        self._running.clear()
        self._ran_before.clear()
        self._active_gpus = 0
        self._all_tried = False

    def allocate(self, view: ClusterView) -> Decision:
        self._follow(view)
        if not self._pending:
            self._all_tried = False
            return Decision(keep_all=True)
        self._starvation_guard(view)
        capacity = int(view.spec.gpu_count[view.state.available].sum())
        if self._whole and self._active_gpus <= capacity:
            return self._start_waiting(view)
        self._all_tried = False
        return self._by_priority(view, float(capacity))

    def _follow(self, view: ClusterView) -> None:
        """Bring the waiting and running sets (and their GPUs) up to date from the jobs that changed."""
        changed, self._mark = view.job_changes(self._mark)
        pending, running, ran_before, gpus = self._pending, self._running, self._ran_before, self._gpus
        if changed is None:
            waiting, holding = view.pending_jobs().tolist(), view.running_jobs().tolist()
            pending.clear()
            pending.update(waiting)
            running.clear()
            running.update(holding)
            ran_before.clear()
            ran_before.update(j for j in waiting if view.previous_placement(j) is not None)
            self._active_gpus = sum(gpus[j] for j in waiting) + sum(gpus[j] for j in holding)
            return
        if not changed:
            return
        status = view.status
        active = self._active_gpus
        for job in changed if len(changed) == 1 else dict.fromkeys(changed):
            state = status[job]
            if state == STATUS_PENDING:
                if job not in pending:  # arrived, or stopped
                    if job in running:
                        running.discard(job)
                    else:
                        active += gpus[job]
                    pending.add(job)
                    if view.previous_placement(job) is not None:
                        ran_before.add(job)
            elif state == STATUS_RUNNING and view.target(job) is not None:
                if job not in running:  # started
                    if job in pending:
                        pending.discard(job)
                        ran_before.discard(job)
                    else:
                        active += gpus[job]
                    running.add(job)
            elif job in pending:  # rejected
                pending.discard(job)
                ran_before.discard(job)
                active -= gpus[job]
            elif job in running:  # completed
                running.discard(job)
                active -= gpus[job]
        self._active_gpus = active

    def _starvation_guard(self, view: ClusterView) -> None:
        """Waiting jobs that have waited, since they last ran, `knob` x their executed time go back to Q0."""
        if not self._ran_before:
            return  # a job that never ran has executed nothing: the guard cannot apply
        waiting = np.array(sorted(self._ran_before), dtype=np.int64)
        executed = view.executed_seconds(waiting) - self.executed_offset[waiting]
        waited = view.now - view.last_stop_s(waiting)
        starved = (executed > 0) & (waited >= self.knob * executed)
        if starved.any():
            jobs = waiting[starved]
            self.service_offset[jobs] = view.attained_gpu_seconds(jobs)
            self.executed_offset[jobs] = view.executed_seconds(jobs)

    def _start_waiting(self, view: ClusterView) -> Decision:
        """Everyone fits: nobody is preempted; the waiting jobs are placed in priority order (queue, then
        submission), on what the running jobs leave."""
        # Nothing changed since the last decision tried them all: those it could not place fit no better now
        # (placement fails only for lack of free capacity, and capacity has only been taken since).
        if self._all_tried and not view.changes.any:
            return Decision(keep_all=True)
        plan = Plan(view)
        for job in self._priority_order(view):
            plan.place(job, self.placement)
        self._all_tried = self.placement.monotone_failures
        return plan.decision()

    def _priority_order(self, view: ClusterView) -> list[int]:
        """The waiting jobs by queue, then submission, then index (as the lexsort over all jobs orders them)."""
        submit = self._submit
        if len(self._pending) > _FEW or self._ran_before:
            waiting = np.array(sorted(self._pending), dtype=np.int64)
            service = view.attained_gpu_seconds(waiting) - self.service_offset[waiting]
            queue = np.searchsorted(self.thresholds, service, side="right")
            return waiting[np.lexsort((self.submit[waiting], queue))].tolist()
        # A few jobs that never ran: no service attained, no offset, so all in one queue.
        return sorted(self._pending, key=lambda j: (submit[j], j))

    def _by_priority(self, view: ClusterView, capacity: float) -> Decision:
        """Walk the jobs in priority order: a job runs if its GPUs fit in what the jobs before it left."""
        running = view.running_jobs()
        pending = view.pending_jobs()
        active = np.concatenate([running, pending])
        is_running = np.zeros(active.size, dtype=bool)
        is_running[: running.size] = True
        service = view.attained_gpu_seconds(active) - self.service_offset[active]
        queue = np.searchsorted(self.thresholds, service, side="right")
        order = np.lexsort((self.submit[active], ~is_running, queue))
        demand = self.demand[active][order]
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
