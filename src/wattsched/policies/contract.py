"""The one contract between policies and every backend (the simulator now, Slurm and Kubernetes later).

A backend calls a :class:`Scheduler` at decision points. The scheduler reads a read-only :class:`ClusterView`
(cluster state, pending and running jobs, their allocations and progress, node power states, signals) and acts
only through :class:`Actions` (start, stop with checkpoint, resize or migrate, change a GPU setting, reject, power
nodes on or off, ask to be called again). The simulator applies actions at once; a live backend turns them into
cluster-manager calls. Policies never touch backend internals.

Three kinds of policy plug into this contract:

* a queue policy + a placement policy (``policies.base``), run as a :class:`~.adapters.QueuePlacementScheduler`:
  jobs start on arrival or release and run to the end where they were placed;
* an :class:`AllocationPolicy`: every round (and optionally on arrivals and completions) it returns target
  allocations for all jobs, which :func:`~.adapters.apply_decision` turns into actions by diffing with the present;
* a :class:`PowerManager`, which switches nodes on and off through the same view and actions.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from ..core.cluster import MILLI, ClusterSpec, ClusterState
from ..core.errors import WattschedError
from ..core.jobs import JobTable
from ..core.registry import Registry
from ..energy.dvfs import DEFAULT_SETTING, GpuSetting
from .base import JobRequest, Placement

if TYPE_CHECKING:
    from ..perf.model import PerformanceModel


class InvalidDecision(WattschedError):
    """A policy asked for something illegal (over-allocation, unknown job, memory that does not fit)."""

    def __init__(self, policy: str, job: str | None, message: str):
        who = f"policy '{policy}'" + (f", job '{job}'" if job is not None else "")
        super().__init__(f"{who}: {message}")


@dataclass(frozen=True, slots=True)
class Target:
    """Where a job should run: a placement, the milli-GPU it takes on each of its GPUs (capacity accounting;
    1000 = whole GPUs, less lets several jobs share the GPUs) and its GPU setting (clock or power limit)."""

    placement: Placement
    share_milli: int = MILLI
    setting: GpuSetting = DEFAULT_SETTING

    @property
    def num_gpus(self) -> int:
        return sum(len(g) for _, g, _, _ in self.placement)


@dataclass
class Decision:
    """An allocation policy's answer for one round.

    ``keep``: running jobs left exactly as they are (cheap to say for hundreds of jobs); ``assign``: jobs to start,
    or running jobs to move, resize or retune; running jobs in neither are stopped (checkpointed, back to the queue);
    pending jobs in neither stay queued. ``reject``: pending jobs refused for good (counted as dropped).
    ``wake_at``: ask for another decision at that time (in addition to rounds). ``save_on_stop``: the stopped
    jobs are suspended with their state saved (Gandiva's suspend), so they lose no progress. ``defer``: pending jobs
    (or running jobs this decision stops) the policy holds back on purpose, e.g. for a cheaper hour: they leave the
    queue that power managers size boots from (a live backend holds them in the cluster manager, e.g.
    ``scontrol hold``) until ``undefer`` lists them or they start. ``keep_free_gpus``: headroom the policy expects
    to need before a node could boot (known service demand, urgent arrivals); power managers keep that many free
    GPUs on powered nodes.
    """

    keep: np.ndarray | Sequence[int] = ()
    assign: Mapping[int, Target] = field(default_factory=dict)
    reject: Sequence[int] = ()
    wake_at: float | None = None
    save_on_stop: bool = False  # stopped jobs save their state as they stop (a suspend): no progress lost
    defer: Sequence[int] = ()
    undefer: Sequence[int] = ()
    keep_free_gpus: float | None = (
        None  # free GPUs power managers keep powered for work to come; None: unchanged
    )


# What a backend counts between decisions (indices into ``ChangeCounter.counts``).
ARRIVED, LEFT, RELEASED, TAKEN, BOOTED, SWITCHED_OFF, SETTINGS = range(7)


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """What changed in the cluster since the scheduler's last decision returned, i.e. since the state that
    decision left (its own actions are not counted). Each field counts events; ``view.changes`` gives it.

    A policy that keeps an answer from one decision to the next (a memo) must drop it when ``any`` is true (or
    when the kinds of change its answer depends on happened); ``first`` is true before the first decision.
    Time passing is not a change: a policy whose answer depends on the clock (prices, deadlines, attained
    service) keeps its own clock.
    """

    arrived: int = 0  # jobs that joined the waiting queue (arrivals, and jobs put back by a stop)
    left: int = 0  # jobs that left for good (completed, rejected)
    released: int = 0  # jobs that gave capacity back (completion, stop, move)
    taken: int = 0  # jobs that took capacity (starts and moves made outside a decision)
    booted: int = 0  # nodes that came on: capacity appeared
    switched_off: int = 0  # nodes that began switching off: capacity left
    settings: int = 0  # anything else a decision may read: deferrals, headroom, GPU settings
    first: bool = True  # no decision yet

    @property
    def any(self) -> bool:
        return self.first or bool(
            self.arrived
            or self.left
            or self.released
            or self.taken
            or self.booted
            or self.switched_off
            or self.settings
        )

    @property
    def capacity(self) -> bool:
        """Whether the capacity free to the waiting jobs may differ from what the last decision saw."""
        return self.first or bool(self.released or self.taken or self.booted or self.switched_off)


class ChangeCounter:
    """A backend's tally behind ``view.changes``: bump ``counts[KIND]`` where the change happens (one list
    increment: cheap enough for every event) and call ``decided()`` once a decision has been applied."""

    __slots__ = ("_mark", "counts")

    def __init__(self) -> None:
        self.counts = [0] * 7
        self._mark: list[int] | None = None

    def since_decision(self) -> ChangeSet:
        mark = self._mark
        if mark is None:
            return ChangeSet(*self.counts, first=True)
        c = self.counts
        return ChangeSet(*(c[i] - mark[i] for i in range(7)), first=False)

    def total(self) -> int:
        return sum(self.counts)

    def decided(self) -> None:
        self._mark = list(self.counts)


class ClusterView(Protocol):
    """Read-only view of the cluster and its jobs. Arrays must not be modified."""

    now: float
    spec: ClusterSpec
    jobs: JobTable
    state: ClusterState  # free resources per node and GPU
    node_rank: np.ndarray  # [N] seeded tie-break order shared by every policy of the run
    perf: PerformanceModel  # how fast each job runs in a configuration, and at what power

    # jobs
    status: np.ndarray  # [J] core.states STATUS_*
    phase: np.ndarray  # [J] core.states PHASE_* while a job holds GPUs

    @property
    def queue_length(self) -> int:
        """Pending jobs waiting for capacity (deferred ones excluded)."""

    def pending(self) -> Iterator[int]:
        """Pending jobs waiting for capacity, in the scheduler's priority order (deferred ones excluded)."""

    def pending_jobs(self) -> np.ndarray:
        """Every pending job index, deferred ones included (arrival order)."""

    def deferred_jobs(self) -> np.ndarray:
        """Pending jobs a policy deferred on purpose (``Decision.defer``), sorted."""

    def running_jobs(self) -> np.ndarray:
        """Jobs holding GPUs (running or restarting)."""

    def request(self, job: int) -> JobRequest:
        """The job's resource request as in the trace (GPU count, share, CPU, memory, GPU-model mask)."""

    def request_class(self, job: int) -> int:
        """An id shared by exactly the jobs whose trace requests are equal (cheap to compare)."""

    def target(self, job: int) -> Target | None:
        """What a running job holds now (placement, share, setting); None when it holds nothing."""

    def previous_placement(self, job: int) -> Placement | None:
        """What the job held the last time it ran (None if it never ran)."""

    def remaining_work(self, jobs: np.ndarray) -> np.ndarray: ...

    def rate(self, jobs: np.ndarray) -> np.ndarray:
        """Progress rate now (work units per second; 0 while restarting)."""

    def attained_gpu_seconds(self, jobs: np.ndarray) -> np.ndarray: ...

    def executed_seconds(self, jobs: np.ndarray) -> np.ndarray: ...

    def last_stop_s(self, jobs: np.ndarray) -> np.ndarray:
        """When each job last stopped holding GPUs (its submit time if it never ran)."""

    def estimated_end(self, jobs: np.ndarray) -> np.ndarray:
        """Completion time of running jobs at their current rate (inf while restarting)."""

    def next_checkpoint_s(self, job: int) -> float:
        """When a running job next checkpoints (stopping then loses no progress)."""

    def restart_delay_s(self, job: int, target: Target) -> float:
        """Delay a move to `target` would cost (0 for a first start)."""

    def running_release_profile(self) -> tuple[np.ndarray, np.ndarray]: ...

    def free_gpus_total(self) -> int: ...

    # nodes and energy
    power_state: np.ndarray  # [N] core.states ON/OFF/BOOTING/SHUTTING_DOWN
    idle_since: np.ndarray  # [N] when each ON node became idle (inf while it hosts work)

    def power_w(self) -> float:
        """Cluster power now under the run's power model (W)."""

    def energy_used_j(self) -> float:
        """Energy used since the run started (J)."""

    keep_free_gpus: float  # headroom asked for by the allocation policy (0 by default)

    def price_usd_per_mwh(self) -> float | None: ...

    def carbon_g_per_kwh(self) -> float | None: ...

    def price_ahead_usd_per_mwh(self, hours: int) -> np.ndarray | None:
        """The price of each of the next `hours` hours, starting with the one now (a day-ahead market publishes
        them in advance; the simulator reads the aligned series); None without a price series."""

    def next_arrival_s(self) -> float:
        """Submission time of the next job not yet arrived (inf when none)."""

    @property
    def changes(self) -> ChangeSet:
        """What changed since the scheduler's last decision (jobs, capacity, settings); see :class:`ChangeSet`."""


