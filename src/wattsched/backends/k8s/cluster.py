"""A Kubernetes cluster as a placement policy sees it (docs/live-kubernetes.md §3).

:class:`K8sCluster` keeps the simulator's ``ClusterSpec`` and ``ClusterState`` for the observed nodes, the pods
that hold resources on them (bound or running, as the informer reports them) and the assignments wattsched made
itself that the informer has not confirmed yet (in-flight: a pod bound a moment ago still counts). A placement
policy object (the simulator's, unchanged) filters, scores and places pods on it exactly as in packing mode
(``engine/packing.py``): the same request, the same ``place``, the same ``allocate``.

Which GPUs of a node a pod holds: the ``alibabacloud.com/gpu-index`` annotation when the pod has one (the custom
scheduler writes it), else the policy's own choice for that node (the count is exact; the indices are the
policy's).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ...core.capacity import can_ever_fit
from ...core.cluster import MILLI, ClusterSpec, ClusterState
from ...core.errors import WattschedError
from ...core.jobs import JobTable
from ...core.placement import NodeShare, Placement
from ...core.requests import JobRequest
from ...policies.base import PlacementPolicy, feasible_nodes
from .objects import NodeInfo, PodRequest

log = logging.getLogger("wattsched.k8s")

MAX_EXTENDER_SCORE = 10  # extender/v1 MaxExtenderPriority
UNKNOWN_NODE = "node unknown to wattsched (not in its node list)"


@dataclass(frozen=True)
class FilterResult:
    passed: list[str]
    failed: dict[str, str]  # may fit once capacity is released
    unresolvable: dict[str, str]  # can never fit: preemption should not try these


def spec_from_nodes(
    nodes: Sequence[NodeInfo], default_gpu_model: str, name: str = "kubernetes"
) -> ClusterSpec:
    if not nodes:
        raise WattschedError(f"{name}: the API server lists no nodes")
    models = [(n.gpu_model or default_gpu_model) if n.gpus else "" for n in nodes]
    return ClusterSpec.from_arrays(
        name, [n.name for n in nodes], [n.cpu_milli for n in nodes], [n.memory_mib for n in nodes],
        [n.gpus for n in nodes], models,
    )  # fmt: skip


def workload_of(pods: Iterable[PodRequest]) -> JobTable:
    """A job table of pods, for a policy's ``prepare`` (FGD's typical pods)."""
    pods = list(pods)
    return JobTable.build(
        job_id=[p.key for p in pods], submit_s=[0.0] * len(pods), duration_s=[0.0] * len(pods),
        num_gpu=[p.num_gpu for p in pods], gpu_milli=[p.gpu_milli for p in pods],
        cpu_milli=[p.cpu_milli for p in pods], memory_mib=[p.memory_mib for p in pods],
        gpu_spec=[p.gpu_spec for p in pods], source="kubernetes",
    )  # fmt: skip


class K8sCluster:
    """The mirror; every public method takes the lock (informer threads and HTTP handlers share it)."""

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        policy: PlacementPolicy,
        workload: JobTable,
        seed: int = 42,
        default_gpu_model: str = "A100",
    ):
        self.lock = threading.RLock()
        self.nodes = list(nodes)
        self.spec = spec_from_nodes(self.nodes, default_gpu_model)
        self.state = ClusterState(self.spec)
        self.state.set_available(
            np.array([i for i, n in enumerate(self.nodes) if not n.schedulable], int), False
        )
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.policy = policy
        # As in packing mode (experiments/run.py): the order stream first, then the policy's.
        rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[1])
        policy.bind(self.spec, rng)
        policy.prepare(workload, self.spec)
        self.held: dict[str, tuple[PodRequest, Placement]] = {}  # uid -> what it holds
        self.in_flight: set[str] = set()  # bound by wattsched, not yet seen bound by the informer
        self._masks: dict[str, tuple[int, np.ndarray]] = {}
        self._never: dict[tuple[int, ...], bool] = {}  # per request class: fits no node even when empty
        self._never_reason_cache: dict[tuple[int, ...], np.ndarray] = {}
        self._last_names: list[str] = []
        self._last_positions = np.zeros(0, dtype=np.int64)
        self._largest_by_mask: dict[int, int] = {}

    # ----- requests ---------------------------------------------------------------------------------------------
    def request(self, pod: PodRequest) -> JobRequest:
        mask_id, mask = self._mask(pod.gpu_spec) if pod.num_gpu else (-1, np.ones(self.spec.num_nodes, bool))
        return JobRequest(
            index=0, num_gpu=pod.num_gpu, gpu_milli=pod.gpu_milli, cpu_milli=pod.cpu_milli,
            memory_mib=pod.memory_mib, node_mask=mask, gang=False, mask_id=mask_id,
        )  # fmt: skip

    def _mask(self, gpu_spec: str) -> tuple[int, np.ndarray]:
        found = self._masks.get(gpu_spec)
        if found is None:
            spec = self.spec
            allowed = {m for m in gpu_spec.split("|") if m}
            names = np.array(
                [spec.gpu_models[c] if c >= 0 else "" for c in spec.gpu_model_code], dtype=object
            )
            mask = spec.gpu_model_code >= 0
            if allowed:
                mask &= np.isin(names, list(allowed))
            found = (len(self._masks), mask)
            self._masks[gpu_spec] = found
        return found

    def never_fits(self, req: JobRequest) -> bool:
        key = (req.mask_id, req.num_gpu, req.gpu_milli, req.cpu_milli, req.memory_mib)
        found = self._never.get(key)
        if found is None:
            found = not can_ever_fit(
                self.spec, req.node_mask, req.num_gpu, req.gpu_milli, req.cpu_milli, req.memory_mib, False
            )
            self._never[key] = found
        return found

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        with self.lock:
            node = self.index.get(name)
            if node is not None:
                self.state.set_available(np.array([node]), schedulable)

    # ----- the extender's verbs ----------------------------------------------------------------------------------
    # kube-scheduler sends the same ~1,000 node names with every request: their positions, and each request
    # class's never-fits reasons, are worked out once, and the verbs stay in numpy over them.
    def positions(self, names: Sequence[str]) -> np.ndarray:
        """Each name's node index (-1: not a node wattsched knows), cached for the last list of names."""
        if names != self._last_names:
            index = self.index
            self._last_positions = np.fromiter((index.get(n, -1) for n in names), np.int64, len(names))
            self._last_names = list(names)
        return self._last_positions

    def filter(self, pod: PodRequest, names: Sequence[str]) -> FilterResult:
        with self.lock:
            req = self.request(pod)
            pos = self.positions(names)
            known = pos >= 0
            at = np.where(known, pos, 0)
            reasons = self._never_reasons(req, pod)
            ever = known & (reasons[at] == "")
            now = ever & feasible_nodes(self.state, req)[at]
            state = self.state
            passed = [names[i] for i in np.flatnonzero(now).tolist()]
            failed = {
                names[i]: _busy_reason(state, int(pos[i]), req) for i in np.flatnonzero(ever & ~now).tolist()
            }
            unresolvable = {
                names[i]: str(reasons[pos[i]]) if known[i] else UNKNOWN_NODE
                for i in np.flatnonzero(~ever).tolist()
            }
            return FilterResult(passed, failed, unresolvable)

    def _never_reasons(self, req: JobRequest, pod: PodRequest) -> np.ndarray:
        """Per node: why the request could never fit there, even empty ("" where it can)."""
        key = (req.mask_id, req.num_gpu, req.gpu_milli, req.cpu_milli, req.memory_mib)
        found = self._never_reason_cache.get(key)
        if found is None:
            nodes = np.arange(self.spec.num_nodes)
            ok = req.node_mask & _node_can_ever_host(self.spec, nodes, req)
            found = np.array([""] * self.spec.num_nodes, dtype=object)
            for node in np.flatnonzero(~ok).tolist():
                found[node] = _never_reason(self.spec, node, req, pod)
            self._never_reason_cache[key] = found
        return found

    def scores(self, pod: PodRequest, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions in `names` of the nodes that can take the pod now, their node indices, the policy's raw
        scores for them)."""
        with self.lock:
            req = self.request(pod)
            pos = self.positions(names)
            known = pos >= 0
            ok = known & feasible_nodes(self.state, req)[np.where(known, pos, 0)]
            where = np.flatnonzero(ok)
            nodes = pos[where]
            if nodes.size == 0:
                return where, nodes, np.zeros(0, dtype=np.int64)
            return where, nodes, np.asarray(self.policy.score(self.state, req, nodes), dtype=np.int64)

    def prioritize(self, pod: PodRequest, names: Sequence[str]) -> np.ndarray:
        """0..10 per named node, in order (docs/live-kubernetes.md §3.2): the policy's own pick gets 10, every other
        node its raw score scaled into 0..9, so kube-scheduler's top node is the simulator's whenever wattsched's
        weight dominates; nodes that cannot take the pod now get 0."""
        with self.lock:
            where, nodes, raw = self.scores(pod, names)
            out = np.zeros(len(names), dtype=np.int64)
            if nodes.size:
                best = 0 if nodes.size == 1 else int(np.flatnonzero(nodes == self.policy.pick(raw, nodes))[0])
                out[where] = extender_scores(raw, best)
            return out

    # ----- placing and accounting --------------------------------------------------------------------------------
    def place(self, pod: PodRequest) -> Placement | None:
        """The policy's placement for the pod on the whole cluster now (None: it fits nowhere now)."""
        with self.lock:
            return self.policy.place(self.state, self.request(pod))

    def placement_on(self, pod: PodRequest, node_name: str) -> Placement | None:
        """The pod on a given node (the extender's bind; a pod the informer sees bound): the policy's GPUs."""
        with self.lock:
            node = self.index.get(node_name)
            if node is None:
                return None
            req = self.request(pod)
            if not self._fits_node(req, node):
                return None
            return (
                NodeShare(
                    node, self.policy.choose_gpus(self.state, req, node), req.cpu_milli, req.memory_mib
                ),
            )

    def _fits_node(self, req: JobRequest, node: int) -> bool:
        state = self.state
        return bool(
            state.cpu_left[node] >= req.cpu_milli
            and state.mem_left[node] >= req.memory_mib
            and (
                req.num_gpu == 0
                or (req.gpu_milli >= MILLI and state.free_gpus[node] >= req.num_gpu)
                or (req.gpu_milli < MILLI and state.max_gpu_left[node] >= req.gpu_milli)
            )
        )

    def assume(self, pod: PodRequest, placement: Placement, in_flight: bool = True) -> None:
        """Count the pod's resources as taken (before the API confirms it, for wattsched's own binds)."""
        with self.lock:
            if pod.uid in self.held:
                return
            for node, gpus, cpu, mem in placement:
                self.state.allocate(node, gpus, pod.gpu_milli, cpu, mem)
            self.held[pod.uid] = (pod, placement)
            if in_flight:
                self.in_flight.add(pod.uid)

    def forget(self, uid: str) -> bool:
        """Release what the pod holds (it ended, was deleted, or its bind failed)."""
        with self.lock:
            found = self.held.pop(uid, None)
            self.in_flight.discard(uid)
            if found is None:
                return False
            pod, placement = found
            for node, gpus, cpu, mem in placement:
                self.state.release(node, gpus, pod.gpu_milli, cpu, mem)
            return True

    def observe_pod(self, pod: PodRequest, gpu_index: tuple[int, ...] | None = None) -> bool:
        """Fold one informer report of a pod into the mirror; True when it released capacity."""
        with self.lock:
            if not pod.holds_resources:
                return self.forget(pod.uid)
            held = self.held.get(pod.uid)
            if held is not None:
                held_on = held[1][0][0]
                if str(self.spec.node_names[held_on]) == pod.node_name:
                    self.in_flight.discard(pod.uid)  # confirmed
                    return False
                self.forget(pod.uid)  # bound elsewhere than wattsched assumed (another binder won)
            node = self.index.get(pod.node_name)
            if node is None:
                return False  # a node wattsched does not schedule (not in its node list)
            placement = self._placement_from_index(pod, node, gpu_index) or self.placement_on(
                pod, pod.node_name
            )
            if placement is None:
                log.warning("pod %s runs on %s but the mirror has no room for it there: not counted", pod.key,
                            pod.node_name)  # fmt: skip
                return False
            self.assume(pod, placement, in_flight=False)
            return False

    def _placement_from_index(
        self, pod: PodRequest, node: int, gpu_index: tuple[int, ...] | None
    ) -> Placement | None:
        if not gpu_index or len(gpu_index) != pod.num_gpu:
            return None
        row = self.state.gpu_left[node]
        if any(g >= row.size or row[g] < pod.gpu_milli for g in gpu_index):
            return None
        return (NodeShare(node, tuple(gpu_index), pod.cpu_milli, pod.memory_mib),)


