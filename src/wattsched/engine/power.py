"""Node power states in the simulator: the mechanism behind ``actions.power_on/power_off``.

States ON, OFF, BOOTING, SHUTTING_DOWN (``core.states``). Only ON nodes are `available` to placement, so no work
is ever placed on a node that is off or in transition. Transitions take the configured time and are recorded in
one list, from which the energy ledger and the counters derive. Which nodes to switch is the power manager's
decision (``policies.power``); this module only carries decisions out and tells the manager what happened.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..core.states import BOOTING, OFF, ON, SHUTTING_DOWN
from ..policies.contract import BOOTED, SWITCHED_OFF, BlockedWatch, PowerManager

if TYPE_CHECKING:
    from ..policies.contract import Actions, ClusterView
    from .temporal import Simulator

# One node power transition: (time, node, new state, old state).
Transition = tuple[float, int, int, int]


class PowerStateConfig(BaseModel):
    """Transition times and draws, and the power managers' knobs. A node in transition draws its idle power
    (booting or shutting down a GPU server keeps CPUs, memory and GPUs powered); an off node draws `off_power_w`
    (a BMC, if you want it)."""

    model_config = ConfigDict(extra="forbid")

    boot_time_s: float = Field(300.0, ge=0, description="off -> on (POST, OS boot, driver load)")
    shutdown_time_s: float = Field(60.0, ge=0, description="on -> off")
    off_power_w: float = Field(0.0, ge=0, description="draw of a node that is off")
    idle_timeout_s: float = Field(600.0, gt=0, description="idle-timeout: idle time before a node goes off")
    forecast_interval_s: float = Field(600.0, gt=0, description="forecast: decision period")
    forecast_history_s: float = Field(3600.0, gt=0, description="forecast: recent window for the peak")
    forecast_season_s: float = Field(
        86400.0, gt=0, description="forecast: seasonal lag (same time yesterday)"
    )
    forecast_buffer_frac: float = Field(0.2, ge=0, description="forecast: spare GPUs kept on, as a fraction")


class NodePower:
    """Carries out power decisions: timers, the `available` mask, the transition log, idle tracking."""

    def __init__(self, manager: PowerManager, config: PowerStateConfig):
        self.manager = manager
        self.config = config
        # (time, node, new state, old state): the one record of power states; counters below derive from it.
        self.transitions: list[Transition] = []
        self.counts = [0, 0, 0, 0]  # live nodes per state, needed at every event
        self.end_time = 0.0
        self.booting_gpus = 0.0
        self.power_epoch = 0
        self.watch = BlockedWatch()

    def start(self, sim: Simulator) -> None:
        self.sim = sim
        self.spec = sim.spec
        n = sim.spec.num_nodes
        self.power_state = np.full(n, ON, dtype=np.int8)
        self.idle_since = np.full(n, sim.now)
        self.counts = [n, 0, 0, 0]
        self.manager.on_start(sim.view, sim.actions_for_power)

    # --- what the engine tells it ---------------------------------------------------------------------------
    def job_started(self, job: int, nodes: Iterable[int]) -> None:
        for node in nodes:
            self.idle_since[node] = math.inf
        self.manager.on_job_start(self.sim.view, self.sim.actions_for_power, job)

    def job_left(self, nodes: Iterable[int]) -> None:
        jobs_on_node = self.sim.state.jobs_on_node
        for node in nodes:
            if jobs_on_node[node] == 0:
                self.idle_since[node] = self.sim.now
                self.manager.on_node_idle(self.sim.view, self.sim.actions_for_power, node)

    def batch_end(self) -> None:
        sim = self.sim
        if sim.check:
            self.check_invariants()
        self.watch.batch_end(self.manager, sim.view, sim.actions_for_power, lambda: self.counts)

    def finish(self, now: float) -> None:
        self.end_time = now

    # --- mechanism ----------------------------------------------------------------------------------------------
    def _set(self, node: int, new_state: int) -> None:
        old_state = int(self.power_state[node])
        gpus = float(self.spec.gpu_count[node])
        self.booting_gpus += (new_state == BOOTING) * gpus - (old_state == BOOTING) * gpus
        self.power_epoch += 1
        self.counts[old_state] -= 1
        self.counts[new_state] += 1
        self.power_state[node] = new_state
        self.transitions.append((self.sim.now, node, new_state, old_state))
        if new_state == ON:
            self.sim.changes.counts[BOOTED] += 1
        elif new_state == SHUTTING_DOWN:
            self.sim.changes.counts[SWITCHED_OFF] += 1

    def shutdown(self, nodes: Iterable[int]) -> None:
        sim = self.sim
        nodes = [n for n in nodes if self.power_state[n] == ON and sim.state.jobs_on_node[n] == 0]
        if not nodes:
            return
        sim.state.set_available(np.asarray(nodes), False)
        for node in nodes:
            self._set(node, SHUTTING_DOWN)
            self.idle_since[node] = math.inf

        def done(view: ClusterView, actions: Actions) -> None:
            for node in nodes:
                self._set(node, OFF)

        sim.schedule(sim.now + self.config.shutdown_time_s, done)

    def boot(self, nodes: Iterable[int]) -> None:
        sim = self.sim
        nodes = [n for n in nodes if self.power_state[n] == OFF]
        if not nodes:
            return
        for node in nodes:
            self._set(node, BOOTING)

        def done(view: ClusterView, actions: Actions) -> None:
            sim.state.set_available(np.asarray(nodes), True)
            for node in nodes:
                self._set(node, ON)
                self.idle_since[node] = sim.now
                self.manager.on_node_idle(view, actions, node)
            sim.mark_released()

        sim.schedule(sim.now + self.config.boot_time_s, done)

    # --- results and checks ---------------------------------------------------------------------------------
    @property
    def boots(self) -> int:
        return sum(1 for tr in self.transitions if tr[2] == BOOTING)

    @property
    def shutdowns(self) -> int:
        return sum(1 for tr in self.transitions if tr[2] == SHUTTING_DOWN)

    @property
    def node_seconds_off(self) -> float:
        total, off_since = 0.0, {}
        for t, node, new, _ in self.transitions:
            if new == OFF:
                off_since[node] = t
            elif node in off_since:
                total += t - off_since.pop(node)
        return total + sum(self.end_time - t for t in off_since.values())

    def check_invariants(self) -> None:
        """No work on a node that is not on, and only nodes that are on are available to placement."""
        sim = self.sim
        not_on = self.power_state != ON
        if (sim.state.jobs_on_node[not_on] > 0).any():
            raise AssertionError("a job runs on a node that is off, booting or shutting down")
        if (sim.state.available != ~not_on).any():
            raise AssertionError("placement availability out of sync with node power states")
        if sum(self.counts) != self.spec.num_nodes or self.counts[OFF] != int(
            (self.power_state == OFF).sum()
        ):
            raise AssertionError("power-state counters out of sync")

    def summary(self) -> dict[str, Any]:
        return {
            "power_manager": self.manager.name,
            "node_boots": self.boots,
            "node_shutdowns": self.shutdowns,
            "node_hours_off": self.node_seconds_off / 3600.0,
        }
