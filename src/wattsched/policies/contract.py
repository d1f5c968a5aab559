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
* a :class:`PowerManager`, which switches nodes on and off through the same view and actions
  (:class:`BlockedWatch` says when a backend calls its ``on_blocked`` and ``on_headroom_short`` hooks).

This module is the contract, so it is the one module of ``policies/`` that the engine and the live backends
import (with ``policies/validation.py``, the one check of every action): they know the contract, never a
specific policy. It imports only ``core/`` (and ``perf/`` for a type), never a policy module
(tests/unit/test_import_rules.py, docs/architecture.md §1).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from ..core.cluster import MILLI, ClusterSpec, ClusterState
from ..core.errors import WattschedError
from ..core.jobs import JobTable
from ..core.placement import Placement
from ..core.registry import Registry
from ..core.requests import JobRequest
from ..core.settings import DEFAULT_SETTING, GpuSetting
from ..core.states import OFF

if TYPE_CHECKING:
    from ..perf.model import PerformanceModel


class Capability(StrEnum):
    """What a backend may or may not be able to do. A policy declares what it needs; a backend declares what it
    offers; a run whose policy needs something its backend lacks is refused before it starts
    (:func:`check_capabilities`), rather than failing or silently doing something else later."""

    SHARES_GPUS = "shares-gpus"  # several jobs on one GPU (a Target share below 1000 milli-GPU)
    RESIZES = "resizes"  # a job runs on another GPU count or shape than it asked for
    PREEMPTS = "preempts"  # running jobs are stopped (checkpointed, back to the queue) or moved
    POWERS_NODES = "powers-nodes"  # nodes are switched off and on by the policies
    SETS_GPU_SETTINGS = "sets-gpu-settings"  # a job's GPU clock or power limit is set
    KNOWS_PRICES = "knows-prices"  # the electricity price now and ahead (view.price_*)
    KNOWS_CARBON = "knows-carbon"  # the grid's carbon intensity now (view.carbon_g_per_kwh)
    METERS_ENERGY = "meters-energy"  # cluster power and energy used so far (view.power_w, view.energy_used_j)


CAPABILITY_TEXT = {
    Capability.SHARES_GPUS: "GPU sharing (several jobs on one GPU)",
    Capability.RESIZES: "resizing jobs (another GPU count or shape than asked for)",
    Capability.PREEMPTS: "preempting running jobs (stop with checkpoint, move)",
    Capability.POWERS_NODES: "switching nodes off and on",
    Capability.SETS_GPU_SETTINGS: "setting GPU clocks or power limits",
    Capability.KNOWS_PRICES: "an electricity price signal",
    Capability.KNOWS_CARBON: "a carbon-intensity signal",
    Capability.METERS_ENERGY: "a power meter (cluster power and energy used)",
}

ALL_CAPABILITIES = frozenset(Capability)


class MissingCapability(WattschedError):
    """A policy needs something the backend does not offer: refused at start, in one line."""


def check_capabilities(
    backend: str,
    offered: frozenset[Capability],
    needs: Mapping[str, frozenset[Capability]],
    why_not: Mapping[Capability, str] | None = None,
) -> None:
    """Refuse a run whose policies (``needs``: policy name -> capabilities) need what the backend lacks; the
    message names the policy, the capability and, where the backend says, why it lacks it."""
    for who, wanted in needs.items():
        missing = sorted(set(wanted) - set(offered))
        if missing:
            cap = missing[0]
            reason = (why_not or {}).get(cap)
            more = f" (and {', '.join(missing[1:])})" if len(missing) > 1 else ""
            raise MissingCapability(
                f"{who} needs {CAPABILITY_TEXT[cap]}{more}, which the {backend} backend does not offer"
                + (f": {reason}" if reason else "")
            )


class TimeSeries(Protocol):
    """A price or carbon series on the run's clock (seconds since its origin), as ``energy/signals/alignment.py`` aligns
    one."""

    def value_at(self, t: np.ndarray) -> np.ndarray: ...


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
    GPUs on powered nodes. ``keep_all``: every running job not in ``assign`` is kept, without a list of them
    (``Decision(keep_all=True)``: nothing changes, applied without reading the view).
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
    keep_all: bool = False  # every running job not in `assign` stays, none listed


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


