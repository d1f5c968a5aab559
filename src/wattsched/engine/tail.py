"""A run's power after its own last completion, and its energy, cost and carbon over a longer window.

The ledger integrates a run up to its own last completion. To compare runs over one window (docs/energy.md,
"Accounting window"), each run's draw beyond that end is needed: the simulator lets the power manager's pending
timers play out with no jobs (``Simulator.run``), and the ledger turns the resulting node power states into a
piecewise-constant step function (:class:`PowerTail`): ``power_w[k]`` holds from ``t_s[k]`` to ``t_s[k + 1]``,
and the last value holds for ever after. With no jobs left a node draws only by its power state: on, its idle
GPUs, idle CPUs and base; booting or shutting down, its idle power and base; off, ``off_power_w``.

``PowerTail.over(T, price, carbon)`` extends the run's own-window figures to ``[start_s, T]`` for any
``T >= end_s``, integrating cost and carbon with the same signal integrals as the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import WattschedError

if TYPE_CHECKING:
    from ..energy.signals.alignment import AlignedSignal

J_PER_KWH = 3.6e6
# Components a node draws with no jobs (pre-PUE), in ``ledger.COMPONENTS``' order; with no job nothing computes or
# is held, so gpu_active and gpu_held stay at their own-window figures.
TAIL_COMPONENTS = ("gpu_idle", "cpu", "node_base", "power_transitions")


@dataclass
class PowerTail:
    """Own-window totals of a run plus its power step function from its own end onward."""

    start_s: float  # own window start: the first submission
    end_s: float  # own window end: the last completion
    energy_kwh: float  # own window, as the ledger reports it
    energy_by_component_kwh: dict[str, float]  # own window
    cost_usd: float | None  # own window (None: no price signal)
    co2_kg: float | None  # own window (None: no carbon signal)
    pue: float
    t_s: np.ndarray  # step starts, t_s[0] == end_s, strictly increasing
    component_w: dict[str, np.ndarray]  # pre-PUE watts per TAIL_COMPONENTS entry, aligned with t_s
    drained_to_s: float  # how far the power manager's timers were played out
    settled: bool  # True: no power-manager timer was left, so the last step is exact for ever
    notes: list[str] = field(default_factory=list)

    @property
    def power_w(self) -> np.ndarray:
        """Total draw of each step, facility overhead (PUE) included."""
        return sum(self.component_w.values(), np.zeros(len(self.t_s))) * self.pue

    def _segments(self, end: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(step index, t0, t1) of every step's part inside [end_s, end]."""
        t0 = self.t_s
        t1 = np.r_[self.t_s[1:], np.inf]
        inside = t0 < end
        k = np.flatnonzero(inside)
        return k, t0[k], np.minimum(t1[k], end)

    def energy_kwh_to(self, end: float) -> float:
        """Energy (kWh) from the first submission to `end`, or to the run's own end if that is later."""
        return float(self.over(max(end, self.end_s))["energy_kwh"])

    def over(
        self, end: float, price: AlignedSignal | None = None, carbon: AlignedSignal | None = None
    ) -> dict[str, Any]:
        """Energy (kWh, per component), cost (USD), carbon (kg) and mean power (kW) over [start_s, end].

        `price`/`carbon` are the run's aligned signals (``energy.signals.AlignedSignal``); cost or carbon is
        None where the run has none. ``end == end_s`` gives the own-window figures exactly."""
        if not end >= self.end_s:
            raise WattschedError(
                f"a window must end at or after the run's own end ({self.end_s:.0f} s), got {end:.0f} s"
            )
        k, t0, t1 = self._segments(end)
        dt = t1 - t0
        by = dict(self.energy_by_component_kwh)
        extra_j = 0.0
        for name in TAIL_COMPONENTS:
            j = float(self.component_w[name][k] @ dt)
            by[name] = by.get(name, 0.0) + j / J_PER_KWH
            extra_j += j
        by["facility_overhead"] = by.get("facility_overhead", 0.0) + (self.pue - 1.0) * extra_j / J_PER_KWH
        kwh = self.energy_kwh + self.pue * extra_j / J_PER_KWH
        w = self.power_w[k]
        # Without a tail inside the window the own figures stand; with one, a missing signal leaves it unknown.
        cost, co2 = (self.cost_usd, self.co2_kg) if not k.size else (None, None)
        if k.size and self.cost_usd is not None and price is not None:
            cost = self.cost_usd + float(np.sum(price.cost_usd(w, t0, t1)))
        if k.size and self.co2_kg is not None and carbon is not None:
            co2 = self.co2_kg + float(np.sum(carbon.co2_kg(w, t0, t1)))
        span = end - self.start_s
        return {
            "start_s": self.start_s,
            "end_s": float(end),
            "energy_kwh": kwh,
            "energy_by_component_kwh": by,
            "cost_usd": cost,
            "co2_kg": co2,
            "avg_power_kw": kwh * J_PER_KWH / span / 1000.0 if span > 0 else 0.0,
            "tail_s": float(end - self.end_s),
        }

    # --- summary.json -------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The ``tail_power`` block of summary.json: enough to extend the run from its directory alone."""
        return {
            "start_s": self.start_s,
            "end_s": self.end_s,
            "t_s": self.t_s.tolist(),
            "power_w": self.power_w.tolist(),
            "component_w": {name: w.tolist() for name, w in self.component_w.items()},
            "pue": self.pue,
            "drained_to_s": self.drained_to_s,
            "settled": self.settled,
            "convention": "power_w[k] (W, PUE included) holds from t_s[k] to t_s[k+1]; the last value holds on",
        }

    @classmethod
    def from_summary(cls, summary: dict[str, Any], where: str = "summary.json") -> PowerTail:
        """Rebuild from a run's summary.json (its own-window figures and its ``tail_power`` block)."""
        block = summary.get("tail_power")
        if not isinstance(block, dict):
            raise WattschedError(
                f"{where} has no tail_power block (a run without energy accounting, or one written before "
                f"common-window accounting): rerun it to compare it over a common window"
            )
        return cls(
            start_s=float(block["start_s"]),
            end_s=float(block["end_s"]),
            energy_kwh=float(summary["energy_kwh"]),
            energy_by_component_kwh={k: float(v) for k, v in summary["energy_by_component_kwh"].items()},
            cost_usd=summary.get("cost_usd"),
            co2_kg=summary.get("co2_kg"),
            pue=float(block["pue"]),
            t_s=np.asarray(block["t_s"], dtype=np.float64),
            component_w={k: np.asarray(v, dtype=np.float64) for k, v in block["component_w"].items()},
            drained_to_s=float(block["drained_to_s"]),
            settled=bool(block["settled"]),
        )
