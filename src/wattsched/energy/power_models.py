"""Node power models, chosen per run: `binary` (PWR), `linear` (utilisation) and `dvfs` (power limits, clocks).

A model gives, vectorised over any set of nodes or GPU segments:

* ``gpu_busy_w(load, nodes)``: the draw of a GPU holding at least one job, whose jobs' utilisations (times their
  DVFS power scale) sum to ``load``;
* ``gpu_idle_w[nodes]``: the draw of a GPU holding none (on a powered-on node);
* ``gpu_held_w[nodes]``: the draw of a GPU held by jobs that compute nothing (restarting: process start,
  checkpoint load), with their CUDA contexts alive (``GpuModel.held_draw_w``: measured where the catalogue has it);
* ``gpu_state_w(...)``: the draw of a GPU holding jobs in either state (docs/energy.md, "GPU power states");
* ``cpu_w(cpu_left, nodes)``: the CPU sockets' draw with ``cpu_left`` milli-CPU unallocated.

Node power = GPUs + CPU + node base (memory, NICs, fans, disks), times PUE for the facility.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..core.cluster import ClusterSpec
from ..core.gpus import catalog_column
from ..core.registry import Registry
from .binary import PWR_FALLBACK_CPU, BinaryPowerModel, CpuPowerSpec

# Node base power when a model does not fix it (reconstructed: a GPU server's memory, NICs, fans and disks; no
# source doc gives a figure). `binary` uses 0 W because the PWR model counts CPUs and GPUs only.
DEFAULT_NODE_BASE_W = 100.0


class PowerModel:
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    default_node_base_w: ClassVar[float] = DEFAULT_NODE_BASE_W

    def __init__(self, cpu: CpuPowerSpec = PWR_FALLBACK_CPU):
        self.cpu = cpu
        # GPU type -> held draw measured for this run (a profile's idle-with-contexts readings), over the catalogue.
        self.measured_held_w: dict[str, float] = {}

    def bind(self, spec: ClusterSpec) -> None:
        self.spec = spec
        # Per-node GPU constants and the PWR socket topology (2 vCPU per core, 16 cores per socket) are shared
        # by every model; the PWR model computes them once.
        self._pwr = BinaryPowerModel(spec, self.cpu)
        self.gpu_idle_w = self._pwr.gpu_idle_w  # [N] W per GPU holding no job
        self.gpu_max_w = self._pwr.gpu_max_w  # [N] W per GPU at full load
        self.gpu_count = self._pwr.gpu_count
        self.sockets = self._pwr.sockets
        held = catalog_column(spec.gpu_models, "held_draw_w") if spec.gpu_models else np.zeros(1)
        for c, name in enumerate(spec.gpu_models):  # a run's own measurement wins over the catalogue
            if name in self.measured_held_w:
                held[c] = self.measured_held_w[name]
        code = np.maximum(spec.gpu_model_code, 0)
        self.gpu_held_w = np.where(self.gpu_count > 0, held[code], 0.0)  # [N] W per GPU held, not computing

    def gpu_busy_w(self, load: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def gpu_state_w(
        self, load: np.ndarray, computing: np.ndarray, held: np.ndarray, nodes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(draw, held excess) of GPUs holding at least one job. `computing`: some job on it computes, its
        computing jobs' loads summing to `load`; `held`: some job holds it without computing. A computing GPU
        draws ``gpu_busy_w(load)``, a GPU only held ``gpu_held_w``; with both, the held draw is the floor (the
        held job's context keeps the clock up). The held excess is what held jobs add: above the computing
        draw, or above bare idle on a GPU nothing computes on."""
        base = np.where(computing, self.gpu_busy_w(load, nodes), self.gpu_idle_w[nodes])
        draw = np.where(held, np.maximum(base, self.gpu_held_w[nodes]), base)
        return draw, draw - base

    def cpu_w(self, cpu_left: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def node_idle_w(self, nodes: np.ndarray) -> np.ndarray:
        """GPU + CPU draw of nodes with nothing running (no node base)."""
        return self.gpu_idle_w[nodes] * self.gpu_count[nodes] + self.cpu_w(self.spec.cpu_milli[nodes], nodes)


POWER_MODELS: Registry[PowerModel] = Registry("power model")


def idle_node_draw_w(spec: ClusterSpec) -> np.ndarray:
    """Per node, what it draws powered on with nothing running under the linear model (node base + idle CPU
    sockets + idle GPUs): the price planners put on keeping a node on."""
    model = LinearModel()
    model.bind(spec)
    return model.default_node_base_w + model.node_idle_w(np.arange(spec.num_nodes))


@POWER_MODELS.register("binary")
class BinaryModel(PowerModel):
    """PWR (Lettich et al., CCGrid'25): a GPU with any allocation draws TDP, a free one idle power; CPU sockets
    by the PWR code's formula (docs/fgd-pwr.md §7.1)."""

    name = "binary"
    description = "PWR model: allocated GPU at TDP, free GPU at idle; CPU sockets as the PWR code"
    default_node_base_w = 0.0

    def bind(self, spec: ClusterSpec) -> None:
        super().bind(spec)
        self.gpu_held_w = self.gpu_max_w  # PWR charges any allocation at TDP, held or computing

    def gpu_busy_w(self, load: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        return self.gpu_max_w[nodes]

    def cpu_w(self, cpu_left: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        return self._pwr.cpu_power(np.asarray(cpu_left), nodes).astype(np.float64)


@POWER_MODELS.register("linear")
class LinearModel(PowerModel):
    """P = P_idle + (P_max - P_idle) * u per GPU, u = the sharers' utilisations summed and capped at 1; CPU
    sockets draw idle power plus their dynamic range in proportion to the allocated CPU share."""

    name = "linear"
    description = "per GPU P_idle + (P_max - P_idle) * utilisation; CPU linear in allocated share"

    def gpu_busy_w(self, load: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        idle = self.gpu_idle_w[nodes]
        return idle + (self.gpu_max_w[nodes] - idle) * np.minimum(load, 1.0)

    def cpu_w(self, cpu_left: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        cap = self.spec.cpu_milli[nodes].astype(np.float64)
        used = np.divide(cap - cpu_left, cap, out=np.zeros_like(cap), where=cap > 0)
        return self.sockets[nodes] * (self.cpu.idle_w + (self.cpu.max_w - self.cpu.idle_w) * used)


@POWER_MODELS.register("dvfs")
class DvfsModel(LinearModel):
    """The linear model with each job's dynamic GPU power scaled by its power limit or SM clock setting; the
    job also runs slower (rate set by the frequency governor from the same response curves)."""

    name = "dvfs"
    description = "linear model + per-job power limit / SM clock (Zeus-fitted and HKBU response curves)"
