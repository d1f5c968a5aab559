"""A simulator workload as Kubernetes objects: the cluster's nodes and the trace's pods in the JSON the API
server sends, with wattsched's annotation names (``objects.py``). For the equivalence tests and the benchmark of
the Kubernetes backends against packing mode (docs/live-kubernetes.md §5)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.cluster import MILLI, ClusterSpec
from ...core.jobs import JobTable
from .fake import make_node, make_pod


def nodes_of(spec: ClusterSpec) -> list[dict[str, Any]]:
    out = []
    for i, name in enumerate(spec.node_names):
        code = int(spec.gpu_model_code[i])
        out.append(
            make_node(
                str(name), int(spec.gpu_count[i]), spec.gpu_models[code] if code >= 0 else "",
                cpu=f"{int(spec.cpu_milli[i])}m", memory=f"{int(spec.memory_mib[i])}Mi",
            )
        )  # fmt: skip
    return out


def pods_of(jobs: JobTable, order: Sequence[int], scheduler: str = "energy-aware") -> list[dict[str, Any]]:
    """One pod per submission (a job submitted twice, as inflation does, is two pods), named in order."""
    out = []
    for k, j in enumerate(order):
        milli = int(jobs.gpu_milli[j])
        out.append(
            make_pod(
                f"pod-{k:06d}", gpus=int(jobs.num_gpu[j]), gpu_milli=milli if milli else MILLI,
                cpu_milli=int(jobs.cpu_milli[j]), memory_mib=int(jobs.memory_mib[j]),
                gpu_model=str(jobs.gpu_spec[j] or ""), scheduler=scheduler,
            )
        )  # fmt: skip
    return out
