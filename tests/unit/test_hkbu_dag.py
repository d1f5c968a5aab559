"""HKBU communication-contention-aware DAG scheduling (docs/hkbu-dag.md): the contention model, AdaDUAL, SRSF,
placement orders and GPU picks, energy, the `hkbu-dag` allocation policy and the experiment."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import make_cluster, make_jobs
from wattsched.core.errors import WattschedError
from wattsched.core.states import STATUS_DONE
from wattsched.policies.hkbu_dag import (
    ADADUAL_RATIO,
    BETA,
    ETA,
    PLACEMENT_ORDERS,
    DagCluster,
    comm_policy,
    comm_speed,
    parse_gpu_pick,
    pick_gpus,
    simulate_dag,
)
from wattsched.workloads.hkbu_dag import PROFILES, DagJobs, microsoft_generate, random_generate


def dag_jobs(rows: list[dict]) -> DagJobs:
    """rows: arrival, workers, iters, size (MB), fw, bw (ms), mem (MB), model name."""
    return DagJobs(
        arrival_ms=np.array([r.get("arrival", 0.0) for r in rows], dtype=float),
        nworkers=np.array([r.get("workers", 1) for r in rows], dtype=np.int64),
        iters=np.array([r.get("iters", 1) for r in rows], dtype=np.int64),
        model=np.array([r.get("model", "resnet50") for r in rows], dtype=object),
        model_size_mb=np.array([r.get("size", 100.0) for r in rows], dtype=float),
        fw_ms=np.array([r.get("fw", 0.0) for r in rows], dtype=float),
        bw_ms=np.array([r.get("bw", 0.0) for r in rows], dtype=float),
        train_mem_mb=np.array([r.get("mem", 100.0) for r in rows], dtype=float),
    )


TWO_NODES_ONE_GPU = DagCluster(num_nodes=2, gpus_per_node=1)


# -- contention model --------------------------------------------------------------------------------------


def test_comm_speed_formula():
    assert comm_speed(1) == pytest.approx(1 / BETA)
    assert comm_speed(2) == pytest.approx(1 / (ETA + 2 * BETA))
    assert np.allclose(comm_speed([1, 3]), [1 / BETA, 1 / (2 * ETA + 3 * BETA)])
    with pytest.raises(WattschedError):
        comm_speed(0)


def test_two_overlapping_comm_tasks_are_repriced_when_k_changes():
    """A (100 MB) all-reduces alone from 0; B (20 MB) joins at 10 ms; both slow to 1/(eta + 2 beta); B ends,
    A speeds up again. Hand-worked finish times."""
    jobs = dag_jobs([{"workers": 2, "size": 100.0}, {"workers": 2, "size": 20.0, "arrival": 10.0}])
    r = simulate_dag(jobs, TWO_NODES_ONE_GPU, placement="ssf", gpu_pick="bp", comm="unaware", record=True)
    t_b = 10.0 + 20.0 * (ETA + 2 * BETA)
    sent_a = 10.0 / BETA + 20.0  # alone until 10 ms, then the same speed as B while B runs
    t_a = t_b + (100.0 - sent_a) * BETA
    assert r.finish_ms[1] == pytest.approx(t_b)
    assert r.finish_ms[0] == pytest.approx(t_a)
    assert r.max_comm_per_node.tolist() == [2, 2]


def test_adadual_joins_only_a_task_with_enough_left():
    # 88.3 MB left of A when B (20 MB) arrives: ratio 4.4 >= 2.549, B joins (same times as unaware).
    small = dag_jobs([{"workers": 2, "size": 100.0}, {"workers": 2, "size": 20.0, "arrival": 10.0}])
    r = simulate_dag(small, TWO_NODES_ONE_GPU, gpu_pick="bp", comm="adadual")
    assert r.finish_ms[1] == pytest.approx(10.0 + 20.0 * (ETA + 2 * BETA))
    # B of 50 MB: 88.3 / 50 < 2.549, B waits for A to end alone, then runs alone.
    big = dag_jobs([{"workers": 2, "size": 100.0}, {"workers": 2, "size": 50.0, "arrival": 10.0}])
    r = simulate_dag(big, TWO_NODES_ONE_GPU, gpu_pick="bp", comm="adadual")
    assert r.finish_ms[0] == pytest.approx(100.0 * BETA)
    assert r.finish_ms[1] == pytest.approx(150.0 * BETA)
    assert pytest.approx(2 * (BETA + ETA) / BETA) == ADADUAL_RATIO
    # Exclusive (threshold 0) serialises even the small one.
    r = simulate_dag(small, TWO_NODES_ONE_GPU, gpu_pick="bp", comm="exclusive")
    assert r.finish_ms[1] == pytest.approx(120.0 * BETA)


@pytest.mark.parametrize("mode,limit", [("adadual", 2), ("exclusive", 1), ("thres-2", 3), ("thres-1", 2)])
def test_admission_never_exceeds_the_threshold(mode, limit):
    jobs = microsoft_generate(80, seed=3, scale=2)
    r = simulate_dag(jobs, DagCluster(num_nodes=8), gpu_pick="lwf1", comm=mode, record=True)
    assert r.max_comm_per_node.max() <= limit
    assert all(max(counts) <= limit for _, _, counts in r.admission_log)
    # Sweep the comm intervals: never more than `limit` on a node at any instant.
    for node in range(8):
        events = sorted(
            [(s, 1) for _, nodes, s, e in r.comm_log if node in nodes]
            + [(e, -1) for _, nodes, s, e in r.comm_log if node in nodes]
        )
        level = peak = 0
        for _, step in events:
            level += step
            peak = max(peak, level)
        assert peak <= limit
    unaware = simulate_dag(jobs, DagCluster(num_nodes=8), gpu_pick="lwf1", comm="unaware")
    assert unaware.max_comm_per_node.max() > 2  # the limit binds: without it contention goes higher


def test_comm_mode_names():
    assert comm_policy("thres-3").threshold == 3
    assert comm_policy("unaware").threshold is None
    with pytest.raises(WattschedError, match="comm admission mode"):
        comm_policy("nope")


# -- SRSF --------------------------------------------------------------------------------------------------


def test_srsf_runs_the_job_with_least_remaining_service_first():
    """Two one-worker jobs share one GPU: the shorter (1 iteration) runs both its tasks before the longer."""
    jobs = dag_jobs(
        [{"iters": 3, "fw": 10.0, "bw": 10.0}, {"iters": 1, "fw": 10.0, "bw": 10.0}],
    )
    cluster = DagCluster(num_nodes=1, gpus_per_node=1)
    r = simulate_dag(jobs, cluster, gpu_pick="bp", record=True)
    order = [(j, kind) for _, j, _, kind, _, _ in r.compute_log]
    assert order[:2] == [(1, "fw"), (1, "bw")]
    assert r.finish_ms.tolist() == [80.0, 20.0]


def test_srsf_orders_comm_admission():
    """Both jobs are ready to all-reduce at 0 and only one may (exclusive): the one with less service left."""
    jobs = dag_jobs(
        [
            {"workers": 2, "iters": 2, "size": 10.0, "fw": 5.0},
            {"workers": 2, "iters": 1, "size": 10.0, "fw": 5.0, "mem": 50.0},
        ]
    )
    r = simulate_dag(jobs, TWO_NODES_ONE_GPU, gpu_pick="bp", comm="exclusive", record=True)
    first_comm = min(r.comm_log, key=lambda c: c[2])
    assert first_comm[0] == 1


# -- placement orders and GPU picks ------------------------------------------------------------------------


def test_placement_orders():
    jobs = dag_jobs(
        [
            {"workers": 4, "iters": 1, "fw": 10.0},  # service 40, per-worker 10
            {"workers": 1, "iters": 5, "fw": 10.0},  # service 50, per-worker 50
            {"workers": 2, "iters": 1, "fw": 10.0},  # service 20, per-worker 10
            {"workers": 4, "iters": 2, "fw": 10.0},  # service 80, per-worker 20
        ]
    )
    q = np.arange(4)
    rng = np.random.default_rng(0)
    assert PLACEMENT_ORDERS["ssf"](jobs, q, rng).tolist() == [2, 0, 1, 3]
    assert PLACEMENT_ORDERS["sf"](jobs, q, rng).tolist() == [1, 2, 0, 3]
    assert PLACEMENT_ORDERS["stf"](jobs, q, rng).tolist() == [0, 2, 3, 1]
    assert PLACEMENT_ORDERS["blf"](jobs, q, rng).tolist() == [3, 0, 2, 1]
    assert sorted(PLACEMENT_ORDERS["random"](jobs, q, rng).tolist()) == [0, 1, 2, 3]


def pick(name, need, mem_left, workload, gpn=2, mem=100.0):
    kind, thr = parse_gpu_pick(name)
    out = pick_gpus(kind, thr, need, mem, np.asarray(mem_left, float), np.asarray(workload, float), gpn,
                    np.random.default_rng(0))  # fmt: skip
    return None if out is None else out.tolist()


def test_gpu_picks_follow_their_definitions():
    # 2 nodes x 2 GPUs. GPU workloads: node 0 = [5, 1], node 1 = [2, 3]; GPU 1 has no memory left.
    mem = [1000, 50, 1000, 1000]
    wl = [5.0, 1.0, 2.0, 3.0]
    assert pick("bp", 2, mem, wl) == [0, 2]  # index order, skipping the full GPU
    assert pick("lwf", 2, mem, wl) == [2, 3]  # 2 <= threshold 2: least-loaded GPUs anywhere (GPU 1 is full)
    assert pick("lgwf", 3, mem, wl) == [2, 3, 0]
    # Node level: node means are 3.0 and 2.5, so node 1 first, least-loaded GPU first inside each.
    assert pick("lswf", 1, mem, wl) == [2]
    assert pick("lwf1", 3, mem, wl) == [2, 3, 0]
    assert pick("lwf", 4, mem, wl) is None  # only three GPUs have the memory
    assert sorted(pick("random", 3, mem, wl)) == [0, 2, 3]
    # Ties in workload go to the lower node, then the lower GPU index.
    assert pick("lgwf", 2, [1000] * 4, [0.0] * 4) == [0, 1]
    with pytest.raises(WattschedError, match="GPU pick"):
        parse_gpu_pick("nope")


def test_multi_node_jobs_count_their_comm_in_the_gpu_workload():
    """lwf sends the next job away from GPUs whose job still has compute + comm (7.8125 ms/MB) to do."""
    jobs = dag_jobs(
        [
            {"workers": 2, "iters": 1, "fw": 1000.0, "size": 100.0},
            {"workers": 1, "iters": 1, "fw": 10.0, "arrival": 1.0},
        ]
    )
    r = simulate_dag(jobs, DagCluster(num_nodes=2, gpus_per_node=2), gpu_pick="lswf", record=True)
    gpus = {j: g for g, j, *_ in r.compute_log}
    assert gpus[1] not in {g for g, j, *_ in r.compute_log if j == 0}


# -- energy ------------------------------------------------------------------------------------------------


def test_energy_is_the_integral_of_busy_comm_and_idle_power():
    from wattsched.core.gpus import gpu_model
    from wattsched.energy.utilisation import MODEL_GPU_UTIL

    v100 = gpu_model("V100")
    busy = v100.idle_w + (v100.max_w - v100.idle_w) * MODEL_GPU_UTIL["resnet50"]
    comm = v100.idle_w + (v100.max_w - v100.idle_w) * 0.2
    # One 1-worker job on a node of two GPUs: GPU 0 busy 30 ms, GPU 1 idle 30 ms.
    one = dag_jobs([{"fw": 10.0, "bw": 20.0}])
    r = simulate_dag(one, DagCluster(num_nodes=1, gpus_per_node=2), gpu_pick="bp", node_base_w=0.0)
    assert r.makespan_ms == 30.0
    assert r.gpu_energy_j == pytest.approx((busy * 30 + v100.idle_w * 30) / 1000)
    assert r.gpu_compute_ms == 30.0
    # A 2-worker job across two nodes: each GPU computes 20 ms, then all-reduces 50 MB alone (50 beta ms).
    two = dag_jobs([{"workers": 2, "fw": 10.0, "bw": 10.0, "size": 50.0}])
    r = simulate_dag(two, TWO_NODES_ONE_GPU, gpu_pick="bp", comm_load=0.2)
    t_comm = 50.0 * BETA
    assert r.makespan_ms == pytest.approx(20.0 + t_comm)
    assert r.gpu_energy_j == pytest.approx(2 * (busy * 20 + comm * t_comm) / 1000)
    assert r.gpu_comm_only_ms == pytest.approx(2 * t_comm)
    assert r.static_energy_j > 0  # node base + idle CPU sockets over the makespan
    assert r.energy_j == pytest.approx(r.gpu_energy_j + r.static_energy_j)


# -- generators and errors ---------------------------------------------------------------------------------


def test_microsoft_generator_mix():
    jobs = microsoft_generate(160, seed=1)
    counts = {w: int((jobs.nworkers == w).sum()) for w in (1, 2, 4, 8, 16, 32)}
    assert counts == {1: 80, 2: 14, 4: 26, 8: 30, 16: 8, 32: 2}
    assert jobs.iters.min() >= 10 and jobs.iters.max() <= 60
    assert jobs.arrival_ms.min() >= 0 and jobs.arrival_ms.max() < 12_000
    assert set(jobs.model) <= set(PROFILES)
    assert len(microsoft_generate(100, seed=1)) == 100
    assert len(random_generate(40, seed=1)) == 40


def test_bad_inputs_are_clear_errors():
    with pytest.raises(WattschedError, match="needs 16 GPUs; the cluster has 8"):
        simulate_dag(microsoft_generate(80, seed=0), DagCluster(num_nodes=2))
    with pytest.raises(WattschedError, match="placement policy"):
        simulate_dag(dag_jobs([{}]), placement="fifo")
    with pytest.raises(WattschedError, match="per GPU"):
        simulate_dag(dag_jobs([{"mem": 1e6}]))
    with pytest.raises(WattschedError, match="at least one worker"):
        dag_jobs([{"workers": 0}])


# -- invariants (Hypothesis) -------------------------------------------------------------------------------

job_rows = st.lists(
    st.fixed_dictionaries(
        {
            "arrival": st.integers(0, 200).map(float),
            "workers": st.sampled_from([1, 2, 3, 4, 6]),
            "iters": st.integers(1, 4),
            "size": st.floats(1.0, 300.0),
            "fw": st.integers(0, 40).map(float),
            "bw": st.integers(1, 60).map(float),
            "mem": st.sampled_from([3000.0, 9000.0, 20000.0]),
        }
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=job_rows,
    placement=st.sampled_from(sorted(PLACEMENT_ORDERS)),
    gpu_pick=st.sampled_from(["lwf", "lswf", "lgwf", "bp", "random"]),
    comm=st.sampled_from(["adadual", "exclusive", "unaware", "thres-1"]),
)
def test_every_job_completes_every_iteration_and_no_gpu_runs_two_tasks(rows, placement, gpu_pick, comm):
    jobs = dag_jobs(rows)
    cluster = DagCluster(num_nodes=3, gpus_per_node=2)
    r = simulate_dag(jobs, cluster, placement=placement, gpu_pick=gpu_pick, comm=comm, seed=1, record=True)
    assert np.all(np.isfinite(r.finish_ms))
    assert np.all(r.finish_ms >= r.placed_ms) and np.all(r.placed_ms >= jobs.arrival_ms)
    tasks = defaultdict(int)
    per_gpu = defaultdict(list)
    for g, j, _, _, s, e in r.compute_log:
        tasks[j] += 1
        per_gpu[g].append((s, e))
    for j in range(len(jobs)):
        assert tasks[j] == 2 * int(jobs.nworkers[j]) * int(jobs.iters[j])
    for spans in per_gpu.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1e-9 for a, b in itertools.pairwise(spans))
    comms = defaultdict(int)
    for j, nodes, s, e in r.comm_log:
        comms[j] += 1
        assert len(nodes) > 1 and e >= s
    for j in range(len(jobs)):
        assert comms[j] in (0, int(jobs.iters[j]))


# -- the `hkbu-dag` allocation policy in `simulate` ---------------------------------------------------------


def run_policy(name: str, jobs, spec):
    from wattsched.engine.temporal import Simulator
    from wattsched.policies.adapters import RoundScheduler
    from wattsched.policies.contract import ALLOCATION_POLICIES

    policy = ALLOCATION_POLICIES.create(name)
    sim = Simulator(
        jobs, spec, RoundScheduler(policy, 300.0), np.random.default_rng(0), check_invariants=True
    )
    sim.run()
    placed = {}
    rows = sim.log.intervals(sim.now)
    for t0, j, a in zip(rows["time_s"], rows["job"], rows["alloc"], strict=True):
        placed.setdefault(int(j), (float(t0), {n: tuple(g) for n, g, _, _ in sim.log.placements[a]}))
    return sim, placed


def test_policy_starts_waiting_jobs_in_srsf_order():
    spec = make_cluster([(4, "V100", 32000, 100000)])
    jobs = make_jobs(
        [
            {"gpus": 4, "duration": 10},
            {"gpus": 4, "duration": 100, "submit": 1},
            {"gpus": 2, "duration": 30, "submit": 2},
        ]
    )
    sim, placed = run_policy("hkbu-dag", jobs, spec)
    assert placed[2][0] == 10.0  # 2 GPUs x 30 s = 60 GPU-s of service beats 4 x 100
    assert placed[1][0] == 40.0
    assert (sim.status == STATUS_DONE).all()


def test_policy_sends_gangs_away_from_communicating_nodes():
    """A (6 GPUs) spans nodes 0 and 1; B (2 GPUs, long) sits on node 2. The 6-GPU C fits on nodes 3 + 1 (least
    loaded) or 3 + 2: contention-aware takes 3 + 2, away from A's all-reduce; unaware takes node 1."""
    spec = make_cluster([(4, "V100", 32000, 100000)] * 4)
    jobs = make_jobs(
        [
            {"gpus": 6, "duration": 100},
            {"gpus": 2, "duration": 1000, "submit": 1},
            {"gpus": 6, "duration": 10, "submit": 2},
        ]
    )
    _, aware = run_policy("hkbu-dag", jobs, spec)
    _, unaware = run_policy("hkbu-dag-srsf-lwf-unaware", jobs, spec)
    assert set(aware[0][1]) == {0, 1} and set(aware[1][1]) == {2}
    assert set(aware[2][1]) == {2, 3}
    assert set(unaware[2][1]) == {1, 3}


