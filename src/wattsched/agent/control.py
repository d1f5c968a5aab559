"""The GPU settings the agent changes and their restoration, apart from the HTTP server and its metrics.

``GpuAgent`` records a GPU's power limit before its first change and which GPUs it locked clocks on, and
``close()`` puts everything back. ``stop_signals`` turns SIGTERM and SIGINT into ``StopRequested`` so that the
restore runs on a signal too. ``wattsched agent`` (server.py) and ``wattsched profile`` (profiling/) both use
them; this module imports nothing beyond NVML's wrapper, so the profiler runs where prometheus_client is absent.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .jobmeter import JobMeter
from .nvml import AgentError, GpuDevice, GpuReading, gpu_count, init_nvml

logger = logging.getLogger("wattsched.agent.server")  # the name the agent's log lines always had

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequested(Exception):
    """SIGTERM or SIGINT arrived inside :func:`stop_signals`; the message is the signal's name."""


@contextlib.contextmanager
def stop_signals() -> Iterator[Callable[[], None]]:
    """Inside the block SIGTERM and SIGINT raise :class:`StopRequested` (in the main thread). Yields ``hold``: call
    it as the cleanup begins so that a second signal cannot interrupt the restore. The previous handlers are put
    back on leaving the block."""

    def hold() -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    def request_stop(signum: int, frame: Any) -> None:
        hold()
        raise StopRequested(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, request_stop) for sig in STOP_SIGNALS}
    try:
        yield hold
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class ChangedSettings:
    """What the agent changed on one GPU, so it can put it back."""

    original_power_limit_mw: int | None = None
    locked_clocks_mhz: tuple[int, int] | None = None


class GpuAgent:
    """The GPUs of one node, the settings the agent changed, and their restoration."""

    def __init__(self, nvml: Any, hostname: str | None = None):
        self.nvml = nvml
        self.hostname = hostname or socket.gethostname()
        init_nvml(nvml)
        self.devices = [GpuDevice(nvml, index) for index in range(gpu_count(nvml))]
        self.changed: dict[int, ChangedSettings] = {}
        self.jobs = JobMeter(self.devices, self.hostname)  # per-job windows from the job hooks (jobmeter.py)
        self._lock = threading.Lock()  # one NVML change at a time, and none after close()
        self._closed = False

    def device(self, index: int) -> GpuDevice:
        if not 0 <= index < len(self.devices):
            valid = f"GPUs 0-{len(self.devices) - 1}" if self.devices else "no GPUs"
            raise AgentError(f"no GPU {index} on {self.hostname} ({valid})", 404)
        return self.devices[index]

    # -- state -----------------------------------------------------------------------------------------------

    def gpu_state(self, index: int) -> dict[str, Any]:
        device = self.device(index)
        low, high = device.power_limit_range_w()
        changed = self.changed.get(index, ChangedSettings())
        try:
            clock_range = device.sm_clock_range_mhz()
        except AgentError:  # e.g. NOT_SUPPORTED: the state still answers, without the range
            clock_range = None
        original = changed.original_power_limit_mw
        return {
            "index": index,
            "uuid": device.uuid,
            "name": device.name,
            "power_limit_w": device.power_limit_mw() / 1000,
            "power_limit_range_w": [low, high],
            "default_power_limit_w": device.default_power_limit_w(),
            "original_power_limit_w": None if original is None else original / 1000,
            "locked_clocks_mhz": list(changed.locked_clocks_mhz) if changed.locked_clocks_mhz else None,
            "sm_clock_range_mhz": list(clock_range) if clock_range else None,
        }

    def state(self) -> dict[str, Any]:
        return {"hostname": self.hostname, "gpus": [self.gpu_state(i) for i in range(len(self.devices))]}

    def readings(self) -> Iterator[tuple[GpuDevice, GpuReading]]:
        """One reading per GPU; a GPU whose read fails is left out of this scrape (and logged)."""
        for device in self.devices:
            try:
                yield device, device.read()
            except AgentError as exc:
                logger.warning("%s", exc)

    # -- changes ---------------------------------------------------------------------------------------------

    def _change(self, index: int, action: Callable[[GpuDevice, ChangedSettings], None]) -> dict[str, Any]:
        device = self.device(index)
        with self._lock:
            if self._closed:
                raise AgentError("the agent is shutting down and has restored the GPU settings", 503)
            changed = self.changed.setdefault(index, ChangedSettings())
            action(device, changed)
        return self.gpu_state(index)

    def set_power_limit(self, index: int, watts: float) -> dict[str, Any]:
        def apply(device: GpuDevice, changed: ChangedSettings) -> None:
            original = device.power_limit_mw()
            device.set_power_limit_w(watts)
            if changed.original_power_limit_mw is None:
                changed.original_power_limit_mw = original

        return self._change(index, apply)

    def lock_clocks(self, index: int, min_mhz: int, max_mhz: int) -> dict[str, Any]:
        def apply(device: GpuDevice, changed: ChangedSettings) -> None:
            device.lock_sm_clocks(min_mhz, max_mhz)
            changed.locked_clocks_mhz = (min_mhz, max_mhz)

        return self._change(index, apply)

    def reset_power_limit(self, index: int) -> dict[str, Any]:
        def apply(device: GpuDevice, changed: ChangedSettings) -> None:
            if changed.original_power_limit_mw is not None:
                device.set_power_limit_mw(changed.original_power_limit_mw)
                changed.original_power_limit_mw = None

        return self._change(index, apply)

    def reset_clocks(self, index: int) -> dict[str, Any]:
        def apply(device: GpuDevice, changed: ChangedSettings) -> None:
            device.reset_locked_clocks()  # also clears clocks locked by someone else, e.g. a crashed agent
            changed.locked_clocks_mhz = None

        return self._change(index, apply)

    def reset(self, index: int) -> dict[str, Any]:
        self.reset_power_limit(index)
        return self.reset_clocks(index)

    def _restore_all(self) -> list[str]:
        failures = []
        for index, changed in sorted(self.changed.items()):
            device = self.devices[index]
            if changed.original_power_limit_mw is not None:
                try:
                    device.set_power_limit_mw(changed.original_power_limit_mw)
                    changed.original_power_limit_mw = None
                except AgentError as exc:
                    failures.append(str(exc))
            if changed.locked_clocks_mhz is not None:
                try:
                    device.reset_locked_clocks()
                    changed.locked_clocks_mhz = None
                except AgentError as exc:
                    failures.append(str(exc))
        return failures

    def close(self) -> list[str]:
        """Restore every changed setting, refuse further changes, shut NVML down; returns what failed."""
        with self._lock:
            if self._closed:
                return []
            self._closed = True
            failures = self._restore_all()
        self.jobs.close()
        for failure in failures:
            logger.error("could not restore: %s", failure)
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError as exc:
            logger.warning("nvmlShutdown failed: %s", exc)
        return failures
