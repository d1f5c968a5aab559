"""What a node can host: the capacity checks that placement, the engine and power managers share.

Pure functions over the cluster's arrays; nothing here knows about policies or the simulator.
"""

from __future__ import annotations

import numpy as np

from .cluster import MILLI, ClusterSpec


def gang_gpus(gpus: np.ndarray, cpu: np.ndarray, mem: np.ndarray, num_gpu: int, cpu_req: int, mem_req: int):
    """GPUs of a gang each node can host: its `gpus`, limited by the CPU and memory it has for the gang's
    per-GPU share (a gang takes CPU and memory in proportion to the GPUs on each node)."""
    usable = np.asarray(gpus, dtype=np.int64).copy()
    if cpu_req > 0:
        usable = np.minimum(usable, (np.asarray(cpu) // (cpu_req / num_gpu)).astype(np.int64))
    if mem_req > 0:
        usable = np.minimum(usable, (np.asarray(mem) // (mem_req / num_gpu)).astype(np.int64))
    return usable


def empty_node_hosts(
    spec: ClusterSpec, mask: np.ndarray, ngpu: int, milli: int, cpu: int, mem: int, nodes=slice(None)
) -> np.ndarray:
    """Which of `nodes` could host the request alone when empty: GPU model, CPU, memory and GPU count."""
    hosts = mask[nodes] & (spec.cpu_milli[nodes] >= cpu) & (spec.memory_mib[nodes] >= mem)
    if ngpu > 0:
        hosts &= spec.gpu_count[nodes] >= (ngpu if milli >= MILLI else 1)
    return hosts


def can_ever_fit(
    spec: ClusterSpec, mask: np.ndarray, ngpu: int, milli: int, cpu: int, mem: int, gang: bool
) -> bool:
    """Whether the request fits on the empty cluster: on one node, or (gangs only) spread over several."""
    if bool(empty_node_hosts(spec, mask, ngpu, milli, cpu, mem).any()):
        return True
    if ngpu == 0 or not gang or milli < MILLI:
        return False
    hostable = gang_gpus(spec.gpu_count, spec.cpu_milli, spec.memory_mib, ngpu, cpu, mem)
    return int(hostable[mask].sum()) >= ngpu
