"""PWR: the binary power model (fgd-pwr.md §7.1), the PWR score and GPU choice (§7.2), PWR+FGD combinations (§7.3)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import make_cluster, make_jobs, real_data_dir, require_real_file, state_with
from wattsched.core.cluster import ClusterState
from wattsched.core.errors import UnknownNameError
from wattsched.core.requests import JobRequest
from wattsched.energy.binary import (
    BinaryPowerModel,
    cluster_power_w,
    cpu_power_w,
    gpu_power_w,
    node_power_w,
)
from wattsched.policies import PLACEMENT_POLICIES
from wattsched.policies.pwr import PWR, PwrFgd, pwr_raw_scores

# The 1213 GPU nodes of the Alibaba v2023 cluster, by shape (fgd-pwr.md §1.1): (count, GPUs, model, vCPU, MiB).
ALIBABA_SHAPES = [
    (549, 8, "G2", 96, 393216),
    (387, 2, "T4", 104, 524288),
    (17, 4, "T4", 96, 393216),
    (107, 2, "P100", 16, 122880),
    (22, 2, "P100", 64, 262144),
    (2, 2, "P100", 8, 61440),
    (3, 1, "P100", 8, 61440),
    (28, 4, "V100M16", 32, 131072),
    (19, 1, "V100M16", 8, 32768),
    (7, 8, "V100M16", 64, 262144),
    (1, 8, "V100M16", 82, 344064),
    (39, 8, "G3", 128, 786432),
    (21, 8, "V100M32", 96, 786432),
    (9, 4, "V100M32", 48, 376832),
    (2, 1, "A10", 128, 1048576),
]


def alibaba_replica():
    shapes = [(g, m, v * 1000, mib) for n, g, m, v, mib in ALIBABA_SHAPES for _ in range(n)]
    return make_cluster(shapes, name="alibaba-replica")


def fully_allocated(spec) -> ClusterState:
    state = ClusterState(spec)
    state.gpu_left[state.gpu_left > 0] = 0
    state.cpu_left[:] = 0
    state._refresh_all()
    return state


def test_idle_and_full_alibaba_cluster_power():
    spec = alibaba_replica()
    assert (spec.num_nodes, spec.total_gpus) == (1213, 6212)
    idle = ClusterState(spec)
    assert cpu_power_w(idle).sum() == 55_665 and gpu_power_w(idle).sum() == 174_435
    assert cluster_power_w(idle) == 230_100
    full = fully_allocated(spec)
    assert cpu_power_w(full).sum() == 445_320 and gpu_power_w(full).sum() == 1_028_790
    assert cluster_power_w(full) == 1_474_110


@pytest.mark.realdata
def test_idle_power_of_the_real_cluster():
    from wattsched.workloads.clusters import load_cluster

    require_real_file("alibaba-gpu-v2023", "csv/openb_node_list_gpu_node.csv")
    spec = load_cluster("alibaba-v2023", real_data_dir())
    assert cluster_power_w(ClusterState(spec)) == 230_100
    assert cluster_power_w(fully_allocated(spec)) == 1_474_110


G2_T4 = make_cluster([(8, "G2", 96_000, 393_216), (8, "G2", 96_000, 393_216), (2, "T4", 104_000, 524_288)])


def test_worked_g2_example_plus_225_w():
    state = ClusterState(G2_T4)
    before = node_power_w(state)[0]
    assert before == 3 * 15 + 8 * 30  # 3 idle sockets, 8 idle A10-class GPUs
    state.allocate(0, (0,), 300, 4000, 0)  # 4 vCPU, 0.3 GPU
    assert cpu_power_w(state)[0] == 120 + 2 * 15 and gpu_power_w(state)[0] == 7 * 30 + 150
    assert node_power_w(state)[0] - before == 225


def test_cpu_power_follows_the_code_not_the_paper_on_104_vcpu_nodes():
    # 104 vCPU -> 52 cores -> ceil(52 / 16) = 4 sockets in the code (the paper's formula gives 3).
    state = ClusterState(G2_T4)
    assert cpu_power_w(state)[2] == 4 * 15
    state.allocate(
        2, (), 0, 3000, 0
    )  # 3 vCPU: floor(101 / 2) = 50 idle cores -> 2 working -> 1 active socket
    assert cpu_power_w(state)[2] == 120 + 3 * 15


def test_row_helper_matches_vectorised_model():
    model = BinaryPowerModel(G2_T4)
    state = state_with(G2_T4, [[1000, 500, 0, 1000, 1000, 1000, 1000, 1000], [1000] * 8, [300, 1000]])
    state.cpu_left[:] = [50_000, 96_000, 1000]
    vec = model.state_node_power(state)
    for n in range(3):
        assert model.row_power(n, int(state.cpu_left[n]), state.gpu_left[n]) == vec[n]


def share(milli=300, cpu=4000, n=3):
    return JobRequest(0, 1, milli, cpu, 0, np.ones(n, dtype=bool), False)


def bound(policy, spec, rank=None):
    policy.bind(spec, np.random.default_rng(0), rank=np.arange(spec.num_nodes) if rank is None else rank)
    return policy


def test_pwr_raw_and_normalised_scores():
    state = state_with(G2_T4, [[500] + [1000] * 7, [1000] * 8, [1000, 1000]])
    policy = bound(PWR(), G2_T4)
    nodes = np.arange(3)
    # node 0: CPU +105 W, GPU 0 already busy -> -105; node 1: +105 +120 -> -225; T4 node: +105 +60 -> -165
    assert pwr_raw_scores(policy.power, state, share(), nodes).tolist() == [-105, -225, -165]
    assert policy.score(state, share(), nodes).tolist() == [100, 0, 50]
    assert policy.place(state, share()) == ((0, (0,), 4000, 0),)
    # Whole GPUs: 2 x (150 - 30) on a G2 node, 2 x (70 - 10) on the T4 node; CPU-only pods: CPU power only.
    whole = JobRequest(0, 2, 1000, 0, 0, np.ones(3, dtype=bool), False)
    assert pwr_raw_scores(policy.power, state, whole, nodes).tolist() == [-240, -240, -120]
    cpu_only = JobRequest(0, 0, 0, 1000, 0, np.ones(3, dtype=bool), False)
    assert pwr_raw_scores(policy.power, state, cpu_only, nodes).tolist() == [-105, -105, -105]
    # All equal -> 100 for every node.
    assert policy.score(state, cpu_only, nodes).tolist() == [100, 100, 100]


def test_pwr_gpu_choice_prefers_busy_gpus():
    spec = make_cluster([(4, "V100M16", 32_000, 131_072)])
    policy = bound(PWR(), spec)
    state = state_with(spec, [[1000, 200, 600, 500]])
    # GPU 1 is busy but too small; GPU 2 is the first busy GPU that fits (not the tighter GPU 3, not free GPU 0).
    assert policy.choose_gpus(state, share(300, n=1), 0) == (2,)
    state = state_with(spec, [[200, 1000, 1000, 100]])
    assert policy.choose_gpus(state, share(300, n=1), 0) == (1,)


V100 = make_cluster([(4, "V100M16", 32_000, 131_072), (4, "V100M16", 32_000, 131_072)])
SHARE_JOBS = make_jobs([{"gpus": 1, "milli": 500, "cpu": 1000}] * 4)  # typical pods: one share class


def test_combination_is_weighted_sum_and_fgd_picks_gpus():
    policy = PLACEMENT_POLICIES.create("pwr_200_fgd_800")
    assert isinstance(policy, PwrFgd) and policy.name == "pwr_200_fgd_800"
    assert (policy.w_pwr, policy.w_fgd) == (200, 800)
    bound(policy, V100)
    policy.prepare(SHARE_JOBS, V100)
    state = state_with(V100, [[1000, 500, 300, 1000], [1000] * 4])
    r = share(300, 1000, n=2)
    nodes = np.arange(2)
    pwr = policy.pwr.score(state, r, nodes)
    fgd = policy.fgd.score(state, r, nodes)
    # node 0 already has busy GPUs (no GPU power increase) -> PWR 100 vs 0; FGD: F0 = 300 on node 0, and
    # 300 milli on its GPU 2 (300 -> 0) removes the fragment: 57; node 1 (all free): F stays 0 -> 50.
    assert pwr.tolist() == [100, 0] and fgd.tolist() == [57, 50]
    assert policy.score(state, r, nodes).tolist() == [200 * 100 + 800 * 57, 800 * 50]
    # PWR alone would take GPU 1 (first busy GPU that fits); the combination uses FGD's choice, GPU 2.
    assert PWR().choose_gpus(state, r, 0) == (1,)
    assert policy.choose_gpus(state, r, 0) == (2,)
    assert policy.place(state, r) == ((0, (2,), 1000, 0),)


def test_combination_weights_can_flip_the_winner():
    # Node 0: GPU 0 has 400 left (a fragment for the 500-milli class, F0 = 400), CPU idle; a 400-milli pod there
    # removes the fragment: FGD int(100 * sigmoid(0.4)) = 59, but it wakes a CPU socket: +105 W.
    # Node 1: busy GPU with 700 left and an active socket with idle cores: +0 W, FGD best 50 (on a free GPU).
    state = state_with(V100, [[400, 1000, 1000, 1000], [1000, 700, 1000, 1000]], [32_000, 30_000])
    r = share(400, 1000, n=2)
    nodes = np.arange(2)
    expected = {  # w_pwr * PWRnorm + w_fgd * FGD with PWRnorm = [0, 100], FGD = [59, 50]
        "pwr_500_fgd_500": ([500 * 59, 500 * 100 + 500 * 50], 1),
        "pwr_50_fgd_950": ([950 * 59, 50 * 100 + 950 * 50], 0),
        "pwr_0_fgd_1000": ([1000 * 59, 1000 * 50], 0),
        "pwr_1000_fgd_0": ([0, 1000 * 100], 1),
    }
    for name, (scores, winner) in expected.items():
        p = bound(PLACEMENT_POLICIES.create(name), V100)
        p.prepare(SHARE_JOBS, V100)
        assert p.score(state, r, nodes).tolist() == scores, name
        assert p.place(state, r)[0][0] == winner, name


def test_family_names_resolve_and_reject():
    assert "pwr_100_fgd_900" in PLACEMENT_POLICIES
    assert "pwr_<W1>_fgd_<W2>" in PLACEMENT_POLICIES.names(with_patterns=True)
    for bad in ("pwr_fgd", "pwr_-1_fgd_2", "pwr_0_fgd_0", "pwr_1_fgd_x"):
        with pytest.raises(UnknownNameError):
            PLACEMENT_POLICIES.create(bad)
    assert PLACEMENT_POLICIES.create("pwr").name == "pwr"
