"""HKBU-OnlinePD-reconstructed: the online primal-dual algorithm, the offline ILP, the proven ratio, and the
`hkbu-online-pd` allocation policy in the simulator (docs/hkbu-online-pd.md)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.conftest import make_jobs, require_real_file
from wattsched.cli.main import app
from wattsched.core.errors import WattschedError
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import run_simulation
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.contract import ALLOCATION_POLICIES
from wattsched.policies.hkbu_online_pd import (
    LABEL,
    Formulation,
    OnlinePrimalDual,
    PdJob,
    PriceRule,
    enumerate_schedules,
    ladder_instance,
    random_instance,
    ratio_bound,
    run_online,
    simultaneous,
    small_family_bound,
    small_formulation,
    solve_offline,
)

TOL = 1e-9


def test_dual_constraints_hold_after_every_arrival():
    """For every job seen so far and every schedule s: mu_j + sum of prices x g >= u_j(s) - E(s), with the prices
    after each arrival (prices only rise, and mu_j is the best surplus at its arrival)."""
    for seed in range(3):
        form, jobs = random_instance(seed)
        pd_ = OnlinePrimalDual(form)
        seen: list[tuple[PdJob, float]] = []
        for job in jobs:
            offer = pd_.arrive(job)
            seen.append((job, offer.surplus))
            assert np.all(pd_.allocated <= form.capacity)
            for past, mu in seen:
                sch = enumerate_schedules(form, past)
                slack = mu - pd_.surplus(sch)  # mu + sum p g - w
                assert slack.min(initial=0.0) >= -TOL


def test_prices_block_every_schedule_that_would_not_fit():
    """Lemma 1: once a GPU-slot holds C - g_max + 1 GPUs its price is V, so no schedule through it has a
    positive surplus and an admitted schedule always fits."""
    form, jobs = ladder_instance(1, per_batch=20)
    pd_, offers = run_online(form, jobs)
    assert pd_.allocated.max() <= form.capacity.min()
    assert all(o.surplus <= TOL for o in offers if not o.admitted)


@pytest.mark.parametrize("seed", range(6))
def test_online_objective_never_exceeds_the_offline_optimum(seed):
    form, jobs = random_instance(seed)
    pd_, _ = run_online(form, jobs)
    off = solve_offline(form, jobs)
    assert off.status == "optimal"
    assert pd_.objective <= off.objective * (1 + 1e-9) + 1e-12
    assert off.objective <= small_family_bound()["competitive_ratio_bound"] * pd_.objective


def test_offline_optimum_matches_brute_force():
    form, jobs = random_instance(3, jobs=3, slots=5)
    per_job = [enumerate_schedules(form, j) for j in jobs]
    best = 0.0
    for pick in itertools.product(*[[None, *range(len(s))] for s in per_job]):
        used = np.zeros_like(form.capacity)
        value = 0.0
        for s, i in zip(per_job, pick, strict=True):
            if i is not None:
                used[s.gpu_type[i], s.first_slot[i] : s.first_slot[i] + s.slots[i]] += s.gpus[i]
                value += s.value[i]
        if np.all(used <= form.capacity):
            best = max(best, value)
    assert solve_offline(form, jobs).objective == pytest.approx(best, rel=1e-9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    jobs=st.integers(3, 16),
    adversarial=st.booleans(),
)
def test_empirical_ratio_never_exceeds_the_printed_bound(seed, jobs, adversarial):
    form, js = random_instance(seed, jobs=jobs)
    if adversarial:  # all at once, in rising order of value: the order an adversary picks
        js = sorted(simultaneous(js), key=lambda j: j.value_per_gpu_s)
    pd_, _ = run_online(form, js)
    off = solve_offline(form, js)
    bound = small_family_bound()["competitive_ratio_bound"]
    if off.objective > 0:
        assert pd_.objective > 0
        assert off.objective / pd_.objective <= bound
    assert pd_.bound()["competitive_ratio_bound"] <= bound + 1e-9  # the instance is in the family


@pytest.mark.parametrize("batches", [1, 2, 4, 8])
def test_ladder_adversary_stays_under_the_bound(batches):
    form, jobs = ladder_instance(batches)
    pd_, _ = run_online(form, jobs)
    off = solve_offline(form, jobs)
    assert off.objective / pd_.objective <= small_family_bound()["competitive_ratio_bound"]
    assert off.objective / pd_.objective >= 1.0


def test_bound_tends_to_the_textbook_log_for_small_jobs():
    rule = PriceRule(1.0, 100.0, 1.0)
    tiny = ratio_bound(rule, np.array([10**6]), np.array([1]))
    assert tiny["alpha"] == pytest.approx(np.log(201.0), rel=1e-4)
    assert tiny["competitive_ratio_bound"] == pytest.approx(1.5 * np.log(201.0), rel=1e-4)
    big = ratio_bound(rule, np.array([8]), np.array([2]))
    assert big["competitive_ratio_bound"] > tiny["competitive_ratio_bound"]  # the demand-fraction term


def test_schedules_respect_the_stated_bounds():
    """Every offered schedule has w >= L x GPU-slots and w <= V x g (assumptions A1, A2)."""
    form, jobs = random_instance(11)
    for job in jobs:
        s = enumerate_schedules(form, job)
        assert np.all(s.value >= form.density_floor * s.gpus * s.slots - TOL)
        assert np.all(s.value <= form.value_per_gpu_max * s.gpus + TOL)
        assert np.all(s.end_s <= job.deadline_s + 1e-6) and np.all(s.start_s >= job.arrival_s)


def test_bad_formulation_is_a_clear_error():
    form = small_formulation(np.array([[8]]), 0.1)
    with pytest.raises(WattschedError, match="capacity 1 is below the largest job"):
        Formulation(**{**form.__dict__, "capacity": np.array([[1]])})
    with pytest.raises(WattschedError, match="clock levels"):
        from wattsched.policies.hkbu_online_pd import clock_levels

        clock_levels((0.3, 1.0))


# --- the allocation policy in the simulator ----------------------------------------------------------------------


def _workload(tmp_path, rows):
    lines = ["job_id,submit_time,duration,num_gpu,deadline_at"]
    lines += [f"j{i},{s},{d},{g},{dl}" for i, (s, d, g, dl) in enumerate(rows)]
    (tmp_path / "jobs.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "c.yaml").write_text(
        "name: small\nnode_groups:\n  - count: 2\n    gpus: 4\n    gpu_model: V100\n    cpu_milli: 32000\n"
        "    memory_mib: 262144\n"
    )
    return str(tmp_path / "jobs.csv"), str(tmp_path / "c.yaml")


def test_policy_is_registered_as_a_reconstruction():
    policy = ALLOCATION_POLICIES.create("hkbu-online-pd")
    assert policy.reconstructed and policy.needs_deadlines and LABEL in policy.description
    assert "OASiS" in policy.basis


def test_policy_admits_feasible_jobs_and_rejects_impossible_ones(tmp_path):
    rows = [(0, 3600, 2, 4 * 3600), (60, 1800, 2, 3 * 3600), (120, 7200, 1, 3600), (300, 600, 1, 4000)]
    workload, cluster = _workload(tmp_path, rows)
    cfg = SimulationConfig(
        workload=workload, cluster=cluster, allocation="hkbu-online-pd", check_invariants=True
    )
    res = run_simulation(cfg, None)
    status = dict(zip(res.jobs["job_id"], res.jobs["status"], strict=True))
    assert status["j2"] == "dropped"  # 2 h of work, a 1-h deadline: no schedule exists
    assert status["j0"] == status["j1"] == status["j3"] == "completed"
    done = res.jobs[res.jobs["status"] == "completed"]
    assert (done["end_s"] <= done["deadline_s"] + 1).all()
    params = res.summary["policies"]["allocation"]["parameters"]
    assert params["label"] == LABEL and params["admitted"] == 3 and params["rejected"] == 1
    assert params["bound_competitive_ratio_bound"] > 1


def test_policy_prices_out_low_value_work_when_the_cluster_fills(tmp_path):
    """Eight GPUs, 40 one-GPU jobs of 10 h arriving together: prices rise with each admission, and the policy
    stops admitting before the GPUs run out (it keeps room for work to come) instead of queueing past deadlines."""
    rows = [(0, 36000, 1, 12 * 3600) for _ in range(40)]
    workload, cluster = _workload(tmp_path, rows)
    res = run_simulation(
        SimulationConfig(workload=workload, cluster=cluster, allocation="hkbu-online-pd"), None
    )
    p = res.summary["policies"]["allocation"]["parameters"]
    assert 0 < p["admitted"] <= 8 and p["admitted"] + p["rejected"] == 40
    assert res.summary.get("deadline_misses", 0) == p["rejected"]  # only the rejected ones miss


def test_missing_deadlines_name_the_flag():
    policy = ALLOCATION_POLICIES.create("hkbu-online-pd")
    scheduler = RoundScheduler(policy, 3600.0)
    jobs = make_jobs([{"submit": 0, "duration": 10, "gpus": 1}])
    with pytest.raises(WattschedError, match="--deadline-slack"):
        scheduler.check_inputs(jobs, "tiny")


def test_missing_deadlines_through_the_cli(tmp_path):
    res = CliRunner().invoke(
        app, ["simulate", "--allocation", "hkbu-online-pd", "--quiet", "--out", str(tmp_path)]
    )
    assert res.exit_code == 2
    assert "hkbu-online-pd" in res.output and "--deadline-slack" in res.output


@pytest.mark.realdata
def test_philly_subset_with_deadlines(tmp_path):
    require_real_file("philly-pollux", "philly.csv")
    out = tmp_path / "p"
    args = ["simulate", "--workload", "philly", "--cluster", "philly", "--allocation", "hkbu-online-pd",
            "--deadline-slack", "3", "--max-jobs", "3000", "--quiet", "--out", str(out)]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    p = s["policies"]["allocation"]["parameters"]
    assert p["admitted"] + p["rejected"] == 3000 == s["jobs_submitted"]
    assert s["jobs_completed"] == p["admitted"] and p["admitted"] > 0
    assert p["bound_competitive_ratio_bound"] > p["bound_small_job_limit"] > 1


def test_experiment_writes_ratios_and_the_bound(tmp_path):
    from wattsched.experiments.hkbu_online_pd import run_experiment

    res = run_experiment(out=tmp_path, random_count=3, order_searches=1, philly=False, plots=True)
    ratios = (tmp_path / "ratios.csv").read_text().splitlines()
    assert ratios[0].startswith("instance,kind,construction,online_objective,offline_optimum,empirical_ratio")
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["label"] == LABEL and s["bound_violations"] == 0
    assert s["competitive_ratio_bound"] == pytest.approx(small_family_bound()["competitive_ratio_bound"])
    worst = s["worst_instance"]["empirical_ratio"]
    assert worst >= 1.0 - 1e-9 and worst <= s["competitive_ratio_bound"]
    assert set(res.results["kind"]) == {"random", "adversarial"}
    assert "reconstruction" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "ratio_histogram.png").stat().st_size > 0


def test_experiment_cli_rejects_bad_input(tmp_path):
    res = CliRunner().invoke(
        app, ["experiment", "hkbu-online-pd", "--eta", "-1", "--no-philly", "--quiet", "--out", str(tmp_path)]
    )
    assert res.exit_code == 2 and "--eta must be positive" in res.output
