"""The live :class:`LiveActions`: the ``Actions`` of ``policies/contract.py`` on a live cluster. Each action is
checked by the one :class:`~..policies.validation.ActionValidator` against the mirror
(:class:`~.live.LiveCluster`), applied to it at once, and carried out through the backend: starts are queued as
:class:`Outgoing` and let go by ``LiveCluster.flush``; stops, setting changes, cancels and node power go to the
backend directly (docs/live-slurm.md §3).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.placement import Placement
from ..core.settings import GpuSetting
from ..core.states import PHASE_RELEASED, STATUS_DROPPED, STATUS_PENDING
from ..policies.contract import LEFT, SETTINGS, InvalidDecision, Target, WakeCallback
from .base import BackendError

if TYPE_CHECKING:
    from .live import LiveCluster


log = logging.getLogger("wattsched.live")  # the mirror's logger: one name for the live cluster's warnings


@dataclass(frozen=True)
class Outgoing:
    """A start the pass made, to be let go in the cluster manager by ``LiveCluster.flush``."""

    job: int
    nodes: tuple[str, ...]
    setting: GpuSetting
    resize: tuple[int, int] | None = None  # (nodes, GPUs per node) when the job runs in another shape


class LiveActions:
    """The live ``Actions``: each one is checked against the mirror, then carried out through the backend. Starts
    are collected and let go in one batch after the pass (the pass itself makes no cluster-manager call); other
    actions are carried out at once. A backend failure is logged with its command and leaves the mirror as it was
    (the next decision retries)."""

    def __init__(self, cluster: LiveCluster, by: str):
        self._c = cluster
        self._by = by

    def _invalid(self, job: int | None, message: str) -> InvalidDecision:
        return InvalidDecision(self._by, None if job is None else self._c.ids[job], message)

    def start(self, job: int, target: Target) -> None:
        c = self._c
        if not 0 <= job < len(c.ids):
            raise self._invalid(None, f"unknown job index {job}")
        if c.status[job] != STATUS_PENDING or job in c.targets:
            raise self._invalid(job, "start of a job that is not waiting")
        c.validator.target(self._by, job, target)
        nodes = tuple(str(c.spec.node_names[n]) for n, *_ in target.placement)
        per_node = {len(gpus) for _, gpus, _, _ in target.placement}
        shape = (len(nodes), per_node.pop()) if len(per_node) == 1 else None
        resize = None
        if shape != c.shape(job):
            # A cluster manager runs a job in one shape: so many GPUs on each of its nodes.
            if shape is None or shape[1] == 0:
                where = _describe(c, target.placement)
                raise self._invalid(job, f"placement {where} has GPUs per node that differ: the cluster manager "
                                         "runs a job with the same GPUs on each node")  # fmt: skip
            resize = shape
        if not c._fits(target):
            raise self._invalid(job, f"placement {_describe(c, target.placement)} is not free")
        c.store.record_start(c.ids[job], target.placement, "starting")  # before the call: no double start
        c._hold(job, target)
        c.phase[job] = PHASE_RELEASED  # running once the cluster manager says so
        c.outbox.append(
            Outgoing(job, nodes, target.setting, resize)
        )  # let go after the pass (LiveCluster.flush)

    def stop(self, job: int, save: bool = False) -> None:
        c = self._c
        if job not in c.targets:
            raise self._invalid(job, "stop of a job that holds nothing")
        c.validator.stop(self._by, job)
        if any(e.job == job for e in c.outbox):  # started by wattsched but not let go yet: nothing to requeue
            c.outbox = [e for e in c.outbox if e.job != job]
            c._release(job)
            c.status[job] = STATUS_PENDING
            c.store.mark(c.ids[job], "waiting")
            return
        try:
            c.backend.requeue(c.ids[job])
        except BackendError as exc:
            log.warning("requeue of job %s failed: %s", c.ids[job], exc)
            return
        c._release(job)
        c.status[job] = STATUS_PENDING
        c.requeued_at[job] = c.observations
        c.store.mark(c.ids[job], "requeued")

    def move(self, job: int, target: Target) -> None:
        self.move_many({job: target})

    def move_many(self, targets: Mapping[int, Target]) -> None:
        # A live job changes nodes or size through a requeue and a new start on its target (resized first where
        # the shape changes); every job is stopped before any is placed again, as in the simulator.
        for job in targets:
            self.stop(job)
        for job, target in targets.items():
            if self._c.status[job] == STATUS_PENDING and job not in self._c.targets:
                self.start(job, target)

    def retune(self, job: int, setting: GpuSetting) -> None:
        c = self._c
        if job not in c.targets:
            raise self._invalid(job, "retune of a job that holds nothing")
        old = c.targets[job]
        c.validator.setting(self._by, job, old.placement, setting)
        c.targets[job] = Target(old.placement, old.share_milli, setting)
        c._rerate([job])
        c.changes.counts[SETTINGS] += 1
        self.apply_setting(job, setting)

    def apply_setting(self, job: int, setting: GpuSetting) -> None:
        c = self._c
        nodes = [str(c.spec.node_names[n]) for n, *_ in c.targets[job].placement]
        try:
            c.backend.set_gpu_setting(c.ids[job], nodes, setting)
        except BackendError as exc:
            log.warning("GPU setting of job %s not applied: %s", c.ids[job], exc)

    def reject(self, job: int) -> None:
        c = self._c
        if c.status[job] != STATUS_PENDING or job in c.targets:
            raise self._invalid(job, "reject of a job that is not pending")
        try:
            c.backend.cancel(c.ids[job])
        except BackendError as exc:
            log.warning("cancel of job %s failed: %s", c.ids[job], exc)
            return
        c.status[job] = STATUS_DROPPED
        c.changes.counts[LEFT] += 1
        c.store.mark(c.ids[job], "rejected")

    def defer(self, job: int, deferred: bool = True) -> None:
        c = self._c
        if (job in c.deferred) != deferred:
            c.changes.counts[SETTINGS] += 1
        (c.deferred.add if deferred else c.deferred.discard)(job)

    def keep_free(self, gpus: float) -> None:
        if not gpus >= 0:
            raise self._invalid(None, f"keep_free_gpus must be >= 0, got {gpus}")
        if float(gpus) != self._c.keep_free_gpus:
            self._c.changes.counts[SETTINGS] += 1
        self._c.keep_free_gpus = float(gpus)

    def power_on(self, nodes: Iterable[int]) -> None:
        if self._c.power is None:  # as in the simulator: node power belongs to a power manager
            raise self._invalid(None, "this run has no node power control (no --power manager)")
        self._c.power.boot(list(nodes))

    def power_off(self, nodes: Iterable[int]) -> None:
        if self._c.power is None:
            raise self._invalid(None, "this run has no node power control (no --power manager)")
        self._c.power.shutdown(list(nodes))

    def wake_at(self, time: float, callback: WakeCallback) -> None:
        if not time >= self._c.now:
            raise self._invalid(None, f"wake-up at {time} is in the past (now {self._c.now})")
        self._c.schedule(time, callback, self)

    def decide_after_events(self) -> None:
        self._c.decide_requested = True


def _describe(c: LiveCluster, placement: Placement) -> str:
    return ";".join(f"{c.spec.node_names[n]}:{','.join(map(str, g))}" for n, g, _, _ in placement)
