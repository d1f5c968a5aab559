"""CE-DLA's scalable planner (policies/allocation/cedla_greedy.py) against the exact MILP on the same instances."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.test_cedla_milp import instance
from wattsched.policies.allocation.cedla_greedy import solve_greedy
from wattsched.policies.allocation.cedla_milp import InfeasiblePlan, random_instance, solve_milp


def assert_feasible(inst, plan):
    work = plan.job_gpus.sum(axis=(1, 2)) * inst.slot_h
    assert (work >= inst.job_work_gpu_h - 1e-9).all()
    for j in range(len(inst.job_work_gpu_h)):
        outside = np.ones(len(inst.price), bool)
        outside[inst.job_first_slot[j] : inst.job_deadline_slot[j]] = False
        assert plan.job_gpus[j][:, outside].sum() == 0
        assert (plan.job_gpus[j].sum(axis=0) <= inst.job_max_gpus[j]).all()
    assert (plan.service_gpus.sum(axis=1) >= inst.service_gpus).all()
    held = plan.job_gpus.sum(axis=0) + plan.service_gpus.sum(axis=0)
    assert (held <= plan.node_on * inst.gpus[:, None]).all()


def test_greedy_is_feasible_and_never_beats_the_optimum_on_the_hand_instance():
    inst = instance()
    greedy, exact = solve_greedy(inst), solve_milp(inst)
    assert_feasible(inst, greedy)
    assert greedy.cost_usd >= exact.cost_usd - 1e-9


@pytest.mark.parametrize("seed", range(5))
def test_greedy_meets_every_deadline_and_slo_the_milp_meets_and_stays_within_5_percent(seed):
    inst = random_instance(100 + seed, nodes=4, slots=24, jobs=8)
    exact = solve_milp(inst)
    greedy = solve_greedy(inst)
    assert exact.status == "optimal"
    assert_feasible(inst, greedy)
    assert exact.cost_usd * (1 - 1e-4) <= greedy.cost_usd <= 1.05 * exact.cost_usd


def test_greedy_names_a_job_it_cannot_fit():
    inst = instance(job_work_gpu_h=np.array([5.0, 1.0, 3.0, 2.0]))
    with pytest.raises(InfeasiblePlan, match=r"^a: needs 5 GPU-hours"):
        solve_greedy(inst)
