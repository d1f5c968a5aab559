"""Schedulers that put the two kinds of scheduling policy on the one backend contract (``contract.py``).

* :class:`QueuePlacementScheduler`: a queue policy and a placement policy; jobs start on arrival or when
  capacity is released, and keep their placement to the end.
* :class:`RoundScheduler`: an :class:`~.contract.AllocationPolicy` called every round (and, if it asks, on
  arrivals and completions); :func:`apply_decision` diffs its targets against the present.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from ..core.cluster import MILLI
from ..core.errors import WattschedError
from ..core.jobs import JobTable
from ..core.settings import DEFAULT_SETTING
from ..core.states import STATUS_PENDING, STATUS_RUNNING
from .base import PlacementPolicy, QueuePolicy, run_pass
from .contract import (
    Actions,
    AllocationPolicy,
    BindContext,
    Capability,
    ClusterView,
    Decision,
    InvalidDecision,
    Scheduler,
    Target,
)
from .settings import SettingRule

_FAILED_MEMO_SIZE = 32


def policy_info(policy: Any) -> dict[str, Any]:
    info = {"name": policy.name, "reconstructed": bool(policy.reconstructed)}
    if policy.basis:
        info["basis"] = policy.basis
    return info


class _QueuePass:
    """The :class:`~.base.PassContext` a queue policy sees during one pass, over the view and actions."""

    def __init__(self, owner: QueuePlacementScheduler, view: ClusterView, actions: Actions):
        self.owner = owner
        self.view = view
        self.actions = actions
        self.now = view.now
        self.jobs = view.jobs

    def pending(self) -> Iterator[int]:
        return self.view.pending()

    def try_start(self, job: int) -> bool:
        return self.owner.try_start(self.view, self.actions, job)

    def running_release_profile(self) -> tuple[np.ndarray, np.ndarray]:
        return self.view.running_release_profile()

    def free_gpus_total(self) -> int:
        return self.view.free_gpus_total()


class QueuePlacementScheduler(Scheduler):
    """A queue policy orders and admits; a placement policy picks nodes and GPUs; jobs run to completion."""

    decide_on_arrival = True
    decide_on_release = True

    def __init__(
        self, queue: QueuePolicy, placement: PlacementPolicy, setting_rule: SettingRule | None = None
    ):
        self.queue = queue
        self.placement = placement
        self.setting_rule = setting_rule
        self.name = f"{queue.name}+{placement.name}"
        self._failed: list[tuple[int, int, int, int, int, bool]] = []
        self._failed_epoch = -1

    def bind(self, ctx: BindContext) -> None:
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        self.placement.prepare(ctx.jobs, ctx.spec)
        self._model_names = ctx.spec.gpu_models
        self._model_code = ctx.spec.gpu_model_code

    def on_jobs_added(self, ctx: BindContext, view: ClusterView, actions: Actions) -> None:
        # The placement keeps its random stream and tie-break order; only what it derives from the jobs
        # (FGD's typical pods) is derived again.
        self.placement.prepare(ctx.jobs, ctx.spec)

    def required_capabilities(self) -> frozenset[Capability]:
        return frozenset({Capability.SETS_GPU_SETTINGS}) if self.setting_rule is not None else frozenset()

    def priority(self, jobs: JobTable) -> np.ndarray:
        return np.asarray(self.queue.priority(jobs), dtype=np.float64)

    def admit(self, jobs: JobTable, job: int) -> bool:
        return self.queue.admit(jobs, job)

    def decide(self, view: ClusterView, actions: Actions) -> None:
        if view.queue_length:
            run_pass(self.queue, _QueuePass(self, view, actions))

    def native_plan(self) -> dict[str, Any] | None:
        """How a simulator may run this scheduler in its compiled loop (engine/native_replay.py), or None.

        Only the built-in policies the loop mirrors, by exact type (a subclass may change anything): fifo and sjf
        stop at the first job that cannot start ("block"), edf-greedy and arrival-greedy try every waiting job
        ("every"); best-fit and first-fit place. No GPU-setting rule."""
        from .placement import BestFit, FirstFit
        from .queue import ArrivalGreedy, EdfGreedy, Fifo, ShortestJobFirst

        if type(self) is not QueuePlacementScheduler or self.setting_rule is not None:
            return None
        queue_modes = {Fifo: "block", ShortestJobFirst: "block", EdfGreedy: "every", ArrivalGreedy: "every"}
        placements = {BestFit: "best-fit", FirstFit: "first-fit"}
        queue = queue_modes.get(type(self.queue))
        placement = placements.get(type(self.placement))
        if queue is None or placement is None:
            return None
        return {
            "queue": queue,
            "placement": placement,
            "rank": self.placement.rank,
            "rank_weight": self.placement._rank_weight,
        }

    def try_start(self, view: ClusterView, actions: Actions, job: int) -> bool:
        state = view.state
        if self._failed_epoch != state.release_epoch:
            self._failed.clear()
            self._failed_epoch = state.release_epoch
        req = view.request(job)
        monotone = self.placement.monotone_failures
        if monotone:
            sig = (req.mask_id, req.num_gpu, req.gpu_milli, req.cpu_milli, req.memory_mib, req.gang)
            # Within one release epoch capacity only shrinks, so a request that dominates a failed one fails too
            # (only for placement policies whose answer depends on free capacity alone).
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
        placement = self.placement.place(state, req)
        if placement is None:
            if monotone and len(self._failed) < _FAILED_MEMO_SIZE:
                self._failed.append(sig)
            return False
        setting = DEFAULT_SETTING
        if self.setting_rule is not None and placement[0][1]:
            code = int(self._model_code[placement[0][0]])
            if code >= 0:
                setting = self.setting_rule.setting_for(self._model_names[code])
        actions.start(job, Target(placement, req.gpu_milli if req.gpu_milli > 0 else MILLI, setting))
        return True

    def describe(self) -> dict[str, Any]:
        return {"queue": policy_info(self.queue), "placement": policy_info(self.placement)}


class RoundScheduler(Scheduler):
    """Calls an allocation policy every `round_s` seconds (rounds aligned to the first arrival), and on arrivals
    and completions if asked; applies each decision by diffing it against the present."""

    def __init__(
        self,
        policy: AllocationPolicy,
        round_s: float,
        on_arrival: bool | None = None,
        on_completion: bool | None = None,
        setting_rule: SettingRule | None = None,
        params: dict[str, Any] | None = None,
    ):
        if not (round_s > 0 and math.isfinite(round_s)):
            raise ValueError(f"round_s must be a positive number of seconds, got {round_s}")
        self.policy = policy
        self.name = policy.name
        self.round_s = float(round_s)
        self.decide_on_arrival = policy.decide_on_arrival if on_arrival is None else bool(on_arrival)
        self.decide_on_release = policy.decide_on_completion if on_completion is None else bool(on_completion)
        self.setting_rule = setting_rule
        self.params = dict(params or {})  # run-level settings the policy may read (BindContext.params)
        self.rounds = 0
        self.decisions = 0
        self._origin = 0.0
        self._wake = -math.inf  # the last wake-up the policy asked for (Decision.wake_at)
        self._rounds_stopped = False  # no work and no known arrival: rounds resume when jobs are added

    def bind(self, ctx: BindContext) -> None:
        self.policy.bind(replace(ctx, params={**ctx.params, **self.params}))
        self._model_names = ctx.spec.gpu_models
        self._model_code = ctx.spec.gpu_model_code

    def on_jobs_added(self, ctx: BindContext, view: ClusterView, actions: Actions) -> None:
        self.policy.on_jobs_added(replace(ctx, params={**ctx.params, **self.params}))
        if self._rounds_stopped:  # rounds resume on their grid, as if the arrival had been known
            self._rounds_stopped = False
            k = math.ceil((view.now - self._origin) / self.round_s - 1e-12)
            actions.wake_at(self._origin + k * self.round_s, self._round)

    def required_capabilities(self) -> frozenset[Capability]:
        needs = self.policy.required_capabilities(self.params)
        return needs | {Capability.SETS_GPU_SETTINGS} if self.setting_rule is not None else needs

    def check_inputs(self, jobs: JobTable, workload: str) -> None:
        if self.policy.needs_deadlines and np.isnan(jobs.deadline_s).all():
            raise WattschedError(
                f"allocation policy '{self.policy.name}' needs job deadlines and workload '{workload}' has none: "
                "give every training job one with --deadline-slack K (deadline = submit + K x trace duration)"
            )

    def on_start(self, view: ClusterView, actions: Actions) -> None:
        self._origin = view.now
        actions.wake_at(view.now, self._round)

    def _round(self, view: ClusterView, actions: Actions) -> None:
        self.rounds += 1
        # The decision itself runs after every event at this time, so that jobs arriving now are in it.
        actions.decide_after_events()
        busy = view.queue_length or len(view.running_jobs()) or len(view.deferred_jobs())
        if busy or view.next_arrival_s() <= view.now:
            nxt = view.now + self.round_s
        else:
            arrival = view.next_arrival_s()
            if not math.isfinite(arrival):
                self._rounds_stopped = True
                return  # nothing left to schedule (until jobs are added)
            # Skip empty rounds: the next round on the grid at or after the next arrival.
            k = math.ceil((arrival - self._origin) / self.round_s - 1e-12)
            nxt = max(self._origin + k * self.round_s, view.now + self.round_s)
        actions.wake_at(nxt, self._round)

    def decide(self, view: ClusterView, actions: Actions) -> None:
        self.decisions += 1
        decision = self.policy.allocate(view)
        if self.setting_rule is not None:
            decision = self._with_rule_settings(decision)
        apply_decision(view, actions, decision, self.policy.name)
        if decision.wake_at is not None:
            self._wake = float(decision.wake_at)
            actions.wake_at(self._wake, lambda v, a: a.decide_after_events())

    def waiting_until(self) -> float:
        return self._wake

    def native_plan(self) -> dict[str, Any] | None:
        """How a simulator may run these rounds in its compiled loop (engine/native_replay.py), or None: the
        policy's own plan (``native_round_plan()``: Tiresias, while it never contends), before any round, with
        decisions on arrivals and completions and no GPU-setting rule."""
        hook = getattr(self.policy, "native_round_plan", None)
        if type(self) is not RoundScheduler or self.setting_rule is not None or not callable(hook):
            return None
        if self.rounds or self.decisions or self._rounds_stopped or self._wake != -math.inf:
            return None
        if not (self.decide_on_arrival and self.decide_on_release):
            return None
        plan = hook()
        if not plan:
            return None
        return {
            **plan,
            "round_s": self.round_s,
            "round_origin": self._origin,
            "round_callback": self._round,
            "rounds_done": self._native_rounds_done,
        }

    def _native_rounds_done(self, rounds: int, decisions: int, stopped: bool) -> None:
        """The compiled loop ran `rounds` rounds and `decisions` decisions (and stopped the rounds, or not)."""
        self.rounds += rounds
        self.decisions += decisions
        self._rounds_stopped = stopped

    def _with_rule_settings(self, decision: Decision) -> Decision:
        """The run's static or energy-optimal setting for every job the policy leaves at the default one."""
        rule = self.setting_rule
        assert rule is not None  # called only with a rule
        assign = dict(decision.assign)
        for job, target in assign.items():
            if target.setting == DEFAULT_SETTING and target.placement and target.placement[0][1]:
                code = int(self._model_code[target.placement[0][0]])
                if code >= 0:
                    setting = rule.setting_for(self._model_names[code])
                    assign[job] = Target(target.placement, target.share_milli, setting)
        return replace(decision, assign=assign)

    def describe(self) -> dict[str, Any]:
        info = policy_info(self.policy)
        info["parameters"] = self.policy.parameters()
        return {
            "allocation": info,
            "round_s": self.round_s,
            "decide_on_arrival": self.decide_on_arrival,
            "decide_on_completion": self.decide_on_release,
            "rounds": self.rounds,
            "decisions": self.decisions,
        }


