"""Buddy allocation with network packing (policies/buddy.py; rules in docs/powerflow.md).

The property test checks the policy against a brute-force oracle written here with plain loops: every aligned
block (or aligned node group, or set of whole switches) that could take the request, and the largest free aligned
block the cluster keeps after each of them.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import make_jobs, make_sim
from wattsched.core.cluster import MILLI, ClusterSpec, ClusterState
from wattsched.core.requests import JobRequest
from wattsched.core.states import STATUS_DONE
from wattsched.policies import PLACEMENT_POLICIES
from wattsched.policies.buddy import Buddy, even_split, maximal_free_block
from wattsched.policies.planning import Consolidated
from wattsched.workloads.clusters import load_cluster

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


# -- brute-force oracle ----------------------------------------------------------------------------------------------


def pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def gpu_free(state: ClusterState, node: int, g: int) -> bool:
    return g < int(state.spec.gpu_count[node]) and int(state.gpu_left[node, g]) == MILLI


def block_choices(state: ClusterState, req: JobRequest) -> list[tuple[int, tuple[int, ...]]]:
    """Rule 2: every all-free aligned block of n GPUs on a node that passes the filter."""
    n, out = req.num_gpu, []
    for node in range(state.spec.num_nodes):
        if not (
            req.node_mask[node]
            and state.available[node]
            and state.cpu_left[node] >= req.cpu_milli
            and state.mem_left[node] >= req.memory_mib
        ):
            continue
        for b in range(int(state.spec.gpu_count[node]) // n):
            gpus = tuple(range(b * n, (b + 1) * n))
            if all(gpu_free(state, node, g) for g in gpus):
                out.append((node, gpus))
    return out


def largest_gpu_block(state: ClusterState) -> int:
    """The largest entirely free aligned power-of-two block of GPU slots on any node."""
    best = 0
    for node in range(state.spec.num_nodes):
        count, size = int(state.spec.gpu_count[node]), 1
        while size <= count:
            for start in range(0, count - size + 1, size):
                if all(gpu_free(state, node, g) for g in range(start, start + size)):
                    best = max(best, size)
            size *= 2
    return best


class GangOracle:
    """Rule 3 by brute force: eligible nodes per switch in index order, and which of them can host the share."""

    def __init__(self, state: ClusterState, req: JobRequest):
        spec = state.spec
        self.state, self.req = state, req
        eligible = [i for i in range(spec.num_nodes) if req.node_mask[i] and spec.gpu_count[i] > 0]
        counts = {int(spec.gpu_count[i]) for i in eligible}
        self.ok = pow2(req.num_gpu) and len(counts) == 1 and pow2(min(counts))
        if not self.ok:
            return
        self.g = counts.pop()
        self.m = req.num_gpu // self.g
        self.lists = {}
        for i in eligible:
            self.lists.setdefault(int(spec.switch_id[i]), []).append(i)
        self.could = {i: self.hosts(int(spec.cpu_milli[i]), int(spec.memory_mib[i])) for i in eligible}
        m = self.m
        self.one_switch = any(
            all(self.could[x] for x in nodes[b * m : (b + 1) * m])
            for nodes in self.lists.values()
            for b in range(len(nodes) // m)
        )
        able = sorted((sum(self.could[x] for x in nodes) for nodes in self.lists.values()), reverse=True)
        reach = [k + 1 for k in range(len(able)) if sum(able[: k + 1]) >= m]
        self.need = 1 if self.one_switch else (reach[0] if reach else None)
        self.ok = self.need is not None

    def hosts(self, cpu: int, mem: int) -> bool:
        return cpu * self.m >= self.req.cpu_milli and mem * self.m >= self.req.memory_mib

    def free(self, state: ClusterState, i: int) -> bool:
        return bool(
            state.available[i]
            and state.free_gpus[i] == self.g
            and self.hosts(int(state.cpu_left[i]), int(state.mem_left[i]))
        )

    def groups(self) -> list[tuple[int, ...]]:
        """Rule 3a: aligned groups of m free nodes of one switch."""
        m, out = self.m, []
        for nodes in self.lists.values():
            for b in range(len(nodes) // m):
                group = tuple(nodes[b * m : (b + 1) * m])
                if all(self.free(self.state, x) for x in group):
                    out.append(group)
        return out

    def whole_switch_sets(self) -> list[tuple[int, ...]]:
        """Rule 3b: sets of at most `need` switches whose able nodes are all free and number at least m."""
        whole = [
            sw
            for sw, nodes in self.lists.items()
            if any(self.could[x] for x in nodes)
            and all(self.free(self.state, x) for x in nodes if self.could[x])
        ]
        out = []
        for k in range(1, self.need + 1):
            for combo in itertools.combinations(whole, k):
                if sum(self.could[x] for sw in combo for x in self.lists[sw]) >= self.m:
                    out.append(combo)
        return out

    def largest_group(self, state: ClusterState) -> int:
        """The largest aligned power-of-two group of free nodes in any switch's list."""
        best = 0
        for nodes in self.lists.values():
            size = 1
            while size <= len(nodes):
                for start in range(0, len(nodes) - size + 1, size):
                    if all(self.free(state, x) for x in nodes[start : start + size]):
                        best = max(best, size)
                size *= 2
        return best