# Entries of a backend's change journal kept for policies that read it late (``ChangeCounter.decided`` trims it).
JOURNAL_KEEP = 1 << 16


class ChangeCounter:
    """A backend's tally behind ``view.changes``: bump ``counts[KIND]`` where the change happens (one list
    increment: cheap enough for every event) and call ``decided()`` once a decision has been applied.

    ``journal`` behind ``view.job_changes``: append a job wherever its status, hold or deferral changes (arrival,
    start, stop, move, retune, completion, rejection, deferral), its own actions included."""

    __slots__ = ("_dropped", "_mark", "counts", "journal")

    def __init__(self) -> None:
        self.counts = [0] * 7
        self._mark: list[int] | None = None
        self.journal: list[int] = []
        self._dropped = 0  # journal entries trimmed off its front

    def since_decision(self) -> ChangeSet:
        c, mark = self.counts, self._mark
        diff = c if mark is None else [c[i] - mark[i] for i in range(7)]
        return ChangeSet(diff[0], diff[1], diff[2], diff[3], diff[4], diff[5], diff[6], first=mark is None)

    def total(self) -> int:
        return sum(self.counts)

    def decided(self) -> None:
        self._mark = list(self.counts)
        if len(self.journal) > 2 * JOURNAL_KEEP:
            cut = len(self.journal) - JOURNAL_KEEP
            del self.journal[:cut]
            self._dropped += cut

    def jobs_since(self, mark: int) -> tuple[list[int] | None, int]:
        """``view.job_changes``: the journal's jobs from position `mark` on, and the position now."""
        end = self._dropped + len(self.journal)
        if mark < self._dropped:
            return None, end
        return self.journal[mark - self._dropped :], end


