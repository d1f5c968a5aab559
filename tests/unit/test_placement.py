"""Placement baselines against hand-computed scores (formulas in fgd-pwr.md §4)."""

import numpy as np
import pytest

from tests.conftest import make_cluster, state_with
from wattsched.core.cluster import ClusterState
from wattsched.core.requests import JobRequest
from wattsched.policies import PLACEMENT_POLICIES
from wattsched.policies.base import feasible_nodes, gpus_best
from wattsched.policies.placement import min_max_normalise

SHAPES = [(8, "G2", 96_000, 393_216), (2, "T4", 104_000, 524_288), (4, "V100M16", 32_000, 131_072)]


@pytest.fixture
def spec():
    return make_cluster(SHAPES)


def request(num_gpu=1, milli=1000, cpu=4000, mem=0, mask=None, gang=False, n=3):
    mask = np.ones(n, dtype=bool) if mask is None else mask
    return JobRequest(0, num_gpu, milli, cpu, mem, mask, gang)


def bound(name, spec, rank=(0, 1, 2)):
    policy = PLACEMENT_POLICIES.create(name)
    policy.bind(spec, np.random.default_rng(0), rank=np.array(rank))
    return policy


def test_best_fit_scores_are_min_max_normalised(spec):
    state = ClusterState(spec)
    policy = bound("best-fit", spec)
    # raw = int(100 * (1 - leftover)): 20, 54, 70 -> normalised 0, 68, 100
    assert policy.score(state, request(), np.arange(3)).tolist() == [0, 68, 100]
    assert policy.place(state, request())[0][0] == 2


def test_min_max_all_equal_uses_given_value():
    assert min_max_normalise(np.array([5, 5]), all_equal=0).tolist() == [0, 0]
    assert min_max_normalise(np.array([5, 5]), all_equal=100).tolist() == [100, 100]


def test_dot_product_prefers_smallest_alignment(spec):
    state = ClusterState(spec)
    policy = bound("dotprod", spec)
    assert policy.score(state, request(), np.arange(3)).tolist() == [92, 97, 96]
    assert policy.place(state, request())[0][0] == 1


def test_gpu_clustering_prefers_same_kind_then_fuller(spec):
    state = ClusterState(spec)
    policy = bound("gpu-clustering", spec)
    assert policy.score(state, request(), np.arange(3)).tolist() == [25, 43, 37]
    state.allocate(0, (0,), 1000, 0, 0)  # a 1-GPU pod on node 0 makes it the only-same-kind node
    assert policy.score(state, request(), np.arange(3)).tolist() == [78, 43, 37]
    state.allocate(0, (1,), 300, 0, 0)  # add a share pod: node 0 now has two kinds
    assert policy.score(state, request(), np.arange(3))[0] == 50 + 25 * (8000 - 6700) // 8000
    assert policy.score(state, request(cpu=0, num_gpu=0, milli=0), np.arange(3)).tolist() == [0, 0, 0]


def test_gpu_packing_cases(spec):
    policy = bound("gpu-packing", spec)
    empty = ClusterState(spec)
    # case 3 on empty nodes: max(33 - free, free)
    assert policy.score(empty, request(), np.arange(3)).tolist() == [25, 31, 29]
    state = state_with(
        spec, [[600, 1000, 1000, 1000, 1000, 1000, 1000, 1000], [1000, 1000], [0, 1000, 1000, 1000]]
    )
    # share pod 500: node 0 fits on the 600 GPU (case 1: 100 - 60//10 = 94); node 2 needs a free GPU (case 2: 49)
    assert policy.score(state, request(milli=500), np.arange(3)).tolist() == [94, 31, 49]
    # whole 2 GPUs on used nodes: case 2 = max(50 - 2, 33) = 48
    assert policy.score(state, request(num_gpu=2), np.arange(3)).tolist() == [48, 31, 48]


def test_first_fit_and_ties_follow_rank(spec):
    state = ClusterState(spec)
    assert bound("first-fit", spec, rank=(2, 0, 1)).place(state, request())[0][0] == 1
    assert bound("first-fit", spec, rank=(1, 2, 0)).place(state, request())[0][0] == 2


def test_single_feasible_node_skips_scoring(spec, monkeypatch):
    state = ClusterState(spec)
    policy = bound("random", spec)
    calls = []
    monkeypatch.setattr(
        policy, "score", lambda *args: calls.append(args) or np.zeros(len(args[2]), dtype=int)
    )
    placed = policy.place(state, request(num_gpu=8))  # only node 0 has 8 GPUs
    assert placed == ((0, tuple(range(8)), 4000, 0),)
    assert calls == []  # chosen without scoring
    # random's scoring draws from its stream: skipping it leaves the stream where it was
    assert policy.rng.bit_generator.state == np.random.default_rng(0).bit_generator.state
    policy.place(state, request(num_gpu=1))  # three feasible nodes: scored
    assert len(calls) == 1 and calls[0][2].tolist() == [0, 1, 2]


