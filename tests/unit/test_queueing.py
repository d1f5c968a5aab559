"""M/M/c sizing of inference services (perf/queueing.py, docs/cedla.md §2), against closed forms, a simulation
and a brute-force search."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattsched.perf.queueing import (
    erlang_c,
    gpus_needed,
    gpus_needed_per_rate,
    mean_response_s,
    meets_slo,
    response_quantile_s,
    response_tail,
)


def erlang_c_by_definition(c: int, a: float) -> float:
    top = a**c / math.factorial(c) / (1 - a / c)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


@pytest.mark.parametrize(("c", "a"), [(1, 0.5), (2, 1.5), (4, 3.2), (10, 7.0), (30, 25.0)])
def test_erlang_c_matches_its_definition(c, a):
    assert erlang_c(c, a) == pytest.approx(erlang_c_by_definition(c, a), rel=1e-10)


def test_one_server_is_the_m_m_1_queue():
    lam, mu = 3.0, 5.0
    assert erlang_c(1, lam / mu) == pytest.approx(lam / mu)
    assert mean_response_s(1, lam, mu) == pytest.approx(1 / (mu - lam))  # E[R] = 1 / (mu - lambda)
    # M/M/1 response time is exponential with rate mu - lambda
    assert response_quantile_s(1, lam, mu, 0.95) == pytest.approx(-math.log(0.05) / (mu - lam), rel=1e-9)


def test_unstable_queue_never_meets_an_slo():
    assert erlang_c(2, 2.0) == 1.0 and mean_response_s(2, 10.0, 5.0) == math.inf
    assert not meets_slo(2, 10.0, 5.0, 100.0, "mean")


def test_response_tail_against_a_simulated_queue():
    """A discrete-event M/M/3 queue (FCFS) agrees with the closed-form tail and mean."""
    rng = np.random.default_rng(0)
    c, lam, mu, n = 3, 2.4, 1.0, 200_000
    arrivals = np.cumsum(rng.exponential(1 / lam, n))
    service = rng.exponential(1 / mu, n)
    free = np.zeros(c)
    response = np.empty(n)
    for i in range(n):
        k = int(np.argmin(free))
        start = max(arrivals[i], free[k])
        free[k] = start + service[i]
        response[i] = free[k] - arrivals[i]
    response = response[n // 10 :]  # drop the warm-up
    assert response.mean() == pytest.approx(mean_response_s(c, lam, mu), rel=0.03)
    for t in (1.0, 3.0, 6.0):
        assert (response > t).mean() == pytest.approx(response_tail(c, lam, mu, t), abs=0.01)


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(0.01, 400.0),
    service_rate=st.floats(0.5, 50.0),
    slack=st.floats(1.05, 20.0),
    kind=st.sampled_from(["mean", "p95"]),
)
def test_gpus_needed_is_the_fewest_that_meet_the_slo(rate, service_rate, slack, kind):
    floor = (1.0 if kind == "mean" else -math.log(0.05)) / service_rate
    slo = floor * slack
    c = gpus_needed(rate, service_rate, slo, kind)
    assert meets_slo(c, rate, service_rate, slo, kind)
    assert c == 1 or not meets_slo(c - 1, rate, service_rate, slo, kind)
    assert c >= rate / service_rate  # at least the offered load


def test_more_traffic_never_needs_fewer_gpus_and_the_series_is_solved_per_distinct_rate():
    rates = np.array([0.0, 5.0, 20.0, 5.0, 80.0, 160.0])
    counts = gpus_needed_per_rate(rates, service_rate=10.0, slo_s=0.5, kind="p95")
    assert counts[0] == 0 and counts[1] == counts[3]
    order = np.argsort(rates, kind="stable")
    assert (np.diff(counts[order]) >= 0).all()


def test_an_slo_below_the_service_time_is_a_clear_error():
    with pytest.raises(ValueError, match="below the service time alone"):
        gpus_needed(5.0, service_rate=10.0, slo_s=0.05, kind="mean")
    with pytest.raises(ValueError, match="below the service time alone"):
        gpus_needed(5.0, service_rate=10.0, slo_s=0.25, kind="p95")  # p95 of Exp(10) alone is 0.30 s
