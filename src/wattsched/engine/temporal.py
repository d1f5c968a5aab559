"""Temporal mode: jobs arrive, queue, run and leave. A discrete-event loop over a heap, no fixed ticks.

Arrivals are read in order from a sorted array (they never enter the heap, which keeps it small for 10^6 jobs).
The heap holds completions and hook events (power-state transitions, price/carbon ticks, policy wake-ups), ordered
by (time, priority, sequence). Job progress is integrated analytically: a job has remaining work and a rate, and
its completion event is recomputed whenever its rate changes; stale completions are dropped by a version counter.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

import numpy as np
from sortedcontainers import SortedList

from ..core.cluster import ClusterSpec, ClusterState
from ..core.errors import WattschedError
from ..core.jobs import JobTable
from ..policies.base import Placement, PlacementPolicy, QueuePolicy, run_pass
from .observers import Observer
from .requests import RequestBook

# Event priorities at equal times: completions free resources before arrivals, hooks run last.
PRIO_COMPLETION = 0
PRIO_HOOK = 1

# Job status codes in the output table.
STATUS_FUTURE, STATUS_PENDING, STATUS_RUNNING, STATUS_DONE, STATUS_UNSCHEDULABLE, STATUS_DROPPED = range(6)
STATUS_NAMES = ("not_arrived", "pending", "running", "completed", "unschedulable", "dropped")

_FAILED_MEMO_SIZE = 32
STALL_LIMIT_S = 3650 * 86400.0
_PENDING_CHUNK = 16


def _implementing(observers: list[Observer], hook: str) -> list:
    """Bound `hook` methods of the observers that override the base class's no-op."""
    base = getattr(Observer, hook)
    return [getattr(o, hook) for o in observers if getattr(type(o), hook) is not base]


@dataclass
class JobOutcome:
    """Per-job results, as arrays aligned with the job table."""

    status: np.ndarray  # int8 [J]
    start_s: np.ndarray  # float64 [J]
    end_s: np.ndarray  # float64 [J]
    placements: list[Placement | None]


