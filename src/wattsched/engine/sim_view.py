"""The simulator's side of the policy contract: :class:`SimView`, the read-only ``ClusterView`` a policy reads,
and :class:`SimActions`, the ``Actions`` it acts through, which the :class:`~.temporal.Simulator` applies at once.
Both read and change the simulator's own arrays; the event loop itself is in ``temporal.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..core.placement import Placement
from ..core.requests import JobRequest
from ..core.settings import GpuSetting
from ..core.states import STATUS_RUNNING
from ..policies.contract import SETTINGS, ChangeSet, InvalidDecision, Target, WakeCallback
from .alloc_log import NO_ALLOC

if TYPE_CHECKING:
    from ..policies.contract import Actions, ClusterView
    from .temporal import Simulator


class SimActions:
    """The simulator's implementation of ``policies.contract.Actions``; `by` names the policy in errors."""

    def __init__(self, sim: Simulator, by: str):
        self.sim = sim
        self.by = by

    def _guard(self, job: int) -> None:
        self.sim._by = self.by  # errors name the policy acting
        if not 0 <= job < len(self.sim.status):
            raise InvalidDecision(self.by, None, f"unknown job index {job}")

    def start(self, job: int, target: Target) -> None:
        self._guard(job)
        self.sim.start(job, target)

    def stop(self, job: int, save: bool = False) -> None:
        self._guard(job)
        self.sim.stop(job, save)

    def move(self, job: int, target: Target) -> None:
        self.move_many({job: target})

    def move_many(self, targets: Mapping[int, Target]) -> None:
        self.sim._by = self.by
        for job in targets:
            self._guard(job)
        self.sim.move_many(targets)

    def retune(self, job: int, setting: GpuSetting) -> None:
        self._guard(job)
        self.sim.retune(job, setting)

    def reject(self, job: int) -> None:
        self._guard(job)
        self.sim.reject(job)

    def defer(self, job: int, deferred: bool = True) -> None:
        self._guard(job)
        self.sim.defer(job, deferred)

    def keep_free(self, gpus: float) -> None:
        if not gpus >= 0:
            raise InvalidDecision(self.by, None, f"keep_free_gpus must be >= 0, got {gpus}")
        if float(gpus) != self.sim.keep_free_gpus:
            self.sim.changes.counts[SETTINGS] += 1
        self.sim.keep_free_gpus = float(gpus)

    def power_on(self, nodes: Iterable[int]) -> None:
        if self.sim.power is None:
            raise InvalidDecision(self.by, None, "this run has no node power control")
        self.sim.power.boot(list(nodes))

    def power_off(self, nodes: Iterable[int]) -> None:
        if self.sim.power is None:
            raise InvalidDecision(self.by, None, "this run has no node power control")
        self.sim.power.shutdown(list(nodes))

    def wake_at(self, time: float, callback: WakeCallback) -> None:
        if not time >= self.sim.now:
            raise InvalidDecision(self.by, None, f"wake-up at {time} is in the past (now {self.sim.now})")
        self.sim.schedule(time, callback, self)

    def decide_after_events(self) -> None:
        self.sim._pass_due = True


