"""HKBU-OnlinePD-reconstructed: the online primal-dual algorithm, the offline ILP, the proven ratio, and the
`hkbu-online-pd` allocation policy in the simulator (docs/hkbu-online-pd.md)."""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import replace

import numpy as np
import pandas as pd
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
    SMALL_VALUE_MAX,
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


def _one_type_form():
    return small_formulation(np.full((1, 10), 8), 0.1)


def test_a_job_with_a_nan_field_is_an_error_naming_it():
    """The 0/0 speed ratio a zero-work job used to reach the algorithm with (HyperDrive trace): an error naming the
    job, not "cannot convert float NaN to integer" from the priced-out shortcut; a NaN draw, which dropped every
    schedule silently, is the same error, and so is a NaN job given to the offline ILP."""
    base = PdJob(0.0, 3600.0, 4 * 3600.0, SMALL_VALUE_MAX, (1,), speed=np.array([1.0]), name="ok")
    bad = {
        "speed": replace(base, speed=np.array([np.nan]), name="app_0075"),
        "GPU draw": replace(base, power_w=np.full((1, 4), np.nan), name="app_0075"),
        "work": replace(base, work_gpu_s=float("nan"), name="app_0075"),
        "speed [-1.0]": replace(base, speed=np.array([-1.0]), name="app_0075"),
    }
    for field, job in bad.items():
        online = OnlinePrimalDual(_one_type_form())
        with pytest.raises(WattschedError, match=rf"job 'app_0075' cannot be priced: .*{re.escape(field)}"):
            online.arrive(job)
        assert online.admitted == online.rejected == 0
        with pytest.raises(WattschedError, match="app_0075"):
            solve_offline(_one_type_form(), [base, job])
    assert OnlinePrimalDual(_one_type_form()).arrive(base).admitted


@pytest.mark.filterwarnings("ignore:divide by zero")  # speed 0: an infinite run, which no schedule has
@settings(max_examples=40, deadline=None)
@given(
    work=st.sampled_from([0.0, 1e-9, 600.0, 3600.0, 1e9]),
    window=st.sampled_from([0.0, 1.0, 7200.0, 36000.0, math.inf]),
    speed=st.sampled_from([0.0, 0.5, 1.0]),
    arrival=st.floats(0.0, 40000.0),
)
def test_jobs_without_schedules_are_counted_rejections(work, window, speed, arrival):
    """No work, no window, an unbounded deadline, speed 0, an arrival past the horizon: each one arrival that is
    either admitted or counted as rejected, never an exception and never a NaN surplus."""
    online = OnlinePrimalDual(_one_type_form())
    offer = online.arrive(
        PdJob(arrival, work, arrival + window, SMALL_VALUE_MAX, (1, 2), speed=np.array([speed]))
    )
    assert online.admitted + online.rejected == 1 and offer.admitted == (online.admitted == 1)
    assert math.isfinite(offer.surplus) and offer.surplus >= 0
    if work <= 0 or speed == 0 or not math.isfinite(window):
        assert not offer.admitted


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


def test_a_job_without_work_runs_at_once_instead_of_failing_the_pricing(tmp_path):
    """A zero-duration GPU job (real traces have them: Tiresias's HyperDrive trace) has nothing to price; its
    speed ratio was 0/0 and stopped the run with a NaN error."""
    rows = [(0, 0, 2, 3600), (10, 600, 1, 3600)]
    workload, cluster = _workload(tmp_path, rows)
    cfg = SimulationConfig(
        workload=workload, cluster=cluster, allocation="hkbu-online-pd", check_invariants=True
    )
    res = run_simulation(cfg, None)
    status = dict(zip(res.jobs["job_id"], res.jobs["status"], strict=True))
    assert status == {"j0": "completed", "j1": "completed"}
    params = res.summary["policies"]["allocation"]["parameters"]
    assert (
        params["admitted"] == 1 and params["started_without_work"] == 1
    )  # j0 was not priced, and is counted


