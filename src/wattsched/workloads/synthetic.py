"""Seeded synthetic workloads and the built-in default cluster (no external data needed).

The generator draws arrivals (Poisson, or diurnally modulated Poisson for bursty load), GPU counts from a mix,
shared-GPU pods for part of the 1-GPU jobs, log-normal durations and a training/inference split. Everything is
vectorised, so 10^6 jobs take about a second.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..core.cluster import ClusterSpec
from ..core.jobs import INFERENCE, TRAINING, JobTable

DEFAULT_MODELS = ("resnet50", "bert", "gpt2", "vgg16", "deepspeech2", "inception3", "yolov3", "ncf")


class SyntheticConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_jobs: int = Field(
        2000, ge=1, description="synthetic workload: number of jobs", json_schema_extra={"cli": "--jobs"}
    )
    arrival: Literal["poisson", "bursty"] = Field(
        "poisson", description="synthetic workload: poisson | bursty"
    )
    mean_interarrival_s: float = Field(120.0, gt=0)
    burst_amplitude: float = Field(0.9, ge=0, lt=1, description="bursty: relative diurnal swing of the rate")
    burst_period_s: float = Field(86400.0, gt=0)
    gpu_count_mix: dict[int, float] = Field(
        default_factory=lambda: {1: 0.70, 2: 0.10, 4: 0.10, 8: 0.08, 16: 0.02},
        description="GPU count -> probability (normalised)",
    )
    share_fraction: float = Field(0.3, ge=0, le=1, description="fraction of 1-GPU jobs that share a GPU")
    share_milli: list[int] = Field(default_factory=lambda: [100, 250, 500, 750])
    duration_median_s: float = Field(1800.0, gt=0)
    duration_sigma: float = Field(1.5, ge=0, description="log-normal shape")
    duration_min_s: float = Field(60.0, gt=0)
    duration_max_s: float = Field(7 * 86400.0, gt=0)
    inference_fraction: float = Field(0.2, ge=0, le=1)
    cpu_milli_per_gpu: int = Field(8000, ge=0)
    memory_mib_per_gpu: int = Field(32768, ge=0)
    cpu_only_cpu_milli: int = Field(4000, ge=0)
    models: list[str] = Field(default_factory=lambda: list(DEFAULT_MODELS))

    @field_validator("gpu_count_mix")
    @classmethod
    def _mix_positive(cls, v: dict[int, float]) -> dict[int, float]:
        if not v or any(p < 0 for p in v.values()) or sum(v.values()) <= 0 or any(k < 0 for k in v):
            raise ValueError("gpu_count_mix needs non-negative counts and probabilities with a positive sum")
        return v

    @field_validator("share_milli")
    @classmethod
    def _milli_range(cls, v: list[int]) -> list[int]:
        if not v or any(not 1 <= m <= 999 for m in v):
            raise ValueError("share_milli values must lie in 1..999")
        return v


def _arrivals(cfg: SyntheticConfig, rng: np.random.Generator) -> np.ndarray:
    n = cfg.num_jobs
    if cfg.arrival == "poisson":
        gaps = rng.exponential(cfg.mean_interarrival_s, size=n)
        gaps[0] = 0.0
        return np.cumsum(gaps)
    # Bursty: thinning of a Poisson process at the peak rate by rate(t)/peak.
    peak = (1.0 + cfg.burst_amplitude) / cfg.mean_interarrival_s
    out: list[np.ndarray] = []
    have, t0 = 0, 0.0
    while have < n:
        k = int((n - have) * (1.0 + cfg.burst_amplitude) * 1.2) + 64
        times = t0 + np.cumsum(rng.exponential(1.0 / peak, size=k))
        rate = (
            1.0 + cfg.burst_amplitude * np.sin(2 * np.pi * times / cfg.burst_period_s)
        ) / cfg.mean_interarrival_s
        keep = times[rng.random(k) < rate / peak]
        out.append(keep)
        have += keep.size
        t0 = float(times[-1])
    arr = np.concatenate(out)[:n]
    return arr - arr[0]


def generate(cfg: SyntheticConfig, seed: int) -> JobTable:
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
    n = cfg.num_jobs
    submit = _arrivals(cfg, rng)
    counts = np.array(sorted(cfg.gpu_count_mix), dtype=np.int64)
    probs = np.array([cfg.gpu_count_mix[c] for c in counts], dtype=np.float64)
    num_gpu = rng.choice(counts, size=n, p=probs / probs.sum())
    milli = np.where(num_gpu > 0, 1000, 0).astype(np.int64)
    shared = (num_gpu == 1) & (rng.random(n) < cfg.share_fraction)
    milli[shared] = rng.choice(np.array(cfg.share_milli, dtype=np.int64), size=int(shared.sum()))
    duration = np.exp(rng.normal(np.log(cfg.duration_median_s), cfg.duration_sigma, size=n))
    duration = np.clip(np.round(duration), cfg.duration_min_s, cfg.duration_max_s)
    job_class = np.where(rng.random(n) < cfg.inference_fraction, INFERENCE, TRAINING).astype(np.int8)
    gpus_equiv = num_gpu * milli / 1000.0
    cpu = np.where(num_gpu > 0, np.ceil(gpus_equiv * cfg.cpu_milli_per_gpu), cfg.cpu_only_cpu_milli)
    mem = np.ceil(np.maximum(gpus_equiv, 0.25) * cfg.memory_mib_per_gpu)
    models = np.array(cfg.models, dtype=object)[rng.integers(len(cfg.models), size=n)]
    ids = np.char.add("syn-", np.char.zfill(np.arange(n).astype(str), 7)).astype(object)
    return JobTable.build(
        job_id=ids,
        submit_s=submit,
        duration_s=duration,
        num_gpu=num_gpu,
        gpu_milli=milli,
        cpu_milli=cpu.astype(np.int64),
        memory_mib=mem.astype(np.int64),
        job_class=job_class,
        model_name=models,
        # One string object per user, not per job (10^6 jobs).
        user=np.array([f"user-{u}" for u in range(8)], dtype=object)[rng.integers(8, size=n)],
        source=f"synthetic(seed={seed})",
    )


def default_cluster(nodes: int = 16, gpus_per_node: int = 8, gpu_model: str = "A100") -> ClusterSpec:
    """The built-in cluster: 16 nodes x 8 A100, 128 vCPU and 1 TiB each, 4 nodes per switch."""
    return ClusterSpec.from_arrays(
        name="default",
        node_names=[f"node-{i:04d}" for i in range(nodes)],
        cpu_milli=[128_000] * nodes,
        memory_mib=[1_048_576] * nodes,
        gpu_count=[gpus_per_node] * nodes,
        gpu_model_names=[gpu_model] * nodes,
        switch_id=[i // 4 for i in range(nodes)],
        notes="built-in default cluster (no external data)",
    )
