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


def greedy_by_group(inst: PlanInstance, groups: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The greedy plan per group of identical nodes: GPUs of each job [J, G, T] and service [I, G, T], nodes on
    per group [G, T]. A rolling policy needs only this, not the plan laid out on every node."""
    inst.check()
    _, slots, jobs, services = inst.shape
    first = [g[0] for g in groups]
    size = np.array([len(g) for g in groups], dtype=np.int64)
    gpus = inst.gpus[first].astype(np.int64)
    per_gpu_on = inst.node_on_w[first] / gpus  # W of a powered-on node per GPU
    used = np.zeros((len(groups), slots), dtype=np.int64)
    x = np.zeros((jobs, len(groups), slots))
    z = np.zeros((services, len(groups), slots))
    # 1. services, on the groups cheapest per GPU
    by_cost = np.argsort(per_gpu_on, kind="stable")
    for i in range(services):
        for t in range(slots):
            need = int(inst.service_gpus[i, t])
            for g in by_cost:
                take = min(need, int(gpus[g] * size[g] - used[g, t]))
                if take > 0:
                    z[i, g, t] += take
                    used[g, t] += take
                    need -= take
            if need > 0:
                name = inst.service_names[i] if i < len(inst.service_names) else f"service {i}"
                raise InfeasiblePlan(f"slot {t}: no room for {name}")
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

    for j in np.argsort(slack, kind="stable").tolist():
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
    on = np.zeros((len(groups), slots), dtype=np.int64)
    for g in range(len(groups)):
        lost = boot_loss(inst, first[g])
        was = int(size[g]) if inst.initially_on[first[g]] else 0
        on[g] = -(-used[g] // gpus[g])
        for t in range(slots - 1, -1, -1):
            before = on[g, t - 1] if t else was
            boots = max(0, on[g, t] - before)
            if used[g, t] > gpus[g] * on[g, t] - lost * boots:
                if t:
                    on[g, t - 1] = max(on[g, t - 1], on[g, t])  # switch on a slot earlier
                elif on[g, 0] < size[g]:
                    short = used[g, 0] - (gpus[g] * on[g, 0] - lost * boots)
                    on[g, 0] = min(size[g], on[g, 0] + -(-short // max(gpus[g] - lost, 1)))
                else:
                    raise InfeasiblePlan("slot 0: nodes booting at the start leave too few GPUs")
    return x, z, on
