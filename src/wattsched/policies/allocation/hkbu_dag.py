"""`hkbu-dag`: the HKBU ICDCS'20 contention-aware scheduler's order and placement on the allocation contract.

Source: Wang, Shi, Wang, Chu, "Communication contention aware scheduling of multiple deep learning training jobs"
(ICDCS 2020), simulator `HKBU-HPML/dl-scheduling` `online/job_master.py` (docs/hkbu-dag.md §6). The engine runs
fluid jobs on whole GPUs, not per-iteration DAGs, so two parts of the scheduler carry over and one does not:

* **Order**: waiting jobs start in SRSF order (least remaining service first; service = the view's remaining work x
  the job's GPUs, upstream `remain_compute_cumul_workload`), or in one of the upstream placement orders (`ssf`,
  `sf`, `stf`, `blf`, `random`; `policies/hkbu_dag.py`). Jobs keep their GPUs to the end (upstream never preempts).
* **Placement**: a job that fits on one node goes on one node (splitting it would only add comm); the node is the
  GPU pick's choice: `lwf`/`lswf`/`lgwf` the node of least workload per GPU (the remaining GPU-seconds of its
  running jobs over its GPUs; a free GPU has none, so the three agree on whole GPUs), `bp` the first node that
  fits, `random` any. A job larger than a node takes whole free GPUs node by node; when contention-aware, nodes
  with fewer *communicating* jobs (running jobs spread over several nodes, which share the node's NIC) come first,
  so its all-reduce sees a lower k; ties go to the pick's key, then the run's node rank.
* **Not in the engine**: `simulate` has no comm contention model; job speeds come from the trace or the
  performance model, whatever the placement. Contention enters only through this placement choice. The
  contention model itself (comm speed 1/((k-1) eta + beta k), AdaDUAL admission) is in the DAG simulator that
  `wattsched experiment hkbu-dag` runs.

Names: `hkbu-dag` (SRSF, `lwf`, contention-aware), and the family `hkbu-dag-<order>-<pick>[-unaware]`, e.g.
`hkbu-dag-blf-bp` or `hkbu-dag-srsf-lwf-unaware`.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ...core.capacity import gang_gpus
from ...core.errors import UnknownNameError
from ..base import PlacementPolicy, fill_gang
from ..contract import ALLOCATION_POLICIES, AllocationPolicy, BindContext, ClusterView, Decision
from ..hkbu_dag import GPU_PICKS, PLACEMENT_ORDERS
from ..planning import Plan

ORDERS = ("srsf", *PLACEMENT_ORDERS)
_KEY_SCALE = 1 << 20  # room for a per-node rank under the primary key in one integer score


class ContentionAwarePlacement(PlacementPolicy):
    """Scores nodes by (fewest communicating jobs if aware, then the pick's key); see the module docstring."""

    name = "hkbu-dag-placement"
    description = "GPU pick lwf/lswf/lgwf/bp/random, gangs on nodes with fewest communicating jobs"
    monotone_failures = False  # the answer depends on running jobs' comm, not only on free capacity

    def __init__(self, gpu_pick: str = "lwf", aware: bool = True):
        super().__init__()
        self.gpu_pick = gpu_pick
        self.aware = aware
        self.node_load = np.zeros(0)  # remaining GPU-seconds per GPU of each node
        self.node_comm = np.zeros(0, dtype=np.int64)  # communicating jobs per node

    def _pick_key(self, nodes: np.ndarray) -> np.ndarray:
        """Smaller is better: the pick's preference among `nodes`, as integer ranks."""
        if self.gpu_pick == "bp":
            return nodes.astype(np.int64)
        if self.gpu_pick == "random":
            return self.rng.permutation(nodes.size).astype(np.int64)
        load = self.node_load[nodes]
        ranks = np.empty(nodes.size, dtype=np.int64)
        ranks[np.lexsort((nodes, load))] = np.arange(nodes.size)
        return ranks

    def _key(self, nodes: np.ndarray) -> np.ndarray:
        key = self._pick_key(nodes)
        if self.aware:
            key = self.node_comm[nodes] * _KEY_SCALE + key
        return key

    def score(self, state, req, nodes):
        return -self._key(nodes)

    def place_gang(self, state, req):
        mask = req.node_mask & state.available & (state.free_gpus > 0)
        nodes = np.flatnonzero(mask)
        if nodes.size == 0:
            return None
        usable = gang_gpus(state.free_gpus[nodes], state.cpu_left[nodes], state.mem_left[nodes],
                           req.num_gpu, req.cpu_milli, req.memory_mib)  # fmt: skip
        if int(usable.sum()) < req.num_gpu:
            return None
        order = np.lexsort((self.rank[nodes], self._key(nodes)))
        return fill_gang(state, req, nodes[order].tolist(), usable[order].tolist())


class HkbuDag(AllocationPolicy):
    name = "hkbu-dag"
    description = (
        "SRSF (or an HKBU placement order), non-preemptive; gangs on nodes with fewest communicating jobs "
        "(HKBU ICDCS'20). Comm contention is not in the engine's job speeds, only in this placement choice; "
        "the contention model runs in `wattsched experiment hkbu-dag`"
    )
    reconstructed = True
    basis = (
        "HKBU-HPML/dl-scheduling online/job_master.py (SRSF, placement orders, GPU picks) mapped to whole-GPU "
        "fluid jobs; contention-aware node choice is wattsched's (docs/hkbu-dag.md §6)"
    )
    decide_on_arrival = True
    decide_on_completion = True

    def __init__(self, order: str = "srsf", gpu_pick: str = "lwf", contention_aware: bool = True):
        if order not in ORDERS:
            raise UnknownNameError("hkbu-dag order", order, ORDERS)
        base_pick = re.sub(r"^lwf\d+$", "lwf", gpu_pick)
        if base_pick not in GPU_PICKS:
            raise UnknownNameError("GPU pick", gpu_pick, GPU_PICKS)
        self.order = order
        self.gpu_pick = base_pick
        self.aware = bool(contention_aware)
        self.placement = ContentionAwarePlacement(base_pick, self.aware)

    def bind(self, ctx: BindContext) -> None:
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        self.rng = ctx.rng
        self.num_gpu = ctx.jobs.num_gpu
        self.gpus_per_node = np.maximum(ctx.spec.gpu_count, 1).astype(np.float64)

    def parameters(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "gpu_pick": self.gpu_pick,
            "contention_aware": self.aware,
            "preemption": False,
            "comm_contention_in_job_speeds": False,
            "note": "simulate has no comm contention model: it enters only through placement; the DAG simulator "
            "of `wattsched experiment hkbu-dag` models it (docs/hkbu-dag.md §6)",
        }

    def _node_state(self, view: ClusterView, running: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = view.spec.num_nodes
        load = np.zeros(n)
        comm = np.zeros(n, dtype=np.int64)
        if running.size:
            left = view.remaining_work(running)
            for job, work in zip(running.tolist(), left.tolist(), strict=True):
                target = view.target(job)
                if target is None:
                    continue
                nodes = [node for node, gpus, _, _ in target.placement if gpus]
                for node, gpus, _, _ in target.placement:
                    load[node] += work * len(gpus)
                if len(nodes) > 1:
                    comm[nodes] += 1
        return load / self.gpus_per_node, comm

    def _ordered(self, view: ClusterView, pending: np.ndarray) -> np.ndarray:
        gpus = self.num_gpu[pending].astype(np.float64)
        left = view.remaining_work(pending)
        keys = {
            "srsf": (left * gpus,),
            "ssf": (left * gpus,),
            "sf": (gpus,),
            "stf": (left,),
            "blf": (-gpus, -left),
        }
        if self.order == "random":
            return pending[self.rng.permutation(pending.size)]
        # Ties keep the view's pending order (submission order).
        return pending[np.lexsort((np.arange(pending.size), *reversed(keys[self.order])))]

    def allocate(self, view: ClusterView) -> Decision:
        pending = view.pending_jobs()
        if pending.size == 0:
            return Decision(keep_all=True)
        running = view.running_jobs()
        load, comm = self._node_state(view, running)
        self.placement.node_load, self.placement.node_comm = load, comm
        plan = Plan(view)
        work = dict(zip(pending.tolist(), view.remaining_work(pending).tolist(), strict=True))
        for job in self._ordered(view, pending).tolist():
            found = plan.place(job, self.placement)
            if found is None:
                continue
            nodes = [node for node, gpus, _, _ in found if gpus]
            for node, gpus, _, _ in found:
                load[node] += work[job] * len(gpus) / self.gpus_per_node[node]
            if len(nodes) > 1:
                comm[nodes] += 1
        return plan.decision(running)


ALLOCATION_POLICIES.register("hkbu-dag")(HkbuDag)


def _resolve(name: str):
    m = re.fullmatch(r"hkbu-dag-([a-z]+)-([a-z]+\d*)(-unaware)?", name)
    if m is None or m.group(1) not in ORDERS:
        return None
    order, pick, unaware = m.group(1), m.group(2), m.group(3) is not None
    return lambda **kw: HkbuDag(order=order, gpu_pick=pick, contention_aware=not unaware, **kw)


ALLOCATION_POLICIES.register_family("hkbu-dag-<order>-<pick>[-unaware]", _resolve)
