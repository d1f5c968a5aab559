"""Buddy allocation with network packing: the placement PowerFlow-reconstructed uses (docs/powerflow.md,
"Buddy allocation and network packing"; background in docs/seed-systems.md §2 and docs/baselines.md, ElasticFlow).

GPU slots of a node are indexed 0..G-1; the nodes of a switch are listed in node-index order (only nodes the job's
GPU model mask accepts). A block of size s is *aligned* when it starts at a multiple of s in that order. Blocks of
power-of-two sizes then nest as in a buddy allocator: a free block of 2s is two free buddies of s.

Rules (n = GPUs asked for):

1. **Fallbacks.** A request for a share of one GPU, a CPU-only request, or a whole-GPU request whose n is not a
   power of two is placed as :class:`~wattsched.policies.planning.Consolidated` places it (Tiresias `yarn`: the
   fullest node that fits, lowest-index free GPUs; a gang on whole free nodes under one switch).
2. **Inside one node** (n = 2^k and some eligible node has at least n GPUs; the request is not a gang). Candidates
   are the blocks of GPU slots [b·n, (b+1)·n) that are all free, on nodes that pass the shared filter
   (:func:`~wattsched.policies.base.feasible_nodes`: GPU model, node available, CPU and memory). Each candidate
   lies in one *maximal* free aligned block (the largest aligned block around it, of size n, 2n, 4n, ..., that is
   entirely free). The candidate whose maximal free block is smallest wins: the buddy allocator splits the smallest
   free block that fits, so the largest free aligned blocks stay whole. Ties: the node with fewer free GPUs
   (packing), then the smaller node rank, then the lower block index.
3. **Whole nodes** (n = 2^k larger than every eligible node: a gang). Every eligible node must have the same GPU
   count G, a power of two (else rule 1's fallback); the job takes m = n / G whole nodes. A node is *free* for the
   job when it is available, all its G GPUs are free and its CPU and memory left cover the job's per-node share
   (G of the n GPUs' share, as :func:`~wattsched.core.capacity.gang_gpus` counts it).

   a. *One switch* (some switch could ever hold the job: it has an aligned group of m nodes that could each host
      the share when empty). Candidates are the aligned groups of m consecutive listed nodes of one switch, all
      free. Same buddy rule one level up: the group whose maximal free aligned group is smallest wins; ties by
      fewest free nodes in the switch, then the smallest rank in the group. The job never spans two switches.
   b. *Several switches* (no switch could ever hold it). The job needs `need` switches: the fewest that hold m
      nodes able to host the share on the empty cluster. It takes switches all of whose such nodes are free,
      largest first (ties by smallest rank); if more than `need` of them would be needed, nothing is placed. The
      nodes taken are those switches' able nodes in order, up to m (with m a multiple of a power-of-two switch
      size, whole switches).
   c. If the job could not be placed by a or b even on the empty cluster (too few nodes can host its per-node
      share), it falls back to Consolidated.

   CPU and memory are split evenly over the m nodes (each node gets the floor or ceiling of the total / m).
4. Nothing fits: None. Failures depend on free capacity alone (``monotone_failures`` stays True; the caveat about
   requests that fall under different rules is in docs/powerflow.md).
"""

from __future__ import annotations

import numpy as np

from ..core.capacity import gang_gpus
from ..core.cluster import MILLI, ClusterState
from ..core.placement import NodeShare, Placement
from ..core.requests import JobRequest
from .base import PLACEMENT_POLICIES, PlacementPolicy, feasible_nodes
from .planning import Consolidated

