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
4. **Clocks up.** With what the budget leaves, clocks are raised by the same priority.
5. **Budget.** A feed-forward constraint on predicted energy (docs/seed-systems.md §2, docs/powerflow.md "Budget"):
   a step is taken only if the energy to go stays within what is left (budget − energy used), or does not grow.
   Energy to go = Σ remaining work x dynamic GPU energy per unit at the job's (GPUs, clock) + the least energy of
   the jobs still queued or to arrive + the static draw (everything but the jobs' dynamic GPU power): with every
   node on, over the remaining span, never shorter than the time to the last known arrival or to the end of the
   budget's window (``energy_budget_until_s``); with idle nodes switched off, per node the allocation keeps on. So
   a step is credited only the static energy it really saves. The static forecast is corrected by the loop's
   multiplier m = actual / forecast static energy so far. Still above budget after every step that saves energy,
   it cuts (clocks back to the energy-optimal ones, GPU halvings); a budget below the run's floor is refused before
   any job starts, with the floor named.
6. **Placement.** Buddy allocation with network packing (``policies/buddy.py``); a job that cannot be placed at its
   new size keeps its old placement.

This file (~920 lines) stays whole: it is one policy, the steps above in the order the paper gives them, and the
greedy search (``_Greedy``) that only this policy uses.

Speed (BENCHMARKS.md, "powerflow's speed"): a round costs what the admitted jobs cost, not the whole trace. The
greedy's opening priorities are computed for every admitted job at once (``_Greedy._priorities``, the same
floating-point operations in the same order as ``_priority``, so the same values bit for bit); per (job, GPU count)
option rows are read once into arrays; the jobs still to arrive are read once; the targets of running jobs and the
"nothing changed" check follow the job journal (``view.job_changes``). Outputs are identical to the scalar
version's (``benchmarks/bench_powerflow_speed.py`` checks it).
"""

from __future__ import annotations

import heapq
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...core.cluster import MILLI
from ...core.gpus import gpu_model
from ...core.jobs import INFERENCE
from ...core.settings import DEFAULT_SETTING, GpuSetting
from ...core.states import (
    ON,
    STATUS_DONE,
    STATUS_DROPPED,
    STATUS_FUTURE,
    STATUS_RUNNING,
    STATUS_UNSCHEDULABLE,
)
from ...energy.dvfs import sm_clock_range
from ..base import PLACEMENT_POLICIES
from ..contract import (
    ALLOCATION_POLICIES,
    AllocationPolicy,
    BindContext,
    Capability,
    ClusterView,
    Decision,
    Target,
)
from ..planning import JournalCache, Plan, held_target, job_gpu_codes
from . import energy_budget
from .energy_budget import NODES_STAY_ON, BudgetBelowFloorError

__all__ = ["BudgetBelowFloorError", "PowerFlow"]

CLOCK_STEP = 0.1  # SM-clock grid: fractions of f_max from the GPU's lowest modelled clock to 1.0
# The loop's multiplier on static energy: measured / forecast static energy so far, cumulative over the run (the
# dynamic part is the performance model's own, so only the static draw's forecast needs correcting), within
# energy_budget.MULTIPLIER_BOUNDS. The budget's arithmetic (floor, energy left, refusal) is energy_budget's,
# shared with wattsched-green.


# The columns of PowerFlow._option_rows: per (job, GPU level), the energy-optimal clock's rate (units/s) and dynamic
# W, the next clock's, how many clock options, the restart delay of a changed GPU count (s).
_ROW_COLUMNS = ("rate0", "dyn0", "rate1", "dyn1", "options", "restart_s")
RATE0, DYN0, RATE1, DYN1, OPTIONS, RESTART_S = range(len(_ROW_COLUMNS))


@dataclass
class _Budget:
    """What one round's greedy must keep within (docs/powerflow.md, "Budget")."""

    left_j: float  # energy allowed from now on: (budget - used) / multiplier; inf without a budget
    static_w: float  # cluster draw besides the jobs' dynamic GPU power
    span_floor_s: float  # the remaining span is never shorter: last known arrival, the budget window's end
    queued_j: float  # least dynamic energy of pending jobs not admitted this round
    queued_gpu_s: float = 0.0  # their least GPU-seconds (one GPU each)
    # Where idle nodes are switched off, static power follows the nodes in use: this much per node on (0: every
    # node stays on, static_w is paid over the whole span).
    node_static_w: float = 0.0
    nodes_on: int = 0  # nodes on now (idle ones draw until the power manager switches them off)


