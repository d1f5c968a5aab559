"""A stand-in for the ``pynvml`` module (package nvidia-ml-py) for tests and for trying the agent without a GPU.

It has the pynvml names the agent calls, with the same return types and units: power in mW, energy in mJ,
clocks in MHz, memory in bytes, temperature in C, ``nvmlDeviceGetPowerManagementLimitConstraints`` as a
``[min_mw, max_mw]`` list, and the ``NVMLError`` subclasses and ``NVML_ERROR_*`` codes of nvidia-ml-py
13.615.71 (tests/integration/test_agent.py checks the codes against the installed pynvml). Like NVML, setters
refuse values outside the constraints (``NVML_ERROR_INVALID_ARGUMENT``) and, with ``deny_set``, raise
``NVML_ERROR_NO_PERMISSION`` as a non-root caller gets on a real GPU.

The profile is A100-SXM4-40GB-like (power limit 100-400 W, memory clock 1215 MHz, graphics clocks
210-1410 MHz in 15 MHz steps); the readings are deterministic functions of the GPU index and the settings.
``set_load`` stands in for work on a GPU (the profiler's simulated jobs): it sets the utilisation, and with it
the power, until changed; the energy counter accumulates the power actually drawn over the injectable clock.

With a state file (``state_file=`` or the ``WATTSCHED_FAKE_NVML_STATE`` environment variable) the settings
(power limit, locked clocks) are read from it at ``nvmlInit`` and written after every change, so a test can
preset them and watch another process (the agent) change and restore them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..core.atomic import write_json

STATE_FILE_ENV = "WATTSCHED_FAKE_NVML_STATE"
GPU_COUNT_ENV = "WATTSCHED_FAKE_NVML_GPUS"
DENY_SET_ENV = "WATTSCHED_FAKE_NVML_DENY_SET"

# Values as in pynvml.py of nvidia-ml-py 13.615.71.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2

_ERROR_TEXT = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    value: int
    """Like pynvml's: ``NVMLError(code)`` builds the subclass for that code; ``.value`` is the code."""

    _class_by_code: ClassVar[dict[int, type[NVMLError]]] = {}
    code: int = NVML_ERROR_UNKNOWN

    def __new__(cls, value: int | None = None) -> NVMLError:
        if cls is NVMLError and value is not None:
            cls = NVMLError._class_by_code.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = cls.code if value is None else value
        return obj

    def __init__(self, value: int | None = None) -> None:
        super().__init__(self.value)

    def __str__(self) -> str:
        return _ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")


def _error_class(name: str, code: int) -> type[NVMLError]:
    cls = type(name, (NVMLError,), {"code": code, "__module__": __name__})
    NVMLError._class_by_code[code] = cls
    return cls


NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_NotFound = _error_class("NVMLError_NotFound", NVML_ERROR_NOT_FOUND)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_Unknown = _error_class("NVMLError_Unknown", NVML_ERROR_UNKNOWN)

MODEL_NAME = "NVIDIA A100-SXM4-40GB"
MIN_POWER_LIMIT_MW = 100_000
MAX_POWER_LIMIT_MW = 400_000
DEFAULT_POWER_LIMIT_MW = 400_000
MEMORY_CLOCK_MHZ = 1215
GRAPHICS_CLOCKS_MHZ = list(range(1410, 209, -15))  # NVML lists them highest first
MEMORY_TOTAL_BYTES = 40 * 1024**3
IDLE_POWER_MW = 60_000
INITIAL_ENERGY_MJ = 1_000_000_000


@dataclass
class FakeHandle:
    index: int


@dataclass
class FakeUtilization:
    """Like pynvml's ``c_nvmlUtilization_t``: percentages over the last sample period."""

    gpu: int
    memory: int


@dataclass
class FakeMemory:
    """Like pynvml's ``c_nvmlMemory_t``: bytes."""

    total: int
    free: int
    used: int


@dataclass
class FakePciInfo:
    """Like pynvml's ``nvmlPciInfo_t``: ``busId`` is bytes there too."""

    busId: bytes  # pynvml's field name


