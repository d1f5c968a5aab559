"""Tools for allocation policies: plan a round on a scratch copy of the cluster state, then hand back a Decision.

A :class:`Plan` starts from the present (every running job where it is). The policy releases the jobs it wants
to stop or move, places jobs with any placement policy, and :meth:`Plan.decision` lists what is kept and what is
assigned. Nothing here touches the backend.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.capacity import gang_gpus
from ..core.cluster import MILLI, ClusterState
from ..core.placement import NodeShare, Placement
from ..core.requests import JobRequest
from ..core.settings import DEFAULT_SETTING, GpuSetting
from .base import PLACEMENT_POLICIES, PlacementPolicy, fill_gang
from .contract import ClusterView, Decision, Target


def job_gpu_codes(ctx) -> np.ndarray:
    """Per job, the GPU model code of the first node it may use (-1 if none): the GPU type a policy plans for."""
    from ..core.requests import RequestBook

    book = RequestBook.build(ctx.jobs, ctx.spec)
    first = np.array(
        [int(np.argmax(m)) if m.any() else -1 for m in book.node_mask_by_spec], dtype=np.int64
    )  # per GPU-spec class
    node = first[book.spec_id]
    return np.where(node >= 0, ctx.spec.gpu_model_code[np.maximum(node, 0)], -1)


def resized_request(view: ClusterView, req: JobRequest, num_gpu: int) -> JobRequest:
    """The job's request at another GPU count: CPU and memory scale with the GPUs; a gang if no single eligible
    node has that many GPUs."""
    if num_gpu == req.num_gpu:
        return req
    per_cpu = req.cpu_milli / max(req.num_gpu, 1)
    per_mem = req.memory_mib / max(req.num_gpu, 1)
    eligible = view.spec.gpu_count[req.node_mask]
    biggest = int(eligible.max()) if eligible.size else 0
    return replace(
        req,
        num_gpu=num_gpu,
        gpu_milli=MILLI if num_gpu > 1 else req.gpu_milli,
        cpu_milli=int(per_cpu * num_gpu),
        memory_mib=int(per_mem * num_gpu),
        gang=num_gpu > biggest,
    )


def held_target(view: ClusterView, job: int) -> Target:
    """What a running job holds: `view.target`, which is None only for a job that holds nothing."""
    target = view.target(job)
    assert target is not None, f"job {job} holds no GPUs"
    return target


def on_same_gpus(view: ClusterView, job: int, placement: Placement) -> Placement:
    """`placement`'s GPUs with `job`'s own CPU and memory request, split over nodes by their GPU counts."""
    req = view.request(job)
    total = sum(len(g) for _, g, _, _ in placement) or 1
    out, cpu_left, mem_left = [], req.cpu_milli, req.memory_mib
    for k, (node, gpus, _, _) in enumerate(placement):
        last = k == len(placement) - 1
        cpu = cpu_left if last else int(req.cpu_milli * len(gpus) / total)
        mem = mem_left if last else int(req.memory_mib * len(gpus) / total)
        cpu_left -= cpu
        mem_left -= mem
        out.append(NodeShare(node, gpus, cpu, mem))
    return tuple(out)


class JournalCache(dict):
    """Per-job values read from the view at earlier decisions, kept until the job journal lists the job as changed
    (started, stopped, moved, retuned: what a job holds changes only so, ``ClusterView.job_changes``)."""

    def __init__(self) -> None:
        super().__init__()
        self.mark = -1  # position in the job journal at the last refresh

    def fresh(self, view: ClusterView) -> JournalCache:
        """Itself, less the jobs the journal lists since the last call (everything when the journal cannot say)."""
        changed, self.mark = view.job_changes(self.mark)
        if changed is None:
            self.clear()
        else:
            for job in changed:
                self.pop(job, None)
        return self


class Plan:
    """A round's plan: a scratch state that starts with every running job where it is.

    The scratch state is the view's own until the plan changes it (a copy then), and the last job the plan takes
    is written into it only when something reads it again: a round that places one job, or none, copies nothing.
    """

    def __init__(self, view: ClusterView):
        self.view = view
        self._state = view.state
        self._own = False  # whether `_state` is the plan's copy (else the view's, never written)
        self._unwritten: Target | None = None  # taken in the plan, not yet in `_state`
        self.assign: dict[int, Target] = {}
        self.released: set[int] = set()
        # Request shapes that found no place in the plan as it is now; cleared whenever the plan frees anything.
        # A queue of thousands of identical waiting jobs then costs one failed search per shape, not per job.
        self._failed: set[tuple] = set()

    @property
    def state(self) -> ClusterState:
        """The plan's cluster state; read it, change it only through the plan."""
        if self._unwritten is not None:
            self._write_take()
        return self._state

    def _writable(self) -> ClusterState:
        if self._unwritten is not None:
            self._write_take()
        if not self._own:
            self._state = self._state.copy()
            self._own = True
        return self._state

    def _write_take(self) -> None:
        target, self._unwritten = self._unwritten, None
        assert target is not None
        state = self._writable()
        for node, gpus, cpu, mem in target.placement:
            state.allocate(node, gpus, target.share_milli, cpu, mem)

    def release(self, job: int) -> None:
        """Free what a running job holds (it will be stopped unless assigned again)."""
        target = self.view.target(job)
        if target is None or job in self.released:
            return
        state = self._writable()
        for node, gpus, cpu, mem in target.placement:
            state.release(node, gpus, target.share_milli, cpu, mem)
        self.released.add(job)
        self._failed.clear()

    def restore(self, job: int) -> bool:
        """Undo `release` if what the job held is still free in the plan (then it simply keeps running)."""
        if job not in self.released:
            return True
        target = held_target(self.view, job)  # `release` released it: it held something
        if not self.is_free(target.placement, target.share_milli):
            return False
        state = self._writable()
        for node, gpus, cpu, mem in target.placement:
            state.allocate(node, gpus, target.share_milli, cpu, mem)
        self.released.discard(job)
        return True

    def is_free(self, placement: Placement, share: int) -> bool:
        state = self.state
        for node, gpus, cpu, mem in placement:
            if not state.available[node] or state.cpu_left[node] < cpu or state.mem_left[node] < mem:
                return False
            if any(state.gpu_left[node, g] < share for g in gpus):
                return False
        return True

    def fits_together(self, first: Placement, second: Placement, share: int) -> bool:
        """Two placements on the same GPUs (the second from :func:`on_same_gpus`), each at `share`, at once: their
        GPU shares and their nodes' CPU and memory add up."""
        combined = tuple(
            NodeShare(a.node, a.gpus, a.cpu_milli + b.cpu_milli, a.memory_mib + b.memory_mib)
            for a, b in zip(first, second, strict=True)
        )
        return self.is_free(combined, 2 * share)

    def take(self, job: int, target: Target) -> None:
        state = self.state  # writes the take before, if any
        milli = target.share_milli
        for node, gpus, cpu, mem in target.placement:  # the checks of ClusterState.allocate, before it runs
            if state.cpu_left[node] < cpu or state.mem_left[node] < mem:
                raise RuntimeError(f"over-allocation of CPU/memory on node {node}")
            row = state.gpu_left[node]
            for g in gpus:
                if row[g] < milli:
                    raise RuntimeError(f"over-allocation of GPU {g} on node {node}")
        self._unwritten = target
        self.assign[job] = target

    def place(
        self,
        job: int,
        placement: PlacementPolicy,
        num_gpu: int | None = None,
        setting: GpuSetting = DEFAULT_SETTING,
    ) -> Placement | None:
        """Place `job` (at `num_gpu` GPUs if given) with `placement` on the scratch state; None if it fits
        nowhere now."""
        # The memo (only for policies whose refusal depends on the state alone, not on power, price or
        # co-runners) is checked before the request is even built: that is most of a failed attempt's cost.
        memo = placement.monotone_failures
        key = (placement.name, self.view.request_class(job), num_gpu)
        if memo and key in self._failed:
            return None
        req = self.view.request(job)
        if num_gpu is not None:
            req = resized_request(self.view, req, num_gpu)
        found = placement.place(self.state, req)
        if found is not None:
            share = req.gpu_milli if req.gpu_milli > 0 else MILLI
            self.take(job, Target(found, share, setting))
        elif memo:
            self._failed.add(key)
        return found

    def place_across(self, job: int, placement: PlacementPolicy) -> Placement | None:
        """Place `job` as a gang (whole GPUs over as many nodes as it takes), even where it would fit on one node:
        for a job that cannot wait for one node to have room. None if the free GPUs are too few."""
        req = self.view.request(job)
        if req.gpu_milli < MILLI:
            return None  # a GPU share lives on one GPU
        found = placement.place(self.state, replace(req, gang=True))
        if found is not None:
            self.take(job, Target(found, MILLI, DEFAULT_SETTING))
        return found

    def place_on(self, job: int, previous: Placement, setting: GpuSetting = DEFAULT_SETTING) -> bool:
        """Put `job` back on exactly `previous` if every GPU, CPU and memory there is free (cheap resume)."""
        if not self.is_free(previous, MILLI):
            return False
        self.take(job, Target(previous, MILLI, setting))
        return True

    def decision(
        self,
        running: np.ndarray | None = None,
        wake_at: float | None = None,
        reject=(),
        save_on_stop: bool = False,
        defer=(),
        undefer=(),
    ) -> Decision:
        """Running jobs neither released nor assigned are kept; released ones not assigned are stopped.
        `running`: the view's running jobs, if the caller has them."""
        if all(j in self.assign for j in self.released):  # nothing stops: no list of what runs is needed
            keep: np.ndarray = np.zeros(0, dtype=np.int64)
            keep_all = True
        else:
            running = self.view.running_jobs() if running is None else running
            kept = [j for j in running.tolist() if j not in self.released and j not in self.assign]
            keep = np.asarray(kept, dtype=np.int64)
            keep_all = False
        return Decision(
            keep,
            self.assign,
            tuple(reject),
            wake_at,
            save_on_stop,
            tuple(defer),
            tuple(undefer),
            keep_all=keep_all,
        )