@ALLOCATION_POLICIES.register("powerflow")
class PowerFlow(AllocationPolicy):
    name = "powerflow"
    needs = frozenset({Capability.PREEMPTS, Capability.RESIZES, Capability.SETS_GPU_SETTINGS})
    learned_state = (
        "rounds",
        "rounds_budget_bound",
        "_plan",
        "_static_actual_so_far_j",
        "_static_forecast_so_far_j",
        "multiplier",
        "metered",
        "node_static_w",
        "floor_kwh",
        "_last_signature",
        "_last_left",
    )  # kept when live jobs are added (contract.AllocationPolicy)
    description = "PowerFlow-reconstructed: GPUs and clocks for shortest mean JCT under an energy budget"
    reconstructed = True
    basis = (
        "PowerFlow (Gu et al., arXiv 2304.06381): greedy (dJCT/JCT)/(dE/E) GPU allocation as a secondary "
        "description states it, energy-optimal clocks, a feed-forward budget on predicted energy with a feedback "
        "multiplier, buddy allocation; docs/powerflow.md"
    )
    needs_models = True
    default_round_s = 60.0  # docs/seed-systems.md §2 ("each round, e.g. 60 s")
    decide_on_arrival = True
    decide_on_completion = True

    def __init__(
        self,
        energy_budget_kwh: float | None = None,
        placement: str = "buddy",
        budget_until_s: float | None = None,
    ) -> None:
        self.budget_j = energy_budget.budget_j(energy_budget_kwh)
        self.budget_until_s = budget_until_s
        self.placement_name = placement
        self.placement = PLACEMENT_POLICIES.create(placement)
        # A service's GPUs are independent replicas: where the placement finds no block for them, they take free
        # GPUs on as few nodes as possible (the base gang rule; docs/cedla.md §1.4).
        self.replicas = PLACEMENT_POLICIES.create("first-fit")

    def required_capabilities(self, params: Mapping[str, Any]) -> frozenset[Capability]:
        return self.needs | energy_budget.needs_meter(params, self.budget_j)

    def bind(self, ctx: BindContext) -> None:
        self.budget_j, self.budget_until_s = energy_budget.bound_budget(
            ctx.params, self.budget_j, self.budget_until_s
        )
        self.nodes_stay_on = ctx.params.get("power_manager", "always-on") in NODES_STAY_ON
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        self.replicas.bind(ctx.spec, ctx.rng, ctx.node_rank)
        # Inference service-hours are the job model's fixed demand (their GPU count is the hour's SLO
        # requirement): never resized or slowed, placed first (docs/powerflow.md, "Inference services").
        self.service = ctx.jobs.job_class == INFERENCE
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
        self._fastest_rate: np.ndarray | None = None  # per job, its rate at its largest GPU count (lazily)
        self._future: tuple[Any, ...] | None = None  # _not_arrived's terms, from the first index asked
        self._least_key: tuple | None = (
            None  # _round_budget's last (first not arrived, queued jobs, their work)
        )
        self._least_sums = (0.0, 0.0)  # and its sums
        # Per job at one GPU (a service at its asked GPUs): dynamic W, rate, GPUs.
        self._least_options: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._options: dict[tuple[int, int], tuple[list[GpuSetting], np.ndarray, np.ndarray]] = {}
        self._clocks: dict[int, list[GpuSetting]] = {}
        self._top = np.full(n, -1, dtype=np.int64)  # per job, its largest GPU count (-1: not read yet)
        # Per job and GPU level (2**level GPUs), what the greedy reads of every admitted job at once (lazily):
        # the columns _ROW_* of `_rows`; `_row_known` says which are filled.
        levels = max(int(ctx.spec.gpu_count.sum()), 1).bit_length()
        self._rows = np.zeros((n, levels, len(_ROW_COLUMNS)))
        self._row_known = np.zeros((n, levels), dtype=bool)
        self._optimal = np.full((n, levels), None, dtype=object)  # the energy-optimal setting, with the rows
        self._last_signature: tuple | None = None
        self._last_left = math.nan
        self._targets = JournalCache()  # view.target of held jobs, kept while the journal lists no change
        self._signature_mark = -1  # the journal's position when _last_signature was read
        self._idle_by_code = [gpu_model(g).idle_w for g in ctx.spec.gpu_models]
        gpu_jobs = ctx.jobs.num_gpu > 0
        self.last_arrival_s = float(ctx.jobs.submit_s[gpu_jobs].max()) if gpu_jobs.any() else 0.0
        self.first_arrival_s = float(ctx.jobs.submit_s[gpu_jobs].min()) if gpu_jobs.any() else 0.0
        self.multiplier = 1.0  # actual / forecast static energy so far
        self._plan: tuple[float, float] | None = None  # (time, forecast static W) of the last decision
        self._static_actual_so_far_j = self._static_forecast_so_far_j = 0.0
        self.floor_kwh: float | None = None
        self.node_static_w = 0.0
        self.metered = True
        self.rounds = self.rounds_budget_bound = 0

    def parameters(self) -> dict[str, Any]:
        return {
            "energy_budget_kwh": energy_budget.budget_kwh_or_none(self.budget_j),
            "gpu_counts": "powers of two up to the job's largest measured count",
            "clock_grid": f"SM-clock fractions from the GPU's lowest modelled clock to 1.0 in steps of {CLOCK_STEP}",
            "priority": "(dJCT/JCT) / (dE/E), JCT including the restart delay of a changed count",
            "energy_budget_until_s": self.budget_until_s,
            "budget_rule": "energy to go (remaining work x dynamic energy per unit at each job's GPUs and clock + "
            "queued jobs' least + static draw over the remaining span, never shorter than the last arrival or the "
            "budget window; per node kept on where idle nodes go off) within budget - used",
            "static_multiplier": "actual / forecast static energy so far",
            "floor_kwh": energy_budget.floor_or_none(self.floor_kwh),
            "multiplier_last": round(self.multiplier, 4),
            "rounds": self.rounds,
            "rounds_budget_bound": self.rounds_budget_bound,
            "budget_binding": energy_budget.budget_binding(self.budget_j, self.rounds_budget_bound),
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

    def _top_gpus(self, jobs: np.ndarray) -> np.ndarray:
        """Per job, its table's largest measured count (read once per job)."""
        unknown = jobs[self._top[jobs] < 0]
        for j in unknown.tolist():
            self._top[j] = self.perf.max_gpus(j, int(self.codes[j]))
        return self._top[jobs]

    def _option_rows(self, jobs: np.ndarray, levels: np.ndarray) -> np.ndarray:
        """Per job at 2**level GPUs, the row of `_ROW_COLUMNS`: `_options_at`'s first two options (rate, dynamic
        W; the second nan where there is one option only), how many options, and the restart delay of a changed
        count. Filled once per (job, level), read for a whole round's jobs at once."""
        missing = ~self._row_known[jobs, levels]
        if missing.any():
            for j, level in zip(jobs[missing].tolist(), levels[missing].tolist(), strict=True):
                gpus = 1 << level
                settings, rates, dyn = self._options_at(j, gpus)
                more = len(settings) > 1
                self._rows[j, level] = (
                    rates[0],
                    dyn[0],
                    rates[1] if more else math.nan,
                    dyn[1] if more else math.nan,
                    len(settings),
                    self.perf.restart_delay_s(j, gpus, False),
                )
                self._optimal[j, level] = settings[0]
                self._row_known[j, level] = True
        return self._rows[jobs, levels]

    def _optimal_settings(self, jobs: np.ndarray, levels: np.ndarray) -> np.ndarray:
        """Per job at 2**level GPUs, its energy-optimal setting (`_options_at`'s first)."""
        self._option_rows(jobs, levels)
        return self._optimal[jobs, levels]

    def _levels(self, job: int, capacity: int) -> list[int]:
        """GPU counts the job may get: powers of two up to its table's largest measured count and `capacity`."""
        top = int(self._top_gpus(np.array([job]))[0])
        top = min(top, capacity)
        levels, n = [], 1
        while n <= top:
            levels.append(n)
            n *= 2
        return levels or [1]

    # --- the round --------------------------------------------------------------------------------------------
    def allocate(self, view: ClusterView) -> Decision:
        # A round with the same jobs running and waiting as at the last decision, energy left within 1 % of that
        # decision's, and nothing changed in the cluster since (no GPU freed, no node booted or switched off, no
        # setting changed) has nothing new to decide. With no job listed in the job journal since that decision
        # (none arrived, started, stopped, finished, deferred...), the jobs running and waiting are the same
        # without reading them.
        changed, mark = view.job_changes(self._signature_mark)
        running: np.ndarray | None = None
        if changed is not None and not changed and self._last_signature is not None:
            signature = self._last_signature
        else:
            running, waiting = view.running_jobs(), view.pending_jobs()
            if running.size == 0 and waiting.size == 0:
                return Decision()
            signature = (running.tobytes(), waiting.tobytes())
        self._check_floor(view)
        self._update_multiplier(view)
        left = self._left_j(view)
        if signature == self._last_signature and _close(left, self._last_left) and not view.changes.any:
            return Decision(keep_all=True)
        if running is None:
            running, waiting = view.running_jobs(), view.pending_jobs()
        self._last_signature, self._last_left, self._signature_mark = signature, left, mark
        cpu_only = waiting[self.jobs.num_gpu[waiting] == 0]  # no GPU to size: started as they fit
        pending = waiting[self.jobs.num_gpu[waiting] > 0]
        all_gpus = int(view.spec.gpu_count[view.state.available].sum())
        # Services keep their asked GPUs at the default setting; the greedy sizes training jobs in what is left.
        # They stay out of `admitted`, so the budget counts them with the jobs not admitted, at that fixed size.
        services = pending[self.service[pending]]
        pending = pending[~self.service[pending]]
        training = running[~self.service[running]]
        service_gpus = int(
            self.jobs.num_gpu[running[self.service[running]]].sum() + self.jobs.num_gpu[services].sum()
        )
        capacity = max(all_gpus - service_gpus, 0)
        rem_p = view.remaining_work(pending)
        by_work = pending[np.argsort(rem_p * self.ref_gpu_s_per_unit[pending], kind="stable")]
        admitted = training.tolist() + by_work[: max(capacity - training.size, 0)].tolist()
        held = dict(zip(running.tolist(), view.held_gpus(running).tolist(), strict=True))
        remaining = dict(
            zip(admitted, view.remaining_work(np.asarray(admitted, dtype=np.int64)).tolist(), strict=True)
        )
        budget = self._round_budget(view, held, left, set(admitted), pending)
        state = _Greedy(self, held, remaining, capacity, all_gpus, service_gpus)
        state.run(admitted, budget)
        self.rounds += 1
        self.rounds_budget_bound += int(state.bound)
        self._plan = (view.now, state.static_w())
        return self._place(view, running, state.gpus, state.setting, cpu_only, services)

    def _left_j(self, view: ClusterView) -> float:
        """Energy the run may still use (inf without a budget)."""
        return energy_budget.left_j(self.budget_j, view)

    def _update_multiplier(self, view: ClusterView) -> None:
        """m = static energy as measured / as forecast, both over the run so far (cumulative, so that one round's
        transient does not swing it). The static draw is measured at each decision (cluster power less the
        running jobs' dynamic GPU power) and held over the interval before it."""
        # Every node on: the static draw is measured, not forecast, and needs no correction.
        if self._plan is None or math.isinf(self.budget_j) or not self.metered or self.nodes_stay_on:
            return
        t0, static_w = self._plan
        dt = max(view.now - t0, 0.0)
        held = dict(
            zip(view.running_jobs().tolist(), view.held_gpus(view.running_jobs()).tolist(), strict=True)
        )
        self._static_actual_so_far_j += self._static_w(view, held) * dt
        self._static_forecast_so_far_j += static_w * dt
        self._plan = (view.now, static_w)
        self.multiplier = energy_budget.bounded_multiplier(
            self._static_actual_so_far_j, self._static_forecast_so_far_j, self.multiplier
        )

    def _span_floor_s(
        self, view: ClusterView, unfinished: np.ndarray, remaining: np.ndarray, later: float = -math.inf
    ) -> float:
        """The remaining span is never shorter than the time to the last known arrival, to the budget window's
        end, or to the earliest end of any unfinished job not admitted now (arrival, then its work at its largest
        GPU count; `later`: that of jobs not among `unfinished`)."""
        until = max(self.last_arrival_s, self.budget_until_s or 0.0)
        if unfinished.size:
            starts = np.maximum(self.jobs.submit_s[unfinished], view.now)
            until = max(until, float((starts + remaining / self._fastest(view)[unfinished]).max()))
        return max(max(until, later) - view.now, 0.0)

    def _fastest(self, view: ClusterView) -> np.ndarray:
        """Per job, its rate at its largest GPU count (read once for the whole workload)."""
        if self._fastest_rate is None:
            capacity = int(view.spec.gpu_count.sum())
            self._fastest_rate = np.array([
                self._rate(j, self._top_count(j, capacity), DEFAULT_SETTING) if self.jobs.num_gpu[j] > 0 else 1.0
                for j in range(len(self.jobs))
            ])  # fmt: skip
        return self._fastest_rate

    def _top_count(self, job: int, capacity: int) -> int:
        """The most GPUs the job may run on: a service its asked count, a training job its largest level."""
        return int(self.jobs.num_gpu[job]) if self.service[job] else self._levels(job, capacity)[-1]

    def _not_arrived(self, view: ClusterView, first: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """The GPU jobs from index `first` on, none arrived yet: (jobs, least dynamic J, least GPU-seconds, the
        latest end: arrival, then the work at the largest GPU count, from now). A job that has not arrived has
        made no progress, so the terms are read once (when the first of them is asked for) and sliced from then
        on; while none of them arrives before now, the latest end is a suffix maximum."""
        cached = self._future
        if cached is None or first < cached[0]:
            jobs = np.flatnonzero(self.jobs.num_gpu > 0)
            jobs = jobs[jobs >= first]
            remaining = view.remaining_work(jobs) if jobs.size else np.zeros(0)
            dynamic, gpu_s = self._least_terms(jobs, remaining)
            work_s = remaining / self._fastest(view)[jobs]
            submit = self.jobs.submit_s[jobs]
            # From each position to the end: the earliest arrival, and the latest arrival + work time.
            earliest = np.minimum.accumulate(submit[::-1])[::-1]
            latest = np.maximum.accumulate((submit + work_s)[::-1])[::-1]
            cached = self._future = (first, jobs, dynamic, gpu_s, work_s, submit, earliest, latest)
        _, jobs, dynamic, gpu_s, work_s, submit, earliest, latest = cached
        k = int(np.searchsorted(jobs, first))
        later = -math.inf
        if k < jobs.size:
            if earliest[k] >= view.now:  # then max(arrival, now) is the arrival for every one of them
                later = float(latest[k])
            else:
                later = float((np.maximum(submit[k:], view.now) + work_s[k:]).max())
        return jobs[k:], dynamic[k:], gpu_s[k:], later

    def _arrivals_end(self, status: np.ndarray) -> int | None:
        """The index from which every job, and no job before it, has not arrived yet (the trace in submission
        order, the usual case); None when the jobs not arrived are not such a tail."""
        future = status == STATUS_FUTURE
        end = len(status) - int(np.count_nonzero(future))
        return end if future[end:].all() else None

    def _least(
        self, jobs: Sequence[int] | np.ndarray, remaining: Sequence[float] | np.ndarray
    ) -> tuple[float, float]:
        """(least dynamic GPU energy J, least GPU-seconds) of these jobs' remaining work: one GPU each at its
        energy-optimal clock, a service at its asked GPUs and the default setting (what it draws). The per-job
        options are read once for the whole workload."""
        if self._least_options is None:
            one = [
                self._options_at(j, 1) if self.jobs.num_gpu[j] > 0 else None for j in range(len(self.jobs))
            ]
            dyn_w = np.array([o[2][0] if o is not None else 0.0 for o in one], dtype=np.float64)
            rate = np.array([o[1][0] if o is not None else 1.0 for o in one], dtype=np.float64)
            gpus = np.ones(len(self.jobs))
            for j in np.flatnonzero(self.service & (self.jobs.num_gpu > 0)).tolist():
                gpus[j] = int(self.jobs.num_gpu[j])
                _, rates, dyn = self._options_at(j, int(gpus[j]))
                dyn_w[j], rate[j] = dyn[-1], rates[-1]  # the options end at the default setting
            self._least_options = (dyn_w, rate, gpus)
        if not len(jobs):
            return 0.0, 0.0
        dynamic, gpu_s = self._least_terms(jobs, remaining)
        return _sum(dynamic), _sum(gpu_s)

    def _least_terms(
        self, jobs: Sequence[int] | np.ndarray, remaining: Sequence[float] | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """`_least` per job, before the sums."""
        if self._least_options is None:
            self._least(jobs[:0], remaining[:0])  # reads the options
        assert self._least_options is not None
        dyn_w, rate, gpus = (a[np.asarray(jobs, dtype=np.int64)] for a in self._least_options)
        work = np.asarray(remaining, dtype=np.float64)
        return np.where(rate > 0, work * dyn_w / np.where(rate > 0, rate, 1.0), 0.0), work / rate * gpus

    def _static_w(self, view: ClusterView, held: dict[int, int]) -> float:
        """Cluster power now less the running jobs' dynamic GPU power at their present settings (0 in a run
        without energy accounting, which has no budget either)."""
        if not self.metered:
            return 0.0
        running_dyn = 0.0
        for j, h in held.items():
            now = held_target(view, j)
            code = int(self.codes[j])
            running_dyn += h * (self.perf.gpu_power_w(j, code, now.setting) - self._idle_w(code))
        return max((view.power_w() or 0.0) - running_dyn, 0.0)

    def _round_budget(self, view: ClusterView, held: dict, left: float, admitted: set, pending) -> _Budget:
        # Every unfinished GPU job not admitted now (queued, or still to arrive) at its least dynamic energy.
        # The jobs still to arrive are usually the trace's tail: their terms are read once (_not_arrived) and
        # only the jobs that have arrived are scanned each round; the sums run over the same terms in the same
        # order (job index), so they are the same floats.
        status = view.status
        arrived = self._arrivals_end(status)
        scan = status if arrived is None else status[:arrived]
        done = (scan == STATUS_DONE) | (scan == STATUS_DROPPED) | (scan == STATUS_UNSCHEDULABLE)
        unfinished = ~done & (self.jobs.num_gpu[: len(scan)] > 0)
        unfinished[np.fromiter(admitted, dtype=np.int64, count=len(admitted))] = False
        rest = np.flatnonzero(unfinished)
        rem = view.remaining_work(rest) if rest.size else np.zeros(0)
        # Every node on: the static draw measured now. Idle nodes off: a node's static draw (measured on the
        # first round) per node the allocation needs; either way times the loop's correction.
        static = self._static_w(view, held) * self.multiplier if self.nodes_stay_on else 0.0
        node_static = 0.0 if self.nodes_stay_on else self.node_static_w * self.multiplier
        if arrived is None:
            least_j, least_gpu_s = self._least(rest, rem)
            span_floor_s = self._span_floor_s(view, rest, rem)
        else:
            future, future_j, future_gpu_s, later = self._not_arrived(view, arrived)
            # Queued jobs do not progress: the same jobs queued with the same work and the same jobs to arrive
            # give the same sums (most rounds between arrivals), kept from the last round.
            key = (arrived, rest.tobytes(), rem.tobytes())
            if key == self._least_key:
                least_j, least_gpu_s = self._least_sums
            else:
                dynamic, gpu_s = self._least_terms(rest, rem)
                least_j, least_gpu_s = 0.0, 0.0
                if rest.size or future.size:
                    least_j = _sum(np.concatenate([dynamic, future_j]))
                    least_gpu_s = _sum(np.concatenate([gpu_s, future_gpu_s]))
                self._least_key, self._least_sums = key, (least_j, least_gpu_s)
            span_floor_s = self._span_floor_s(view, rest, rem, later)
        return _Budget(
            queued_gpu_s=least_gpu_s,
            left_j=left,
            static_w=static,
            node_static_w=node_static,
            nodes_on=int(np.count_nonzero(view.power_state == ON)),
            span_floor_s=span_floor_s,
            queued_j=least_j + node_static / self.per_node * least_gpu_s,
        )

    def _check_floor(self, view: ClusterView) -> None:
        """On the first round, before any job starts: measure a node's static draw, and refuse a budget below
        the run's floor: the least dynamic energy of all the work (one GPU each at its energy-optimal clock)
        plus the least static draw: every node on, the static draw over the shortest the run can last (the
        arrival span, or a job's arrival plus its work at its largest GPU count, whichever ends last); idle nodes
        off, a node's static draw per GPU over the work's least GPU-seconds (one GPU each)."""
        if self.floor_kwh is not None:
            return
        # No power meter: no energy accounting, so no budget to keep (a budget needs meters-energy, checked
        # at start).
        self.metered = view.power_w() is not None
        on = max(int(np.count_nonzero(view.power_state == ON)), 1)
        static_now = self._static_w(view, {})
        self.node_static_w = static_now / on
        if math.isinf(self.budget_j):
            self.floor_kwh = math.nan
            return
        gpu_jobs = np.flatnonzero(self.jobs.num_gpu > 0)
        work = view.remaining_work(gpu_jobs).tolist()
        dynamic, least_gpu_s = self._least(gpu_jobs.tolist(), work)
        span = 0.0
        if self.nodes_stay_on:
            capacity = int(view.spec.gpu_count.sum())
            ends = [
                float(self.jobs.submit_s[j])
                + w / self._rate(j, self._top_count(j, capacity), DEFAULT_SETTING)
                for j, w in zip(gpu_jobs.tolist(), work, strict=True)
            ]
            span = max([self.last_arrival_s, *ends]) - self.first_arrival_s
        # Idle nodes off: at least the nodes the work's least GPU-seconds (one GPU each) keep on.
        static = energy_budget.least_static_j(
            self.nodes_stay_on, static_now, span, self.node_static_w, self.per_node, least_gpu_s
        )
        self.floor_kwh = energy_budget.refuse_below_floor(self.budget_j, dynamic, static)

    def _place(
        self,
        view: ClusterView,
        running: np.ndarray,
        gpus: dict[int, int],
        setting,
        cpu_only: np.ndarray,
        services: np.ndarray,
    ) -> Decision:
        plan = Plan(view)
        held = dict(zip(running.tolist(), view.held_gpus(running).tolist(), strict=True))
        moved = []
        for j, h in held.items():
            if gpus.get(j, h) != h:
                plan.release(j)
                moved.append(j)
        sized = np.fromiter(gpus, dtype=np.int64, count=len(gpus))
        starts = sized[view.status[sized] != STATUS_RUNNING].tolist()
        # Resized jobs before new ones, so that a start never takes the GPUs a resized job must fall back to
        # (a start taking them stopped the running job, and the two swapped places every round); within each
        # group big blocks first: buddy packs better.
        by_size = lambda js: sorted(js, key=lambda k: (-gpus[k], k))  # noqa: E731
        # Services first, at their asked GPUs and the default setting: they must not wait.
        for j in services.tolist():
            self._place_service(plan, view, j)
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
        targets = self._targets.fresh(view)
        assign, released = plan.assign, plan.released
        for j in held:
            if j in assign or j in released:
                continue
            if j in targets:
                now = targets[j]
            else:
                now = targets[j] = view.target(j)
            if now is None:
                continue
            new = setting.get(j, now.setting)
            if new is not now.setting and now.setting != new:  # the same object is equal (a field-wise ==)
                assign[j] = Target(now.placement, now.share_milli, setting[j])
        return plan.decision(running)

    def _place_service(self, plan: Plan, view: ClusterView, job: int) -> None:
        """A service at its asked GPUs and the default setting: on one node where it fits there (as the placement
        places any job of that size, which keeps whole nodes for wider jobs), else by the placement's gang rule
        (whole nodes), else on free GPUs of as few nodes as possible (its GPUs are independent replicas)."""
        req = view.request(job)
        if req.gang and req.num_gpu <= self.per_node:
            found = self.placement.place(plan.state, replace(req, gang=False))
            if found is not None:
                plan.take(job, Target(found, MILLI, DEFAULT_SETTING))
                return
        if plan.place(job, self.placement) is None:
            plan.place(job, self.replicas)


class _Greedy:
    """One round's greedy: GPU doublings at energy-optimal clocks, then clock raises, within the budget; above
    it, cuts (docs/powerflow.md, "Budget")."""

    def __init__(
        self,
        policy: PowerFlow,
        held: dict,
        remaining: dict,
        capacity: int,
        all_gpus: int | None = None,
        service_gpus: int = 0,
    ):
        self.p = policy
        self.held = held
        self.remaining = remaining
        self.capacity = capacity  # GPUs for the training jobs
        # With the services' GPUs (default: none), over which the queued GPU-seconds (theirs included) spread.
        self.all_gpus = capacity if all_gpus is None else all_gpus
        self.service_gpus = service_gpus
        self.gpus: dict[int, int] = {}
        self.clock: dict[int, int] = {}  # index into the job's options at its GPU count
        self.setting: dict[int, GpuSetting] = {}
        self.bound = False  # the budget refused a step or forced a cut this round

    # --- per-job terms ------------------------------------------------------------------------------------
    def _jct(self, job: int, gpus: int, clock: int) -> float:
        _, rates, _ = self.p._options_at(job, gpus)
        delay = 0.0
        if job in self.held and self.held[job] != gpus:
            delay = self.p.perf.restart_delay_s(job, gpus, False)
        return delay + self.remaining[job] / rates[clock]

    def _terms(self, job: int, gpus: int, clock: int) -> tuple[float, float, float]:
        """(dynamic energy to go J, GPUs, JCT s) of the job at (gpus, clock)."""
        _, rates, dyn = self.p._options_at(job, gpus)
        return (
            self.remaining[job] * float(dyn[clock]) / float(rates[clock]),
            float(gpus),
            self._jct(job, gpus, clock),
        )

    # --- energy to go of the whole allocation ---------------------------------------------------------------
    def _energy(self, agg: tuple[float, float, float], longest_s: float) -> float:
        """Energy to go of an allocation with aggregates (dynamic energy J, GPUs, GPU-seconds): its dynamic
        energy, the queued jobs' least, and the static draw. Every node on: the static draw over the remaining
        span. Idle nodes off: a node's static draw per node the allocation keeps on (its GPUs packed) over its
        GPU-weighted mean JCT."""
        dyn_j, gpus, gpu_s = agg
        b = self.budget
        if b.node_static_w > 0:
            nodes = math.ceil(gpus / self.p.per_node) if gpus > 0 else 0
            static = b.node_static_w * nodes * (gpu_s / gpus if gpus > 0 else 0.0)
        else:
            # No shorter than the GPU-seconds left (the queued jobs' least included) spread over every GPU.
            span = max(b.span_floor_s, longest_s, (gpu_s + b.queued_gpu_s) / max(self.all_gpus, 1))
            static = b.static_w * span
        return dyn_j + b.queued_j + static

    def _energy_each(self, dyn_j: np.ndarray, gpus: np.ndarray, gpu_s: np.ndarray, longest_s: np.ndarray):
        """`_energy` of many candidate allocations at once, with the same floating-point operations in the same
        order (so the same values, bit for bit)."""
        b = self.budget
        if b.node_static_w > 0:
            some = gpus > 0
            nodes = np.where(some, np.ceil(gpus / self.p.per_node), 0.0)
            static = b.node_static_w * nodes * np.where(some, gpu_s / np.where(some, gpus, 1.0), 0.0)
        else:
            spread = (gpu_s + b.queued_gpu_s) / max(self.all_gpus, 1)
            static = b.static_w * np.maximum(np.maximum(b.span_floor_s, longest_s), spread)
        return dyn_j + b.queued_j + static

    def _after(self, job: int, new_gpus: int, new_clock: int) -> tuple[float, tuple, float]:
        """(energy to go, aggregates, longest JCT) if the job moved to (gpus, clock)."""
        e0, g0, t0 = self.job_terms[job]
        e1, g1, t1 = self._terms(job, new_gpus, new_clock)
        dyn_j, gpus, gpu_s = self.agg
        agg = (dyn_j - e0 + e1, gpus - g0 + g1, gpu_s - g0 * t0 + g1 * t1)
        longest = max(t1, self.second_jct if job == self.longest_job else self.longest_jct)
        return self._energy(agg, longest), agg, longest

    def _refresh_longest(self) -> None:
        """The longest JCT (ties: the highest job id holds it) and the next one (equal on a tie)."""
        jct = self._jct_now
        if jct.size == 0:
            self.longest_jct, self.longest_job, self.second_jct = 0.0, -1, 0.0
            return
        top = int(np.argmax(jct))
        longest = jct[top]
        tied = np.flatnonzero(jct == longest)
        self.longest_jct = float(longest)
        if tied.size > 1:
            self.longest_job, self.second_jct = int(self._jobs[tied].max()), float(longest)
            return
        self.longest_job = int(self._jobs[top])
        if jct.size == 1:
            self.second_jct = 0.0
            return
        jct[top] = -math.inf
        self.second_jct = float(jct.max())
        jct[top] = longest

    def energy_to_go(self) -> float:
        return self._energy(self.agg, self.longest_jct)

    def static_w(self) -> float:
        """The static draw the allocation is forecast to cost now, before the multiplier (W)."""
        b = self.budget
        nodes = max(math.ceil((sum(self.gpus.values()) + self.service_gpus) / self.p.per_node), b.nodes_on)
        return (b.static_w + b.node_static_w * nodes) / (self.p.multiplier or 1.0)

    # --- steps ----------------------------------------------------------------------------------------------
    def _priority(self, job: int, gpus: int, clock: int, new_gpus: int, new_clock: int) -> float:
        """(dJCT/JCT) / (dE/E), E the allocation's energy to go (so a step that ends the run sooner is credited
        only the static energy it really saves); a step that saves energy and time first."""
        jct, jct2 = self._jct(job, gpus, clock), self._jct(job, new_gpus, new_clock)
        gain = jct - jct2
        if gain <= 0 or jct <= 0:
            return -math.inf
        e = self.energy_to_go()
        e2 = self._after(job, new_gpus, new_clock)[0]
        if e2 - e <= 0 or e <= 0:
            return math.inf
        return (gain / jct) / ((e2 - e) / e)

    def _allowed(self, job: int, new_gpus: int, new_clock: int) -> bool:
        """Within what is left, or no dearer than now."""
        if math.isinf(self.budget.left_j):
            return True
        after = self._after(job, new_gpus, new_clock)[0]
        ok = after <= self.budget.left_j or after <= self.energy_to_go()
        self.bound |= not ok
        return ok

    def _apply(self, job: int, new_gpus: int, new_clock: int) -> None:
        _, self.agg, _ = self._after(job, new_gpus, new_clock)
        terms = self.job_terms[job] = self._terms(job, new_gpus, new_clock)
        self.gpus[job], self.clock[job] = new_gpus, new_clock
        i = self._index[job]
        self._energy_now[i], self._gpus_now[i], self._jct_now[i] = terms
        self._refresh_longest()

    def _priorities(
        self,
        at: np.ndarray,
        gpus: np.ndarray,
        rows_from: np.ndarray,
        gpus_to: np.ndarray,
        rows_to: np.ndarray,
        to_clock: int,
    ) -> np.ndarray:
        """`_priority` of jobs `self._jobs[at]` from (`gpus`, clock 0) to (`gpus_to`, `to_clock`), all at once and
        bit for bit: the rows are `_option_rows` at the two GPU counts."""
        rate_col, dyn_col = (RATE0, DYN0) if to_clock == 0 else (RATE1, DYN1)
        remaining = self._remaining[at]
        held = self._held[at]
        delay_from = np.where(self._is_held[at] & (held != gpus), rows_from[:, RESTART_S], 0.0)
        delay_to = np.where(self._is_held[at] & (held != gpus_to), rows_to[:, RESTART_S], 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            jct = delay_from + remaining / rows_from[:, RATE0]
            jct2 = delay_to + remaining / rows_to[:, rate_col]
            gain = jct - jct2
            e = self.energy_to_go()
            e0, g0, t0 = self._energy_now[at], self._gpus_now[at], self._jct_now[at]
            e1 = remaining * rows_to[:, dyn_col] / rows_to[:, rate_col]
            g1 = gpus_to.astype(np.float64)
            dyn_j, all_gpus, gpu_s = self.agg
            others = np.where(self._jobs[at] == self.longest_job, self.second_jct, self.longest_jct)
            e2 = self._energy_each(
                dyn_j - e0 + e1, all_gpus - g0 + g1, gpu_s - g0 * t0 + g1 * jct2, np.maximum(jct2, others)
            )
            ratio = (gain / jct) / ((e2 - e) / e)
        saves = (e2 - e <= 0) | (e <= 0)
        return np.where((gain <= 0) | (jct <= 0), -math.inf, np.where(saves, math.inf, ratio))

    def run(self, admitted: list[int], budget: _Budget) -> None:
        p = self.p
        self.budget = budget
        jobs = self._jobs = np.asarray(admitted, dtype=np.int64)
        self._index = {j: i for i, j in enumerate(admitted)}
        # GPU counts a job may get: powers of two up to min(its largest measured count, capacity), at least 1.
        top = np.minimum(p._top_gpus(jobs), self.capacity)
        self._top = dict(zip(admitted, top.tolist(), strict=True))
        self._is_held = np.array([j in self.held for j in admitted], dtype=bool)
        self._held = np.array([self.held.get(j, 0) for j in admitted], dtype=np.int64)
        self._remaining = np.array([self.remaining[j] for j in admitted], dtype=np.float64)
        # A running job starts from what it holds (rounded down to a power of two), so that the greedy does not
        # rebuild, and restart, every job each round; a pending job from one GPU.
        start = np.where(self._is_held, self._held, 1)
        gpus = _floor_power_of_two(np.maximum(np.minimum(start, top), 1))
        # Too many for the GPUs (newcomers admitted): halve the largest jobs until everyone fits.
        total = int(gpus.sum())
        while total > self.capacity and gpus.size:
            largest = int(gpus.max())
            if largest == 1:
                break
            ties = np.flatnonzero(gpus == largest)
            big = int(ties[np.argmax(jobs[ties])])  # ties: the highest job id
            gpus[big] //= 2
            total -= largest // 2
        self.gpus = dict(zip(admitted, gpus.tolist(), strict=True))
        self.clock = dict.fromkeys(admitted, 0)
        rows = p._option_rows(jobs, _level(gpus))
        delay = np.where(self._is_held & (self._held != gpus), rows[:, RESTART_S], 0.0)
        self._jct_now = delay + self._remaining / rows[:, RATE0]
        self._energy_now = self._remaining * rows[:, DYN0] / rows[:, RATE0]
        self._gpus_now = gpus.astype(np.float64)
        self.job_terms = dict(
            zip(
                admitted,
                zip(self._energy_now.tolist(), self._gpus_now.tolist(), self._jct_now.tolist(), strict=True),
                strict=True,
            )
        )
        self.agg = (
            sum(self._energy_now.tolist()),
            sum(self._gpus_now.tolist()),
            sum((self._gpus_now * self._jct_now).tolist()),
        )
        self._refresh_longest()
        left = self.capacity - total
        can = np.flatnonzero(2 * gpus <= top)
        rows_to = p._option_rows(jobs[can], _level(gpus[can]) + 1)
        priority = self._priorities(can, gpus[can], rows[can], 2 * gpus[can], rows_to, 0)
        heap = list(zip((-priority).tolist(), jobs[can].tolist(), strict=True))
        heapq.heapify(heap)
        while heap:
            neg, j = heapq.heappop(heap)
            if -neg == -math.inf or left < 1:
                break  # nothing left to gain, or no GPU left to double into
            a = self.gpus[j]
            if a > left:
                continue  # cannot double; smaller jobs may still grow
            if not self._allowed(j, 2 * a, 0):
                continue
            self._apply(j, 2 * a, 0)
            left -= a
            if 4 * a <= self._top[j]:
                heapq.heappush(heap, (-self._priority(j, 2 * a, 0, 4 * a, 0), j))
        # Clocks up with what the budget leaves.
        gpus = np.array([self.gpus[j] for j in admitted], dtype=np.int64)
        rows = p._option_rows(jobs, _level(gpus))
        can = np.flatnonzero(rows[:, OPTIONS] > 1)
        priority = self._priorities(can, gpus[can], rows[can], gpus[can], rows[can], 1)
        heap = list(zip((-priority).tolist(), jobs[can].tolist(), strict=True))
        heapq.heapify(heap)
        while heap:
            neg, j = heapq.heappop(heap)
            if -neg == -math.inf:
                break
            a, c = self.gpus[j], self.clock[j]
            if not self._allowed(j, a, c + 1):
                continue
            self._apply(j, a, c + 1)
            if c + 2 < len(p._options_at(j, a)[0]):
                heapq.heappush(heap, (-self._priority(j, a, c + 1, a, c + 2), j))
        self._cut(admitted)
        gpus = np.array([self.gpus[j] for j in admitted], dtype=np.int64)
        self.setting = dict(zip(admitted, p._optimal_settings(jobs, _level(gpus)).tolist(), strict=True))
        for j, c in self.clock.items():
            if c:
                self.setting[j] = p._options_at(j, self.gpus[j])[0][c]

    def _cut(self, admitted: list[int]) -> None:
        """Still above what is left after every step that saves energy: clocks back to the energy-optimal ones
        and GPU halvings, each time the one that costs the least JCT per energy saved ((dJCT/JCT) / (dE/E), the
        greedy's priority read backwards), while one saves energy."""
        if self.energy_to_go() <= self.budget.left_j:
            return
        self.bound = True
        # Cutting saves dynamic energy only: if even every job at one GPU and its energy-optimal clock would not
        # bring the energy to go within what is left (the excess is static draw over a span no cut shortens),
        # cutting would only slow jobs down for nothing this round.
        least, _ = self.p._least(admitted, [self.remaining[j] for j in admitted])
        if self.energy_to_go() - (self.agg[0] - least) > self.budget.left_j:
            return
        while self.energy_to_go() > self.budget.left_j:
            now = self.energy_to_go()
            best, best_cost = None, math.inf
            for j in admitted:
                moves = [(self.gpus[j], 0)] if self.clock[j] > 0 else []
                moves += [(self.gpus[j] // 2, 0)] if self.gpus[j] > 1 else []
                for move in moves:
                    saved = now - self._after(j, *move)[0]
                    if saved <= 0:
                        continue
                    jct = self._jct(j, self.gpus[j], self.clock[j])
                    loss = max(self._jct(j, *move) - jct, 0.0) / jct if jct > 0 else 0.0
                    cost = loss / (saved / now)
                    if cost < best_cost:
                        best, best_cost = (j, *move), cost
            if best is None:
                break
            self._apply(*best)


def _sum(values: np.ndarray) -> float:
    """``sum(values.tolist())`` without the list: Python's sum of floats adds left to right before 3.12, as
    np.cumsum does (compensated from 3.12 on: then the list). The + 0.0 makes a sum of negative zeros 0.0, as
    sum's start 0 does."""
    if sys.version_info >= (3, 12):
        return sum(values.tolist())
    return float(np.cumsum(values)[-1]) + 0.0 if values.size else 0


def _floor_power_of_two(n: np.ndarray) -> np.ndarray:
    """The largest power of two at most each n (n >= 1)."""
    return np.left_shift(1, _level(n)).astype(np.int64)


def _level(n: np.ndarray) -> np.ndarray:
    """floor(log2 n) of integers n >= 1, exactly (frexp: n = m * 2**e with 0.5 <= m < 1)."""
    return (np.frexp(np.asarray(n, dtype=np.float64))[1] - 1).astype(np.int64)


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 0.01 * abs(b)
