"""Baseline placement policies, as the FGD simulator implements them (docs/fgd-pwr.md §4).

Source: hkust-adsl/kubernetes-scheduler-simulator, ``pkg/simulator/plugin/{random,dot_product,gpu_clustering,
gpu_packing,best_fit,first_fit}_score.go``. Scores use the same integer arithmetic (Go int64 truncation) because
integer ties, broken by the seeded node order, visibly change results.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.cluster import MILLI, ClusterState
from ..core.requests import JobRequest
from .base import PLACEMENT_POLICIES, PlacementPolicy

MAX_SPEC_CPU = 128_000  # milli-CPU of the largest node shape (normalisation constant of the FGD simulator)
MAX_SPEC_GPU = 8_000  # milli-GPU of the largest node shape


def native_plan(policy: PlacementPolicy, kind: type, **plan: Any) -> dict[str, Any] | None:
    """A compiled packing plan for `policy` (engine/native_packing.py) when it is exactly of type `kind` (a
    subclass may change anything), with its tie-break order."""
    if type(policy) is not kind:
        return None
    return {**plan, "rank": policy.rank, "rank_weight": policy._rank_weight}


def min_max_normalise(raw: np.ndarray, all_equal: int) -> np.ndarray:
    """kube-scheduler NormalizeScore: ``(x - lo) * 100 / (hi - lo)`` in integers; all equal -> `all_equal`."""
    lo, hi = int(raw.min()), int(raw.max())
    if hi == lo:
        return np.full(raw.shape, all_equal, dtype=np.int64)
    return (raw - lo) * 100 // (hi - lo)


@PLACEMENT_POLICIES.register("first-fit")
class FirstFit(PlacementPolicy):
    """Every feasible node scores the same, so the first node in the seeded node order wins."""

    name = "first-fit"
    description = "first feasible node in the seeded node order (FGD simulator FirstFit)"

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        return np.full(nodes.size, 100, dtype=np.int64)

    def native_packing_plan(self) -> dict[str, Any] | None:
        """How packing mode may run this policy compiled (engine/native_packing.py); exact type only."""
        return native_plan(self, FirstFit, placement="first-fit", gpus_by="best")


@PLACEMENT_POLICIES.register("random")
class RandomPlacement(PlacementPolicy):
    """One feasible node drawn uniformly; a shared pod gets a uniformly drawn GPU among those that fit."""

    name = "random"
    description = "uniformly random feasible node and GPU (FGD simulator Random, -gpusel random)"

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        scores = np.zeros(nodes.size, dtype=np.int64)
        scores[int(self.rng.integers(nodes.size))] = 100
        return scores

    def choose_gpus(self, state: ClusterState, req: JobRequest, node: int) -> tuple[int, ...]:
        if not req.is_share:
            return super().choose_gpus(state, req, node)
        fitting = np.flatnonzero(state.gpu_left[node] >= req.gpu_milli)
        return (int(fitting[int(self.rng.integers(fitting.size))]),)


@PLACEMENT_POLICIES.register("best-fit")
class BestFit(PlacementPolicy):
    """Least leftover CPU and GPU after placement (weights 0.5/0.5), min-max normalised over feasible nodes."""

    name = "best-fit"
    description = "least leftover CPU+GPU, min-max normalised (FGD simulator BestFit)"

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        leftover = (
            0.5 * (state.cpu_left[nodes] - req.cpu_milli) / MAX_SPEC_CPU
            + 0.5 * (state.gpu_left_total[nodes] - req.gpu_demand_milli) / MAX_SPEC_GPU
        )
        raw = ((1.0 - leftover) * 100.0).astype(np.int64)
        return min_max_normalise(raw, all_equal=0)

    def native_packing_plan(self) -> dict[str, Any] | None:
        """How packing mode may run this policy compiled (engine/native_packing.py); exact type only."""
        return native_plan(self, BestFit, placement="best-fit", gpus_by="best")


@PLACEMENT_POLICIES.register("least-allocated")
class LeastAllocated(PlacementPolicy):
    """Kubernetes' default scoring (NodeResourcesFit, LeastAllocated): the node with the largest free share of
    its CPU and GPU after placement (equal weights) wins, so jobs spread over the nodes."""

    name = "least-allocated"
    description = "largest free CPU+GPU share after placement: spreads (Kubernetes default LeastAllocated)"

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        spec = state.spec
        cpu_cap = np.maximum(spec.cpu_milli[nodes], 1)
        gpu_cap = np.maximum(spec.gpu_count[nodes] * MILLI, 1)
        cpu_free = (state.cpu_left[nodes] - req.cpu_milli) / cpu_cap
        gpu_free = (state.gpu_left_total[nodes] - req.gpu_demand_milli) / gpu_cap
        both = spec.cpu_milli[nodes] > 0
        free = np.where(both, 0.5 * cpu_free + 0.5 * gpu_free, gpu_free)
        return (free * 100.0).astype(np.int64)


@PLACEMENT_POLICIES.register("dotprod")
class DotProduct(PlacementPolicy):
    """Tetris-style alignment: the node whose free vector has the smallest dot product with the request wins."""

    name = "dotprod"
    description = (
        "smallest normalised dot product of free and requested CPU/GPU (Tetris; -dimext merge -norm max)"
    )

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        dot = (state.cpu_left[nodes] / MAX_SPEC_CPU) * (req.cpu_milli / MAX_SPEC_CPU) + (
            state.gpu_left_total[nodes] / MAX_SPEC_GPU
        ) * (req.gpu_demand_milli / MAX_SPEC_GPU)
        return (100.0 * (1.0 - dot / 2.0)).astype(np.int64)


@PLACEMENT_POLICIES.register("gpu-clustering")
class GpuClustering(PlacementPolicy):
    """Put pods with the same GPU demand kind together (share-gpu, 1-gpu, 2-gpu, ...), then prefer fuller nodes."""

    name = "gpu-clustering"
    description = "co-locate pods of the same GPU kind, then fuller nodes (FGD simulator GpuClustering)"

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        if req.num_gpu == 0:
            return np.zeros(nodes.size, dtype=np.int64)
        fullness = 25 * (MAX_SPEC_GPU - state.gpu_left_total[nodes]) // MAX_SPEC_GPU
        kinds = state.gpu_pod_kinds[nodes]
        kind = 0 if req.is_share else req.num_gpu
        has_kind = kinds[:, kind] > 0
        n_kinds = (kinds > 0).sum(axis=1)
        base = np.where(has_kind, np.where(n_kinds == 1, 75, 50), np.where(n_kinds == 0, 25, 0))
        return base + fullness


@PLACEMENT_POLICIES.register("gpu-packing")
class GpuPacking(PlacementPolicy):
    """Prefer partially used GPUs, then free GPUs on used nodes, then empty nodes (smaller ones first)."""

    name = "gpu-packing"
    description = "shared GPUs > free GPUs on used nodes > empty nodes (FGD simulator GpuPacking)"

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        if req.num_gpu == 0:
            return np.zeros(nodes.size, dtype=np.int64)
        gpu_count = state.spec.gpu_count[nodes]
        free = state.free_gpus[nodes]
        empty = free == gpu_count
        # Case 3: every GPU free: max(33 - free, free) (the lower bound is the free count; discrepancy 5).
        case3 = np.maximum(100 // 3 - free, free)
        rows = state.gpu_left[nodes]
        if req.gpu_milli >= MILLI:
            # Whole GPUs can only use fully free GPUs: case 2 unless the node is empty.
            case2 = np.maximum(100 // 2 - req.num_gpu, 100 // 3)
            return np.where(empty, case3, case2)
        # A shared pod takes the first GPU in ascending-left order that fits (the best-fit GPU).
        fitting = np.where(rows >= req.gpu_milli, rows, MILLI + 1)
        chosen_left = fitting.min(axis=1)
        case2 = np.full(nodes.size, np.maximum(100 // 2 - 1, 100 // 3))
        case1 = np.maximum(100 - (chosen_left * 100 // MILLI) // 10, 100 // 2)
        return np.where(empty, case3, np.where(chosen_left == MILLI, case2, case1))
