"""Kubernetes pods and nodes as wattsched requests and nodes (docs/live-kubernetes.md §2).

Objects are read in their JSON form (camelCase keys, as the API server and the scheduler extender protocol send
them), never through the client's model classes: an extender request carries a raw ``v1.Pod``, and the informer
reads its watch streams undecoded, which is much faster.

Names chosen (those of Alibaba's GPU-sharing scheduler, which the FGD simulator's trace converter writes too;
docs/fgd-pwr.md §1.2):

* whole GPUs: the extended resource ``nvidia.com/gpu`` in a container's requests or limits (summed over
  containers); a node's GPUs from ``status.allocatable["nvidia.com/gpu"]``;
* a share of one GPU: the pod annotation ``alibabacloud.com/gpu-milli`` (milli-GPU per GPU, 1..1000), with
  ``alibabacloud.com/gpu-count`` (default 1; a share pod must use exactly one GPU);
* GPU model: the pod annotation ``alibabacloud.com/gpu-card-model``, an OR-list such as ``V100M16|V100M32`` ("" or
  absent: any model); a node's model from its label ``alibabacloud.com/gpu-card-model``, else the GPU feature
  discovery label ``nvidia.com/gpu.product`` (e.g. ``NVIDIA-A100-SXM4-80GB``), matched to wattsched's GPU catalog;
* CPU and memory: the containers' requests (limits where a request is missing, as Kubernetes defaults them);
  a node's from ``status.allocatable``.

A malformed or unknown value makes the pod a :class:`PodError` with a readable reason; the extender then fails
the pod on every node with that reason, never raising.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...core.cluster import MILLI
from ...core.gpus import GPU_CATALOG

GPU_RESOURCE = "nvidia.com/gpu"
GPU_MILLI_ANNOTATION = "alibabacloud.com/gpu-milli"
GPU_COUNT_ANNOTATION = "alibabacloud.com/gpu-count"
GPU_MODEL_KEY = "alibabacloud.com/gpu-card-model"  # pod annotation and node label
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_INDEX_ANNOTATION = (
    "alibabacloud.com/gpu-index"  # written by the custom scheduler: the GPUs it chose, "0-1"
)

_SUFFIX = {
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


class PodError(ValueError):
    """A pod wattsched cannot read: the reason is shown to the user as a filter failure."""


def parse_quantity(value: Any, what: str) -> float:
    """A Kubernetes quantity (``500m``, ``2``, ``1.5Gi``, ``1e3``) as a number of base units."""
    if isinstance(value, bool):
        raise PodError(f"{what}: {value!r} is not a quantity")
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond any float
            number = math.inf
    else:
        match = _QUANTITY.match(str(value).strip())
        if match is None:
            raise PodError(f"{what}: {value!r} is not a quantity (e.g. 500m, 2, 4Gi)")
        number = float(match.group(1)) * _SUFFIX[match.group(2)]
    if not math.isfinite(number) or number < 0:
        raise PodError(f"{what}: {value!r} must be a finite non-negative quantity")
    return number


def _mapping(obj: Any, what: str) -> Mapping[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise PodError(f"{what} is not an object")
    return obj


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod asks for, in the simulator's units."""

    uid: str
    namespace: str
    name: str
    num_gpu: int
    gpu_milli: int  # per GPU: 1000 whole, less for a share of one GPU, 0 without GPUs
    cpu_milli: int
    memory_mib: int
    gpu_spec: str  # accepted GPU models, "|"-separated; "" = any
    scheduler_name: str = ""
    node_name: str = ""  # bound to (or running on) this node; "" while pending
    phase: str = "Pending"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holds_resources(self) -> bool:
        return bool(self.node_name) and self.phase not in ("Succeeded", "Failed")


