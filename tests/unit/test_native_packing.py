"""Packing mode's compiled pod loop (engine/native_packing.py, packing_kernel.c) against the Python loop: the same
outcome (placements, time series bit for bit, totals) and the same cluster state afterwards, on random workloads
with shared, whole-GPU, CPU-only, GPU-model-constrained, never-fitting and empty requests, for every placement the
compiled loop covers, with and without the fragmentation/power observer; the exact FGD sigmoid score; the runs it
must leave to the Python loop; and a machine without a C compiler."""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import make_cluster, make_jobs, real_data_dir
from wattsched.core.cluster import ClusterState
from wattsched.core.requests import RequestBook
from wattsched.engine import kernels, native_packing
from wattsched.engine.native_packing import STATE_ARRAYS  # the cluster state's arrays
from wattsched.engine.packing import PackingObserver, run_packing
from wattsched.experiments.fgd_pwr import FragPowerObserver
from wattsched.policies import PLACEMENT_POLICIES
from wattsched.policies.fgd import FGD, FragModel, sigmoid_score, typical_pods

POLICIES = [
    "first-fit",
    "best-fit",
    "fgd",
    "pwr",
    "pwr_500_fgd_500",
    "pwr_50_fgd_950",
    "pwr_100_fgd_0",
    "pwr_0_fgd_100",
]
CLUSTER = make_cluster(
    [(4, "V100M16", 32_000, 131_072)] * 3
    + [(2, "T4", 16_000, 65_536)] * 2
    + [(8, "G2", 96_000, 393_216), (8, "G2", 64_000, 262_144), (0, "", 16_000, 65_536)],
    name="mixed",
)


