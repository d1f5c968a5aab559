"""Fragmentation Gradient Descent (FGD) placement, as the FGD simulator implements it (docs/fgd-pwr.md §1.4, §2, §3).

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent",
USENIX ATC'23; reference code ``hkust-adsl/kubernetes-scheduler-simulator`` (``pkg/utils/frag.go``,
``pkg/simulator/plugin/fgd_score.go``). This is an independent reimplementation.

Fragmentation of node n against the target workload M ("typical pods", classes m with probability p_m):
``F_n(M) = sum_m p_m F_n(m)`` where ``F_n(m)`` is all idle GPU milli of the node unless the node can host m (case
Q3), in which case only the GPUs with less than ``m.milli`` left count. Hence, with integer class counts c_m and
``C = sum c_m``::

    C * F_n(M) = C * idle(n) - sum_{m in Q3(n)} c_m * sum_ge(n, m.milli)

where ``sum_ge(n, t)`` is the milli left on GPUs with at least t left. Everything is computed in exact integers,
so "fragmentation unchanged" gives exactly the FGD score 50, as in the Go code, and per-node values only need
per-threshold GPU counts and sums, which vectorise over nodes and over hypothetical placements.

Packing runs score in C (engine/packing_kernel.c, the same integers); the score's ``exp`` is numpy's wherever C's
could truncate differently (:meth:`FragModel.exact_sigmoid_score`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.cluster import MILLI, ClusterSpec, ClusterState
from ..core.jobs import JobTable, spec_matrix
from ..core.requests import JobRequest
from .base import PLACEMENT_POLICIES, PlacementPolicy

POPULARITY_THRESHOLD = 95.0  # % of pods the typical classes must cover (the experiment scripts pass 95)
INCREASE_STEP = 1  # classes added per step (the experiment scripts pass 1)

# Fragmentation cases of one node for one class (frag.go GetNodePodFrag), in the Go bucket order.
Q1, Q2, Q3, Q4, XL, XR, NA = "Q1", "Q2", "Q3", "Q4", "XL", "XR", "NA"


@dataclass(frozen=True)
class TypicalPods:
    """The target workload M: the most frequent request classes, with counts (p_m = count / count.sum())."""

    cpu_milli: np.ndarray  # int64 [M]
    gpu_milli: np.ndarray  # int64 [M] per GPU (0 for CPU-only)
    num_gpu: np.ndarray  # int64 [M]
    gpu_spec: tuple[str, ...]  # OR-list of GPU models; "" = any
    count: np.ndarray  # int64 [M] pods of each kept class
    total_pods: int  # pods in the workload
    total_classes: int  # distinct classes before the cut

    def __len__(self) -> int:
        return len(self.count)

    @property
    def prob(self) -> np.ndarray:
        return self.count / self.count.sum()

    @property
    def coverage(self) -> float:
        """Share of all pods the kept classes account for."""
        return float(self.count.sum()) / self.total_pods if self.total_pods else 0.0


def typical_pods(
    jobs: JobTable, threshold_pct: float = POPULARITY_THRESHOLD, step: int = INCREASE_STEP
) -> TypicalPods:
    """Typical pods of a workload (frag.go GetTypicalPods with isInvolvedCpuPods=true, gpuResWeight=0).

    Classes are keyed by (CPU, GPU milli, GPU count, GPU spec) and sorted by count, ties to the larger CPU, GPU
    milli, GPU count, then spec; classes are added `step` at a time until they cover `threshold_pct` % of pods.
    """
    counts: dict[tuple[int, int, int, str], int] = {}
    for key in zip(
        jobs.cpu_milli.tolist(),
        jobs.gpu_milli.tolist(),
        jobs.num_gpu.tolist(),
        [str(s) for s in jobs.gpu_spec.tolist()],
        strict=True,
    ):
        counts[key] = counts.get(key, 0) + 1
    # Descending on the whole (count, cpu, milli, num, spec) tuple = Go's sort.Reverse on TargetPodList.Less.
    ranked = sorted(((c, *k) for k, c in counts.items()), reverse=True)
    total = len(jobs)
    expected = threshold_pct * total / 100.0
    kept = 0
    cum = 0
    while cum < expected and kept < len(ranked):
        upto = min(kept + max(step, 1), len(ranked))
        cum += sum(r[0] for r in ranked[kept:upto])
        kept = upto
    rows = ranked[:kept]
    return TypicalPods(
        cpu_milli=np.array([r[1] for r in rows], dtype=np.int64),
        gpu_milli=np.array([r[2] for r in rows], dtype=np.int64),
        num_gpu=np.array([r[3] for r in rows], dtype=np.int64),
        gpu_spec=tuple(r[4] for r in rows),
        count=np.array([r[0] for r in rows], dtype=np.int64),
        total_pods=total,
        total_classes=len(ranked),
    )


def sub_rows(rows: np.ndarray, num_gpu: int, milli: int) -> np.ndarray:
    """``NodeResource.Sub`` on GPU rows: walk GPUs in ascending milli left (stable) and take the first `num_gpu`
    with at least `milli` left. Rows of a node that cannot fit are returned with as many GPUs taken as fit."""
    if num_gpu <= 0 or milli <= 0:
        return rows.copy()
    order = np.argsort(rows, axis=-1, kind="stable")
    srt = np.take_along_axis(rows, order, axis=-1)
    fit = srt >= milli
    take = fit & (np.cumsum(fit, axis=-1) <= num_gpu)
    out = np.empty_like(rows)
    np.put_along_axis(out, order, srt - milli * take, axis=-1)
    return out


def sigmoid_score(delta_scaled: np.ndarray, scale: float) -> np.ndarray:
    """``int64(sigmoid(dF / 1000) * 100)`` with ``dF = delta_scaled / scale`` (Go truncates toward zero)."""
    x = delta_scaled / (scale * 1000.0)
    return ((1.0 / (1.0 + np.exp(-x))) * 100.0).astype(np.int64)


class FragModel:
    """Node fragmentation against a fixed set of typical pods, vectorised over any batch of node states.

    Values returned by the ``*_scaled`` methods are ``C * F`` in exact int64, with ``C = scale`` the sum of the
    typical class counts; divide by :attr:`scale` for milli-GPU.
    """

    def __init__(self, spec: ClusterSpec, typical: TypicalPods):
        self.spec = spec
        self.typical = typical
        self.scale = int(typical.count.sum())  # C; 0 only for an empty workload, where F = 0 everywhere
        self._div = max(self.scale, 1)
        gpu = typical.gpu_milli > 0
        self.thr = np.unique(typical.gpu_milli[gpu]).astype(np.int64)  # thresholds, ascending
        self.cls_t = np.searchsorted(self.thr, typical.gpu_milli[gpu])
        self.cls_cpu = typical.cpu_milli[gpu]
        self.cls_num = typical.num_gpu[gpu]
        self.cls_w = typical.count[gpu]
        models = spec.gpu_models
        # Row per model code; the extra last row (code -1: node without GPUs) is never accessible.
        acc = np.zeros((len(models) + 1, int(gpu.sum())), dtype=bool)
        spec_id, allowed = spec_matrix(np.asarray(typical.gpu_spec, dtype=object)[gpu], spec)
        acc[: len(models)] = allowed[spec_id, : len(models)].T
        self.acc = acc
        self.all_access = bool(acc[:-1].all()) if len(models) else True
        self.node_model = spec.gpu_model_code

    # -- building blocks -------------------------------------------------------------------------------------
    def stats(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per threshold t: GPUs with >= t left and their milli sum ([..., T] each); idle milli [...]."""
        ge = rows[..., None, :] >= self.thr[:, None]
        cnt = ge.sum(axis=-1)
        sm = np.where(ge, rows[..., None, :], 0).sum(axis=-1)
        idle = np.where(rows > 0, rows, 0).sum(axis=-1)
        return cnt, sm, idle

    def from_stats(
        self, cnt: np.ndarray, sm: np.ndarray, idle: np.ndarray, cpu: np.ndarray, model: np.ndarray
    ) -> np.ndarray:
        """``C * F_n(M)`` from threshold statistics (broadcasting over leading axes)."""
        cg = cnt[..., self.cls_t]
        q3 = (cg >= self.cls_num) & (np.asarray(cpu)[..., None] >= self.cls_cpu)
        if not self.all_access:
            q3 &= self.acc[model]
        red = np.where(q3, sm[..., self.cls_t], 0) @ self.cls_w
        return self.scale * idle - red

    # -- public ----------------------------------------------------------------------------------------------
    def frag_scaled(self, rows: np.ndarray, cpu: np.ndarray, model: np.ndarray) -> np.ndarray:
        cnt, sm, idle = self.stats(rows)
        return self.from_stats(cnt, sm, idle, cpu, model)

    def node_frag(self, state: ClusterState, nodes: np.ndarray | None = None) -> np.ndarray:
        """F_n(M) in milli-GPU for the given nodes (all when None)."""
        idx = slice(None) if nodes is None else nodes
        return self.frag_scaled(state.gpu_left[idx], state.cpu_left[idx], self.node_model[idx]) / self._div

    def exact_sigmoid_score(self, delta_scaled: int) -> int:
        """:func:`sigmoid_score` of one change ``C * dF``, with numpy as the vectorised code computes it (the
        compiled packing loop asks for the values its own exp cannot settle)."""
        return int(sigmoid_score(np.array([delta_scaled], dtype=np.int64), self._div)[0])

    def cluster_frag(self, state: ClusterState) -> tuple[float, float]:
        """(F(M) = sum of node fragmentation, total idle GPU milli); frag ratio = first / second."""
        return float(self.node_frag(state).sum()), float(state.gpu_left_total.sum())

    def fgd_scores(
        self, rows: np.ndarray, cpu: np.ndarray, model: np.ndarray, req_cpu: int, req_milli: int, req_num: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """FGD node score and, for a share pod, the chosen GPU (first index reaching the best score; -1
        otherwise) for a batch of nodes that can host the request (fgd_score.go calculateGpuShareFragExtendScore).
        """
        k = rows.shape[0]
        cnt, sm, idle = self.stats(rows)
        f0 = self.from_stats(cnt, sm, idle, cpu, model)
        cpu1 = cpu - req_cpu
        no_gpu = np.full(k, -1, dtype=np.int64)
        if req_num == 0 or req_milli <= 0:
            f1 = self.from_stats(cnt, sm, idle, cpu1, model)
            return sigmoid_score(f0 - f1, self._div), no_gpu
        if req_milli >= MILLI:
            # Whole GPUs: req_num fully free GPUs drop from 1000 to 0, below every threshold.
            take = req_num * MILLI
            f1 = self.from_stats(cnt - req_num, sm - take, idle - take, cpu1, model)
            return sigmoid_score(f0 - f1, self._div), no_gpu
        if req_num > 1:
            # Several partial GPUs: not produced by the traces (the Go allocator rejects it); generic Sub.
            f1 = self.frag_scaled(sub_rows(rows, req_num, req_milli), cpu1, model)
            return sigmoid_score(f0 - f1, self._div), no_gpu
        # Share pod: one hypothetical state per GPU; GPU g drops from v to v - milli.
        v = rows
        v1 = rows - req_milli
        ge0 = v[..., None] >= self.thr  # [K, G, T]
        ge1 = v1[..., None] >= self.thr
        cnt1 = cnt[:, None, :] - ge0 + ge1
        sm1 = sm[:, None, :] - np.where(ge0, v[..., None], 0) + np.where(ge1, v1[..., None], 0)
        f1 = self.from_stats(cnt1, sm1, (idle - req_milli)[:, None], cpu1[:, None], model[:, None])
        s = sigmoid_score(f0[:, None] - f1, self._div)
        s = np.where(v >= req_milli, s, -1)
        best = s.argmax(axis=1)
        return s[np.arange(k), best], best


class _ScoreCache:
    """FGD scores per request class and node, valid while the node's GPUs and CPU are unchanged.

    After each pod only one node changes, so almost every (node, class) score is reused; the cache finds changed
    nodes by comparing the state with a snapshot (robust to releases in temporal mode and to any engine).
    """

    def __init__(self) -> None:
        self.state: ClusterState | None = None
        self.version = np.zeros(0, dtype=np.int64)
        self.snap_gpu = np.zeros((0, 0), dtype=np.int64)
        self.snap_cpu = np.zeros(0, dtype=np.int64)
        self.entries: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def sync(self, state: ClusterState) -> None:
        if state is not self.state or self.snap_gpu.shape != state.gpu_left.shape:
            self.state = state
            self.version = np.zeros(state.spec.num_nodes, dtype=np.int64)
            self.snap_gpu = state.gpu_left.copy()
            self.snap_cpu = state.cpu_left.copy()
            self.entries.clear()
            return
        changed = (state.gpu_left != self.snap_gpu).any(axis=1) | (state.cpu_left != self.snap_cpu)
        idx = np.flatnonzero(changed)
        if idx.size:
            self.version[idx] += 1
            self.snap_gpu[idx] = state.gpu_left[idx]
            self.snap_cpu[idx] = state.cpu_left[idx]

    def node_current(self, state: ClusterState, node: int) -> bool:
        """Whether `node` still matches the snapshot (cheap single-row check)."""
        return (
            state is self.state
            and self.snap_cpu[node] == state.cpu_left[node]
            and bool((self.snap_gpu[node] == state.gpu_left[node]).all())
        )

    def entry(self, key: tuple[int, int, int], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        found = self.entries.get(key)
        if found is None:
            found = (np.zeros(n, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64))
            self.entries[key] = found
        return found


@PLACEMENT_POLICIES.register("fgd")
class FGD(PlacementPolicy):
    """Place where the expected fragmentation of the typical workload grows least (score int(100*sigmoid(-dF/1000)))."""

    name = "fgd"
    description = "fragmentation gradient descent against the workload's typical pods (FGD, ATC'23)"

    def __init__(self, threshold_pct: float = POPULARITY_THRESHOLD) -> None:
        super().__init__()
        self.threshold_pct = threshold_pct
        self.model: FragModel | None = None
        self._cache = _ScoreCache()

    def prepare(self, jobs: JobTable, spec: ClusterSpec) -> None:
        self.model = FragModel(spec, typical_pods(jobs, self.threshold_pct))
        self._cache = _ScoreCache()

    def _model(self) -> FragModel:
        if self.model is None:
            raise RuntimeError("FGD needs the workload's typical pods: call prepare(jobs, spec) first")
        return self.model

    def native_packing_plan(self) -> dict[str, Any] | None:
        """How packing mode may run this policy compiled (engine/native_packing.py); exact type, once prepared."""
        if type(self) is not FGD or self.model is None:
            return None
        return {
            "placement": "weighted",
            "w_pwr": 0,
            "w_fgd": 1,
            "gpus_by": "fgd",
            "fgd": self.model,
            "exact_score": self.model.exact_sigmoid_score,
            "rank": self.rank,
            "rank_weight": self._rank_weight,
        }

    def _ensure(
        self, state: ClusterState, req: JobRequest, nodes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        model = self._model()
        cache = self._cache
        cache.sync(state)
        key = (req.cpu_milli, req.gpu_milli, req.num_gpu)
        score, gpu, stamp = cache.entry(key, state.spec.num_nodes)
        stale = nodes[stamp[nodes] != cache.version[nodes]]
        if stale.size:
            s, g = model.fgd_scores(
                state.gpu_left[stale],
                state.cpu_left[stale],
                model.node_model[stale],
                req.cpu_milli,
                req.gpu_milli,
                req.num_gpu,
            )
            score[stale] = s
            gpu[stale] = g
            stamp[stale] = cache.version[stale]
        return score, gpu

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        if req.num_gpu == 0 and req.cpu_milli == 0 and req.memory_mib == 0:
            return np.full(nodes.size, 100, dtype=np.int64)  # requests nothing (fgd_score.go: MaxNodeScore)
        score, _ = self._ensure(state, req, nodes)
        return score[nodes]

    def choose_gpus(self, state: ClusterState, req: JobRequest, node: int) -> tuple[int, ...]:
        """Share pods: the GPU that scored best (first index on ties); whole pods: lowest-index free GPUs."""
        if not req.is_share:
            return super().choose_gpus(state, req, node)
        key = (req.cpu_milli, req.gpu_milli, req.num_gpu)
        cache = self._cache
        found = cache.entries.get(key)
        if found is not None and cache.node_current(state, node) and found[2][node] == cache.version[node]:
            return (int(found[1][node]),)
        _, gpu = self._ensure(state, req, np.array([node], dtype=np.int64))
        return (int(gpu[node]),)
