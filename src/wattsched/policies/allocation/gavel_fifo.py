"""FIFO and FIFO with packing as Gavel has them (Narayanan et al., OSDI'20; code ``stanford-futuredata/gavel``,
``scheduler/policies/fifo.py``): the baselines EaCO, which extends Gavel's simulator, compares against
(docs/baselines.md, "FIFO and FIFO with packing as Gavel has them").

``gavel-fifo`` (Gavel's ``FIFOPolicy``, mode ``base``): jobs in arrival order; a job keeps its GPUs until it
completes; the head of the queue starts when enough GPUs of its type are free, else nothing behind it starts
(head-of-line blocking). Which GPUs it gets is the scheduler's worker assignment, which Gavel describes as "in a
strided fashion to minimize the number of servers used" (``scheduler/scheduler.py``, ``_assign_workers_to_job``):
here the fullest server that fits the job (fewest free GPUs, ties by the run's seeded node order); a job larger
than any server spreads over the fewest servers. Gavel's policy admits a job when its GPU type has enough free
GPUs in all, which can split a job over servers that each have a few free; in this engine a split job runs at
the unconsolidated throughput of the tables (about half for 8 GPUs over two V100 servers), which made FIFO use
32 % more energy on EaCO's 28-node setup (500 jobs, seed 42). So by default a job waits for a server that fits
it (the stronger baseline; chosen), and ``spread_over_servers=True`` keeps Gavel's count rule for reference.
Gavel's servers are never off; here a server that is off (or booting) and could take the job whole counts as
free GPUs of the type: the job waits for the power manager to boot it rather than spreading over powered
servers or (with packing) sharing a running job's GPUs (chosen).

``gavel-fifo-packed`` (Gavel's ``FIFOPolicyWithPacking``, ``packing_threshold=1.5``; mode ``packing``, which
recomputes the allocation at every decision): the jobs in arrival order take GPUs of their own as above until
one does not fit; then, for the jobs still queued, in order, the head looks over the jobs scheduled alone with the
same GPU count (Gavel's scale factor) and GPU type, and shares the GPUs of the one whose normalised packed
throughput (the sum over the two jobs of their speed next to each other relative to alone) is largest, if above
the threshold (ties: the earliest job); if no partner passes, packing stops (no job jumps ahead). The speeds are
the run's own pair data: Gavel's measured pair throughputs where the tables have the pair, else the run's
sharing model (``PerformanceModel.predicted_shared_factor``, the prediction EaCO and Gandiva use too). Because
the allocation is recomputed, a job left alone when its partner completes is scheduled alone again (and may be
paired with a queued job), and a paired job takes GPUs of its own once the FIFO order gives it some.

Settings chosen where Gavel's code has no equivalent in this engine (reported in summary.json): decisions on
every arrival and completion besides Gavel's 360-s rounds (as for EaCO in the same experiment, so that no
baseline waits for a round boundary that EaCO does not); a packed job holds half of each of its GPUs (500
milli-GPU) from its start, so that a partner can join without moving it (EaCO's jobs hold a quarter for the same
reason); a pair needs its two jobs' GPU memory to fit together (the engine refuses anything else; Gavel's pair
table has no throughput for such pairs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ...core.cluster import MILLI, ClusterState
from ...core.gpus import gpu_model
from ...core.placement import Placement
from ...core.requests import JobRequest
from ...core.states import ON
from ..base import PlacementPolicy
from ..contract import (
    ALLOCATION_POLICIES,
    AllocationPolicy,
    BindContext,
    Capability,
    ClusterView,
    Decision,
    Target,
)
from ..planning import Plan, job_gpu_codes, on_same_gpus

PACKING_THRESHOLD = 1.5  # Gavel's FIFOPolicyWithPacking default
PAIR_SHARE = MILLI // 2
GAVEL_ROUND_S = 360.0  # Gavel's default round


class FewestServers(PlacementPolicy):
    """The fullest server that fits (fewest free GPUs; ties by rank); a job larger than any server's free GPUs
    spreads over the servers with the most free GPUs first (the fewest servers)."""

    name = "fewest-servers"
    description = "fullest server that fits; else the fewest servers with enough free GPUs"

    def __init__(self, spread: bool = False) -> None:
        super().__init__()
        self.spread = spread  # a job no server fits alone may take free GPUs of several (Gavel's count rule)

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        return -state.free_gpus[nodes]

    def place_fifo(
        self, state: ClusterState, req: JobRequest, waking: np.ndarray
    ) -> tuple[Placement | None, bool]:
        """The fullest server that fits; with `spread`, Gavel's count rule (free GPUs of the type on several
        servers). A server that is off or booting and could take the job whole (`waking`: GPUs per node, 0 for
        powered ones) counts as free: the job waits for it to boot. Returns (placement, waits for a boot)."""
        found = self.place(state, req)
        if found is not None:
            return found, False
        if req.num_gpu > 0 and _waits_for_boot(state, req, waking):
            return None, True
        if not self.spread or req.gang or req.num_gpu <= 1 or req.gpu_milli < MILLI:
            return None, False
        return self.place_gang(state, replace(req, gang=True)), False


def _waits_for_boot(state: ClusterState, req: JobRequest, waking: np.ndarray) -> bool:
    """Whether servers that are off or booting would let the job start once on: one of them takes it whole, or, for
    a job larger than any server (a gang over several), their GPUs with the powered servers' free ones reach its
    size. Gavel's servers are never off, so such a job would have GPUs of its own there: it neither spreads nor
    packs while it waits."""
    eligible = waking[req.node_mask]
    if bool((eligible >= req.num_gpu).any()):
        return True
    if not req.gang or not eligible.any():
        return False
    powered_free = state.free_gpus[req.node_mask & (waking == 0)]
    return int(eligible.sum() + powered_free.sum()) >= req.num_gpu


class _GavelFifo(AllocationPolicy):
    """Shared by both modes; `packing` picks FIFOPolicyWithPacking's pairing phase."""

    packing = False
    basis = "Gavel scheduler/policies/fifo.py (stanford-futuredata/gavel); worker assignment scheduler.py"
    default_round_s = GAVEL_ROUND_S
    decide_on_arrival = True
    decide_on_completion = True

    def __init__(
        self, packing_threshold: float = PACKING_THRESHOLD, spread_over_servers: bool = False
    ) -> None:
        self.threshold = float(packing_threshold)
        self.spread_over_servers = bool(spread_over_servers)
        self.placement = FewestServers(self.spread_over_servers)
        self.pairs_formed = 0
        self.spanning_starts = 0
        self._gains: dict[tuple[int, int], float] = {}

    def bind(self, ctx: BindContext) -> None:
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        self.perf = ctx.perf
        self.spec = ctx.spec
        self.num_gpu = ctx.jobs.num_gpu.astype(np.int64)
        self.codes = job_gpu_codes(ctx)
        n = len(ctx.jobs)
        order = np.lexsort((np.arange(n), ctx.jobs.submit_s))  # arrival order, ties by trace order
        self.arrival = np.empty(n, dtype=np.int64)
        self.arrival[order] = np.arange(n)

    def parameters(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "order": "arrival (head-of-line blocking; a job keeps its GPUs until it completes)",
            "gpu_assignment": "fullest server that fits (a job larger than a server: the fewest servers); "
            + (
                "else the fewest servers with enough free GPUs (Gavel's count rule)"
                if self.spread_over_servers
                else "no split over servers that each have a few free GPUs (chosen: split jobs run at the "
                "unconsolidated throughput here)"
            )
            + "; a server that is off and could take the job whole counts as free: the job waits for it to "
            "boot, and does not spread or pack meanwhile (chosen: Gavel's servers are never off)",
            "decisions": "every arrival and completion, and Gavel's 360-s rounds (chosen)",
            "starts_over_several_servers": self.spanning_starts,
        }
        if self.packing:
            out.update(
                packing_threshold=self.threshold,
                pairing="the queue head shares the GPUs of the job scheduled alone with the same GPU count and "
                "type whose normalised packed throughput is largest and above the threshold; none: packing stops",
                pair_throughput="Gavel's measured pair throughputs where the tables have the pair, else the run's "
                "sharing model",
                share_milli_per_job=PAIR_SHARE,
                pairs_formed=self.pairs_formed,
            )
        return out

    def _by_arrival(self, jobs) -> list[int]:
        jobs = np.asarray(jobs, dtype=np.int64)
        return jobs[np.argsort(self.arrival[jobs], kind="stable")].tolist()

    def _start_alone(
        self, view: ClusterView, plan: Plan, job: int, share: int | None
    ) -> tuple[Placement | None, bool]:
        """Give `job` GPUs of its own (whole GPUs at `share` milli each; None: its own request's share).
        Returns (placement, waits for a server to boot)."""
        req = view.request(job)
        if share is not None and req.num_gpu > 0:
            req = replace(req, gpu_milli=MILLI)
        found, waits = self.placement.place_fifo(plan.state, req, self._waking)
        if found is None:
            return None, waits
        if len(found) > 1 and not req.gang:
            self.spanning_starts += 1
        own = share if share is not None else (req.gpu_milli if req.gpu_milli > 0 else MILLI)
        plan.take(job, Target(found, own if req.num_gpu > 0 else MILLI))
        return found, False

    def allocate(self, view: ClusterView) -> Decision:
        running = view.running_jobs()
        pending = view.pending_jobs()
        if running.size == 0 and pending.size == 0:
            return Decision()
        if not self.packing and pending.size == 0:
            return Decision(keep_all=True)  # strict FIFO with nobody waiting: nothing to start
        plan = Plan(view)
        self._waking = np.where(view.power_state != ON, view.spec.gpu_count, 0)
        if not self.packing:
            for job in self._by_arrival(pending):
                if self._start_alone(view, plan, job, None)[0] is None:
                    break
            return plan.decision(running)
        return self._allocate_packed(view, plan, running, pending)

    # --- FIFO with packing ----------------------------------------------------------------------------------
    def _allocate_packed(self, view, plan: Plan, running: np.ndarray, pending: np.ndarray) -> Decision:
        # Jobs on the same GPUs: the earliest keeps them (scheduled alone first, as the recomputed allocation
        # does); the others are released and placed again below, on their GPUs if the pairing repeats.
        groups: dict[tuple, list[int]] = {}
        alone: dict[int, Placement] = {}
        joined: dict[int, int] = {}  # joiner -> the job it shares GPUs with now
        for job in self._by_arrival(running):
            target = view.target(job)
            if target is None or target.num_gpus == 0:
                continue
            key = tuple((node, tuple(gpus)) for node, gpus, _, _ in target.placement)
            members = groups.setdefault(key, [])
            if members and target.share_milli < MILLI:
                joined[job] = members[0]
                plan.release(job)
            else:
                alone[job] = target.placement
            members.append(job)
        # FIFO: jobs without GPUs of their own, in arrival order, take some until one does not fit.
        queue = self._by_arrival([*joined, *pending.tolist()])
        blocked, waits = len(queue), False
        for i, job in enumerate(queue):
            found, waits = self._start_alone(view, plan, job, PAIR_SHARE)
            if found is None:
                blocked = i
                break
            if self.num_gpu[job] > 0:
                alone[job] = found
        # The head fits once a server boots (Gavel's free workers): nothing packs; pairs stay as they are.
        if waits:
            for job in queue[blocked:]:
                if job in joined:
                    plan.restore(job)
            return plan.decision(running, save_on_stop=True)
        # Packing: the rest of the queue, in order, pairs with a job scheduled alone or stops.
        partnered: set[int] = set()
        for job in queue[blocked:]:
            partner = self._best_partner(view, plan, job, alone, partnered)
            if partner is None:
                break
            partnered.update((job, partner))
            if joined.get(job) == partner and plan.restore(job):
                continue  # the same pair as before: it keeps running where it is
            plan.take(job, Target(on_same_gpus(view, job, alone[partner]), PAIR_SHARE))
            self.pairs_formed += 1
        return plan.decision(running, save_on_stop=True)

    def _best_partner(self, view, plan: Plan, job: int, alone: dict[int, Placement], taken: set[int]):
        n, code = int(self.num_gpu[job]), int(self.codes[job])
        if n == 0 or code < 0:
            return None
        cap = gpu_model(self.spec.gpu_models[code]).memory_gib
        need = self.perf.memory_gib(job)
        best, best_gain = None, self.threshold
        for other in self._by_arrival(list(alone)):
            if other in taken or self.num_gpu[other] != n or int(self.codes[other]) != code:
                continue
            if need + self.perf.memory_gib(other) > cap:
                continue
            placement = alone[other]
            if not view.request(job).node_mask[placement[0][0]]:
                continue
            if not plan.is_free(on_same_gpus(view, job, placement), PAIR_SHARE):
                continue
            gain = self.packed_throughput(job, other)
            if gain > best_gain:
                best, best_gain = other, gain
        return best

    def packed_throughput(self, a: int, b: int) -> float:
        """Gavel's normalised packed throughput of a and b sharing GPUs: the sum of their speeds relative to
        alone (time-slicing two jobs that each saturate the GPU gives 1; no slowdown at all gives 2)."""
        key = (a, b) if a < b else (b, a)
        gain = self._gains.get(key)
        if gain is None:
            code = int(self.codes[a])
            gain = self.perf.predicted_shared_factor(a, code, [[b]]) + self.perf.predicted_shared_factor(
                b, code, [[a]]
            )
            self._gains[key] = gain
        return gain


@ALLOCATION_POLICIES.register("gavel-fifo")
class GavelFifo(_GavelFifo):
    name = "gavel-fifo"
    description = "FIFO as Gavel has it: arrival order, head-of-line blocking, fewest servers"


@ALLOCATION_POLICIES.register("gavel-fifo-packed")
class GavelFifoPacked(_GavelFifo):
    name = "gavel-fifo-packed"
    needs = frozenset({Capability.SHARES_GPUS, Capability.PREEMPTS})
    description = (
        "FIFO with packing as Gavel has it: pairs of equal GPU count above 1.5 normalised throughput"
    )
    packing = True
