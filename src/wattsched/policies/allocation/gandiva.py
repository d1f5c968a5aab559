"""Gandiva (Xiao et al., OSDI'18) on the allocation contract: affinity placement, time-slicing when the cluster
is oversubscribed, and packing of low-utilisation jobs onto shared GPUs (docs/baselines.md, Gandiva).

Every slice (60 s, the slice of the Tiresias simulator's Gandiva emulation and of a secondary description):

* not oversubscribed (the jobs' GPU demand fits the GPUs that are on): every job runs on its own GPUs; a job that
  is packed moves back to GPUs of its own when some are free (unpacking);
* oversubscribed: jobs are paired for packing, lowest solo GPU utilisation first among jobs of the same GPU
  count, when their memory fits together and the performance model predicts that the pair's summed normalised
  throughput beats time-slicing (> 1); then scheduling units (single jobs and packed pairs) take turns: the ones
  that waited longest since they last ran go first, the rest are suspended (their state saved: no progress
  lost). A resumed job goes back to the GPUs it last ran on when they are free (a cheap resume).

Placement affinity: nodes already running jobs of the same GPU count, then empty nodes, then the rest.

Choices where Gandiva publishes none (reported in summary.json): the pairing rule (the paper greedily packs the
lowest-utilisation job onto the lowest-utilisation GPU and keeps a packing only if it measures better than
time-slicing; here the model predicts it, and only pairs are formed, as in Gavel's emulation); suspend/resume
and migration costs come from the run's restart model, like every policy's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.cluster import MILLI, ClusterState
from ...core.requests import JobRequest
from ...core.states import STATUS_RUNNING
from ..base import PLACEMENT_POLICIES, PlacementPolicy
from ..contract import (
    ALLOCATION_POLICIES,
    AllocationPolicy,
    BindContext,
    Capability,
    ClusterView,
    Decision,
    Target,
)
from ..planning import Plan, held_target, on_same_gpus

PAIR_SHARE = MILLI // 2


@PLACEMENT_POLICIES.register("gandiva-affinity")
class GandivaAffinity(PlacementPolicy):
    """Nodes running jobs of the same GPU count first, then empty nodes, then the rest; fuller nodes first."""

    name = "gandiva-affinity"
    description = "same-GPU-count nodes, then empty nodes, then others (Gandiva affinity)"

    def score(self, state: ClusterState, req: JobRequest, nodes: np.ndarray) -> np.ndarray:
        kinds = state.gpu_pod_kinds[nodes]
        kind = 0 if req.is_share else min(req.num_gpu, kinds.shape[1] - 1)
        same = kinds[:, kind] > 0
        empty = state.jobs_on_node[nodes] == 0
        return np.where(same, 2000, np.where(empty, 1000, 0)) - state.free_gpus[nodes]


@ALLOCATION_POLICIES.register("gandiva")
class Gandiva(AllocationPolicy):
    name = "gandiva"
    description = "time-slicing under overload, packing of low-utilisation jobs, affinity placement (Gandiva)"
    default_round_s = 60.0
    decide_on_arrival = True
    decide_on_completion = True
    needs = frozenset({Capability.SHARES_GPUS, Capability.PREEMPTS})
    learned_state = ("slot_start",)  # kept when live jobs are added (contract.AllocationPolicy)

    def __init__(self, pack: bool = True, slice_s: float | None = None) -> None:
        self.pack = bool(pack)
        self.slice_s = float(self.default_round_s if slice_s is None else slice_s)
        self.placement = GandivaAffinity()
        self.packings = 0

    def bind(self, ctx: BindContext) -> None:
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        self.demand = ctx.jobs.num_gpu.astype(np.int64)
        self.perf = ctx.perf
        self.spec = ctx.spec
        self.slot_start = np.full(len(ctx.jobs), -np.inf)  # when each job last (re)started by this policy
        self._fits_as_left = False  # the last decision was not oversubscribed (see `allocate`)
        # Running jobs on shared GPUs (packed), kept from the view's change journal (read afresh from -1): a
        # decision looks at what they hold, not at what every running job holds.
        self._mark = -1
        self._packed: set[int] = set()

    def parameters(self) -> dict[str, Any]:
        return {
            "slice_s": self.slice_s,
            "rotation": "at any decision (round, arrival, completion), a unit that has held its GPUs for a full "
            "slice yields to the units that waited longest; one (re)started less than a slice ago keeps them",
            "packing": self.pack,
            "pairing": "jobs of equal GPU count, lowest solo utilisation first, if memory fits and the model "
            "predicts a summed normalised throughput > 1 (chosen: Gandiva publishes no threshold)",
            "suspend": "state saved on suspend (no progress lost); resume on the same GPUs when free",
            "packings_formed": self.packings,
        }

    # --- helpers --------------------------------------------------------------------------------------------
    def _gpu_code(self, view: ClusterView, job: int) -> int:
        mask = view.request(job).node_mask
        codes = self.spec.gpu_model_code[mask]
        return int(codes[0]) if codes.size else -1

    def _pair_gain(self, view: ClusterView, a: int, b: int) -> float:
        """Summed normalised throughput of a and b sharing GPUs (time-slicing gives 1)."""
        code = self._gpu_code(view, a)
        fa = self.perf.predicted_shared_factor(a, code, [[b]])
        fb = self.perf.predicted_shared_factor(b, code, [[a]])
        return fa + fb

    def _fits_together(self, view: ClusterView, a: int, b: int) -> bool:
        code = self._gpu_code(view, a)
        if code < 0:
            return False
        from ...core.gpus import gpu_model

        cap = gpu_model(self.spec.gpu_models[code]).memory_gib
        return self.perf.memory_gib(a) + self.perf.memory_gib(b) <= cap

    def _follow_packed(self, view: ClusterView) -> set[int]:
        """The running jobs on shared GPUs, brought up to date from the jobs that changed."""
        changed, self._mark = view.job_changes(self._mark)
        packed = self._packed
        if changed is None:
            changed = view.running_jobs().tolist()
            packed.clear()
        status = view.status
        for job in dict.fromkeys(changed):
            target = view.target(job) if status[job] == STATUS_RUNNING else None
            if target is not None and target.share_milli < MILLI:
                packed.add(job)
            else:
                packed.discard(job)
        return packed

    def _units(self, view: ClusterView, jobs: np.ndarray) -> list[tuple[int, ...]]:
        """Scheduling units: packed pairs already running together, new pairs, single jobs."""
        units: list[tuple[int, ...]] = []
        taken: set[int] = set()
        # Running pairs stay together: packed jobs grouped by the GPUs they hold (one pass, in job order).
        packed: dict[tuple, list[int]] = {}
        sharing = self._follow_packed(view)
        for job in jobs.tolist():
            if job in sharing:
                packed.setdefault(held_target(view, job).placement, []).append(job)
        for group in packed.values():
            for i in range(0, len(group), 2):
                unit = tuple(group[i : i + 2])
                units.append(unit)
                taken.update(unit)
        rest = [j for j in jobs.tolist() if j not in taken and self.demand[j] > 0]
        if self.pack:
            util = np.array([self.perf.slicing_utilisation(j) for j in rest])
            for count in sorted({int(self.demand[j]) for j in rest}):
                group = [rest[i] for i in np.argsort(util, kind="stable") if self.demand[rest[i]] == count]
                i = 0
                while i + 1 < len(group):
                    a, b = group[i], group[i + 1]
                    if self._fits_together(view, a, b) and self._pair_gain(view, a, b) > 1.0:
                        units.append((a, b))
                        taken.update((a, b))
                        i += 2
                    else:
                        i += 1
        units += [(j,) for j in jobs.tolist() if j not in taken]
        return units

    # --- the slice ------------------------------------------------------------------------------------------
    def allocate(self, view: ClusterView) -> Decision:
        # Not oversubscribed at the last decision, and nothing changed since: the same jobs fit the same capacity,
        # and what could not be unpacked or started then (placement fails only for lack of free capacity) cannot
        # now, with only that decision's own starts and moves taken since.
        if self._fits_as_left and not view.changes.any:
            return Decision(keep_all=True)
        self._fits_as_left = False
        running = view.running_jobs()
        pending = view.pending_jobs()
        active = np.concatenate([running, pending])
        if active.size == 0:
            return Decision()
        capacity = int(view.spec.gpu_count[view.state.available].sum())
        plan = Plan(view)
        if int(self.demand[active].sum()) <= capacity:
            self._unpack(view, plan, running)
            for job in pending.tolist():
                self._start_single(view, plan, job)
            self._fits_as_left = self.placement.monotone_failures
            return self._mark_starts(view, plan.decision(running))
        units = self._units(view, active)
        # Waited longest since it last ran first; running units count as just run.
        waited = [
            min(
                view.now if view.status[j] == STATUS_RUNNING else view.last_stop_s(np.array([j]))[0]
                for j in u
            )
            for u in units
        ]
        # Ties (a unit suspended at this very instant, e.g. re-decided after the stops of this slice's rotation)
        # go to the unit that holds GPUs now: otherwise the rotation is undone at once and both pay a restart.
        idle = [not any(view.status[j] == STATUS_RUNNING for j in u) for u in units]
        # A unit (re)started less than a slice ago keeps its GPUs, whatever event calls the policy: otherwise every
        # stop (which triggers the next decision) rotates the GPUs again and jobs restart without progress.
        mid_slice = [
            any(
                view.status[j] == STATUS_RUNNING and view.now - self.slot_start[j] < self.slice_s - 1e-9
                for j in u
            )
            for u in units
        ]
        order = np.lexsort((np.asarray(idle), np.asarray(waited), ~np.asarray(mid_slice)))
        left = capacity
        chosen: list[tuple[int, ...]] = []
        for k in order.tolist():
            need = int(self.demand[units[k][0]])
            if need <= left:
                chosen.append(units[k])
                left -= need
        chosen_jobs = {j for u in chosen for j in u}
        for job in running.tolist():
            if job not in chosen_jobs:
                plan.release(job)
        for unit in chosen:
            self._place_unit(view, plan, unit)
        return self._mark_starts(view, plan.decision(running, save_on_stop=True))

    def _mark_starts(self, view: ClusterView, decision: Decision) -> Decision:
        for job in decision.assign:
            if view.status[job] != STATUS_RUNNING:
                self.slot_start[job] = view.now
        return decision

    def _start_single(self, view: ClusterView, plan: Plan, job: int) -> None:
        previous = view.previous_placement(job)
        if previous is not None and plan.place_on(job, previous):
            return
        plan.place(job, self.placement)

    def _unpack(self, view: ClusterView, plan: Plan, running: np.ndarray) -> None:
        """Give a packed job GPUs of its own again when some are free (its partner keeps the shared ones)."""
        packed = self._follow_packed(view)
        if not packed:
            return
        for job in running.tolist():
            if job not in packed or job in plan.assign or job in plan.released:
                continue
            target = held_target(view, job)
            partners = [
                k for k in running.tolist() if k != job and held_target(view, k).placement == target.placement
            ]
            plan.release(job)
            placed = plan.place(job, self.placement)
            if placed is None:
                plan.restore(job)
                continue
            for k in partners:  # the partner now has the GPUs to itself
                plan.release(k)
                held = held_target(view, k)
                plan.take(k, Target(held.placement, MILLI, held.setting))

    def _place_unit(self, view: ClusterView, plan: Plan, unit: tuple[int, ...]) -> None:
        running = [j for j in unit if view.status[j] == STATUS_RUNNING]
        if len(unit) == 1:
            if not running:
                self._start_single(view, plan, unit[0])
            return
        if len(running) == 2:
            return  # an existing pair keeps its GPUs
        a, b = unit
        if running:  # one already runs alone: the other joins it on the same GPUs
            host = running[0]
            other = b if host == a else a
            held = held_target(view, host)
            placement = held.placement
            mate = on_same_gpus(view, other, placement)
            plan.release(host)
            # both at once: the newcomer's CPU and memory must fit beside the host's on its nodes
            if plan.fits_together(placement, mate, PAIR_SHARE):
                plan.take(host, Target(placement, PAIR_SHARE, held.setting))
                plan.take(other, Target(mate, PAIR_SHARE))
                self.packings += 1
            else:
                plan.restore(host)
            return
        req = view.request(a)
        found = self.placement.place(plan.state, req)
        if found is None:
            return
        plan.take(a, Target(found, PAIR_SHARE))
        mate = on_same_gpus(view, b, found)
        if plan.is_free(mate, PAIR_SHARE):
            plan.take(b, Target(mate, PAIR_SHARE))
            self.packings += 1