def test_policy_runs_end_to_end_through_the_simulate_command(tmp_path):
    from typer.testing import CliRunner

    from wattsched.cli.main import app

    out = tmp_path / "sim"
    args = ["simulate", "--jobs", "120", "--allocation", "hkbu-dag-blf-bp", "--performance", "trace", "--quiet",
            "--out", str(out)]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["jobs_completed"] + s.get("jobs_unschedulable", 0) == s["jobs_submitted"] == 120
    alloc = s["policies"]["allocation"]
    assert alloc["reconstructed"] is True
    assert alloc["parameters"]["comm_contention_in_job_speeds"] is False
    assert alloc["parameters"]["order"] == "blf"


def test_policy_names_are_checked():
    from wattsched.policies.contract import ALLOCATION_POLICIES

    with pytest.raises(WattschedError, match=r"allocation policy|hkbu-dag order"):
        ALLOCATION_POLICIES.create("hkbu-dag-fifo-lwf")
    with pytest.raises(WattschedError, match="GPU pick"):
        ALLOCATION_POLICIES.create("hkbu-dag", gpu_pick="nope")


# -- the experiment ------------------------------------------------------------------------------------------


def test_experiment_command_writes_results(tmp_path):
    import pandas as pd
    from typer.testing import CliRunner

    from wattsched.cli.main import app
    from wattsched.experiments.compare import rows_of

    out = tmp_path / "h2"
    args = ["experiment", "hkbu-dag", "--placements", "ssf", "--picks", "lwf,bp", "--seeds", "2", "--jobs", "40",
            "--nodes", "8", "--workers", "1", "--quiet", "--out", str(out)]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert (
        "adadual" in res.output and "unaware" in res.output and "beats `unaware` on mean JCT in" in res.output
    )
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 1 * 2 * 3 * 2
    assert (df.loc[df.comm == "adadual", "max_comm_per_node"] <= 2).all()
    s = json.loads((out / "summary.json").read_text())
    assert set(s["overall"]) == {"adadual", "exclusive", "unaware"}
    assert (out / "summary.md").read_text().count("| ssf |") >= 2
    assert (out / "jct_cdf.png").stat().st_size > 0 and (out / "policies.png").stat().st_size > 0
    # The shared records: one per run, in the grid's order, read by `compare` with its metrics and labels.
    records = pd.read_csv(out / "records.csv")
    keys = ["placement", "gpu_pick", "comm", "seed"]
    assert list(records.columns[1:6]) == [*keys, "policy"]
    runs = records[keys].merge(df, on=keys, how="left")
    rows = rows_of(out)
    assert [r["policy"] for r in rows] == [
        f"ssf+{g} {m}" for g, m in zip(runs.gpu_pick, runs.comm, strict=True)
    ]
    assert all(r["reconstructed"] and r["basis"].startswith("hkbu-dag: ") for r in rows)
    np.testing.assert_allclose([r["energy_kwh"] for r in rows], runs.energy_kj / 3600, rtol=1e-5)
    np.testing.assert_allclose([r["jct_mean_s"] for r in rows], runs.mean_jct_ms / 1000, rtol=1e-5)
    np.testing.assert_allclose([r["makespan_s"] for r in rows], runs.makespan_ms / 1000, rtol=1e-5)


