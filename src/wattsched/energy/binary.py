"""The PWR "binary" power model (docs/fgd-pwr.md §7.1), vectorised over nodes.

Lettich et al., CCGrid'25; code ``Fr4nz83/PWR-plugin-kubernetes`` ``pkg/type/resource.go``
(``GetEnergyConsumptionNode``), reimplemented here:

* GPU: a GPU with any allocation (milli left < 1000) draws its max (TDP) power, a fully free one its idle power
  (constants from the GPU catalog; Alibaba G2 is modelled as A10, G3 as A100).
* CPU, exactly as the code computes it: 2 vCPU per physical core, ``real = ceil(vCPU_cap / 2)``,
  ``idle_cores = floor(vCPU_left / 2)``, ``working = real - idle_cores``, ``sockets = ceil(real / ncores)``,
  ``active = ceil(working / ncores)``; ``P = p_max * active + p_idle * (sockets - active)``. Every node of the
  published experiments used the fallback CPU (15 W idle, 120 W max, 16 cores per socket).

All values are whole watts, so power differences are exact in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.cluster import MILLI, ClusterSpec, ClusterState
from ..core.gpus import catalog_column


@dataclass(frozen=True)
class CpuPowerSpec:
    """Per-socket CPU power and topology used for every node."""

    idle_w: float = 15.0
    max_w: float = 120.0
    cores_per_socket: int = 16
    vcpus_per_core: int = 2


PWR_FALLBACK_CPU = CpuPowerSpec()  # the "" key of MapCpuTypeEnergyConsumption (Xeon E5-2682 v4)


def _ceil_div(a: np.ndarray | int, b: int) -> np.ndarray:
    return -(-np.asarray(a) // b)


class BinaryPowerModel:
    """Node power of a cluster under the PWR model; all methods take arrays over (a subset of) nodes."""

    def __init__(self, spec: ClusterSpec, cpu: CpuPowerSpec = PWR_FALLBACK_CPU):
        self.spec = spec
        self.cpu = cpu
        code = spec.gpu_model_code
        has_gpu = (code >= 0) & (spec.gpu_count > 0)
        idle = catalog_column(spec.gpu_models, "idle_w") if spec.gpu_models else np.zeros(1)
        peak = catalog_column(spec.gpu_models, "max_w") if spec.gpu_models else np.zeros(1)
        safe = np.where(has_gpu, code, 0)
        self.gpu_idle_w = np.where(has_gpu, idle[safe], 0.0)  # [N] W per fully free GPU
        self.gpu_max_w = np.where(has_gpu, peak[safe], 0.0)  # [N] W per GPU with any allocation
        self.gpu_count = np.where(has_gpu, spec.gpu_count, 0)
        self.milli_per_core = MILLI * cpu.vcpus_per_core
        self.real_cores = _ceil_div(spec.cpu_milli, self.milli_per_core)  # [N]
        self.sockets = _ceil_div(self.real_cores, cpu.cores_per_socket)  # [N]

    # -- components ------------------------------------------------------------------------------------------
    def cpu_power(self, cpu_left: np.ndarray, nodes: np.ndarray | slice = slice(None)) -> np.ndarray:
        """CPU watts of `nodes` given their milli-CPU left (same shape as `cpu_left`)."""
        idle_cores = np.asarray(cpu_left) // self.milli_per_core
        working = self.real_cores[nodes] - idle_cores
        active = _ceil_div(working, self.cpu.cores_per_socket)
        return self.cpu.max_w * active + self.cpu.idle_w * (self.sockets[nodes] - active)

    def gpu_power(self, free_gpus: np.ndarray, nodes: np.ndarray | slice = slice(None)) -> np.ndarray:
        """GPU watts of `nodes` given their number of fully free GPUs."""
        free = np.asarray(free_gpus)
        busy = self.gpu_count[nodes] - free
        return self.gpu_idle_w[nodes] * free + self.gpu_max_w[nodes] * busy

    def node_power(
        self, cpu_left: np.ndarray, free_gpus: np.ndarray, nodes: np.ndarray | slice = slice(None)
    ) -> np.ndarray:
        return self.cpu_power(cpu_left, nodes) + self.gpu_power(free_gpus, nodes)

    # -- on a state ------------------------------------------------------------------------------------------
    def state_cpu_power(self, state: ClusterState) -> np.ndarray:
        return self.cpu_power(state.cpu_left)

    def state_gpu_power(self, state: ClusterState) -> np.ndarray:
        return self.gpu_power(state.free_gpus)

    def state_node_power(self, state: ClusterState) -> np.ndarray:
        return self.node_power(state.cpu_left, state.free_gpus)

    def row_power(self, node: int, cpu_left: int, gpu_left_row: np.ndarray) -> float:
        """Power of one node in a hypothetical state (CPU left, per-GPU milli left; -1 marks absent slots)."""
        row = np.asarray(gpu_left_row)
        free = int((row[: self.gpu_count[node]] == MILLI).sum())
        return float(self.node_power(np.array([cpu_left]), np.array([free]), np.array([node]))[0])


def gpu_power_w(state: ClusterState) -> np.ndarray:
    """GPU watts per node [N]."""
    return BinaryPowerModel(state.spec).state_gpu_power(state)


def cpu_power_w(state: ClusterState, cpu: CpuPowerSpec = PWR_FALLBACK_CPU) -> np.ndarray:
    """CPU watts per node [N]."""
    return BinaryPowerModel(state.spec, cpu).state_cpu_power(state)


def node_power_w(state: ClusterState, cpu: CpuPowerSpec = PWR_FALLBACK_CPU) -> np.ndarray:
    """Node watts (CPU + GPU) per node [N]."""
    return BinaryPowerModel(state.spec, cpu).state_node_power(state)


def cluster_power_w(state: ClusterState, cpu: CpuPowerSpec = PWR_FALLBACK_CPU) -> float:
    """Datacenter power (the PWR paper's EOPC): sum of node power."""
    return float(node_power_w(state, cpu).sum())
