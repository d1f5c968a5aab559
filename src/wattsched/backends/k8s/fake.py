"""An in-memory stand-in for ``kubernetes.client.CoreV1Api``: the calls wattsched makes, with the API server's
semantics (docs/live-kubernetes.md §5). No control plane can be installed on the test machines, so the
Kubernetes backends are tested against this and against the protocol's JSON fixtures.

* ``list_node`` / ``list_pod_for_all_namespaces`` with ``_preload_content=False``: a list body with its
  ``metadata.resourceVersion``; with ``watch=True``: a stream of the events after ``resource_version``, one JSON
  object a line (the stream ends when no events are left, as a watch ends at its timeout). Events older than
  ``compacted_before`` are gone: such a watch gets an ``ERROR`` event with code 410 (or, with
  ``gone_as_status``, the call fails with status 410, as some servers answer).
* ``field_selector``: ``spec.schedulerName=X`` and ``spec.nodeName=`` (empty: unbound pods), comma-separated.
* ``create_namespaced_pod_binding``: binds an unbound pod (201); a pod already bound, or a binding in
  ``conflicts``, is a 409 Conflict; an unknown pod a 404.
* ``create_namespaced_event``: recorded in ``events``.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


class FakeApiError(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(f"({status}) {reason}")
        self.status = status
        self.reason = reason


@dataclass
class FakeResponse:
    data: bytes = b""
    lines: list[bytes] = field(default_factory=list)
    status: int = 200

    def stream(self, amt: int | None = None, decode_content: bool = False) -> Iterator[bytes]:
        yield from self.lines

    def release_conn(self) -> None: ...


def make_node(name: str, gpus: int, model: str = "A100", cpu: str = "96", memory: str = "768Gi",
              labels: Mapping[str, str] | None = None, unschedulable: bool = False) -> dict[str, Any]:  # fmt: skip
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    node_labels = dict(labels or {})
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
        node_labels.setdefault("alibabacloud.com/gpu-card-model", model)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "spec": {"unschedulable": unschedulable},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


def make_pod(name: str, gpus: int = 0, gpu_milli: int = 1000, cpu_milli: int = 1000, memory_mib: int = 1024,
             gpu_model: str = "", scheduler: str = "energy-aware", namespace: str = "default",
             node: str = "") -> dict[str, Any]:  # fmt: skip
    """A pod as the FGD trace converter writes one: whole GPUs as nvidia.com/gpu, a share as gpu-milli."""
    requests: dict[str, str] = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi"}
    annotations: dict[str, str] = {}
    if gpus and gpu_milli >= 1000:
        requests["nvidia.com/gpu"] = str(gpus)
    elif gpus:
        annotations["alibabacloud.com/gpu-milli"] = str(gpu_milli)
        annotations["alibabacloud.com/gpu-count"] = str(gpus)
    if gpu_model:
        annotations["alibabacloud.com/gpu-card-model"] = gpu_model
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                     "annotations": annotations},
        "spec": {"schedulerName": scheduler, "nodeName": node or None,
                 "containers": [{"name": "main", "image": "train", "resources": {"requests": requests}}]},
        "status": {"phase": "Pending"},
    }  # fmt: skip


class FakeCoreV1Api:
    def __init__(self, nodes: Iterable[Mapping[str, Any]] = (), pods: Iterable[Mapping[str, Any]] = ()):
        self.version = 0
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}  # "namespace/name" -> pod
        # (version, kind, the object then, the watch line): an event's line is written once, when it happens
        self.log: list[tuple[int, str, dict[str, Any], bytes]] = []
        self.compacted_before = 0
        self.gone_as_status = False
        self.conflicts: set[str] = set()  # "namespace/name": the next binding is a 409
        self.events: list[Any] = []
        self.bindings: list[tuple[str, str]] = []  # ("namespace/name", node) in order
        self.calls: list[str] = []
        self.clock = time.time  # the creation time of pods created through the API
        for n in nodes:
            self.add_node(n)
        for p in pods:
            self.add_pod(p)

    # ----- changes a test makes (each one an event) --------------------------------------------------------------
    def _record(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        line = json.dumps({"type": event, "object": obj}).encode() + b"\n"
        self.log.append((self.version, kind, json.loads(line)["object"], line))

    def add_node(self, node: Mapping[str, Any]) -> None:
        obj = copy.deepcopy(dict(node))
        self.nodes[obj["metadata"]["name"]] = obj
        self._record("Node", "ADDED", obj)

    def add_pod(self, pod: Mapping[str, Any]) -> None:
        obj = copy.deepcopy(dict(pod))
        self.pods[_key(obj)] = obj
        self._record("Pod", "ADDED", obj)

    def delete_pod(self, key: str) -> None:
        pod = self.pods.pop(key)
        self._record("Pod", "DELETED", pod)

    def finish_pod(self, key: str) -> None:
        pod = self.pods[key]
        pod["status"]["phase"] = "Succeeded"
        self._record("Pod", "MODIFIED", pod)

    def compact(self) -> None:
        """Forget the event history: watches from an older version get 410 Gone."""
        self.compacted_before = self.version + 1

    # ----- the CoreV1Api calls -----------------------------------------------------------------------------------
    def list_node(self, **kw: Any) -> FakeResponse:
        self.calls.append("list_node" + (" watch" if kw.get("watch") else ""))
        return self._list_or_watch("Node", list(self.nodes.values()), kw)

    def list_pod_for_all_namespaces(self, **kw: Any) -> FakeResponse:
        self.calls.append("list_pod_for_all_namespaces" + (" watch" if kw.get("watch") else ""))
        return self._list_or_watch("Pod", list(self.pods.values()), kw)

    def _list_or_watch(self, kind: str, items: list[dict[str, Any]], kw: Mapping[str, Any]) -> FakeResponse:
        if kw.get("_preload_content", True) is not False:
            raise TypeError("wattsched reads lists and watches undecoded: _preload_content=False")
        match = _selector(kw.get("field_selector"))
        if not kw.get("watch"):
            body = {"kind": f"{kind}List", "metadata": {"resourceVersion": str(self.version)},
                    "items": [o for o in items if match(o)]}  # fmt: skip
            return FakeResponse(data=json.dumps(body).encode())
        since = int(kw.get("resource_version") or 0)
        if since + 1 < self.compacted_before:
            if self.gone_as_status:
                raise FakeApiError(410, "Gone")
            gone = {
                "type": "ERROR",
                "object": {"kind": "Status", "code": 410, "message": "too old resource version"},
            }
            return FakeResponse(lines=[json.dumps(gone).encode() + b"\n"])
        lines = [line for version, k, obj, line in self.log if k == kind and version > since and match(obj)]
        return FakeResponse(lines=lines)

    def create_namespaced_pod_binding(self, name: str, namespace: str, body: Any, **kw: Any) -> FakeResponse:
        key = f"{namespace}/{name}"
        self.calls.append(f"bind {key}")
        pod = self.pods.get(key)
        if pod is None:
            raise FakeApiError(404, f'pods "{name}" not found')
        target = _get(body, "target")
        node = _get(target, "name")
        if key in self.conflicts or pod["spec"].get("nodeName"):
            self.conflicts.discard(key)
            raise FakeApiError(
                409, f'Operation cannot be fulfilled on pods/binding "{name}": pod is already assigned'
            )
        if node not in self.nodes:
            raise FakeApiError(404, f'nodes "{node}" not found')
        pod["spec"]["nodeName"] = node
        self.bindings.append((key, node))
        self._record("Pod", "MODIFIED", pod)
        return FakeResponse(status=201)

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any, **kw: Any) -> FakeResponse:
        key = f"{namespace}/{name}"
        self.calls.append(f"patch {key}")
        return self._patch("Pod", self.pods, key, f'pods "{name}"', body)

    def _patch(
        self, kind: str, store: dict[str, dict[str, Any]], key: str, what: str, body: Any
    ) -> FakeResponse:
        """A JSON merge patch of one stored object, recorded as a MODIFIED event."""
        obj = store.get(key)
        if obj is None:
            raise FakeApiError(404, f"{what} not found")
        _merge(obj, body)
        self._record(kind, "MODIFIED", obj)
        return FakeResponse(status=200)

    def delete_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> FakeResponse:
        """Deleted at once (a grace period is the kubelet's business: there is none here)."""
        key = f"{namespace}/{name}"
        self.calls.append(f"delete {key}")
        if key not in self.pods:
            raise FakeApiError(404, f'pods "{name}" not found')
        self.delete_pod(key)
        return FakeResponse(status=200)

    def create_namespaced_pod(self, namespace: str, body: Any, **kw: Any) -> FakeResponse:
        pod = copy.deepcopy(dict(body))
        pod.setdefault("metadata", {})["namespace"] = namespace
        pod["metadata"].setdefault("creationTimestamp", self.now_text())
        pod.setdefault("status", {"phase": "Pending"})
        key = _key(pod)
        self.calls.append(f"create {key}")
        if key in self.pods:
            raise FakeApiError(409, f'pods "{pod["metadata"]["name"]}" already exists')
        self.add_pod(pod)
        return FakeResponse(status=201)

    def patch_node(self, name: str, body: Any, **kw: Any) -> FakeResponse:
        self.calls.append(f"patch node {name}")
        return self._patch("Node", self.nodes, name, f'nodes "{name}"', body)

    def now_text(self) -> str:
        """Creation time of pods the API creates (the tests set ``clock``)."""
        from datetime import UTC, datetime

        return datetime.fromtimestamp(self.clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def create_namespaced_event(self, namespace: str, body: Any, **kw: Any) -> FakeResponse:
        self.events.append(body)
        return FakeResponse(status=201)


def _merge(obj: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """A JSON merge patch (RFC 7386): objects merge, None deletes, anything else replaces."""
    for k, v in patch.items():
        if v is None:
            obj.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(obj.get(k), dict):
            _merge(obj[k], v)
        else:
            obj[k] = copy.deepcopy(v)


def _key(pod: Mapping[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace') or 'default'}/{meta['name']}"


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name)


def _selector(text: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """``spec.schedulerName=X,spec.nodeName=`` as a predicate over pods."""
    terms: list[tuple[list[str], str]] = []
    for part in (text or "").split(","):
        if not part:
            continue
        path, _, value = part.partition("=")
        terms.append((path.split("."), value))

    def match(obj: Mapping[str, Any]) -> bool:
        for path, value in terms:
            cur: Any = obj
            for step in path:
                cur = cur.get(step) if isinstance(cur, Mapping) else None
            if str(cur or "") != value:
                return False
        return True

    return match
