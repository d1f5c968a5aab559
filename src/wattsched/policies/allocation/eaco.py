"""EaCO (Haghshenas & Hashemi, arXiv 2412.08294): energy-aware co-location of training jobs on shared GPUs, with
predictions from a history store and early-stage observation (docs/eaco.md §3).

Every decision (arrivals, completions, observation ends, rounds):

1. **Observe.** Jobs that share GPUs are watched for one epoch's time (``epoch_s``) next to their co-runners; the speed
   seen then (the simulator's truth, which differs from the prediction by the run's sharing noise) goes into the
   history store. If a job in the set would now miss its deadline (or its JCT bound), the co-location is undone at
   that epoch boundary: the job that joined last is checkpointed and goes back to the queue (restart cost as
   every policy pays).
2. **Allocate** (Algorithm 1 and 2), waiting jobs in arrival order: the candidates are the GPU sets of the
   requested count and type where no GPU is above the utilisation or memory threshold and the summed memory fits:
   the GPUs of a running set of that size, or free GPUs. Each candidate's JCTs are predicted from the history
   store (seeded with the calibration pairs, else the sharing model); a candidate passes if every job on it keeps
   its deadline (no deadline: a JCT bound relative to running alone). Among those that pass, the objective
   ``alpha * energy + (1 - alpha) * average time per epoch`` (both relative to the job alone on free GPUs) picks
   one; ties go to the highest utilisation. A job with no candidate waits; later jobs may still start.

What the paper leaves open (alpha, both thresholds, the epoch length, the JCT bound of jobs without a deadline,
the most jobs per GPU) is reconstructed: parameters below, reported in summary.json.

Cost (so that the 3-month Philly window runs in minutes, BENCHMARKS.md): each running job's GPU set is read from
the view once and again only when the job journal (``view.job_changes``) lists the job; a set's summed load and
memory are summed again only when its jobs change; open sets are filed by GPU count and type; the CPU and memory
check of a candidate on one node is one array lookup (every node's fit to the whole request at once). The same
decisions as reading everything afresh, in the same order (BENCHMARKS.md, "eaco's speed").
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace
from typing import Any

import numpy as np

from ...core.cluster import MILLI
from ...core.gpus import gpu_model
from ...core.states import STATUS_RUNNING
from ...perf.colocation import EACO_GPUS, EACO_PAIRS
from ..base import PLACEMENT_POLICIES
from ..contract import (
    ALLOCATION_POLICIES,
    AllocationPolicy,
    BindContext,
    Capability,
    ClusterView,
    Decision,
    Target,
)
from ..planning import JournalCache, Plan, held_target, job_gpu_codes, on_same_gpus
from ..sharing import gpu_set, gpu_set_size, solo_rate_on

MAX_JOBS_PER_GPU = 4  # the paper measures sets of up to four jobs
JCT_BOUND = 1.10  # run time against alone, for jobs without a deadline (docs/eaco.md §3)
EPOCH_S = 1440.0  # the observation window: EaCO's Table 1 epochs take 0.39-0.40 h (docs/eaco.md §3)
SHARE = MILLI // MAX_JOBS_PER_GPU


def _basis(alpha: float, util: float, memory: float, jct_bound: float, epoch_s: float, max_jobs: int) -> str:
    """What EaCO's reconstruction rests on, with the parameters it runs with."""
    return (
        "EaCO (Haghshenas & Hashemi, arXiv 2412.08294): Algorithms 1 and 2 from the text, no public code; "
        f"reconstructed alpha {alpha:g}, utilisation threshold {util:g}, memory threshold {memory:g}, JCT bound "
        f"{jct_bound:g} x alone without a deadline, epoch {epoch_s:g} s, at most {max_jobs} jobs per GPU; "
        "docs/eaco.md"
    )


