"""Node power states and the power managers that drive them (dynamic right-sizing).

States: ON, OFF, BOOTING, SHUTTING_DOWN. Only ON nodes are `available` to placement, so no work is ever placed on
a node that is off or in transition. The :class:`NodePowerController` is the mechanism (timers, state changes,
bookkeeping); a :class:`PowerManager` is the policy deciding which nodes to boot or shut down. Managers register
by name: `always-on`, `idle-timeout`, `forecast`.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from itertools import islice
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..engine.observers import Observer
from ..engine.requests import empty_node_hosts
from ..policies.base import gang_gpus
from ..policies.registry import Registry

if TYPE_CHECKING:
    from ..engine.temporal import Simulator

ON, OFF, BOOTING, SHUTTING_DOWN = 0, 1, 2, 3
POWER_STATE_NAMES = ("on", "off", "booting", "shutting_down")
BOOT_LOOKAHEAD_JOBS = 64  # pending jobs considered when sizing boots


def _shape(req) -> tuple[int, int, int, int]:
    """A request's (GPUs, milli per GPU, milli-CPU, MiB), the arguments of `empty_node_hosts`."""
    return req.num_gpu, req.gpu_milli, req.cpu_milli, req.memory_mib


class PowerStateConfig(BaseModel):
    """Transition times and draws. A node in transition draws its idle power (booting or shutting down a GPU
    server keeps CPUs, memory and GPUs powered); an off node draws `off_power_w` (a BMC, if you want it)."""

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


