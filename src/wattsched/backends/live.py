"""A live cluster as the policies see it: the ``ClusterView`` and ``Actions`` of ``policies/contract.py`` over
observations of a real cluster manager (docs/live-slurm.md §3).

:class:`LiveCluster` keeps a mirror of the observed cluster: the job table (jobs in the order they were first seen),
their status, and the free capacity (``ClusterState``) after every job that holds GPUs. The scheduler, and the
placement, queue and allocation policies inside it, read it through :class:`~.live_view.LiveView`
(``live_view.py``) and act through :class:`~.live_actions.LiveActions` (``live_actions.py``), which validate each
action against the mirror and carry it out through the backend (``backends/base.py``). Times are seconds since the
mirror's origin (the earliest submission or first observation), as in the simulator.

What a live cluster cannot know the way the simulator does, and how it is answered here:

* a job's work and speed: its work is its wall-time limit (the only duration a user gives), and it progresses at
  the performance model's rate for what it holds (1 at the shape it asked for; faster or slower when resized,
  retuned or sharing GPUs, after the model's restart delay when it resumes), as in the simulator;
* which GPUs of a node a job gets: the cluster manager picks them; the mirror keeps the policy's choice, so the
  count per node is exact and the indices are the policy's own;
* jobs that arrive later: the job table grows and the scheduler is told (``Scheduler.on_jobs_added``): it keeps
  what it learned (per-job state, its random stream), as it would in a simulation that knew those jobs all along;
* energy and power: measured by the node agents where their metrics are configured, else the power model (the
  source is labelled, ``LiveView.power_source``); prices and carbon: the configured signals, aligned to the wall
  clock; restart delays: the performance model's, as in the simulator.

Every action is checked by the same :class:`~..policies.validation.ActionValidator` as in the simulator, against
the capabilities the backend declares (``ClusterBackend.capabilities``); a policy that needs a capability the
backend lacks is refused before the first observation.

This file (~720 lines) stays whole: it is the mirror, one class whose arrays every observation updates (jobs seen,
their status, what they hold, node power) with the helpers that build its cluster and capabilities; the view and
the actions that read and change those arrays are modules of their own.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from ..core.cluster import MILLI, ClusterSpec, ClusterState
from ..core.errors import WattschedError
from ..core.gpus import GPU_CATALOG
from ..core.jobs import JobTable
from ..core.placement import NodeShare, Placement, gpu_set
from ..core.requests import RequestBook
from ..core.settings import DEFAULT_SETTING
from ..core.states import (
    BOOTING,
    OFF,
    ON,
    PHASE_RELEASED,
    PHASE_RUNNING,
    SHUTTING_DOWN,
    STATUS_DONE,
    STATUS_DROPPED,
    STATUS_FUTURE,
    STATUS_PENDING,
    STATUS_RUNNING,
    STATUS_UNSCHEDULABLE,
)
from ..policies.contract import (
    ARRIVED,
    BOOTED,
    LEFT,
    RELEASED,
    SWITCHED_OFF,
    TAKEN,
    BindContext,
    Capability,
    ChangeCounter,
    PowerManager,
    Scheduler,
    Target,
    TimeSeries,
    WakeCallback,
    check_capabilities,
)
from ..policies.validation import ActionValidator
from .base import (
    JOB_FINISHED,
    JOB_RUNNING,
    JOB_STARTING,
    NODE_OFF,
    NODE_ON,
    NODE_POWERING_DOWN,
    NODE_POWERING_UP,
    NODE_UNAVAILABLE,
    BackendError,
    ClusterBackend,
    JobObs,
    Observation,
    StartRequest,
)
from .live_actions import LiveActions, Outgoing
from .live_view import LiveView
from .meter import LiveMeter
from .power import LivePower
from .store import JobStore

if TYPE_CHECKING:
    from ..perf.model import PerformanceModel
    from ..perf.restart import RestartModel
    from ..policies.contract import Actions, ClusterView

log = logging.getLogger("wattsched.live")

# Observed node power -> the view's power state; a node that is down or drained counts as OFF (and unusable).
_POWER = {NODE_ON: ON, NODE_OFF: OFF, NODE_POWERING_UP: BOOTING, NODE_POWERING_DOWN: SHUTTING_DOWN}


def catalog_gpu_name(gres_type: str, type_map: Mapping[str, str] | None = None) -> str:
    """The catalog GPU model of a cluster manager's GPU type name (``a100`` -> ``A100``); "" stays "" (any)."""
    if not gres_type:
        return ""
    if type_map and gres_type in type_map:
        return type_map[gres_type]
    by_lower = {name.lower(): name for name in GPU_CATALOG}
    name = by_lower.get(gres_type.lower())
    if name is None:
        raise WattschedError(
            f"GPU type '{gres_type}' is not in wattsched's GPU catalog ({', '.join(GPU_CATALOG)}); map it to the "
            f"closest one with --gpu-type-map {gres_type}=MODEL"
        )
    return name


