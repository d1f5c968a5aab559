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
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import InputError, WattschedError
from ..core.jobs import INFERENCE, JobTable
from ..perf.queueing import SLO_KINDS, gpus_needed_per_rate
from .reading import read_table, require_columns
from .validate import RowValidator

if TYPE_CHECKING:
    import pandas as pd

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
    import pandas as pd

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


@dataclass(frozen=True)
class ServiceSpec:
    """A service of the built-in set: its serving model (a performance-model table name), diurnal rate and SLO."""

    name: str
    model: str
    rate: DiurnalRate
    slo_s: float
    slo_kind: str = "p95"


# Reconstructed default services (docs/cedla.md §1.4): four models with measured P100 tables, rates chosen so that
# each peaks near 30 P100 GPUs (about 10 % of the 1,280-GPU philly cluster together), night floors at a fifth of
# the peak, p95 SLOs well above the per-request service time.
DEFAULT_SERVICES: tuple[ServiceSpec, ...] = (
    ServiceSpec("resnet50", "ResNet-50 (batch size 128)", DiurnalRate(3_000, 15_000, 14, 0.1), 0.050),
    ServiceSpec("transformer", "Transformer (batch size 128)", DiurnalRate(6_000, 30_000, 15, 0.1), 0.100),
    ServiceSpec("lm", "LM (batch size 80)", DiurnalRate(24_000, 120_000, 13, 0.1), 0.050),
    ServiceSpec("resnet18", "ResNet-18 (batch size 256)", DiurnalRate(30_000, 150_000, 16, 0.1), 0.020),
)


def build_services(
    source: str, hours: int, seed: int, start_hour: int = 0
) -> tuple[list[InferenceService], list[str]]:
    """The services of a run: ``default`` (the built-in set, seeded diurnal rates) or a rates CSV whose columns
    name services of the built-in set (their model and SLO; the CSV's rates replace the generator's)."""
    by_name = {s.name: s for s in DEFAULT_SERVICES}
    if source == "default":
        rates = {s.name: s.rate.series(hours, seed + k, start_hour) for k, s in enumerate(DEFAULT_SERVICES)}
        note = f"{len(rates)} built-in inference services, seeded diurnal rates (docs/cedla.md §1.4)"
    else:
        rates = read_rates_csv(source)
        unknown = [name for name in rates if name not in by_name]
        if unknown:
            raise InputError(
                Path(source), 1, unknown[0], f"not a known service; columns must be among {sorted(by_name)}"
            )
        short = [name for name, r in rates.items() if len(r) < hours]
        if short:
            raise InputError(
                Path(source), len(rates[short[0]]) + 1, short[0],
                f"the rates stop after {len(rates[short[0]])} hour(s); the run needs {hours}",
            )  # fmt: skip
        rates = {name: r[start_hour : start_hour + hours] for name, r in rates.items()}
        note = f"{len(rates)} inference services with rates from {source}"
    services = [
        InferenceService(name, by_name[name].model, r, by_name[name].slo_s, by_name[name].slo_kind)
        for name, r in rates.items()
    ]
    return services, [note]


def service_jobs(
    services: list[InferenceService], rate_per_gpu: dict[str, float], start_hour: int, source: str
) -> JobTable:
    """One job per service and hour: the GPUs the M/M/c queue needs that hour for 3,600 s, submitted at the hour's
    start, with the hour's GPU utilisation (lambda / (c mu)) and request rate. Job ids read ``<service>@h<hour>``."""
    ids, submit, gpus, util, rates, users = [], [], [], [], [], []
    for svc in services:
        if svc.model not in rate_per_gpu:
            raise WattschedError(
                f"service {svc.name} is served by {svc.model}, which the throughput tables do not have "
                f"(they have: {', '.join(sorted(rate_per_gpu)) or 'no model with a batch size'})"
            )
        mu = rate_per_gpu[svc.model]
        need = svc.gpus_per_hour(mu)
        hours = np.arange(start_hour, start_hour + len(need))
        ids += [f"{svc.name}@h{h}" for h in hours]
        submit.append(hours * 3600.0)
        gpus.append(need)
        util.append(np.where(need > 0, svc.rates_rps / (np.maximum(need, 1) * mu), 0.0))
        rates.append(svc.rates_rps)
        users += [svc.name] * len(need)
    n = len(ids)
    return JobTable.build(
        ids,
        np.concatenate(submit) if n else [],
        np.full(n, 3600.0),
        np.concatenate(gpus) if n else [],
        job_class=np.full(n, INFERENCE, dtype=np.int8),
        user=users,
        gpu_util=np.concatenate(util) if n else [],
        request_rate_rps=np.concatenate(rates) if n else [],
        source=source,
    )


def rates_per_gpu(gpu_model: str, data_dir=None) -> dict[str, float]:
    """Requests/s one GPU of `gpu_model` serves, per model of the Gavel tables (K80, P100 or V100 families)."""
    from ..perf.tables import GAVEL_WORKERS, gavel_tables

    worker = next((w for w in GAVEL_WORKERS if gpu_model.lower().startswith(w)), None)
    if worker is None:
        raise WattschedError(
            f"inference services are sized from Gavel's throughput tables, which cover "
            f"{', '.join(w.upper() for w in GAVEL_WORKERS)}; the cluster's GPUs are {gpu_model}"
        )
    table = service_rate_table(gavel_tables(worker, data_dir))
    return dict(zip(table["model"], table["serve_requests_per_s"], strict=True))


def with_services(jobs: JobTable, source: str, gpu_model: str, seed: int, data_dir=None) -> JobTable:
    """The training jobs plus one job per service and hour over the hours their submissions span."""
    first = int(np.floor(jobs.submit_s.min() / 3600.0)) if len(jobs) else 0
    last = int(np.ceil(jobs.submit_s.max() / 3600.0)) + 1 if len(jobs) else 24
    services, notes = build_services(source, last - first, seed, first)
    chunks = service_jobs(services, rates_per_gpu(gpu_model, data_dir), first, source)
    chunks = chunks.subset(np.flatnonzero(chunks.num_gpu > 0))  # an hour without requests needs no job
    notes.append(
        f"{len(chunks)} service-hour jobs ({int(chunks.num_gpu.sum())} GPU-hours) sized by M/M/c on {gpu_model}"
    )
    return JobTable.concat([jobs, chunks], source=jobs.source, notes=[*jobs.notes, *notes])
