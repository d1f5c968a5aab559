"""Node power models, chosen per run: `binary` (PWR), `linear` (utilisation) and `dvfs` (power limits, clocks).

A model answers one question cheaply: the power of ONE node in its current state, split into components. The
energy accountant calls it only for nodes whose state just changed, so this is scalar Python on short rows, not a
vector pass over the cluster (that would cost more than the rest of the simulation per event).

Node power = GPUs + CPU + node base (memory, NICs, fans, disks), times PUE for the facility.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import numpy as np

from ..core.cluster import MILLI, ClusterSpec, ClusterState
from ..core.gpus import catalog_column
from ..policies.registry import Registry
from .binary import PWR_FALLBACK_CPU, CpuPowerSpec

# Node base power when a model does not fix it (reconstructed: a GPU server's memory, NICs, fans and disks; no
# source doc gives a figure). `binary` uses 0 W because the PWR model counts CPUs and GPUs only.
DEFAULT_NODE_BASE_W = 100.0


class NodeWatts(NamedTuple):
    gpu_busy: float  # GPUs holding at least one job
    gpu_idle: float  # GPUs holding none
    cpu: float


class PowerModel:
    """Per-node power of a powered-on node. `gpu_load[n][g]` is the summed utilisation (x power scale for DVFS)
    of the jobs on GPU g of node n, maintained by the accountant."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    default_node_base_w: ClassVar[float] = DEFAULT_NODE_BASE_W

    def __init__(self, cpu: CpuPowerSpec = PWR_FALLBACK_CPU):
        self.cpu = cpu

    def bind(self, spec: ClusterSpec) -> None:
        has_gpu = (spec.gpu_model_code >= 0) & (spec.gpu_count > 0)
        safe = np.where(has_gpu, spec.gpu_model_code, 0)
        idle = catalog_column(spec.gpu_models, "idle_w") if spec.gpu_models else np.zeros(1)
        peak = catalog_column(spec.gpu_models, "max_w") if spec.gpu_models else np.zeros(1)
        self.gpu_idle_w = np.where(has_gpu, idle[safe], 0.0).tolist()
        self.gpu_max_w = np.where(has_gpu, peak[safe], 0.0).tolist()
        self.gpu_count = np.where(has_gpu, spec.gpu_count, 0).tolist()
        milli_per_core = MILLI * self.cpu.vcpus_per_core
        self._milli_per_core = milli_per_core
        self.real_cores = (-(-spec.cpu_milli // milli_per_core)).tolist()
        self.sockets = [-(-c // self.cpu.cores_per_socket) for c in self.real_cores]

    def idle_watts(self, n: int) -> NodeWatts:
        """Power of node n with nothing running on it."""
        return NodeWatts(0.0, self.gpu_idle_w[n] * self.gpu_count[n], self.sockets[n] * self.cpu.idle_w)

    def gpu_watts(self, left: int, load: float, n: int) -> tuple[float, float]:
        """(busy, idle) watts of one GPU of node n with `left` milli free and summed utilisation `load`."""
        raise NotImplementedError

    def cpu_watts(self, cpu_left: int, n: int) -> float:
        raise NotImplementedError

    def node_watts(self, state: ClusterState, gpu_load: list[list[float]], n: int) -> NodeWatts:
        busy = idle = 0.0
        count = self.gpu_count[n]
        for left, load in zip(state.gpu_left[n].tolist()[:count], gpu_load[n][:count], strict=True):
            b, i = self.gpu_watts(left, load, n)
            busy += b
            idle += i
        return NodeWatts(busy, idle, self.cpu_watts(int(state.cpu_left[n]), n))

    def pwr_cpu_watts(self, cpu_left: int, n: int) -> float:
        """PWR's socket model (fgd-pwr.md §7.1): a socket with any working core draws max power."""
        working = self.real_cores[n] - cpu_left // self._milli_per_core
        active = -(-working // self.cpu.cores_per_socket)
        return self.cpu.max_w * active + self.cpu.idle_w * (self.sockets[n] - active)


POWER_MODELS: Registry[PowerModel] = Registry("power model")


@POWER_MODELS.register("binary")
class BinaryModel(PowerModel):
    """PWR (Lettich et al., CCGrid'25): a GPU with any allocation draws TDP, a free one idle power; CPU sockets
    by the PWR code's formula."""

    name = "binary"
    description = "PWR model: allocated GPU at TDP, free GPU at idle; CPU sockets as the PWR code"
    default_node_base_w = 0.0

    def gpu_watts(self, left: int, load: float, n: int) -> tuple[float, float]:
        return (self.gpu_max_w[n], 0.0) if left < MILLI else (0.0, self.gpu_idle_w[n])

    def cpu_watts(self, cpu_left: int, n: int) -> float:
        return self.pwr_cpu_watts(cpu_left, n)


@POWER_MODELS.register("linear")
class LinearModel(PowerModel):
    """P = P_idle + (P_max - P_idle) * u per GPU, u = the sharers' utilisations summed and capped at 1; CPU
    linear in the allocated CPU share."""

    name = "linear"
    description = "per GPU P_idle + (P_max - P_idle) * utilisation; CPU linear in allocated share"

    def bind(self, spec: ClusterSpec) -> None:
        super().bind(spec)
        # CPU: sockets draw idle power plus the dynamic range in proportion to the allocated CPU share,
        # i.e. an affine function of milli-CPU left: full_w - per_milli_w * cpu_left.
        cap = spec.cpu_milli.astype(np.float64)
        sockets = np.asarray(self.sockets, dtype=np.float64)
        self._cpu_full_w = (sockets * self.cpu.max_w).tolist()
        span = sockets * (self.cpu.max_w - self.cpu.idle_w)
        self._cpu_per_milli_w = np.divide(span, cap, out=np.zeros_like(span), where=cap > 0).tolist()
        self._cpu_idle_if_empty = (sockets * self.cpu.idle_w).tolist()

    def gpu_watts(self, left: int, load: float, n: int) -> tuple[float, float]:
        idle = self.gpu_idle_w[n]
        if left >= MILLI:
            return 0.0, idle
        return idle + (self.gpu_max_w[n] - idle) * (load if load < 1.0 else 1.0), 0.0

    def cpu_watts(self, cpu_left: int, n: int) -> float:
        if self._cpu_per_milli_w[n] == 0.0:
            return self._cpu_idle_if_empty[n]  # a node without CPU capacity has nothing to allocate
        return self._cpu_full_w[n] - self._cpu_per_milli_w[n] * cpu_left


@POWER_MODELS.register("dvfs")
class DvfsModel(LinearModel):
    """The linear model with each job's dynamic GPU power scaled by its power limit or SM clock setting; the
    job also runs slower (rate set by the frequency governor from the same response curves)."""

    name = "dvfs"
    description = "linear model + per-job power limit / SM clock (Zeus-fitted and HKBU response curves)"