WakeCallback = Callable[["ClusterView", "Actions"], None]


class Actions(Protocol):
    """What a policy may do. Each call takes effect immediately (in the simulator) and is checked: an illegal
    action raises :class:`InvalidDecision` naming the policy and the job."""

    def start(self, job: int, target: Target) -> None: ...

    def stop(self, job: int, save: bool = False) -> None:
        """Preempt: release the GPUs; progress is kept up to the last checkpoint (or all of it if `save`)."""

    def move(self, job: int, target: Target) -> None:
        """Resize or migrate: checkpoint, release, take the new GPUs, restore (a restart delay without progress)."""

    def move_many(self, targets: Mapping[int, Target]) -> None:
        """Move several running jobs at once: every one releases its GPUs before any takes its new ones."""

    def retune(self, job: int, setting: GpuSetting) -> None:
        """Change a running job's GPU setting; no delay."""

    def reject(self, job: int) -> None:
        """Refuse a pending job for good."""

    def defer(self, job: int, deferred: bool = True) -> None:
        """Hold a pending job back on purpose (True) or return it to the queue (False); see ``Decision.defer``."""

    def keep_free(self, gpus: float) -> None:
        """Ask power managers to keep `gpus` free GPUs on powered nodes; see ``Decision.keep_free_gpus``."""

    def power_on(self, nodes: Iterable[int]) -> None: ...

    def power_off(self, nodes: Iterable[int]) -> None: ...

    def wake_at(self, time: float, callback: WakeCallback) -> None:
        """Call `callback(view, actions)` at `time` (after completions at that time)."""

    def decide_after_events(self) -> None:
        """Ask for the scheduler's ``decide`` once every event at the current time (arrivals included) is
        applied: a round that falls on an arrival time then sees the arriving jobs."""


