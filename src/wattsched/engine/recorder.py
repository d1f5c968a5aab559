"""Cluster time series recorded at every event batch (a step function: values hold until the next row)."""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

import numpy as np

from .observers import Observer
from .temporal import Simulator

if TYPE_CHECKING:  # pandas only where a table is made: not on a run's start path
    import pandas as pd


class GrowableColumns:
    """Append-only float64 rows in one flat `array.array` (8 bytes a value, one C call per row)."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self._flat = array("d")
        self._adopted: np.ndarray | None = None  # rows written by the compiled loop, before those of _flat

    def append(self, *values: float) -> None:
        self._flat.extend(values)

    def adopt_rows(self, rows: np.ndarray) -> None:
        """Rows written by the compiled loop, kept without a copy; only before any row is appended."""
        if len(self._flat) or self._adopted is not None:
            raise RuntimeError("adopted rows come first")
        self._adopted = rows

    def rows(self) -> np.ndarray:
        """Every row, in append order: [rows, len(names)]."""
        flat = np.frombuffer(self._flat, dtype=np.float64).reshape(-1, len(self.names))
        if self._adopted is None:
            return flat
        return self._adopted if not len(flat) else np.concatenate([self._adopted, flat])

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        data = self.rows()
        return pd.DataFrame({name: data[:, i].copy() for i, name in enumerate(self.names)})


class TimeSeriesRecorder(Observer):
    """Records allocated GPUs, running jobs, queue length and busy nodes; integrates GPU allocation exactly."""

    COLUMNS = ("time_s", "allocated_gpus", "running_jobs", "queue_length", "nodes_in_use")

    def __init__(self) -> None:
        self.series = GrowableColumns(self.COLUMNS)
        self.allocated_gpu_seconds = 0.0
        self.first_time = 0.0
        self.last_time = 0.0

    def on_start(self, sim: Simulator) -> None:
        self.first_time = self.last_time = sim.now

    def on_interval(self, sim: Simulator, t0: float, t1: float) -> None:
        self.allocated_gpu_seconds += sim.state.allocated_milli / 1000.0 * (t1 - t0)
        self.last_time = t1

    def on_batch_end(self, sim: Simulator) -> None:
        state = sim.state
        self.series.append(
            sim.now, state.allocated_milli / 1000.0, len(sim.running), sim.queue_length, state.nodes_busy
        )

    INTEGER_COLUMNS = ("running_jobs", "queue_length", "nodes_in_use")

    def frame(self, release: bool = False) -> pd.DataFrame:
        """The series as a table; `release` frees the recorded rows afterwards (10^6 jobs: ~80 MB)."""
        import pandas as pd

        return pd.DataFrame(self.columns(release), copy=False)

    def columns(self, release: bool = False) -> dict[str, np.ndarray]:
        """The series as one array per column; `release` frees the recorded rows afterwards."""
        data = self.series.rows()
        columns = {
            name: data[:, i].astype(np.int64) if name in self.INTEGER_COLUMNS else data[:, i].copy()
            for i, name in enumerate(self.COLUMNS)
        }
        del data
        if release:
            self.series = GrowableColumns(self.COLUMNS)
        return columns
