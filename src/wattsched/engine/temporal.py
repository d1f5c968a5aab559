"""Temporal mode: jobs arrive, queue, run and leave. A discrete-event loop over a heap, no fixed ticks.

Arrivals are read in order from a sorted array (they never enter the heap, which keeps it small for 10^6 jobs).
The heap holds completions, restart ends and callbacks (power transitions, rounds, policy wake-ups), ordered by
(time, kind, sequence). Job progress is integrated analytically: a job has remaining work and a rate, and its
completion event is recomputed whenever its rate changes; stale events are dropped by a version counter.

The simulator is one backend of the policy contract (``policies.contract``): it offers a read-only
:class:`~.sim_view.SimView` and applies :class:`~.sim_view.SimActions` at once (both in ``sim_view.py``). Everything
a job holds over its life is written to the :class:`~.alloc_log.AllocationLog`, from which energy and the job table
are derived after the run.

This file stays whole at ~890 lines: it is one class, the event loop and the per-job arrays every step of it
updates (start, stop, move, rates, completions), and its invariants (a job's version, its completion event, its
allocation id) hold across those methods; the view and the actions, the allocation log, the ledger, the meter and
node power are already modules of their own.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING

import numpy as np
from sortedcontainers import SortedList

from ..core.cluster import MILLI, ClusterSpec, ClusterState
from ..core.errors import WattschedError
from ..core.jobs import JobTable
from ..core.placement import Placement, gpu_set
from ..core.requests import RequestBook
from ..core.settings import DEFAULT_SETTING, GpuSetting
from ..core.states import (
    BOOTING,
    PHASE_RELEASED,
    PHASE_RESTARTING,
    PHASE_RUNNING,
    SHUTTING_DOWN,
    STATUS_DONE,
    STATUS_DROPPED,
    STATUS_FUTURE,
    STATUS_PENDING,
    STATUS_RUNNING,
    STATUS_UNSCHEDULABLE,
)
from ..perf.model import PerformanceModel
from ..policies.contract import (
    ALL_CAPABILITIES,
    ARRIVED,
    LEFT,
    RELEASED,
    SETTINGS,
    TAKEN,
    BindContext,
    Capability,
    ChangeCounter,
    InvalidDecision,
    Scheduler,
    Target,
    WakeCallback,
    check_capabilities,
)
from ..policies.validation import ActionValidator
from .alloc_log import NO_ALLOC, AllocationLog
from .meter import PowerMeter
from .observers import Observer
from .power import NodePower, Transition
from .sim_view import SimActions, SimView

if TYPE_CHECKING:
    from ..energy.signals.alignment import AlignedSignal

# Event kinds, in the order they run at equal times: completions free resources first, then restarts end, then
# callbacks (power transitions, rounds, wake-ups). A power manager's own timers run last, after the scheduling
# decision of that instant: an idle-timeout must not switch off GPUs that jobs are about to take (e.g. service-hours
# replacing the previous hour's at the hour boundary).
KIND_COMPLETION, KIND_RESTART_DONE, KIND_CALLBACK, KIND_POWER_TIMER = 0, 1, 2, 3

STALL_LIMIT_S = 3650 * 86400.0
# After the last completion the power manager's timers play out with no jobs (the run's tail, for comparisons over
# a common window, docs/energy.md "Accounting window"), for at most this long and this many timer calls: a manager
# with periodic wake-ups (forecast) never runs out of timers.
TAIL_HORIZON_S = 30 * 86400.0
TAIL_MAX_TIMERS = 200_000

# Decisions in a row that find jobs waiting, nothing running, no node in transition, nothing changed since the last
# one and no wake-up the policy asked for, and that change nothing themselves: the run can never progress.
STALL_DECISIONS = 100
_PENDING_CHUNK = 16

# A heap entry: (time, kind, sequence, job, payload). The payload of a completion or restart end is the job's
# version when it was pushed; that of a callback or power timer is (callback, the actions it is called with).
_Callback = tuple[WakeCallback, "SimActions"]
_HeapEntry = tuple[float, int, int, int, int | _Callback]


# Why a simulation may lack a capability: the run's settings, not the simulator.
SIM_LACKS = {
    Capability.KNOWS_PRICES: "give the run a price signal (--region or --price-csv)",
    Capability.KNOWS_CARBON: "give the run a carbon signal (--region or --carbon-csv)",
    Capability.METERS_ENERGY: "run with energy accounting",
    Capability.POWERS_NODES: "run with energy accounting and a power manager",
}


def sim_capabilities(power: object, meter: object, price: object, carbon: object) -> frozenset[Capability]:
    """What a simulation offers: everything, less the signals, meter and node power the run lacks."""
    lacking = {
        Capability.POWERS_NODES: power is None,
        Capability.METERS_ENERGY: meter is None,
        Capability.KNOWS_PRICES: price is None,
        Capability.KNOWS_CARBON: carbon is None,
    }
    return ALL_CAPABILITIES - {cap for cap, lacks in lacking.items() if lacks}


def _implementing(observers: list[Observer], hook: str) -> list[Callable[..., None]]:
    """Bound `hook` methods of the observers that override the base class's no-op."""
    base = getattr(Observer, hook)
    return [getattr(o, hook) for o in observers if getattr(type(o), hook) is not base]


