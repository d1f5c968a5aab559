"""HKBU-DVFS list scheduling: clocks, deadlines, new nodes, DRS accounting."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattsched.core.errors import WattschedError
from wattsched.energy.hkbu import (
    HKBU_2070S_MEDIAN,
    core_clock_for_voltage,
    hkbu_energy,
    hkbu_time,
    minimum_time,
)
from wattsched.policies.hkbu_dvfs import GPU_RULES, OFFLINE_ALGORITHMS, ORDERS, ListConfig, list_schedule
from wattsched.workloads.hkbu_tasks import TASK_MODELS, DvfsTask, synthetic_task_set


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


@pytest.mark.parametrize("tightness", [1.0, 1.3, 2.5])
def test_chosen_clocks_are_the_least_energy_pair_that_meets_the_slack(tightness):
    # windows from the fastest time to `tightness` x t*, so that some tasks are θ-adjusted into their slack
    rng = np.random.default_rng(3)
    t_min = minimum_time(HKBU_2070S_MEDIAN)
    rows = zip(
        rng.uniform(0, 50, 12), rng.uniform(10, 100, 12), rng.uniform(t_min, tightness, 12), strict=True
    )
    tasks = [_task(f"t{i}", a, t, t * k) for i, (a, t, k) in enumerate(rows)]
    result = list_schedule(tasks, ListConfig(gpus_per_node=2, dedicate_at_zero=False))
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
    for model, least in [("2070S", 0.04), ("1080Ti", 0.04), ("tpds-synthetic", 0.25)]:
        tasks = synthetic_task_set(0.5, model, gpus=400, seed=1)
        for algorithm in OFFLINE_ALGORITHMS:
            order, rule = algorithm.split("+")
            on = list_schedule(tasks, ListConfig(order=order, gpu_rule=rule, dvfs=True))
            off = list_schedule(tasks, ListConfig(order=order, gpu_rule=rule, dvfs=False))
            assert on.deadline_misses == off.deadline_misses == 0
            assert on.run_j < (1 - least) * off.run_j


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
    tasks = synthetic_task_set(0.8, "tpds-synthetic", gpus=40, online=True, seed=5)
    for order, rule, dvfs, drs in itertools.product(ORDERS, GPU_RULES, [True, False], [True, False]):
        result = list_schedule(tasks, ListConfig(order=order, gpu_rule=rule, dvfs=dvfs, drs=drs))
        assert result.energy_j > 0 and result.makespan_s > 0
    with pytest.raises(WattschedError, match="GPU rule"):
        ListConfig(gpu_rule="best")
    with pytest.raises(WattschedError, match="HKBU task model"):
        synthetic_task_set(0.5, task_model="A100")
    with pytest.raises(WattschedError, match="no task"):
        synthetic_task_set(0.2, gpus=1)


@pytest.mark.parametrize("model", TASK_MODELS)
@pytest.mark.parametrize("online", [False, True])
def test_task_sets_follow_the_upstream_generator(model, online):
    tasks = synthetic_task_set(0.6, model, gpus=500, online=online, seed=2)
    arrival = np.array([t.arrival_s for t in tasks])
    t_star = np.array([t.t_star_s for t in tasks])
    window = np.array([t.window_s for t in tasks])
    # U sets the size: 0.6 x 500 tasks (online: plus 0.4 x 500 at tick 0, the rest on ticks 1..1439)
    assert len(tasks) == 300 + (200 if online else 0)
    assert (arrival == 0).sum() == (200 if online else 300)
    assert arrival.max() <= (1439 if online else 0)
    # t* = (20..30) x (1..10) ticks; deadline = arrival + t*/u with u in [0.3, 0.7]
    assert t_star.min() >= 20 and t_star.max() <= 300 and np.all(t_star == np.round(t_star))
    assert np.all(window >= t_star / 0.7 - 1e-9) and np.all(window <= t_star / 0.3 + 1e-9)
    models = [t.model for t in tasks]
    assert all(m.t0 + m.D == pytest.approx(1.0) for m in models)
    if model == "tpds-synthetic":
        cg_share = np.array([m.cg / m.p_star for m in models])
        p_star = np.array([m.p_star for m in models])
        assert cg_share.min() >= 0.39 - 1e-9 and cg_share.max() <= 0.70 + 1e-9
        assert np.all(np.isin(np.round(p_star), np.arange(50, 151) * (2 if online else 3)))
    else:
        assert len({m.gamma for m in models}) == 1 and len({m.delta for m in models}) > 1


def test_with_dvfs_fitting_tasks_at_tick_zero_get_a_gpu_each():
    tasks = [_task(f"t{i}", 0, 10, 100) for i in range(5)]
    on = list_schedule(tasks, ListConfig(gpus_per_node=2, dvfs=True))
    off = list_schedule(tasks, ListConfig(gpus_per_node=2, dvfs=False))
    assert on.nodes == 3 and len({(p.node, p.gpu) for p in on.placed}) == 5
    assert off.nodes == 1  # the list scheduler packs them: the windows hold them one after another
    late = list_schedule(tasks, ListConfig(gpus_per_node=2, dvfs=True, dedicate_at_zero=False))
    assert late.nodes == 1
