"""Per-iteration DAG training jobs for the HKBU communication-contention scheduler (docs/hkbu-dag.md §2).

Source: S. Wang, S. Shi, C. Wang, X. Chu, "Communication contention aware scheduling of multiple deep learning
training jobs" (ICDCS 2020), simulator `HKBU-HPML/dl-scheduling` (no licence: described and reimplemented here,
nothing copied). A job is `nworkers` workers, each running forward then backward on its own GPU for every one of
`iters` iterations, followed by one all-reduce of `model_size` MB (upstream `online/job.py`, class `dag_job`).

Facts from `online/job_master.py` (commit d5398bd, the last version with the GPU-pick names):

* time is in ms, sizes in MB (`CLUSTER` comment "unit is MB"; `print_stat` reports JCT "ms");
* the four job profiles of `TEMPLATES` (`SUPPORT_NETS`): model size, forward and backward time per iteration, and
  the GPU memory one worker takes (`train_mem`), below in :data:`PROFILES`;
* ``microsoft_generate`` (a Philly-like mix): of every 80 jobs, 40 take 1 GPU, 7 take 2, 13 take 4, 15 take 8,
  4 take 16 and 1 takes 32 (`job_dist = [40, 47, 60, 75, 79, 80]`); the network is drawn uniformly from the four
  profiles; iterations uniform in [1·scale, 6·scale]; arrival ⌊uniform(0, 1200·scale)⌋ ms, with scale = 10;
* ``random_generate``: 2^randint(0, 4) workers, randint(1, 5) iterations, arrival randint(0, jobs/4) ms.

Reconstructed: upstream computes ``step = num_jobs / 80`` in Python 2 integer division, so a job count that is not a
multiple of 80 loses jobs; here the class boundaries are rounded from the same shares so that exactly `num_jobs`
jobs come out (identical for multiples of 80, e.g. the upstream set `microsoft-160`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import UnknownNameError, WattschedError


@dataclass(frozen=True)
class ModelProfile:
    """One network as the upstream simulator models it (`online/job_master.py` `TEMPLATES`)."""

    name: str
    model_size_mb: float  # gradient volume all-reduced each iteration
    fw_ms: float
    bw_ms: float
    train_mem_mb: float  # GPU memory one worker holds
    batch_size: int


PROFILES: dict[str, ModelProfile] = {
    p.name: p
    for p in (
        ModelProfile("vgg16", 526.4, 36.0, 54.0, 4527.0, 16),
        ModelProfile("resnet50", 99.2, 25.0, 37.0, 3213.0, 16),
        ModelProfile("inception-v3", 103.0, 35.0, 52.0, 3291.0, 16),
        ModelProfile("lstm", 251.8, 32.0, 47.0, 2751.0, 64),
    )
}
# Workers per job in `microsoft_generate`, and the cumulative class boundaries out of every 80 jobs.
MICROSOFT_WORKERS = (1, 2, 4, 8, 16, 32)
MICROSOFT_BOUNDS_OF_80 = (40, 47, 60, 75, 79, 80)
MICROSOFT_SCALE = 10  # `scale` in the last upstream version (iterations 10..60, arrivals within 12 s)
MICROSOFT_MIN_ITERS, MICROSOFT_MAX_ITERS = 1, 6  # times scale
MICROSOFT_ARRIVAL_MS = 1200.0  # times scale (`ARRIVAL_MAX`)
UPSTREAM_JOBS = 160  # the upstream job set `microsoft-160`
GENERATORS = ("microsoft", "random")


@dataclass(frozen=True)
class DagJobs:
    """A set of DAG jobs as parallel arrays (index = job)."""

    arrival_ms: np.ndarray
    nworkers: np.ndarray
    iters: np.ndarray
    model: np.ndarray  # network name per job (object array)
    model_size_mb: np.ndarray
    fw_ms: np.ndarray
    bw_ms: np.ndarray
    train_mem_mb: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.arrival_ms)
        for name in ("nworkers", "iters", "model", "model_size_mb", "fw_ms", "bw_ms", "train_mem_mb"):
            if len(getattr(self, name)) != n:
                raise WattschedError(
                    f"DAG jobs: column '{name}' has {len(getattr(self, name))} rows, not {n}"
                )
        if n and (np.min(self.nworkers) < 1 or np.min(self.iters) < 1):
            raise WattschedError("DAG jobs need at least one worker and one iteration each")
        if n and (np.min(self.fw_ms) < 0 or np.min(self.bw_ms) < 0 or np.min(self.model_size_mb) < 0):
            raise WattschedError("DAG jobs: forward/backward times and model sizes must be non-negative")
        if n and np.min(self.arrival_ms) < 0:
            raise WattschedError("DAG jobs: arrival times must be non-negative")

    def __len__(self) -> int:
        return len(self.arrival_ms)

    @property
    def compute_ms(self) -> np.ndarray:
        """One worker's compute time over the whole job (upstream `compute_duration`)."""
        return (self.fw_ms + self.bw_ms) * self.iters

    @property
    def service_ms(self) -> np.ndarray:
        """GPU time over all workers (upstream `gpu_compute_cumul_duration`), the service SRSF counts down."""
        return self.compute_ms * self.nworkers

    @classmethod
    def build(cls, arrival_ms, nworkers, iters, models) -> DagJobs:
        """Jobs from per-job arrival, workers, iterations and a network name from :data:`PROFILES`."""
        names = [str(m) for m in models]
        for m in names:
            if m not in PROFILES:
                raise UnknownNameError("DAG model profile", m, PROFILES)
        prof = [PROFILES[m] for m in names]
        return cls(
            arrival_ms=np.asarray(arrival_ms, dtype=np.float64),
            nworkers=np.asarray(nworkers, dtype=np.int64),
            iters=np.asarray(iters, dtype=np.int64),
            model=np.asarray(names, dtype=object),
            model_size_mb=np.array([p.model_size_mb for p in prof], dtype=np.float64),
            fw_ms=np.array([p.fw_ms for p in prof], dtype=np.float64),
            bw_ms=np.array([p.bw_ms for p in prof], dtype=np.float64),
            train_mem_mb=np.array([p.train_mem_mb for p in prof], dtype=np.float64),
        )

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(
            {
                "arrival_ms": self.arrival_ms,
                "nworkers": self.nworkers,
                "iters": self.iters,
                "model": self.model,
                "model_size_mb": self.model_size_mb,
                "fw_ms": self.fw_ms,
                "bw_ms": self.bw_ms,
                "train_mem_mb": self.train_mem_mb,
            }
        )


