"""EaCO's shortcuts (issue 30: its decisions cost what changed) give what the direct reads give: the CPU and memory
fit of a GPU set without building its placement, and the GPU sets kept from the job journal."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import EACO_GAVEL_MODELS as MODELS
from tests.conftest import make_cluster
from tests.unit.test_eaco import _jobs, _run
from wattsched.core.cluster import ClusterState
from wattsched.core.placement import NodeShare
from wattsched.core.requests import JobRequest
from wattsched.policies.allocation.eaco import EaCO, _cpu_memory_free
from wattsched.policies.planning import JournalCache, Plan, on_same_gpus

NODES = 4


@st.composite
def _cases(draw):
    spec = make_cluster([(8, "V100", 64_000, 786_432)] * NODES)
    state = ClusterState(spec)
    state.cpu_left[:] = draw(st.lists(st.integers(0, 64_000), min_size=NODES, max_size=NODES))
    state.mem_left[:] = draw(st.lists(st.integers(0, 786_432), min_size=NODES, max_size=NODES))
    state.available[:] = draw(st.lists(st.booleans(), min_size=NODES, max_size=NODES))
    nodes = draw(st.lists(st.integers(0, NODES - 1), min_size=1, max_size=3, unique=True))
    key = tuple(
        (node, tuple(sorted(draw(st.sets(st.integers(0, 7), min_size=1, max_size=8))))) for node in nodes
    )
    req = JobRequest(
        index=0,
        num_gpu=sum(len(g) for _, g in key),
        gpu_milli=1000,
        cpu_milli=draw(st.integers(0, 96_000)),
        memory_mib=draw(st.integers(0, 1_000_000)),
        node_mask=np.ones(NODES, dtype=bool),
        gang=len(key) > 1,
    )
    return state, req, key


@settings(max_examples=300, deadline=None)
@given(_cases())
def test_cpu_and_memory_fit_of_a_gpu_set_is_that_of_its_placement(case):
    state, req, key = case
    placement = tuple(NodeShare(node, gpus, 0, 0) for node, gpus in key)
    own = on_same_gpus(SimpleNamespace(request=lambda job: req), 0, placement)
    expected = Plan.is_free(
        SimpleNamespace(state=state), own, 0
    )  # share 0: only CPU, memory and availability
    assert _cpu_memory_free(state, req, key) == expected
    if len(key) == 1:  # the per-node shortcut of `_allocate_one`: one node holds the whole request
        node = key[0][0]
        whole = state.available & (state.cpu_left >= req.cpu_milli) & (state.mem_left >= req.memory_mib)
        assert bool(whole[node]) == expected


class _Forgetful(JournalCache):
    """A cache that keeps nothing between decisions."""

    def fresh(self, view):
        self.clear()
        return self


class _FreshReads(EaCO):
    """EaCO reading every running job's GPUs from the view at each decision (no journal)."""

    def bind(self, ctx):
        super().bind(ctx)
        self._held = _Forgetful()


def test_gpu_sets_kept_from_the_job_journal_are_what_fresh_reads_give(gavel_dir):
    # Large noise: co-locations are undone and their jobs requeued, so sets form, shrink and move; CPU requests
    # that fill nodes before their GPUs make the CPU check decide too.
    rng = np.random.default_rng(7)
    n = 30
    models = list(rng.choice(list(MODELS), size=n))
    submit = np.sort(rng.uniform(0, 3 * 3600, n))
    jobs = _jobs(
        models, submit, list(rng.choice([1, 2, 4, 8], size=n)), 4 * 3600.0, submit + 4 * 3600.0 * 1.3
    )
    jobs = replace(jobs, cpu_milli=rng.choice([4_000, 16_000, 40_000], size=n).astype(jobs.cpu_milli.dtype))
    runs = [_run(jobs, 4, gavel_dir, noise=0.5, seed=11, policy=cls()) for cls in (EaCO, _FreshReads)]
    (_, kept, kept_policy), (_, fresh, fresh_policy) = runs
    assert kept_policy.undone > 0 and kept_policy.colocations > 0
    assert kept.placements == fresh.placements
    np.testing.assert_array_equal(kept.start_s, fresh.start_s)
    np.testing.assert_array_equal(kept.end_s, fresh.end_s)
    assert kept_policy.parameters() == fresh_policy.parameters()
