"""Power managers: which nodes to switch on or off (dynamic right-sizing). Policies on the common contract.

A manager reads the view (node power states, idle times, the waiting queue) and acts with
``actions.power_on/power_off/wake_at``; the backend carries out the transitions (docs/energy.md). Registered
by name: `always-on`, `idle-timeout`, `forecast`.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from itertools import islice

import numpy as np

from ..core.capacity import empty_node_hosts, gang_gpus
from ..core.states import BOOTING, OFF, ON
from .contract import POWER_MANAGERS, Actions, ClusterView, PowerManager, powered_free_gpus

BOOT_LOOKAHEAD_JOBS = 64  # pending jobs considered when sizing boots


def _shape(req) -> tuple[int, int, int, int]:
    """A request's (GPUs, milli per GPU, milli-CPU, MiB), the arguments of `empty_node_hosts`."""
    return req.num_gpu, req.gpu_milli, req.cpu_milli, req.memory_mib


def off_nodes_in_rank_order(
    view: ClusterView, mask: np.ndarray, have: float, need: float, skip=frozenset(), capacity=None
) -> list[int]:
    """Off nodes within `mask`, in rank order, until their `capacity` (default: GPUs) brings `have` to `need`."""
    capacity = view.spec.gpu_count if capacity is None else capacity
    cand = np.flatnonzero((view.power_state == OFF) & mask)
    chosen = []
    for node in cand[np.argsort(view.node_rank[cand])].tolist():
        if have >= need:
            break
        if node not in skip:
            chosen.append(node)
            have += float(capacity[node])
    return chosen


def wanted_by_waiting_work(view: ClusterView, node: int) -> bool:
    """Whether one of the first pending jobs could run on `node` (ignoring what else it needs)."""
    if not view.queue_length:
        return False
    at = [node]
    for job in islice(view.pending(), BOOT_LOOKAHEAD_JOBS):
        req = view.request(job)
        if req.gang and req.node_mask[node]:
            return True  # any eligible GPU node can hold part of a gang
        if empty_node_hosts(view.spec, req.node_mask, *_shape(req), nodes=at)[0]:
            return True
    return False


class BootPlanner:
    """Off nodes to boot so that the waiting work can run: first the head job (if no booting node could host it),
    then enough GPUs for the first pending jobs' total demand. Ties in rank order."""

    def __init__(self) -> None:
        self._head_checked: tuple[int, int] = (-1, -1)
        self._demand_gpus: np.ndarray | None = None

    def plan(self, view: ClusterView) -> list[int]:
        if self._demand_gpus is None:
            self._demand_gpus = view.jobs.num_gpu * view.jobs.gpu_milli / 1000.0
        pending = list(islice(view.pending(), BOOT_LOOKAHEAD_JOBS))
        if not pending:
            return []
        head = pending[0]
        boots: list[int] = []
        # The head's check only changes when the head or the power states change; most calls skip it.
        if (head, view.power_epoch) != self._head_checked:
            boots = self._boots_for_head(view, head)
            self._head_checked = (head, view.power_epoch)
        spec = view.spec
        demand = float(self._demand_gpus[pending].sum())
        supply = powered_free_gpus(view)
        supply += float(spec.gpu_count[boots].sum()) if boots else 0.0
        if demand > supply:
            boots += off_nodes_in_rank_order(view, spec.gpu_count > 0, supply, demand, skip=set(boots))
        return boots

    @staticmethod
    def _boots_for_head(view: ClusterView, job: int) -> list[int]:
        spec, state = view.spec, view.state
        booting = view.power_state == BOOTING
        head = view.request(job)
        if head.gang:
            # Count only the GPUs the gang can use on each node, given its CPU and memory per GPU.
            shape = (head.num_gpu, head.cpu_milli, head.memory_mib)
            usable_now = gang_gpus(state.free_gpus, state.cpu_left, state.mem_left, *shape)
            usable_empty = gang_gpus(spec.gpu_count, spec.cpu_milli, spec.memory_mib, *shape)
            have = float(usable_now[state.available & head.node_mask].sum())
            have += float(usable_empty[booting & head.node_mask].sum())
            return off_nodes_in_rank_order(view, head.node_mask, have, head.num_gpu, capacity=usable_empty)
        hosts = empty_node_hosts(spec, head.node_mask, *_shape(head))
        if (hosts & booting).any():
            return []
        cand = np.flatnonzero(hosts & (view.power_state == OFF))
        return [int(cand[np.argmin(view.node_rank[cand])])] if cand.size else []


