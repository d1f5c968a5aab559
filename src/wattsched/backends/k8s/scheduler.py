"""``wattsched serve k8s-scheduler``: a custom Kubernetes scheduler that places pods with a wattsched placement
policy (docs/live-kubernetes.md §4: the custom-scheduler pattern of the Kubernetes docs, "Configure Multiple
Schedulers").

Pods opt in with ``spec.schedulerName``. The scheduler watches nodes and pods (``watcher.py``) and places each
pending pod of its own, in the order the API server reports them, with the policy's ``place`` on the whole
cluster: the call packing mode makes (``engine/packing.py``), so on the same pods it reproduces the simulator's
placements exactly. A placed pod is counted at once (in flight) and bound with a ``v1.Binding``; a 409 Conflict
means another binder won: the pod leaves the in-flight record and its real node comes with the watch. A pod that
fits nowhere now waits (one ``FailedScheduling`` event) and is tried again whenever capacity is released. Events
go out from a background thread, so a slow API server never holds up placement.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ...core.jobs import JobTable
from ...core.placement import Placement
from ...policies.base import PlacementPolicy
from .cluster import K8sCluster
from .informer import api_status
from .objects import PodError, PodRequest
from .watcher import ClusterWatcher

log = logging.getLogger("wattsched.k8s")

BATCH_WAIT_S = 0.05  # events wait this long for others to go out with them


@dataclass
class SchedulerStats:
    bound: int = 0
    conflicts: int = 0  # 409: another binder won
    failed_binds: int = 0
    unschedulable: int = 0  # FailedScheduling reported (once per pod and reason)
    bind_latency_s: list[float] = field(default_factory=list)


class EventSender:
    """Posts Events (``Scheduled``, ``FailedScheduling``) from a background thread; an event the API refuses is
    dropped (it is advice, never worth stopping for)."""

    def __init__(self, api: Any, component: str, enabled: bool = True):
        self.api = api
        self.component = component
        self.enabled = enabled
        # (pod, reason, message, kind) of each event to post
        self.queue: queue.Queue[tuple[PodRequest, str, str, str]] = queue.Queue()
        self.thread: threading.Thread | None = None
        self.posted = 0

    def post(self, pod: PodRequest, reason: str, message: str, kind: str = "Normal") -> None:
        if not self.enabled:
            return
        if self.thread is None:
            self.thread = threading.Thread(target=self._drain, name="k8s-events", daemon=True)
            self.thread.start()
        self.queue.put((pod, reason, message, kind))

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until every queued event went out (tests)."""
        deadline = time.monotonic() + timeout_s
        while self.queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)

    def _drain(self) -> None:
        while True:
            batch = [self.queue.get()]
            # Woken once per batch, not once per pod: a thread that wakes for every event trades the GIL with
            # the placing thread thousands of times (about 2 s over the 8,152 pods of the Alibaba trace).
            time.sleep(BATCH_WAIT_S)
            while True:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            for pod, reason, message, kind in batch:
                try:
                    body = event_body(self.component, pod, reason, message, kind)
                    self.api.create_namespaced_event(pod.namespace, body=body)
                    self.posted += 1
                except Exception as exc:
                    log.debug("event for %s not posted: %s", pod.key, exc)
                finally:
                    self.queue.task_done()


def event_body(component: str, pod: PodRequest, reason: str, message: str, kind: str) -> Any:
    from kubernetes import client

    now = datetime.now(UTC)
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{pod.name}.", namespace=pod.namespace),
        involved_object=client.V1ObjectReference(
            api_version="v1", kind="Pod", name=pod.name, namespace=pod.namespace, uid=pod.uid
        ),
        reason=reason, message=message, type=kind, first_timestamp=now, last_timestamp=now, count=1,
        source=client.V1EventSource(component=component), reporting_component=component,
    )  # fmt: skip


def binding_body(pod: PodRequest, node: str) -> Any:
    """The ``v1.Binding`` of a pod to a node (the client's model: its API calls validate their body's type)."""
    from kubernetes import client

    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod.name, namespace=pod.namespace, uid=pod.uid),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )


def bind(api: Any, pod: PodRequest, node: str, body: Callable[[PodRequest, str], Any] = binding_body) -> None:
    """POST the pod's binding (``_preload_content=False``: the API answers with a Status the client's
    deserialiser cannot read as a Binding; kubernetes-client/python #547, #825)."""
    api.create_namespaced_pod_binding(pod.name, pod.namespace, body=body(pod, node), _preload_content=False)