class Simulator:
    """Runs one workload on one cluster under one (queue, placement) policy pair."""

    def __init__(
        self,
        jobs: JobTable,
        spec: ClusterSpec,
        queue: QueuePolicy,
        placement: PlacementPolicy,
        rng: np.random.Generator,
        observers: Iterable[Observer] = (),
        check_invariants: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ):
        self.jobs = jobs
        self.spec = spec
        self.queue = queue
        self.placement = placement
        self.state = ClusterState(spec)
        self.book = RequestBook.build(jobs, spec)
        self.observers = list(observers)
        # Dispatch each hook only to observers that implement it: most hooks run once per event.
        self._on_interval = _implementing(self.observers, "on_interval")
        self._on_job_start = _implementing(self.observers, "on_job_start")
        self._on_job_end = _implementing(self.observers, "on_job_end")
        self._on_batch_end = _implementing(self.observers, "on_batch_end")
        self.check = check_invariants
        self.progress = progress
        placement.bind(spec, rng)
        placement.prepare(jobs, spec)

        n = len(jobs)
        self.now = 0.0
        self.status = np.full(n, STATUS_FUTURE, dtype=np.int8)
        self.start_s = np.full(n, np.nan)
        self.end_s = np.full(n, np.nan)
        self.rate = np.ones(n)
        self.remaining = jobs.duration_s.astype(np.float64).copy()
        self.last_update = np.zeros(n)
        self.version = np.zeros(n, dtype=np.int64)
        self.placements: list[Placement | None] = [None] * n
        self.running: set[int] = set()
        self._priority = np.asarray(queue.priority(jobs), dtype=np.float64)
        self._pending: SortedList = SortedList()
        self._heap: list[tuple[float, int, int, int, object]] = []
        self._seq = 0
        self._failed: list[tuple[int, int, int, int, int, bool]] = []
        self._failed_epoch = -1
        self._released = True
        self._last_start = 0.0

    # ----- public API for observers, power managers and frequency governors -----------------------------------
    @property
    def queue_length(self) -> int:
        return len(self._pending)

    def schedule(self, time: float, callback: Callable[[Simulator], None]) -> None:
        """Run `callback(sim)` at `time` (after completions at that time). Used by energy-layer hooks."""
        self._push(time, PRIO_HOOK, -1, callback)

    def set_rate(self, job: int, rate: float) -> None:
        """Change a running job's progress rate (work seconds per second) from now on."""
        if rate <= 0:
            raise ValueError("rate must be positive")
        self._settle(job)
        self.rate[job] = rate
        self._schedule_completion(job)

    def mark_released(self) -> None:
        """Tell the engine that capacity appeared (e.g. a node finished booting): run a scheduling pass."""
        self._released = True

    # ----- PassContext (the queue policy's view of one pass) ----------------------------------------------------
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

    def try_start(self, job: int) -> bool:
        state = self.state
        if self._failed_epoch != state.release_epoch:
            self._failed.clear()
            self._failed_epoch = state.release_epoch
        sig = self.book.signature(job)
        # Within one epoch capacity only shrinks, so a request that dominates a failed one fails too.
        for f in self._failed:
            if (
                sig[0] == f[0]
                and sig[5] == f[5]
                and sig[1] >= f[1]
                and sig[2] >= f[2]
                and sig[3] >= f[3]
                and sig[4] >= f[4]
            ):
                return False
        placement = self.placement.place(state, self.book.request(job))
        if placement is None:
            if len(self._failed) < _FAILED_MEMO_SIZE:
                self._failed.append(sig)
            return False
        self._start(job, placement)
        return True

    def running_release_profile(self) -> tuple[np.ndarray, np.ndarray]:
        running = np.fromiter(self.running, dtype=np.int64, count=len(self.running))
        ends = self.last_update[running] + self.remaining[running] / self.rate[running]
        gpus = self.jobs.num_gpu[running] * self.jobs.gpu_milli[running] / 1000.0
        return ends, gpus

    def free_gpus_total(self) -> int:
        return int(self.state.free_gpus[self.state.available].sum())

    # ----- the loop ----------------------------------------------------------------------------------------------
    def run(self) -> JobOutcome:
        jobs = self.jobs
        n = len(jobs)
        order = np.argsort(jobs.submit_s, kind="stable")
        arrival_times = jobs.submit_s[order]
        order_list = order.tolist()
        times_list = arrival_times.tolist()
        never_fits = self.book.never_fits
        status = self.status
        heap = self._heap
        progress_step = max(n // 200, 1)
        self.now = times_list[0] if n else 0.0
        self._last_start = self.now
        for obs in self.observers:
            obs.on_start(self)

        ai = 0
        # Hooks (power timers, forecast ticks) do not keep the run alive on their own: it ends with the last
        # completion, unless work is still waiting (e.g. for a node to boot).
        while ai < n or self.running or (self._pending and heap):
            t_arrival = times_list[ai] if ai < n else math.inf
            t_event = heap[0][0] if heap else math.inf
            t = t_arrival if t_arrival < t_event else t_event
            if t > self.now:
                for hook in self._on_interval:
                    hook(self, self.now, t)
                self.now = t
            while heap and heap[0][0] <= t:
                _, _, _, ref, payload = heapq.heappop(heap)
                if ref >= 0:
                    if payload == self.version[ref] and status[ref] == STATUS_RUNNING:
                        self._finish(ref)
                else:
                    payload(self)  # type: ignore[operator]
            if ai >= n and not self.running and t - self._last_start > STALL_LIMIT_S:
                raise WattschedError(
                    f"simulation stalled: {len(self._pending)} jobs wait but nothing has run for "
                    f"{STALL_LIMIT_S / 86400:.0f} simulated days (a power manager that never boots capacity?)"
                )
            arrived = False
            while ai < n and times_list[ai] <= t:
                j = order_list[ai]
                ai += 1
                if never_fits[j] or not self.queue.admit(jobs, j):
                    status[j] = STATUS_UNSCHEDULABLE
                    continue
                status[j] = STATUS_PENDING
                self._pending.add((self._priority[j], j))
                arrived = True
                if self.progress is not None and ai % progress_step == 0:
                    self.progress(ai, n)
            if self._pending and (arrived or self._released):
                self._released = False
                run_pass(self.queue, self)
            if self.check:
                self._check_invariants()
            for hook in self._on_batch_end:
                hook(self)
        if self.progress is not None:
            self.progress(n, n)
        for obs in self.observers:
            obs.on_finish(self)
        return JobOutcome(status, self.start_s, self.end_s, self.placements)

    # ----- internals ---------------------------------------------------------------------------------------------
    def _push(self, time: float, prio: int, ref: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, prio, self._seq, ref, payload))

    def _settle(self, job: int) -> None:
        elapsed = self.now - self.last_update[job]
        if elapsed > 0:
            self.remaining[job] = max(self.remaining[job] - elapsed * self.rate[job], 0.0)
        self.last_update[job] = self.now

    def _schedule_completion(self, job: int) -> None:
        self.version[job] += 1
        end = self.now + self.remaining[job] / self.rate[job]
        self._push(end, PRIO_COMPLETION, job, int(self.version[job]))

    def _start(self, job: int, placement: Placement) -> None:
        state = self.state
        milli = int(self.jobs.gpu_milli[job])
        for node, gpus, cpu, mem in placement:
            state.allocate(node, gpus, milli, cpu, mem)
        self._pending.remove((self._priority[job], job))
        self.placements[job] = placement
        self.status[job] = STATUS_RUNNING
        self.start_s[job] = self.now
        self._last_start = self.now
        self.last_update[job] = self.now
        self.running.add(job)
        self._schedule_completion(job)
        for hook in self._on_job_start:
            hook(self, job)

    def _finish(self, job: int) -> None:
        state = self.state
        milli = int(self.jobs.gpu_milli[job])
        placement = self.placements[job]
        assert placement is not None
        for node, gpus, cpu, mem in placement:
            state.release(node, gpus, milli, cpu, mem)
        self.remaining[job] = 0.0
        self.status[job] = STATUS_DONE
        self.end_s[job] = self.now
        self.running.discard(job)
        self._released = True
        for hook in self._on_job_end:
            hook(self, job)

    def _check_invariants(self) -> None:
        self.state.check_invariants()
        started = ~np.isnan(self.start_s)
        if (self.start_s[started] < self.jobs.submit_s[started] - 1e-9).any():
            raise AssertionError("a job started before it was submitted")
        if len(self.running) != int((self.status == STATUS_RUNNING).sum()):
            raise AssertionError("running set out of sync with job status")
