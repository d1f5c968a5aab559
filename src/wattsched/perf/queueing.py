"""How many GPUs an inference service needs for a request rate and a latency SLO: the M/M/c queue
(docs/cedla.md §2).

A service with per-GPU service rate mu (requests/s) and Poisson arrivals at rate lam runs on c GPUs, each serving
one request at a time with exponential service times. With offered load a = lam / mu and utilisation
rho = a / c < 1:

* Erlang C, the probability that a request waits: ``C(c, a) = (a^c / c!) / ((1 - rho) * sum_{k<c} a^k / k! +
  a^c / c!)``, computed by the stable Erlang-B recursion ``B(0) = 1, B(k) = a B(k-1) / (k + a B(k-1))`` and
  ``C = B / (1 - rho (1 - B))``;
* the waiting time W is 0 with probability 1 - C, else exponential with rate ``theta = c mu - lam``;
* the response time R = W + S adds an exponential service time S (rate mu): ``E[R] = C / theta + 1 / mu`` and
  ``P(R > t) = (1 - C) e^(-mu t) + C (mu e^(-theta t) - theta e^(-mu t)) / (mu - theta)`` (theta != mu; the
  limit ``(1 + mu t) e^(-mu t)`` when they are equal).

The SLO is on the mean or on the 95th percentile of R. ``gpus_needed`` is the smallest c that meets it; it is
precomputed per rate so that an optimisation over hours stays linear in the GPU counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

SLO_KINDS = ("mean", "p95")


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arriving request waits (1 when the queue is unstable: offered >= servers)."""
    if servers < 1:
        raise ValueError(f"servers must be at least 1, got {servers}")
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    rho = offered / servers
    return b / (1.0 - rho * (1.0 - b))


def mean_response_s(servers: int, rate: float, service_rate: float) -> float:
    """E[R] in seconds (inf when unstable)."""
    theta = servers * service_rate - rate
    if theta <= 0:
        return math.inf
    return erlang_c(servers, rate / service_rate) / theta + 1.0 / service_rate


def response_tail(servers: int, rate: float, service_rate: float, t: float) -> float:
    """P(R > t)."""
    theta = servers * service_rate - rate
    if theta <= 0:
        return 1.0
    c = erlang_c(servers, rate / service_rate)
    mu = service_rate
    no_wait = (1.0 - c) * math.exp(-mu * t)
    if abs(mu - theta) < 1e-12 * mu:
        both = (1.0 + mu * t) * math.exp(-mu * t)
    else:
        both = (mu * math.exp(-theta * t) - theta * math.exp(-mu * t)) / (mu - theta)
    return no_wait + c * both


def response_quantile_s(servers: int, rate: float, service_rate: float, q: float = 0.95) -> float:
    """The q-quantile of R in seconds (inf when unstable), by bisection on the tail."""
    if servers * service_rate - rate <= 0:
        return math.inf
    lo, hi = 0.0, 1.0 / service_rate
    while response_tail(servers, rate, service_rate, hi) > 1.0 - q:
        hi *= 2.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if response_tail(servers, rate, service_rate, mid) > 1.0 - q:
            lo = mid
        else:
            hi = mid
    return hi


def meets_slo(servers: int, rate: float, service_rate: float, slo_s: float, kind: str = "p95") -> bool:
    if kind == "mean":
        return mean_response_s(servers, rate, service_rate) <= slo_s
    if kind == "p95":
        return response_tail(servers, rate, service_rate, slo_s) <= 0.05
    raise ValueError(f"unknown SLO kind {kind!r}: one of {', '.join(SLO_KINDS)}")


def gpus_needed(
    rate: float, service_rate: float, slo_s: float, kind: str = "p95", limit: int = 100_000
) -> int:
    """The fewest GPUs that serve `rate` requests/s within the SLO (0 for no traffic). Raises ValueError when the
    SLO is at or below what one request alone takes at that percentile (no number of GPUs meets it)."""
    if rate <= 0:
        return 0
    if not (service_rate > 0 and slo_s > 0):
        raise ValueError("service rate and SLO must be positive")
    floor = 1.0 / service_rate if kind == "mean" else -math.log(0.05) / service_rate
    if slo_s <= floor * (1.0 + 1e-9):  # the queue adds to the service time, so the bound is never reached
        raise ValueError(
            f"an SLO of {slo_s:g} s is below the service time alone ({kind} {floor:.4g} s at "
            f"{service_rate:g} requests/s per GPU): no number of GPUs meets it"
        )
    c = max(1, math.floor(rate / service_rate) + 1)  # the least stable count
    while not meets_slo(c, rate, service_rate, slo_s, kind):
        c += 1
        if c > limit:
            raise ValueError(f"more than {limit} GPUs needed for {rate:g} requests/s")
    return c


def gpus_needed_per_rate(
    rates: Sequence[float] | np.ndarray, service_rate: float, slo_s: float, kind: str = "p95"
) -> np.ndarray:
    """`gpus_needed` for every rate of an hourly series (each distinct rate solved once)."""
    values = np.asarray(rates, dtype=np.float64)
    distinct, inverse = np.unique(values, return_inverse=True)
    counts = np.array([gpus_needed(float(r), service_rate, slo_s, kind) for r in distinct], dtype=np.int64)
    return counts[inverse].reshape(values.shape)
