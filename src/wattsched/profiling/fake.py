"""Simulated jobs on the fake NVML: ``wattsched profile --nvml fake``, and the profiler's tests without a GPU.

A job alone runs at ``speed_it_per_s`` (by default 25,600 / batch, i.e. 100 it/s at batch 256); a set of N
time-slices the GPU, so each member runs at 1/N of its speed alone. While a window runs the fake GPU's
utilisation is that of the busiest member (90 % by default), and with it its power; jobs that are started but
idle keep it at 2 % (their contexts), a GPU before any job at 0 %. Windows take real time (``sleep``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..agent.fake_nvml import FakeNvml
from .jobs import JobSpec, ProfileError
from .runner import JobWindow

HELD_UTIL_PCT = 2


@dataclass
class SimulatedJobRunner:
    nvml: FakeNvml
    device_index: int = 0
    speed_it_per_s: dict[str, float] = field(default_factory=dict)  # by job label; default 25,600 / batch
    util_pct: dict[str, int] = field(default_factory=dict)  # by job label; default 90
    reports_steps: bool = True  # False: like a plain --command that prints no steps
    sleep: Callable[[float], None] = time.sleep
    on_run: Callable[[Sequence[int]], None] | None = None  # a test's hook, called as each window starts
    holds_contexts: bool = True
    jobs: list[JobSpec] = field(default_factory=list)
    log: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)  # (phase, members), for tests
    closed: int = 0

    def __post_init__(self) -> None:
        if self.device_index < len(self.nvml.gpus):  # else the profiler reports the missing GPU
            self.nvml.set_load(self.device_index, 0)

    def start(self, jobs: Sequence[JobSpec]) -> None:
        self.jobs = list(jobs)
        self.log.append(("start", tuple(range(len(jobs)))))
        self.nvml.set_load(self.device_index, HELD_UTIL_PCT)

    def prepare(self, members: Sequence[int]) -> None:
        self.log.append(("prepare", tuple(members)))

    def run(self, members: Sequence[int], seconds: float) -> list[JobWindow]:
        if not self.jobs:
            raise ProfileError("run before start")
        self.log.append(("run", tuple(members)))
        if self.on_run:
            self.on_run(members)
        labels = [self.jobs[i].name for i in members]
        self.nvml.set_load(self.device_index, max(self.util_pct.get(label, 90) for label in labels))
        started = time.monotonic()
        try:
            self.sleep(seconds)
        finally:
            self.nvml.set_load(self.device_index, HELD_UTIL_PCT)
        elapsed = time.monotonic() - started
        results = []
        for index, label in zip(members, labels, strict=True):
            alone = self.speed_it_per_s.get(label, 25_600 / max(self.jobs[index].batch, 1))
            steps = round(alone / len(members) * elapsed) if self.reports_steps else None
            results.append(
                JobWindow(iters=steps, seconds=elapsed, peak_mem_gib=0.5 + 0.01 * self.jobs[index].batch)
            )
        return results

    def finish(self, members: Sequence[int]) -> None:
        self.log.append(("finish", tuple(members)))

    def close(self) -> None:
        self.closed += 1
        if self.device_index < len(self.nvml.gpus):
            self.nvml.set_load(self.device_index, 0)