def pod_request(pod: Any) -> PodRequest:
    """Read a ``v1.Pod`` (JSON form); :class:`PodError` says what is wrong with it."""
    pod = _mapping(pod, "Pod")
    meta = _mapping(pod.get("metadata"), "Pod.metadata")
    spec = _mapping(pod.get("spec"), "Pod.spec")
    status = _mapping(pod.get("status"), "Pod.status")
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "default")
    if not name:
        raise PodError("Pod.metadata.name is missing")
    where = f"pod {namespace}/{name}"
    annotations = _mapping(meta.get("annotations"), f"{where}: metadata.annotations")
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise PodError(f"{where}: spec.containers is not a list")
    gpus = cpu = mem = 0.0
    for k, c in enumerate(containers):
        resources = _mapping(_mapping(c, f"{where}: container {k}").get("resources"), f"{where}: resources")
        requests = _mapping(resources.get("requests"), f"{where}: resources.requests")
        limits = _mapping(resources.get("limits"), f"{where}: resources.limits")
        merged = {**limits, **requests}  # a missing request defaults to the limit
        cpu += parse_quantity(merged.get("cpu", 0), f"{where}: cpu")
        mem += parse_quantity(merged.get("memory", 0), f"{where}: memory")
        gpus += parse_quantity(merged.get(GPU_RESOURCE, 0), f"{where}: {GPU_RESOURCE}")
    for what, total in (("cpu", cpu * MILLI), ("memory", mem), (GPU_RESOURCE, gpus)):
        if not math.isfinite(total):  # finite quantities, but too large (their sum, or in milli-CPU)
            raise PodError(f"{where}: {what} is too large")
    if gpus != int(gpus):
        raise PodError(f"{where}: {GPU_RESOURCE} must be a whole number, got {gpus:g}")
    num_gpu, gpu_milli = int(gpus), MILLI if gpus else 0
    if GPU_MILLI_ANNOTATION in annotations:
        gpu_milli = _int_annotation(annotations, GPU_MILLI_ANNOTATION, where, 1, MILLI)
        count = _int_annotation(annotations, GPU_COUNT_ANNOTATION, where, 1, 64) if (
            GPU_COUNT_ANNOTATION in annotations
        ) else max(num_gpu, 1)  # fmt: skip
        if gpu_milli < MILLI and count != 1:
            raise PodError(f"{where}: a share of a GPU ({GPU_MILLI_ANNOTATION}={gpu_milli}) must use one GPU")
        num_gpu = count
    gpu_spec = str(annotations.get(GPU_MODEL_KEY) or "").strip()
    models: list[str] = []  # the catalog's names of the models asked for
    for m in gpu_spec.split("|"):
        if not m.strip():
            continue
        model = catalog_model(m.strip())
        if model is None:
            raise PodError(f"{where}: GPU model {m!r} ({GPU_MODEL_KEY}) is not in wattsched's catalog")
        models.append(model)
    return PodRequest(
        uid=str(meta.get("uid") or f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        num_gpu=num_gpu,
        gpu_milli=gpu_milli if num_gpu else 0,
        cpu_milli=math.ceil(cpu * MILLI - 1e-9),
        memory_mib=math.ceil(mem / 2**20 - 1e-9),
        gpu_spec="|".join(models),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
    )


def _int_annotation(annotations: Mapping[str, Any], key: str, where: str, low: int, high: int) -> int:
    text = str(annotations[key]).strip()
    if not re.fullmatch(r"\d{1,18}", text) or not low <= int(text) <= high:  # int() refuses 4,301 digits
        raise PodError(
            f"{where}: annotation {key}={annotations[key]!r} must be a whole number in {low}..{high}"
        )
    return int(text)


def catalog_model(name: str) -> str | None:
    """wattsched's catalog name of a GPU model label: exact (any case), else the longest catalog name contained
    in a GPU feature discovery product string (``NVIDIA-A100-SXM4-80GB`` -> ``A100``)."""
    by_lower = {m.lower(): m for m in GPU_CATALOG}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    tokens = re.split(r"[-_ ]", name.upper())
    found = [m for m in GPU_CATALOG if m.upper() in tokens]
    return max(found, key=len) if found else None


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    gpus: int
    gpu_model: str  # catalog name; "" without GPUs or when unknown
    cpu_milli: int
    memory_mib: int
    schedulable: bool  # not cordoned and Ready


def node_info(node: Any) -> NodeInfo:
    """Read a ``v1.Node`` (JSON form)."""
    node = _mapping(node, "Node")
    meta = _mapping(node.get("metadata"), "Node.metadata")
    name = str(meta.get("name") or "")
    if not name:
        raise PodError("Node.metadata.name is missing")
    where = f"node {name}"
    labels = _mapping(meta.get("labels"), f"{where}: labels")
    status = _mapping(node.get("status"), f"{where}: status")
    allocatable = _mapping(status.get("allocatable"), f"{where}: status.allocatable")
    gpus = parse_quantity(allocatable.get(GPU_RESOURCE, 0), f"{where}: {GPU_RESOURCE}")
    label = str(labels.get(GPU_MODEL_KEY) or labels.get(GPU_PRODUCT_LABEL) or "")
    model = (catalog_model(label) or "") if gpus else ""
    conditions = status.get("conditions") or []
    ready = all(
        str(c.get("status")) == "True"
        for c in conditions
        if isinstance(c, Mapping) and c.get("type") == "Ready"
    )
    spec = _mapping(node.get("spec"), f"{where}: spec")
    return NodeInfo(
        name=name,
        gpus=int(gpus),
        gpu_model=model,
        cpu_milli=round(parse_quantity(allocatable.get("cpu", 0), f"{where}: cpu") * MILLI),
        memory_mib=int(parse_quantity(allocatable.get("memory", 0), f"{where}: memory") / 2**20 + 1e-9),
        schedulable=ready and not spec.get("unschedulable", False),
    )
