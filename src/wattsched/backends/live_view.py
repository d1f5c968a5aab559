"""The live :class:`LiveView`: the read-only ``ClusterView`` of ``policies/contract.py`` over the mirror of a live
cluster (:class:`~.live.LiveCluster`, docs/live-slurm.md §3). Every member answers with the simulator's meaning;
what a live cluster cannot know is answered as ``live.py`` describes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..core.cluster import ClusterSpec, ClusterState
from ..core.jobs import JobTable
from ..core.placement import Placement, gpu_set
from ..core.requests import JobRequest
from ..core.states import PHASE_RUNNING, STATUS_PENDING
from ..policies.contract import Capability, ChangeCounter, ChangeSet, Target

if TYPE_CHECKING:
    from ..perf.model import PerformanceModel
    from .live import LiveCluster


class LiveView:
    """The live ``ClusterView``: the mirror's arrays, read-only by contract."""

    def __init__(self, cluster: LiveCluster):
        self._c = cluster
        # ``job_changes``: the mirror as the journal last saw it, and the journal (jobs, entries trimmed off).
        self._seen_status = np.zeros(0, dtype=np.int8)
        self._seen_hold = np.zeros(0)
        self._seen_stop = np.zeros(0)
        self._seen_targets: dict[int, Target] = {}
        self._seen_deferred: set[int] = set()
        self._journal = ChangeCounter()

    @property
    def now(self) -> float:
        return self._c.now

    @property
    def spec(self) -> ClusterSpec:
        return self._c.spec

    @property
    def jobs(self) -> JobTable:
        return self._c.jobs

    @property
    def state(self) -> ClusterState:
        return self._c.state

    @property
    def node_rank(self) -> np.ndarray:
        return self._c.node_rank

    @property
    def perf(self) -> PerformanceModel:
        return self._c.perf

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self._c.capabilities

    @property
    def status(self) -> np.ndarray:
        return self._c.status

    @property
    def phase(self) -> np.ndarray:
        return self._c.phase

    @property
    def queue_length(self) -> int:
        return int((self._c.status == STATUS_PENDING).sum()) - len(self._c.deferred)

    def pending(self) -> Iterator[int]:
        return self._c.pending()

    def pending_jobs(self) -> np.ndarray:
        return self._c.pending_array()

    def deferred_jobs(self) -> np.ndarray:
        return np.sort(np.fromiter(self._c.deferred, dtype=np.int64, count=len(self._c.deferred)))

    def running_jobs(self) -> np.ndarray:
        return np.fromiter(self._c.targets, dtype=np.int64, count=len(self._c.targets))

    @property
    def keep_free_gpus(self) -> float:
        return self._c.keep_free_gpus

    def request(self, job: int) -> JobRequest:
        return self._c.book.request(job)

    def request_class(self, job: int) -> int:
        return int(self._c.book.request_class[job])

    def target(self, job: int) -> Target | None:
        return self._c.targets.get(job)

    def previous_placement(self, job: int) -> Placement | None:
        return self._c.last_placement.get(job)

    # Work is the job's wall-time limit in seconds (the only duration a live user states), done at the model's rate.
    def remaining_work(self, jobs: np.ndarray) -> np.ndarray:
        c, jobs = self._c, np.asarray(jobs, dtype=np.int64)
        left: np.ndarray = np.maximum(c.perf.work[jobs] - c.progress_now(jobs), 0.0)
        return left

    def work(self, jobs: np.ndarray) -> np.ndarray:
        return self._c.perf.work[np.asarray(jobs, dtype=np.int64)]

    def rate(self, jobs: np.ndarray) -> np.ndarray:
        """The model's rate while a job holds GPUs and is not restarting (0 otherwise)."""
        c, jobs = self._c, np.asarray(jobs, dtype=np.int64)
        return np.where((c.held_gpus[jobs] > 0) & (c.now >= c.rate_since[jobs]), c.rate_now[jobs], 0.0)

    def held_gpus(self, jobs: np.ndarray) -> np.ndarray:
        return self._c.held_gpus[np.asarray(jobs, dtype=np.int64)]

    def attained_gpu_seconds(self, jobs: np.ndarray) -> np.ndarray:
        c, jobs = self._c, np.asarray(jobs, dtype=np.int64)
        attained: np.ndarray = c.attained_gpu_s[jobs] + c.held_gpus[jobs] * np.where(
            c.held_gpus[jobs] > 0, c.now - c.hold_since[jobs], 0.0
        )
        return attained

    def executed_seconds(self, jobs: np.ndarray) -> np.ndarray:
        c, jobs = self._c, np.asarray(jobs, dtype=np.int64)
        held: np.ndarray = c.executed_s[jobs] + np.where(
            c.held_gpus[jobs] > 0, c.now - c.hold_since[jobs], 0.0
        )
        return held

    def last_stop_s(self, jobs: np.ndarray) -> np.ndarray:
        return self._c.last_stop[np.asarray(jobs, dtype=np.int64)]

    def estimated_end(self, jobs: np.ndarray) -> np.ndarray:
        """As in the simulator: now + remaining / rate at the present rate (inf while restarting or without a
        time limit)."""
        c, jobs = self._c, np.asarray(jobs, dtype=np.int64)
        rate = self.rate(jobs)
        known = (c.jobs.duration_s[jobs] > 0) & (rate > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(
                known, c.now + self.remaining_work(jobs) / np.where(rate > 0, rate, 1.0), math.inf
            )

    def next_checkpoint_s(self, job: int) -> float:
        """As in the simulator: every checkpoint interval (the job's own, else the run's) from when it began
        running; never (inf) with no interval (it checkpoints when stopped) or while not running."""
        c = self._c
        own = float(c.jobs.checkpoint_s[job])
        interval = own if not math.isnan(own) else c.checkpoint_interval_s
        if not interval > 0 or c.phase[job] != PHASE_RUNNING:
            return math.inf
        since = c.hold_since[job]
        return float(since + (math.floor((c.now - since) / interval) + 1) * interval)

    def restart_delay_s(self, job: int, target: Target) -> float:
        """The performance model's restart delay, as in the simulator (0 for a first start)."""
        c = self._c
        if math.isnan(c.start_s[job]):
            return 0.0
        last = c.last_placement.get(job)
        same = last is not None and gpu_set(last) == gpu_set(target.placement)
        return float(c.perf.restart_delay_s(job, target.num_gpus, same))

    def running_release_profile(self) -> tuple[np.ndarray, np.ndarray]:
        running = self.running_jobs()
        jobs = self._c.jobs
        return self.estimated_end(running), jobs.num_gpu[running] * jobs.gpu_milli[running] / 1000.0

    def free_gpus_total(self) -> int:
        state = self._c.state
        return int(state.free_gpus[state.available].sum())

    @property
    def power_state(self) -> np.ndarray:
        return self._c.power_state

    @property
    def idle_since(self) -> np.ndarray:
        return self._c.idle_since

    def power_w(self) -> float | None:
        return self._c.meter.power_w

    def energy_used_j(self) -> float | None:
        return self._c.meter.energy_j

    @property
    def power_source(self) -> str:
        """Where ``power_w`` and ``energy_used_j`` come from (the agents' metrics, the model, or both)."""
        return self._c.meter.source

    def price_usd_per_mwh(self) -> float | None:
        price = self._c.price
        return None if price is None else float(price.value_at(np.array([self._c.now]))[0])

    def price_ahead_usd_per_mwh(self, hours: int) -> np.ndarray | None:
        price = self._c.price
        if price is None:
            return None
        return price.value_at(self._c.now + 3600.0 * np.arange(max(int(hours), 0)))

    def carbon_ahead_g_per_kwh(self, hours: int) -> np.ndarray | None:
        carbon = self._c.carbon
        if carbon is None:
            return None
        return carbon.value_at(self._c.now + 3600.0 * np.arange(max(int(hours), 0)))

    def carbon_g_per_kwh(self) -> float | None:
        carbon = self._c.carbon
        return None if carbon is None else float(carbon.value_at(np.array([self._c.now]))[0])

    def next_arrival_s(self) -> float:
        # Live arrivals are not known before they are submitted: none is known (the scheduler hears of new
        # jobs through Scheduler.on_jobs_added).
        return math.inf

    @property
    def changes(self) -> ChangeSet:
        return self._c.changes.since_decision()

    def job_changes(self, since: int) -> tuple[Sequence[int] | None, int]:
        """The mirror changes in many places (observations, the actions, node power): the journal is written
        here instead, from what differs since the last call (status, hold, last stop, target, deferral). A live
        cluster decides a few times a second at most, so comparing whole arrays then costs little."""
        c, journal = self._c, self._journal
        n, seen = c.status.size, self._seen_status.size
        changed = np.flatnonzero(
            (c.status[:seen] != self._seen_status)
            | _differs(c.hold_since[:seen], self._seen_hold)
            | _differs(c.last_stop[:seen], self._seen_stop)
        ).tolist()
        changed += range(seen, n)  # jobs the mirror learned of since
        old, targets = self._seen_targets, c.targets
        changed += [j for j, t in targets.items() if old.get(j) is not t]
        changed += [j for j in old if j not in targets]
        changed += sorted(self._seen_deferred ^ c.deferred)
        if changed:
            journal.journal.extend(sorted(set(changed)))
            self._seen_status = c.status.copy()
            self._seen_hold = c.hold_since.copy()
            self._seen_stop = c.last_stop.copy()
            self._seen_targets = dict(targets)
            self._seen_deferred = set(c.deferred)
        journal.decided()  # trims the journal
        return journal.jobs_since(since)

    @property
    def power_epoch(self) -> int:
        power = self._c.power
        return power.power_epoch if power is not None else 0

    @property
    def booting_gpus(self) -> float:
        power = self._c.power
        return power.booting_gpus if power is not None else 0.0


def _differs(now: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Element-wise `now != before`, NaN equal to NaN (a time not set yet)."""
    differs: np.ndarray = (now != before) & ~(np.isnan(now) & np.isnan(before))
    return differs
