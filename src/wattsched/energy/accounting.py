"""Energy, cost and carbon accounting, integrated exactly between simulator events.

Power is piecewise constant between events, so ``E += P * dt`` per component is exact. Only nodes whose state
changed are re-evaluated (job start/end on the node, power-state transition), keeping the per-event cost O(1).
Cost and carbon multiply each constant-power interval by the integral of the aligned hourly price/carbon signal
over it, computed once at the end with one vectorised call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..engine.observers import Observer
from ..engine.recorder import GrowableColumns
from .power_models import PowerModel
from .power_states import BOOTING, OFF, ON, SHUTTING_DOWN, NodePowerController

if TYPE_CHECKING:
    from ..engine.temporal import Simulator

COMPONENTS = ("gpu_active", "gpu_idle", "cpu", "node_base", "power_transitions", "facility_overhead")
J_PER_KWH = 3.6e6


class EnergyAccountant(Observer):
    """Tracks per-node power by component and integrates energy; also a time-series column provider."""

    columns = ("power_w", "gpu_w", "cpu_w", "nodes_on", "nodes_off", "nodes_booting")

    def __init__(
        self,
        model: PowerModel,
        job_load: np.ndarray,
        node_base_w: float,
        pue: float = 1.0,
        controller: NodePowerController | None = None,
        off_power_w: float = 0.0,
        price=None,
        carbon=None,
        power_scale: np.ndarray | None = None,
    ):
        self.model = model
        self.job_load = job_load
        self.power_scale = power_scale
        self.node_base_w = node_base_w
        self.pue = pue
        self.controller = controller
        self.off_power_w = off_power_w
        self.price = price
        self.carbon = carbon
        self.energy_j = dict.fromkeys(COMPONENTS, 0.0)
        self.peak_w = 0.0
        self.span_s = 0.0
        self._intervals = GrowableColumns(("t0", "t1", "power_w")) if (price or carbon) else None
        if controller is not None:
            controller.listeners.append(self)

    # --- per-node bookkeeping -------------------------------------------------------------------------------
    def on_start(self, sim: Simulator) -> None:
        spec = sim.spec
        self.model.bind(spec)
        n = spec.num_nodes
        width = max(spec.max_gpus_per_node, 1)
        self.gpu_load = [[0.0] * width for _ in range(n)]
        self.rows = [(0.0, 0.0, 0.0, 0.0, 0.0)] * n  # gpu_active, gpu_idle, cpu, base, transition
        self.totals = [0.0] * 5
        for node in range(n):
            self._refresh(sim, node)

    def _refresh(self, sim: Simulator, node: int) -> None:
        state = ON if self.controller is None else int(self.controller.power_state[node])
        if state == ON:
            w = self.model.node_watts(sim.state, self.gpu_load, node)
            row = (w.gpu_busy, w.gpu_idle, w.cpu, self.node_base_w, 0.0)
        elif state == OFF:
            row = (0.0, 0.0, 0.0, 0.0, self.off_power_w)
        else:  # booting or shutting down: the node's idle draw, booked as a transition
            idle = self.model.idle_watts(node)
            row = (0.0, 0.0, 0.0, 0.0, idle.gpu_idle + idle.cpu + self.node_base_w)
        old = self.rows[node]
        self.rows[node] = row
        totals = self.totals
        for k in range(5):
            totals[k] += row[k] - old[k]

    def node_changed(self, sim: Simulator, node: int) -> None:
        self._refresh(sim, node)

    def _apply_load(self, sim: Simulator, job: int, sign: float) -> None:
        load = float(self.job_load[job])
        if self.power_scale is not None:
            load *= float(self.power_scale[job])
        for node, gpus, _, _ in sim.placements[job]:
            if self.model.uses_load:
                row = self.gpu_load[node]
                for g in gpus:
                    row[g] = max(row[g] + sign * load, 0.0)
            self._refresh(sim, node)

    def on_job_start(self, sim: Simulator, job: int) -> None:
        self._apply_load(sim, job, 1.0)

    def on_job_end(self, sim: Simulator, job: int) -> None:
        self._apply_load(sim, job, -1.0)

    # --- integration ----------------------------------------------------------------------------------------
    @property
    def it_power_w(self) -> float:
        return sum(self.totals)

    def on_interval(self, sim: Simulator, t0: float, t1: float) -> None:
        dt = t1 - t0
        t = self.totals
        e = self.energy_j
        e["gpu_active"] += t[0] * dt
        e["gpu_idle"] += t[1] * dt
        e["cpu"] += t[2] * dt
        e["node_base"] += t[3] * dt
        e["power_transitions"] += t[4] * dt
        it = t[0] + t[1] + t[2] + t[3] + t[4]
        e["facility_overhead"] += (self.pue - 1.0) * it * dt
        total = it * self.pue
        self.peak_w = max(self.peak_w, total)
        self.span_s += dt
        if self._intervals is not None:
            self._intervals.append(t0, t1, total)

    def row(self, sim: Simulator) -> tuple[float, ...]:
        t = self.totals
        counts = self.controller.counts if self.controller is not None else (sim.spec.num_nodes, 0, 0, 0)
        return (
            sum(t) * self.pue,
            t[0] + t[1],
            t[2],
            counts[ON],
            counts[OFF],
            counts[BOOTING] + counts[SHUTTING_DOWN],
        )

    # --- results --------------------------------------------------------------------------------------------
    def summary(self, allocated_gpu_seconds: float) -> dict[str, Any]:
        total_j = sum(self.energy_j.values())
        kwh = total_j / J_PER_KWH
        out: dict[str, Any] = {
            "energy_kwh": kwh,
            "energy_by_component_kwh": {k: v / J_PER_KWH for k, v in self.energy_j.items()},
            "avg_power_kw": (total_j / self.span_s / 1000.0) if self.span_s > 0 else 0.0,
            "peak_power_kw": self.peak_w / 1000.0,
            "cost_usd": None,
            "co2_kg": None,
            "energy_per_gpu_hour_kwh": kwh / (allocated_gpu_seconds / 3600.0)
            if allocated_gpu_seconds > 0
            else None,
        }
        if self._intervals is not None:
            iv = self._intervals.frame()
            t0, t1, p = (iv[c].to_numpy() for c in ("t0", "t1", "power_w"))
            if self.price is not None:
                out["cost_usd"] = float(np.sum(self.price.cost_usd(p, t0, t1)))
            if self.carbon is not None:
                out["co2_kg"] = float(np.sum(self.carbon.co2_kg(p, t0, t1)))
        return out
