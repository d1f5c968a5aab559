"""CE-DLA's exact planner (policies/allocation/cedla_milp.py): the MILP against a brute-force optimum on a
hand-sized instance, cost accounting, and named infeasibility."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from wattsched.policies.allocation.cedla_milp import InfeasiblePlan, PlanInstance, plan_cost, solve_milp

PRICE = np.array([0.30, 0.10, 0.05, 0.20, 0.40, 0.08])  # $/kWh, six hourly slots
ON_W, BOOT_J, JOB_W, SVC_W = 300.0, 360_000.0, np.array([200.0, 150.0, 250.0, 100.0]), 120.0


def instance(**kw) -> PlanInstance:
    """3 one-GPU nodes, 6 slots, 4 jobs (one GPU each), 1 service needing one GPU in slots 3 and 4."""
    args = dict(
        gpus=np.array([1, 1, 1]),
        node_on_w=np.full(3, ON_W),
        boot_j=np.full(3, BOOT_J),
        boot_share=np.full(3, 0.1),  # a one-GPU node is unusable in the slot it boots in
        price=PRICE,
        job_work_gpu_h=np.array([2.0, 1.0, 3.0, 2.0]),
        job_max_gpus=np.array([1, 1, 1, 1]),
        job_first_slot=np.array([0, 1, 0, 2]),
        job_deadline_slot=np.array([4, 6, 6, 6]),
        job_busy_w=JOB_W,
        service_gpus=np.array([[0, 0, 0, 1, 1, 0]]),
        service_busy_w=np.array([SVC_W]),
        initially_on=np.array([True, True, True]),
        job_names=("a", "b", "c", "d"),
        service_names=("svc",),
    )
    args.update(kw)
    return PlanInstance(**args)


def brute_force(inst: PlanInstance) -> float:
    """Every way to place each job's GPU-hours in its window; for each, the cheapest on/off sequence by a DP
    over the number of nodes on (identical nodes: a node switched on in a slot serves nothing in it)."""
    slots = len(inst.price)
    total = int(inst.gpus.sum())
    choices = []
    for j in range(len(inst.job_work_gpu_h)):
        window = range(int(inst.job_first_slot[j]), int(inst.job_deadline_slot[j]))
        choices.append(list(itertools.combinations(window, int(inst.job_work_gpu_h[j]))))
    best = np.inf
    for combo in itertools.product(*choices):
        used = inst.service_gpus.sum(axis=0).astype(int).copy()
        busy_w = inst.service_gpus.sum(axis=0) * inst.service_busy_w[0]
        for j, picked in enumerate(combo):
            for t in picked:
                used[t] += 1
                busy_w[t] += inst.job_busy_w[j]
        if (used > total).any():
            continue
        cost = {total: 0.0}  # nodes on before slot 0 -> cost so far
        for t in range(slots):
            nxt: dict[int, float] = {}
            for prev, so_far in cost.items():
                for on in range(total + 1):
                    starts = max(0, on - prev)
                    if used[t] > min(prev, on):
                        continue
                    kwh = (on * ON_W + busy_w[t]) / 1000.0 + starts * BOOT_J / 3.6e6
                    value = so_far + kwh * inst.price[t]
                    if value < nxt.get(on, np.inf):
                        nxt[on] = value
            cost = nxt
        best = min(best, min(cost.values(), default=np.inf))
    return best


def test_milp_matches_the_brute_force_optimum():
    inst = instance()
    plan = solve_milp(inst)
    assert plan.status == "optimal"
    assert plan.cost_usd == pytest.approx(brute_force(inst), rel=1e-6)
    # the plan meets every constraint it claims to
    work = plan.job_gpus.sum(axis=(1, 2)) * inst.slot_h
    assert (work >= inst.job_work_gpu_h - 1e-9).all()
    for j in range(4):
        outside = np.ones(6, bool)
        outside[inst.job_first_slot[j] : inst.job_deadline_slot[j]] = False
        assert plan.job_gpus[j][:, outside].sum() == 0
    assert (plan.service_gpus.sum(axis=1) >= inst.service_gpus).all()
    held = plan.job_gpus.sum(axis=0) + plan.service_gpus.sum(axis=0)
    assert (held <= plan.node_on * inst.gpus[:, None]).all()


def test_cheap_hours_carry_the_deferrable_work():
    plan = solve_milp(instance())
    per_slot = plan.job_gpus.sum(axis=(0, 1))
    assert per_slot[4] == 0  # the dearest hour runs no training
    assert per_slot[2] >= per_slot[0]  # the cheapest hour is used at least as much as the first


def test_plan_cost_is_the_objective_of_a_hand_checked_plan():
    inst = instance()
    job = np.zeros((4, 3, 6))
    svc = np.zeros((1, 3, 6))
    on = np.zeros((3, 6), dtype=bool)
    on[0, :] = True  # one node on all day, idle: 300 W x 6 h, no boots (it was on)
    cost, kwh = plan_cost(inst, job, svc, on)
    assert kwh == pytest.approx(1.8)
    assert cost == pytest.approx(0.3 * PRICE.sum())
    on[1, 2] = True  # a second node switched on in slot 2: 0.1 kWh of boot at $0.05 plus 0.3 kWh
    cost2, _ = plan_cost(inst, job, svc, on)
    assert cost2 - cost == pytest.approx((0.1 + 0.3) * 0.05)


def test_a_deadline_shorter_than_the_job_is_named():
    inst = instance(job_work_gpu_h=np.array([5.0, 1.0, 3.0, 2.0]))  # 'a' has 4 slots on at most 1 GPU
    with pytest.raises(InfeasiblePlan, match=r"^a: needs 5 GPU-hours .* deadline is shorter than the job"):
        solve_milp(inst)
    too_much = instance(service_gpus=np.array([[0, 0, 4, 0, 0, 0]]))
    with pytest.raises(InfeasiblePlan, match="slot 2: the services need 4 GPUs"):
        solve_milp(too_much)