def buddy_fits(state: ClusterState, req: JobRequest) -> bool | None:
    """Whether `buddy` can place `req` now; None where it falls back to `consolidated` (rule 1, 3c)."""
    if req.gang:
        oracle = GangOracle(state, req)
        if not oracle.ok:
            return None
        return bool(oracle.groups() if oracle.one_switch else oracle.whole_switch_sets())
    if req.num_gpu == 0 or req.gpu_milli < MILLI or not pow2(req.num_gpu):
        return None
    return bool(block_choices(state, req))


def applied(state: ClusterState, placement, milli: int = MILLI) -> ClusterState:
    after = state.copy()
    for node, gpus, cpu, mem in placement:
        after.allocate(node, gpus, milli, cpu, mem)  # raises on anything ClusterState would refuse
    return after


# -- helpers -----------------------------------------------------------------------------------------------------


def cluster(gpus: list[int], switch: list[int], cpu=None, models=None) -> ClusterSpec:
    n = len(gpus)
    return ClusterSpec.from_arrays(
        name="buddy-test",
        node_names=[f"n{i}" for i in range(n)],
        cpu_milli=cpu or [64_000] * n,
        memory_mib=[1 << 20] * n,
        gpu_count=gpus,
        gpu_model_names=models or ["V100"] * n,
        switch_id=switch,
    )


def request(spec: ClusterSpec, num_gpu: int, milli: int = MILLI, cpu: int = 0, mem: int = 0, mask=None):
    mask = (spec.gpu_count > 0) if mask is None else np.asarray(mask, dtype=bool)
    biggest = int(spec.gpu_count[mask].max()) if mask.any() else 0
    return JobRequest(0, num_gpu, milli, cpu, mem, mask, num_gpu > biggest)


def bound(spec: ClusterSpec, rank=None, cls=Buddy):
    policy = cls()
    rank = np.arange(spec.num_nodes) if rank is None else np.asarray(rank)
    policy.bind(spec, np.random.default_rng(0), rank=rank)
    return policy


def occupy(state: ClusterState, node: int, gpus) -> None:
    state.allocate(node, tuple(gpus), MILLI, 0, 0)


# -- hand cases: inside one node -------------------------------------------------------------------------------------


def test_registered_and_reconstructed():
    policy = PLACEMENT_POLICIES.create("buddy")
    assert isinstance(policy, Buddy) and policy.reconstructed and policy.monotone_failures


def test_maximal_free_block_sizes():
    free = np.array([[1, 1, 0, 1, 1, 1, 1, 1]], dtype=bool)
    assert maximal_free_block(free, 1).tolist() == [[2, 2, 0, 1, 4, 4, 4, 4]]
    assert maximal_free_block(free, 2).tolist() == [[2, 0, 4, 4]]
    assert maximal_free_block(free, 4).tolist() == [[0, 4]]
    # Slots past the row's width are absent: a 6-slot row has no free 8-block.
    assert maximal_free_block(np.ones((1, 6), dtype=bool), 2).tolist() == [[4, 4, 2]]