@pytest.fixture(scope="module")
def kernel_built(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("WATTSCHED_KERNEL_CACHE", str(tmp_path_factory.mktemp("kernels")))
    kernels._loaded.clear()
    yield kernels.load("packing_kernel") is not None
    mp.undo()
    kernels._loaded.clear()


@pytest.fixture(autouse=True)
def compiled(request, kernel_built):
    """Every test here needs the compiled loop, except the one about machines without a compiler."""
    if not kernel_built and request.function.__name__ != "test_without_a_compiler_the_python_loop_runs":
        pytest.skip("no C compiler: the compiled packing loop cannot be built here")


def random_jobs(seed: int, n: int = 160):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        kind = rng.integers(7)
        cpu = int(rng.choice([0, 1000, 2000, 4000, 8000]))
        mem = int(rng.choice([0, 1024, 8192, 40_000]))
        if kind == 0:
            rows.append({"gpus": 0, "cpu": cpu, "mem": mem})
        elif kind in (1, 2):  # shared pods, a handful of sizes so that request classes repeat
            rows.append({"gpus": 1, "milli": int(rng.choice([100, 250, 300, 500, 700])), "cpu": cpu})
        elif kind == 3:
            rows.append({"gpus": int(rng.integers(1, 5)), "milli": 1000, "cpu": cpu, "mem": mem})
        elif kind == 4:
            rows.append({"gpus": 1, "milli": 500, "cpu": cpu, "spec": str(rng.choice(["T4|G2", "V100M16"]))})
        elif kind == 5:  # never fits (more CPU than any node) or asks for nothing
            rows.append({"gpus": 1, "milli": 1000, "cpu": 200_000} if i % 2 else {"gpus": 0, "cpu": 0})
        else:
            rows.append({"gpus": 2, "milli": 1000, "cpu": cpu, "spec": "G2"})
        rows[-1]["id"] = f"p{i:04d}"
    return make_jobs(rows)


def spy(monkeypatch) -> list[bool]:
    used: list[bool] = []
    original = native_packing._run

    def run(*args, **kwargs):
        used.append(True)
        return original(*args, **kwargs)

    monkeypatch.setattr(native_packing, "_run", run)
    return used


def pack(jobs, policy_name, native, monkeypatch, observe=True, seed=3, spec=CLUSTER, inflate=1.3):
    monkeypatch.setenv("WATTSCHED_NATIVE", "1" if native else "0")
    used = spy(monkeypatch)
    states: list[ClusterState] = []
    original_state = ClusterState.__post_init__

    def keep(self):  # the state run_packing makes, to compare afterwards
        original_state(self)
        states.append(self)

    monkeypatch.setattr(ClusterState, "__post_init__", keep)
    observers = [FragPowerObserver(spec, FragModel(spec, typical_pods(jobs)))] if observe else []
    out = run_packing(
        jobs,
        spec,
        PLACEMENT_POLICIES.create(policy_name),
        np.random.default_rng(seed),
        np.random.default_rng(seed + 100),
        inflate=inflate,
        observers=observers,
    )
    monkeypatch.setattr(ClusterState, "__post_init__", original_state)
    return out, states[-1], bool(used)


def assert_same(a, sa, b, sb):
    assert np.array_equal(a.order, b.order)
    assert np.array_equal(a.placed, b.placed) and a.placed.dtype == b.placed.dtype
    assert a.placements == b.placements
    fa, fb = a.series.frame(), b.series.frame()
    assert list(fa.columns) == list(fb.columns)
    assert fa.to_numpy().tobytes() == fb.to_numpy().tobytes()
    assert (a.allocated_milli_final, a.arrived_milli_final) == (
        b.allocated_milli_final,
        b.arrived_milli_final,
    )
    for name in STATE_ARRAYS:
        assert np.array_equal(getattr(sa, name), getattr(sb, name)), name
    assert (sa.allocated_milli, sa.nodes_busy) == (sb.allocated_milli, sb.nodes_busy)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_loop_matches_the_python_loop(policy, seed, monkeypatch):
    jobs = random_jobs(seed)
    py, state_py, used_py = pack(jobs, policy, False, monkeypatch, seed=seed)
    c, state_c, used_c = pack(jobs, policy, True, monkeypatch, seed=seed)
    assert not used_py and used_c
    assert_same(c, state_c, py, state_py)
    assert 0 < int(c.placed.sum()) < c.order.size  # the cluster filled up and pods were dropped


@pytest.mark.parametrize("budget", [0, CLUSTER.num_nodes * 3])
def test_candidate_lists_beyond_their_budget(budget, monkeypatch):
    """Request classes beyond the candidate lists' memory budget scan every node: the same outcome."""
    jobs = random_jobs(11)
    py, state_py, _ = pack(jobs, "pwr_500_fgd_500", False, monkeypatch)
    monkeypatch.setattr(native_packing, "CANDIDATE_BUDGET", budget)
    c, state_c, used = pack(jobs, "pwr_500_fgd_500", True, monkeypatch)
    assert used
    assert_same(c, state_c, py, state_py)


@pytest.mark.parametrize("policy", ["best-fit", "fgd", "pwr_200_fgd_800"])
def test_without_observers(policy, monkeypatch):
    jobs = random_jobs(7)
    py, state_py, _ = pack(jobs, policy, False, monkeypatch, observe=False)
    c, state_c, used = pack(jobs, policy, True, monkeypatch, observe=False)
    assert used
    assert list(c.series.names) == ["pod", "arrived_gpu_milli", "allocated_gpu_milli", "placed"]
    assert_same(c, state_c, py, state_py)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(POLICIES),
    shapes=st.lists(
        st.tuples(
            st.sampled_from([0, 1, 2, 4, 8]),
            st.sampled_from(["V100M16", "T4", "G2"]),
            st.sampled_from([8_000, 32_000, 96_000]),
        ),
        min_size=2,
        max_size=9,
    ),
)
def test_random_clusters(seed, policy, shapes, monkeypatch):
    spec = make_cluster([(g, m if g else "", cpu, 262_144) for g, m, cpu in shapes], name="random")
    if spec.total_gpus == 0:
        return
    jobs = random_jobs(seed, n=60)
    py, state_py, _ = pack(jobs, policy, False, monkeypatch, spec=spec, seed=seed)
    c, state_c, used = pack(jobs, policy, True, monkeypatch, spec=spec, seed=seed)
    if bool(RequestBook.build(jobs, spec).gang[c.order].any()):
        assert not used  # a pod larger than any node: the Python loop places gangs
    else:
        assert used
    assert_same(c, state_c, py, state_py)


