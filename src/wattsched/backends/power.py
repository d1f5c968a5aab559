"""Node power under a wattsched power manager on a live cluster (docs/live-slurm.md §3.4).

The live counterpart of ``engine/power.py``'s ``NodePower``: the same power managers (``policies/power.py``: the
idle timeout, the forecast buffer) get the same notices (a node went idle, a job started, work is blocked) and act
through the same ``actions.power_on/power_off``. The difference is who carries the transitions out: the cluster
manager (Slurm's suspend and resume programs), which the mirror then observes. A node goes to BOOTING or
SHUTTING_DOWN in the mirror as soon as the call succeeds, so the next pass places nothing on it; it is ON again
when the cluster manager says so, and only then takes work.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..core.states import BOOTING, OFF, ON, SHUTTING_DOWN
from ..policies.contract import SWITCHED_OFF, Actions, BlockedWatch, PowerManager
from .base import BackendError

if TYPE_CHECKING:
    from .live import LiveCluster

log = logging.getLogger("wattsched.live")


class LivePower:
    def __init__(self, manager: PowerManager, cluster: LiveCluster, actions: Actions):
        self.manager = manager
        self.cluster = cluster
        self.actions = actions  # the manager's own, so that its mistakes are reported under its name
        n = cluster.spec.num_nodes
        self.unusable = np.zeros(n, dtype=bool)  # down or drained: never powered up by wattsched
        self.booting_gpus = 0.0
        self.power_epoch = 0
        self.boots = 0
        self.shutdowns = 0
        self.watch = BlockedWatch()

    # --- what the mirror tells it ----------------------------------------------------------------------------
    def start(self) -> None:
        self.manager.on_start(self.cluster.view, self.actions)

    def job_started(self, job: int) -> None:
        self.manager.on_job_start(self.cluster.view, self.actions, job)

    def node_idle(self, node: int) -> None:
        self.manager.on_node_idle(self.cluster.view, self.actions, node)

    def observed(self, node: int, state: int, unusable: bool) -> bool:
        """The cluster manager reports `node` in `state`; True when it has just come on (capacity released)."""
        c = self.cluster
        self.unusable[node] = unusable
        if int(c.power_state[node]) == state:
            return False
        self._set(node, state)
        if state != ON:
            c.idle_since[node] = math.inf
            return False
        if c.holders[node] == 0:
            c.idle_since[node] = c.now
            self.node_idle(node)
        return True

    def batch_end(self) -> None:
        self.watch.batch_end(self.manager, self.cluster.view, self.actions, self.counts)

    def counts(self) -> list[int]:
        counts: list[int] = np.bincount(self.cluster.power_state, minlength=4).tolist()
        return counts

    # --- what the manager asks for -------------------------------------------------------------------------------
    def boot(self, nodes: Sequence[int]) -> None:
        c = self.cluster
        nodes = [n for n in nodes if c.power_state[n] == OFF and not self.unusable[n]]
        if self._call(c.backend.power_up, nodes):
            for node in nodes:
                self._set(node, BOOTING)
            self.boots += len(nodes)

    def shutdown(self, nodes: Sequence[int]) -> None:
        c = self.cluster
        nodes = [n for n in nodes if c.power_state[n] == ON and c.holders[n] == 0]
        if self._call(c.backend.power_down, nodes):
            c.state.set_available(np.asarray(nodes), False)
            c.changes.counts[SWITCHED_OFF] += len(nodes)
            for node in nodes:
                self._set(node, SHUTTING_DOWN)
                c.idle_since[node] = math.inf
            self.shutdowns += len(nodes)

    def _call(self, call: Callable[[Sequence[str]], None], nodes: list[int]) -> bool:
        if not nodes:
            return False
        names = [str(self.cluster.spec.node_names[n]) for n in nodes]
        try:
            call(names)
        except BackendError as exc:
            log.warning("%s: power change of %s failed: %s", self.manager.name, ",".join(names), exc)
            return False
        log.info("%s: %s %s", self.manager.name, call.__name__.replace("_", " "), ",".join(names))
        return True

    def _set(self, node: int, state: int) -> None:
        c = self.cluster
        old = int(c.power_state[node])
        gpus = float(c.spec.gpu_count[node])
        self.booting_gpus += (state == BOOTING) * gpus - (old == BOOTING) * gpus
        self.power_epoch += 1
        c.power_state[node] = state