def test_even_split_floor_or_ceiling():
    assert even_split(22, 4) == [5, 6, 5, 6] and sum(even_split(22, 4)) == 22
    assert even_split(0, 3) == [0, 0, 0]


def test_splits_the_smallest_free_buddy():
    spec = cluster([8], [0])
    state = ClusterState(spec)
    occupy(state, 0, [0, 1])  # free: 2-block [2,4) and 4-block [4,8)
    policy = bound(spec)
    assert policy.place(state, request(spec, 2)) == ((0, (2, 3), 0, 0),)
    assert policy.place(state, request(spec, 1)) == ((0, (2,), 0, 0),)
    assert policy.place(state, request(spec, 4)) == ((0, (4, 5, 6, 7), 0, 0),)


def test_prefers_the_node_whose_free_block_is_smaller():
    spec = cluster([8, 8], [0, 0])
    state = ClusterState(spec)
    occupy(state, 1, [4, 5, 6, 7])  # node 1 keeps a free 4-block; node 0 is a free 8-block
    assert bound(spec).place(state, request(spec, 4)) == ((1, (0, 1, 2, 3), 0, 0),)
    assert bound(spec).place(state, request(spec, 8)) == ((0, tuple(range(8)), 0, 0),)


def test_ties_fewer_free_gpus_then_rank_then_block():
    spec = cluster([8, 8, 8], [0, 0, 0])
    state = ClusterState(spec)
    occupy(state, 0, [0, 1])  # node 0: blocks 2 at [2,4), 4 at [4,8)
    occupy(state, 1, [4, 5, 6, 7])
    occupy(state, 1, [0])  # node 1: free {1, 2, 3}: 2-block [2,4) is maximal-free size 2, 3 free GPUs
    # A 2-GPU job: both nodes 0 and 1 offer a maximal free 2-block; node 1 has fewer free GPUs.
    assert bound(spec).place(state, request(spec, 2))[0][:2] == (1, (2, 3))
    occupy(state, 0, [4, 5, 6, 7])  # node 0: free {2, 3}: now fewer free GPUs than node 1
    assert bound(spec).place(state, request(spec, 2))[0][:2] == (0, (2, 3))
    # Equal nodes: the smaller rank wins; on one node, the lower block.
    spec = cluster([4, 4], [0, 0])
    assert bound(spec, rank=[1, 0]).place(ClusterState(spec), request(spec, 2))[0][:2] == (1, (0, 1))
    assert bound(spec, rank=[0, 1]).place(ClusterState(spec), request(spec, 1))[0][:2] == (0, (0,))


def test_scattered_free_gpus_are_not_a_block():
    spec = cluster([4], [0])
    state = ClusterState(spec)
    occupy(state, 0, [0])
    occupy(state, 0, [3])  # free {1, 2}: two GPUs, but no aligned free pair
    assert bound(spec).place(state, request(spec, 2)) is None
    assert bound(spec, cls=Consolidated).place(state, request(spec, 2)) is not None
    assert bound(spec).place(state, request(spec, 1))[0][1] == (1,)


def test_filter_cpu_mask_and_availability():
    spec = cluster([4, 4, 4], [0, 0, 0], cpu=[8000, 64_000, 64_000], models=["V100", "V100", "T4"])
    state = ClusterState(spec)
    state.set_available(np.array([1]), False)
    assert bound(spec).place(state, request(spec, 4, cpu=16_000, mask=[True, True, False])) is None
    assert bound(spec).place(state, request(spec, 4, cpu=16_000))[0][0] == 2
    assert bound(spec).place(state, request(spec, 4, cpu=8000, mask=[True, True, False]))[0] == (
        0,
        (0, 1, 2, 3),
        8000,
        0,
    )


