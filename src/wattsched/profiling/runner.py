"""``wattsched profile``'s measurement: idle readings, then each set's windows, into profile CSV rows.

The order follows the h200-colocation-probe method (docs/profile.md): the GPU's bare idle draw first (no job
process yet), then the jobs start and warm up, then the draw with every job's context alive and nothing computing
(idle-held), then each set's window, ``repeats`` times; with ``--power-limits``, the same windows again under each
limit. Jobs are run by a :class:`JobRunner`; the real one (``workers.ProcessJobRunner``) starts processes, the
simulated one (``fake.SimulatedJobRunner``) drives the fake NVML, so the bookkeeping here is tested without a GPU.

Read-only unless ``power_limits_w`` is given: then the limit is set through the node agent's ``GpuAgent``, which
records the GPU's limit before its first change and puts it back on ``close()``; ``stop_signals`` makes SIGTERM
and SIGINT end the run through that same restore.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..agent.control import GpuAgent, stop_signals
from ..agent.nvml import GpuDevice, NvmlCallError
from ..perf.profiles import BARE_STATES, HELD_STATES, TRAINING
from .jobs import JobSpec, ProfileError, set_name
from .sampler import NvmlSampler, WindowReading

logger = logging.getLogger("wattsched.profile")

IDLE_BARE = BARE_STATES[-1]  # "idle-bare"
IDLE_HELD = HELD_STATES[-1]  # "idle-held"
SOURCE = "wattsched profile"


@dataclass(frozen=True)
class JobWindow:
    """What one job did in one window."""

    iters: int | None  # steps completed; None when the job does not report its steps (a plain command)
    seconds: float  # the job's own time for those steps
    peak_mem_gib: float | None = None


class JobRunner(Protocol):
    """Runs the profile's jobs. ``start`` launches and warms up every job; each window is ``prepare`` (before
    the GPU's window opens), ``run`` (inside it), ``finish`` (after it closes); ``close`` ends everything and may
    be called after any error, more than once."""

    holds_contexts: bool  # jobs stay alive between windows, so an idle-held reading is meaningful

    def start(self, jobs: Sequence[JobSpec]) -> None: ...

    def prepare(self, members: Sequence[int]) -> None: ...

    def run(self, members: Sequence[int], seconds: float) -> list[JobWindow]: ...

    def finish(self, members: Sequence[int]) -> None: ...

    def close(self) -> None: ...


def catalog_gpu(device_name: str) -> str:
    """wattsched's catalog name for an NVML device name: "NVIDIA H200" -> "H200", "NVIDIA A100-SXM4-40GB" ->
    "A100", "NVIDIA H100 PCIe" -> "H100-PCIE"; a GPU outside the catalog keeps its own name, dashed."""
    from ..core.gpus import GPU_CATALOG

    name = "-".join(device_name.upper().replace("NVIDIA", " ").replace("TESLA", " ").split())
    matches = [c for c in GPU_CATALOG if name == c.upper() or name.startswith(c.upper() + "-")]
    return max(matches, key=len) if matches else name


@dataclass
class Profiler:
    nvml: Any  # the pynvml module or a FakeNvml
    runner: JobRunner
    jobs: Sequence[JobSpec]
    sets: Sequence[tuple[int, ...]]
    device_index: int = 0
    regime: str = "gpu-bound"
    window_s: float = 10.0
    repeats: int = 1
    first_repeat: int = 0  # the repeat column's first value (--append continues a file's numbering)
    idle_s: float = 4.0
    power_limits_w: Sequence[float] = ()
    sample_interval_s: float = 0.05
    gpu_name: str | None = None  # default: from NVML's device name (catalog_gpu)
    progress: Callable[[int, int], None] | None = None
    on_window: Callable[[str], None] | None = None  # one line per finished window
    sleep: Callable[[float], None] = time.sleep

    @property
    def total_steps(self) -> int:
        """Readings the run takes: two idle readings (one if jobs cannot be held idle) and every window."""
        idle = 1 + int(self.runner.holds_contexts)
        return idle + len(self.sets) * self.repeats * (1 + len(self.power_limits_w))

    def run(self) -> list[dict[str, object]]:
        """Measure and return the profile rows (perf.profiles.PROFILE_COLUMNS + EXTRA_COLUMNS)."""
        agent = GpuAgent(self.nvml)
        failures: list[str] = []
        with stop_signals() as hold_signals:
            try:
                device = agent.device(self.device_index)
                self._check_power_limits(agent, device)
                rows = self._measure(agent, device)
            finally:
                hold_signals()  # a second Ctrl-C must not cut the restore short
                try:
                    self.runner.close()
                finally:
                    failures = agent.close()
                    for failure in failures:
                        logger.error("could not restore: %s", failure)
        if failures:
            raise ProfileError("could not restore the GPU's power limit: " + "; ".join(failures))
        return rows

    def _check_power_limits(self, agent: GpuAgent, device: GpuDevice) -> None:
        """Every limit inside the GPU's range, and the right to set one, before anything runs."""
        if not self.power_limits_w:
            return
        low, high = device.power_limit_range_w()
        for watts in self.power_limits_w:
            if not (math.isfinite(watts) and low <= watts <= high):
                raise ProfileError(
                    f"--power-limits: {watts:g} W is outside GPU {device.index} ({device.name})'s range "
                    f"{low:g}-{high:g} W"
                )
        try:  # setting the limit it already has: refused without the right, and changes nothing
            agent.set_power_limit(device.index, device.power_limit_mw() / 1000)
        except NvmlCallError as exc:
            if exc.code_name == "NVML_ERROR_NO_PERMISSION":
                raise ProfileError(
                    f"--power-limits needs the right to change GPU {device.index}'s power limit (root, or "
                    "CAP_SYS_ADMIN in a container); nothing was changed. Without --power-limits the profile only "
                    "reads the GPU."
                ) from None
            raise

    def _measure(self, agent: GpuAgent, device: GpuDevice) -> list[dict[str, object]]:
        sampler = NvmlSampler(device, self.sample_interval_s)
        gpu = self.gpu_name or catalog_gpu(device.name)
        rows: list[dict[str, object]] = []
        done = 0

        def advance(line: str) -> None:
            nonlocal done
            done += 1
            if self.progress:
                self.progress(done, self.total_steps)
            if self.on_window:
                self.on_window(line)

        if self.progress:
            self.progress(0, self.total_steps)
        rows.append(self._idle(sampler, gpu, IDLE_BARE))  # before any job process holds a context
        advance(_describe_idle(rows[-1]))
        self.runner.start(self.jobs)
        if self.runner.holds_contexts:
            rows.append(self._idle(sampler, gpu, IDLE_HELD))
            advance(_describe_idle(rows[-1]))
        for limit in (None, *self.power_limits_w):
            if limit is not None:
                agent.set_power_limit(device.index, limit)
            for repeat in range(self.first_repeat, self.first_repeat + self.repeats):
                for members in self.sets:
                    window_rows = self._window(sampler, gpu, members, repeat, limit)
                    rows.extend(window_rows)
                    advance(_describe_window(window_rows, limit))
        if self.power_limits_w:
            agent.reset_power_limit(device.index)
        return rows

    def _idle(self, sampler: NvmlSampler, gpu: str, state: str) -> dict[str, object]:
        with sampler.window() as window:
            self.sleep(self.idle_s)
        return self._gpu_columns(gpu, window.reading) | {"state": state}

    def _window(
        self, sampler: NvmlSampler, gpu: str, members: tuple[int, ...], repeat: int, limit: float | None
    ) -> list[dict[str, object]]:
        self.runner.prepare(members)
        try:
            with sampler.window() as window:
                results = self.runner.run(members, self.window_s)
        finally:
            self.runner.finish(members)
        if len(results) != len(members):
            raise ProfileError(f"the job runner reported {len(results)} jobs for a set of {len(members)}")
        shared = self._gpu_columns(gpu, window.reading)
        rows = []
        for index, result in zip(members, results, strict=True):
            job = self.jobs[index]
            speed = result.iters / result.seconds if result.iters is not None and result.seconds > 0 else None
            rows.append(shared | {
                "set": set_name(self.jobs, members), "jobs_in_set": len(members), "repeat": repeat,
                "model": job.model, "batch": job.batch, "iters": result.iters,
                "job_seconds": round(result.seconds, 4), "it_per_s": speed, "state": TRAINING,
                "power_limit_w": limit, "peak_mem_gib": result.peak_mem_gib,
            })  # fmt: skip
        return rows

    def _gpu_columns(self, gpu: str, reading: WindowReading | None) -> dict[str, object]:
        assert reading is not None  # set when the window's block ended without an error
        return {
            "gpu": gpu,
            "regime": self.regime,
            "window_s": round(reading.seconds, 4),
            "gpu_energy_j": round(reading.energy_j, 3),
            "gpu_power_mean_w": round(reading.power_mean_w, 2),
            "gpu_power_max_w": round(reading.power_max_w, 2),
            "util_gpu_mean_pct": round(reading.util_gpu_mean_pct, 2),
            "util_mem_mean_pct": round(reading.util_mem_mean_pct, 2),
            "sm_mhz_mean": round(reading.sm_mhz_mean, 1),
            "source": f"{SOURCE}; energy={reading.energy_source}",
        }


def _describe_idle(row: dict[str, object]) -> str:
    return f"{row['state']}: {row['gpu_power_mean_w']} W over {row['window_s']} s"


def _describe_window(rows: list[dict[str, object]], limit: float | None) -> str:
    speeds = ", ".join(
        f"{r['model']} {r['it_per_s']:.1f} it/s"
        if r["it_per_s"] is not None
        else f"{r['model']} (steps unknown)"
        for r in rows
    )
    cap = f" at {limit:g} W cap" if limit is not None else ""
    first = rows[0]
    return (
        f"{first['set']} (repeat {first['repeat']}){cap}: {first['gpu_power_mean_w']} W, "
        f"{first['util_gpu_mean_pct']} % util; {speeds}"
    )