# -- the exact sigmoid score ---------------------------------------------------------------------------------
def c_sigmoid(delta: int, div: int, calls: list[int]) -> int:
    lib = kernels.load("packing_kernel")
    fn = lib.ws_sigmoid_score
    fn.restype = ctypes.c_int64
    fn.argtypes = [
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        native_packing.EXACT_SCORE,
        ctypes.c_void_p,
    ]

    def exact(d: int) -> int:
        calls.append(d)
        return int(sigmoid_score(np.array([d], dtype=np.int64), div)[0])

    counter = ctypes.c_int64(0)
    score = fn(delta, div, 50, native_packing.EXACT_SCORE(exact), ctypes.addressof(counter))
    assert counter.value == len(calls)
    return int(score)


def test_sigmoid_matches_numpy_over_a_range():
    div = 937
    deltas = np.arange(-9_000_000, 9_000_001, 997, dtype=np.int64)
    expected = sigmoid_score(deltas, div)
    calls: list[int] = []
    got = np.array([c_sigmoid(int(d), div, calls) for d in deltas])
    assert np.array_equal(got, expected)
    assert len(calls) < 5  # near-integer values are rare


def test_sigmoid_near_an_integer_asks_numpy():
    # With a huge scale the steps in x are tiny, so a delta lands within 1e-9 of 100 * sigmoid(x) = 37.
    div = 10**9
    x = math.log(0.37 / 0.63)
    delta = round(x * div * 1000.0)
    calls: list[int] = []
    score = c_sigmoid(delta, div, calls)
    assert calls == [delta]
    assert score == int(sigmoid_score(np.array([delta], dtype=np.int64), div)[0])
    far: list[int] = []
    assert c_sigmoid(delta + 10**6, div, far) == 37 and far == []  # 37.00002...: settled in C
    zero: list[int] = []
    assert c_sigmoid(0, div, zero) == 50 and zero == []


def test_exact_sigmoid_score_is_the_vectorised_one():
    fm = FragModel(CLUSTER, typical_pods(random_jobs(0)))
    deltas = np.array([-(10**7), -12345, 0, 1, 777_777], dtype=np.int64)
    assert [fm.exact_sigmoid_score(int(d)) for d in deltas] == sigmoid_score(deltas, fm._div).tolist()


# -- runs left to the Python loop ----------------------------------------------------------------------------
class CountingObserver(PackingObserver):
    def columns(self):
        return ("count",)

    def after_pod(self, state, pod, placement):
        return (1.0,)


class MyFGD(FGD):
    pass


def plan_for(policy, observers=(), jobs=None):
    jobs = random_jobs(0) if jobs is None else jobs
    book = RequestBook.build(jobs, CLUSTER)
    policy.bind(CLUSTER, np.random.default_rng(0))
    policy.prepare(jobs, CLUSTER)
    state = ClusterState(CLUSTER)
    for o in observers:
        o.on_start(state, jobs)
    return native_packing.compiled_packing(policy, observers, book, state, np.arange(len(jobs)))


def test_runs_left_to_python(monkeypatch):
    assert plan_for(PLACEMENT_POLICIES.create("fgd")) is not None
    assert plan_for(PLACEMENT_POLICIES.create("random")) is None  # draws from the policy's random stream
    assert plan_for(PLACEMENT_POLICIES.create("gpu-packing")) is None
    assert plan_for(MyFGD()) is None  # a subclass may change anything
    assert plan_for(PLACEMENT_POLICIES.create("fgd"), [CountingObserver()]) is None
    two = [FragPowerObserver(CLUSTER, FragModel(CLUSTER, typical_pods(random_jobs(0)))) for _ in range(2)]
    assert plan_for(PLACEMENT_POLICIES.create("fgd"), two) is None
    several_partial = make_jobs([{"gpus": 2, "milli": 500}, {"gpus": 1, "milli": 500}])
    assert plan_for(PLACEMENT_POLICIES.create("fgd"), jobs=several_partial) is None
    gang = make_jobs([{"gpus": 16, "milli": 1000}, {"gpus": 1}])
    assert plan_for(PLACEMENT_POLICIES.create("best-fit"), jobs=gang) is None
    monkeypatch.setenv("WATTSCHED_NATIVE", "0")
    assert plan_for(PLACEMENT_POLICIES.create("fgd")) is None


