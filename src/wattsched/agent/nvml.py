"""Device layer of the node agent: one ``GpuDevice`` per GPU over the pynvml calls, units converted once here.

NVML reports power in mW, energy in mJ, clocks in MHz and memory in bytes (nvidia-ml-py's ``pynvml.py``;
docs/agent.md). The NVML library is passed in (the ``pynvml`` module, or a ``FakeNvml``), so the agent runs
without a GPU in tests. Every NVML error leaves this layer as an ``NvmlCallError`` that names the GPU, the
action and the NVML code, with the HTTP status the agent answers with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core.errors import WattschedError

NVML_KINDS = ("real", "fake")

# HTTP status for the NVML codes a caller can act on; any other code is a 500.
_STATUS_BY_NVML_ERROR = {
    "NVML_ERROR_INVALID_ARGUMENT": 400,
    "NVML_ERROR_NO_PERMISSION": 403,
    "NVML_ERROR_NOT_FOUND": 404,
    "NVML_ERROR_NOT_SUPPORTED": 501,
    "NVML_ERROR_GPU_IS_LOST": 503,
    "NVML_ERROR_UNINITIALIZED": 503,
}
_HINT_BY_NVML_ERROR = {
    "NVML_ERROR_NO_PERMISSION": "setting power limits and locked clocks needs root (CAP_SYS_ADMIN)",
    "NVML_ERROR_NOT_SUPPORTED": "this GPU or driver does not support it",
    "NVML_ERROR_LIBRARY_NOT_FOUND": "no NVIDIA driver on this machine (try --nvml fake)",
    "NVML_ERROR_DRIVER_NOT_LOADED": "the NVIDIA driver is not loaded",
}


class AgentError(WattschedError):
    """An error the agent reports to its caller as ``{"error": message}`` with ``status``."""

    def __init__(self, message: str, status: int = 500):
        super().__init__(message)
        self.status = status


class OutOfRangeError(AgentError):
    """A requested setting outside what the GPU supports."""

    def __init__(self, message: str):
        super().__init__(message, 400)


class NvmlCallError(AgentError):
    """An NVML call failed; ``code_name`` is the NVML_ERROR_* name."""

    def __init__(self, nvml: Any, exc: Exception, what: str):
        self.code = int(getattr(exc, "value", -1))
        self.code_name = nvml_error_name(nvml, self.code)
        hint = _HINT_BY_NVML_ERROR.get(self.code_name)
        message = f"{what} failed: {self.code_name} ({exc})" + (f"; {hint}" if hint else "")
        super().__init__(message, _STATUS_BY_NVML_ERROR.get(self.code_name, 500))


def nvml_error_name(nvml: Any, code: int) -> str:
    """``NVML_ERROR_NO_PERMISSION`` for 4: looked up on the library itself, so new codes name themselves."""
    for name in dir(nvml):
        if name.startswith("NVML_ERROR_") and getattr(nvml, name) == code:
            return name
    return f"NVML error {code}"


def load_nvml(kind: str) -> Any:
    """The NVML library for ``--nvml``: the real ``pynvml`` module, or a fake configured from the environment."""
    if kind == "real":
        import pynvml

        return pynvml
    if kind == "fake":
        from .fake_nvml import FakeNvml

        return FakeNvml.from_env()
    raise AgentError(f"unknown NVML kind '{kind}'; valid kinds: {', '.join(NVML_KINDS)}", 400)


def init_nvml(nvml: Any) -> None:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlCallError(nvml, exc, "NVML initialisation") from None


def gpu_count(nvml: Any) -> int:
    try:
        return int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as exc:
        raise NvmlCallError(nvml, exc, "counting GPUs") from None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class GpuReading:
    """One sample of one GPU in the units the metrics use; None where the GPU does not support the field."""

    power_w: float | None
    energy_mj: int | None  # cumulative since driver load; Volta and newer only
    gpu_util_pct: int | None
    mem_copy_util_pct: int | None
    fb_used_mib: float | None
    fb_free_mib: float | None
    fb_total_mib: float | None
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    power_limit_w: float | None
    temperature_c: int | None


class GpuDevice:
    """One GPU: identity, readings, and the two settings the scheduler changes (power limit, locked SM clocks)."""

    def __init__(self, nvml: Any, index: int):
        self.nvml = nvml
        self.index = index
        try:
            self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            raise NvmlCallError(nvml, exc, f"GPU {index}: opening the device") from None
        self.uuid = _text(self._call("reading the UUID", nvml.nvmlDeviceGetUUID))
        self.name = _text(self._call("reading the name", nvml.nvmlDeviceGetName))
        self.pci_bus_id = _text(self._call("reading the PCI info", nvml.nvmlDeviceGetPciInfo).busId)
        self._supported_sm_clocks: list[int] | None = None
        # dcgm-exporter's ``device`` label is the device node name, nvidia<minor number>
        minor = self._optional(nvml.nvmlDeviceGetMinorNumber)
        self.device_node = f"nvidia{index if minor is None else minor}"

    def _call(self, what: str, function: Any, *args: Any) -> Any:
        try:
            return function(self.handle, *args)
        except self.nvml.NVMLError as exc:
            raise NvmlCallError(self.nvml, exc, f"GPU {self.index}: {what}") from None

    def _optional(self, function: Any, *args: Any) -> Any:
        """The value, or None where the GPU does not support the query (e.g. the energy counter before Volta)."""
        try:
            return function(self.handle, *args)
        except self.nvml.NVMLError as exc:
            if nvml_error_name(self.nvml, getattr(exc, "value", -1)) == "NVML_ERROR_NOT_SUPPORTED":
                return None
            raise NvmlCallError(self.nvml, exc, f"GPU {self.index}: reading {function.__name__}") from None

    def read(self) -> GpuReading:
        nvml = self.nvml
        power_mw = self._optional(nvml.nvmlDeviceGetPowerUsage)
        limit_mw = self._optional(nvml.nvmlDeviceGetPowerManagementLimit)
        utilization = self._optional(nvml.nvmlDeviceGetUtilizationRates)
        memory = self._optional(nvml.nvmlDeviceGetMemoryInfo)
        mib = 1024**2
        return GpuReading(
            power_w=None if power_mw is None else power_mw / 1000,
            energy_mj=self._optional(nvml.nvmlDeviceGetTotalEnergyConsumption),
            gpu_util_pct=None if utilization is None else int(utilization.gpu),
            mem_copy_util_pct=None if utilization is None else int(utilization.memory),
            fb_used_mib=None if memory is None else memory.used / mib,
            fb_free_mib=None if memory is None else memory.free / mib,
            fb_total_mib=None if memory is None else memory.total / mib,
            sm_clock_mhz=self._optional(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM),
            mem_clock_mhz=self._optional(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM),
            power_limit_w=None if limit_mw is None else limit_mw / 1000,
            temperature_c=self._optional(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU),
        )

    def energy_mj(self) -> int | None:
        """NVML's total-energy counter (mJ since the driver loaded), or None on a GPU without it (before Volta)."""
        value = self._optional(self.nvml.nvmlDeviceGetTotalEnergyConsumption)
        return None if value is None else int(value)

    # -- power limit -----------------------------------------------------------------------------------------

    def power_limit_mw(self) -> int:
        return int(self._call("reading the power limit", self.nvml.nvmlDeviceGetPowerManagementLimit))

    def power_limit_range_w(self) -> tuple[float, float]:
        low, high = self._call(
            "reading the power limit range", self.nvml.nvmlDeviceGetPowerManagementLimitConstraints
        )
        return low / 1000, high / 1000

    def default_power_limit_w(self) -> float | None:
        milliwatts = self._optional(self.nvml.nvmlDeviceGetPowerManagementDefaultLimit)
        return None if milliwatts is None else milliwatts / 1000

    def set_power_limit_w(self, watts: float) -> None:
        """Refuse values outside ``nvmlDeviceGetPowerManagementLimitConstraints`` before NVML sees them."""
        low, high = self.power_limit_range_w()
        if not (math.isfinite(watts) and low <= watts <= high):
            raise OutOfRangeError(
                f"GPU {self.index} ({self.name}): power limit {watts:g} W is outside the supported range "
                f"{low:g}-{high:g} W"
            )
        self.set_power_limit_mw(round(watts * 1000))

    def set_power_limit_mw(self, milliwatts: int) -> None:
        self._call("setting the power limit", self.nvml.nvmlDeviceSetPowerManagementLimit, int(milliwatts))

    # -- locked SM clocks ------------------------------------------------------------------------------------

    def supported_sm_clocks_mhz(self) -> list[int]:
        """Every graphics clock NVML lists for any supported memory clock, ascending (cached: it is static)."""
        if self._supported_sm_clocks is None:
            clocks: set[int] = set()
            for memory_mhz in self._call(
                "listing memory clocks", self.nvml.nvmlDeviceGetSupportedMemoryClocks
            ):
                clocks.update(
                    self._call(
                        "listing graphics clocks", self.nvml.nvmlDeviceGetSupportedGraphicsClocks, memory_mhz
                    )
                )
            self._supported_sm_clocks = sorted(clocks)
        return self._supported_sm_clocks

    def sm_clock_range_mhz(self) -> tuple[int, int] | None:
        clocks = self.supported_sm_clocks_mhz()
        return (clocks[0], clocks[-1]) if clocks else None

    def lock_sm_clocks(self, min_mhz: int, max_mhz: int) -> None:
        """Refuse ranges outside the supported graphics clocks before NVML sees them."""
        supported = self.sm_clock_range_mhz()
        if supported is None:
            raise AgentError(f"GPU {self.index} ({self.name}): NVML lists no supported graphics clocks", 501)
        low, high = supported
        if min_mhz > max_mhz:
            raise OutOfRangeError(
                f"GPU {self.index} ({self.name}): locked clocks min {min_mhz} MHz is above max {max_mhz} MHz"
            )
        if not (low <= min_mhz and max_mhz <= high):
            raise OutOfRangeError(
                f"GPU {self.index} ({self.name}): locked clocks {min_mhz}-{max_mhz} MHz are outside the supported "
                f"SM clock range {low}-{high} MHz"
            )
        self._call("locking the SM clocks", self.nvml.nvmlDeviceSetGpuLockedClocks, min_mhz, max_mhz)

    def reset_locked_clocks(self) -> None:
        self._call("resetting the locked clocks", self.nvml.nvmlDeviceResetGpuLockedClocks)
