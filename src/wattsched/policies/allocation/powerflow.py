"""PowerFlow-reconstructed: shortest average JCT under a cluster energy budget (Gu et al., arXiv 2304.06381).

The paper's algorithm is not public; this follows docs/seed-systems.md §2 (what is known, a secondary description
of its greedy, and the reconstruction) and docs/powerflow.md (every rule chosen here). Each round:

1. **Admission.** Running jobs keep at least one GPU; pending jobs join, shortest remaining work first, while
   GPUs last (one GPU each).
2. **Clock.** Per job and GPU count, the SM clock that minimises energy per iteration (the performance model's
   ``energy_per_iteration`` over a grid of clock fractions).
3. **GPUs.** One step at a time, the job with the largest (ΔJCT/JCT) / (ΔE/E) doubles its GPUs (powers of two),
   where JCT is its restart delay (if the count differs from what it holds) plus remaining work / rate, and E its
   remaining work x energy per iteration. A step that gains nothing after its restart cost is never taken.
4. **Clocks up.** With what the budget pace leaves, clocks are raised by the same priority.
5. **Budget pacer.** pace = (budget − energy used so far) / work left, in joules per reference GPU-second (a job's
   work at its trace configuration: one GPU-second per GPU per second). A proposed allocation's cluster power
   (static draw now + the jobs' dynamic GPU power) divided by its work rate must stay within the pace; a step that
   would push it above the pace is not taken unless it lowers that ratio or its marginal power per marginal work
   is within the pace. Steps 4 go first when the pace is tight
   (clocks fall back to the energy-optimal ones before any GPU is withheld).
6. **Placement.** Buddy allocation with network packing (``policies/buddy.py``); a job that cannot be placed at its
   new size keeps its old placement.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from ...core.gpus import gpu_model
from ...core.states import STATUS_RUNNING
from ...energy.dvfs import DEFAULT_SETTING, GpuSetting, sm_clock_range
from ..base import PLACEMENT_POLICIES
from ..contract import ALLOCATION_POLICIES, AllocationPolicy, BindContext, ClusterView, Decision, Target
from ..planning import Plan, job_gpu_codes

J_PER_KWH = 3.6e6
CLOCK_STEP = 0.1  # SM-clock grid: fractions of f_max from the GPU's lowest modelled clock to 1.0


@ALLOCATION_POLICIES.register("powerflow")
class PowerFlow(AllocationPolicy):
    name = "powerflow"
    description = "PowerFlow-reconstructed: GPUs and clocks for shortest mean JCT under an energy budget"
    reconstructed = True
    basis = (
        "PowerFlow (Gu et al., arXiv 2304.06381): greedy (dJCT/JCT)/(dE/E) GPU allocation as a secondary "
        "description states it, energy-optimal clocks, a budget pacer, buddy allocation; docs/powerflow.md"
    )
    needs_models = True
    default_round_s = 60.0  # docs/seed-systems.md §2 ("each round, e.g. 60 s")
    decide_on_arrival = True
    decide_on_completion = True

    def __init__(self, energy_budget_kwh: float | None = None, placement: str = "buddy") -> None:
        self.budget_j = math.inf if energy_budget_kwh is None else float(energy_budget_kwh) * J_PER_KWH
        self.placement_name = placement
        self.placement = PLACEMENT_POLICIES.create(placement)

    def bind(self, ctx: BindContext) -> None:
        budget = ctx.params.get("energy_budget_kwh")
        if budget is not None:
            self.budget_j = float(budget) * J_PER_KWH
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        self.perf, self.spec, self.jobs = ctx.perf, ctx.spec, ctx.jobs
        self.codes = job_gpu_codes(ctx)
        self.per_node = int(ctx.spec.gpu_count.max()) or 1
        # Work in reference GPU-seconds: a job's work at its trace configuration (trace GPUs, default clock).
        n = len(ctx.jobs)
        self.ref_gpu_s_per_unit = np.zeros(n)
        for j in np.flatnonzero(ctx.jobs.num_gpu > 0).tolist():
            trace = int(self.perf.trace_gpus[j])
            rate = self._rate(j, trace, DEFAULT_SETTING)
            self.ref_gpu_s_per_unit[j] = trace / rate if rate > 0 else 0.0
        self._options: dict[tuple[int, int], tuple[list[GpuSetting], np.ndarray, np.ndarray]] = {}
        self._clocks: dict[int, list[GpuSetting]] = {}
        self._top: dict[int, int] = {}
        self._last_signature: tuple | None = None
        self._last_pace = math.nan
        self._idle_by_code = [gpu_model(g).idle_w for g in ctx.spec.gpu_models]

    def parameters(self) -> dict[str, Any]:
        return {
            "energy_budget_kwh": None if math.isinf(self.budget_j) else self.budget_j / J_PER_KWH,
            "gpu_counts": "powers of two up to the job's largest measured count",
            "clock_grid": f"SM-clock fractions from the GPU's lowest modelled clock to 1.0 in steps of {CLOCK_STEP}",
            "priority": "(dJCT/JCT) / (dE/E), JCT including the restart delay of a changed count",
            "pacer": "(budget - energy used) / reference GPU-seconds of work left; clocks yield before GPUs",
            "admission": "running jobs keep a GPU; pending jobs by shortest remaining work",
            "placement": self.placement_name,
            "reconstructed": "the paper's equations and settings are not public (docs/powerflow.md)",
        }

    # --- model queries --------------------------------------------------------------------------------------
    def _rate(self, job: int, gpus: int, setting: GpuSetting) -> float:
        nodes = -(-gpus // self.per_node)
        return self.perf.solo_rate(job, int(self.codes[job]), gpus, nodes, 1, setting)

    def _clock_grid(self, job: int) -> list[GpuSetting]:
        code = int(self.codes[job])
        grid = self._clocks.get(code)
        if grid is None:
            low, _ = sm_clock_range(self.spec.gpu_models[code])
            fractions = np.round(np.arange(1.0, low - 1e-9, -CLOCK_STEP), 6)[::-1]
            grid = [GpuSetting(sm_clock_fraction=float(f)) for f in fractions if f < 1.0] + [DEFAULT_SETTING]
            self._clocks[code] = grid
        return grid

    def _options_at(self, job: int, gpus: int) -> tuple[list[GpuSetting], np.ndarray, np.ndarray]:
        """Clock settings at `gpus` GPUs, ordered from the energy-optimal one upwards in speed, with their rates
        (units/s) and dynamic GPU power (W above idle, all GPUs)."""
        key = (job, gpus)
        found = self._options.get(key)
        if found is None:
            code = int(self.codes[job])
            grid = self._clock_grid(job)
            rates = np.array([self._rate(job, gpus, s) for s in grid])
            idle = self._idle_w(code)
            dyn = np.array([gpus * (self.perf.gpu_power_w(job, code, s) - idle) for s in grid])
            energy = (dyn + gpus * idle) / rates
            best = int(np.argmin(energy))
            keep = list(range(best, len(grid)))  # the optimum and every faster clock
            found = ([grid[i] for i in keep], rates[keep], dyn[keep])
            self._options[key] = found
        return found

    def _idle_w(self, code: int) -> float:
        return self._idle_by_code[code]

    def _levels(self, job: int, capacity: int) -> list[int]:
        """GPU counts the job may get: powers of two up to its table's largest measured count and `capacity`."""
        top = self._top.get(job)
        if top is None:
            top = self._top[job] = self.perf.max_gpus(job, int(self.codes[job]))
        top = min(top, capacity)
        levels, n = [], 1
        while n <= top:
            levels.append(n)
            n *= 2
        return levels or [1]

    # --- the round --------------------------------------------------------------------------------------------
    def allocate(self, view: ClusterView) -> Decision:
        running = view.running_jobs()
        waiting = view.pending_jobs()
        cpu_only = waiting[self.jobs.num_gpu[waiting] == 0]  # no GPU to size: started as they fit
        pending = waiting[self.jobs.num_gpu[waiting] > 0]
        if running.size == 0 and waiting.size == 0:
            return Decision()
        # A round with the same jobs running and waiting as at the last decision, a pace within 1 % of that
        # decision's, and nothing changed in the cluster since (no GPU freed, no node booted or switched off, no
        # setting changed) has nothing new to decide.
        signature = (running.tobytes(), waiting.tobytes())
        pace = self._pace(view)
        if signature == self._last_signature and _close(pace, self._last_pace) and not view.changes.any:
            return Decision(keep=running)
        self._last_signature, self._last_pace = signature, pace
        capacity = int(view.spec.gpu_count[view.state.available].sum())
        rem_p = view.remaining_work(pending)
        admitted = running.tolist()
        for j in pending[np.argsort(rem_p * self.ref_gpu_s_per_unit[pending], kind="stable")].tolist():
            if len(admitted) >= capacity:
                break
            admitted.append(j)
        held = dict(zip(running.tolist(), view.held_gpus(running).tolist(), strict=True))
        remaining = dict(
            zip(admitted, view.remaining_work(np.asarray(admitted, dtype=np.int64)).tolist(), strict=True)
        )
        state = _Greedy(self, view, held, remaining, capacity)
        state.run(admitted, pace)
        return self._place(view, running, state.gpus, state.setting, cpu_only)

    def _pace(self, view: ClusterView) -> float:
        """Joules of cluster energy allowed per reference GPU-second of work left: the budget not yet used,
        spread over the work left (docs/powerflow.md, pacer)."""
        if math.isinf(self.budget_j):
            return math.inf
        everyone = np.arange(len(self.jobs))
        left = float((view.remaining_work(everyone) * self.ref_gpu_s_per_unit).sum())
        return max(self.budget_j - view.energy_used_j(), 0.0) / left if left > 0 else math.inf

    def _place(
        self, view: ClusterView, running: np.ndarray, gpus: dict[int, int], setting, cpu_only: np.ndarray
    ) -> Decision:
        plan = Plan(view)
        held = dict(zip(running.tolist(), view.held_gpus(running).tolist(), strict=True))
        moved = []
        for j, h in held.items():
            if gpus.get(j, h) != h:
                plan.release(j)
                moved.append(j)
        starts = [j for j in gpus if view.status[j] != STATUS_RUNNING]
        # Resized jobs before new ones, so that a start never takes the GPUs a resized job must fall back to
        # (a start taking them stopped the running job, and the two swapped places every round); within each
        # group big blocks first: buddy packs better.
        by_size = lambda js: sorted(js, key=lambda k: (-gpus[k], k))  # noqa: E731
        for j in by_size(moved) + by_size(starts):
            if plan.place(j, self.placement, num_gpu=gpus[j], setting=setting[j]) is not None:
                continue
            if j in moved and plan.restore(j):
                continue
            # No block of that size (fragmentation, or nodes whose CPU or memory cannot serve the gang's share):
            # the largest smaller power of two that fits, at its energy-optimal clock.
            n = gpus[j] // 2
            while n >= 1:
                if plan.place(j, self.placement, num_gpu=n, setting=self._options_at(j, n)[0][0]) is not None:
                    break
                n //= 2
        for j in cpu_only.tolist():
            plan.place(j, self.placement)
        for j in held:
            if j in plan.assign or j in plan.released:
                continue
            now = view.target(j)
            if now is not None and now.setting != setting.get(j, now.setting):
                plan.assign[j] = Target(now.placement, now.share_milli, setting[j])
        return plan.decision(running)


