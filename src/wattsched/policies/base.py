"""The policy contract shared by the simulator and every live backend.

A scheduling decision has two stages (Blox-style), each a plug-in registered by name:

* a **queue policy** orders pending jobs and decides which ones may start now (admission, ordering, backfill);
* a **placement policy** filters and scores every node at once and picks GPUs inside the chosen node.

Policies never do I/O and never own the cluster state: they read a :class:`ClusterState` (arrays over nodes) and
return placements. The backend applies them: the simulator to its own state, a live backend to the cluster
manager. :func:`run_pass` is the one entry point both call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import ClassVar, Protocol

import numpy as np

from ..core.capacity import gang_gpus
from ..core.cluster import MILLI, ClusterSpec, ClusterState
from ..core.jobs import JobTable
from ..core.placement import NodeShare, Placement
from ..core.registry import Registry
from ..core.requests import JobRequest


def feasible_nodes(state: ClusterState, req: JobRequest) -> np.ndarray:
    """The shared filter (docs/fgd-pwr.md §1.3): CPU, memory, GPU model, and a GPU slot that fits. Bool [N]."""
    mask = (
        req.node_mask
        & state.available
        & (state.cpu_left >= req.cpu_milli)
        & (state.mem_left >= req.memory_mib)
    )
    if req.num_gpu == 0:
        return mask
    if req.gpu_milli >= MILLI:
        return mask & (state.free_gpus >= req.num_gpu)
    return mask & (state.max_gpu_left >= req.gpu_milli)


def gpus_best(row: np.ndarray, num_gpu: int, milli: int) -> tuple[int, ...]:
    """`best` GPU choice: a share pod takes the fitting GPU with least milli left (first index on ties);
    whole-GPU pods take the lowest-index fully free GPUs."""
    if num_gpu == 0:
        return ()
    if milli >= MILLI:
        return tuple(int(i) for i in np.flatnonzero(row == MILLI)[:num_gpu])
    fitting = np.where(row >= milli, row, MILLI + 1)
    return (int(np.argmin(fitting)),)


def fill_gang(state: ClusterState, req: JobRequest, nodes: list[int], usable: list[int]) -> Placement | None:
    """Take a gang's GPUs from `nodes` in the order given, at most `usable` on each; CPU and memory follow the
    GPUs in proportion (the last node takes the rounding remainder, so totals match the request). None unless
    every GPU is placed."""
    allocs: list[NodeShare] = []
    remaining = req.num_gpu
    cpu_left, mem_left = req.cpu_milli, req.memory_mib
    for node, can_take in zip(nodes, usable, strict=True):
        take = int(min(can_take, remaining))
        if take <= 0:
            continue
        remaining -= take
        cpu = cpu_left if remaining == 0 else int(req.cpu_milli / req.num_gpu * take)
        mem = mem_left if remaining == 0 else int(req.memory_mib / req.num_gpu * take)
        cpu_left -= cpu
        mem_left -= mem
        allocs.append(NodeShare(node, gpus_best(state.gpu_left[node], take, MILLI), cpu, mem))
        if remaining == 0:
            return tuple(allocs)
    return None


class PlacementPolicy(ABC):
    """Scores all feasible nodes in a few array operations; highest score wins.

    Ties go to the node with the smallest rank in a seeded random node order, as in the FGD simulator, where nodes
    are renamed with a seeded permutation prefix and the patched kube-scheduler picks the smallest name
    (docs/fgd-pwr.md §3). If exactly one node passes the filter it is chosen without scoring.
    """

    name: str = ""  # per class; a parameterised policy may name its instances (PwrFgd: pwr_<w>_fgd_<w>)
    description: ClassVar[str] = ""
    reconstructed: ClassVar[bool] = False
    basis: ClassVar[str] = ""
    # True when placement fails only for lack of free capacity, so that a request dominating a failed one fails
    # too until capacity is released (the queue adapter then skips it). Set False for a policy whose answer
    # depends on power, price or co-runners.
    monotone_failures: ClassVar[bool] = True

    def __init__(self) -> None:
        self.rank: np.ndarray = np.zeros(0, dtype=np.int64)
        self.rng: np.random.Generator = np.random.default_rng(0)
        self._rank_weight = 1

    def bind(self, spec: ClusterSpec, rng: np.random.Generator, rank: np.ndarray | None = None) -> None:
        """Attach to a cluster before the first decision: the tie-break order and the policy's random stream."""
        self.rng = rng
        self.rank = (
            rng.permutation(spec.num_nodes).astype(np.int64) if rank is None else rank.astype(np.int64)
        )
        self._rank_weight = spec.num_nodes + 1

    def prepare(self, jobs: JobTable, spec: ClusterSpec) -> None:
        """See the workload once before the first decision (before any shuffle or inflation).

        FGD derives its target workload ("typical pods") here; most policies need nothing.
        """

    @abstractmethod
    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        """Integer scores for the candidate `nodes` (index array); higher is better."""

    def choose_gpus(self, state: ClusterState, req: JobRequest, node: int) -> tuple[int, ...]:
        return gpus_best(state.gpu_left[node], req.num_gpu, req.gpu_milli)

    def pick(self, scores: np.ndarray, nodes: np.ndarray) -> int:
        """Highest score; ties to the smallest rank."""
        key = scores.astype(np.int64) * self._rank_weight - self.rank[nodes]
        return int(nodes[int(np.argmax(key))])

    def place(self, state: ClusterState, req: JobRequest) -> Placement | None:
        if req.gang:
            return self.place_gang(state, req)
        nodes = np.flatnonzero(feasible_nodes(state, req))
        if nodes.size == 0:
            return None
        node = int(nodes[0]) if nodes.size == 1 else self.pick(self.score(state, req, nodes), nodes)
        return (NodeShare(node, self.choose_gpus(state, req, node), req.cpu_milli, req.memory_mib),)

    def place_gang(self, state: ClusterState, req: JobRequest) -> Placement | None:
        """All-or-nothing placement of a job larger than any node: whole GPUs on as few nodes as possible.

        Nodes are taken in order of most free GPUs (ties by rank); each gets CPU and memory in proportion to the
        GPUs it hosts. Returns None unless every GPU can be placed now.
        """
        mask = req.node_mask & state.available & (state.free_gpus > 0)
        if req.per_node > 0:  # exactly per_node GPUs on each of num_gpu / per_node nodes
            mask &= state.free_gpus >= req.per_node
        nodes = np.flatnonzero(mask)
        if nodes.size == 0:
            return None
        if req.per_node > 0:
            order = np.lexsort((self.rank[nodes], -state.free_gpus[nodes]))
            return fill_gang(state, req, nodes[order].tolist(), [req.per_node] * nodes.size)
        usable = gang_gpus(
            state.free_gpus[nodes],
            state.cpu_left[nodes],
            state.mem_left[nodes],
            req.num_gpu,
            req.cpu_milli,
            req.memory_mib,
        )
        if int(usable.sum()) < req.num_gpu:
            return None
        order = np.lexsort((self.rank[nodes], -usable))
        return fill_gang(state, req, nodes[order].tolist(), usable[order].tolist())