@dataclass
class FakeGpu:
    index: int
    power_limit_mw: int = DEFAULT_POWER_LIMIT_MW
    locked_clocks_mhz: tuple[int, int] | None = None
    load_pct: int | None = None  # utilisation set by set_load; None: the fixed profile
    energy_mj: float = 0.0  # the counter's value at energy_at (seconds on the fake's clock)
    energy_at: float = 0.0

    @property
    def gpu_util_pct(self) -> int:
        return 40 + 10 * self.index if self.load_pct is None else self.load_pct

    @property
    def power_mw(self) -> int:
        return min(self.power_limit_mw, IDLE_POWER_MW + 3_000 * self.gpu_util_pct)


class FakeNvml:
    """One fake NVML library: pass it wherever the agent takes the ``pynvml`` module."""

    NVMLError = NVMLError

    def __init__(
        self,
        gpu_count: int = 2,
        *,
        deny_set: bool = False,
        energy_supported: bool = True,
        locked_clocks_supported: bool = True,
        state_file: str | Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gpu_count = gpu_count
        self.deny_set = deny_set
        self.energy_supported = energy_supported
        self.locked_clocks_supported = locked_clocks_supported
        self.state_file = Path(state_file) if state_file is not None else None
        self.clock = clock
        self.calls: list[tuple[str, tuple[Any, ...]]] = []  # setter calls, for tests
        self._initialized = False
        started_at = clock()
        self.gpus = [
            FakeGpu(i, energy_mj=INITIAL_ENERGY_MJ + i * 1_000_000, energy_at=started_at)
            for i in range(gpu_count)
        ]

    def _accrue_energy(self, gpu: FakeGpu) -> None:
        """Bring the energy counter up to now at the power drawn since its last update (call before any change)."""
        now = self.clock()
        gpu.energy_mj += gpu.power_mw * max(now - gpu.energy_at, 0.0)
        gpu.energy_at = now

    def set_load(self, index: int, util_pct: int | None) -> None:
        """Not NVML: make GPU `index` as busy as a job would (None: back to the fixed profile)."""
        gpu = self.gpus[index]
        self._accrue_energy(gpu)
        gpu.load_pct = None if util_pct is None else max(0, min(100, int(util_pct)))

    @classmethod
    def from_env(cls) -> FakeNvml:
        """What ``wattsched agent --nvml fake`` uses: GPU count, permission and state file from the environment."""
        return cls(
            gpu_count=int(os.environ.get(GPU_COUNT_ENV, "2")),
            deny_set=os.environ.get(DENY_SET_ENV, "") not in ("", "0"),
            state_file=os.environ.get(STATE_FILE_ENV) or None,
        )

    # -- state shared across processes ---------------------------------------------------------------------

    def _load_state(self) -> None:
        if self.state_file is None or not self.state_file.exists():
            return
        saved = json.loads(self.state_file.read_text(encoding="utf-8"))
        for gpu, entry in zip(self.gpus, saved.get("gpus", []), strict=False):
            self._accrue_energy(gpu)
            gpu.power_limit_mw = int(entry["power_limit_mw"])
            locked = entry.get("locked_clocks_mhz")
            gpu.locked_clocks_mhz = (int(locked[0]), int(locked[1])) if locked else None
        self.deny_set = bool(saved.get("deny_set", self.deny_set))

    def _save_state(self) -> None:
        if self.state_file is None:
            return
        gpus = [
            {
                "power_limit_mw": gpu.power_limit_mw,
                "locked_clocks_mhz": list(gpu.locked_clocks_mhz) if gpu.locked_clocks_mhz else None,
            }
            for gpu in self.gpus
        ]
        write_json(self.state_file, {"gpus": gpus, "deny_set": self.deny_set})

    # -- pynvml API ------------------------------------------------------------------------------------------

    def _gpu(self, handle: FakeHandle) -> FakeGpu:
        if not self._initialized:
            raise NVMLError_Uninitialized()
        return self.gpus[handle.index]

    def _check_settable(self) -> None:
        if self.deny_set:
            raise NVMLError_NoPermission()

    def nvmlInit(self) -> None:
        self._load_state()
        self._save_state()
        self._initialized = True

    def nvmlShutdown(self) -> None:
        self._initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.0-fake"

    def nvmlDeviceGetCount(self) -> int:
        if not self._initialized:
            raise NVMLError_Uninitialized()
        return self.gpu_count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        if not self._initialized:
            raise NVMLError_Uninitialized()
        if not 0 <= index < self.gpu_count:
            raise NVMLError_InvalidArgument()
        return FakeHandle(index)

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        self._gpu(handle)
        return MODEL_NAME

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return f"GPU-fa4e0000-0000-0000-0000-{self._gpu(handle).index:012d}"

    def nvmlDeviceGetMinorNumber(self, handle: FakeHandle) -> int:
        return self._gpu(handle).index

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> FakePciInfo:
        return FakePciInfo(f"00000000:{0x10 + self._gpu(handle).index:02X}:00.0".encode())

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._gpu(handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        gpu = self._gpu(handle)
        if not self.energy_supported:  # pre-Volta GPUs have no energy counter
            raise NVMLError_NotSupported()
        self._accrue_energy(gpu)
        return int(gpu.energy_mj)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> FakeUtilization:
        gpu = self._gpu(handle)
        return FakeUtilization(gpu=gpu.gpu_util_pct, memory=20 + 5 * gpu.index)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> FakeMemory:
        used = (4 + self._gpu(handle).index) * 1024**3
        return FakeMemory(total=MEMORY_TOTAL_BYTES, free=MEMORY_TOTAL_BYTES - used, used=used)

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        gpu = self._gpu(handle)
        if clock_type == NVML_CLOCK_MEM:
            return MEMORY_CLOCK_MHZ
        if clock_type not in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            raise NVMLError_InvalidArgument()
        if gpu.locked_clocks_mhz is None:
            return GRAPHICS_CLOCKS_MHZ[0]
        return gpu.locked_clocks_mhz[1]

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        gpu = self._gpu(handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError_InvalidArgument()
        return 40 + gpu.index

    def nvmlDeviceGetPowerManagementLimit(self, handle: FakeHandle) -> int:
        return self._gpu(handle).power_limit_mw

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: FakeHandle) -> list[int]:
        self._gpu(handle)
        return [MIN_POWER_LIMIT_MW, MAX_POWER_LIMIT_MW]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: FakeHandle) -> int:
        self._gpu(handle)
        return DEFAULT_POWER_LIMIT_MW

    def nvmlDeviceSetPowerManagementLimit(self, handle: FakeHandle, limit: int) -> None:
        gpu = self._gpu(handle)
        self._check_settable()
        if not MIN_POWER_LIMIT_MW <= limit <= MAX_POWER_LIMIT_MW:
            raise NVMLError_InvalidArgument()
        self.calls.append(("nvmlDeviceSetPowerManagementLimit", (gpu.index, limit)))
        self._accrue_energy(gpu)
        gpu.power_limit_mw = int(limit)
        self._save_state()

    def nvmlDeviceGetSupportedMemoryClocks(self, handle: FakeHandle) -> list[int]:
        self._gpu(handle)
        return [MEMORY_CLOCK_MHZ]

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: FakeHandle, memoryClockMHz: int) -> list[int]:
        self._gpu(handle)
        if memoryClockMHz != MEMORY_CLOCK_MHZ:
            raise NVMLError_InvalidArgument()
        return list(GRAPHICS_CLOCKS_MHZ)

    def nvmlDeviceSetGpuLockedClocks(
        self, handle: FakeHandle, minGpuClockMHz: int, maxGpuClockMHz: int
    ) -> None:
        gpu = self._gpu(handle)
        self._check_settable()
        if not self.locked_clocks_supported:
            raise NVMLError_NotSupported()
        if minGpuClockMHz > maxGpuClockMHz:
            raise NVMLError_InvalidArgument()
        self.calls.append(("nvmlDeviceSetGpuLockedClocks", (gpu.index, minGpuClockMHz, maxGpuClockMHz)))
        gpu.locked_clocks_mhz = (int(minGpuClockMHz), int(maxGpuClockMHz))
        self._save_state()

    def nvmlDeviceResetGpuLockedClocks(self, handle: FakeHandle) -> None:
        gpu = self._gpu(handle)
        self._check_settable()
        if not self.locked_clocks_supported:
            raise NVMLError_NotSupported()
        self.calls.append(("nvmlDeviceResetGpuLockedClocks", (gpu.index,)))
        gpu.locked_clocks_mhz = None
        self._save_state()


# The agent reads constants and error classes off the library it is given, as it does off the pynvml module.
for _name, _value in list(globals().items()):
    if _name.startswith(("NVML_", "NVMLError_")):
        setattr(FakeNvml, _name, _value)


def read_state_file(path: str | Path) -> dict[str, Any]:
    """The settings a fake NVML wrote to ``path`` (power limits in mW, locked clocks in MHz or null)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))