def test_shares_and_other_counts_place_as_consolidated():
    spec = cluster([8, 4], [0, 0])
    state = ClusterState(spec)
    occupy(state, 0, [0, 1, 2])
    state.allocate(1, (2,), 600, 0, 0)
    buddy, consolidated = bound(spec, rank=[1, 0]), bound(spec, rank=[1, 0], cls=Consolidated)
    for req in (request(spec, 3), request(spec, 1, milli=300), request(spec, 0, milli=0, cpu=1000)):
        assert buddy.place(state, req) == consolidated.place(state, req)
    assert buddy.place(state, request(spec, 1, milli=300))[0][:2] == (1, (2,))  # tightest GPU (gpus_best)
    assert buddy.place(state, request(spec, 3))[0][:2] == (1, (0, 1, 3))  # fullest node, lowest free GPUs


# -- hand cases: whole nodes and switches ----------------------------------------------------------------------------


def test_gang_takes_the_aligned_group_that_splits_the_smaller_free_group():
    spec = cluster([4] * 8, [0, 0, 0, 0, 1, 1, 1, 1])
    state = ClusterState(spec)
    occupy(state, 4, range(4))  # switch 1: positions 2, 3 free as an aligned pair; position 1 free alone
    got = bound(spec).place(state, request(spec, 8, cpu=8000))
    assert [a[0] for a in got] == [6, 7] and all(a[1] == (0, 1, 2, 3) for a in got)
    assert sum(a[2] for a in got) == 8000
    # A 16-GPU job needs a free aligned group of 4: only switch 0.
    assert [a[0] for a in bound(spec).place(state, request(spec, 16))] == [0, 1, 2, 3]
    occupy(state, 0, [0])
    assert bound(spec).place(state, request(spec, 16)) is None  # 3 free nodes in switch 0 are not enough
    assert bound(spec).place(state, request(spec, 32)) is None  # needs two whole switches


def test_gang_groups_are_aligned_not_just_consecutive():
    spec = cluster([4] * 4, [0] * 4)
    state = ClusterState(spec)
    occupy(state, 0, [0])
    occupy(state, 3, [0])  # free nodes 1, 2: consecutive but not an aligned pair
    assert bound(spec).place(state, request(spec, 8)) is None
    assert bound(spec, cls=Consolidated).place(state, request(spec, 8)) is not None


def test_gang_ties_fewest_free_nodes_then_rank():
    spec = cluster([4] * 8, [0, 0, 0, 0, 1, 1, 1, 1])
    state = ClusterState(spec)
    occupy(state, 0, [0])
    occupy(state, 1, [0])
    occupy(state, 5, [0])  # switch 0: free pair (2,3), 2 free nodes; switch 1: free pair (6,7), 3 free nodes
    assert [a[0] for a in bound(spec).place(state, request(spec, 8))] == [2, 3]
    occupy(state, 4, [0])  # both switches: one free pair, 2 free nodes; rank decides
    assert [a[0] for a in bound(spec, rank=[7, 6, 5, 4, 3, 2, 1, 0]).place(state, request(spec, 8))] == [6, 7]


def test_gang_larger_than_a_switch_takes_whole_switches():
    spec = cluster([4] * 6, [0, 0, 1, 1, 2, 2])
    state = ClusterState(spec)
    occupy(state, 0, [1])
    got = bound(spec).place(state, request(spec, 16, cpu=12_000))  # 4 nodes: switches 1 and 2
    assert [a[0] for a in got] == [2, 3, 4, 5] and [a[2] for a in got] == [3000] * 4
    occupy(state, 4, [0])
    assert bound(spec).place(state, request(spec, 16)) is None  # never three switches, never part of one


def test_gang_over_switches_of_different_sizes_never_takes_more_than_needed():
    spec = cluster([4] * 7, [0, 0, 0, 1, 1, 2, 3])  # switches of 3, 2, 1 and 1 nodes
    state = ClusterState(spec)
    # 4 nodes: no switch has an aligned group of 4, two switches (3 + 2 nodes) are the fewest that hold it.
    assert [a[0] for a in bound(spec).place(state, request(spec, 16))] == [0, 1, 2, 3]
    occupy(state, 0, [0])
    assert bound(spec).place(state, request(spec, 16)) is None  # 2 + 1 + 1 free would span three switches