def microsoft_generate(
    num_jobs: int = UPSTREAM_JOBS, seed: int = 0, scale: int = MICROSOFT_SCALE, max_workers: int | None = None
) -> DagJobs:
    """The upstream Philly-like job mix (module docstring); `max_workers` drops classes larger than a cluster."""
    if num_jobs < 1:
        raise WattschedError(f"the job count must be at least 1, got {num_jobs}")
    if scale < 1:
        raise WattschedError(f"the scale must be at least 1, got {scale}")
    rng = np.random.default_rng(seed)
    bounds = np.rint(np.asarray(MICROSOFT_BOUNDS_OF_80, dtype=np.float64) * num_jobs / 80).astype(np.int64)
    counts = np.diff(np.concatenate([[0], bounds]))
    workers = np.repeat(np.asarray(MICROSOFT_WORKERS, dtype=np.int64), counts)
    if max_workers is not None:
        if max_workers < 1:
            raise WattschedError(f"max_workers must be at least 1, got {max_workers}")
        workers = np.minimum(workers, max_workers)
    names = np.asarray(list(PROFILES), dtype=object)
    models = names[rng.integers(0, len(names), size=num_jobs)]
    iters = rng.integers(MICROSOFT_MIN_ITERS * scale, MICROSOFT_MAX_ITERS * scale + 1, size=num_jobs)
    arrival = np.floor(rng.uniform(0.0, MICROSOFT_ARRIVAL_MS * scale, size=num_jobs))
    return DagJobs.build(arrival, workers, iters, models)


def random_generate(num_jobs: int = UPSTREAM_JOBS, seed: int = 0) -> DagJobs:
    """Upstream ``random_generate``: 1-16 workers (powers of two), 1-5 iterations, arrivals in [0, jobs/4] ms."""
    if num_jobs < 1:
        raise WattschedError(f"the job count must be at least 1, got {num_jobs}")
    rng = np.random.default_rng(seed)
    names = np.asarray(list(PROFILES), dtype=object)
    models = names[rng.integers(0, len(names), size=num_jobs)]
    workers = 2 ** rng.integers(0, 5, size=num_jobs)
    iters = rng.integers(1, 6, size=num_jobs)
    arrival = rng.integers(0, num_jobs // 4 + 1, size=num_jobs).astype(np.float64)
    return DagJobs.build(arrival, workers, iters, models)


def generate(
    name: str, num_jobs: int = UPSTREAM_JOBS, seed: int = 0, max_workers: int | None = None
) -> DagJobs:
    """A job set by generator name: `microsoft` or `random`."""
    if name == "microsoft":
        return microsoft_generate(num_jobs, seed, max_workers=max_workers)
    if name == "random":
        jobs = random_generate(num_jobs, seed)
        if max_workers is not None:
            jobs = DagJobs.build(
                jobs.arrival_ms, np.minimum(jobs.nworkers, max_workers), jobs.iters, jobs.model
            )
        return jobs
    raise UnknownNameError("DAG job generator", name, GENERATORS)