def test_filters_cpu_memory_model_gpu_fit_and_availability(spec):
    state = ClusterState(spec)
    policy = bound("best-fit", spec)
    # CPU: 100 000 milli fits only node 1 (104 000); 200 000 fits nowhere
    assert feasible_nodes(state, request(cpu=100_000)).tolist() == [False, True, False]
    assert policy.place(state, request(cpu=200_000)) is None
    # memory: 400 000 MiB fits only node 1 (524 288); 600 000 nowhere
    assert feasible_nodes(state, request(mem=400_000)).tolist() == [False, True, False]
    assert policy.place(state, request(mem=600_000)) is None
    only_t4 = np.array([False, True, False])
    assert policy.place(state, request(mask=only_t4))[0][0] == 1
    # GPU fit, whole GPUs: 4 free GPUs rule out the 2-GPU node; then node 2 keeps 3 free, node 0 keeps 8
    assert feasible_nodes(state, request(num_gpu=4)).tolist() == [True, False, True]
    state.allocate(2, (0,), 1000, 0, 0)
    assert feasible_nodes(state, request(num_gpu=4)).tolist() == [True, False, False]
    # GPU fit, a share pod: needs one GPU with that much milli left (node 0's GPUs left at 600 and 300)
    tight = state_with(spec, [[600] * 8, [300, 300], [1000, 0, 0, 0]])
    assert feasible_nodes(tight, request(milli=500)).tolist() == [True, False, True]
    assert feasible_nodes(tight, request(milli=700)).tolist() == [False, False, True]
    assert feasible_nodes(tight, request(num_gpu=2)).tolist() == [False, False, False]  # no 2 whole free GPUs
    assert policy.place(tight, request(num_gpu=2)) is None
    # availability: a node that is off or draining takes nothing
    state.set_available(np.array([1]), False)
    assert policy.place(state, request(mask=only_t4)) is None


def test_gpu_choice_inside_node():
    row = np.array([1000, 400, 350, 1000])
    assert gpus_best(row, 1, 300) == (2,)
    assert gpus_best(np.array([1000, 0, 1000, 1000]), 2, 1000) == (0, 2)
    assert gpus_best(row, 0, 0) == ()


def test_random_is_seeded_and_uniform_over_feasible(spec):
    def picks(seed, n=600):
        policy = PLACEMENT_POLICIES.create("random")
        policy.bind(spec, np.random.default_rng(seed))
        state = ClusterState(spec)
        return [policy.place(state, request(num_gpu=2))[0][0] for _ in range(n)]  # nothing allocated

    # seeded: the same seed gives the same picks, another seed other picks
    assert picks(3) == picks(3)
    assert picks(3) != picks(4)
    # the 2-GPU request never goes to a node that cannot host it, and the feasible nodes are drawn uniformly
    state = ClusterState(spec)
    state.allocate(1, (0,), 1000, 0, 0)  # T4 node: one free GPU left, infeasible for 2 GPUs
    policy = PLACEMENT_POLICIES.create("random")
    policy.bind(spec, np.random.default_rng(5))
    counts = np.bincount([policy.place(state, request(num_gpu=2))[0][0] for _ in range(600)], minlength=3)
    assert counts[1] == 0
    assert abs(int(counts[0]) - 300) < 60 and abs(int(counts[2]) - 300) < 60  # Binomial(600, 1/2): sd 12.2


def test_gang_spreads_over_fewest_nodes():
    spec = make_cluster([(8, "V100", 64_000, 10_000)] * 3)
    state = ClusterState(spec)
    state.allocate(1, (0, 1), 1000, 0, 0)
    policy = bound("best-fit", spec)
    placed = policy.place(state, request(num_gpu=12, cpu=12_000, gang=True))
    assert [(n, len(g), c) for n, g, c, _ in placed] == [(0, 8, 8000), (2, 4, 4000)]
    assert policy.place(state, request(num_gpu=23, cpu=0, gang=True)) is None  # only 22 free
    # Free GPUs 2, 8, 6 with node 0 first in rank: rank order would need all three nodes, fewest needs two.
    state = state_with(spec, [[0] * 6 + [1000] * 2, [1000] * 8, [0, 0] + [1000] * 6])
    placed = policy.place(state, request(num_gpu=12, cpu=12_000, gang=True))
    assert [(n, g, c) for n, g, c, _ in placed] == [(1, tuple(range(8)), 8000), (2, (2, 3, 4, 5), 4000)]