def test_gang_per_node_cpu_share():
    spec = cluster([4] * 4, [0] * 4, cpu=[64_000] * 4)
    state = ClusterState(spec)
    state.allocate(1, (), 0, 60_000, 0)  # node 1 keeps 4000 milli-CPU: not enough for half of 10000
    got = bound(spec).place(state, request(spec, 8, cpu=10_000))
    assert [a[0] for a in got] == [2, 3] and [a[2] for a in got] == [5000, 5000]
    state.cpu_left[1] = 7000
    assert [a[0] for a in bound(spec).place(state, request(spec, 8, cpu=10_000))] == [0, 1]


def test_gang_falls_back_to_consolidated():
    # Eligible nodes of different sizes.
    spec = cluster([4, 2, 4], [0, 0, 0])
    state = ClusterState(spec)
    buddy, consolidated = bound(spec), bound(spec, cls=Consolidated)
    for req in (request(spec, 8), request(spec, 6)):
        assert buddy.place(state, req) == consolidated.place(state, req) is not None
    # No node can ever host the per-node share of 4 GPUs: Consolidated's partial nodes.
    spec = cluster([4] * 4, [0] * 4, cpu=[6000] * 4)
    req = request(spec, 8, cpu=16_000)  # 8000 per 4-GPU node
    got = bound(spec).place(ClusterState(spec), req)
    assert got == bound(spec, cls=Consolidated).place(ClusterState(spec), req) is not None


def test_switches_of_the_small_fixture_cluster():
    """tests/fixtures/cluster_small.yaml: 4 x 8 A100 nodes, 2 per switch, plus 2 CPU-only nodes."""
    spec = load_cluster(str(FIXTURES / "cluster_small.yaml"))
    assert spec.switch_id.tolist()[:4] == [0, 0, 1, 1]
    state = ClusterState(spec)
    occupy(state, 0, [0])
    policy = bound(spec)
    assert [a[0] for a in policy.place(state, request(spec, 16))] == [2, 3]
    assert policy.place(state, request(spec, 32)) is None
    assert [a[0] for a in policy.place(ClusterState(spec), request(spec, 32))] == [0, 1, 2, 3]


def test_simulation_with_buddy_finishes_every_job():
    spec = cluster([4] * 8, [0, 0, 0, 0, 1, 1, 1, 1])
    rng = np.random.default_rng(3)
    rows = [
        {
            "submit": float(i),
            "duration": float(rng.integers(5, 50)),
            "gpus": int(rng.choice([1, 2, 3, 4, 8, 16])),
        }
        for i in range(60)
    ]
    out = make_sim(make_jobs(rows), spec, "fifo", "buddy").run()
    assert (out.status == STATUS_DONE).all()


# -- property test against the oracle --------------------------------------------------------------------------------


@st.composite
def scenarios(draw, gangs: bool = False):
    """A random cluster of 1-2 switches (1-4 nodes each, 4 or 8 GPUs a node), part of it in use, and a request.
    With `gangs`, every node has the same GPU count, more nodes are untouched and the request is a gang."""
    per_switch = draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
    n = sum(per_switch)
    uniform = gangs or draw(st.integers(0, 3)) > 0
    g = draw(st.sampled_from([4, 8]))
    gpus = [g if uniform else draw(st.sampled_from([4, 8])) for _ in range(n)]
    models = [draw(st.sampled_from(["V100", "V100", "V100", "T4"])) for _ in range(n)]
    cpu = [draw(st.sampled_from([16_000, 64_000])) for _ in range(n)]
    spec = ClusterSpec.from_arrays(
        name="prop",
        node_names=[f"n{i}" for i in range(n)],
        cpu_milli=cpu,
        memory_mib=[1 << 20] * n,
        gpu_count=gpus,
        gpu_model_names=models,
        switch_id=[s for s, k in enumerate(per_switch) for _ in range(k)],
    )
    state = ClusterState(spec)
    busy = draw(st.floats(0.0, 0.8))
    for node in range(n):
        idle = draw(st.integers(0, 2)) < (2 if gangs else 1)  # untouched nodes: whole free nodes for gangs
        taken = () if idle else tuple(g for g in range(gpus[node]) if draw(st.floats(0, 1)) < busy)
        used_cpu = 0 if idle else draw(st.sampled_from([0, 0, 4000, 12_000]))
        state.allocate(node, taken, MILLI if draw(st.booleans()) else 500, used_cpu, 0)
    off = [i for i in range(n) if draw(st.integers(0, 9)) == 0]
    state.set_available(np.array(off, dtype=np.int64), False)
    if gangs:
        num_gpu = g * draw(st.sampled_from([2, 2, 2, 4, 4, 8, 3]))
    else:
        num_gpu = draw(st.sampled_from([1, 1, 2, 2, 4, 4, 8, 8, 8, 16, 16, 32, 3, 6, 12]))
    milli = MILLI if num_gpu > 1 else draw(st.sampled_from([MILLI, MILLI, 500]))
    only = draw(st.sampled_from([None, None, None, "V100"] if gangs else [None, None, None, "V100", "T4"]))
    mask = np.array([only is None or m == only for m in models])
    cpu_req = draw(
        st.sampled_from([0, 0, 4000, 16_000, 40_000] if gangs else [0, 4000, 16_000, 40_000, 96_000])
    )
    rank = draw(st.permutations(list(range(n))))
    return spec, state, request(spec, num_gpu, milli, cpu=cpu_req, mask=mask), rank


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_buddy_matches_brute_force(scenario):
    check_against_oracle(*scenario)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(gangs=True))