@dataclass
class RunOutcome:
    """Per-job results, as arrays aligned with the job table, plus the allocation log."""

    status: np.ndarray  # int8 [J]
    start_s: np.ndarray  # float64 [J] first start
    end_s: np.ndarray  # float64 [J]
    log: AllocationLog
    restarts: np.ndarray  # int64 [J] resumes, resizes and migrations (each charged a restart delay)
    preemptions: np.ndarray  # int64 [J] stops by the scheduler
    restart_gpu_s: np.ndarray  # float64 [J] GPU-seconds held while restarting
    work_lost: np.ndarray  # float64 [J] progress lost to preemption (work units)
    lost_gpu_s: np.ndarray  # float64 [J] GPU-seconds whose progress was lost (lost work / rate x GPUs held)

    @property
    def placements(self) -> list[Placement | None]:
        """The last placement each job held (None if it never ran)."""
        return self.log.last_placements(len(self.status))


class Simulator:
    """Runs one workload on one cluster under one scheduler (and one power manager)."""

    def __init__(
        self,
        jobs: JobTable,
        spec: ClusterSpec,
        scheduler: Scheduler,
        rng: np.random.Generator,
        *,
        perf: PerformanceModel | None = None,
        power: NodePower | None = None,
        checkpoint_interval_s: float = 0.0,
        observers: Iterable[Observer] = (),
        check_invariants: bool = False,
        progress: Callable[[int, int], None] | None = None,
        power_meter: PowerMeter | None = None,
        signals: tuple[AlignedSignal | None, AlignedSignal | None] = (None, None),
    ):
        from ..energy.utilisation import job_gpu_load

        self.jobs = jobs
        self.spec = spec
        self.scheduler = scheduler
        self.state = ClusterState(spec)
        self.book = RequestBook.build(jobs, spec)
        self.perf = perf if perf is not None else PerformanceModel(jobs, spec, job_gpu_load(jobs))
        self.power = power
        self.power_meter = power_meter
        self.price, self.carbon = signals
        self.observers = list(observers) + ([power_meter] if power_meter is not None else [])
        # Dispatch each hook only to observers that implement it: most hooks run once per event.
        self._on_interval = _implementing(self.observers, "on_interval")
        self._on_job_start = _implementing(self.observers, "on_job_start")
        self._on_job_end = _implementing(self.observers, "on_job_end")
        self._on_batch_end = _implementing(self.observers, "on_batch_end")
        self.check = check_invariants
        self.progress = progress
        if not checkpoint_interval_s >= 0:
            raise ValueError(f"checkpoint interval must be >= 0 s, got {checkpoint_interval_s}")
        self.checkpoint_interval_s = float(checkpoint_interval_s)
        # Per job: the trace's interval where it has one, else the run's (0: checkpoint when stopped, no loss).
        own = jobs.checkpoint_s
        self.ckpt_interval = np.where(np.isnan(own), self.checkpoint_interval_s, own)
        # The seeded node order every policy of the run breaks ties with (drawn first from the policy stream).
        self.node_rank = rng.permutation(spec.num_nodes).astype(np.int64)
        self.capabilities = sim_capabilities(power, power_meter, *signals)
        needs = {f"policy '{scheduler.name}'": scheduler.required_capabilities()}
        if power is not None:
            needs[f"power manager '{power.manager.name}'"] = power.manager.needs
        check_capabilities("simulator", self.capabilities, needs, SIM_LACKS)
        self.validator = ActionValidator(spec, self.book, self.perf, self.capabilities, self._job_name)
        self.view = SimView(self)
        self.actions = SimActions(self, scheduler.name)
        self._by = scheduler.name
        self.actions_for_power = SimActions(self, power.manager.name if power else "power manager")
        scheduler.bind(BindContext(spec, jobs, rng, self.node_rank, self.perf))
        # Queue policies that admit every job leave the arrival loop without a call per job.
        self._admit = scheduler.admit if type(scheduler).admit is not Scheduler.admit else None

        n = len(jobs)
        self._gpu_width = max(spec.max_gpus_per_node, 1)
        self._node_code = spec.gpu_model_code.tolist()
        self.now = 0.0
        self.status = np.full(n, STATUS_FUTURE, dtype=np.int8)
        self.phase = np.full(n, PHASE_RELEASED, dtype=np.int8)
        self.start_s = np.full(n, np.nan)
        self.end_s = np.full(n, np.nan)
        self.work = self.perf.work
        self.remaining = self.work.astype(np.float64).copy()
        self.rate = np.ones(n)
        self.last_update = np.zeros(n)
        self.version = np.zeros(n, dtype=np.int64)
        self.alloc_id = np.full(n, NO_ALLOC, dtype=np.int64)
        self.share = np.zeros(n, dtype=np.int64)
        self.setting_id = np.zeros(n, dtype=np.int64)
        self.load = np.zeros(n)
        self.held_gpus = np.zeros(n, dtype=np.int64)
        self.hold_since = np.zeros(n)
        self.attained_gpu_s = np.zeros(n)
        self.executed_s = np.zeros(n)
        self.last_stop = jobs.submit_s.astype(np.float64).copy()
        self.ckpt_next = np.full(n, math.inf)
        self.ckpt_done = np.zeros(n)
        self.restarts = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.restart_gpu_s = np.zeros(n)
        self.work_lost = np.zeros(n)
        self.lost_gpu_s = np.zeros(n)
        self.last_alloc = np.full(n, NO_ALLOC, dtype=np.int64)  # what each job held last (same-GPU restarts)
        self.log = AllocationLog()
        self.running: dict[int, None] = {}  # insertion-ordered set of jobs holding GPUs
        self.running_changes = 0  # bumped whenever `running` changes (the view caches its array)
        self._residents: dict[int, list[int]] = {}  # GPU id -> jobs sharing it (share < 1000 only)
        self._priority = np.asarray(scheduler.priority(jobs), dtype=np.float64)
        self._pending: SortedList = SortedList()
        self._deferred: set[int] = set()  # pending on purpose (Decision.defer): outside the queue
        self.keep_free_gpus = 0.0  # headroom asked for by the policy (Decision.keep_free_gpus)
        self._heap: list[_HeapEntry] = []
        self._seq = 0
        self._released = True
        self._pass_due = False  # a round asked for a decision after this batch's events
        self._last_start = 0.0
        self._next_arrival = math.inf
        # What changed since the scheduler's last decision (view.changes), and the stall detector's count of
        # decisions in a row that changed nothing while nothing else could.
        self.changes = ChangeCounter()
        self._idle_decisions = 0
        self._idle_since = 0.0
        self._total_at_decision = -1
        # Set by a caller that reads only the outcome after the run (experiments.run): the per-job working
        # arrays then go as soon as the loop ends (see run).
        self.release_after_run = False

    # ----- services for the view, actions and the energy layer ------------------------------------------------
    @property
    def queue_length(self) -> int:
        return len(self._pending)

    def schedule(self, time: float, callback: WakeCallback, actions: SimActions | None = None) -> None:
        """Call `callback(view, actions)` at `time` (after completions and restart ends at that time; a power
        manager's timers after the scheduling decision at that time)."""
        kind = KIND_POWER_TIMER if actions is self.actions_for_power else KIND_CALLBACK
        self._push(time, kind, -1, (callback, actions or self.actions_for_power))

    def mark_released(self) -> None:
        """Capacity appeared (e.g. a node finished booting): run a scheduling decision after this batch."""
        self._released = True

    def pending(self) -> Iterator[int]:
        """Pending jobs in priority order; safe while jobs start (read in small chunks, resumed by key)."""
        if not self._pending:
            return
        chunk = list(islice(self._pending, _PENDING_CHUNK))
        while chunk:
            for _, j in chunk:
                if self.status[j] == STATUS_PENDING:
                    yield j
            last = chunk[-1]
            chunk = list(islice(self._pending.irange(minimum=last, inclusive=(False, True)), _PENDING_CHUNK))

    # ----- the loop ----------------------------------------------------------------------------------------------
    def run(self) -> RunOutcome:
        from .native_replay import compiled_replay

        jobs = self.jobs
        n = len(jobs)
        order = np.argsort(jobs.submit_s, kind="stable")
        first = float(jobs.submit_s[order[0]]) if n else 0.0
        self.now = first
        self._last_start = self.now
        self._next_arrival = first if n else math.inf
        for obs in self.observers:
            obs.on_start(self)
        if self.power is not None:
            self.power.start(self)
        self.scheduler.on_start(self.view, self.actions)
        # Runs whose every part the compiled loop mirrors run there, with the same results (native_replay.py).
        replay = compiled_replay(self)
        compiled = replay is not None and replay.run()
        if not compiled:
            # Python lists for the Python loop only (10^6 jobs: ~70 MB of float and int objects).
            self._run_events(jobs.submit_s[order].tolist(), order.tolist())
        del order, replay
        if self.progress is not None:
            self.progress(n, n)
        if self.power is not None:
            self.power.finish(self.now)
        if compiled and self.release_after_run:
            # Nothing reads them from here on in a compiled run (no timers are left for its power manager): let
            # them go before the energy ledger's sums, the run's largest temporaries.
            self._release_working_arrays()
        for obs in self.observers:
            obs.on_finish(self)
        if self.power is not None:
            tail = self._drain_power_tail()
            for obs in self.observers:
                on_tail = getattr(obs, "on_tail", None)
                if on_tail is not None:
                    on_tail(*tail)
        return RunOutcome(
            self.status,
            self.start_s,
            self.end_s,
            self.log,
            self.restarts,
            self.preemptions,
            self.restart_gpu_s,
            self.work_lost,
            self.lost_gpu_s,
        )

    # Per-job arrays the run works with that RunOutcome does not carry.
    _WORKING_ARRAYS = (
        "phase",
        "remaining",
        "rate",
        "last_update",
        "version",
        "alloc_id",
        "share",
        "setting_id",
        "load",
        "held_gpus",
        "hold_since",
        "attained_gpu_s",
        "executed_s",
        "last_stop",
        "ckpt_next",
        "ckpt_done",
        "last_alloc",
        "ckpt_interval",
        "_priority",
    )

    def release_working_state(self) -> None:
        """Let go of the per-job working arrays and the allocation log after the run, once everything read from
        them is made (10^6 jobs: ~300 MB); the outcome's arrays stay. The simulator cannot run on afterwards."""
        self._release_working_arrays()
        self.log = AllocationLog()

    def _release_working_arrays(self) -> None:
        for name in self._WORKING_ARRAYS:
            array = getattr(self, name)
            setattr(self, name, np.zeros(0, dtype=array.dtype))

    def _run_events(self, times_list: list[float], order_list: list[int]) -> None:
        """The event loop in Python: arrivals `times_list` (jobs `order_list`) and the heap's events, in order."""
        jobs = self.jobs
        n = len(jobs)
        never_fits = self.book.never_fits
        status = self.status
        heap = self._heap
        progress_step = max(n // 200, 1)
        scheduler = self.scheduler
        decide_on_arrival = scheduler.decide_on_arrival
        decide_on_release = scheduler.decide_on_release
        admit = self._admit
        counts = self.changes.counts

        ai = 0
        # Callbacks (power timers, rounds) do not keep the run alive on their own: it ends with the last
        # completion, unless work is still waiting (e.g. for a node to boot).
        while ai < n or self.running or ((self._pending or self._deferred) and heap):
            t_arrival = times_list[ai] if ai < n else math.inf
            t_event = heap[0][0] if heap else math.inf
            t = t_arrival if t_arrival < t_event else t_event
            if t > self.now:
                for hook in self._on_interval:
                    hook(self, self.now, t)
                self.now = t
            while heap and heap[0][0] <= t and heap[0][1] != KIND_POWER_TIMER:
                _, kind, _, ref, payload = heapq.heappop(heap)
                if kind == KIND_CALLBACK:
                    assert isinstance(payload, tuple)
                    callback, actions = payload
                    callback(self.view, actions)
                elif payload == self.version[ref] and status[ref] == STATUS_RUNNING:
                    if kind == KIND_COMPLETION:
                        self._finish(ref)
                    else:
                        self._restart_done(ref)
            if ai >= n and not self.running and t - self._last_start > STALL_LIMIT_S:
                raise self._stalled(f"nothing has run for {STALL_LIMIT_S / 86400:.0f} simulated days")
            arrived = False
            while ai < n and times_list[ai] <= t:
                j = order_list[ai]
                ai += 1
                if never_fits[j] or (admit is not None and not admit(jobs, j)):
                    status[j] = STATUS_UNSCHEDULABLE
                    continue
                self._enqueue(j)
                counts[ARRIVED] += 1
                arrived = True
                if self.progress is not None and ai % progress_step == 0:
                    self.progress(ai, n)
            self._next_arrival = times_list[ai] if ai < n else math.inf
            if (arrived and decide_on_arrival) or (self._released and decide_on_release) or self._pass_due:
                self._released = self._pass_due = False
                before = self.changes.total()
                scheduler.decide(self.view, self.actions)
                self.changes.decided()
                if self._pending and not self.running:
                    self._watch_stall(before)
                else:
                    self._idle_decisions = 0
            # Power-manager timers, after the decision. Events the decision pushed for this instant (heap order puts
            # them first) stop this loop and run in the next iteration at the same time, timers after them.
            while heap and heap[0][0] <= t and heap[0][1] == KIND_POWER_TIMER:
                payload = heapq.heappop(heap)[4]
                assert isinstance(payload, tuple)
                callback, actions = payload
                callback(self.view, actions)
            if self.check:
                self._check_invariants()
            if self.power is not None:
                self.power.batch_end()
            for hook in self._on_batch_end:
                hook(self)

    def _drain_power_tail(self) -> tuple[list[Transition], float, bool]:
        """Play out the power manager's timers after the last completion, with no jobs, and return the node
        power transitions this adds, how far it went and whether no power timer was left. The run's own records
        are left as they were at its end: the transitions are taken back off the controller's log and the clock
        is set back, so every own-window figure and counter is unchanged (the live node power states are left as
        the tail ends them; nothing reads them after the run)."""
        power, heap = self.power, self._heap
        assert power is not None
        mine = self.actions_for_power

        def powers(entry: _HeapEntry) -> bool:  # the manager's timers and the ends of its boots and shutdowns
            payload = entry[4]
            return entry[1] == KIND_POWER_TIMER or (
                entry[1] == KIND_CALLBACK and isinstance(payload, tuple) and payload[1] is mine
            )

        end, mark = self.now, len(power.transitions)
        horizon = end + TAIL_HORIZON_S
        calls = 0
        while heap and calls < TAIL_MAX_TIMERS:
            if not powers(heap[0]):  # stale job events and policy rounds: no work is left for them
                heapq.heappop(heap)
                continue
            t = heap[0][0]
            if t > horizon:
                break
            self.now = max(self.now, t)
            while heap and heap[0][0] <= t and calls < TAIL_MAX_TIMERS:
                entry = heapq.heappop(heap)
                if powers(entry):
                    payload = entry[4]
                    assert isinstance(payload, tuple)
                    callback, actions = payload
                    callback(self.view, actions)
                    calls += 1
            power.batch_end()
        left = [entry[0] for entry in heap if powers(entry)]
        settled = not left
        drained_to = self.now if settled else min(min(left), horizon)  # the states are exact up to here
        tail = power.transitions[mark:]
        del power.transitions[mark:]
        self.now = end
        return tail, drained_to, settled

    def _watch_stall(self, before: int) -> None:
        """Count a decision that found jobs waiting and nothing running; raise once `STALL_DECISIONS` in a row
        changed nothing while nothing else could (no node in transition, no wake-up the policy asked for)."""
        total = self.changes.total()
        power = self.power
        idle = (
            total == before == self._total_at_decision
            and (power is None or not (power.counts[BOOTING] or power.counts[SHUTTING_DOWN]))
            and self.scheduler.waiting_until() <= self.now
        )
        self._total_at_decision = total
        if not idle:
            self._idle_decisions = 0
            return
        if self._idle_decisions == 0:
            self._idle_since = self.now
        self._idle_decisions += 1
        if self._idle_decisions >= STALL_DECISIONS:
            raise self._stalled(
                f"{self._idle_decisions} decisions in a row (t = {self._idle_since:.0f} s to {self.now:.0f} s) "
                "changed nothing while nothing runs, no node is booting and nothing else changed"
            )

    def _stalled(self, why: str) -> WattschedError:
        """The stall error: which policy, which jobs wait, what capacity is on."""
        waiting = [str(self.jobs.job_id[j]) for j in islice(self.pending(), 5)]
        more = len(self._pending) - len(waiting)
        who = f"policy '{self.scheduler.name}'"
        if self.power is not None:
            who += f" with power manager '{self.power.manager.name}'"
        on = int(self.state.available.sum())
        free = self.view.free_gpus_total()
        return WattschedError(
            f"simulation stalled: {who}: {len(self._pending)} job(s) wait ({', '.join(waiting)}"
            f"{f', and {more} more' if more > 0 else ''}) with {free} free GPU(s) on {on} of "
            f"{self.spec.num_nodes} node(s) on; {why} (a policy that keeps an out-of-date decision or never "
            "starts them, or a power manager that never boots capacity?)"
        )

    # ----- job lifecycle ------------------------------------------------------------------------------------------
    def _push(self, time: float, kind: int, ref: int, payload: int | _Callback) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, kind, self._seq, ref, payload))

    def _enqueue(self, job: int) -> None:
        self.status[job] = STATUS_PENDING
        self.changes.journal.append(job)
        self._pending.add((self._priority[job], job))

    def _dequeue(self, job: int) -> None:
        self.changes.journal.append(job)
        if job in self._deferred:
            self._deferred.remove(job)
        else:
            self._pending.remove((self._priority[job], job))

    def defer(self, job: int, deferred: bool) -> None:
        if self.status[job] != STATUS_PENDING:
            raise InvalidDecision(self._by, str(self.jobs.job_id[job]), "defer of a job that is not pending")
        if deferred and job not in self._deferred:
            self._pending.remove((self._priority[job], job))
            self._deferred.add(job)
            self.changes.counts[SETTINGS] += 1
            self.changes.journal.append(job)
        elif not deferred and job in self._deferred:
            self._deferred.remove(job)
            self._pending.add((self._priority[job], job))
            self.changes.counts[SETTINGS] += 1
            self.changes.journal.append(job)

    def _settle(self, job: int) -> None:
        """Bring a holding job's progress (and its last checkpoint) up to now."""
        now = self.now
        last = self.last_update[job]
        elapsed = now - last
        if elapsed > 0:
            rate = self.rate[job]
            if self.ckpt_next[job] <= now:
                interval = self.ckpt_interval[job]
                k = math.floor((now - self.ckpt_next[job]) / interval)
                t_ckpt = self.ckpt_next[job] + k * interval
                self.ckpt_done[job] = self.work[job] - self.remaining[job] + rate * (t_ckpt - last)
                self.ckpt_next[job] = t_ckpt + interval
            self.remaining[job] = max(self.remaining[job] - elapsed * rate, 0.0)
        self.last_update[job] = now

    def _schedule_completion(self, job: int) -> None:
        self.version[job] += 1
        end = self.now + self.remaining[job] / self.rate[job]
        self._push(end, KIND_COMPLETION, job, int(self.version[job]))

    def _gpu_code(self, placement: Placement) -> int:
        return self._node_code[placement[0][0]] if placement else -1

    def _solo_rate(self, job: int, placement: Placement, setting: GpuSetting) -> float:
        ngpu = sum([len(g) for _, g, _, _ in placement])
        if not self.perf.modelled[job]:
            return self.perf.solo_rate(job, self._gpu_code(placement), ngpu, 1, 1, setting)
        nodes = len(placement)
        switches = len({int(self.spec.switch_id[n]) for n, _, _, _ in placement}) if nodes > 1 else 1
        return self.perf.solo_rate(job, self._gpu_code(placement), ngpu, nodes, switches, setting)

    def _log(self, job: int, lost: float = 0.0) -> None:
        self.log.append(
            self.now,
            job,
            int(self.alloc_id[job]),
            float(self.load[job]),
            float(self.rate[job]),
            int(self.phase[job]),
            int(self.setting_id[job]),
            lost,
        )

    def _take(self, job: int, target: Target) -> tuple[int, int]:
        """Allocate the target's resources to `job` (no status change); errors name the scheduler and job.
        Returns (GPU model code, GPU count)."""
        state = self.state
        milli = int(target.share_milli)
        placement = target.placement
        self.validator.target(self._by, job, target)
        try:
            for node, gpus, cpu, mem in placement:
                if not state.available[node]:
                    raise RuntimeError(f"node {self.spec.node_names[node]} is not on")
                state.allocate(node, gpus, milli, cpu, mem)
        except (RuntimeError, IndexError) as exc:
            raise InvalidDecision(self._by, str(self.jobs.job_id[job]), str(exc)) from None
        setting = target.setting
        self.alloc_id[job] = self.log.add_alloc(placement, milli)
        self.share[job] = milli
        self.setting_id[job] = 0 if setting is DEFAULT_SETTING else self.log.setting_id(setting)
        code = self._node_code[placement[0][0]] if placement else -1
        ngpu = sum([len(g) for _, g, _, _ in placement])
        self.load[job] = self.perf.gpu_load(job, code, setting) if ngpu else 0.0
        self.held_gpus[job] = ngpu
        self.hold_since[job] = self.now
        if milli < MILLI:
            width = self._gpu_width
            for node, gpus, _, _ in placement:
                for g in gpus:
                    self._residents.setdefault(node * width + g, []).append(job)
            self.validator.memory(self._by, job, placement, self._co_runners(job, placement))
        return code, ngpu

    def _job_name(self, job: int) -> str:
        return str(self.jobs.job_id[job])

    def _invalid(self, job: int, message: str) -> InvalidDecision:
        return InvalidDecision(self._by, str(self.jobs.job_id[job]), message)

    def _give_back(self, job: int) -> tuple[Placement, int]:
        """Release everything `job` holds; returns what it held (placement, milli per GPU)."""
        state = self.state
        alloc_id = int(self.alloc_id[job])
        placement = self.log.placements[alloc_id]
        milli = int(self.share[job])
        for node, gpus, cpu, mem in placement:
            state.release(node, gpus, milli, cpu, mem)
        if milli < MILLI:
            width = self._gpu_width
            for node, gpus, _, _ in placement:
                for g in gpus:
                    residents = self._residents[node * width + g]
                    residents.remove(job)
                    if not residents:
                        del self._residents[node * width + g]
        held = self.now - self.hold_since[job]
        self.attained_gpu_s[job] += self.held_gpus[job] * held
        self.executed_s[job] += held
        self.held_gpus[job] = 0
        self.alloc_id[job] = NO_ALLOC
        self.last_stop[job] = self.now
        self.last_alloc[job] = alloc_id
        if self.power is not None:
            self.power.job_left([node for node, *_ in placement])
        return placement, milli

    def _co_runners(self, job: int, placement: Placement) -> list[list[int]]:
        width = self._gpu_width
        out = []
        for node, gpus, _, _ in placement:
            for g in gpus:
                others = [k for k in self._residents.get(node * width + g, ()) if k != job]
                out.append(others)
        return out

    def _current_rate(self, job: int) -> float:
        """Rate of a running job from its allocation, setting and co-runners."""
        placement = self.log.placements[int(self.alloc_id[job])]
        setting = self.log.settings[int(self.setting_id[job])]
        rate = self._solo_rate(job, placement, setting)
        if self.share[job] < MILLI:
            factor = self.perf.shared_factor(job, self._gpu_code(placement), self._co_runners(job, placement))
            rate *= factor
        if not rate > 0:
            raise InvalidDecision(self._by, str(self.jobs.job_id[job]), "configuration makes no progress")
        return rate

    def _begin_running(self, job: int, rate: float | None = None) -> None:
        """Phase RUNNING from now: rate from the configuration (unless given), completion scheduled,
        checkpoints counted from now."""
        now = self.now
        if rate is None or not rate > 0:
            rate = self._current_rate(job)
        self.phase[job] = PHASE_RUNNING
        self.rate[job] = rate
        self.last_update[job] = now
        interval = self.ckpt_interval[job]
        if interval > 0:
            self.ckpt_next[job] = now + interval
            self.ckpt_done[job] = self.work[job] - self.remaining[job]
        version = self.version[job] = self.version[job] + 1
        self._seq += 1
        heapq.heappush(
            self._heap, (now + self.remaining[job] / rate, KIND_COMPLETION, self._seq, job, version)
        )

    def _neighbours_changed(self, jobs: Iterable[int], skip: Iterable[int] = ()) -> None:
        """Co-runners changed for these jobs: re-rate the running ones whose rate moved."""
        skip = set(skip)
        for k in jobs:
            if k in skip or self.status[k] != STATUS_RUNNING:
                continue
            # Restarting: no progress to re-rate and it draws the held draw, but its load is kept current (and
            # logged) for when it computes.
            if self.phase[k] == PHASE_RESTARTING:
                load = self._load_now(k)
                if load != self.load[k]:
                    self.load[k] = load
                    self._log(k)
                continue
            if self.phase[k] != PHASE_RUNNING:
                continue
            new = self._current_rate(k)
            load = self._load_now(k)
            if new != self.rate[k] or load != self.load[k]:
                self._settle(k)
                self.rate[k] = new
                self.load[k] = load
                self._schedule_completion(k)
                self._log(k)

    def _load_now(self, job: int) -> float:
        """The load a job adds to each of its GPUs: its setting's, and on shared GPUs what the sharing model says
        next to its current co-runners (loads need not simply add up)."""
        if not self.held_gpus[job]:
            return 0.0
        placement = self.log.placements[int(self.alloc_id[job])]
        setting = self.log.settings[int(self.setting_id[job])]
        code = self._gpu_code(placement)
        if self.share[job] >= MILLI:
            return self.perf.gpu_load(job, code, setting)
        return self.perf.shared_load(job, code, setting, self._co_runners(job, placement))

    def _sharers_of(self, placement: Placement) -> set[int]:
        width = self._gpu_width
        out: set[int] = set()
        for node, gpus, _, _ in placement:
            for g in gpus:
                out.update(self._residents.get(node * width + g, ()))
        return out

    # Actions -------------------------------------------------------------------------------------------------
    def start(self, job: int, target: Target) -> None:
        if self.status[job] != STATUS_PENDING:
            raise InvalidDecision(self._by, str(self.jobs.job_id[job]), "start of a job that is not pending")
        code, ngpu = self._take(job, target)
        self._dequeue(job)
        self.status[job] = STATUS_RUNNING
        now = self.now
        first = math.isnan(self.start_s[job])
        if first:
            self.start_s[job] = now
        self._last_start = now
        self.running[job] = None
        self.running_changes += 1
        self.changes.counts[TAKEN] += 1
        if target.share_milli < MILLI:
            self.load[job] = self._load_now(job)
        if first or ngpu == 0:
            exclusive = target.share_milli >= MILLI and not self.perf.modelled[job]
            # An exclusive job without a table needs no co-runner or placement-span lookup.
            rate = self.perf.solo_rate(job, code, ngpu, 1, 1, target.setting) if exclusive else None
            self._begin_running(job, rate)
        else:
            self._begin_restart(job, target)
        self._log(job)
        if self.power is not None:
            self.power.job_started(job, [node for node, *_ in target.placement])
        if target.share_milli < MILLI:
            self._neighbours_changed(self._sharers_of(target.placement), skip=(job,))
        for hook in self._on_job_start:
            hook(self, job)

    def same_gpus_as_last(self, job: int, placement: Placement) -> bool:
        last = int(self.last_alloc[job])
        return last != NO_ALLOC and gpu_set(self.log.placements[last]) == gpu_set(placement)

    def _begin_restart(self, job: int, target: Target) -> None:
        same = self.same_gpus_as_last(job, target.placement)
        delay = self.perf.restart_delay_s(job, target.num_gpus, same)
        self.restarts[job] += 1
        self.restart_gpu_s[job] += delay * target.num_gpus
        self.phase[job] = PHASE_RESTARTING
        self.rate[job] = 0.0
        self.last_update[job] = self.now
        self.ckpt_next[job] = math.inf
        self.version[job] += 1
        self._push(self.now + delay, KIND_RESTART_DONE, job, int(self.version[job]))

    def _restart_done(self, job: int) -> None:
        self._begin_running(job)
        self._log(job)

    def stop(self, job: int, save: bool = False) -> None:
        if self.status[job] != STATUS_RUNNING:
            raise InvalidDecision(self._by, str(self.jobs.job_id[job]), "stop of a job that is not running")
        self.validator.stop(self._by, job)
        lost, alloc = self._release_for_change(job, save)
        self.preemptions[job] += 1
        del self.running[job]
        self.running_changes += 1
        counts = self.changes.counts
        counts[RELEASED] += 1
        counts[ARRIVED] += 1
        self._enqueue(job)
        self._log(job, lost)
        self._released = True
        self._after_release(job, alloc)

    def _release_for_change(self, job: int, save: bool) -> tuple[float, tuple[Placement, int]]:
        """Settle, roll back to the last checkpoint unless saving now, and release the GPUs."""
        lost = 0.0
        if self.phase[job] == PHASE_RUNNING:
            self._settle(job)
            if not save and self.ckpt_interval[job] > 0:
                lost = self.work[job] - self.remaining[job] - self.ckpt_done[job]
                if lost > 0:
                    self.remaining[job] += lost
                    self.work_lost[job] += lost
                    self.lost_gpu_s[job] += lost / self.rate[job] * self.held_gpus[job]
                else:
                    lost = 0.0
        self.version[job] += 1  # drop its completion or restart event
        alloc = self._give_back(job)
        self.phase[job] = PHASE_RELEASED
        self.rate[job] = 0.0
        self.load[job] = 0.0
        self.ckpt_next[job] = math.inf
        return lost, alloc

    def _after_release(self, job: int, held: tuple[Placement, int]) -> None:
        placement, milli = held
        if milli < MILLI:
            self._neighbours_changed(self._sharers_of(placement), skip=(job,))
        for hook in self._on_job_end:
            hook(self, job)

    def move_many(self, targets: Mapping[int, Target]) -> None:
        touched: set[int] = set()
        was_running: dict[int, bool] = {}
        for job in targets:
            if self.status[job] != STATUS_RUNNING:
                raise InvalidDecision(
                    self._by, str(self.jobs.job_id[job]), "move of a job that is not running"
                )
            self.validator.stop(self._by, job)
            was_running[job] = self.phase[job] == PHASE_RUNNING
            _, (placement, _) = self._release_for_change(job, save=True)  # a planned move checkpoints first
            touched |= self._sharers_of(placement)
        for job, target in targets.items():
            previous = self.log.placements[int(self.last_alloc[job])]
            in_place = was_running[job] and gpu_set(target.placement) == gpu_set(previous)
            self._take(job, target)
            if in_place:
                self._begin_running(job)  # same GPUs, only the share or CPU changed: it keeps running
            else:
                self._begin_restart(job, target)
            self._log(job)
            if self.power is not None:
                self.power.job_started(job, [node for node, *_ in target.placement])
            touched |= self._sharers_of(target.placement)
        self._released = True
        self.changes.counts[RELEASED] += len(targets)
        self.changes.counts[TAKEN] += len(targets)
        self.changes.journal.extend(targets)
        # Every running job on the touched GPUs, movers that kept running in place included: one of them may
        # have been re-rated before a later mover joined its GPUs (restarting movers are rated when they end).
        self._neighbours_changed(touched)

    def retune(self, job: int, setting: GpuSetting) -> None:
        if self.status[job] != STATUS_RUNNING:
            raise InvalidDecision(self._by, str(self.jobs.job_id[job]), "retune of a job that is not running")
        placement = self.log.placements[int(self.alloc_id[job])]
        if self.held_gpus[job]:
            self.validator.setting(self._by, job, placement, setting)
        self.setting_id[job] = self.log.setting_id(setting)
        self.changes.counts[SETTINGS] += 1
        self.changes.journal.append(job)
        self.load[job] = self._load_now(job)
        if self.phase[job] == PHASE_RUNNING:
            self._settle(job)
            self.rate[job] = self._current_rate(job)
            self._schedule_completion(job)
        self._log(job)

    def reject(self, job: int) -> None:
        if self.status[job] != STATUS_PENDING:
            raise InvalidDecision(self._by, str(self.jobs.job_id[job]), "reject of a job that is not pending")
        self._dequeue(job)
        self.status[job] = STATUS_DROPPED
        self.changes.counts[LEFT] += 1

    def _finish(self, job: int) -> None:
        now = self.now
        self.remaining[job] = 0.0
        self.last_update[job] = now
        self.version[job] += 1
        held = self._give_back(job)
        self.phase[job] = PHASE_RELEASED
        self.rate[job] = 0.0
        self.load[job] = 0.0
        self.ckpt_next[job] = math.inf
        self.status[job] = STATUS_DONE
        self.end_s[job] = now
        del self.running[job]
        self.running_changes += 1
        self._released = True
        counts = self.changes.counts
        counts[LEFT] += 1
        counts[RELEASED] += 1
        self.changes.journal.append(job)
        self.log.append(now, job, NO_ALLOC, 0.0, 0.0, PHASE_RELEASED, int(self.setting_id[job]), 0.0)
        self._after_release(job, held)

    def _check_invariants(self) -> None:
        self.state.check_invariants()
        started = ~np.isnan(self.start_s)
        if (self.start_s[started] < self.jobs.submit_s[started] - 1e-9).any():
            raise AssertionError("a job started before it was submitted")
        if len(self.running) != int((self.status == STATUS_RUNNING).sum()):
            raise AssertionError("running set out of sync with job status")
        if len(self._pending) + len(self._deferred) != int((self.status == STATUS_PENDING).sum()):
            raise AssertionError("pending queue out of sync with job status")