def test_observer_without_hook_and_invariant_checks_run_python(monkeypatch):
    jobs = random_jobs(2)
    used = spy(monkeypatch)
    out = run_packing(
        jobs,
        CLUSTER,
        PLACEMENT_POLICIES.create("fgd"),
        np.random.default_rng(0),
        np.random.default_rng(1),
        observers=[CountingObserver()],
    )
    assert not used and out.series.frame()["count"].eq(1.0).all()
    run_packing(
        jobs,
        CLUSTER,
        PLACEMENT_POLICIES.create("fgd"),
        np.random.default_rng(0),
        np.random.default_rng(1),
        check_invariants=True,
    )
    assert not used


def test_without_a_compiler_the_python_loop_runs(monkeypatch):
    jobs = random_jobs(4)
    expected, state_py, _ = pack(jobs, "pwr_500_fgd_500", False, monkeypatch)
    monkeypatch.setattr(kernels, "_compiler", lambda: None)
    monkeypatch.setattr(kernels, "_loaded", {})
    got, state, used = pack(jobs, "pwr_500_fgd_500", True, monkeypatch)
    assert not used
    assert kernels.load("packing_kernel") is None
    assert_same(got, state, expected, state_py)


# -- a real trace --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["fgd", "pwr_200_fgd_800"])
def test_alibaba_default_trace(policy, monkeypatch):
    root = real_data_dir()
    if root is None:
        pytest.skip(
            "real trace not available: set WATTSCHED_DATA to a dataset directory (CI: ../shared/data)"
        )
    from wattsched.experiments.fgd_pwr import trace_inputs

    inputs = trace_inputs("default", root)
    jobs = inputs.jobs.subset(np.arange(1500))
    kw = {"spec": inputs.cluster, "seed": 42, "inflate": 0.5}  # about 4,000 pods
    py, state_py, _ = pack(jobs, policy, False, monkeypatch, **kw)
    c, state_c, used = pack(jobs, policy, True, monkeypatch, **kw)
    assert used
    assert_same(c, state_c, py, state_py)


@pytest.mark.parametrize("policy_name", POLICIES)
def test_from_a_used_state(policy_name):
    """Free GPUs below busy ones and partly used GPUs (a state packing alone never makes): the same choices as
    the policy's own place()."""
    jobs = random_jobs(5, n=80)
    book = RequestBook.build(jobs, CLUSTER)
    order = np.arange(len(jobs))

    def used_state():
        state = ClusterState(CLUSTER)
        for node, gpus, milli in ((0, (1, 3), 600), (1, (2,), 1000), (2, (1,), 200), (3, (1,), 500)):
            state.allocate(node, gpus, milli, 1000, 1024)
        for node, gpus, milli in ((4, (1,), 300), (5, (0, 2, 4), 300), (6, (7,), 900), (6, (3,), 400)):
            state.allocate(node, gpus, milli, 1000, 1024)
        return state

    expected_state = used_state()
    policy = PLACEMENT_POLICIES.create(policy_name)
    policy.bind(CLUSTER, np.random.default_rng(9))
    policy.prepare(jobs, CLUSTER)
    expected = []
    for j in order.tolist():
        result = None if book.never_fits[j] else policy.place(expected_state, book.request(j))
        for node, gpus, cpu, mem in result or ():
            expected_state.allocate(node, gpus, int(jobs.gpu_milli[j]), cpu, mem)
        expected.append(result)
    state = used_state()
    policy = PLACEMENT_POLICIES.create(policy_name)
    policy.bind(CLUSTER, np.random.default_rng(9))
    policy.prepare(jobs, CLUSTER)
    got = native_packing.compiled_packing(policy, [], book, state, order)
    assert got is not None
    placed, placements, _, _ = got
    assert placements == expected
    assert placed.tolist() == [p is not None for p in expected]
    for name in STATE_ARRAYS:
        assert np.array_equal(getattr(state, name), getattr(expected_state, name)), name
    assert (state.allocated_milli, state.nodes_busy) == (
        expected_state.allocated_milli,
        expected_state.nodes_busy,
    )