@dataclass
class BindContext:
    """What a scheduler sees once, before the first decision."""

    spec: ClusterSpec
    jobs: JobTable
    rng: np.random.Generator
    node_rank: np.ndarray
    perf: PerformanceModel
    params: dict[str, Any] = field(default_factory=dict)


class Scheduler(ABC):
    """What a backend calls: ``decide`` runs at every arrival and/or release the scheduler asks for, and at any
    time it asked for with ``actions.wake_at``."""

    name: str = ""
    decide_on_arrival: bool = True
    decide_on_release: bool = True

    @abstractmethod
    def bind(self, ctx: BindContext) -> None: ...

    def priority(self, jobs: JobTable) -> np.ndarray:
        """Sort key of the pending queue (lower first); submission order by default."""
        return jobs.submit_s

    def on_start(self, view: ClusterView, actions: Actions) -> None:
        """Called once before the first event."""

    def waiting_until(self) -> float:
        """Until when the scheduler waits on purpose for a time it asked to be woken at (a planned start): the
        stall detector and the tests leave waiting jobs alone until then. -inf when it waits for nothing."""
        return -math.inf

    @abstractmethod
    def decide(self, view: ClusterView, actions: Actions) -> None: ...

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Names, reconstruction flags and parameters for summary.json."""


class AllocationPolicy(ABC):
    """Decides, every round, what every job should hold. Pure: reads the view, returns a :class:`Decision`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    reconstructed: ClassVar[bool] = False
    basis: ClassVar[str] = ""
    needs_models: ClassVar[bool] = False  # needs a job performance model (model names assigned if missing)
    default_round_s: ClassVar[float | None] = None  # the policy's published interval, if any
    decide_on_arrival: ClassVar[bool] = False
    decide_on_completion: ClassVar[bool] = False
    # Workload inputs the policy cannot run without; a run whose jobs lack one stops before it starts with a
    # message naming the flag that supplies it (experiments/run.py `check_policy_inputs`).
    needs_deadlines: ClassVar[bool] = False

    def bind(self, ctx: BindContext) -> None:
        """See the cluster and workload once before the first round."""

    @abstractmethod
    def allocate(self, view: ClusterView) -> Decision: ...

    def parameters(self) -> dict[str, Any]:
        """Settings to report in summary.json (say which were chosen where the authors publish none)."""
        return {}


class PowerManager:
    """Switches nodes on and off. Hooks act through `actions.power_on/power_off/wake_at`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    reconstructed: ClassVar[bool] = False
    basis: ClassVar[str] = ""

    def on_start(self, view: ClusterView, actions: Actions) -> None: ...

    def on_node_idle(self, view: ClusterView, actions: Actions, node: int) -> None: ...

    def on_job_start(self, view: ClusterView, actions: Actions, job: int) -> None: ...

    def on_blocked(self, view: ClusterView, actions: Actions) -> None:
        """Jobs wait and some nodes are off."""

    def on_headroom_short(self, view: ClusterView, actions: Actions) -> None:
        """Fewer free GPUs are powered than ``view.keep_free_gpus`` and some nodes are off."""


ALLOCATION_POLICIES: Registry[AllocationPolicy] = Registry("allocation policy")
POWER_MANAGERS: Registry[PowerManager] = Registry("power manager")
