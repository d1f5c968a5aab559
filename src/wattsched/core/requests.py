"""What jobs ask for: one job's :class:`JobRequest` as a placement policy sees it, and the per-workload
:class:`RequestBook` (GPU-model masks, gang flags, never-fits checks) that the simulator's two modes, the live
mirror and the policies' planning helpers build requests from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .capacity import can_ever_fit
from .cluster import MILLI, ClusterSpec
from .jobs import JobTable, spec_masks


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What one job asks for, as a placement policy sees it."""

    index: int
    num_gpu: int
    gpu_milli: int  # per GPU; 1000 whole, <1000 shared pod on one GPU, 0 CPU-only
    cpu_milli: int
    memory_mib: int
    node_mask: np.ndarray  # bool [N]: nodes whose GPU model the job accepts
    gang: bool  # needs more GPUs than any single eligible node has: spread over several nodes
    mask_id: int = -1  # identifies node_mask (equal ids, equal masks); -1 for a job without GPUs
    per_node: int = (
        0  # a gang's GPUs on each of its nodes when fixed (a Slurm job of N nodes x G GPUs); 0: any split
    )

    @property
    def is_share(self) -> bool:
        return self.num_gpu == 1 and 0 < self.gpu_milli < MILLI

    @property
    def gpu_demand_milli(self) -> int:
        return self.num_gpu * self.gpu_milli


@dataclass
class RequestBook:
    """Builds :class:`JobRequest` objects and knows which jobs can never fit on this cluster."""

    jobs: JobTable
    spec: ClusterSpec
    spec_id: np.ndarray  # [J]
    node_mask_by_spec: np.ndarray  # bool [S, N]
    gang: np.ndarray  # bool [J]
    never_fits: np.ndarray  # bool [J]
    request_class: np.ndarray  # int [J]: equal ids, equal requests (GPU-model mask, GPUs, share, CPU, memory)
    per_node: np.ndarray | None = (
        None  # int [J]: a gang's fixed GPUs per node (live Slurm jobs); None: any split
    )

    @staticmethod
    def build(jobs: JobTable, spec: ClusterSpec) -> RequestBook:
        spec_id, allowed = spec_masks(jobs, spec)
        has_gpu_node = spec.gpu_model_code >= 0
        code = np.where(has_gpu_node, spec.gpu_model_code, 0)
        node_mask = allowed[:, code] & has_gpu_node[None, :]  # [S, N]
        # CPU-only jobs may run on any node, GPU or not.
        cpu_only = jobs.num_gpu == 0
        any_node = np.ones(spec.num_nodes, dtype=bool)
        max_gpus_by_spec = np.array(
            [int(spec.gpu_count[m].max()) if m.any() else 0 for m in node_mask], dtype=np.int64
        )
        # An inference service-hour's GPUs are independent replicas (docs/cedla.md §1.4), so they may spread over
        # nodes like a gang; a single-node request would strand the free GPUs that other services leave behind.
        replicas = ~np.isnan(jobs.request_rate_rps) & (jobs.gpu_milli >= MILLI) & (jobs.num_gpu > 1)
        gang = (~cpu_only) & ((jobs.num_gpu > max_gpus_by_spec[spec_id]) | replicas)
        never = np.zeros(len(jobs), dtype=bool)
        # Evaluate the never-fits test once per distinct request class.
        key = np.stack(
            [spec_id, jobs.num_gpu, jobs.gpu_milli, jobs.cpu_milli, jobs.memory_mib, gang.astype(np.int64)],
            axis=1,
        )
        classes, inverse = _unique_rows(key)
        for c, (sid, ngpu, milli, cpu, mem, is_gang) in enumerate(classes):
            mask = any_node if ngpu == 0 else node_mask[sid]
            fits = can_ever_fit(spec, mask, int(ngpu), int(milli), int(cpu), int(mem), bool(is_gang))
            never[inverse == c] = not fits
        return RequestBook(jobs, spec, spec_id, node_mask, gang, never, inverse.astype(np.int64))

    def request(self, j: int) -> JobRequest:
        jobs = self.jobs
        num_gpu = int(jobs.num_gpu[j])
        return JobRequest(
            index=j,
            num_gpu=num_gpu,
            gpu_milli=int(jobs.gpu_milli[j]),
            cpu_milli=int(jobs.cpu_milli[j]),
            memory_mib=int(jobs.memory_mib[j]),
            node_mask=self.node_mask_by_spec[self.spec_id[j]]
            if num_gpu > 0
            else _all_true(self.spec.num_nodes),
            gang=bool(self.gang[j]),
            mask_id=int(self.spec_id[j]) if num_gpu > 0 else -1,
            per_node=0 if self.per_node is None or not self.gang[j] else int(self.per_node[j]),
        )


def _unique_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, axis=0, return_inverse=True)`` for an int64 matrix (rows in lexicographic order), by one
    lexsort: 10x faster than numpy's sort of the rows as structured records."""
    if len(key) == 0:
        return key[:0], np.zeros(0, dtype=np.int64)
    order = np.lexsort(key.T[::-1])
    rows = key[order]
    first = np.empty(len(rows), dtype=bool)
    first[0] = True
    first[1:] = (rows[1:] != rows[:-1]).any(axis=1)
    inverse = np.empty(len(rows), dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    return rows[first], inverse


_ALL_TRUE: dict[int, np.ndarray] = {}


def _all_true(n: int) -> np.ndarray:
    if n not in _ALL_TRUE:
        arr = np.ones(n, dtype=bool)
        arr.setflags(write=False)
        _ALL_TRUE[n] = arr
    return _ALL_TRUE[n]