def spec_from_observation(
    obs: Observation, name: str, type_map: Mapping[str, str] | None = None
) -> ClusterSpec:
    """The cluster's shape: one node per observed node, in the order observed."""
    if not obs.nodes:
        raise WattschedError(f"{name}: the cluster manager reports no nodes")
    nodes = obs.nodes
    return ClusterSpec.from_arrays(
        name,
        [n.name for n in nodes],
        [n.cpus * MILLI for n in nodes],
        [n.memory_mib for n in nodes],
        [n.gpus for n in nodes],
        [catalog_gpu_name(n.gpu_model, type_map) if n.gpus else "" for n in nodes],
    )


def live_capabilities(
    backend: ClusterBackend, allow_resize: bool, signals: tuple[object | None, object | None]
) -> frozenset[Capability]:
    """What a live run offers its policies: the backend's own capabilities (resizing only where the operator
    allows it), the configured price and carbon signals, and a meter (the agents' metrics, else the model)."""
    offered = set(backend.capabilities) | {Capability.METERS_ENERGY}
    if not allow_resize:
        offered.discard(Capability.RESIZES)
    price, carbon = signals
    if price is not None:
        offered.add(Capability.KNOWS_PRICES)
    if carbon is not None:
        offered.add(Capability.KNOWS_CARBON)
    return frozenset(offered)


def live_lacks(backend: ClusterBackend, allow_resize: bool) -> dict[Capability, str]:
    """Why a live run lacks a capability: the backend's reasons, and the flags that supply the rest."""
    why = {
        Capability.KNOWS_PRICES: "give it a price signal (--region or --price-csv)",
        Capability.KNOWS_CARBON: "give it a carbon signal (--region or --carbon-csv)",
        **backend.lacks,
    }
    if not allow_resize and Capability.RESIZES in backend.capabilities:
        why[Capability.RESIZES] = (
            "resizing is off (--allow-resize turns it on for jobs that can use any GPU count)"
        )
    return why


def check_live_policies(
    backend: ClusterBackend,
    scheduler: Scheduler,
    power_manager: PowerManager | None,
    allow_resize: bool,
    signals: tuple[object | None, object | None] = (None, None),
) -> frozenset[Capability]:
    """Refuse, in one line, a scheduler or power manager that needs what this live run lacks."""
    offered = live_capabilities(backend, allow_resize, signals)
    needs = {f"policy '{scheduler.name}'": scheduler.required_capabilities()}
    if power_manager is not None:
        needs[f"power manager '{power_manager.name}'"] = power_manager.needs
    check_capabilities(backend.name, offered, needs, live_lacks(backend, allow_resize))
    return offered


def live_origin(first: Observation) -> float:
    """The mirror's time origin (epoch seconds): the earliest submission still listed, or the first
    observation."""
    return min([first.time_s, *(j.submit_s for j in first.jobs if j.state != JOB_FINISHED)])


@dataclass
class Changes:
    """What one observation changed: decisions follow arrivals and released capacity."""

    arrived: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    nodes_changed: bool = False

    @property
    def released(self) -> bool:
        return bool(self.finished) or self.nodes_changed