class _BootsOnDemand(PowerManager):
    """Boots what the waiting work needs whenever jobs wait and nodes are off."""

    def __init__(self) -> None:
        self.planner = BootPlanner()

    def on_blocked(self, view: ClusterView, actions: Actions) -> None:
        actions.power_on(self.planner.plan(view))

    def on_headroom_short(self, view: ClusterView, actions: Actions) -> None:
        actions.power_on(
            off_nodes_in_rank_order(
                view, view.spec.gpu_count > 0, powered_free_gpus(view), view.keep_free_gpus
            )
        )


def keeping_headroom(view: ClusterView, nodes: list[int]) -> tuple[list[int], list[int]]:
    """Split idle nodes due to go off into those that may (largest rank first) and those the policy's
    ``keep_free_gpus`` headroom keeps on."""
    spare = powered_free_gpus(view) - view.keep_free_gpus
    off, kept = [], []
    for node in sorted(nodes, key=lambda n: -view.node_rank[n]):
        gpus = float(view.spec.gpu_count[node])
        if spare - gpus >= 0:
            off.append(node)
            spare -= gpus
        else:
            kept.append(node)
    return off, kept


def power_manager_from_config(name: str, config) -> PowerManager:
    """Build the named manager with its knobs from a power-state config (``engine.power.PowerStateConfig``)."""
    factory = POWER_MANAGERS.factory(name)
    return factory.from_config(config) if hasattr(factory, "from_config") else factory()


@POWER_MANAGERS.register("always-on")
class AlwaysOn(PowerManager):
    name = "always-on"
    description = "every node stays on (baseline)"
    needs = frozenset()


@POWER_MANAGERS.register("idle-timeout")
class IdleTimeout(_BootsOnDemand):
    """Dynamic right-sizing: a node idle for `idle_timeout_s` shuts down; an off node boots when waiting work
    needs it, and that work waits for the boot."""

    name = "idle-timeout"
    description = "node off after an idle timeout, booted on demand (dynamic right-sizing)"

    @classmethod
    def from_config(cls, config) -> IdleTimeout:
        return cls(config.idle_timeout_s)

    def __init__(self, idle_timeout_s: float = 600.0) -> None:
        super().__init__()
        self.timeout = float(idle_timeout_s)
        # Deadlines (time, node, idle_since) live here; the backend is woken only for the earliest valid one, so
        # the many idle periods that end before their timeout cost no event.
        self._deadlines: list[tuple[float, int, float]] = []
        self._wake_at = math.inf

    def on_start(self, view: ClusterView, actions: Actions) -> None:
        for node in range(view.spec.num_nodes):
            self.on_node_idle(view, actions, node)

    def on_node_idle(self, view: ClusterView, actions: Actions, node: int) -> None:
        since = float(view.idle_since[node])
        heapq.heappush(self._deadlines, (since + self.timeout, node, since))
        self._arm(view, actions)

    @staticmethod
    def _valid(view: ClusterView, node: int, since: float) -> bool:
        return (
            view.power_state[node] == ON
            and view.idle_since[node] == since
            and not view.state.jobs_on_node[node]
        )

    def _arm(self, view: ClusterView, actions: Actions) -> None:
        heap = self._deadlines
        while heap and not self._valid(view, heap[0][1], heap[0][2]):
            heapq.heappop(heap)
        if heap and heap[0][0] < self._wake_at:
            self._wake_at = heap[0][0]
            actions.wake_at(self._wake_at, self._expire)

    def _expire(self, view: ClusterView, actions: Actions) -> None:
        if view.now < self._wake_at:
            return  # superseded by an earlier wake-up that already ran
        self._wake_at = math.inf
        heap = self._deadlines
        due = []
        while heap and heap[0][0] <= view.now:
            _, node, since = heapq.heappop(heap)
            if not self._valid(view, node, since):
                continue
            if wanted_by_waiting_work(view, node):
                # Waiting work may need it soon (e.g. the other half of a gang): check again later.
                heapq.heappush(heap, (view.now + self.timeout, node, since))
            else:
                due.append(node)
        if view.keep_free_gpus > 0:
            due, kept = keeping_headroom(view, due)
            for node in kept:  # headroom the allocation policy asked for: check again later
                heapq.heappush(heap, (view.now + self.timeout, node, float(view.idle_since[node])))
        actions.power_off(due)
        self._arm(view, actions)