class _Greedy:
    """One round's greedy: GPU doublings at energy-optimal clocks, then clock raises, within the pace."""

    def __init__(self, policy: PowerFlow, view: ClusterView, held: dict, remaining: dict, capacity: int):
        self.p = policy
        self.held = held
        self.remaining = remaining
        self.capacity = capacity
        self.gpus: dict[int, int] = {}
        self.clock: dict[int, int] = {}  # index into the job's options at its GPU count
        self.setting: dict[int, GpuSetting] = {}
        # Cluster draw that does not depend on this round's choices: everything but the jobs' dynamic GPU power.
        self.static_w = 0.0
        self.view = view

    def _jct(self, job: int, gpus: int, clock: int) -> float:
        _, rates, _ = self.p._options_at(job, gpus)
        delay = 0.0
        if job in self.held and self.held[job] != gpus:
            delay = self.p.perf.restart_delay_s(job, gpus, False)
        return delay + self.remaining[job] / rates[clock]

    def _energy(self, job: int, gpus: int, clock: int) -> float:
        _, rates, dyn = self.p._options_at(job, gpus)
        idle = self.p._idle_w(int(self.p.codes[job]))
        return self.remaining[job] * (dyn[clock] + gpus * idle) / rates[clock]

    def _priority(self, job: int, gpus: int, clock: int, new_gpus: int, new_clock: int) -> float:
        jct, jct2 = self._jct(job, gpus, clock), self._jct(job, new_gpus, new_clock)
        gain = jct - jct2
        if gain <= 0 or jct <= 0:
            return -math.inf
        e, e2 = self._energy(job, gpus, clock), self._energy(job, new_gpus, new_clock)
        if e2 - e <= 0:
            return math.inf
        return (gain / jct) / ((e2 - e) / e)

    def _work_rate_and_power(self, job: int, gpus: int, clock: int) -> tuple[float, float]:
        _, rates, dyn = self.p._options_at(job, gpus)
        return rates[clock] * self.p.ref_gpu_s_per_unit[job], dyn[clock]

    def run(self, admitted: list[int], pace: float) -> None:
        view, p = self.view, self.p
        levels = {j: p._levels(j, self.capacity) for j in admitted}
        for j in admitted:
            # A running job starts from what it holds (rounded down to a power of two), so that the greedy does
            # not rebuild, and restart, every job each round; a pending job from one GPU.
            held = self.held.get(j, 1)
            self.gpus[j] = max([n for n in levels[j] if n <= held] or [1])
            self.clock[j] = 0
        # Too many for the GPUs (newcomers admitted): halve the largest jobs until everyone fits.
        while sum(self.gpus.values()) > self.capacity:
            big = max(self.gpus, key=lambda k: (self.gpus[k], k))
            if self.gpus[big] == 1:
                break
            self.gpus[big] //= 2
        # Static draw now = cluster power - the running jobs' dynamic GPU power at their present settings.
        running_dyn = 0.0
        if not math.isinf(p.budget_j):
            for j, h in self.held.items():
                now = view.target(j)
                code = int(p.codes[j])
                running_dyn += h * (p.perf.gpu_power_w(j, code, now.setting) - p._idle_w(code))
            self.static_w = max(view.power_w() - running_dyn, 0.0)
        work = power = 0.0
        for j in admitted:
            w, d = self._work_rate_and_power(j, self.gpus[j], 0)
            work, power = work + w, power + d
        self.work, self.power, self.pace = work, power, pace
        left = self.capacity - sum(self.gpus.values())
        heap = []
        for j in admitted:
            a = self.gpus[j]
            if 2 * a in levels[j]:
                heap.append((-self._priority(j, a, 0, 2 * a, 0), j))
        heapq.heapify(heap)
        while heap:
            neg, j = heapq.heappop(heap)
            if -neg == -math.inf:
                break
            a = self.gpus[j]
            if a > left:
                continue  # cannot double; smaller jobs may still grow
            if not self._within_pace(j, a, 0, 2 * a, 0):
                continue
            self._apply(j, a, 0, 2 * a, 0)
            left -= a
            if 4 * a in levels[j]:
                heapq.heappush(heap, (-self._priority(j, 2 * a, 0, 4 * a, 0), j))
        # Clocks up with what the pace leaves.
        heap = []
        for j in admitted:
            if len(p._options_at(j, self.gpus[j])[0]) > 1:
                heap.append((-self._priority(j, self.gpus[j], 0, self.gpus[j], 1), j))
        heapq.heapify(heap)
        while heap:
            neg, j = heapq.heappop(heap)
            if -neg == -math.inf:
                break
            a, c = self.gpus[j], self.clock[j]
            if not self._within_pace(j, a, c, a, c + 1):
                continue
            self._apply(j, a, c, a, c + 1)
            if c + 2 < len(p._options_at(j, a)[0]):
                heapq.heappush(heap, (-self._priority(j, a, c + 1, a, c + 2), j))
        # Still above the pace with energy-optimal clocks: take GPUs away, halving the job whose halving lowers
        # the ratio most, while that helps.
        while self._ratio(self.work, self.power) > self.pace:
            best, best_ratio = None, self._ratio(self.work, self.power)
            for j in admitted:
                a = self.gpus[j]
                if a == 1:
                    continue
                w0, d0 = self._work_rate_and_power(j, a, self.clock[j])
                w1, d1 = self._work_rate_and_power(j, a // 2, 0)
                ratio = self._ratio(self.work - w0 + w1, self.power - d0 + d1)
                if ratio < best_ratio:
                    best, best_ratio = j, ratio
            if best is None:
                break
            self._apply(best, self.gpus[best], self.clock[best], self.gpus[best] // 2, 0)
        for j in admitted:
            self.setting[j] = p._options_at(j, self.gpus[j])[0][self.clock[j]]

    def _ratio(self, work: float, power: float) -> float:
        """Cluster power (static draw now + the jobs' dynamic GPU power) per unit of work rate: joules per
        reference GPU-second. Static draw is shared by all work, so a step that adds work can lower it."""
        return (self.static_w + power) / work if work > 0 else math.inf

    def _within_pace(self, job: int, gpus: int, clock: int, new_gpus: int, new_clock: int) -> bool:
        if math.isinf(self.pace):
            return True
        w0, d0 = self._work_rate_and_power(job, gpus, clock)
        w1, d1 = self._work_rate_and_power(job, new_gpus, new_clock)
        before = self._ratio(self.work, self.power)
        after = self._ratio(self.work - w0 + w1, self.power - d0 + d1)
        # Within the pace on average, or cheaper on average than before, or paying for itself at the margin
        # (extra power per extra work rate within the pace: the static draw is paid whatever the step).
        marginal = (d1 - d0) / (w1 - w0) if w1 > w0 else math.inf
        return after <= self.pace or after <= before or marginal <= self.pace

    def _apply(self, job: int, gpus: int, clock: int, new_gpus: int, new_clock: int) -> None:
        w0, d0 = self._work_rate_and_power(job, gpus, clock)
        w1, d1 = self._work_rate_and_power(job, new_gpus, new_clock)
        self.work += w1 - w0
        self.power += d1 - d0
        self.gpus[job], self.clock[job] = new_gpus, new_clock


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 0.01 * abs(b)