def extender_scores(raw: np.ndarray, best: int) -> np.ndarray:
    """Map a policy's raw scores to the extender's 0..10: the policy's pick (index `best`) 10, the others scaled
    linearly from the lowest raw score (0) to the highest (9)."""
    raw = np.asarray(raw, dtype=np.float64)
    low, high = float(raw.min()), float(raw.max())
    scaled = np.zeros(raw.size) if high <= low else (raw - low) / (high - low) * (MAX_EXTENDER_SCORE - 1)
    out = np.floor(scaled + 0.5).astype(np.int64)
    out[best] = MAX_EXTENDER_SCORE
    return out


def _node_can_ever_host(spec: ClusterSpec, nodes: np.ndarray, req: JobRequest) -> np.ndarray:
    cpu_ok, memory_ok = spec.cpu_milli[nodes] >= req.cpu_milli, spec.memory_mib[nodes] >= req.memory_mib
    ok: npt.NDArray[np.bool_] = cpu_ok & memory_ok
    if req.num_gpu:
        ok &= spec.gpu_count[nodes] >= (req.num_gpu if req.gpu_milli >= MILLI else 1)
    return ok


def _never_reason(spec: ClusterSpec, node: int, req: JobRequest, pod: PodRequest) -> str:
    if req.num_gpu and not req.node_mask[node]:
        if spec.gpu_count[node] == 0:
            return "node has no GPUs"
        return f"GPU model {spec.gpu_models[spec.gpu_model_code[node]]} not in {pod.gpu_spec!r}"
    if spec.gpu_count[node] < req.num_gpu:
        return f"node has {int(spec.gpu_count[node])} GPUs, pod asks for {req.num_gpu}"
    if spec.cpu_milli[node] < req.cpu_milli:
        return f"node has {spec.cpu_milli[node] / MILLI:g} CPUs, pod asks for {req.cpu_milli / MILLI:g}"
    return f"node has {int(spec.memory_mib[node])} MiB, pod asks for {req.memory_mib}"


def _busy_reason(state: ClusterState, node: int, req: JobRequest) -> str:
    if not state.available[node]:
        return "node cordoned or not ready"
    if state.cpu_left[node] < req.cpu_milli:
        return "not enough free CPU"
    if state.mem_left[node] < req.memory_mib:
        return "not enough free memory"
    if req.gpu_milli >= MILLI:
        return f"{int(state.free_gpus[node])} free GPUs, pod asks for {req.num_gpu}"
    return f"no GPU with {req.gpu_milli} milli-GPU left"
