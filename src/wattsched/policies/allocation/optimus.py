"""Optimus, GPU-only greedy form (Peng et al., EuroSys'18; the form Pollux's simulator uses, "Optimus+Oracle",
docs/baselines.md, Optimus), on the allocation contract.

Every round:

1. every unfinished job gets one GPU, oldest first, while GPUs last;
2. then, one GPU at a time, the job with the largest gain (t(n) - t(n+1)) x remaining iterations gets another,
   where t(n) is its time per iteration on n GPUs from the performance model (measured tables, docs/perf.md);
   a job gets at most as many GPUs as its table measures for its batch size (Pollux: target batch / minimum
   local batch; the tables' largest measured count stands in for it) and never more GPUs than samples per batch;
3. placement: jobs whose GPU count did not change stay where they are; the others are placed smallest first on
   as few nodes as possible (one node, else whole nodes under one switch); a job that cannot be placed at its
   new count keeps its old placement if it had one, else it waits.

Energy-blind by design. Resizes cost the run's restart model (Optimus relaunches jobs whose allocation changed).
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from ...core.settings import DEFAULT_SETTING
from ...core.states import STATUS_RUNNING
from ..contract import ALLOCATION_POLICIES, AllocationPolicy, BindContext, Capability, ClusterView, Decision
from ..planning import Consolidated, Plan, job_gpu_codes


@ALLOCATION_POLICIES.register("optimus-greedy")
class OptimusGreedy(AllocationPolicy):
    name = "optimus-greedy"
    needs = frozenset({Capability.PREEMPTS, Capability.RESIZES})
    learned_state = ("_times", "_gains")  # kept when live jobs are added (contract.AllocationPolicy)
    description = (
        "elastic: one GPU each, then GPUs to the largest (t(n)-t(n+1)) x remaining iterations (Optimus)"
    )
    needs_models = True
    decide_on_arrival = False
    decide_on_completion = False
    # The scheduling interval of Pollux's simulator, where this form of Optimus comes from (docs/baselines.md,
    # Pollux); Optimus' own prototype used 600 s. `--round-s` overrides it.
    default_round_s = 60.0

    def __init__(self) -> None:
        self.placement = Consolidated()

    def bind(self, ctx: BindContext) -> None:
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        self.perf = ctx.perf
        self.spec = ctx.spec
        self.jobs = ctx.jobs
        self._codes = job_gpu_codes(ctx)
        self._times: dict[int, np.ndarray] = {}
        self._gains: dict[int, list[float]] = {}

    def parameters(self) -> dict[str, Any]:
        return {
            "gain": "(t(n) - t(n+1)) x remaining iterations, one GPU at a time",
            "max_gpus": "largest GPU count the job's throughput table measures (stands in for Pollux's "
            "target batch / minimum local batch)",
            "placement": "unchanged jobs stay; others smallest first, one node else whole nodes under one switch; "
            "a start whose share fits nowhere takes the most GPUs that fit",
        }

    def _step_times(self, job: int) -> np.ndarray:
        """t(n) for n = 0..max+1 (t(0) unused): the job's time per iteration on n GPUs, consolidated."""
        times = self._times.get(job)
        if times is None:
            code = int(self._codes[job])
            top = self.perf.max_gpus(job, code)
            per_node = int(self.spec.gpu_count.max()) or 1
            times = np.full(top + 2, np.inf)
            for n in range(1, top + 2):
                times[n] = 1.0 / self.perf.solo_rate(job, code, n, -(-n // per_node), 1, DEFAULT_SETTING)
            times[top + 1] = times[top]  # no gain beyond the maximum
            self._times[job] = times
        return times

    def allocate(self, view: ClusterView) -> Decision:
        running = view.running_jobs()
        pending = view.pending_jobs()
        active = np.concatenate([running, pending])
        if active.size == 0:
            return Decision()
        active = active[np.argsort(self.jobs.submit_s[active], kind="stable")]
        capacity = int(view.spec.gpu_count[view.state.available].sum())
        order = active.tolist()
        rem = view.remaining_work(active).tolist()
        gpus = dict.fromkeys(order, 0)
        first = order[:capacity]
        for j in first:
            gpus[j] = 1
        left = capacity - len(first)
        # Heap of each job's next gain; a job's unit gains t(n) - t(n+1) are precomputed per model.
        steps = {j: self._unit_gains(j) for j in first}
        remaining = dict(zip(order, rem, strict=True))
        heap = [(-steps[j][1] * remaining[j], j) for j in first if len(steps[j]) > 2 and steps[j][1] > 0]
        heapq.heapify(heap)
        push, pop = heapq.heappush, heapq.heappop
        while left > 0 and heap:
            _, j = pop(heap)
            n = gpus[j] = gpus[j] + 1
            left -= 1
            unit = steps[j]
            if n + 1 < len(unit) and unit[n] > 0:
                push(heap, (-unit[n] * remaining[j], j))
        held = dict(zip(running.tolist(), view.held_gpus(running).tolist(), strict=True))
        if not pending.size and all(gpus[j] == h for j, h in held.items()):
            return Decision(keep_all=True)  # nothing changes this round
        return self._place(view, running, gpus)

    def _unit_gains(self, job: int) -> list[float]:
        """g[n] = t(n) - t(n+1) for n = 1..max-1 (g[0] unused; the array stops at the job's maximum)."""
        gains = self._gains.get(job)
        if gains is None:
            times = self._step_times(job)
            unit = np.zeros(times.size - 1)
            unit[1:] = times[1:-1] - times[2:]
            self._gains[job] = gains = unit.tolist()
        return gains

    def _place(self, view: ClusterView, running: np.ndarray, gpus: dict[int, int]) -> Decision:
        plan = Plan(view)
        held = view.held_gpus(running) if running.size else np.zeros(0, dtype=np.int64)
        changed = []
        for j, h in zip(running.tolist(), held.tolist(), strict=True):
            if gpus.get(j, 0) != h:
                plan.release(j)
                if gpus.get(j, 0) > 0:
                    changed.append(j)
        starts = [j for j, n in gpus.items() if n > 0 and view.status[j] != STATUS_RUNNING]
        for j in sorted(changed + starts, key=lambda k: (gpus[k], k)):
            if plan.place(j, self.placement, num_gpu=gpus[j]) is not None:
                continue
            if j in changed:
                plan.restore(j)  # keep its old size rather than stopping it
                continue
            # A start whose share fits on no free GPUs now (the shares assume one pool; placement consolidates)
            # takes the most GPUs that fit rather than wait beside idle ones; a later round resizes it.
            for n in range(gpus[j] - 1, 0, -1):
                if plan.place(j, self.placement, num_gpu=n) is not None:
                    break
        return plan.decision(running)