@pytest.mark.parametrize("small_first", [True, False])
def test_a_job_without_work_starts_on_a_gpu_type_with_room_for_it(tmp_path, small_first):
    """A zero-work 8-GPU job on a 4-GPU V100 node plus an 8-GPU A100 node: planned on GPU type 0 whatever its
    size, it waited for ever when type 0 was the 4-GPU one (the run stalled); it runs on the type that fits."""
    workload, _ = _workload(tmp_path, [(0, 0, 8, 3 * 3600), (10, 600, 1, 3600)])
    groups = [("V100", 4), ("A100", 8)] if small_first else [("A100", 8), ("V100", 4)]
    (tmp_path / "mixed.yaml").write_text(
        "name: mixed\nnode_groups:\n"
        + "".join(
            f"  - count: 1\n    gpus: {n}\n    gpu_model: {m}\n    cpu_milli: 32000\n    memory_mib: 262144\n"
            for m, n in groups
        )
    )
    cfg = SimulationConfig(
        workload=workload,
        cluster=str(tmp_path / "mixed.yaml"),
        allocation="hkbu-online-pd",
        check_invariants=True,
    )
    res = run_simulation(cfg, None)
    jobs = res.jobs.set_index("job_id")
    assert dict(jobs["status"]) == {"j0": "completed", "j1": "completed"}
    assert float(jobs.loc["j0", "end_s"]) == 0.0  # it started, and ended, on arrival
    assert res.summary["policies"]["allocation"]["parameters"]["started_without_work"] == 1


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


# --- the experiment (experiments/hkbu_online_pd.py on the protocol) ----------------------------------------------


def run_pd_experiment(out, **settings):
    from wattsched.experiments.hkbu_online_pd import HkbuOnlinePdConfig
    from wattsched.experiments.protocol import EXPERIMENTS, run_experiment

    return run_experiment(
        EXPERIMENTS.create("hkbu-online-pd"), HkbuOnlinePdConfig(**settings), out, workers=1
    )


def test_experiment_writes_ratios_and_the_bound(tmp_path):
    from wattsched.experiments.compare import rows_of

    res = run_pd_experiment(tmp_path, instances=3, order_searches=1, philly=False)
    ratios = (tmp_path / "ratios.csv").read_text().splitlines()
    assert ratios[0].startswith("instance,kind,construction,online_objective,offline_optimum,empirical_ratio")
    assert len(ratios) == 1 + 3 + 8 + 1  # random, the ladder's batches, one order search
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["label"] == LABEL and s["bound_violations"] == 0 and s["instances"] == 12
    assert s["competitive_ratio_bound"] == pytest.approx(small_family_bound()["competitive_ratio_bound"])
    worst = s["worst_instance"]["empirical_ratio"]
    assert worst >= 1.0 - 1e-9 and worst <= s["competitive_ratio_bound"]
    assert set(pd.read_csv(tmp_path / "ratios.csv")["kind"]) == {"random", "adversarial"}
    assert s["philly"] == {"setup": None, "runs": []} and not (tmp_path / "philly.csv").exists()
    summary = (tmp_path / "summary.md").read_text()
    assert "reconstruction" in summary and f"OPT <= {s['competitive_ratio_bound']:.3f} x ONLINE" in summary
    assert f"Worst instance: `{s['worst_instance']['instance']}`" in summary
    assert "No runs to compare" in summary
    assert (tmp_path / "ratio_histogram.png").stat().st_size > 0
    # The small instances are not runs: records.csv holds none, and compare says why.
    assert res.records.empty and (tmp_path / "records.csv").read_text().strip() == "experiment,policy,basis"
    with pytest.raises(
        WattschedError, match="no runs to compare: the hkbu-online-pd experiment recorded none"
    ):
        rows_of(tmp_path)


def test_order_searches_as_cells_equal_one_search_after_another():
    """Each worst-order search is a cell of its own, started from the state the one search generator would have
    reached after the searches before it: the same orders as running them one after another."""
    from wattsched.experiments.hkbu_online_pd import (
        ADVERSARY_SEED,
        ORDER_SEARCH_STEPS,
        Instance,
        order_search_states,
        ratio_row,
    )
    from wattsched.policies.hkbu_online_pd import worst_order

    states = order_search_states(3)
    rng = np.random.default_rng(ADVERSARY_SEED)
    for i, state in enumerate(states):
        assert rng.bit_generator.state == state
        form, jobs = random_instance(ADVERSARY_SEED + i)
        if i < 2:  # the last search's result is not needed, only the state before it
            _, objective = worst_order(form, simultaneous(jobs), rng, ORDER_SEARCH_STEPS)
            assert (
                ratio_row(Instance("order", ADVERSARY_SEED + i, 1.0, state))["online_objective"] == objective
            )


def test_missing_philly_data_is_a_note_and_no_replay(tmp_path):
    from wattsched.data.registry import is_available

    empty = tmp_path / "data"
    empty.mkdir()
    if is_available("philly-pollux", "philly.csv", empty):
        pytest.skip("the Philly trace is in the dataset cache, so it is never missing here")
    out = tmp_path / "out"
    out.mkdir()
    (out / "philly.csv").write_text("policy,on_time,net_value_usd\nstale,1,1\n")  # an earlier run's replays
    res = run_pd_experiment(out, instances=1, order_searches=0, data_dir=str(empty))
    assert res.records.empty and not (out / "philly.csv").exists()
    notes = json.loads((out / "summary.json").read_text())["notes"]
    assert len(notes) == 1 and notes[0].startswith("Philly comparison skipped: dataset file")
    assert "Philly comparison skipped" in (out / "summary.md").read_text()