class PowerManager:
    """Policy hooks; each returns nothing and acts through the controller."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    reconstructed: ClassVar[bool] = False
    basis: ClassVar[str] = ""

    def on_start(self, ctrl: NodePowerController, sim: Simulator) -> None: ...

    def on_node_idle(self, ctrl: NodePowerController, sim: Simulator, node: int) -> None: ...

    def on_job_start(self, ctrl: NodePowerController, sim: Simulator, job: int) -> None: ...

    def on_blocked(self, ctrl: NodePowerController, sim: Simulator) -> None:
        """Jobs are waiting and some nodes are off: by default boot what the waiting work needs."""
        ctrl.boot(ctrl.plan_boots(sim), sim)


POWER_MANAGERS: Registry[PowerManager] = Registry("power manager")


@POWER_MANAGERS.register("always-on")
class AlwaysOn(PowerManager):
    name = "always-on"
    description = "every node stays on (baseline)"

    def on_blocked(self, ctrl: NodePowerController, sim: Simulator) -> None:
        return None


@POWER_MANAGERS.register("idle-timeout")
class IdleTimeout(PowerManager):
    """Dynamic right-sizing: a node idle for `idle_timeout_s` shuts down; an off node boots when waiting work
    needs it, and that work waits for the boot."""

    name = "idle-timeout"
    description = "node off after an idle timeout, booted on demand (dynamic right-sizing)"

    def __init__(self) -> None:
        # Deadlines (time, node, idle_since) live here; the engine is woken only for the earliest valid one, so
        # the many idle periods that end before their timeout cost no simulator event.
        self._deadlines: list[tuple[float, int, float]] = []
        self._wake_at = math.inf

    def on_start(self, ctrl: NodePowerController, sim: Simulator) -> None:
        for node in range(ctrl.spec.num_nodes):
            self.on_node_idle(ctrl, sim, node)

    def on_node_idle(self, ctrl: NodePowerController, sim: Simulator, node: int) -> None:
        deadline = ctrl.idle_since[node] + ctrl.config.idle_timeout_s
        heapq.heappush(self._deadlines, (deadline, node, ctrl.idle_since[node]))
        self._arm(ctrl, sim)

    def _valid(self, ctrl: NodePowerController, sim: Simulator, node: int, since: float) -> bool:
        return (
            ctrl.power_state[node] == ON
            and ctrl.idle_since[node] == since
            and not sim.state.jobs_on_node[node]
        )

    def _arm(self, ctrl: NodePowerController, sim: Simulator) -> None:
        heap = self._deadlines
        while heap and not self._valid(ctrl, sim, heap[0][1], heap[0][2]):
            heapq.heappop(heap)
        if heap and heap[0][0] < self._wake_at:
            self._wake_at = heap[0][0]
            sim.schedule(self._wake_at, lambda s: self._expire(ctrl, s))

    def _expire(self, ctrl: NodePowerController, sim: Simulator) -> None:
        if sim.now < self._wake_at:
            return  # superseded by an earlier wake-up that already ran
        self._wake_at = math.inf
        heap = self._deadlines
        timeout = ctrl.config.idle_timeout_s
        due = []
        while heap and heap[0][0] <= sim.now:
            _, node, since = heapq.heappop(heap)
            if not self._valid(ctrl, sim, node, since):
                continue
            if ctrl.wanted_by_waiting_work(sim, node):
                # Waiting work may need it soon (e.g. the other half of a gang): check again later.
                heapq.heappush(heap, (sim.now + timeout, node, since))
            else:
                due.append(node)
        ctrl.shutdown(due, sim)
        self._arm(ctrl, sim)


@POWER_MANAGERS.register("forecast")
class ForecastBuffer(PowerManager):
    """Helios-CES-style buffer (Hu et al., SC'21): keep enough GPU nodes on for a short-term demand forecast.

    Reconstructed: Helios forecasts node demand with LightGBM over 10-minute buckets; here the forecast is the larger
    of the peak allocated GPUs over the last hour and the peak over the next interval one season (a day) ago, plus
    a buffer fraction. Every interval, idle nodes beyond the target shut down (largest rank last) and off nodes
    boot when the target exceeds the GPUs on. Waiting work still boots nodes on demand. CPU-only nodes stay on.
    """

    name = "forecast"
    description = "keep a buffer of GPU nodes on sized from a short-term demand forecast (Helios CES style)"
    reconstructed = True
    basis = (
        "Helios CES (Hu et al., SC'21): forecast-driven node power-off; forecaster simplified to peak history"
    )

    def __init__(self) -> None:
        self.history: deque[tuple[float, float]] = deque()
        self.peak_since_tick = 0.0

    def on_start(self, ctrl: NodePowerController, sim: Simulator) -> None:
        sim.schedule(sim.now, lambda s: self._tick(ctrl, s))

    def on_job_start(self, ctrl: NodePowerController, sim: Simulator, job: int) -> None:
        self.peak_since_tick = max(self.peak_since_tick, sim.state.allocated_milli / 1000.0)

    def forecast(self, now: float, cfg: PowerStateConfig) -> float:
        recent = [v for t, v in self.history if t >= now - cfg.forecast_history_s]
        lag0, lag1 = now - cfg.forecast_season_s, now - cfg.forecast_season_s + cfg.forecast_interval_s
        seasonal = [v for t, v in self.history if lag0 <= t <= lag1]
        return max(recent + seasonal + [0.0])

    def _tick(self, ctrl: NodePowerController, sim: Simulator) -> None:
        cfg = ctrl.config
        now = sim.now
        current = sim.state.allocated_milli / 1000.0
        self.history.append((now, max(self.peak_since_tick, current)))
        self.peak_since_tick = current
        while self.history and self.history[0][0] < now - cfg.forecast_season_s - cfg.forecast_history_s:
            self.history.popleft()
        target = self.forecast(now, cfg) * (1.0 + cfg.forecast_buffer_frac)
        gpu_nodes = ctrl.spec.gpu_count > 0
        powered = (ctrl.power_state == ON) | (ctrl.power_state == BOOTING)
        gpus_on = float(ctrl.spec.gpu_count[powered & gpu_nodes].sum())
        rank = ctrl.rank
        if gpus_on < target:
            ctrl.boot(ctrl.off_nodes_in_rank_order(gpu_nodes, gpus_on, target), sim)
        else:
            idle = (ctrl.power_state == ON) & gpu_nodes & (sim.state.jobs_on_node == 0)
            idle &= now - ctrl.idle_since >= cfg.forecast_interval_s
            cand = [n for n in np.flatnonzero(idle).tolist() if not ctrl.wanted_by_waiting_work(sim, n)]
            cand = np.asarray(cand, dtype=np.int64)
            downs = []
            for node in cand[np.argsort(-rank[cand])].tolist():
                if gpus_on - float(ctrl.spec.gpu_count[node]) < target:
                    continue
                downs.append(node)
                gpus_on -= float(ctrl.spec.gpu_count[node])
            ctrl.shutdown(downs, sim)
        sim.schedule(now + cfg.forecast_interval_s, lambda s: self._tick(ctrl, s))


class NodePowerController(Observer):
    """Executes power decisions in the simulator: timers, `available` mask, counters, accountant updates."""

    def __init__(self, manager: PowerManager, config: PowerStateConfig):
        self.manager = manager
        self.config = config
        # (time, node, new state, old state): the one record of power states; counters below derive from it.
        self.transitions: list[tuple[float, int, int, int]] = []
        self.counts = [0, 0, 0, 0]  # live nodes per state, needed at every event
        self.end_time = 0.0
        self._last_plan_queue = 0
        self._last_plan_counts: tuple = ()

    def on_start(self, sim: Simulator) -> None:
        self.spec = sim.spec
        n = sim.spec.num_nodes
        self.power_state = np.full(n, ON, dtype=np.int8)
        self.idle_since = np.full(n, sim.now)
        self.counts = [n, 0, 0, 0]
        self._booting_gpus = 0.0
        self._power_epoch = 0
        self._head_checked: tuple[int, int] = (-1, -1)
        self._demand_gpus = sim.jobs.num_gpu * sim.jobs.gpu_milli / 1000.0
        self.rank = sim.placement.rank
        self.manager.on_start(self, sim)

    # --- observer hooks ---------------------------------------------------------------------------------------
    def on_finish(self, sim: Simulator) -> None:
        self.end_time = sim.now

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

    def on_job_start(self, sim: Simulator, job: int) -> None:
        for node, *_ in sim.placements[job]:
            self.idle_since[node] = math.inf
        self.manager.on_job_start(self, sim, job)

    def on_job_end(self, sim: Simulator, job: int) -> None:
        jobs_on_node = sim.state.jobs_on_node
        for node, *_ in sim.placements[job]:
            if jobs_on_node[node] == 0:
                self.idle_since[node] = sim.now
                self.manager.on_node_idle(self, sim, node)

    def on_batch_end(self, sim: Simulator) -> None:
        if sim.check:
            self.check_invariants(sim)
        queued = sim.queue_length
        if queued and self.counts[OFF]:
            # Re-plan only when work arrived or power states changed: freed capacity or started jobs never
            # call for more boots.
            counts = tuple(self.counts)
            if queued > self._last_plan_queue or counts != self._last_plan_counts:
                self.manager.on_blocked(self, sim)
                self._last_plan_counts = tuple(self.counts)
        # Tracked on every batch: a queue that drained and refills must count as new work.
        self._last_plan_queue = queued

    # --- mechanism ----------------------------------------------------------------------------------------------
    def _set(self, node: int, new_state: int, sim: Simulator) -> None:
        old_state = int(self.power_state[node])
        gpus = float(self.spec.gpu_count[node])
        self._booting_gpus += (new_state == BOOTING) * gpus - (old_state == BOOTING) * gpus
        self._power_epoch += 1
        self.counts[old_state] -= 1
        self.counts[new_state] += 1
        self.power_state[node] = new_state
        self.transitions.append((sim.now, node, new_state, old_state))

    def shutdown(self, nodes, sim: Simulator) -> None:
        nodes = [n for n in nodes if self.power_state[n] == ON and sim.state.jobs_on_node[n] == 0]
        if not nodes:
            return
        sim.state.set_available(np.asarray(nodes), False)
        for node in nodes:
            self._set(node, SHUTTING_DOWN, sim)
            self.idle_since[node] = math.inf

        def done(s: Simulator) -> None:
            for node in nodes:
                self._set(node, OFF, s)

        sim.schedule(sim.now + self.config.shutdown_time_s, done)

    def boot(self, nodes, sim: Simulator) -> None:
        nodes = [n for n in nodes if self.power_state[n] == OFF]
        if not nodes:
            return
        for node in nodes:
            self._set(node, BOOTING, sim)

        def done(s: Simulator) -> None:
            s.state.set_available(np.asarray(nodes), True)
            for node in nodes:
                self._set(node, ON, s)
                self.idle_since[node] = s.now
                self.manager.on_node_idle(self, s, node)
            s.mark_released()

        sim.schedule(sim.now + self.config.boot_time_s, done)

    def wanted_by_waiting_work(self, sim: Simulator, node: int) -> bool:
        """Whether one of the first pending jobs could run on `node` (ignoring what else it needs)."""
        if not sim.queue_length:
            return False
        at = [node]
        for job in islice(sim.pending(), BOOT_LOOKAHEAD_JOBS):
            req = sim.book.request(job)
            if req.gang and req.node_mask[node]:
                return True  # any eligible GPU node can hold part of a gang
            if empty_node_hosts(self.spec, req.node_mask, *_shape(req), nodes=at)[0]:
                return True
        return False

    def plan_boots(self, sim: Simulator) -> list[int]:
        """Off nodes to boot so that the waiting work can run: first the head job (if no booting node could host
        it), then enough GPUs for the first pending jobs' total demand. Ties in rank order."""
        pending = list(islice(sim.pending(), BOOT_LOOKAHEAD_JOBS))
        if not pending:
            return []
        head = pending[0]
        boots: list[int] = []
        # The head's check only changes when the head or the power states change; most calls skip it.
        if (head, self._power_epoch) != self._head_checked:
            boots = self._boots_for_head(sim, head)
            self._head_checked = (head, self._power_epoch)
        state = sim.state
        demand = float(self._demand_gpus[pending].sum())
        supply = float(state.free_gpus[state.available].sum()) + self._booting_gpus
        supply += float(self.spec.gpu_count[boots].sum()) if boots else 0.0
        if demand > supply:
            boots += self.off_nodes_in_rank_order(self.spec.gpu_count > 0, supply, demand, skip=set(boots))
        return boots

    def off_nodes_in_rank_order(
        self, mask: np.ndarray, have: float, need: float, skip=frozenset(), capacity: np.ndarray | None = None
    ) -> list[int]:
        """Off nodes within `mask`, in rank order, until their `capacity` (default: GPUs) brings `have` to
        `need`."""
        capacity = self.spec.gpu_count if capacity is None else capacity
        cand = np.flatnonzero((self.power_state == OFF) & mask)
        chosen = []
        for node in cand[np.argsort(self.rank[cand])].tolist():
            if have >= need:
                break
            if node not in skip:
                chosen.append(node)
                have += float(capacity[node])
        return chosen

    def _boots_for_head(self, sim: Simulator, job: int) -> list[int]:
        spec, state = self.spec, sim.state
        booting = self.power_state == BOOTING
        head = sim.book.request(job)
        if head.gang:
            # Count only the GPUs the gang can use on each node, given its CPU and memory per GPU.
            shape = (head.num_gpu, head.cpu_milli, head.memory_mib)
            usable_now = gang_gpus(state.free_gpus, state.cpu_left, state.mem_left, *shape)
            usable_empty = gang_gpus(spec.gpu_count, spec.cpu_milli, spec.memory_mib, *shape)
            have = float(usable_now[state.available & head.node_mask].sum())
            have += float(usable_empty[booting & head.node_mask].sum())
            return self.off_nodes_in_rank_order(head.node_mask, have, head.num_gpu, capacity=usable_empty)
        hosts = empty_node_hosts(spec, head.node_mask, *_shape(head))
        if (hosts & booting).any():
            return []
        cand = np.flatnonzero(hosts & (self.power_state == OFF))
        return [int(cand[np.argmin(self.rank[cand])])] if cand.size else []

    def check_invariants(self, sim: Simulator) -> None:
        """No work on a node that is not on, and only nodes that are on are available to placement."""
        not_on = self.power_state != ON
        if (sim.state.jobs_on_node[not_on] > 0).any():
            raise AssertionError("a job runs on a node that is off, booting or shutting down")
        if (sim.state.available != ~not_on).any():
            raise AssertionError("placement availability out of sync with node power states")
        if sum(self.counts) != self.spec.num_nodes or self.counts[OFF] != int(
            (self.power_state == OFF).sum()
        ):
            raise AssertionError("power-state counters out of sync")

    def summary(self) -> dict:
        return {
            "power_manager": self.manager.name,
            "node_boots": self.boots,
            "node_shutdowns": self.shutdowns,
            "node_hours_off": self.node_seconds_off / 3600.0,
        }