@POWER_MANAGERS.register("forecast")
class ForecastBuffer(_BootsOnDemand):
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

    @classmethod
    def from_config(cls, config) -> ForecastBuffer:
        return cls(
            config.forecast_interval_s,
            config.forecast_history_s,
            config.forecast_season_s,
            config.forecast_buffer_frac,
        )

    def __init__(
        self,
        interval_s: float = 600.0,
        history_s: float = 3600.0,
        season_s: float = 86400.0,
        buffer_frac: float = 0.2,
    ) -> None:
        super().__init__()
        self.interval_s, self.history_s, self.season_s, self.buffer_frac = (
            interval_s,
            history_s,
            season_s,
            buffer_frac,
        )
        self.history: deque[tuple[float, float]] = deque()
        self.peak_since_tick = 0.0

    def on_start(self, view: ClusterView, actions: Actions) -> None:
        actions.wake_at(view.now, self._tick)

    def on_job_start(self, view: ClusterView, actions: Actions, job: int) -> None:
        self.peak_since_tick = max(self.peak_since_tick, view.state.allocated_milli / 1000.0)

    def forecast(self, now: float) -> float:
        recent = [v for t, v in self.history if t >= now - self.history_s]
        lag0, lag1 = now - self.season_s, now - self.season_s + self.interval_s
        seasonal = [v for t, v in self.history if lag0 <= t <= lag1]
        return max(recent + seasonal + [0.0])

    def _tick(self, view: ClusterView, actions: Actions) -> None:
        now = view.now
        spec = view.spec
        current = view.state.allocated_milli / 1000.0
        self.history.append((now, max(self.peak_since_tick, current)))
        self.peak_since_tick = current
        while self.history and self.history[0][0] < now - self.season_s - self.history_s:
            self.history.popleft()
        target = self.forecast(now) * (1.0 + self.buffer_frac)
        gpu_nodes = spec.gpu_count > 0
        powered = (view.power_state == ON) | (view.power_state == BOOTING)
        gpus_on = float(spec.gpu_count[powered & gpu_nodes].sum())
        rank = view.node_rank
        if gpus_on < target:
            actions.power_on(off_nodes_in_rank_order(view, gpu_nodes, gpus_on, target))
        else:
            idle = (view.power_state == ON) & gpu_nodes & (view.state.jobs_on_node == 0)
            idle &= now - view.idle_since >= self.interval_s
            cand = [n for n in np.flatnonzero(idle).tolist() if not wanted_by_waiting_work(view, n)]
            if view.keep_free_gpus > 0:
                cand = keeping_headroom(view, cand)[0]
            order = np.asarray(cand, dtype=np.int64)
            downs = []
            for node in order[np.argsort(-rank[order])].tolist():
                if gpus_on - float(spec.gpu_count[node]) < target:
                    continue
                downs.append(node)
                gpus_on -= float(spec.gpu_count[node])
            actions.power_off(downs)
        actions.wake_at(now + self.interval_s, self._tick)
