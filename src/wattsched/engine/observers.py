"""Observer hooks: how recorders and the energy layer follow a run without touching the engine loop.

Between two consecutive events nothing changes, so an observer can integrate any piecewise-constant quantity
(allocated GPUs, power, cost) exactly over ``[t0, t1]`` in :meth:`Observer.on_interval`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .temporal import Simulator


class Observer:
    """Base observer; every hook is optional."""

    def on_start(self, sim: Simulator) -> None:
        """Called once before the first event."""

    def on_interval(self, sim: Simulator, t0: float, t1: float) -> None:
        """State was constant on [t0, t1); called before the events at t1 are applied."""

    def on_job_start(self, sim: Simulator, job: int) -> None: ...

    def on_job_end(self, sim: Simulator, job: int) -> None: ...

    def on_batch_end(self, sim: Simulator) -> None:
        """All events at ``sim.now`` and the scheduling pass after them are done."""

    def on_finish(self, sim: Simulator) -> None:
        """Called once after the last event."""