LAYOUT_CACHE_SIZE = 1024  # request shapes whose node layout is kept (gangs are few shapes)


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def maximal_free_block(free: np.ndarray, n: int) -> np.ndarray:
    """Per row of `free` (bool [K, W]) and per aligned block of `n` slots: the size of the largest aligned
    power-of-two multiple of `n` around the block that is entirely free; 0 where the block itself is not free.
    Slots past W count as not free. Returns int64 [K, ceil(W / n)]."""
    rows, width = free.shape
    top = n
    while top < width:
        top *= 2
    if top == width:
        padded = free
    else:
        padded = np.zeros((rows, top), dtype=bool)
        padded[:, :width] = free
    blocks = -(-width // n)
    size = np.where(np.all(padded.reshape(rows, top // n, n), axis=2)[:, :blocks], n, 0).astype(np.int64)
    parent = np.arange(blocks) * n
    s = 2 * n
    while s <= top:
        whole = np.all(padded.reshape(rows, top // s, s), axis=2)
        size = np.where(whole[:, parent // s], s, size)  # a free parent means a free child: sizes only grow
        s *= 2
    return size


def even_split(total: int, parts: int) -> list[int]:
    """`total` in `parts` integers, each the floor or ceiling of total / parts, summing to `total`."""
    return [total * (k + 1) // parts - total * k // parts for k in range(parts)]


@PLACEMENT_POLICIES.register("buddy")
class Buddy(PlacementPolicy):
    """Buddy allocation (aligned power-of-two blocks: GPUs in a node, then nodes under a switch) with network
    packing (one node, else one switch, else the fewest whole switches). Rules in the module docstring."""

    name = "buddy"
    description = (
        "buddy allocation: aligned power-of-two GPU blocks in one node, else aligned groups of whole nodes "
        "under one switch, splitting the smallest free block (network packing)"
    )
    reconstructed = True
    basis = (
        "PowerFlow's buddy allocation and network packing (arXiv 2304.06381 abstract; rules reconstructed, "
        "docs/powerflow.md); ElasticFlow's power-of-two GPU counts"
    )

    def __init__(self) -> None:
        super().__init__()
        self._layouts: dict = {}

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        return Consolidated.score(self, state, req, nodes)  # fallback: the fullest node that fits

    def place(self, state: ClusterState, req: JobRequest) -> Placement | None:
        if req.gang:
            return self.place_gang(state, req)
        if req.gpu_milli < MILLI or not is_power_of_two(req.num_gpu):
            return super().place(state, req)  # rule 1: Consolidated's single-node choice
        return self._place_block(state, req)

    def place_gang(self, state: ClusterState, req: JobRequest) -> Placement | None:
        layout = self._cached_layout(state, req) if is_power_of_two(req.num_gpu) else None
        if layout is None:
            return Consolidated.place_gang(self, state, req)  # rule 1 / 3c
        return self._place_nodes(state, req, *layout)

    # -- rule 2: an aligned block of GPUs in one node -------------------------------------------------------------
    def _place_block(self, state: ClusterState, req: JobRequest) -> Placement | None:
        n = req.num_gpu
        nodes = np.flatnonzero(feasible_nodes(state, req))
        if nodes.size == 0:
            return None
        size = maximal_free_block(state.gpu_left[nodes] == MILLI, n)  # [K, blocks]
        k, b = np.nonzero(size)
        if k.size == 0:
            return None
        cand = nodes[k]
        best = int(np.lexsort((b, self.rank[cand], state.free_gpus[cand], size[k, b]))[0])
        node, start = int(cand[best]), int(b[best]) * n
        return (NodeShare(node, tuple(range(start, start + n)), req.cpu_milli, req.memory_mib),)

    # -- rule 3: whole nodes, aligned groups under one switch, or whole switches --------------------------------------
    def _cached_layout(self, state: ClusterState, req: JobRequest):
        """`_node_layout`, which depends only on the cluster spec and the request, computed once per request shape."""
        cache = self._layouts
        if cache.get("spec") is not state.spec or len(cache) > LAYOUT_CACHE_SIZE:
            cache.clear()
            cache["spec"] = state.spec
        key = (req.node_mask.tobytes(), req.num_gpu, req.cpu_milli, req.memory_mib)
        if key not in cache:
            cache[key] = self._node_layout(state, req)
        return cache[key]

    def _node_layout(self, state: ClusterState, req: JobRequest):
        """(grid, G, m, could, need) or None for the Consolidated fallback. grid: int64 [switches, width], the
        eligible nodes of each switch in index order, -1 padded; could: bool grid, nodes able to host the
        per-node share when empty; need: 0 for one switch (rule 3a), else the switch count of rule 3b."""
        spec = state.spec
        eligible = np.flatnonzero(req.node_mask & (spec.gpu_count > 0))
        counts = np.unique(spec.gpu_count[eligible])
        if counts.size != 1 or not is_power_of_two(int(counts[0])) or req.num_gpu % int(counts[0]):
            return None
        g = int(counts[0])
        m = req.num_gpu // g
        switch = spec.switch_id[eligible]
        order = np.argsort(switch, kind="stable")  # by switch, then node index
        eligible, switch = eligible[order], switch[order]
        ids, starts, per_switch = np.unique(switch, return_index=True, return_counts=True)
        row = np.repeat(np.arange(ids.size), per_switch)
        col = np.arange(eligible.size) - np.repeat(starts, per_switch)
        grid = np.full((ids.size, int(per_switch.max())), -1, dtype=np.int64)
        grid[row, col] = eligible
        could = np.zeros(grid.shape, dtype=bool)
        could[row, col] = self._hosts(g, m, req, spec.cpu_milli[eligible], spec.memory_mib[eligible])
        if maximal_free_block(could, m).any():
            return grid, g, m, could, 0
        able = np.sort(could.sum(axis=1))[::-1]
        reach = np.flatnonzero(np.cumsum(able) >= m)
        if reach.size == 0:
            return None
        return grid, g, m, could, int(reach[0]) + 1

    @staticmethod
    def _hosts(g: int, m: int, req: JobRequest, cpu: np.ndarray, mem: np.ndarray) -> np.ndarray:
        """Whether nodes with `cpu` and `mem` left can take one node's share (G GPUs) of the gang."""
        usable = gang_gpus(np.full(cpu.shape, g), cpu, mem, req.num_gpu, req.cpu_milli, req.memory_mib)
        # In integers too, so that the even split (ceil(total / m) at most per node) always fits.
        return (usable >= g) & (cpu * m >= req.cpu_milli) & (mem * m >= req.memory_mib)

    def _place_nodes(self, state, req, grid, g, m, could, need) -> Placement | None:
        present = grid >= 0
        at = np.where(present, grid, 0)
        full = state.available[at] & (state.free_gpus[at] == g)
        free = present & full & self._hosts(g, m, req, state.cpu_left[at], state.mem_left[at])
        if need == 0:
            size = maximal_free_block(free, m)  # [switches, groups]
            s, b = np.nonzero(size)
            if s.size == 0:
                return None
            padded = np.full((grid.shape[0], size.shape[1] * m), np.iinfo(np.int64).max, dtype=np.int64)
            padded[:, : grid.shape[1]] = np.where(present, self.rank[at], np.iinfo(np.int64).max)
            group_rank = padded.reshape(grid.shape[0], -1, m).min(axis=2)[s, b]
            best = int(np.lexsort((group_rank, free.sum(axis=1)[s], size[s, b]))[0])
            start = int(b[best]) * m
            nodes = grid[int(s[best]), start : start + m].tolist()
        else:
            whole = (free == could).all(axis=1) & could.any(axis=1)  # every node able to host it is free
            rows = np.flatnonzero(whole)
            able = could.sum(axis=1)[rows]
            first_rank = np.where(could, self.rank[at], np.iinfo(np.int64).max).min(axis=1)[rows]
            rows = rows[np.lexsort((first_rank, -able))]
            taken = np.cumsum(could.sum(axis=1)[rows])
            enough = np.flatnonzero(taken >= m)
            if enough.size == 0 or int(enough[0]) + 1 > need:
                return None
            chosen = rows[: int(enough[0]) + 1]
            nodes = np.concatenate([grid[r][could[r]] for r in chosen.tolist()])[:m].tolist()
        cpu, mem = even_split(req.cpu_milli, m), even_split(req.memory_mib, m)
        allocs: list[NodeShare] = [
            NodeShare(int(node), tuple(range(g)), cpu[k], mem[k]) for k, node in enumerate(sorted(nodes))
        ]
        return tuple(allocs)