class CustomScheduler(ClusterWatcher):
    def __init__(
        self,
        api: Any,
        policy: PlacementPolicy,
        scheduler_name: str = "energy-aware",
        seed: int = 42,
        workload: JobTable | None = None,
        default_gpu_model: str = "A100",
        post_events: bool = True,
    ):
        super().__init__(api, policy, seed, workload, default_gpu_model)
        self.scheduler_name = scheduler_name
        self.events = EventSender(api, scheduler_name, post_events)
        self.stats = SchedulerStats()
        self.waiting: OrderedDict[str, PodRequest] = OrderedDict()  # ours, pending, fit nowhere yet
        self.reported: dict[str, str] = {}  # uid -> last FailedScheduling reason (reported once)
        self.placements: dict[str, tuple[str, Placement]] = {}  # uid -> (node, placement) as bound

    def on_pending(self, pod: PodRequest) -> None:
        if pod.scheduler_name != self.scheduler_name:
            return
        cluster = self._mirror()
        if pod.uid in cluster.held or pod.uid in self.waiting:
            return
        self._schedule(cluster, pod)

    def on_released(self) -> None:
        for uid in list(self.waiting):
            pod = self.waiting.pop(uid)
            if uid in self.pending:
                self._schedule(self._mirror(), pod)

    def _mirror(self) -> K8sCluster:
        """The cluster mirror: the watcher calls `on_pending` and `on_released` only once it has one."""
        cluster = self.cluster
        assert cluster is not None, "a scheduling hook ran before the cluster mirror was built"
        return cluster

    def on_unreadable(self, raw: Mapping[str, Any], exc: PodError) -> None:
        spec = raw.get("spec") if isinstance(raw, Mapping) else None
        if isinstance(spec, Mapping) and spec.get("schedulerName") == self.scheduler_name:
            meta = raw.get("metadata")
            if not isinstance(meta, Mapping):
                meta = {}
            pod = PodRequest(str(meta.get("uid") or ""), str(meta.get("namespace") or "default"),
                             str(meta.get("name") or "?"), 0, 0, 0, 0, "")  # fmt: skip
            self._report(pod, f"unreadable pod: {exc}")

    def _schedule(self, cluster: K8sCluster, pod: PodRequest) -> bool:
        if cluster.never_fits(cluster.request(pod)):
            self._report(pod, "fits no node of this cluster, even empty")
            return False
        placement = cluster.place(pod)
        if placement is None:
            self.waiting[pod.uid] = pod
            self._report(pod, "no node has room now; tried again when capacity is released")
            return False
        node = str(cluster.spec.node_names[placement[0][0]])
        cluster.assume(pod, placement)  # counted before the call: the next pod sees it taken
        started = time.perf_counter()
        try:
            bind(self.api, pod, node)
        except Exception as exc:
            cluster.forget(pod.uid)
            if api_status(exc) == 409:  # another binder won: the watch brings the pod's real node
                self.stats.conflicts += 1
                log.info("pod %s was bound by someone else (409 Conflict)", pod.key)
                return False
            self.stats.failed_binds += 1
            self.waiting[pod.uid] = pod
            log.warning(
                "binding %s to %s failed, tried again when capacity is released: %s", pod.key, node, exc
            )
            return False
        self.stats.bind_latency_s.append(time.perf_counter() - started)
        self.stats.bound += 1
        self.placements[pod.uid] = (node, placement)
        self.reported.pop(pod.uid, None)
        gpus = ",".join(str(g) for g in placement[0][1])
        self.events.post(pod, "Scheduled", f"Successfully assigned {pod.key} to {node}"
                         + (f" (GPUs {gpus})" if gpus else "") + f" by {self.policy.name}")  # fmt: skip
        return True

    def _report(self, pod: PodRequest, reason: str) -> None:
        if self.reported.get(pod.uid) == reason:
            return
        self.reported[pod.uid] = reason
        self.stats.unschedulable += 1
        self.events.post(pod, "FailedScheduling", f"{self.policy.name}: {reason}", kind="Warning")

    def run(self, stop: threading.Event) -> None:
        threads = self.start(stop)
        stop.wait()
        for t in threads:
            t.join(timeout=5)