class SimView:
    """The simulator's read-only ``policies.contract.ClusterView``."""

    def __init__(self, sim: Simulator):
        self._sim = sim
        self._running_key = -1
        self._running = np.zeros(0, dtype=np.int64)
        self.spec = sim.spec
        self.jobs = sim.jobs
        self.state = sim.state
        self.node_rank = sim.node_rank
        self.perf = sim.perf
        self.capabilities = sim.capabilities

    @property
    def now(self) -> float:
        return self._sim.now

    @property
    def status(self) -> np.ndarray:
        return self._sim.status

    @property
    def phase(self) -> np.ndarray:
        return self._sim.phase

    @property
    def queue_length(self) -> int:
        return len(self._sim._pending)

    def pending(self) -> Iterator[int]:
        return self._sim.pending()

    def pending_jobs(self) -> np.ndarray:
        sim = self._sim
        queued = np.fromiter((j for _, j in sim._pending), dtype=np.int64, count=len(sim._pending))
        if sim._deferred:
            queued = np.concatenate([queued, self.deferred_jobs()])
        return np.sort(queued)

    @property
    def keep_free_gpus(self) -> float:
        return self._sim.keep_free_gpus

    def deferred_jobs(self) -> np.ndarray:
        deferred = self._sim._deferred
        return np.sort(np.fromiter(deferred, dtype=np.int64, count=len(deferred)))

    def running_jobs(self) -> np.ndarray:
        sim = self._sim
        if (
            self._running_key != sim.running_changes
        ):  # asked several times per decision: rebuilt on change only
            running = sim.running
            self._running = np.fromiter(running, dtype=np.int64, count=len(running))
            self._running_key = sim.running_changes
        return self._running.copy()  # callers may sort or shuffle it

    def request(self, job: int) -> JobRequest:
        return self._sim.book.request(job)

    def request_class(self, job: int) -> int:
        return int(self._sim.book.request_class[job])

    def target(self, job: int) -> Target | None:
        sim = self._sim
        a = int(sim.alloc_id[job])
        if a == NO_ALLOC:
            return None
        return Target(sim.log.placements[a], int(sim.share[job]), sim.log.settings[int(sim.setting_id[job])])

    def previous_placement(self, job: int) -> Placement | None:
        """What the job held last time it ran (None if it never ran)."""
        last = int(self._sim.last_alloc[job])
        return None if last == NO_ALLOC else self._sim.log.placements[last]

    def remaining_work(self, jobs: np.ndarray) -> np.ndarray:
        sim = self._sim
        idx = np.asarray(jobs, dtype=np.int64)
        if idx.shape == (1,):  # one job (a policy looking at one arrival): the same arithmetic on floats
            j = int(idx[0])
            left = float(sim.remaining[j])
            if sim.status[j] == STATUS_RUNNING:
                left -= (sim.now - float(sim.last_update[j])) * float(sim.rate[j])
            return np.array([max(left, 0.0)])
        elapsed = np.where(sim.status[idx] == STATUS_RUNNING, sim.now - sim.last_update[idx], 0.0)
        return np.maximum(sim.remaining[idx] - elapsed * sim.rate[idx], 0.0)

    def work(self, jobs: np.ndarray) -> np.ndarray:
        return self._sim.work[np.asarray(jobs, dtype=np.int64)]

    def rate(self, jobs: np.ndarray) -> np.ndarray:
        sim = self._sim
        jobs = np.asarray(jobs, dtype=np.int64)
        return np.where(sim.status[jobs] == STATUS_RUNNING, sim.rate[jobs], 0.0)

    def held_gpus(self, jobs: np.ndarray) -> np.ndarray:
        return self._sim.held_gpus[np.asarray(jobs, dtype=np.int64)]

    def attained_gpu_seconds(self, jobs: np.ndarray) -> np.ndarray:
        sim = self._sim
        idx = np.asarray(jobs, dtype=np.int64)
        holding = sim.alloc_id[idx] != NO_ALLOC
        extra = np.where(holding, sim.held_gpus[idx] * (sim.now - sim.hold_since[idx]), 0.0)
        return sim.attained_gpu_s[idx] + extra

    def executed_seconds(self, jobs: np.ndarray) -> np.ndarray:
        sim = self._sim
        idx = np.asarray(jobs, dtype=np.int64)
        holding = sim.alloc_id[idx] != NO_ALLOC
        return sim.executed_s[idx] + np.where(holding, sim.now - sim.hold_since[idx], 0.0)

    def last_stop_s(self, jobs: np.ndarray) -> np.ndarray:
        return self._sim.last_stop[np.asarray(jobs, dtype=np.int64)]

    def estimated_end(self, jobs: np.ndarray) -> np.ndarray:
        sim = self._sim
        jobs = np.asarray(jobs, dtype=np.int64)
        rate = sim.rate[jobs]
        with np.errstate(divide="ignore"):
            return np.where(rate > 0, sim.last_update[jobs] + sim.remaining[jobs] / rate, math.inf)

    def next_checkpoint_s(self, job: int) -> float:
        return float(self._sim.ckpt_next[job])

    def restart_delay_s(self, job: int, target: Target) -> float:
        sim = self._sim
        if math.isnan(sim.start_s[job]):
            return 0.0
        return sim.perf.restart_delay_s(job, target.num_gpus, sim.same_gpus_as_last(job, target.placement))

    def running_release_profile(self) -> tuple[np.ndarray, np.ndarray]:
        sim = self._sim
        running = self.running_jobs()
        ends = sim.last_update[running] + sim.remaining[running] / sim.rate[running]
        gpus = sim.jobs.num_gpu[running] * sim.jobs.gpu_milli[running] / 1000.0
        return ends, gpus

    def free_gpus_total(self) -> int:
        state = self._sim.state
        return int(state.free_gpus[state.available].sum())

    # nodes and energy
    @property
    def power_state(self) -> np.ndarray:
        power = self._sim.power
        if power is None:
            from ..core.states import ON

            return np.full(self.spec.num_nodes, ON, dtype=np.int8)
        return power.power_state

    @property
    def idle_since(self) -> np.ndarray:
        power = self._sim.power
        return power.idle_since if power is not None else np.zeros(self.spec.num_nodes)

    @property
    def power_epoch(self) -> int:
        return self._sim.power.power_epoch if self._sim.power is not None else 0

    @property
    def booting_gpus(self) -> float:
        return self._sim.power.booting_gpus if self._sim.power is not None else 0.0

    def power_w(self) -> float | None:
        meter = self._sim.power_meter
        return None if meter is None else meter.power_w(self._sim)

    def energy_used_j(self) -> float | None:
        meter = self._sim.power_meter
        return None if meter is None else meter.energy_j(self._sim)

    def price_usd_per_mwh(self) -> float | None:
        price = self._sim.price
        return None if price is None else float(price.value_at(np.array([self._sim.now]))[0])

    def price_ahead_usd_per_mwh(self, hours: int) -> np.ndarray | None:
        price = self._sim.price
        if price is None:
            return None
        return price.value_at(self._sim.now + 3600.0 * np.arange(max(int(hours), 0)))

    def carbon_ahead_g_per_kwh(self, hours: int) -> np.ndarray | None:
        carbon = self._sim.carbon
        if carbon is None:
            return None
        return carbon.value_at(self._sim.now + 3600.0 * np.arange(max(int(hours), 0)))

    def carbon_g_per_kwh(self) -> float | None:
        carbon = self._sim.carbon
        return None if carbon is None else float(carbon.value_at(np.array([self._sim.now]))[0])

    def next_arrival_s(self) -> float:
        return self._sim._next_arrival

    @property
    def changes(self) -> ChangeSet:
        return self._sim.changes.since_decision()

    def job_changes(self, since: int) -> tuple[Sequence[int] | None, int]:
        return self._sim.changes.jobs_since(since)


if TYPE_CHECKING:

    def _implements_the_contract(view: SimView, actions: SimActions) -> tuple[ClusterView, Actions]:
        """Never called: mypy checks here that the simulator's view and actions implement every member of the
        contract (policies/contract.py)."""
        return view, actions