def test_experiment_errors_are_one_line(tmp_path):
    from typer.testing import CliRunner

    from wattsched.cli.main import app

    def run(*args):
        res = CliRunner().invoke(app, ["experiment", "hkbu-dag", *args, "--quiet", "--out", str(tmp_path)])
        assert res.exit_code != 0 and "Traceback" not in res.output
        assert len(res.output.strip().splitlines()) == 1, res.output
        return res.output

    assert "must include adadual and unaware" in run("--comm-modes", "adadual")
    assert "unknown GPU pick 'xyz'" in run("--picks", "xyz")
    assert "--seeds must be at least 1, got 0" in run("--seeds", "0")
    assert "--jobs: Input should be greater than or equal to 1" in run("--jobs", "0")
    assert "--comm-load: Input should be less than or equal to 1" in run("--comm-load", "2")
    assert "DAG job generator" in run("--generator", "nope")


# -- real data -----------------------------------------------------------------------------------------------


@pytest.mark.realdata
def test_policy_on_the_philly_trace(tmp_path):
    from typer.testing import CliRunner

    from tests.conftest import require_real_file
    from wattsched.cli.main import app

    require_real_file("philly-pollux", "philly.csv")
    out = tmp_path / "philly"
    args = ["simulate", "--workload", "philly", "--cluster", "philly", "--max-jobs", "2000", "--allocation",
            "hkbu-dag", "--quiet", "--out", str(out)]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["jobs_completed"] + s.get("jobs_unschedulable", 0) == s["jobs_submitted"] == 2000
