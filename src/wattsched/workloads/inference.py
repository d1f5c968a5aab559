"""Inference services for CE-DLA: a model, the GPU types that may serve it, an hourly request-rate series and a
latency SLO (docs/cedla.md §1).

Rates come from a CSV (``hour, <service>...``: requests/s per hour, one column per service) or from the seeded
diurnal generator, ``rate(h) = base + (peak - base) * (1 + cos(2 pi (h - peak_hour) / 24)) / 2``, times
log-normal noise ``exp(sigma z - sigma^2 / 2)`` (mean 1), with z ~ N(0, 1) drawn per hour from the seed.

Per-GPU service rates (requests/s) are **reconstructed**: no public inference measurement ships with the data.
A request is one sample's forward pass; the forward pass is taken as a third of a training step's compute
(forward + backward ~ 3x forward, the usual rule of thumb), so a GPU serves ``3 x`` the samples per second it
trains on at its measured per-GPU throughput (docs/cedla.md §1.2). ``service_rate_table`` derives them from the
performance model's tables, so every (model, GPU type) with a training table has a serving rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import InputError
from ..perf.queueing import SLO_KINDS, gpus_needed_per_rate
from .traces import read_table, require_columns
from .validate import RowValidator

FORWARD_SHARE_OF_TRAINING_STEP = 1.0 / 3.0  # reconstructed (module docstring)


@dataclass(frozen=True)
class DiurnalRate:
    """The default request-rate shape: a daily cosine between `base_rps` and `peak_rps` with log-normal noise."""

    base_rps: float = 20.0
    peak_rps: float = 100.0
    peak_hour: float = 14.0  # local afternoon peak
    noise_sigma: float = 0.1

    def series(self, hours: int, seed: int, start_hour: int = 0) -> np.ndarray:
        if hours < 0:
            raise ValueError(f"hours must be non-negative, got {hours}")
        h = np.arange(start_hour, start_hour + hours, dtype=np.float64)
        shape = (1.0 + np.cos(2.0 * math.pi * (h - self.peak_hour) / 24.0)) / 2.0
        rates = self.base_rps + (self.peak_rps - self.base_rps) * shape
        z = np.random.default_rng(seed).standard_normal(hours)
        sigma = self.noise_sigma
        return rates * np.exp(sigma * z - sigma * sigma / 2.0)


@dataclass
class InferenceService:
    """One service: requests/s per hour of the run, served on any of `gpu_types` within the SLO."""

    name: str
    model: str
    rates_rps: np.ndarray
    slo_s: float
    slo_kind: str = "p95"
    gpu_types: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.slo_kind not in SLO_KINDS:
            raise ValueError(f"service {self.name}: SLO kind {self.slo_kind!r} is not one of {SLO_KINDS}")
        if not self.slo_s > 0:
            raise ValueError(f"service {self.name}: the SLO must be a positive number of seconds")
        self.rates_rps = np.asarray(self.rates_rps, dtype=np.float64)

    def gpus_per_hour(self, service_rate_rps: float) -> np.ndarray:
        """GPUs needed in each hour on a GPU type serving `service_rate_rps` requests/s per GPU (M/M/c)."""
        try:
            return gpus_needed_per_rate(self.rates_rps, service_rate_rps, self.slo_s, self.slo_kind)
        except ValueError as exc:
            raise ValueError(f"service {self.name} ({self.model}): {exc}") from None


def read_rates_csv(path: str | Path) -> dict[str, np.ndarray]:
    """``hour, <service>, ...``: hours 0, 1, 2, ... in order; each other column one service's requests/s. Errors
    name the file, line and column."""
    path = Path(path)
    df, lines = read_table(path)
    require_columns(df, path, ("hour",))
    services = [c for c in df.columns if c != "hour"]
    if not services:
        raise InputError(
            path, 1, None, "no service column next to 'hour' (one column of requests/s per service)"
        )
    v = RowValidator(path, lines)
    hour = v.number(df["hour"], "hour", integer=True)
    out_of_order = ~np.isnan(hour) & (hour != np.arange(len(hour)))
    v.flag(out_of_order, "hour", "expected hours 0, 1, 2, ... in order; got {value}", df["hour"].to_numpy())
    out = {}
    for name in services:
        rates = v.number(df[name], name)
        negative = ~np.isnan(rates) & ((rates < 0) | ~np.isfinite(rates))
        v.flag(negative, name, "requests/s must be finite and >= 0: {value}", df[name].to_numpy())
        out[str(name)] = rates
    v.finish(skip_invalid=False)
    return out


def service_rate_rps(samples_per_s_per_gpu: float) -> float:
    """Requests/s one GPU serves from the samples/s it trains on (reconstructed: forward = 1/3 of a step)."""
    return samples_per_s_per_gpu / FORWARD_SHARE_OF_TRAINING_STEP


def service_rate_table(tables: dict) -> pd.DataFrame:
    """Per model of a performance model's tables (``{name: ScalingTable}``): training samples/s per GPU on one GPU
    at the table's first batch size, and the derived serving rate (models without a batch size are left out)."""
    rows = []
    for name, table in sorted(tables.items()):
        batch = float(table.batch_sizes[0])
        iters = table.throughput(1, batch) if batch > 0 else 0.0
        if not iters > 0:
            continue
        samples = iters * batch
        rows.append({"model": name, "batch": batch, "train_samples_per_s": samples,
                     "serve_requests_per_s": service_rate_rps(samples)})  # fmt: skip
    return pd.DataFrame(rows)
