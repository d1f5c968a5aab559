"""The cluster as wattsched's Kubernetes backends see it: node and pod informers folded into a ``K8sCluster``
mirror (docs/live-kubernetes.md §3). The extender and the custom scheduler both build on :class:`ClusterWatcher`;
the scheduler adds the placing of its own pending pods (``scheduler.py``).

Restarts need no state of wattsched's own: the first list rebuilds the mirror from the API server (nodes, and
every pod bound to one), and a pod wattsched bound a moment before it restarted is listed bound.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from ...core.jobs import JobTable
from ...policies.base import PlacementPolicy
from .cluster import K8sCluster, workload_of
from .informer import Informer
from .objects import GPU_INDEX_ANNOTATION, NodeInfo, PodError, PodRequest, node_info, pod_request

log = logging.getLogger("wattsched.k8s")


def gpu_index(obj: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The GPUs a pod was given, from its ``alibabacloud.com/gpu-index`` annotation (``0-1``), if any."""
    text = str(((obj.get("metadata") or {}).get("annotations") or {}).get(GPU_INDEX_ANNOTATION) or "")
    try:
        return tuple(int(g) for g in text.split("-")) if text else None
    except ValueError:
        return None


class ClusterWatcher:
    def __init__(
        self,
        api: Any,
        policy: PlacementPolicy,
        seed: int = 42,
        workload: JobTable | None = None,
        default_gpu_model: str = "A100",
    ):
        self.api = api
        self.policy = policy
        self.seed = seed
        self.workload = workload  # FGD's typical pods come from it; None: from the pods listed
        self.default_gpu_model = default_gpu_model
        self.cluster: K8sCluster | None = None
        self.nodes: dict[str, NodeInfo] = {}
        self.pending: dict[str, PodRequest] = {}  # uid -> pods not bound yet (any scheduler's)
        self.lock = threading.RLock()
        self.pods_listed_once = False
        self.rebuilds = 0
        self.unreadable = 0
        self.node_informer = Informer("nodes", api.list_node, self._nodes_listed, self._node_event)
        self.pod_informer = Informer(
            "pods", api.list_pod_for_all_namespaces, self._pods_listed, self._pod_event
        )

    # ----- hooks for subclasses ----------------------------------------------------------------------------------
    def on_pending(self, pod: PodRequest) -> None:
        """A pod without a node appeared (or was listed)."""

    def on_released(self) -> None:
        """Capacity was released (a pod ended or was deleted, a node became schedulable)."""

    def on_unreadable(self, raw: Mapping[str, Any], exc: PodError) -> None:
        """A pod wattsched cannot read."""

    # ----- nodes -----------------------------------------------------------------------------------------------
    def _nodes_listed(self, items: list[Mapping[str, Any]]) -> None:
        nodes = {}
        for raw in items:
            try:
                info = node_info(raw)
            except PodError as exc:
                log.warning("node skipped: %s", exc)
                continue
            nodes[info.name] = info
        with self.lock:
            self.nodes = nodes
            self._rebuild()

    def _node_event(self, kind: str, raw: Mapping[str, Any]) -> None:
        try:
            info = node_info(raw)
        except PodError as exc:
            log.warning("node event skipped: %s", exc)
            return
        with self.lock:
            old = self.nodes.pop(info.name, None)
            if kind != "DELETED":
                self.nodes[info.name] = info
            shape = (info.gpus, info.gpu_model, info.cpu_milli, info.memory_mib)
            if (
                kind == "DELETED"
                or old is None
                or (old.gpus, old.gpu_model, old.cpu_milli, old.memory_mib) != shape
            ):
                self._rebuild()  # the node set or a node's shape changed: a new spec
            elif old.schedulable != info.schedulable and self.cluster is not None:
                self.cluster.set_schedulable(info.name, info.schedulable)
                if info.schedulable:
                    self.on_released()

    def _rebuild(self) -> None:
        """A new mirror for the current nodes, the pods counted again from a fresh list (pod events the watch
        still delivers from before are harmless: counting and placing are idempotent per pod)."""
        self.rebuilds += 1
        if self.pods_listed_once:
            self.pod_informer.list()

    # ----- pods ------------------------------------------------------------------------------------------------
    def _pods_listed(self, items: list[Mapping[str, Any]]) -> None:
        pods = []
        for raw in items:
            try:
                pods.append((pod_request(raw), gpu_index(raw)))
            except PodError as exc:
                self._unreadable(raw, exc)
        with self.lock:
            self.pods_listed_once = True
            self.pending = {p.uid: p for p, _ in pods if not p.node_name and p.phase == "Pending"}
            if not self.nodes:
                log.warning("no nodes listed: nothing to schedule on yet")
                self.cluster = None
                return
            workload = self.workload if self.workload is not None else workload_of(p for p, _ in pods)
            self.cluster = K8sCluster(
                list(self.nodes.values()), self.policy, workload, self.seed, self.default_gpu_model
            )
            for pod, index in pods:
                if pod.holds_resources:
                    self.cluster.observe_pod(pod, index)
            for pod in list(self.pending.values()):
                self.on_pending(pod)

    def _pod_event(self, kind: str, raw: Mapping[str, Any]) -> None:
        try:
            pod = pod_request(raw)
        except PodError as exc:
            self._unreadable(raw, exc)
            return
        with self.lock:
            cluster = self.cluster
            if kind == "DELETED":
                self.pending.pop(pod.uid, None)
                if cluster is not None and cluster.forget(pod.uid):
                    self.on_released()
                return
            if pod.node_name or pod.phase != "Pending":
                self.pending.pop(pod.uid, None)
                if cluster is not None and cluster.observe_pod(pod, gpu_index(raw)):
                    self.on_released()
                return
            self.pending[pod.uid] = pod
            if cluster is not None:
                self.on_pending(pod)

    def _unreadable(self, raw: Mapping[str, Any], exc: PodError) -> None:
        self.unreadable += 1
        log.warning("%s", exc)
        self.on_unreadable(raw, exc)

    # ----- running -----------------------------------------------------------------------------------------------
    def sync(self) -> int:
        """One synchronous round: list what is not listed yet, then read every event the watches have now (the
        fake API's watches end when they run dry). For tests and benchmarks; returns the events handled."""
        if not self.node_informer.resource_version:
            self.node_informer.list()
        if not self.pods_listed_once:
            self.pod_informer.list()
        return self.node_informer.watch_once() + self.pod_informer.watch_once()

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        """List, then watch nodes and pods, each in its own thread, until `stop` is set. Setting it ends the
        watches in progress at once (a real API server keeps an idle watch open for minutes), so the threads
        end within moments."""
        self.node_informer.list()
        self.pod_informer.list()
        informers = (self.node_informer, self.pod_informer)
        threads = [
            threading.Thread(target=informer.run, args=(stop,), name=f"k8s-{informer.kind}", daemon=True)
            for informer in informers
        ]

        def close_on_stop() -> None:
            stop.wait()
            for informer in informers:
                informer.close()

        threading.Thread(target=close_on_stop, name="k8s-stop", daemon=True).start()
        for t in threads:
            t.start()
        return threads
