"""CE-DLA's look at the jobs that arrived between two plans: the short paths for a few arrivals and for one job
answer what the binary search and the array arithmetic answer."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import make_cluster, make_jobs
from wattsched.core.states import STATUS_FUTURE, STATUS_PENDING, STATUS_RUNNING
from wattsched.energy.utilisation import job_gpu_load
from wattsched.perf.model import PerformanceModel
from wattsched.policies.allocation.cedla import CeDla
from wattsched.policies.contract import BindContext


def _bound(submits: list[float], gpus: list[int]) -> CeDla:
    jobs = make_jobs(
        [{"submit": s, "duration": 600.0, "gpus": g} for s, g in zip(submits, gpus, strict=True)]
    )
    spec = make_cluster([(4, "V100", 64_000, 262_144)] * 2)
    policy = CeDla()
    perf = PerformanceModel(jobs, spec, job_gpu_load(jobs))
    policy.bind(BindContext(spec, jobs, np.random.default_rng(0), np.arange(spec.num_nodes), perf))
    return policy


@settings(max_examples=60, deadline=None)
@given(
    # Few distinct times, so that many jobs arrive at one instant (more than the count done in plain Python).
    st.lists(st.integers(0, 5), min_size=1, max_size=40),
    st.lists(st.integers(0, 6), min_size=1, max_size=8),
    st.data(),
)
def test_arrivals_are_those_the_binary_search_finds(times, looks, data):
    submits = [60.0 * t for t in times]
    policy = _bound(submits, [1] * len(submits))
    status = np.full(len(submits), STATUS_FUTURE, dtype=np.int8)
    arrived = 0  # the reference: every job submitted by now, by one search, less those no longer waiting
    for look in sorted(looks):
        now = 60.0 * look
        status[np.asarray(submits) <= now] = STATUS_PENDING
        started = data.draw(st.lists(st.integers(0, len(submits) - 1), max_size=3))
        status[started] = STATUS_RUNNING  # jobs started before this look are not arrivals to decide on
        end = int(np.searchsorted(policy._submit_sorted, now, side="right"))
        new = policy._by_submit[arrived:end]
        expected = new[status[new] == STATUS_PENDING]
        arrived = end
        got = policy._arrivals(SimpleNamespace(now=now, status=status))
        np.testing.assert_array_equal(got, expected)
        assert policy._arrived == end


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 8), st.one_of(st.just(0.0), st.floats(1.0, 5000.0))), min_size=2, max_size=12
    )
)
def test_one_jobs_gpu_hours_left_are_its_entry_of_all_of_them(rows):
    gpus = [g for g, _ in rows]
    remaining = np.array([r for _, r in rows])
    view = SimpleNamespace(remaining_work=lambda jobs: remaining[np.asarray(jobs, dtype=np.int64)])
    every = np.arange(len(rows))
    alone = [
        _bound([0.0] * len(rows), gpus)._gpu_hours_left(view, every[k : k + 1]) for k in range(len(rows))
    ]
    together = _bound([0.0] * len(rows), gpus)._gpu_hours_left(view, every)
    assert all(a.shape == (1,) for a in alone)
    np.testing.assert_array_equal(np.concatenate(alone), together)  # bit for bit
    assert (together > 0).sum() == (remaining > 0).sum()