@pytest.mark.realdata
def test_philly_replays_are_the_records_compare_reads(tmp_path):
    """records.csv carries the replays of philly.csv under the comparison's metric names, policy labels and
    reconstruction marks (what compare read from philly.csv before), charged over one common window."""
    from wattsched.experiments.compare import rows_of
    from wattsched.experiments.hkbu_online_pd import PHILLY_POLICIES

    require_real_file("philly-pollux", "philly.csv")
    res = run_pd_experiment(tmp_path, instances=1, order_searches=0, max_jobs=300)
    philly = pd.read_csv(tmp_path / "philly.csv").set_index("policy")
    rows = {r["policy"]: r for r in rows_of(tmp_path)}
    assert list(rows) == list(philly.index) == list(PHILLY_POLICIES)
    same = {
        "jobs_completed": "completed", "energy_kwh": "energy_kwh", "cost_usd": "energy_cost_usd",
        "own_window_kwh": "own_window_kwh", "jct_mean_s": "jct_mean_s", "gpu_allocation": "gpu_allocation_mean",
        "deadline_misses": "deadline_misses",
    }  # fmt: skip
    for policy, row in rows.items():
        for metric, column in same.items():
            assert row[metric] == pytest.approx(philly.loc[policy, column], rel=1e-5), (policy, metric)
        assert row["experiment"] == "hkbu-online-pd"
    basis = ALLOCATION_POLICIES.factory("hkbu-online-pd").basis
    assert (
        rows["hkbu-online-pd"]["reconstructed"]
        and rows["hkbu-online-pd"]["basis"] == f"hkbu-online-pd: {basis}"
    )
    assert not rows["greedy-first-fit"]["reconstructed"] and not rows["edf-first-fit"]["reconstructed"]
    assert philly.loc["hkbu-online-pd", "deadline_misses"] == philly.loc["hkbu-online-pd", "rejected"] > 0
    np.testing.assert_allclose(philly["energy_cost_usd"], philly["energy_kwh"] * 0.10, rtol=1e-5)
    records = res.records.set_index("policy")
    assert list(records["replay"]) == ["hkbu-online-pd", "arrival-greedy+first-fit", "edf-greedy+first-fit"]
    np.testing.assert_allclose(records["net_value_usd"], philly["net_value_usd"], rtol=1e-5, atol=0.5)
    assert res.window and res.window in json.loads((tmp_path / "summary.json").read_text())["notes"]
    compared = CliRunner().invoke(app, ["compare", str(tmp_path)])
    assert compared.exit_code == 0 and "greedy-first-fit" in compared.output, compared.output


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (["--eta", "-1"], "--eta must be positive, got -1.0"),
        (
            ["--deadline-slack", "0.5"],
            "--deadline-slack must be at least 1 (a job needs its duration), got 0.5",
        ),
        (["--instances", "0"], "--instances: Input should be greater than or equal to 1"),
        (["--order-searches", "-1"], "--order-searches: Input should be greater than or equal to 0"),
    ],
)
def test_experiment_cli_rejects_bad_input(tmp_path, flag, message):
    res = CliRunner().invoke(
        app, ["experiment", "hkbu-online-pd", *flag, "--no-philly", "--quiet", "--out", str(tmp_path)]
    )
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.strip() == f"error: {message}", res.stderr


def test_experiment_through_the_cli_prints_its_finding_and_compare_says_no_runs(tmp_path):
    out = tmp_path / "o"
    res = CliRunner().invoke(
        app, ["experiment", "hkbu-online-pd", "--instances", "2", "--order-searches", "0", "--no-philly",
              "--no-plots", "--quiet", "--out", str(out)]
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (
        "ratios.csv" in res.output
        and "summary.json" in res.output
        and not (out / "ratio_histogram.png").exists()
    )
    compared = CliRunner().invoke(app, ["compare", str(out)])
    assert compared.exit_code == 2 and "Traceback" not in compared.output
    lines = compared.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {out}: no runs to compare: "), compared.stderr
    assert "hkbu-online-pd experiment recorded none" in lines[0]
    assert "Proven competitive ratio bound" in res.output  # the finding, printed without runs to compare
