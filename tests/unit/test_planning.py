"""Planning helpers for allocation policies (consolidated placement) and when rounds decide."""

from __future__ import annotations

import numpy as np

from tests.conftest import make_cluster, make_jobs
from wattsched.core.cluster import ClusterState
from wattsched.core.requests import RequestBook
from wattsched.engine.temporal import Simulator
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.base import PLACEMENT_POLICIES
from wattsched.policies.contract import AllocationPolicy
from wattsched.policies.planning import Consolidated, Plan


def _place(nodes, row):
    jobs = make_jobs([row])
    spec = make_cluster(nodes)
    policy = Consolidated()
    policy.bind(spec, np.random.default_rng(0), np.arange(spec.num_nodes))
    state = ClusterState(spec)
    return policy.place(state, RequestBook.build(jobs, spec).request(0)), state


def test_gang_on_whole_nodes_respects_each_nodes_memory_share():
    # 16 GPUs wanting 64 GiB each on nodes of 8 GPUs and 256 GiB: a node can serve only 4 of the gang's GPUs,
    # so the gang needs 4 nodes, not the 2 that its GPU count alone suggests.
    nodes = [(8, "V100", 64_000, 262_144)] * 6
    row = {"submit": 0.0, "duration": 10.0, "gpus": 16, "milli": 1000, "cpu": 16_000, "mem": 16 * 65_536}
    placement, state = _place(nodes, row)
    assert placement is not None
    assert [len(gpus) for _, gpus, _, _ in placement] == [4, 4, 4, 4]
    assert all(mem <= 262_144 for _, _, _, mem in placement)
    assert sum(mem for _, _, _, mem in placement) == 16 * 65_536
    for node, gpus, cpu, mem in placement:  # the placement is accepted by the cluster state as given
        state.allocate(node, gpus, 1000, cpu, mem)


def test_gang_that_no_switch_can_serve_is_refused():
    nodes = [(8, "V100", 64_000, 262_144)] * 3  # 3 nodes x 4 GPUs of memory share = 12 < 16
    row = {"submit": 0.0, "duration": 10.0, "gpus": 16, "milli": 1000, "cpu": 16_000, "mem": 16 * 65_536}
    placement, _ = _place(nodes, row)
    assert placement is None


def test_a_round_on_an_arrival_time_sees_the_arriving_jobs():
    """Rounds run after every event at their time: a job arriving exactly on a round starts in that round,
    even for a policy that does not decide on arrivals."""

    class EveryoneFirstFit(AllocationPolicy):
        name = "everyone-first-fit"
        decide_on_arrival = False
        decide_on_completion = False

        def allocate(self, view):
            plan = Plan(view)
            for job in view.pending_jobs().tolist():
                plan.place(job, placement)
            return plan.decision(view.running_jobs())

    placement = PLACEMENT_POLICIES.create("first-fit")
    spec = make_cluster([(4, "V100", 64_000, 262_144)])
    rows = [{"submit": 0.0, "duration": 50.0}, {"submit": 100.0, "duration": 50.0}, {"submit": 130.0}]
    jobs = make_jobs(rows)
    scheduler = RoundScheduler(EveryoneFirstFit(), round_s=100.0)
    placement.bind(spec, np.random.default_rng(0), np.arange(spec.num_nodes))
    out = Simulator(jobs, spec, scheduler, np.random.default_rng(0), check_invariants=True).run()
    # Jobs 0 and 1 arrive on rounds (t=0, t=100) and start there; job 2 waits for the round at t=200.
    assert out.start_s.tolist() == [0.0, 100.0, 200.0]