class PassContext(Protocol):
    """What a queue policy sees during one scheduling pass (implemented by the simulator and live backends)."""

    now: float
    jobs: JobTable

    def pending(self) -> Iterable[int]:
        """Pending job indices in the queue policy's priority order (a snapshot)."""

    def try_start(self, job: int) -> bool:
        """Place and start `job` now if the placement policy finds room; True on success."""

    def running_release_profile(self) -> tuple[np.ndarray, np.ndarray]:
        """(expected end time, GPUs held) of running jobs, for reservation-based backfill."""

    def free_gpus_total(self) -> int: ...


class QueuePolicy(ABC):
    """Orders the queue and decides which jobs may start; placement is delegated through ``ctx.try_start``."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    reconstructed: ClassVar[bool] = False
    basis: ClassVar[str] = ""

    @abstractmethod
    def priority(self, jobs: JobTable) -> np.ndarray:
        """Sort key per job (lower runs first); computed once per workload."""

    @abstractmethod
    def run_pass(self, ctx: PassContext) -> None:
        """Start what may start now."""

    def admit(self, jobs: JobTable, job: int) -> bool:
        """Admission control; every job is admitted by default."""
        return True


QUEUE_POLICIES: Registry[QueuePolicy] = Registry("queue policy")
PLACEMENT_POLICIES: Registry[PlacementPolicy] = Registry("placement policy")


def run_pass(queue: QueuePolicy, ctx: PassContext) -> None:
    """One scheduling pass: the single call shared by the simulator and live backends."""
    queue.run_pass(ctx)
