"""CE-DLA-reconstructed, the scalable planner: a greedy over the same instance as the exact MILP
(docs/cedla.md §4).

1. Services take the GPUs they need in every slot (never deferred).
2. Training jobs, least slack first, buy GPU-hours one slot at a time: the cheapest slot of their window with room,
   priced at ``price_t * (dP_j + P_on / G)`` (the GPU's own draw plus its share of a powered-on node), up to the
   job's GPUs at once, until the work is done.
3. Each group of identical nodes switches on as many nodes as its GPUs in use need; a node that would boot in a
   slot where it must already serve is switched on one slot earlier instead (it pays that slot idle).

The plan is laid out on nodes as the MILP's is, and costed by the same ``plan_cost``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import numpy as np

from .cedla_milp import InfeasiblePlan, Plan, PlanInstance, boot_loss, lay_out, node_groups, plan_cost


def solve_greedy(inst: PlanInstance) -> Plan:
    started = time.perf_counter()
    groups = node_groups(inst)
    x, z, on = greedy_by_group(inst, groups)
    job_gpus, service_gpus, node_on = lay_out(inst, groups, x, z, on)
    cost, kwh = plan_cost(inst, job_gpus, service_gpus, node_on)
    return Plan(
        job_gpus, service_gpus, node_on, cost, kwh, "heuristic", time.perf_counter() - started, float("nan")
    )


def _uncontended_takes(
    inst: PlanInstance, window_end: np.ndarray, room: np.ndarray, order: np.ndarray
) -> np.ndarray | None:
    """The training step of the greedy when its jobs never compete for room: the GPUs each job takes per group and
    slot [J, G, T], as the job-by-job loop takes them; None when that does not hold (the loop then runs).

    The loop has each job (in `order`) buy, slot by slot from the cheapest of its window and group by group,
    ``min(room, its GPUs, GPU-hours left)``. Where every slot's room covers what all jobs take there, room never
    binds: each job takes its GPUs in each of its cheapest slots until its work is done, whatever the order of
    the jobs, and a slot's groups fill one after the other in job order. Work left drops by whole GPU-hours
    (one-hour slots), so it stays exact, and every take is the loop's, computed for all jobs at once. Valid
    where groups rank a job's slots by price alone (the loop's ``price_ranks``)."""
    slots = len(inst.price)
    if inst.slot_h != 1.0 or not slots or not room.size:
        return None
    work = np.asarray(inst.job_work_gpu_h, dtype=np.float64)
    most = np.asarray(inst.job_max_gpus).astype(np.int64)
    lo = np.asarray(inst.job_first_slot, dtype=np.int64)
    hi = np.asarray(window_end, dtype=np.int64)
    busy = work > 1e-9
    if (most[busy] < 1).any():
        return None
    # Whole takes of `most` GPUs first (the work left stays above `most` + 1 before each), then the last few as
    # the loop takes them: `need` is the loop's own expression.
    full = np.where(busy, np.maximum(np.floor((work - 1.0) / np.maximum(most, 1)) - 1.0, 0.0), 0.0)
    left = work - full * most
    count = full.astype(np.int64)
    last = np.where(busy, most, 0)
    active = busy.copy()
    while active.any():
        need = np.ceil(left[active] - 1e-9)
        take = np.minimum(most[active], need)
        left[active] -= take
        count[active] += 1
        last[active] = take
        done = left[active] <= 1e-9
        if ((take < most[active]) & ~done).any():
            return None  # a part take that leaves work: the loop would take more of the same slot
        active[np.flatnonzero(active)[done]] = False
    if (count > np.maximum(hi - lo, 0)).any():
        return None  # no room by the deadline: the loop names the job
    # rank[j, t]: the place of slot t among the job's window slots, cheapest first (ties: earliest).
    t = np.arange(slots)
    rank = np.full((len(work), slots), slots, dtype=np.int64)
    for first in np.unique(lo[busy]).tolist():
        by_price = first + np.argsort(inst.price[first:], kind="stable")
        pos = np.full(slots, slots, dtype=np.int64)
        pos[by_price] = np.arange(by_price.size)
        ahead = pos[:, None] < pos[None, :]  # [s, t]: slot s comes before slot t
        ahead[:first] = False
        # [window end, t]: slots of the window before t
        before = np.vstack([np.zeros((1, slots), dtype=np.int64), np.cumsum(ahead, axis=0)])
        jobs = np.flatnonzero(busy & (lo == first))
        outside = (t[None, :] < first) | (t[None, :] >= hi[jobs, None])
        rank[jobs] = np.where(outside, slots, before[hi[jobs]])
    cut = (count - 1)[:, None]
    takes = np.where(rank < cut, most[:, None], np.where(rank == cut, last[:, None], 0))
    takes[~busy] = 0
    if (takes.sum(axis=0) > room.sum(axis=0)).any():
        return None  # some slot runs short: the order of the jobs matters
    # Each slot's groups fill in order, jobs in `order`: a job's GPUs are its stretch of the slot's running total.
    ordered = takes[order]
    end = np.cumsum(ordered, axis=0)
    start = end - ordered
    bounds = np.vstack([np.zeros((1, slots), dtype=np.int64), np.cumsum(room, axis=0)])  # [G + 1, T]
    x = np.zeros((len(work), len(room), slots))
    for g in range(len(room)):
        x[order, g] = np.maximum(np.minimum(end, bounds[g + 1]) - np.maximum(start, bounds[g]), 0)
    # Where a job's GPUs of one slot span groups, the loop takes them group by group and works out the GPU-hours
    # left again after each part: the same whole number, unless rounding near an integer says otherwise.
    jj, ss = np.nonzero((x > 0).sum(axis=1) > 1)
    if jj.size:
        done = (takes[jj] * (rank[jj] < rank[jj, ss][:, None])).sum(axis=1)  # the job's GPU-hours before
        left_now = work[jj] - done
        parts = x[jj, :, ss]  # [k, G]
        held = np.cumsum(parts, axis=1)
        more = (parts > 0) & (held < held[:, -1:])  # a part with more after it: the loop works out the rest
        again = np.ceil((left_now[:, None] - held) / inst.slot_h - 1e-9)
        if (again != np.ceil(left_now / inst.slot_h - 1e-9)[:, None] - held)[more].any():
            return None
    return x


def greedy_by_group(inst: PlanInstance, groups: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The greedy plan per group of identical nodes: GPUs of each job [J, G, T] and service [I, G, T], nodes on
    per group [G, T]. A rolling policy needs only this, not the plan laid out on every node."""
    inst.check()
    _, slots, jobs, services = inst.shape
    first = [g[0] for g in groups]
    size = np.array([len(g) for g in groups], dtype=np.int64)
    gpus = inst.gpus[first].astype(np.int64)
    # W of a powered-on node per GPU; a group without GPUs (CPU nodes) takes no GPU work: last, not a 0-division
    per_gpu_on = np.divide(inst.node_on_w[first], gpus, out=np.full(len(first), np.inf), where=gpus > 0)
    x = np.zeros((jobs, len(groups), slots))
    z = np.zeros((services, len(groups), slots))
    # 1. services, on the groups cheapest per GPU (plain ints: a few hundred steps per plan)
    by_cost = np.argsort(per_gpu_on, kind="stable").tolist()
    group_gpus = (gpus * size).tolist()
    in_use = [[0] * slots for _ in groups]
    demand = np.asarray(inst.service_gpus).tolist()
    for i in range(services):
        for t in range(slots):
            need = int(demand[i][t])
            for g in by_cost:
                take = min(need, group_gpus[g] - in_use[g][t])
                if take > 0:
                    z[i, g, t] += take
                    in_use[g][t] += take
                    need -= take
            if need > 0:
                name = inst.service_names[i] if i < len(inst.service_names) else f"service {i}"
                raise InfeasiblePlan(f"slot {t}: no room for {name}")
    used = np.array(in_use, dtype=np.int64).reshape(len(groups), slots)
    # 2. training, least slack first
    window_end = np.minimum(inst.job_deadline_slot, slots).astype(np.int64)
    capacity_h = (window_end - inst.job_first_slot) * np.minimum(inst.job_max_gpus, gpus.sum()) * inst.slot_h
    slack = capacity_h - inst.job_work_gpu_h
    room_g = (gpus * size)[:, None] - used  # free GPUs per group and slot
    slot_h = float(inst.slot_h)
    ngroups = len(groups)
    # Groups that draw alike per GPU (a homogeneous cluster, split only by which nodes are on): a job's cells rank
    # by slot price alone (its GPU-hour price is the price times one positive constant), groups in index order
    # within a slot, as the stable argsort of the offers would have it. The order of the slots from the window's
    # first, cut at its end, is then computed once per first slot instead of once per job.
    by_price: dict[int, list[int]] = {}
    price_ranks = bool((per_gpu_on == per_gpu_on[0]).all() and (inst.job_busy_w + per_gpu_on[0] > 0).all())
    room = room_g.tolist()
    slot_room = room_g.sum(
        axis=0
    ).tolist()  # free GPUs per slot over all groups: full slots are skipped at once
    taken: list[tuple[int, int, int, int]] = []  # (job, group, slot, GPUs), written into x at the end

    def cells(j: int, lo: int, hi: int) -> Iterator[tuple[int, int]]:
        """(group, slot) of the job's window, cheapest first (ties: earliest slot, then group)."""
        if price_ranks:
            order = by_price.get(lo)
            if order is None:
                order = by_price[lo] = (lo + np.argsort(inst.price[lo:], kind="stable")).tolist()
            return ((g, t) for t in order if t < hi and slot_room[t] for g in range(ngroups))
        # price of one GPU-hour of this job in each slot and group of its window
        offer = inst.price[lo:hi, None] * (inst.job_busy_w[j] + per_gpu_on[None, :])
        return (
            (flat % ngroups, lo + flat // ngroups)
            for flat in np.argsort(offer, axis=None, kind="stable").tolist()
        )

    order = np.argsort(slack, kind="stable")
    uncontended = _uncontended_takes(inst, window_end, room_g, order) if price_ranks else None
    if uncontended is not None:  # no slot runs short: every job takes the GPUs it would one by one below
        x[:] = uncontended
        room = (room_g - uncontended.sum(axis=0)).tolist()
    for j in order.tolist() if uncontended is None else ():
        left = float(inst.job_work_gpu_h[j])
        if left <= 1e-9:
            continue
        lo, hi = int(inst.job_first_slot[j]), int(window_end[j])
        max_j = int(inst.job_max_gpus[j])
        held = [0] * (hi - lo)  # this job's GPUs per slot
        for g, t in cells(j, lo, hi):
            if room[g][t] <= 0:
                continue
            take = min(room[g][t], max_j - held[t - lo], math.ceil(left / slot_h - 1e-9))
            if take <= 0:
                continue
            taken.append((j, g, t, take))
            room[g][t] -= take
            slot_room[t] -= take
            held[t - lo] += take
            left -= take * slot_h
            if left <= 1e-9:
                break
        if left > 1e-9:
            raise InfeasiblePlan(
                f"{inst.job_name(j)}: the greedy found no room for {left:g} GPU-hours by its deadline"
            )
    if taken:  # each (job, group, slot) is visited once, so plain assignment
        jj, gg, tt, nn = np.asarray(taken, dtype=np.int64).T
        x[jj, gg, tt] = nn
    room_g = np.asarray(room, dtype=np.int64).reshape(room_g.shape)
    used = (gpus * size)[:, None] - room_g
    # 3. nodes on per group, pre-booting where a boot would leave too few whole GPUs
    on_rows = []
    for g in range(len(groups)):  # plain ints: a few dozen steps per group
        lost = boot_loss(inst, first[g])
        n, per_node = int(size[g]), int(gpus[g])
        was = n if inst.initially_on[first[g]] else 0
        use = used[g].tolist()
        on = (-(-used[g] // gpus[g])).tolist() if gpus[g] else [0] * slots
        for t in range(slots - 1, -1, -1):
            before = on[t - 1] if t else was
            boots = max(0, on[t] - before)
            if use[t] > per_node * on[t] - lost * boots:
                if t:
                    on[t - 1] = max(on[t - 1], on[t])  # switch on a slot earlier
                elif on[0] < n:
                    short = use[0] - (per_node * on[0] - lost * boots)
                    on[0] = min(n, on[0] + -(-short // max(per_node - lost, 1)))
                else:
                    raise InfeasiblePlan("slot 0: nodes booting at the start leave too few GPUs")
        on_rows.append(on)
    return x, z, np.array(on_rows, dtype=np.int64).reshape(len(groups), slots)