def apply_decision(view: ClusterView, actions: Actions, decision: Decision, policy: str) -> None:
    """Turn target allocations into actions: stops, then moves (all released before any is re-placed), then
    retunes, then starts in the order given. Running jobs neither kept nor assigned are stopped (none with
    ``keep_all``)."""
    assign = decision.assign
    changes = assign or decision.reject or decision.defer or decision.undefer
    if decision.keep_all:
        if not changes and decision.keep_free_gpus is None:
            return  # "keep everything as it is", said without a list: nothing to read or compare
        keep = running = np.zeros(0, dtype=np.int64)  # no stops
    else:
        keep = np.asarray(decision.keep, dtype=np.int64)
        running = view.running_jobs()
        if not changes and decision.keep_free_gpus is None and np.array_equal(keep, running):
            return  # "keep everything as it is": the common answer of event-driven policies between rounds
    status = view.status
    ids = view.jobs.job_id
    if keep.size:
        bad = keep[(keep < 0) | (keep >= len(status))]
        if bad.size:
            raise InvalidDecision(policy, None, f"keeps unknown job index {int(bad[0])}")
        not_running = keep[status[keep] != STATUS_RUNNING]
        if not_running.size:
            raise InvalidDecision(policy, str(ids[not_running[0]]), "keeps a job that is not running")
    for job in assign:
        if not 0 <= job < len(status):
            raise InvalidDecision(policy, None, f"assigns unknown job index {job}")
        if status[job] not in (STATUS_PENDING, STATUS_RUNNING):
            raise InvalidDecision(policy, str(ids[job]), "assigns a job that is neither pending nor running")
    if running.size:
        listed = np.zeros(len(status), dtype=bool)
        listed[keep] = True
        if assign:
            listed[np.fromiter(assign, dtype=np.int64, count=len(assign))] = True
        for job in running[~listed[running]].tolist():
            actions.stop(job, save=decision.save_on_stop)
    for job in decision.reject:
        if status[job] != STATUS_PENDING:
            raise InvalidDecision(policy, str(ids[job]), "rejects a job that is not pending")
        actions.reject(job)
    if decision.defer or decision.undefer:
        _apply_deferrals(view, actions, decision, policy)
    if decision.keep_free_gpus is not None:
        actions.keep_free(decision.keep_free_gpus)
    moves, retunes, starts = {}, [], []
    for job, target in assign.items():
        if status[job] == STATUS_PENDING:
            starts.append(job)
            continue
        now = view.target(job)
        if now is None or (now.placement, now.share_milli) != (target.placement, target.share_milli):
            moves[job] = target
        elif now.setting != target.setting:
            retunes.append(job)
    if moves:
        actions.move_many(moves)
    for job in retunes:
        actions.retune(job, assign[job].setting)
    for job in starts:
        actions.start(job, assign[job])


def _apply_deferrals(view: ClusterView, actions: Actions, decision: Decision, policy: str) -> None:
    """Hold back ``decision.defer`` (pending, or stopped by this decision) and return ``decision.undefer``."""
    status, ids = view.status, view.jobs.job_id
    for job in decision.undefer:
        actions.defer(int(job), False)
    for job in decision.defer:
        job = int(job)
        if not 0 <= job < len(status) or status[job] != STATUS_PENDING:
            who = str(ids[job]) if 0 <= job < len(status) else None
            raise InvalidDecision(policy, who, "defers a job that is not pending")
        if job in decision.assign:
            raise InvalidDecision(policy, str(ids[job]), "both defers and starts the job")
        actions.defer(job, True)