@ALLOCATION_POLICIES.register("eaco")
class EaCO(AllocationPolicy):
    name = "eaco"
    description = (
        "energy-aware co-location on shared GPUs, predicted JCTs, undo after an observed epoch (EaCO)"
    )
    reconstructed = True  # the algorithm is the paper's; its parameters are not given there (docs/eaco.md §3)
    needs_models = True
    default_round_s = 360.0  # Gavel's round, the simulator EaCO extends
    decide_on_arrival = True
    decide_on_completion = True
    needs = frozenset({Capability.SHARES_GPUS, Capability.PREEMPTS})
    learned_state = (
        "history",
        "solo_only",
        "watch",
        "joined_at",
        "undone",
        "colocations",
        "observations",
        "seeded_entries",
        "_shape",
        "_shape_ids",
    )  # kept when live jobs are added (contract.AllocationPolicy)

    def __init__(
        self,
        alpha: float = 0.5,
        util_threshold: float = 0.9,
        memory_threshold: float = 0.9,
        jct_bound: float = JCT_BOUND,
        epoch_s: float = EPOCH_S,
        max_jobs_per_gpu: int = MAX_JOBS_PER_GPU,
    ) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        self.alpha = float(alpha)
        self.util_threshold = float(util_threshold)
        self.memory_threshold = float(memory_threshold)
        self.jct_bound = float(jct_bound)
        self.epoch_s = float(epoch_s)
        self.max_jobs = int(min(max_jobs_per_gpu, MAX_JOBS_PER_GPU))
        self.basis = _basis(
            self.alpha,
            self.util_threshold,
            self.memory_threshold,
            self.jct_bound,
            self.epoch_s,
            self.max_jobs,
        )
        self.placement = PLACEMENT_POLICIES.create("best-fit")  # free GPUs: packed onto the fewest nodes
        self.undone = 0
        self.colocations = 0
        self.observations = 0

    def bind(self, ctx: BindContext) -> None:
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        self.perf = ctx.perf
        self.spec = ctx.spec
        self.jobs = ctx.jobs
        self.codes = job_gpu_codes(ctx)
        self.deadline = ctx.jobs.deadline_s
        n = len(ctx.jobs)
        # History key per job: its model and batch size (Gavel measures pairs per batch size).
        self.model = [f"{self.perf.model_key(j)}@{self.perf.batch[j]:g}" for j in range(n)]
        self.load = np.array([self.perf.slicing_utilisation(j) for j in range(n)])  # alone: engine's load
        self.memory = np.array([self.perf.memory_gib(j) for j in range(n)])
        # The same values as Python floats, read per job in the hot loops (summed in the same order: same sums).
        self._load_of: list[float] = self.load.tolist()
        self._memory_of: list[float] = self.memory.tolist()
        self._code_of: list[int] = self.codes.tolist()
        self._memory_cap = [gpu_model(m).memory_gib for m in self.spec.gpu_models]  # by GPU code
        # GPU set -> (its jobs, size, summed load, summed memory, over a threshold): `_update_open` sums a set's
        # jobs again only when they changed.
        self._set_sums: dict[tuple, tuple[tuple[int, ...], int, float, float, bool]] = {}
        # What each running job holds, as (GPU set key, placement), or None for no GPUs: read from the view once
        # and dropped when the job journal (view.job_changes) lists the job, so a decision reads what changed.
        self._held = JournalCache()  # job -> (GPU-set key, placement) or None, as last read
        self._settled = False  # the last decision changed nothing: it stands until the cluster changes
        self._shape = np.full(n, -1, dtype=np.int64)
        self._shape_ids: dict[tuple, int] = {}
        # History store: (model, GPU count, co-runner models) -> [sum, count] of observed speeds relative to
        # alone. Seeded with the calibration pairs (the model's fit to EaCO's Table 3, on 8 GPUs).
        self.history: dict[tuple[str, int, tuple[str, ...]], list[float]] = {}
        sharing = self.perf.sharing
        if sharing.loads:
            batches: dict[str, set[float]] = {}  # the batch sizes the workload's jobs of each model use
            for key in self.model:
                name, _, batch = key.rpartition("@")
                batches.setdefault(name, set()).add(float(batch))
            for pair, _, _ in EACO_PAIRS:
                for i, m in enumerate(pair):
                    other = pair[1 - i]
                    speed = sharing.speed(sharing.loads[m], [sharing.loads[other]])
                    for bm in sorted(batches.get(m, ())):
                        for bo in sorted(batches.get(other, ())):
                            self.history[(f"{m}@{bm:g}", EACO_GPUS, (f"{other}@{bo:g}",))] = [speed, 1.0]
        self.seeded_entries = len(self.history)
        # Observation of a co-located set: job -> (ready time, set of jobs, the job that joined last).
        self.watch: dict[int, tuple[float, frozenset[int], int]] = {}
        # Jobs with a deadline in an undone co-location: they lost up to an epoch already, so they run on GPUs of
        # their own from then on (no one joins them, they join no one); this bounds a deadline miss by one epoch.
        self.solo_only: set[int] = set()
        # When each job last took its GPUs (the host of a set is the first of its jobs).
        self.joined_at: dict[int, float] = {}

    def parameters(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "util_threshold": self.util_threshold,
            "memory_threshold": self.memory_threshold,
            "jct_bound_no_deadline": self.jct_bound,
            "epoch_s": self.epoch_s,
            "max_jobs_per_gpu": self.max_jobs,
            "free_gpus_placement": "best-fit (fewest nodes)",
            "reconstructed": "alpha, both thresholds, epoch length, JCT bound and the most jobs per GPU are not "
            "in the paper: documented defaults (docs/eaco.md §3)",
            "colocations": self.colocations,
            "observations": self.observations,
            "undone": self.undone,
            "history_entries": len(self.history),
            "history_seeded_entries": self.seeded_entries,
        }

    # --- predictions ----------------------------------------------------------------------------------------
    def _predict_speed(self, job: int, others: list[int]) -> float:
        """Speed relative to alone next to `others` on the same GPUs: the history's mean, else the model."""
        if not others:
            return 1.0
        seen = self.history.get(self._history_key(job, others))
        if seen is not None:
            return seen[0] / seen[1]
        return self.perf.predicted_shared_factor(job, int(self.codes[job]), [others])

    def _history_key(self, job: int, others) -> tuple[str, int, tuple[str, ...]]:
        return (self.model[job], int(self.jobs.num_gpu[job]), tuple(sorted(self.model[k] for k in others)))

    def _keeps_bound(self, view: ClusterView, job: int, speed: float, key: tuple) -> bool:
        """Whether the job, at `speed` of its solo speed on GPU set `key`, keeps its deadline (none: its JCT
        bound relative to alone)."""
        deadline = self.deadline[job]
        if math.isnan(deadline):
            return speed >= 1.0 / self.jct_bound - 1e-12
        remaining = float(view.remaining_work(np.array([job]))[0])
        return view.now + remaining / (self._solo_rate(job, key) * speed) <= deadline + 1e-6

    def _solo_rate(self, job: int, key: tuple) -> float:
        """The job's speed alone on this GPU set (a set over several nodes or switches runs unconsolidated)."""
        return solo_rate_on(self.perf, self.spec, job, int(self.codes[job]), key)

    # --- the decision ---------------------------------------------------------------------------------------
    def allocate(self, view: ClusterView) -> Decision:
        running = view.running_jobs()
        pending = view.pending_jobs()
        if running.size == 0 and pending.size == 0:
            return Decision()
        # The last decision placed no one, and since then no job arrived or left, no capacity appeared or went
        # (a node that booted counts), no setting changed and no observation came due: nothing changes.
        due = any(view.now + 1e-6 >= t for t, _, _ in self.watch.values())
        if self._settled and not due and not view.changes.any:
            return Decision(keep_all=True, wake_at=self._next_watch(view))
        plan = Plan(view)
        # GPU sets in use: set -> jobs on it (running now, then as planned this decision).
        sets: dict[tuple, list[int]] = {}
        where: dict[tuple, tuple] = {}
        held_now = self._held.fresh(view)
        for j in running.tolist():
            if j not in held_now:
                target = view.target(j)
                held_now[j] = (
                    (gpu_set(target.placement), target.placement)
                    if target is not None and target.num_gpus > 0
                    else None
                )
            held = held_now[j]
            if held is not None:
                key, placement = held
                sets.setdefault(key, []).append(j)
                where[key] = placement
        requeue = self._observe(view, plan, sets)
        # Sets a newcomer may still join, by GPU count and GPU type (a set's jobs share its GPUs' type): (size,
        # code) -> set -> (summed load, summed memory). The thresholds are checked once here, and on each join.
        self._open: dict[tuple[int, int], dict[tuple, tuple[float, float]]] = {}
        for key in sets:
            self._update_open(key, sets[key])
        if requeue:
            pending = np.concatenate(
                [np.asarray(requeue, dtype=np.int64), pending[~np.isin(pending, requeue)]]
            )
        # A shape (model, GPU count, GPU type, request class; a job with a deadline is its own shape) that found
        # no candidate finds none later in this decision either: the plan only fills up. With thousands waiting,
        # each failure strikes its whole shape from the rest of the queue at once.
        shapes = self._shapes(view, pending)
        alive = np.ones(pending.size, dtype=bool)
        i = 0
        while i < pending.size:
            if not alive[i]:
                nxt = np.flatnonzero(alive[i:])
                if nxt.size == 0:
                    break
                i += int(nxt[0])
            job = int(pending[i])
            if self.jobs.num_gpu[job] == 0:
                plan.place(job, self.placement)
            elif not self._allocate_one(view, plan, job, sets, where):
                alive &= shapes != shapes[i]
            i += 1
        decision = plan.decision(running, wake_at=self._next_watch(view))
        self._settled = not (decision.assign or plan.released)
        return decision

    def _shapes(self, view: ClusterView, jobs: np.ndarray) -> np.ndarray:
        """A shape id per job (cached): equal ids fail or succeed alike at one point of a decision."""
        unknown = jobs[self._shape[jobs] < 0]
        for j in unknown.tolist():
            if not math.isnan(self.deadline[j]):
                key: tuple = ("deadline", j)
            else:
                key = (self.model[j], int(self.jobs.num_gpu[j]), int(self.codes[j]), view.request_class(j))
            self._shape[j] = self._shape_ids.setdefault(key, len(self._shape_ids))
        return self._shape[jobs]

    def _update_open(self, key: tuple, group: list[int]) -> None:
        """Keep `_open` ((size, GPU code) -> open set -> (summed load, summed memory)) current for one set."""
        members = tuple(group)
        sums = self._set_sums.get(key)
        if sums is None or sums[0] != members:
            sums = self._set_sums[key] = (members, gpu_set_size(key), *self._thresholds(group))
        _, size, util, mem, over = sums
        if not group:  # no code to file it under: out of every bucket of its size
            for (bucket_size, _), bucket in self._open.items():
                if bucket_size == size:
                    bucket.pop(key, None)
            return
        bucket = self._open.setdefault((size, self._code_of[group[0]]), {})
        if over or len(group) >= self.max_jobs or not self.solo_only.isdisjoint(group):
            bucket.pop(key, None)
        else:
            bucket[key] = (util, mem)

    def _thresholds(self, group: list[int]) -> tuple[float, float, bool]:
        """A set's summed load and memory, and whether either is above its threshold."""
        if not group:
            return 0.0, 0.0, True
        cap = self._memory_cap[self._code_of[group[0]]]
        load_of, memory_of = self._load_of, self._memory_of
        util = sum(load_of[k] for k in group)
        mem = sum(memory_of[k] for k in group)
        return util, mem, util > self.util_threshold or mem > self.memory_threshold * cap

    def _next_watch(self, view: ClusterView) -> float | None:
        wake = min((t for t, _, _ in self.watch.values()), default=None)
        return wake if wake is not None and wake > view.now else None

    def _observe(self, view: ClusterView, plan: Plan, sets: dict[tuple, list[int]]) -> list[int]:
        """End the observations that are due; undo co-locations that would now break a bound. Returns the jobs
        sent back to the queue (to be placed again first)."""
        requeue: list[int] = []
        members = {j: frozenset(js) for js in sets.values() for j in js}
        for job, (due, group, _) in list(self.watch.items()):
            if members.get(job) != group:  # the set changed (a job finished or left): nothing to judge
                del self.watch[job]
                continue
            if view.now + 1e-6 < due:
                continue
            del self.watch[job]
            rate = float(view.rate(np.array([job]))[0])
            key = gpu_set(held_target(view, job).placement)
            solo = self._solo_rate(job, key)
            if rate <= 0 or solo <= 0:
                continue
            observed = min(rate / solo, 1.0)
            entry = self.history.setdefault(self._history_key(job, group - {job}), [0.0, 0.0])
            entry[0] += observed
            entry[1] += 1.0
            self.observations += 1
            if self._keeps_bound(view, job, observed, key) or not self.solo_only.isdisjoint(group):
                continue
            # Undo: the set's first job keeps the GPUs alone; every other job goes back to the queue (its state
            # saved at this epoch boundary) and tries again, where the history now steers it away from this
            # combination. Jobs with a deadline have spent their slack: they run on GPUs of their own from now on.
            self.solo_only.update(k for k in group if not math.isnan(self.deadline[k]))
            self.undone += 1
            host = min(group, key=lambda k: (self.joined_at.get(k, -math.inf), k))
            for k in sorted(group - {host}):
                if view.status[k] == STATUS_RUNNING and k not in plan.released:
                    plan.release(k)
                    requeue.append(k)
            for js in sets.values():
                js[:] = [k for k in js if k not in requeue]
        for job in requeue:
            self.watch.pop(job, None)
        return requeue

    def _allocate_one(self, view: ClusterView, plan: Plan, job: int, sets: dict, where: dict) -> bool:
        """Place `job` on its best passing candidate; False if none passes."""
        n = int(self.jobs.num_gpu[job])
        code = int(self.codes[job])
        if code < 0:
            return False
        gpu = gpu_model(self.spec.gpu_models[code])
        mem_cap = gpu.memory_gib
        mem_new = self._memory_of[job]
        req = view.request(job)
        req_mask = req.node_mask
        cpu_or_memory = req.cpu_milli > 0 or req.memory_mib > 0
        best = None  # (objective, -utilisation, key, placement)
        state = plan.state
        gpu_left = state.gpu_left
        # Nodes that could hold the whole CPU and memory request: a set on one such node fits it (one node holds it
        # all), a set on one other node does not; sets over several nodes split it (`_cpu_memory_free`).
        node_fits = (
            (
                state.available & (state.cpu_left >= req.cpu_milli) & (state.mem_left >= req.memory_mib)
            ).tolist()
            if cpu_or_memory
            else None
        )
        shareable = job not in self.solo_only
        for key, (util, mem) in (self._open.get((n, code), {}) if shareable else {}).items():
            if mem + mem_new > mem_cap or not req_mask[key[0][0]]:
                continue
            if node_fits is not None:
                if len(key) == 1:
                    if not node_fits[key[0][0]]:
                        continue
                elif not _cpu_memory_free(state, req, key):
                    continue
            if any(gpu_left[node, g] < SHARE for node, gpus in key for g in gpus):
                continue
            placement = where[key]
            group = sets[key]
            objective = self._objective(view, job, group, key, gpu)
            if objective is None:
                continue
            cand = (objective, -util, key, placement)
            if best is None or cand[:2] < best[:2]:
                best = cand
        # Whole free GPUs of the requested count, packed onto the fewest nodes (best-fit). A request for part of a
        # GPU looks for a whole one too: every EaCO job holds a share of its GPUs and opens a set others may join
        # (searching only partly used GPUs left such jobs waiting forever on an idle cluster).
        whole = req if req.gpu_milli >= MILLI else replace(req, gpu_milli=MILLI)
        free = self.placement.place(plan.state, whole)
        if free is not None:  # alone on free GPUs: nothing could run it faster, so no bound to check
            free_key = gpu_set(free)
            cand = (self._objective(view, job, [], free_key, gpu, check=False), 0.0, free_key, free)
            if best is None or cand[:2] < best[:2]:
                best = cand
        if best is None:
            return False
        _, _, key, placement = best
        own = on_same_gpus(view, job, placement)
        plan.take(job, Target(own, SHARE))
        self.joined_at[job] = view.now
        group = sets.setdefault(key, [])
        where[key] = own
        if group:
            self.colocations += 1
            ready = view.now + view.restart_delay_s(job, Target(own, SHARE))
            members = frozenset([*group, job])
            for k in members:  # watched for one epoch's time, then judged
                self.watch[k] = (ready + self.epoch_s, members, job)
        group.append(job)
        self._update_open(key, group)
        return True

    def _objective(self, view: ClusterView, job: int, group: list[int], key: tuple, gpu, check=True):
        """alpha * added energy + (1 - alpha) * average time per epoch, both relative to the job alone on free
        GPUs; None if a job on the candidate would break its deadline or JCT bound."""
        members = [*group, job]
        slowdowns = []
        for k in members:
            speed = self._predict_speed(k, [o for o in members if o != k])
            if check and not self._keeps_bound(view, k, speed, key):
                return None
            slowdowns.append(1.0 / speed)
        sharing = self.perf.sharing
        loads_before = [float(self.load[k]) for k in group]
        loads_after = [*loads_before, float(self.load[job])]
        added = min(1.0, sharing.gpu_load(loads_after)) - min(1.0, sharing.gpu_load(loads_before))
        dyn = gpu.max_w - gpu.idle_w
        alone_w = gpu.idle_w + dyn * min(1.0, float(self.load[job]))
        added_w = dyn * added if group else alone_w  # free GPUs: they leave idle
        # The newcomer's time next to the group stretches by its slowdown: energy over its run.
        energy_rel = added_w * slowdowns[-1] / alone_w if alone_w > 0 else 0.0
        return self.alpha * energy_rel + (1.0 - self.alpha) * float(np.mean(slowdowns))


def _cpu_memory_free(state, req, key: tuple) -> bool:
    """Whether the nodes of GPU set `key` have the CPU and memory the job's request needs there, split over the
    nodes by their GPU counts as :func:`~wattsched.policies.planning.on_same_gpus` splits it (the same sums), and
    are available: ``plan.is_free(on_same_gpus(view, job, placement), share)`` once the GPUs' shares are known to
    fit, without building the placement."""
    total = sum(len(g) for _, g in key) or 1
    cpu_left, mem_left = req.cpu_milli, req.memory_mib
    last = len(key) - 1
    for k, (node, gpus) in enumerate(key):
        if k == last:
            cpu, mem = cpu_left, mem_left
        else:
            cpu = int(req.cpu_milli * len(gpus) / total)
            mem = int(req.memory_mib * len(gpus) / total)
        cpu_left -= cpu
        mem_left -= mem
        if not state.available[node] or state.cpu_left[node] < cpu or state.mem_left[node] < mem:
            return False
    return True


# The class's own basis, at the default parameters (read where no run is at hand: experiment rows).
EaCO.basis = _basis(*(p.default for p in list(inspect.signature(EaCO.__init__).parameters.values())[1:]))