class ClusterView(Protocol):
    """Read-only view of the cluster and its jobs. Arrays must not be modified.

    Every member a policy may use is declared here; the simulator (``engine/temporal.py`` SimView) and the live
    backends (``backends/live.py`` LiveView) implement all of them with the same meaning. What a backend may
    lack answers "not available" (None) rather than raising, and is listed in ``capabilities``."""

    @property
    def now(self) -> float: ...

    @property
    def spec(self) -> ClusterSpec: ...

    @property
    def jobs(self) -> JobTable: ...

    @property
    def state(self) -> ClusterState:
        """Free resources per node and GPU."""

    @property
    def node_rank(self) -> np.ndarray:
        """[N] seeded tie-break order shared by every policy of the run."""

    @property
    def perf(self) -> PerformanceModel:
        """How fast each job runs in a configuration, and at what power."""

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What this backend offers (:class:`Capability`)."""

    # jobs
    @property
    def status(self) -> np.ndarray:
        """[J] core.states STATUS_*."""

    @property
    def phase(self) -> np.ndarray:
        """[J] core.states PHASE_* while a job holds GPUs."""

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

    def remaining_work(self, jobs: np.ndarray) -> np.ndarray:
        """Work left (the performance model's units: iterations, or seconds of the trace duration)."""

    def work(self, jobs: np.ndarray) -> np.ndarray:
        """Each job's whole work, in the same units."""

    def rate(self, jobs: np.ndarray) -> np.ndarray:
        """Progress rate now (work units per second; 0 while restarting)."""

    def held_gpus(self, jobs: np.ndarray) -> np.ndarray:
        """GPUs each job holds now (0 when it holds none)."""

    def attained_gpu_seconds(self, jobs: np.ndarray) -> np.ndarray:
        """GPU-seconds held so far (all of each job's holds)."""

    def executed_seconds(self, jobs: np.ndarray) -> np.ndarray:
        """Seconds held so far."""

    def last_stop_s(self, jobs: np.ndarray) -> np.ndarray:
        """When each job last stopped holding GPUs (its submit time if it never ran)."""

    def estimated_end(self, jobs: np.ndarray) -> np.ndarray:
        """Completion time of running jobs at their current rate (inf while restarting)."""

    def next_checkpoint_s(self, job: int) -> float:
        """When a running job next checkpoints (stopping then loses no progress)."""

    def restart_delay_s(self, job: int, target: Target) -> float:
        """Delay a move to `target` would cost (0 for a first start)."""

    def running_release_profile(self) -> tuple[np.ndarray, np.ndarray]:
        """(estimated end, GPUs) of every running job."""

    def free_gpus_total(self) -> int:
        """Whole free GPUs on available nodes."""

    # nodes and energy
    @property
    def power_state(self) -> np.ndarray:
        """[N] core.states ON/OFF/BOOTING/SHUTTING_DOWN."""

    @property
    def idle_since(self) -> np.ndarray:
        """[N] when each ON node became idle (inf while it hosts work)."""

    @property
    def power_epoch(self) -> int:
        """Bumped whenever a node changes power state (cheap to compare between decisions)."""

    @property
    def booting_gpus(self) -> float:
        """GPUs on nodes that are booting: capacity on its way."""

    def power_w(self) -> float | None:
        """Cluster power now (W): measured where the backend meters it, else the run's power model; None
        without ``meters-energy``."""

    def energy_used_j(self) -> float | None:
        """Energy used since the run started (J); None without ``meters-energy``."""

    @property
    def keep_free_gpus(self) -> float:
        """Headroom asked for by the allocation policy (0 by default)."""

    def price_usd_per_mwh(self) -> float | None:
        """The electricity price now; None without ``knows-prices``."""

    def carbon_g_per_kwh(self) -> float | None:
        """The grid's carbon intensity now; None without ``knows-carbon``."""

    def price_ahead_usd_per_mwh(self, hours: int) -> np.ndarray | None:
        """The price of each of the next `hours` hours, starting with the one now (a day-ahead market publishes
        them in advance; the simulator reads the aligned series); None without a price series."""

    def carbon_ahead_g_per_kwh(self, hours: int) -> np.ndarray | None:
        """The grid's carbon intensity of each of the next `hours` hours, starting with the one now (a forecast;
        the simulator reads the aligned series), beside ``price_ahead_usd_per_mwh``; None without a carbon
        series."""

    def next_arrival_s(self) -> float:
        """Submission time of the next job known to come and not yet arrived (inf when none is known: a live
        backend learns of jobs as they are submitted, and tells the scheduler through ``on_jobs_added``)."""

    @property
    def changes(self) -> ChangeSet:
        """What changed since the scheduler's last decision (jobs, capacity, settings); see :class:`ChangeSet`."""

    def job_changes(self, since: int) -> tuple[Sequence[int] | None, int]:
        """Which jobs changed since position `since` of the backend's change journal, and the position now.

        A job is listed (in order, perhaps more than once) whenever its status, hold or deferral changed: it
        arrived, started, stopped, moved, was retuned, completed, was rejected, deferred or undeferred, by a
        decision of the policy's own or not. A policy that keeps its own job sets from one decision to the next
        keeps the position it last read and brings them up to date from the jobs listed, reading their state now
        from the view: a decision then costs what changed, not what runs. None instead of jobs when the journal no
        longer reaches back to `since` (and for a negative `since`, the way to ask first): read the view afresh."""


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

    def on_jobs_added(self, ctx: BindContext, view: ClusterView, actions: Actions) -> None:
        """The job table grew (a live backend learns of jobs as they are submitted; the simulator knows them all
        at ``bind``): ``ctx.jobs`` is the larger table, whose first rows are the old ones, unchanged. Per-job
        state kept since ``bind`` must carry over (never start over)."""
        self.bind(ctx)

    def required_capabilities(self) -> frozenset[Capability]:
        """What the scheduler needs from its backend; checked before the first decision."""
        return frozenset()

    def admit(self, jobs: JobTable, job: int) -> bool:
        """Whether an arriving job is accepted at all (False: it is unschedulable, never queued)."""
        return True

    def check_inputs(self, jobs: JobTable, workload: str) -> None:
        """Raise a :class:`~wattsched.core.errors.WattschedError` naming what supplies it when the jobs lack
        an input the scheduler cannot run without (deadlines, ...)."""

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
    basis: str = ""  # per instance where the parameters shape it (EaCO)
    needs_models: ClassVar[bool] = False  # needs a job performance model (model names assigned if missing)
    default_round_s: ClassVar[float | None] = None  # the policy's published interval, if any
    decide_on_arrival: ClassVar[bool] = False
    decide_on_completion: ClassVar[bool] = False
    # Workload inputs the policy cannot run without; a run whose jobs lack one stops before it starts with a
    # message naming the flag that supplies it (Scheduler.check_inputs).
    needs_deadlines: ClassVar[bool] = False
    # What the policy needs from its backend (Capability); a backend without one refuses the policy at start.
    needs: ClassVar[frozenset[Capability]] = frozenset()
    # Attributes holding state the policy learns while it runs, per job (arrays indexed by job, dicts or sets
    # keyed by job) or not: kept when the job table grows (``on_jobs_added``), where everything else ``bind``
    # derives from the workload is derived again for the larger table.
    learned_state: ClassVar[tuple[str, ...]] = ()

    def bind(self, ctx: BindContext) -> None:
        """See the cluster and workload once before the first round."""

    def on_jobs_added(self, ctx: BindContext) -> None:
        """The job table grew (live): derive again what ``bind`` derives from the jobs, keep ``learned_state``."""
        kept = {name: getattr(self, name) for name in self.learned_state if hasattr(self, name)}
        self.bind(ctx)
        for name, old in kept.items():
            setattr(self, name, _carry_over(old, getattr(self, name, None)))

    def required_capabilities(self, params: Mapping[str, Any]) -> frozenset[Capability]:
        """What the policy needs with the run's settings (``BindContext.params``); ``needs`` by default."""
        return self.needs

    @abstractmethod
    def allocate(self, view: ClusterView) -> Decision: ...

    def parameters(self) -> dict[str, Any]:
        """Settings to report in summary.json (say which were chosen where the authors publish none)."""
        return {}


def _carry_over(old: Any, new: Any) -> Any:
    """Learned state across a grown job table: an array keeps its old rows (new rows as ``bind`` made them);
    anything else (a dict or set keyed by job, a counter) is kept as it was."""
    grown = isinstance(old, np.ndarray) and isinstance(new, np.ndarray) and old.ndim == new.ndim == 1
    if grown and new.size >= old.size:
        new[: old.size] = old
        return new
    return old


class PowerManager:
    """Switches nodes on and off. Hooks act through `actions.power_on/power_off/wake_at`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    reconstructed: ClassVar[bool] = False
    basis: str = ""  # per instance where the parameters shape it (EaCO)
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.POWERS_NODES})

    def on_start(self, view: ClusterView, actions: Actions) -> None: ...

    def on_node_idle(self, view: ClusterView, actions: Actions, node: int) -> None: ...

    def on_job_start(self, view: ClusterView, actions: Actions, job: int) -> None: ...

    def on_blocked(self, view: ClusterView, actions: Actions) -> None:
        """Jobs wait and some nodes are off."""

    def on_headroom_short(self, view: ClusterView, actions: Actions) -> None:
        """Fewer free GPUs are powered than ``view.keep_free_gpus`` and some nodes are off."""


def powered_free_gpus(view: ClusterView) -> float:
    """Free GPUs on nodes that are on, plus the GPUs of nodes booting."""
    state = view.state
    return float(np.dot(state.free_gpus, state.available)) + view.booting_gpus  # (one call: every batch end)


class BlockedWatch:
    """When a backend calls a manager's ``on_blocked`` and ``on_headroom_short`` at the end of a decision batch
    (the simulator's node power and the live backends' alike): re-plan boots only when work arrived or power
    states changed (freed capacity or started jobs never call for more boots). Part of the contract: it says when
    the :class:`PowerManager` hooks run."""

    def __init__(self) -> None:
        self._last_queue = 0
        self._last_counts: tuple[int, ...] = ()

    def batch_end(
        self, manager: PowerManager, view: ClusterView, actions: Actions, counts: Callable[[], Sequence[int]]
    ) -> None:
        """`counts()`: nodes per power state now (called again after the manager acted)."""
        queued = view.queue_length
        if queued and counts()[OFF]:
            now = tuple(counts())
            if queued > self._last_queue or now != self._last_counts:
                manager.on_blocked(view, actions)
                self._last_counts = tuple(counts())
        # Tracked on every batch: a queue that drained and refills must count as new work.
        self._last_queue = queued
        if view.keep_free_gpus > 0 and counts()[OFF] and powered_free_gpus(view) < view.keep_free_gpus:
            manager.on_headroom_short(view, actions)


ALLOCATION_POLICIES: Registry[AllocationPolicy] = Registry("allocation policy")
POWER_MANAGERS: Registry[PowerManager] = Registry("power manager")
