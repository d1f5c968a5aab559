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
        self._energy = [0.0] * len(COMPONENTS)
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
        self.rows = [[0.0] * 5 for _ in range(n)]  # gpu_active, gpu_idle, cpu, base, transition
        self.totals = [0.0] * 5
        self._milli = sim.jobs.gpu_milli.tolist()
        self._load = np.asarray(self.job_load, dtype=np.float64).tolist()
        for node in range(n):
            self._refresh(sim, node)

    def _refresh(self, sim: Simulator, node: int) -> None:
        ctrl = self.controller
        power_state = ON if ctrl is None else ctrl.power_state[node]
        if power_state == ON:
            busy, idle, cpu = self.model.node_watts(sim.state, self.gpu_load, node)
            row = [busy, idle, cpu, self.node_base_w, 0.0]
        elif power_state == OFF:
            row = [0.0, 0.0, 0.0, 0.0, self.off_power_w]
        else:  # booting or shutting down: the node's idle draw, booked as a transition
            w = self.model.idle_watts(node)
            row = [0.0, 0.0, 0.0, 0.0, w.gpu_idle + w.cpu + self.node_base_w]
        old = self.rows[node]
        self.rows[node] = row
        t = self.totals
        t[0] += row[0] - old[0]
        t[1] += row[1] - old[1]
        t[2] += row[2] - old[2]
        t[3] += row[3] - old[3]
        t[4] += row[4] - old[4]

    def node_changed(self, sim: Simulator, node: int) -> None:
        self._refresh(sim, node)

    def _apply_job(self, sim: Simulator, job: int, sign: int) -> None:
        """Update power for a job that just started (sign +1) or ended (-1): only its CPU and its GPUs change,
        so the update is a delta per touched GPU rather than a whole-node recompute."""
        model = self.model
        state = sim.state
        totals = self.totals
        milli = self._milli[job]
        load = self._load[job] * (self.power_scale[job] if self.power_scale is not None else 1.0)
        for node, gpus, _, _ in sim.placements[job]:
            row = self.rows[node]
            cpu = model.cpu_watts(int(state.cpu_left[node]), node)
            totals[2] += cpu - row[2]
            row[2] = cpu
            if not gpus:
                continue
            left_row = state.gpu_left[node]
            loads = self.gpu_load[node]
            d_busy = d_idle = 0.0
            for g in gpus:
                left_after = int(left_row[g])
                load_before = loads[g]
                load_after = load_before + load if sign > 0 else max(load_before - load, 0.0)
                loads[g] = load_after
                b0, i0 = model.gpu_watts(left_after + sign * milli, load_before, node)
                b1, i1 = model.gpu_watts(left_after, load_after, node)
                d_busy += b1 - b0
                d_idle += i1 - i0
            row[0] += d_busy
            row[1] += d_idle
            totals[0] += d_busy
            totals[1] += d_idle

    def on_job_start(self, sim: Simulator, job: int) -> None:
        self._apply_job(sim, job, 1)

    def on_job_end(self, sim: Simulator, job: int) -> None:
        self._apply_job(sim, job, -1)

    # --- integration ----------------------------------------------------------------------------------------
    @property
    def it_power_w(self) -> float:
        return sum(self.totals)

    def on_interval(self, sim: Simulator, t0: float, t1: float) -> None:
        dt = t1 - t0
        t = self.totals
        e = self._energy
        e[0] += t[0] * dt
        e[1] += t[1] * dt
        e[2] += t[2] * dt
        e[3] += t[3] * dt
        e[4] += t[4] * dt
        it = t[0] + t[1] + t[2] + t[3] + t[4]
        e[5] += (self.pue - 1.0) * it * dt
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
    @property
    def energy_j(self) -> dict[str, float]:
        return dict(zip(COMPONENTS, self._energy, strict=True))

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
