"""GPU readings over a measurement window: NVML sampled in a thread, energy from NVML's counter where present.

``NvmlSampler.window()`` reads the GPU every ``interval_s`` (50 ms by default, as the h200-colocation-probe
dataset) while its block runs: power, utilisation (GPU and memory), SM clock, memory used. The window's energy is
the difference of ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded; Volta and newer) over the
window when the GPU has the counter (``energy_source`` "nvml-counter"); otherwise the samples' power integrated
over time ("sampled"), each sample's power held until the next one and the first back to the window's start.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..agent.nvml import GpuDevice

ENERGY_COUNTER = "nvml-counter"
ENERGY_SAMPLED = "sampled"


@dataclass(frozen=True)
class Sample:
    t: float  # seconds on the sampler's clock
    power_w: float | None
    util_gpu_pct: float | None
    util_mem_pct: float | None
    sm_mhz: float | None
    memory_used_gib: float | None


@dataclass(frozen=True)
class WindowReading:
    seconds: float
    energy_j: float
    energy_source: str  # ENERGY_COUNTER or ENERGY_SAMPLED
    power_mean_w: float
    power_max_w: float
    util_gpu_mean_pct: float
    util_mem_mean_pct: float
    sm_mhz_mean: float
    memory_used_max_gib: float
    samples: int


@dataclass
class _Window:
    reading: WindowReading | None = None
    samples: list[Sample] = field(default_factory=list)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


class NvmlSampler:
    """Samples one GPU; the NVML device and the clock are injectable (tests use the fake NVML)."""

    def __init__(
        self, device: GpuDevice, interval_s: float = 0.05, clock: Callable[[], float] = time.monotonic
    ):
        if not interval_s > 0:
            raise ValueError(f"sampling interval must be > 0 s, got {interval_s}")
        self.device = device
        self.interval_s = interval_s
        self.clock = clock

    def sample(self) -> Sample:
        reading = self.device.read()
        return Sample(
            t=self.clock(),
            power_w=reading.power_w,
            util_gpu_pct=reading.gpu_util_pct,
            util_mem_pct=reading.mem_copy_util_pct,
            sm_mhz=reading.sm_clock_mhz,
            memory_used_gib=None if reading.fb_used_mib is None else reading.fb_used_mib / 1024,
        )

    @contextlib.contextmanager
    def window(self) -> Iterator[_Window]:
        """Sample while the block runs; afterwards ``.reading`` holds the window's :class:`WindowReading`."""
        out = _Window()
        stop = threading.Event()
        failure: list[BaseException] = []

        def loop() -> None:
            try:
                while True:
                    out.samples.append(self.sample())
                    if stop.wait(self.interval_s):
                        return
            except BaseException as exc:  # reported by the caller's thread after the window
                failure.append(exc)

        start_mj = self.device.energy_mj()
        start = self.clock()
        thread = threading.Thread(target=loop, name="wattsched-nvml-sampler", daemon=True)
        thread.start()
        try:
            yield out
        finally:
            stop.set()
            thread.join()
        end = self.clock()
        end_mj = self.device.energy_mj() if start_mj is not None else None
        if failure:
            raise failure[0]
        out.reading = summarise(out.samples, start, end, start_mj, end_mj)


def summarise(
    samples: list[Sample], start: float, end: float, start_mj: int | None, end_mj: int | None
) -> WindowReading:
    """One window's figures from its samples and, where both ends were read, the energy counter."""
    seconds = max(end - start, 0.0)
    powers = [s.power_w for s in samples if s.power_w is not None]
    if start_mj is not None and end_mj is not None and end_mj >= start_mj:
        energy_j, source = (end_mj - start_mj) / 1000, ENERGY_COUNTER
    else:
        energy_j, source = integrate_power(samples, start, end), ENERGY_SAMPLED
    power_mean = _mean(powers)
    if not powers and seconds > 0:  # too short for a sample: the counter's mean is the best left
        power_mean = energy_j / seconds
    memory = [s.memory_used_gib for s in samples if s.memory_used_gib is not None]
    return WindowReading(
        seconds=seconds,
        energy_j=energy_j,
        energy_source=source,
        power_mean_w=power_mean,
        power_max_w=max(powers) if powers else power_mean,
        util_gpu_mean_pct=_mean([s.util_gpu_pct for s in samples if s.util_gpu_pct is not None]),
        util_mem_mean_pct=_mean([s.util_mem_pct for s in samples if s.util_mem_pct is not None]),
        sm_mhz_mean=_mean([s.sm_mhz for s in samples if s.sm_mhz is not None]),
        memory_used_max_gib=max(memory) if memory else float("nan"),
        samples=len(samples),
    )


def integrate_power(samples: list[Sample], start: float, end: float) -> float:
    """Joules from power samples over [start, end]: each sample's power holds until the next sample, the first
    one's also from `start`, the last one's until `end`."""
    points = [(s.t, s.power_w) for s in samples if s.power_w is not None]
    if not points:
        return float("nan")
    energy = 0.0
    for (t, power), (t_next, _) in zip(points, [*points[1:], (end, None)], strict=True):
        energy += power * max(min(t_next, end) - max(t, start), 0.0)
    first_t, first_power = points[0]
    energy += first_power * max(min(first_t, end) - start, 0.0)
    return energy
