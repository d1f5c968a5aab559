"""CE-DLA-reconstructed as allocation policies: a rolling-horizon plan over day-ahead prices (docs/cedla.md §5).

Every hour the policy plans the next `horizon_h` hours (``cedla``: the greedy planner; ``cedla-milp``: the exact
MILP, for small clusters) and carries out the plan's first hour until the next plan:

* each training job's work left, in GPU-hours at its trace GPU count, must be done by its deadline (a deadline
  beyond the horizon leaves only the work that cannot fit after it); a job without a deadline, one that can no
  longer meet it, and every inference service-hour run now;
* the GPUs of what runs now (services a day ahead, running jobs until their estimated end) are reserved in the
  plan, so planned work fits beside them;
* jobs the plan gives GPUs in the first hour run (placed best-fit, at their trace GPU count); running jobs it puts
  later are paused with their state saved; every job it puts later is deferred (``Decision.defer``), so the run's
  power manager boots nothing for it and switches empty nodes off (dynamic right-sizing with ``idle-timeout``);
* a job arriving between two plans runs now when this hour is the cheapest of its window or its deadline cannot
  wait for the next plan; otherwise it waits for the next plan.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from ...core.errors import WattschedError
from ...core.gpus import gpu_model
from ...core.jobs import TRAINING
from ...core.settings import DEFAULT_SETTING
from ...core.states import BOOTING, ON, STATUS_PENDING
from ...energy.power_models import idle_node_draw_w
from ..base import PLACEMENT_POLICIES
from ..contract import ALLOCATION_POLICIES, AllocationPolicy, BindContext, Capability, ClusterView, Decision
from ..planning import Plan, held_target, job_gpu_codes
from .cedla_greedy import greedy_by_group
from .cedla_milp import PlanInstance, node_groups, solve_milp

SLOT_S = 3600.0  # hourly slots, the resolution of day-ahead prices
# Planned work must end this long before its deadline: a node boot (300 s by default), a restart from a checkpoint,
# and arrivals between plans (reconstructed, docs/cedla.md §5).
DEADLINE_MARGIN_S = 1800.0
# Headroom kept powered for work that cannot wait: the most GPUs urgent jobs asked for within any `BURST_WINDOW_S`
# over the last `BURST_HISTORY_S` (a boot takes 300 s by default; reconstructed, docs/cedla.md §5).
BURST_WINDOW_S = 600.0
BURST_HISTORY_S = 86400.0
# Urgent work may pause deferrable jobs holding at most this many times its own GPU count to make room.
MAX_ROOM_FACTOR = 4
_FEW_ARRIVALS = 8  # arrivals at one instant counted in Python before a binary search
_GROUPS_KEPT = 64  # sets of powered nodes whose node groups are kept


def _greedy_first_slot(inst: PlanInstance, groups: list[list[int]] | None = None) -> np.ndarray:
    x, _, _ = greedy_by_group(inst, node_groups(inst) if groups is None else groups)
    return x[:, :, 0].sum(axis=1)


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
    default_round_s = SLOT_S
    decide_on_arrival = True
    decide_on_completion = True
    planner = "greedy (cedla_greedy.greedy_by_group), re-planned every hour"
    needs = frozenset({Capability.KNOWS_PRICES})
    learned_state = ("_seen", "_failed")  # kept when live jobs are added (contract.AllocationPolicy)

    def __init__(self, horizon_h: int = 24) -> None:
        if horizon_h < 1:
            raise ValueError(f"horizon_h must be at least 1, got {horizon_h}")
        self.horizon_h = int(horizon_h)
        self.placement = PLACEMENT_POLICIES.create("best-fit")
        self.deferred = self.plans = self.failed_plans = 0
        self._planned_at = -1e18  # no plan yet
        self._run_now: set[int] = set()  # this hour: urgent jobs and the plan's first slot
        self._planned_now: set[int] = set()  # deferrable jobs this hour's plan (or price) runs now
        self.paused_for_urgent = 0
        self._to_start: set[int] = set()  # pending jobs that may run this hour
        self._held: set[int] = set()  # jobs deferred to a later hour
        self._prices = np.ones(1)
        self._lowest_price = [1.0]
        self._urgent_times: list[float] = []
        self._urgent_gpus: list[float] = []

    def first_slot_gpus(self, inst: PlanInstance) -> np.ndarray:
        """GPUs each training job gets in the plan's first slot."""
        # The nodes' groups depend, among what the plan sees of them, only on which are on (the rest is the
        # cluster's, fixed): found once per set of powered nodes, not once per hourly plan.
        key = inst.initially_on.tobytes()
        groups = self._node_groups.get(key)
        if groups is None:
            if len(self._node_groups) >= _GROUPS_KEPT:
                self._node_groups.clear()
            groups = self._node_groups[key] = node_groups(inst)
        return _greedy_first_slot(inst, groups)

    def bind(self, ctx: BindContext) -> None:
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        self.jobs, self.spec, self.perf = ctx.jobs, ctx.spec, ctx.perf
        self.codes = job_gpu_codes(ctx)
        spec, jobs = ctx.spec, ctx.jobs
        self.node_on_w = idle_node_draw_w(spec)  # the price of keeping a node on
        self.gpus_per_node = max(int(spec.gpu_count.max()), 1) if spec.num_nodes else 1
        codes = np.maximum(spec.gpu_model_code, 0)
        self.gpu_idle_w = float(gpu_model(spec.gpu_models[codes[0]]).idle_w) if spec.num_nodes else 0.0
        # What must run when it arrives (services, jobs without a deadline) is known a day ahead only for services:
        # their hourly GPU demand is the service-hour jobs' GPU count by submission hour.
        service = jobs.job_class != TRAINING
        hours = np.floor(jobs.submit_s[service] / SLOT_S).astype(np.int64)
        self.service_demand = np.bincount(hours, weights=jobs.num_gpu[service]) if hours.size else np.zeros(0)
        self._busy_w = np.full(len(jobs), np.nan)  # per job, computed when first planned
        self._node_groups: dict[bytes, list[list[int]]] = {}
        self._seen = np.zeros(len(jobs), dtype=bool)  # jobs classified since they arrived
        self._by_submit = np.argsort(jobs.submit_s, kind="stable")
        self._submit_sorted = jobs.submit_s[self._by_submit]
        self._arrived = 0  # arrivals looked at, in submission order
        self._failed = False  # the last attempt started nothing (it stands until capacity changes)
        # Jobs the last attempt could not place, on a state that has only lost capacity since (they are not
        # searched again until capacity changes).
        self._cannot_place: set[int] = set()
        self._gpu_h_per_work = np.full(len(jobs), np.nan)
        self._next_submit = self._submit_sorted.tolist()
        # Start order: services first, then by deadline (none first), then index; a job's place in it.
        deadline = np.where(np.isnan(jobs.deadline_s), -1.0, jobs.deadline_s)
        by_start = np.lexsort((np.arange(len(jobs)), deadline, jobs.job_class == TRAINING))
        start_rank = np.empty(len(jobs), dtype=np.int64)
        start_rank[by_start] = np.arange(len(jobs))
        self._start_rank = start_rank.tolist()
        # Per job, 2 x GPUs + 1 if it may spread over nodes, from its request (-1: not asked yet).
        self._gpus_asked = [-1] * len(jobs)

    def parameters(self) -> dict[str, Any]:
        return {
            "horizon_h": self.horizon_h,
            "planner": self.planner,
            "jobs_without_deadline": "run as soon as they fit (not deferrable)",
            "services": "never deferred; their GPUs a day ahead are reserved in the plan",
            "arrivals_between_plans": "run now if this hour is the cheapest of the window or the deadline cannot "
            "wait; else wait for the next hourly plan",
            "placement": "best-fit at the trace GPU count",
            "boot_energy_in_plan": "none (the simulator charges boots)",
            "deadline_margin_s": DEADLINE_MARGIN_S,
            "headroom": f"urgent GPUs of the busiest {BURST_WINDOW_S:g} s in the last {BURST_HISTORY_S:g} s, plus "
            "the services' growth into the next hour (Decision.keep_free_gpus)",
            "plans": self.plans,
            "plans_without_a_fit": self.failed_plans,
            "deferrals": self.deferred,
            "urgent_work": f"pauses running jobs with {DEADLINE_MARGIN_S:g} s of slack when it finds no powered "
            f"GPU (at most {MAX_ROOM_FACTOR}x its own GPUs)",
            "paused_for_urgent_work": self.paused_for_urgent,
        }

    # --- one job's numbers ------------------------------------------------------------------------------------
    def _gpu_hours_left(self, view: ClusterView, jobs: np.ndarray) -> np.ndarray:
        # GPU-hours per unit of work at the trace GPU count: fixed per job, so computed once (re-plans see the
        # same deferred jobs hour after hour).
        if len(jobs) == 1:  # one arrival (most decisions): no array bookkeeping for one number
            j = int(jobs[0])
            one = self._gpu_h_per_work[j]
            if one != one:  # NaN: not computed yet
                one = self._gpu_h_per_work[j] = self._gpu_h_per_unit(j)
            return view.remaining_work(jobs) * one
        per_unit = self._gpu_h_per_work[jobs]
        for k in np.flatnonzero(np.isnan(per_unit)).tolist():
            j = int(jobs[k])
            per_unit[k] = self._gpu_h_per_work[j] = self._gpu_h_per_unit(j)
        return view.remaining_work(jobs) * per_unit

    def _gpu_h_per_unit(self, job: int) -> float:
        n = max(int(self.jobs.num_gpu[job]), 1)
        rate = self.perf.solo_rate(
            job, int(self.codes[job]), n, -(-n // self.gpus_per_node), 1, DEFAULT_SETTING
        )
        return n / rate / 3600.0

    def _busy_above_idle_w(self, jobs: list[int]) -> np.ndarray:
        """Each job's draw above idle on one busy GPU (fixed per job: computed once)."""
        watts = self._busy_w[jobs]
        for k in np.flatnonzero(np.isnan(watts)).tolist():
            j = jobs[k]
            watts[k] = self._busy_w[j] = (
                self.perf.gpu_power_w(j, int(self.codes[j]), DEFAULT_SETTING) - self.gpu_idle_w
            )
        return watts

    def _can_wait_until(self, job: int, gpu_hours: float, when: float) -> bool:
        """Whether the job's work still fits by its deadline if it starts no earlier than `when`."""
        deadline = float(self.jobs.deadline_s[job]) - DEADLINE_MARGIN_S
        if self.jobs.job_class[job] != TRAINING or math.isnan(deadline) or self.jobs.num_gpu[job] == 0:
            return False
        slots = (deadline - when) // SLOT_S
        return slots > 0 and gpu_hours <= int(self.jobs.num_gpu[job]) * slots + 1e-9

    # --- the round ----------------------------------------------------------------------------------------------
    def allocate(self, view: ClusterView) -> Decision:
        if self._cannot_place and view.changes.capacity:
            self._cannot_place.clear()
        if int(view.now // SLOT_S) != int(self._planned_at // SLOT_S):  # plans follow the price hours
            running = view.running_jobs()
            pending = view.pending_jobs()
            if running.size + pending.size == 0:
                return Decision()
            return self._new_hour(view, running, pending)
        # Between plans only arrivals need a word: each runs now or waits for the next plan.
        new = self._arrivals(view)
        wait, fresh = [], []
        if new.size:
            self._seen[new] = True
            nxt = (self._planned_at // SLOT_S + 1) * SLOT_S
            for j, gh in zip(new.tolist(), self._gpu_hours_left(view, new).tolist(), strict=True):
                can_wait = self._can_wait_until(j, gh, nxt)
                if can_wait and not self._cheapest_now(j):
                    wait.append(j)
                    continue
                self._run_now.add(j)
                self._to_start.add(j)
                fresh.append(j)
                if can_wait:
                    self._planned_now.add(j)
                else:
                    self._note_urgent(j)
        status = view.status
        self._to_start = {j for j in self._to_start if status[j] == STATUS_PENDING}
        # No capacity changed since every start failed: only the jobs that arrived now can start.
        unchanged = bool(self._to_start) and self._failed and not view.changes.capacity
        if (not self._to_start or unchanged) and not wait and not fresh:
            return Decision(keep_all=True)
        self._held.update(wait)
        return self._start(view, None, [], wait, [], only=fresh if unchanged else None)

    def _arrivals(self, view: ClusterView) -> np.ndarray:
        """Jobs that arrived since the last look and still wait, in submission order."""
        submits, start, now = self._next_submit, self._arrived, view.now
        if start >= len(submits) or submits[start] > now:
            return self._by_submit[:0]  # none since the last look
        end = start + 1
        while end < len(submits) and submits[end] <= now and end - start < _FEW_ARRIVALS:
            end += 1
        if end < len(submits) and submits[end] <= now:  # many at once: one search
            end = int(np.searchsorted(self._submit_sorted, now, side="right"))
        new = self._by_submit[start:end]
        self._arrived = end
        return new[(view.status[new] == STATUS_PENDING) & ~self._seen[new]]

    def _note_urgent(self, job: int) -> None:
        if self.jobs.job_class[job] == TRAINING:
            self._urgent_times.append(float(self.jobs.submit_s[job]))
            self._urgent_gpus.append(float(self.jobs.num_gpu[job]))

    def _burst_gpus(self, now: float) -> float:
        """The most GPUs urgent arrivals asked for within any BURST_WINDOW_S of the last BURST_HISTORY_S."""
        times, gpus = np.asarray(self._urgent_times), np.asarray(self._urgent_gpus)
        keep = times >= now - BURST_HISTORY_S
        times, gpus = times[keep], gpus[keep]
        self._urgent_times, self._urgent_gpus = times.tolist(), gpus.tolist()
        if not times.size:
            return 0.0
        order = np.argsort(times, kind="stable")
        times, cum = times[order], np.concatenate([[0.0], np.cumsum(gpus[order])])
        end = np.searchsorted(times, times + BURST_WINDOW_S, side="right")
        return float((cum[end] - cum[np.arange(len(times))]).max())

    def _headroom(self, now: float) -> float:
        """Free GPUs to keep powered this hour: an urgent burst, plus the services' growth into the next hour."""
        hour = int(now // SLOT_S)
        demand = self.service_demand
        now_d = demand[hour] if hour < len(demand) else 0.0
        next_d = demand[hour + 1] if hour + 1 < len(demand) else 0.0
        return self._burst_gpus(now) + max(next_d - now_d, 0.0)

    def _new_hour(self, view: ClusterView, running: np.ndarray, pending: np.ndarray) -> Decision:
        active = np.concatenate([running, pending])
        self._replan(view, active)
        run_now = self._run_now
        stop = [j for j in running.tolist() if j not in run_now]
        self.deferred += len(stop)
        later = {j for j in active.tolist() if j not in run_now}
        defer = sorted(later - self._held)
        undefer = sorted(j for j in self._held - later if view.status[j] == STATUS_PENDING)
        self._held = later
        self._to_start = {j for j in pending.tolist() if j in run_now}
        decision = self._start(view, running, stop, defer, undefer)
        decision.keep_free_gpus = self._headroom(view.now)
        decision.wake_at = (view.now // SLOT_S + 1) * SLOT_S  # the next price hour
        return decision

    def _start(self, view: ClusterView, running, stop, defer, undefer, only=None) -> Decision:
        """Start what may run now (services first, then by deadline; `only` these if given), best-fit; stop and
        defer as told. Work that cannot wait and finds no powered GPU pauses deferrable running jobs
        (``_make_room``). `running`: the running jobs, None to read them only if needed."""
        plan = Plan(view)
        for j in stop:
            plan.release(j)
        # Upper bounds on what can still be placed (placing only lowers them): most jobs waiting for a boot fail
        # these checks without a placement search.
        free = plan.state.free_gpus[plan.state.available]
        total_free, node_free = int(free.sum()), int(free.max()) if free.size else 0
        # Capacity has only been taken since the last attempt placed nothing for these (and this one frees none).
        known = self._cannot_place if not stop else ()
        unplaced = [
            j
            for j in sorted(self._to_start if only is None else only, key=self._start_rank.__getitem__)
            if j in known
            or not self._may_fit(view, j, total_free, node_free)
            or plan.place(j, self.placement) is None
        ]
        urgent = self._cannot_wait_for_boot(view, [j for j in unplaced if j not in self._planned_now])
        paused = self.paused_for_urgent
        if urgent:
            running = view.running_jobs() if running is None else running
            self._make_room(view, plan, urgent, running, set(stop))
        self._failed = not (plan.assign or plan.released)
        # Valid while capacity stays as this decision leaves it: with less free than each of them saw.
        self._cannot_place = set(unplaced) if self.paused_for_urgent == paused else set()
        return plan.decision(running, save_on_stop=True, defer=defer, undefer=undefer)

    def _may_fit(self, view: ClusterView, job: int, total_free: int, node_free: int) -> bool:
        """A necessary condition for placing `job`: its GPUs are free in all, and on one node unless it spreads."""
        asked = self._gpus_asked[job]
        if asked < 0:
            req = view.request(job)
            asked = self._gpus_asked[job] = 2 * req.num_gpu + req.gang
        return asked >> 1 <= (total_free if asked & 1 else node_free)

    def _slack_s(self, job: int, gpu_hours: float, now: float) -> float:
        """Seconds the job could still pause and meet its deadline (NaN deadline: none)."""
        n = max(int(self.jobs.num_gpu[job]), 1)
        return float(self.jobs.deadline_s[job]) - now - gpu_hours / n * 3600.0

    def _cannot_wait_for_boot(self, view: ClusterView, jobs: list[int]) -> list[int]:
        """Services, and training jobs that meet their deadline if they start now but not after waiting
        DEADLINE_MARGIN_S (a node boot and a restart); a job late either way gains nothing from a pause."""
        if not jobs:
            return jobs
        gpu_hours = self._gpu_hours_left(view, np.asarray(jobs, dtype=np.int64)).tolist()
        return [
            j
            for j, gh in zip(jobs, gpu_hours, strict=True)
            if self.jobs.job_class[j] != TRAINING or 0.0 <= self._slack_s(j, gh, view.now) < DEADLINE_MARGIN_S
        ]

    def _make_room(
        self, view: ClusterView, plan: Plan, urgent: list[int], running, stopping: set[int]
    ) -> None:
        """Pause running training jobs with slack so that urgent work starts now rather than after a node boot
        (which can outlast a short job's slack or a service's SLO). A victim needs DEADLINE_MARGIN_S of slack, the
        same allowance the plan keeps for a boot and a restart: it restarts as soon as GPUs free up or a node
        boots for it."""
        jobs = self.jobs
        candidates = [
            j
            for j in running.tolist()
            if j not in stopping and j not in plan.released and j in self._planned_now
        ]
        if not candidates:
            return
        gpu_hours = self._gpu_hours_left(view, np.asarray(candidates, dtype=np.int64)).tolist()
        # Smallest first (least work disturbed), then the most slack.
        victims = sorted(
            (int(jobs.num_gpu[j]), -slack, j)
            for j, gh in zip(candidates, gpu_hours, strict=True)
            if (slack := self._slack_s(j, gh, view.now)) >= DEADLINE_MARGIN_S
        )
        for job in urgent:
            most = MAX_ROOM_FACTOR * max(int(jobs.num_gpu[job]), 1)
            released: list[int] = []
            freed = 0
            for victim in self._victims_for(view, plan, job, victims):
                plan.release(victim)
                released.append(victim)
                freed += int(jobs.num_gpu[victim])
                if plan.place(job, self.placement) is not None or freed >= most:
                    break
            for victim in released:  # whose GPUs the job did not take keep running (all of them if it failed)
                plan.restore(victim)
            paused = [v for v in released if v in plan.released]
            self.paused_for_urgent += len(paused)
            self._to_start.update(paused)

    @staticmethod
    def _victims_for(view: ClusterView, plan: Plan, job: int, victims: list[tuple]) -> list[int]:
        """Victims to pause, in order, for `job`: any for a job that may spread over nodes; for a single-node job,
        those on the one node that frees enough GPUs by pausing the fewest."""
        order = [v for _, _, v in victims if v not in plan.released]
        req = view.request(job)
        if req.gang:
            return order
        held_on: dict[int, list[tuple[int, int]]] = {}
        for v in order:
            for node, gpus, _, _ in held_target(view, v).placement:
                held_on.setdefault(node, []).append((len(gpus), v))
        free = plan.state.free_gpus
        best: tuple[int, list[int]] | None = None
        for node, held in held_on.items():
            short = req.num_gpu - int(free[node])
            if not req.node_mask[node] or short <= 0:
                continue
            taken, chosen = 0, []
            for count, v in sorted(held):
                chosen.append(v)
                taken += count
                if taken >= short:
                    break
            if taken >= short and (best is None or taken < best[0]):
                best = (taken, chosen)
        return best[1] if best else []

    def _cheapest_now(self, job: int) -> bool:
        """Whether this hour is the cheapest of the job's window (as the plan would place a lone job)."""
        hour_start = self._planned_at // SLOT_S * SLOT_S
        slots = int((float(self.jobs.deadline_s[job]) - DEADLINE_MARGIN_S - hour_start) // SLOT_S)
        lowest = self._lowest_price[max(min(slots, len(self._lowest_price)), 1) - 1]  # of the window
        return bool(self._prices[0] <= lowest + 1e-12)

    def _replan(self, view: ClusterView, active: np.ndarray) -> None:
        self._planned_at = view.now
        self._arrived = int(np.searchsorted(self._submit_sorted, view.now, side="right"))
        horizon = self.horizon_h
        prices = view.price_ahead_usd_per_mwh(horizon)
        if prices is None:
            prices = np.ones(horizon)  # no price: every hour alike, so the plan runs work as early as it can
        self._prices = np.asarray(prices, dtype=float)
        self._lowest_price = np.minimum.accumulate(self._prices).tolist()  # of the first k + 1 hours
        left = self._gpu_hours_left(view, active)
        reserved = np.zeros(horizon)  # GPUs held by what runs now, per slot
        hour0 = int(view.now // SLOT_S)
        demand = self.service_demand[hour0 : hour0 + horizon]
        reserved[: len(demand)] += demand
        # Every active job at once, with the arithmetic of `_can_wait_until` (numpy's // is Python's).
        jobs, now = self.jobs, view.now
        n = jobs.num_gpu[active]
        training = jobs.job_class[active] == TRAINING
        deadline = jobs.deadline_s[active] - DEADLINE_MARGIN_S
        with np.errstate(invalid="ignore"):
            slots_left = (deadline - now) // SLOT_S
            can_wait = (
                training
                & ~np.isnan(deadline)
                & (n != 0)
                & (slots_left > 0)
                & (left <= n.astype(np.int64) * slots_left + 1e-9)
            )
        # Training that cannot wait holds its GPUs from now for its hours left (integer GPU counts: exact sums).
        late = training & ~can_wait
        for j in active[late].tolist():
            if not self._seen[j]:
                self._note_urgent(j)
        hours = np.ceil(left[late] / np.maximum(n[late], 1))
        ends = np.minimum(horizon, hours).astype(np.int64)
        reserved += np.cumsum(np.bincount(ends, weights=n[late], minlength=horizon + 1)[::-1])[::-1][1:]
        urgent = active[~can_wait].tolist()
        slots = np.where(can_wait, slots_left, 0).astype(np.int64)
        must = left - n * np.maximum(slots - horizon, 0)  # the work that cannot wait until after the horizon
        # None: the plan gives it nothing this time, so it stays deferred.
        planned_mask = can_wait & (must > 1e-9)
        planned = active[planned_mask].tolist()
        work = must[planned_mask].tolist()
        last = np.minimum(slots[planned_mask], horizon).tolist()
        self._seen[active] = True
        self._planned_now = self._first_slot(view, planned, work, last, prices, reserved)
        self._run_now = set(urgent) | self._planned_now

    def _first_slot(
        self, view, jobs: list[int], work: list[float], last: list[int], prices, reserved
    ) -> set[int]:
        """Jobs the plan gives GPUs in its first hour."""
        if not jobs:
            return set()
        spec = self.spec
        capacity = float(spec.gpu_count.sum())
        powered = (view.power_state == ON) | (view.power_state == BOOTING)
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
            job_busy_w=self._busy_above_idle_w(jobs),
            service_gpus=np.minimum(reserved, capacity)[None, :],
            service_busy_w=np.zeros(1),
            initially_on=powered,
            job_names=tuple(map(str, self.jobs.job_id[jobs].tolist())),
            service_names=("running now",),
        )
        self.plans += 1
        try:
            first = self.first_slot_gpus(inst)
        except WattschedError:
            self.failed_plans += 1
            return set(jobs)  # no plan fits every deadline: run everything it can now
        return {j for j, g in zip(jobs, first, strict=True) if g > 0}


@ALLOCATION_POLICIES.register("cedla-milp")
class CeDlaMilp(CeDla):
    """The same rolling policy with the exact MILP as the hourly planner (small clusters: see docs/cedla.md §3)."""

    name = "cedla-milp"
    description = (
        "price-aware rolling 24-h plan solved exactly by a MILP (HiGHS) every hour (CE-DLA-reconstructed)"
    )
    planner = "exact MILP (cedla_milp.solve_milp, HiGHS), re-planned every hour"

    def __init__(self, horizon_h: int = 24, time_limit_s: float = 60.0) -> None:
        super().__init__(horizon_h)
        self.time_limit_s = float(time_limit_s)

    def first_slot_gpus(self, inst: PlanInstance) -> np.ndarray:
        # Among equally cheap hours the MILP's choice is arbitrary; a rolling plan must prefer the earliest (as
        # the greedy does), or work drifts to later hours plan after plan. A 0.01 %-per-slot tilt breaks the ties.
        tilted = replace(inst, price=inst.price * (1.0 + 1e-4 * np.arange(len(inst.price))))
        return solve_milp(tilted, time_limit_s=self.time_limit_s).job_gpus[:, :, 0].sum(axis=1)

    def parameters(self) -> dict[str, Any]:
        return {**super().parameters(), "milp_time_limit_s": self.time_limit_s}