def test_buddy_gangs_match_brute_force(scenario):
    check_against_oracle(*scenario)


def check_against_oracle(spec, state, req, rank):
    got = bound(spec, rank).place(state, req)
    fits = buddy_fits(state, req)
    if got is not None:  # never a placement ClusterState would refuse, totals exact
        applied(state, got, req.gpu_milli if req.gpu_milli > 0 else MILLI)
        assert sum(len(a[1]) for a in got) == req.num_gpu
        assert sum(a[2] for a in got) == req.cpu_milli and sum(a[3] for a in got) == req.memory_mib
        assert all(req.node_mask[a[0]] and state.available[a[0]] for a in got)
    if fits is None:  # rule 1 and 3c
        assert got == bound(spec, rank, Consolidated).place(state, req)
        return
    assert (got is not None) == fits  # None only when nothing fits
    if got is None:
        return
    if not req.gang:
        ((node, gpus, _, _),) = got  # one node, one aligned block
        n = req.num_gpu
        assert gpus[0] % n == 0 and gpus == tuple(range(gpus[0], gpus[0] + n))
        assert (node, gpus) in block_choices(state, req)
        kept = largest_gpu_block(applied(state, got))
        for other_node, other in block_choices(state, req):
            alt = ((other_node, other, req.cpu_milli, req.memory_mib),)
            assert kept >= largest_gpu_block(applied(state, alt))
        return
    oracle = GangOracle(state, req)
    nodes = tuple(a[0] for a in got)
    assert all(a[1] == tuple(range(oracle.g)) and oracle.free(state, a[0]) for a in got)
    switches = {int(spec.switch_id[x]) for x in nodes}
    if any(sum(oracle.free(state, x) for x in members) >= oracle.m for members in oracle.lists.values()):
        assert len(switches) == 1  # never across switches when one switch could hold it
    if oracle.one_switch:
        assert nodes in oracle.groups()
        kept = oracle.largest_group(applied(state, got))
        for group in oracle.groups():
            alt = tuple((x, tuple(range(oracle.g)), 0, 0) for x in group)
            assert kept >= oracle.largest_group(applied(state, alt))
    else:
        assert len(switches) <= oracle.need
        assert any(switches <= set(combo) for combo in oracle.whole_switch_sets())


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_fills_an_empty_node_without_fragmenting(n):
    """Jobs of one size fill an empty 8-GPU node in aligned blocks, in order."""
    spec = cluster([8], [0])
    state, policy = ClusterState(spec), bound(spec)
    for b in range(8 // n):
        got = policy.place(state, request(spec, n))
        assert got[0][1] == tuple(range(b * n, (b + 1) * n))
        occupy(state, 0, got[0][1])
    assert policy.place(state, request(spec, n)) is None
