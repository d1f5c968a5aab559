"""Power-aware placement (PWR) and its weighted combinations with FGD (docs/fgd-pwr.md §7.2, §7.3).

Lettich, Carlini, Nardini, Perego, Trani, "Power- and Fragmentation-aware Online Scheduling for GPU Datacenters",
IEEE/ACM CCGrid'25; reference code ``Fr4nz83/PWR-plugin-kubernetes`` ``pkg/simulator/plugin/pwr_score.go``.
Independent reimplementation.

* PWR raw score = ``int64(P_node(now) - P_node(after the pod))`` (minus the power increase in W, so <= 0); a share
  pod tries every GPU that fits and keeps the best (first index on ties), which prefers an already busy GPU.
  Scores are min-max normalised over the feasible nodes; all equal -> 100.
* ``pwr_W1_fgd_W2``: the kube-scheduler sum ``W1 * PWRnorm + W2 * FGD`` (FGD unnormalised); ties go to the
  smallest seeded node rank; GPUs inside the chosen node are FGD's choice.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..core.cluster import MILLI, ClusterSpec, ClusterState
from ..core.jobs import JobTable
from ..core.requests import JobRequest
from ..energy.binary import BinaryPowerModel
from .base import PLACEMENT_POLICIES, PlacementPolicy
from .fgd import FGD, sub_rows
from .placement import min_max_normalise


def pwr_raw_scores(
    model: BinaryPowerModel, state: ClusterState, req: JobRequest, nodes: np.ndarray
) -> np.ndarray:
    """``int64(P0 - P1)`` per candidate node (calculatePWRShareExtendScore)."""
    cpu_left = state.cpu_left[nodes]
    d_cpu = model.cpu_power(cpu_left - req.cpu_milli, nodes) - model.cpu_power(cpu_left, nodes)
    extra = model.gpu_max_w[nodes] - model.gpu_idle_w[nodes]  # W added when a free GPU gets busy
    if req.num_gpu == 0 or req.gpu_milli <= 0:
        d_gpu = np.zeros(nodes.size)
    elif req.is_share:
        rows = state.gpu_left[nodes]
        busy_fit = ((rows >= req.gpu_milli) & (rows < MILLI)).any(axis=1)
        d_gpu = np.where(busy_fit, 0.0, extra)
    elif req.gpu_milli >= MILLI:
        d_gpu = req.num_gpu * extra
    else:  # several partial GPUs (not in the traces): count the free GPUs Sub would touch
        rows = state.gpu_left[nodes]
        after = sub_rows(rows, req.num_gpu, req.gpu_milli)
        d_gpu = ((rows == MILLI) & (after < MILLI)).sum(axis=1) * extra
    return (-(d_cpu + d_gpu)).astype(np.int64)


def pwr_share_gpu(row: np.ndarray, milli: int) -> int:
    """The GPU PWR gives a share pod: the first fitting GPU that is already busy, else the first fitting one."""
    fits = row >= milli
    busy = np.flatnonzero(fits & (row < MILLI))
    return int(busy[0]) if busy.size else int(np.flatnonzero(fits)[0])


@PLACEMENT_POLICIES.register("pwr")
class PWR(PlacementPolicy):
    """Least increase in node power under the binary model (GPU at TDP when any share is allocated)."""

    name = "pwr"
    description = "least node power increase, min-max normalised (PWR, CCGrid'25; binary power model)"

    def __init__(self) -> None:
        super().__init__()
        self.power: BinaryPowerModel | None = None

    def bind(self, spec: ClusterSpec, rng: np.random.Generator, rank: np.ndarray | None = None) -> None:
        super().bind(spec, rng, rank)
        self.power = BinaryPowerModel(spec)

    def _power(self, spec: ClusterSpec) -> BinaryPowerModel:
        if self.power is None or self.power.spec is not spec:
            self.power = BinaryPowerModel(spec)
        return self.power

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        if req.num_gpu == 0 and req.cpu_milli == 0 and req.memory_mib == 0:
            return np.full(nodes.size, 100, dtype=np.int64)
        raw = pwr_raw_scores(self._power(state.spec), state, req, nodes)
        return min_max_normalise(raw, all_equal=100)

    def choose_gpus(self, state: ClusterState, req: JobRequest, node: int) -> tuple[int, ...]:
        if not req.is_share:
            return super().choose_gpus(state, req, node)
        return (pwr_share_gpu(state.gpu_left[node], req.gpu_milli),)

    def native_packing_plan(self) -> dict[str, Any] | None:
        """How packing mode may run this policy compiled (engine/native_packing.py); exact type, once bound."""
        if type(self) is not PWR or self.power is None:
            return None
        return {
            "placement": "weighted",
            "w_pwr": 1,
            "w_fgd": 0,
            "gpus_by": "pwr",
            "pwr": self.power,
            "rank": self.rank,
            "rank_weight": self._rank_weight,
        }


class PwrFgd(PlacementPolicy):
    """Weighted sum of the normalised PWR score and the raw FGD score; FGD picks the GPUs."""

    description = "w_pwr * PWR (normalised) + w_fgd * FGD; GPUs chosen by FGD (PWR+FGD, CCGrid'25)"

    def __init__(self, w_pwr: int, w_fgd: int) -> None:
        super().__init__()
        if w_pwr < 0 or w_fgd < 0 or w_pwr + w_fgd == 0:
            raise ValueError(f"weights must be non-negative and not both zero, got {w_pwr}, {w_fgd}")
        self.w_pwr = int(w_pwr)
        self.w_fgd = int(w_fgd)
        self.name = f"pwr_{self.w_pwr}_fgd_{self.w_fgd}"
        self.pwr = PWR()
        self.fgd = FGD()

    def bind(self, spec: ClusterSpec, rng: np.random.Generator, rank: np.ndarray | None = None) -> None:
        super().bind(spec, rng, rank)
        self.pwr.bind(spec, rng, self.rank)
        self.fgd.bind(spec, rng, self.rank)

    def prepare(self, jobs: JobTable, spec: ClusterSpec) -> None:
        self.pwr.prepare(jobs, spec)
        self.fgd.prepare(jobs, spec)

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        total = np.zeros(nodes.size, dtype=np.int64)
        if self.w_pwr:
            total += self.w_pwr * self.pwr.score(state, req, nodes)
        if self.w_fgd:
            total += self.w_fgd * self.fgd.score(state, req, nodes)
        return total

    def choose_gpus(self, state: ClusterState, req: JobRequest, node: int) -> tuple[int, ...]:
        # Every PWR+FGD run used `-gpusel FGD` (FGD also had the larger weight in all published pairs).
        return self.fgd.choose_gpus(state, req, node)

    def native_packing_plan(self) -> dict[str, Any] | None:
        """How packing mode may run this policy compiled (engine/native_packing.py); exact types, once prepared."""
        if type(self) is not PwrFgd or type(self.pwr) is not PWR or type(self.fgd) is not FGD:
            return None
        if self.pwr.power is None or self.fgd.model is None:
            return None
        return {
            "placement": "weighted",
            "w_pwr": self.w_pwr,
            "w_fgd": self.w_fgd,
            "gpus_by": "fgd",
            "fgd": self.fgd.model,
            "pwr": self.pwr.power,
            "exact_score": self.fgd.model.exact_sigmoid_score,
            "rank": self.rank,
            "rank_weight": self._rank_weight,
        }


_FAMILY = re.compile(r"pwr_(\d+)_fgd_(\d+)")


def _resolve_combination(name: str):
    match = _FAMILY.fullmatch(name)
    if match is None:
        return None
    w_pwr, w_fgd = int(match.group(1)), int(match.group(2))
    if w_pwr + w_fgd == 0:
        return None

    def factory(**params) -> PwrFgd:
        return PwrFgd(w_pwr, w_fgd, **params)

    factory.description = PwrFgd.description  # type: ignore[attr-defined]
    factory.reconstructed = False  # type: ignore[attr-defined]
    return factory


PLACEMENT_POLICIES.register_family("pwr_<W1>_fgd_<W2>", _resolve_combination)
