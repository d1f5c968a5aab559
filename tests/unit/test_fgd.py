"""FGD: typical pods, node fragmentation (every case of fgd-pwr.md §2), the FGD score and GPU choice (§3).

Expected values are computed by hand below; a plain scalar reference written straight from the spec (exact
fractions) checks the vectorised implementation on random nodes.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import make_cluster, make_jobs, real_data_dir, require_real_file, state_with
from wattsched.core.cluster import ClusterState
from wattsched.core.requests import JobRequest
from wattsched.policies import PLACEMENT_POLICIES
from wattsched.policies.base import feasible_nodes
from wattsched.policies.fgd import FGD, FragModel, TypicalPods, sub_rows, typical_pods

# -- scalar reference (plain Python, exact) --------------------------------------------------------------------


def ref_accessible(spec: str, model: str) -> bool:
    names = [s for s in spec.split("|") if s]
    return not names or model in names


def ref_case(left: list[int], cpu_left: int, model: str, cls: tuple) -> str:
    cpu, milli, num, spec = cls[:4]
    if milli == 0:
        return "XL" if cpu_left >= cpu else "XR"
    if not ref_accessible(spec, model):
        return "NA"
    gpu_ok = sum(1 for v in left if v >= milli) >= num
    cpu_ok = cpu_left >= cpu
    return {(True, True): "Q3", (True, False): "Q4", (False, True): "Q2", (False, False): "Q1"}[
        (gpu_ok, cpu_ok)
    ]


def ref_frag_one(left: list[int], cpu_left: int, model: str, cls: tuple) -> int:
    if ref_case(left, cpu_left, model, cls) == "Q3":
        return sum(v for v in left if v < cls[1])
    return sum(left)


def ref_frag(left: list[int], cpu_left: int, model: str, classes: list[tuple]) -> Fraction:
    total = sum(c[4] for c in classes)
    return sum((Fraction(c[4], total) * ref_frag_one(left, cpu_left, model, c) for c in classes), Fraction(0))


def ref_sub(left: list[int], num: int, milli: int) -> list[int]:
    out = list(left)
    for i in sorted(range(len(left)), key=lambda i: left[i]):  # stable ascending
        if num > 0 and out[i] >= milli:
            out[i] -= milli
            num -= 1
    return out


def ref_score(f0: Fraction, f1: Fraction) -> int:
    x = float((f0 - f1) / 1000)
    return int((1.0 / (1.0 + math.exp(-x))) * 100.0)


def ref_fgd(left, cpu_left, model, classes, cpu, milli, num) -> tuple[int, int]:
    f0 = ref_frag(left, cpu_left, model, classes)
    if num == 1 and 0 < milli < 1000:
        best, gpu = None, -1
        for i, v in enumerate(left):
            if v >= milli:
                new = list(left)
                new[i] -= milli
                s = ref_score(f0, ref_frag(new, cpu_left - cpu, model, classes))
                if best is None or s > best:
                    best, gpu = s, i
        return best, gpu
    new = ref_sub(left, num, milli) if num else list(left)
    return ref_score(f0, ref_frag(new, cpu_left - cpu, model, classes)), -1


# -- helpers ---------------------------------------------------------------------------------------------------


def tp(rows: list[tuple]) -> TypicalPods:
    """TypicalPods from (cpu, milli, num, spec, count) rows."""
    return TypicalPods(
        cpu_milli=np.array([r[0] for r in rows], dtype=np.int64),
        gpu_milli=np.array([r[1] for r in rows], dtype=np.int64),
        num_gpu=np.array([r[2] for r in rows], dtype=np.int64),
        gpu_spec=tuple(r[3] for r in rows),
        count=np.array([r[4] for r in rows], dtype=np.int64),
        total_pods=sum(r[4] for r in rows),
        total_classes=len(rows),
    )


def req(num=1, milli=1000, cpu=0, mem=0, n=2):
    return JobRequest(0, num, milli, cpu, mem, np.ones(n, dtype=bool), False)


CPU_ONLY = (2000, 0, 0, "", 1)  # XL / XR
SHARE_500 = (1000, 500, 1, "", 1)  # Q3 with partial GPUs, Q1, Q2, Q4
TWO_V100 = (2000, 1000, 2, "V100M16", 1)  # NA on T4 nodes

SPEC = make_cluster([(4, "V100M16", 8000, 64_000), (2, "T4", 4000, 32_000)])


def frag_of(classes: list[tuple], gpu_left: list[list[int]], cpu_left: list[int]) -> np.ndarray:
    model = FragModel(SPEC, tp(classes))
    return model.node_frag(state_with(SPEC, gpu_left, cpu_left))


# -- fragmentation, case by case -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "rows", "cpu", "case", "expected"),
    [
        # node 0 idle = 1900 milli over GPUs [1000, 300, 600, 0]
        (CPU_ONLY, [1000, 300, 600, 0], 5000, "XL", 1900),  # CPU-only pod fits: every idle GPU milli is frag
        (CPU_ONLY, [1000, 300, 600, 0], 1500, "XR", 1900),  # CPU-only pod lacks CPU: the same amount
        (SHARE_500, [1000, 300, 600, 0], 1500, "Q3", 300),  # fits: only GPUs with < 500 left count (300 + 0)
        (SHARE_500, [1000, 300, 600, 0], 500, "Q4", 1900),  # GPU fits, CPU lacks
        (SHARE_500, [400, 300, 100, 0], 5000, "Q2", 800),  # no GPU with 500 left, CPU fits
        (SHARE_500, [400, 300, 100, 0], 500, "Q1", 800),  # both lack
        (TWO_V100, [1000, 300, 600, 0], 5000, "Q2", 1900),  # only one free GPU for a 2-GPU pod
        (TWO_V100, [1000, 1000, 300, 0], 1500, "Q4", 2300),  # two free GPUs, CPU lacks
        (TWO_V100, [1000, 1000, 300, 0], 5000, "Q3", 300),  # whole-GPU class: every partial GPU is frag
    ],
)
def test_fragmentation_cases_on_one_node(cls, rows, cpu, case, expected):
    assert ref_case(rows, cpu, "V100M16", cls) == case
    assert ref_frag_one(rows, cpu, "V100M16", cls) == expected
    got = frag_of([cls], [rows, [1000, 1000]], [cpu, 4000])
    assert got[0] == expected


def test_no_access_counts_all_idle_gpu():
    # A class asking for V100M16 cannot use the T4 node: case NA, all 2000 idle milli are fragments,
    # while the share class without a GPU spec finds both T4 GPUs usable (Q3, nothing below 500).
    assert ref_case([1000, 1000], 4000, "T4", TWO_V100) == "NA"
    assert frag_of([TWO_V100], [[0, 0, 0, 0], [1000, 1000]], [0, 4000])[1] == 2000
    assert frag_of([SHARE_500], [[0, 0, 0, 0], [1000, 1000]], [0, 4000])[1] == 0


def test_workload_fragmentation_is_probability_weighted():
    classes = [(*CPU_ONLY[:4], 2), SHARE_500, TWO_V100]  # p = 1/2, 1/4, 1/4
    # node 0 [1000, 300, 600, 0] with 1500 CPU: XR 1900, Q3 300, Q1 1900 -> (2*1900 + 300 + 1900) / 4 = 1500
    # node 1 [1000, 500] with 4000 CPU: XL 1500, Q3 0, NA 1500 -> (2*1500 + 0 + 1500) / 4 = 1125
    got = frag_of(classes, [[1000, 300, 600, 0], [1000, 500]], [1500, 4000])
    assert got.tolist() == [1500.0, 1125.0]
    model = FragModel(SPEC, tp(classes))
    state = state_with(SPEC, [[1000, 300, 600, 0], [1000, 500]], [1500, 4000])
    frag, idle = model.cluster_frag(state)
    assert (frag, idle) == (2625.0, 3400.0)  # frag ratio 2625 / 3400


# -- FGD score and GPU choice ----------------------------------------------------------------------------------

SHARE_SPEC = make_cluster([(4, "V100M16", 8000, 64_000)])


def fgd_one(rows, request, cpu_left=8000, classes=(SHARE_500,)):
    model = FragModel(SHARE_SPEC, tp(list(classes)))
    s, g = model.fgd_scores(np.array([rows], dtype=np.int64), np.array([cpu_left]), np.array([0]), *request)
    return int(s[0]), int(g[0])


def test_share_pod_scores_every_gpu_and_keeps_the_best():
    # F0 = 300 (GPU 1). Placing 300 milli: on GPU 0 or 3 (1000 -> 700) F stays 300 -> 50; on GPU 1 (300 -> 0)
    # F = 0 -> int(100 * sigmoid(0.3)) = 57; on GPU 2 (600 -> 300) F = 600 -> int(100 * sigmoid(-0.3)) = 42.
    assert fgd_one([1000, 300, 600, 1000], (1000, 300, 1)) == (57, 1)


def test_share_pod_ties_go_to_the_first_gpu():
    # GPUs 1 and 2 both have 300 left; both give F 600 -> 300 (score 57); the first index wins.
    assert fgd_one([600, 300, 300, 1000], (1000, 300, 1)) == (57, 1)


def test_unchanged_fragmentation_scores_exactly_50():
    # A whole-GPU pod takes GPU 0 (lowest-index free GPU): GPUs with >= 500 left are still 600 and 1000, F stays 300.
    assert fgd_one([1000, 300, 600, 1000], (1000, 1000, 1)) == (50, -1)
    classes = (CPU_ONLY, SHARE_500, TWO_V100)
    # A CPU-only pod that changes no case: exactly 50 (integer arithmetic, no rounding noise).
    assert fgd_one([1000, 300, 600, 1000], (500, 0, 0), 8000, classes) == (50, -1)


def test_cpu_only_pod_that_starves_the_share_class():
    # 7500 of 8000 milli-CPU: the share class turns Q3 -> Q4, F 300 -> 2900: int(100 * sigmoid(-2.6)) = 6.
    assert fgd_one([1000, 300, 600, 1000], (7500, 0, 0)) == (6, -1)


def test_policy_scores_ties_and_gpu_choice():
    spec = make_cluster([(4, "V100M16", 8000, 64_000)] * 3)
    jobs = make_jobs([{"gpus": 1, "milli": 500, "cpu": 1000}] * 3)  # typical pods: the share class only
    policy = PLACEMENT_POLICIES.create("fgd")
    policy.bind(spec, np.random.default_rng(0), rank=np.array([2, 0, 1]))
    policy.prepare(jobs, spec)
    state = state_with(spec, [[1000, 300, 600, 1000], [1000, 1000, 1000, 1000], [1000, 300, 600, 1000]])
    r = JobRequest(0, 1, 300, 1000, 0, np.ones(3, dtype=bool), False)
    nodes = np.flatnonzero(feasible_nodes(state, r))
    assert policy.score(state, r, nodes).tolist() == [57, 50, 57]
    # Nodes 0 and 2 tie at 57; node 2 has the smaller rank (1 < 2) and wins; the pod goes on its GPU 1.
    assert policy.place(state, r) == ((2, (1,), 1000, 0),)
    # A pod requesting nothing scores 100 everywhere.
    nothing = JobRequest(0, 0, 0, 0, 0, np.ones(3, dtype=bool), False)
    assert policy.score(state, nothing, nodes).tolist() == [100, 100, 100]


def test_score_cache_follows_allocation_and_release():
    spec = make_cluster([(4, "V100M16", 8000, 64_000)] * 2)
    jobs = make_jobs([{"gpus": 1, "milli": 500, "cpu": 1000}])
    policy = FGD()
    policy.bind(spec, np.random.default_rng(0))
    policy.prepare(jobs, spec)
    state = ClusterState(spec)
    r = JobRequest(0, 1, 300, 1000, 0, np.ones(2, dtype=bool), False)
    nodes = np.arange(2)
    before = policy.score(state, r, nodes).tolist()
    state.allocate(0, (1,), 700, 0, 0)  # GPU 1 of node 0 now has 300 left: placing there removes a fragment
    after = policy.score(state, r, nodes).tolist()
    assert after[0] == 57 and after[1] == before[1]
    assert policy.choose_gpus(state, r, 0) == (1,)
    state.release(0, (1,), 700, 0, 0)
    assert policy.score(state, r, nodes).tolist() == before


def test_fgd_needs_prepare():
    policy = FGD()
    policy.bind(SPEC, np.random.default_rng(0))
    with pytest.raises(RuntimeError, match="prepare"):
        policy.score(ClusterState(SPEC), req(cpu=1), np.arange(2))


# -- typical pods ----------------------------------------------------------------------------------------------


def _jobs(counts: list[tuple[int, int, int, int]]):
    rows = []
    for cpu, milli, num, n in counts:
        rows += [{"gpus": num, "milli": milli, "cpu": cpu}] * n
    return make_jobs(rows)


def test_typical_pods_cut_at_95_percent_and_renormalise():
    # Counts 5, 3, 1, 1 (10 pods): the first three cover 90 % < 95 %, so all four are kept.
    jobs = _jobs([(1000, 500, 1, 5), (2000, 1000, 1, 3), (4000, 0, 0, 1), (3000, 1000, 2, 1)])
    t = typical_pods(jobs)
    assert len(t) == 4 and t.total_classes == 4 and t.coverage == 1.0
    assert t.count.tolist() == [5, 3, 1, 1]
    # Counts 6, 2, 1, 1 at 90 %: 6 + 2 + 1 reaches 9; of the two classes with one pod the larger CPU comes first.
    jobs = _jobs([(1000, 500, 1, 6), (2000, 1000, 1, 2), (2000, 0, 0, 1), (4000, 0, 0, 1)])
    t = typical_pods(jobs, threshold_pct=90)
    assert list(zip(t.cpu_milli.tolist(), t.count.tolist(), strict=True)) == [(1000, 6), (2000, 2), (4000, 1)]
    assert np.allclose(t.prob, [6 / 9, 2 / 9, 1 / 9]) and t.coverage == 0.9


def test_typical_pods_ties_by_cpu_then_milli_then_count_then_spec():
    rows = [
        {"gpus": 1, "milli": 500, "cpu": 1000},
        {"gpus": 1, "milli": 700, "cpu": 1000},
        {"gpus": 2, "milli": 1000, "cpu": 1000},
        {"gpus": 1, "milli": 1000, "cpu": 1000},
        {"gpus": 1, "milli": 1000, "cpu": 1000, "spec": "T4"},
        {"gpus": 1, "milli": 300, "cpu": 2000},
    ]
    t = typical_pods(make_jobs(rows), threshold_pct=100)
    keys = list(zip(t.cpu_milli.tolist(), t.gpu_milli.tolist(), t.num_gpu.tolist(), t.gpu_spec, strict=True))
    assert keys == [
        (2000, 300, 1, ""),
        (1000, 1000, 2, ""),
        (1000, 1000, 1, "T4"),
        (1000, 1000, 1, ""),
        (1000, 700, 1, ""),
        (1000, 500, 1, ""),
    ]


def test_sub_rows_takes_least_sufficient_gpus_first():
    rows = np.array([[1000, 400, 600, 1000, -1]])
    assert sub_rows(rows, 1, 500).tolist() == [[1000, 400, 100, 1000, -1]]
    assert sub_rows(rows, 2, 1000).tolist() == [[0, 400, 600, 0, -1]]
    assert sub_rows(rows, 2, 400).tolist() == [[1000, 0, 200, 1000, -1]]


# -- vectorised vs scalar reference ------------------------------------------------------------------------------

MODELS = ["V100M16", "T4"]
cls_st = st.tuples(
    st.sampled_from([0, 1000, 2000, 4000, 8000]),
    st.sampled_from([0, 100, 250, 500, 700, 1000]),
    st.sampled_from([1, 1, 2, 4]),
    st.sampled_from(["", "", "T4", "V100M16|T4", "V100M16"]),
    st.integers(1, 50),
).map(lambda c: (c[0], c[1], 0 if c[1] == 0 else (c[2] if c[1] == 1000 else 1), c[3], c[4]))
left_st = st.sampled_from([0, 50, 100, 200, 250, 300, 450, 500, 700, 750, 1000]) | st.integers(0, 1000)
node_st = st.tuples(
    st.sampled_from(MODELS),
    st.lists(left_st, min_size=1, max_size=8),
    st.integers(0, 16).map(lambda c: c * 1000),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.lists(node_st, min_size=1, max_size=4),
    classes=st.lists(cls_st, min_size=1, max_size=6),
    request=st.tuples(
        st.sampled_from([0, 1000, 3000]), st.sampled_from([0, 100, 300, 500, 1000]), st.integers(1, 2)
    ),
)
def test_vectorised_matches_scalar_reference(nodes, classes, request):
    spec = make_cluster([(len(rows), model, 16_000, 10**6) for model, rows, _ in nodes])
    state = state_with(spec, [rows for _, rows, _ in nodes], [cpu for _, _, cpu in nodes])
    fm = FragModel(spec, tp(classes))
    scaled = fm.frag_scaled(state.gpu_left, state.cpu_left, fm.node_model)
    for n, (model, rows, cpu) in enumerate(nodes):
        assert Fraction(int(scaled[n]), fm.scale) == ref_frag(rows, cpu, model, classes)
    cpu_req, milli, num = request
    num = 0 if milli == 0 else (1 if milli < 1000 else num)
    r = JobRequest(0, num, milli, cpu_req, 0, np.ones(len(nodes), dtype=bool), False)
    ok = np.flatnonzero(feasible_nodes(state, r))
    if ok.size == 0:
        return
    s, g = fm.fgd_scores(state.gpu_left[ok], state.cpu_left[ok], fm.node_model[ok], cpu_req, milli, num)
    for k, n in enumerate(ok.tolist()):
        model, rows, cpu = nodes[n]
        assert (int(s[k]), int(g[k])) == ref_fgd(rows, cpu, model, classes, cpu_req, milli, num)


# -- real data -------------------------------------------------------------------------------------------------


@pytest.mark.realdata
def test_typical_pods_of_the_default_trace():
    from wattsched.workloads.catalog import load_workload

    require_real_file("alibaba-gpu-v2023", "csv/openb_pod_list_default.csv")
    t = typical_pods(load_workload("alibaba-v2023/default", real_data_dir()).jobs)
    assert (len(t), t.total_classes) == (35, 91)
    assert round(100 * t.coverage, 1) == 95.3
    top = list(zip(t.cpu_milli[:3].tolist(), t.gpu_milli[:3].tolist(), t.count[:3].tolist(), strict=True))
    assert top == [(3152, 810, 1047), (11300, 1000, 874), (11400, 1000, 599)]