@PLACEMENT_POLICIES.register("consolidated")
class Consolidated(PlacementPolicy):
    """Tiresias' `yarn` scheme: one node when the job fits on one (the fullest node that fits, ties by rank),
    else whole free nodes under one switch (the switch with the fewest whole free nodes that suffice)."""

    name = "consolidated"
    description = (
        "one node if it fits (fullest first), else whole free nodes under one switch (Tiresias yarn)"
    )

    # `self: PlacementPolicy`: Buddy borrows these two (they need only the policy's node rank).
    def score(self: PlacementPolicy, state, req, nodes):
        return -state.free_gpus[nodes]  # fullest node that fits

    def place_gang(self: PlacementPolicy, state, req):
        spec = state.spec
        whole = req.node_mask & state.available & (state.free_gpus == spec.gpu_count) & (spec.gpu_count > 0)
        whole &= (state.cpu_left == spec.cpu_milli) & (state.mem_left == spec.memory_mib)
        nodes = np.flatnonzero(whole)
        if nodes.size == 0:
            return None
        share = (req.num_gpu, req.cpu_milli, req.memory_mib)
        hostable = gang_gpus(spec.gpu_count[nodes], spec.cpu_milli[nodes], spec.memory_mib[nodes], *share)
        switches = spec.switch_id[nodes]
        best = None
        for sw in np.unique(switches).tolist():
            in_switch = switches == sw
            members, gpus = nodes[in_switch], int(hostable[in_switch].sum())
            if gpus >= req.num_gpu:
                key = (gpus, int(self.rank[members].min()))
                if best is None or key < best[0]:
                    best = (key, members)
        if best is None:
            return None
        members = best[1][np.argsort(self.rank[best[1]])]
        # Whole nodes, each taking only as many GPUs as its CPU and memory can serve at the gang's per-GPU share.
        usable = gang_gpus(spec.gpu_count[members], spec.cpu_milli[members], spec.memory_mib[members], *share)
        return fill_gang(state, req, members.tolist(), usable.tolist())