class LiveCluster:
    """The mirror, the view and the actions of one scheduler on one live cluster.

    Job status as in the simulator: pending (held for wattsched to place), running (holds GPUs: let go, or running
    in the cluster manager), done, dropped (rejected), unschedulable (can never fit); a queued job that the cluster
    manager places itself (submitted without a hold) is "not arrived" for the policies until it runs.
    """

    def __init__(
        self,
        backend: ClusterBackend,
        scheduler: Scheduler,
        first: Observation,
        store: JobStore,
        *,
        seed: int = 42,
        gpu_type_map: Mapping[str, str] | None = None,
        power_manager: PowerManager | None = None,
        allow_resize: bool = False,
        signals: tuple[TimeSeries | None, TimeSeries | None] = (None, None),
        checkpoint_interval_s: float = 0.0,
        agent_metrics_url: str | None = None,
        restart_model: RestartModel | None = None,
    ):
        self.backend = backend
        self.scheduler = scheduler
        self.store = store
        # Powered-down nodes stay placeable when the cluster manager wakes them for the jobs sent there (Slurm's
        # SuspendTime); when wattsched's power manager drives power, only nodes that are on take work.
        self.manager_wakes_nodes = backend.wakes_nodes_for_jobs and power_manager is None
        # An allocation policy may run a job in another shape than it was submitted with (a resize) only when the
        # operator allows it: the job must be able to use any number of GPUs.
        self.allow_resize = allow_resize
        self.capabilities = check_live_policies(backend, scheduler, power_manager, allow_resize, signals)
        self.price, self.carbon = signals  # aligned to seconds since the mirror's origin
        self.checkpoint_interval_s = float(checkpoint_interval_s)
        self.restart_model = restart_model  # the performance model's restart delays (None: its default)
        self.type_map = dict(gpu_type_map or {})
        self.spec = spec_from_observation(first, backend.name, self.type_map)
        self.state = ClusterState(self.spec)
        self.node_index = {str(n): i for i, n in enumerate(self.spec.node_names)}
        self.power_state = np.full(self.spec.num_nodes, ON, dtype=np.int8)
        self.holders = np.zeros(self.spec.num_nodes, dtype=np.int64)  # jobs holding GPUs on each node
        self.origin = live_origin(first)
        self.now = first.time_s - self.origin
        self.idle_since = np.full(self.spec.num_nodes, self.now)  # idle time counts from wattsched's start
        # The same streams as a simulation with this seed (experiments/run.py): the node order policies break
        # ties with is drawn first from the policy stream, so live and simulated placements agree.
        self.seed = seed
        self._rng = np.random.default_rng(np.random.SeedSequence(self.seed).spawn(3)[1])
        self.node_rank = self._rng.permutation(self.spec.num_nodes).astype(np.int64)
        self._bound = False
        self.ids: list[str] = []
        self.index: dict[str, int] = {}
        self.obs: list[JobObs] = []
        self.jobs = JobTable.build([], [], [], [])
        self.book = self._live_book()
        self.perf = self._model()
        self.validator = ActionValidator(self.spec, self.book, self.perf, self.capabilities, self._job_name)
        self._grow_arrays(0)
        self.targets: dict[int, Target] = {}
        self.last_placement: dict[int, Placement] = {}
        self.deferred: set[int] = set()
        self.unaccounted: set[int] = set()  # running or let go, no room for it in the mirror (logged once)
        self.keep_free_gpus = 0.0
        self.outbox: list[Outgoing] = []  # started by a pass, not yet let go
        self.observations = 0
        # Jobs wattsched requeued, with the observation count then: the old run must be seen gone before the
        # job is let go again (Slurm moves a requeued job's begin time only once that run has ended).
        self.requeued_at: dict[int, int] = {}
        self.resized: dict[
            int, tuple[int, int]
        ] = {}  # the shape wattsched gave a job: (nodes, GPUs per node)
        self.changes = ChangeCounter()  # what changed since the scheduler's last decision (view.changes)
        self._timers: list[tuple[float, int, WakeCallback, LiveActions]] = []
        self._timer_seq = 0
        self.decide_requested = False
        self.view = LiveView(self)
        self.actions = LiveActions(self, scheduler.name)
        self.power: LivePower | None = None
        if power_manager is not None:
            self.power = LivePower(power_manager, self, LiveActions(self, power_manager.name))
        self.meter = LiveMeter(self, agent_metrics_url)

    # ----- the mirror ----------------------------------------------------------------------------------------
    def _grow_arrays(self, n: int) -> None:
        def grown(old: np.ndarray | None, fill: float, dtype: type) -> np.ndarray:
            new: np.ndarray = np.full(n, fill, dtype=dtype)
            if old is not None:
                new[: old.size] = old
            return new

        get = self.__dict__.get
        self.status = grown(get("status"), STATUS_PENDING, np.int8)
        self.phase = grown(get("phase"), PHASE_RELEASED, np.int8)
        self.start_s = grown(get("start_s"), np.nan, np.float64)
        self.last_stop = grown(get("last_stop"), np.nan, np.float64)  # submit time until a job first stops
        self.end_s = grown(get("end_s"), np.nan, np.float64)
        self.hold_since = grown(get("hold_since"), 0.0, np.float64)
        self.held_gpus = grown(get("held_gpus"), 0, np.int64)
        self.attained_gpu_s = grown(get("attained_gpu_s"), 0.0, np.float64)
        self.executed_s = grown(get("executed_s"), 0.0, np.float64)
        self.progress = grown(get("progress"), 0.0, np.float64)  # work done up to `rate_since` (model)
        self.rate_now = grown(get("rate_now"), 0.0, np.float64)  # the model's rate for what it holds now
        self.rate_since = grown(get("rate_since"), 0.0, np.float64)  # progress at rate_now from then

    def _add_jobs(self, new: list[JobObs]) -> list[int]:
        first = len(self.ids)
        for j in new:
            self.index[j.job_id] = len(self.ids)
            self.ids.append(j.job_id)
            self.obs.append(j)
        obs = self.obs
        self.jobs = JobTable.build(
            job_id=self.ids,
            submit_s=[o.submit_s - self.origin for o in obs],
            duration_s=[o.time_limit_s if math.isfinite(o.time_limit_s) else 0.0 for o in obs],
            num_gpu=[o.num_gpu for o in obs],
            gpu_milli=[o.gpu_milli for o in obs],
            cpu_milli=[o.cpus * MILLI for o in obs],
            memory_mib=[o.memory_mib for o in obs],
            gpu_spec=[self._job_gpu_model(o) for o in obs],
            deadline_s=[o.deadline_s - self.origin for o in obs],
            source=self.backend.name,
        )
        self._grow_arrays(len(self.ids))
        fresh = np.arange(first, len(self.ids))
        self.last_stop[fresh] = self.jobs.submit_s[fresh]
        self.changes.counts[ARRIVED] += len(new)
        self.book = self._live_book()
        self._priority = np.asarray(self.scheduler.priority(self.jobs), dtype=np.float64)
        self._bind()
        return list(range(first, len(self.ids)))

    def _live_book(self) -> RequestBook:
        """Requests as the cluster manager runs them: a job asked for on one node is never spread over several
        (a gang is a job asked for on several nodes), so it can never fit when no eligible node has its GPUs."""
        book = RequestBook.build(self.jobs, self.spec)
        nodes = np.array([o.num_nodes for o in self.obs], dtype=np.int64)
        per_node = np.array([o.gpus_per_node for o in self.obs], dtype=np.int64)
        largest = np.array(
            [int(self.spec.gpu_count[m].max()) if m.any() else 0 for m in book.node_mask_by_spec]
        )
        single_too_big = (nodes == 1) & (per_node > largest[book.spec_id])
        return replace(book, gang=nodes > 1, never_fits=book.never_fits | single_too_big, per_node=per_node)

    def _job_gpu_model(self, o: JobObs) -> str:
        try:
            return catalog_gpu_name(o.gpu_model, self.type_map)
        except WattschedError:
            return o.gpu_model  # no node has it: the job is reported as never fitting

    def _bind(self) -> None:
        """Bind the scheduler at the first jobs; tell it of every later batch (it keeps its state)."""
        self.perf = self._model()
        self.validator.rebind(self.book, self.perf)
        ctx = BindContext(self.spec, self.jobs, self._rng, self.node_rank, self.perf)
        if self._bound:
            self.scheduler.on_jobs_added(ctx, self.view, self.actions)
        else:
            self.scheduler.bind(ctx)
            self._bound = True

    def _model(self) -> PerformanceModel:
        from ..energy.utilisation import job_gpu_load
        from ..perf.model import PerformanceModel

        return PerformanceModel(self.jobs, self.spec, job_gpu_load(self.jobs), restart=self.restart_model)

    def _job_name(self, job: int) -> str:
        return self.ids[job]

    def update(self, obs: Observation) -> Changes:
        """Fold one observation into the mirror; what changed."""
        self.now = obs.time_s - self.origin
        self.observations += 1
        changes = Changes(nodes_changed=self._update_nodes(obs))
        new = [j for j in obs.jobs if j.job_id not in self.index and j.state != JOB_FINISHED]
        if new:
            changes.arrived = self._add_jobs(new)
            for job in changes.arrived:
                o = self.obs[job]
                if self.book.never_fits[job]:
                    log.warning("job %s (%d node(s) x %d GPU(s) %s) can never fit this cluster: left alone",
                                o.job_id, o.num_nodes, o.gpus_per_node, o.gpu_model or "any")  # fmt: skip
                    self.status[job] = STATUS_UNSCHEDULABLE
                elif not self.scheduler.admit(self.jobs, job):
                    log.warning("job %s is not admitted by %s: left alone", o.job_id, self.scheduler.name)
                    self.status[job] = STATUS_UNSCHEDULABLE
                else:
                    try:  # inputs the policy cannot run without (a deadline, ...), job by job
                        self.scheduler.check_inputs(self.jobs.subset(np.array([job])), f"job {o.job_id}")
                    except WattschedError as exc:
                        log.warning("job %s left alone: %s", o.job_id, exc)
                        self.status[job] = STATUS_UNSCHEDULABLE
        seen: set[int] = set()
        # Running jobs first: they hold their GPUs for sure, a released one only once it starts.
        for o in sorted(obs.jobs, key=lambda o: o.state != JOB_RUNNING):
            known = self.index.get(o.job_id)
            if known is None:
                continue
            job = known
            seen.add(job)
            self.obs[job] = o
            self._update_job(job, o, changes)
        # A job we hold GPUs for that the cluster manager no longer lists has ended (purged from its queue).
        for job in [j for j in self.targets if j not in seen]:
            self._finish(job, changes)
        return changes

    def _update_nodes(self, obs: Observation) -> bool:
        changed = False
        for n in obs.nodes:
            i = self.node_index.get(n.name)
            if i is None:
                log.warning("node %s appeared after start; restart wattsched to schedule on it", n.name)
                continue
            power = _POWER.get(n.power, OFF)
            available = n.power == NODE_ON or (
                self.manager_wakes_nodes and n.power in (NODE_OFF, NODE_POWERING_UP)
            )
            if bool(self.state.available[i]) != available:
                self.state.set_available(np.array([i]), available)
                self.changes.counts[BOOTED if available else SWITCHED_OFF] += 1
                changed = True
            if self.power is not None:
                changed |= self.power.observed(i, power, unusable=n.power == NODE_UNAVAILABLE)
            else:
                self.power_state[i] = power
        return changed

    def _update_job(self, job: int, o: JobObs, changes: Changes) -> None:
        status = int(self.status[job])
        if o.state == JOB_FINISHED:
            if status in (STATUS_PENDING, STATUS_RUNNING) and job not in self.targets:
                self.status[job] = STATUS_DONE if status == STATUS_RUNNING else STATUS_DROPPED
                self.end_s[job] = self.now
                if status == STATUS_PENDING:  # a waiting job cancelled outside wattsched left the queue
                    self.changes.counts[LEFT] += 1
            elif job in self.targets:
                self._finish(job, changes)
            return
        if o.state in (JOB_RUNNING, JOB_STARTING):
            if job in self.requeued_at:
                return  # the run wattsched requeued, still winding down: the job is held again
            if job in self.targets:
                if o.state == JOB_RUNNING and self.phase[job] != PHASE_RUNNING:
                    self.phase[job] = PHASE_RUNNING
                    self.store.mark(self.ids[job], "running")
            elif o.nodes:  # let go before a restart of wattsched, or started by the cluster manager itself
                self._adopt(job, o)
            else:  # queued without a hold and without nodes: the cluster manager places it, not wattsched
                self.status[job] = STATUS_FUTURE
            return
        if self.status[job] == STATUS_FUTURE:  # held now: ours to place
            self.status[job] = STATUS_PENDING
            self.changes.counts[ARRIVED] += 1
        if job in self.targets and self.phase[job] == PHASE_RUNNING:
            # requeued by the cluster manager (node failure, preemption outside wattsched): back to the queue
            self._release(job)
            self.status[job] = STATUS_PENDING
            self.changes.counts[ARRIVED] += 1
            changes.finished.append(job)

    def _adopt(self, job: int, o: JobObs) -> None:
        """Account a job that runs without this mirror having started it: its recorded placement if the store
        has one, else the first free GPUs of its nodes."""
        placement = self.store.placement(self.ids[job])
        if placement is None or not self._fits(Target(placement, o.gpu_milli), on_available=False):
            placement = self._first_free(o)
        if placement is None:
            if job not in self.unaccounted:
                self.unaccounted.add(job)
                log.warning("job %s is on %s but the mirror has no room for it there: not counted", o.job_id,
                            ",".join(o.nodes))  # fmt: skip
            self.status[job] = STATUS_RUNNING  # the cluster manager runs it: never ours to start again
            return
        self.unaccounted.discard(job)
        self._hold(job, Target(placement, o.gpu_milli))
        self.phase[job] = PHASE_RUNNING if o.state == JOB_RUNNING else PHASE_RELEASED
        self.store.record_start(self.ids[job], placement, "running" if o.state == JOB_RUNNING else "released")

    def _first_free(self, o: JobObs) -> Placement | None:
        out = []
        for name in o.nodes:
            i = self.node_index.get(name)
            if i is None:
                return None
            free = np.flatnonzero(self.state.gpu_left[i] >= o.gpu_milli)[: o.gpus_per_node]
            if free.size < o.gpus_per_node:
                return None
            out.append(NodeShare(i, tuple(int(g) for g in free), o.cpus * MILLI // max(len(o.nodes), 1), 0))
        return tuple(out)

    def _fits(self, target: Target, on_available: bool = True) -> bool:
        """Whether the target's GPUs are free (and, for a start, on nodes that take work)."""
        state, need = self.state, target.share_milli
        return all(
            (state.available[n] or not on_available) and all(state.gpu_left[n, g] >= need for g in gpus)
            for n, gpus, _, _ in target.placement
        )

    def _hold(self, job: int, target: Target) -> None:
        for node, gpus, cpu, mem in target.placement:
            self.state.allocate(node, gpus, target.share_milli, cpu, mem)
        self.targets[job] = target
        self.status[job] = STATUS_RUNNING
        self.changes.counts[TAKEN] += 1
        resumed = not math.isnan(self.start_s[job])
        if not resumed:
            self.start_s[job] = self.now
        self.hold_since[job] = self.now
        self.held_gpus[job] = target.num_gpus
        nodes = [n for n, *_ in target.placement]
        self.holders[nodes] += 1
        self.idle_since[nodes] = math.inf
        # Progress resumes after the model's restart delay (none for a first start), as in the simulator.
        delay = self.view.restart_delay_s(job, target) if resumed else 0.0
        self.rate_since[job] = self.now + delay
        self.rate_now[job] = self._model_rate(job, target)
        if target.share_milli < MILLI:
            self._rerate(self._sharers(target.placement) - {job})
        if self.power is not None:
            self.power.job_started(job)

    def _release(self, job: int) -> Target:
        target = self.targets.pop(job)
        for node, gpus, cpu, mem in target.placement:
            self.state.release(node, gpus, target.share_milli, cpu, mem)
        self.changes.counts[RELEASED] += 1
        self._settle(job)
        self.rate_now[job] = 0.0
        if target.share_milli < MILLI:
            self._rerate(self._sharers(target.placement))
        held = self.now - self.hold_since[job]
        self.attained_gpu_s[job] += held * self.held_gpus[job]
        self.executed_s[job] += held
        self.held_gpus[job] = 0
        self.phase[job] = PHASE_RELEASED
        self.last_stop[job] = self.now
        self.last_placement[job] = target.placement
        nodes = [n for n, *_ in target.placement]
        self.holders[nodes] -= 1
        for node in nodes:
            if self.holders[node] == 0:
                self.idle_since[node] = self.now
                if self.power is not None:
                    self.power.node_idle(node)
        return target

    # ----- the job model: progress at the performance model's rate ---------------------------------------------
    def _model_rate(self, job: int, target: Target) -> float:
        """Work units per second of `job` on `target`: alone, the model's rate for its GPUs and setting; on shared
        GPUs, times the sharing model's factor next to its co-runners (the simulator's rule)."""
        placement = target.placement
        ngpu = target.num_gpus
        code = int(self.spec.gpu_model_code[placement[0][0]]) if placement else -1
        switches = len({int(self.spec.switch_id[n]) for n, *_ in placement}) if len(placement) > 1 else 1
        rate = self.perf.solo_rate(job, code, ngpu, len(placement) or 1, switches, target.setting)
        if target.share_milli < MILLI:
            others = [[k for k in on_gpu if k != job] for on_gpu in self._residents(placement)]
            rate *= self.perf.shared_factor(job, code, others)
        return float(rate)

    def _residents(self, placement: Placement) -> list[list[int]]:
        """The jobs that hold each GPU of `placement` (in its order) on a share of it."""
        on_gpu: dict[tuple[int, int], list[int]] = {pair: [] for pair in gpu_set(placement)}
        for k, t in self.targets.items():
            if t.share_milli < MILLI:
                for pair in gpu_set(t.placement) & on_gpu.keys():
                    on_gpu[pair].append(k)
        return [on_gpu[(node, g)] for node, gpus, _, _ in placement for g in gpus]

    def _sharers(self, placement: Placement) -> set[int]:
        return {k for on_gpu in self._residents(placement) for k in on_gpu}

    def _settle(self, job: int) -> None:
        """Fold the progress made since `rate_since` into `progress`."""
        if self.now > self.rate_since[job]:
            self.progress[job] += self.rate_now[job] * (self.now - self.rate_since[job])
            self.rate_since[job] = self.now

    def _rerate(self, jobs: Iterable[int]) -> None:
        for job in jobs:
            if job in self.targets:
                self._settle(job)
                self.rate_now[job] = self._model_rate(job, self.targets[job])

    def progress_now(self, jobs: np.ndarray) -> np.ndarray:
        ran = np.maximum(self.now - self.rate_since[jobs], 0.0)
        done: np.ndarray = self.progress[jobs] + np.where(
            self.held_gpus[jobs] > 0, self.rate_now[jobs] * ran, 0.0
        )
        return done

    def _finish(self, job: int, changes: Changes) -> None:
        self._release(job)
        self.status[job] = STATUS_DONE
        self.end_s[job] = self.now
        self.changes.counts[LEFT] += 1
        self.store.mark(self.ids[job], "finished")
        changes.finished.append(job)

    # ----- decisions ----------------------------------------------------------------------------------------
    def pending(self) -> Iterator[int]:
        waiting = self.pending_array()
        if self.deferred:
            waiting = waiting[~np.isin(waiting, list(self.deferred))]
        order = np.lexsort((waiting, self._priority[waiting]))
        for j in waiting[order].tolist():
            if self.status[j] == STATUS_PENDING:  # a job started earlier in this pass is skipped
                yield j

    def pending_array(self) -> np.ndarray:
        return np.flatnonzero(self.status == STATUS_PENDING)

    def run_due_timers(self, power_manager: bool = False) -> None:
        """Call back every due ``wake_at`` of the scheduler (``power_manager`` False) or of the power manager, with
        the actions of whoever asked. As in the simulator, the scheduler's run before a decision, the power
        manager's after it (an idle timeout must not switch off GPUs that jobs are about to take)."""
        own = self.power.actions if self.power is not None else None
        later = []
        while self._timers and self._timers[0][0] <= self.now + 1e-9:
            entry = heapq.heappop(self._timers)
            if (entry[3] is own) != power_manager:
                later.append(entry)
                continue
            entry[2](self.view, entry[3])
        for entry in later:
            heapq.heappush(self._timers, entry)

    def schedule(self, time: float, callback: WakeCallback, actions: LiveActions) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (float(time), self._timer_seq, callback, actions))

    def decide(self) -> None:
        self.scheduler.decide(self.view, self.actions)
        self.changes.decided()

    def flush(self) -> int:
        """Let go of the jobs the passes started, in one batch; a job the cluster manager refused goes back to the
        queue (retried at the next decision). A job wattsched requeued waits in the outbox, its GPUs held, until
        its old run is seen gone. Returns how many were let go."""
        if not self.outbox:
            return 0
        ready: list[Outgoing] = []
        waiting: list[Outgoing] = []
        for e in self.outbox:
            if e.job in self.targets:  # not ended or stopped meanwhile
                (waiting if self._winding_down(e.job) else ready).append(e)
        self.outbox = waiting
        if not ready:
            return 0
        for e in ready:  # on the job before it runs: its prolog applies it on each node
            if e.setting != DEFAULT_SETTING:
                try:
                    self.backend.set_gpu_setting(self.ids[e.job], e.nodes, e.setting)
                except BackendError as exc:
                    log.warning("GPU setting of job %s not passed on: %s", self.ids[e.job], exc)
        failed = self.backend.start_many([self._start_request(e) for e in ready])
        for e in ready:
            job_id = self.ids[e.job]
            if job_id in failed:
                log.warning(
                    "start of job %s failed, retried at the next decision: %s", job_id, failed[job_id]
                )
                self._release(e.job)
                self.status[e.job] = STATUS_PENDING
                self.changes.counts[ARRIVED] += 1  # back in the queue, as the simulator counts a stop
                self.start_s[e.job] = np.nan
                self.store.mark(job_id, "waiting")
                continue
            self.requeued_at.pop(e.job, None)
            if e.resize is not None:
                self.resized[e.job] = e.resize
            self.store.mark(job_id, "released")
        return len(ready) - len(failed)

    def _winding_down(self, job: int) -> bool:
        """Whether the job's previous run (requeued) may still hold its old nodes: not yet observed since the
        requeue, or observed held while that run completes."""
        seen_since = self.observations > self.requeued_at.get(job, -1)
        return not seen_since or self.obs[job].ending

    def _start_request(self, e: Outgoing) -> StartRequest:
        o = self.obs[e.job]
        return StartRequest(
            job_id=self.ids[e.job],
            nodes=e.nodes,
            gpus_per_node=None if e.resize is None else e.resize[1],
            gpu_type=o.gpu_model,
            gpu_index=tuple(tuple(g) for _, g, _, _ in self.targets[e.job].placement),
            share_milli=self.targets[e.job].share_milli,
        )

    def shape(self, job: int) -> tuple[int, int]:
        """(nodes, GPUs per node) the cluster manager will run the job with."""
        if job in self.resized:
            return self.resized[job]
        o = self.obs[job]
        return o.num_nodes, o.gpus_per_node


if TYPE_CHECKING:

    def _implements_the_contract(view: LiveView, actions: LiveActions) -> tuple[ClusterView, Actions]:
        """Never called: mypy checks here that the live view and actions implement every member of the
        contract (policies/contract.py)."""
        return view, actions
