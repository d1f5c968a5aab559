"""HKBU-DVFS list scheduling (issue 11, part 1): clocks, deadlines, new nodes, DRS accounting."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattsched.core.errors import WattschedError
from wattsched.energy.dvfs import (
    HKBU_2070S_MEDIAN,
    core_clock_for_voltage,
    hkbu_energy,
    hkbu_time,
    minimum_time,
)
from wattsched.policies.hkbu_dvfs import GPU_RULES, ORDERS, ListConfig, list_schedule
from wattsched.workloads.hkbu_tasks import DvfsTask, synthetic_task_set


def _task(name: str, arrival: float, t_star: float, window: float, model=HKBU_2070S_MEDIAN) -> DvfsTask:
    return DvfsTask(name, arrival, arrival + window, t_star, model)


def _brute_force_energy(task: DvfsTask, bound_s: float) -> float:
    """Least energy (J) over the Vc grid x a fine memory-clock grid with time <= bound_s."""
    m = task.model
    fc = core_clock_for_voltage(m.vc_grid)[:, None]
    fm = np.linspace(0.5, 1.2, 1401)[None, :]
    time = hkbu_time(m, fc, fm) * task.t_star_s
    energy = np.where(time <= bound_s + 1e-9, hkbu_energy(m, fc, fm) * task.t_star_s, np.inf)
    return float(energy.min())


@pytest.mark.parametrize("u", [0.3, 0.9, 1.1])
def test_chosen_clocks_are_the_least_energy_pair_that_meets_the_slack(u):
    tasks = synthetic_task_set(12, u, seed=3)
    result = list_schedule(tasks, ListConfig(gpus_per_node=2))
    for p in result.placed:
        bound = max(p.task.deadline_s - p.start_s, minimum_time(p.task.model) * p.task.t_star_s)
        best = _brute_force_energy(p.task, bound)
        # the closed-form memory clock is the continuous optimum: never worse than the grid, at most a hair better
        assert p.energy_j <= best * (1 + 1e-9)
        assert p.energy_j >= best * (1 - 1e-3)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 200), st.floats(5, 100), st.floats(1.0, 4.0)), min_size=1, max_size=25),
    st.sampled_from(list(ORDERS)),
    st.sampled_from(list(GPU_RULES)),
    st.booleans(),
)
def test_no_deadline_missed_when_the_fastest_clocks_meet_it(rows, order, rule, drs):
    """A task whose window admits it at the fastest clocks always meets its deadline: if no powered GPU can, a new
    node starts it on arrival."""
    t_min = minimum_time(HKBU_2070S_MEDIAN)
    tasks = [_task(f"t{i}", a, t, t * t_min * k) for i, (a, t, k) in enumerate(rows)]
    result = list_schedule(tasks, ListConfig(order=order, gpu_rule=rule, drs=drs, gpus_per_node=4))
    assert result.deadline_misses == 0
    assert len(result.placed) == len(tasks)
    # without DVFS the same holds for windows of at least t*
    slow = [_task(f"t{i}", a, t, t * k) for i, (a, t, k) in enumerate(rows)]
    assert list_schedule(slow, ListConfig(order=order, gpu_rule=rule, dvfs=False)).deadline_misses == 0


def test_dvfs_saves_energy_at_equal_deadline_satisfaction():
    tasks = synthetic_task_set(200, 0.5, seed=1)
    for order, rule in [("edf", "spt"), ("edf", "bf"), ("edf", "wf"), ("lpt", "ff")]:
        on = list_schedule(tasks, ListConfig(order=order, gpu_rule=rule, dvfs=True))
        off = list_schedule(tasks, ListConfig(order=order, gpu_rule=rule, dvfs=False))
        assert on.deadline_misses == off.deadline_misses == 0
        assert on.run_j < 0.95 * off.run_j


def test_a_node_is_switched_on_only_when_no_gpu_meets_the_deadline():
    loose = [_task("a", 0, 10, 100), _task("b", 0, 10, 100)]
    tight = [_task("a", 0, 10, 10), _task("b", 0, 10, 10)]
    cfg = ListConfig(gpus_per_node=1, dvfs=False)
    assert list_schedule(loose, cfg).nodes == 1
    assert list_schedule(tight, cfg).nodes == 2


def test_best_fit_and_worst_fit_pick_the_most_and_least_loaded_feasible_gpu():
    # GPU 0 busy until 30, GPU 1 until 10 (tasks a and b); c fits on either.
    tasks = [_task("a", 0, 30, 1000), _task("b", 0, 10, 1000), _task("c", 1, 5, 1000)]
    cfg = dict(gpus_per_node=2, dvfs=False, order="lpt")
    bf = {p.task.name: p.gpu for p in list_schedule(tasks, ListConfig(gpu_rule="bf", **cfg)).placed}
    wf = {p.task.name: p.gpu for p in list_schedule(tasks, ListConfig(gpu_rule="wf", **cfg)).placed}
    assert bf["c"] == bf["a"] and wf["c"] == wf["b"]


def test_drs_switches_an_idle_node_off_after_its_ticks_and_charges_the_next_switch_on():
    tasks = [_task("a", 0, 10, 1000), _task("b", 100, 10, 1000)]
    drs = list_schedule(tasks, ListConfig(gpus_per_node=1, dvfs=False, drs=True, drs_idle_ticks=5))
    always = list_schedule(tasks, ListConfig(gpus_per_node=1, dvfs=False, drs=False))
    assert drs.turn_ons == 2 and always.turn_ons == 1
    assert drs.node_on_s == [pytest.approx(10 + 5 + 10 + 5)]
    assert always.node_on_s == [pytest.approx(110)]
    assert drs.idle_j == pytest.approx(10 * 85.0) and always.idle_j == pytest.approx(90 * 85.0)
    assert drs.turn_on_energy_j == 400.0


def test_every_combination_runs_and_bad_names_are_clear_errors():
    tasks = synthetic_task_set(30, 0.8, seed=5, online_gpus=8)
    for order, rule, dvfs, drs in itertools.product(ORDERS, GPU_RULES, [True, False], [True, False]):
        result = list_schedule(tasks, ListConfig(order=order, gpu_rule=rule, dvfs=dvfs, drs=drs))
        assert result.energy_j > 0 and result.makespan_s > 0
    with pytest.raises(WattschedError, match="GPU rule"):
        ListConfig(gpu_rule="best")
    with pytest.raises(WattschedError, match="HKBU GPU"):
        synthetic_task_set(3, 0.5, gpu="A100")
