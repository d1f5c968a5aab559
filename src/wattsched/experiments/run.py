"""Run one simulation from a resolved config: load inputs, run the engine, assemble and write the outputs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import __version__
from ..core.cluster import MILLI, ClusterSpec
from ..core.errors import WattschedError
from ..core.jobs import JOB_CLASSES, JobTable
from ..core.states import STATUS_DONE, STATUS_DROPPED, STATUS_NAMES, STATUS_UNSCHEDULABLE
from ..engine.packing import run_packing
from ..engine.recorder import TimeSeriesRecorder
from ..engine.temporal import Simulator
from ..policies import PLACEMENT_POLICIES, QUEUE_POLICIES
from ..policies.adapters import QueuePlacementScheduler, policy_info
from .config import SimulationConfig
from .energy_setup import build_energy
from .outputs import placement_strings, stats, write_run_dir

ProgressFn = Callable[[int, int], None]


@dataclass
class Inputs:
    jobs: JobTable
    cluster: ClusterSpec
    invalid_skipped: int
    invalid_examples: list[str]
    has_times: bool
    notes: list[str]
    time_origin_utc: datetime | None = None


@dataclass
class RunResult:
    config: SimulationConfig
    summary: dict[str, Any]
    jobs: pd.DataFrame
    series: pd.DataFrame
    out_dir: Path | None


def load_inputs(cfg: SimulationConfig) -> Inputs:
    from ..workloads.catalog import load_workload
    from ..workloads.clusters import load_cluster
    from ..workloads.synthetic import generate
    from ..workloads.validate import check_against_cluster

    cluster = load_cluster(cfg.cluster, cfg.data_dir)
    origin = None
    if cfg.workload == "synthetic":
        jobs, skipped, examples, has_times, path = generate(cfg.synthetic, cfg.seed), 0, [], True, "synthetic"
    else:
        loaded = load_workload(cfg.workload, cfg.data_dir, cfg.skip_invalid)
        jobs, skipped, examples = loaded.jobs, loaded.invalid_skipped, list(loaded.invalid_examples)
        has_times, path = loaded.has_times, loaded.path
        if loaded.time_origin_utc:
            origin = datetime.fromisoformat(loaded.time_origin_utc)
    jobs, too_big, big_examples = check_against_cluster(jobs, cluster, cfg.skip_invalid, path)
    if cfg.max_jobs is not None and cfg.max_jobs < len(jobs):
        keep = np.sort(np.argsort(jobs.submit_s, kind="stable")[: cfg.max_jobs])
        jobs = jobs.subset(keep)
    notes = list(jobs.notes) + ([cluster.notes] if cluster.notes else [])
    return Inputs(jobs, cluster, skipped + too_big, examples + big_examples, has_times, notes, origin)


def run_simulation(
    cfg: SimulationConfig, out_dir: str | Path | None = None, progress: ProgressFn | None = None
) -> RunResult:
    started = time.perf_counter()
    inputs = load_inputs(cfg)
    seeds = np.random.SeedSequence(cfg.seed).spawn(3)
    rng_order, rng_policy = (np.random.default_rng(s) for s in seeds[:2])
    placement = PLACEMENT_POLICIES.create(cfg.placement)
    if cfg.mode == "temporal":
        if not inputs.has_times:
            raise WattschedError(
                f"workload '{cfg.workload}' has no submission/deletion times; use --mode packing"
            )
        jobs_df, series_df, metrics, policies = _run_temporal(cfg, inputs, placement, rng_policy, progress)
    else:
        jobs_df, series_df, metrics = _run_packing(cfg, inputs, placement, rng_order, rng_policy, progress)
        policies = {"placement": policy_info(placement)}
    summary: dict[str, Any] = {
        "jobs_submitted": metrics.pop("jobs_submitted"),
        "jobs_completed": metrics.pop("jobs_completed"),
        "jobs_unschedulable": metrics.pop("jobs_unschedulable"),
        "jobs_dropped": metrics.pop("jobs_dropped"),
        "jobs_invalid_skipped": inputs.invalid_skipped,
        "jct_s": metrics.pop("jct_s"),
        "queue_delay_s": metrics.pop("queue_delay_s"),
        "makespan_s": metrics.pop("makespan_s"),
        "gpu_allocation_mean": metrics.pop("gpu_allocation_mean"),
        **metrics,
        "mode": cfg.mode,
        "workload": cfg.workload,
        "workload_source": inputs.jobs.source,
        "cluster": inputs.cluster.describe(),
        "policies": policies,
        "seed": cfg.seed,
        "invalid_examples": inputs.invalid_examples,
        "notes": inputs.notes,
        "wattsched_version": __version__,
        "wall_time_s": round(time.perf_counter() - started, 3),
    }
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        write_run_dir(out, cfg.model_dump(mode="json"), jobs_df, series_df, summary)
    return RunResult(cfg, summary, jobs_df, series_df, out)


def _job_columns(jobs: JobTable) -> dict[str, Any]:
    return {
        "job_id": jobs.job_id.astype(str),
        "submit_s": jobs.submit_s,
        "num_gpu": jobs.num_gpu,
        "gpu_milli": jobs.gpu_milli,
        "cpu_milli": jobs.cpu_milli,
        "memory_mib": jobs.memory_mib,
        "gpu_spec": jobs.gpu_spec.astype(str),
        "job_class": np.asarray(JOB_CLASSES, dtype=object)[jobs.job_class].astype(str),
        "model_name": jobs.model_name.astype(str),
        "user": jobs.user.astype(str),
    }


def _run_temporal(cfg, inputs: Inputs, placement, rng_policy, progress):
    jobs, cluster = inputs.jobs, inputs.cluster
    energy = build_energy(cfg, inputs.time_origin_utc) if cfg.energy else None
    queue = QUEUE_POLICIES.create(cfg.queue)
    scheduler = QueuePlacementScheduler(queue, placement, energy.setting_rule if energy else None)
    recorder = TimeSeriesRecorder()
    sim = Simulator(
        jobs,
        cluster,
        scheduler,
        rng_policy,
        power=energy.power if energy else None,
        observers=[*([energy.ledger] if energy else []), recorder],
        check_invariants=cfg.check_invariants,
        progress=progress,
    )
    outcome = sim.run()
    jct = outcome.end_s - jobs.submit_s
    delay = outcome.start_s - jobs.submit_s
    cols = _job_columns(jobs)
    cols.update(
        {
            "start_s": outcome.start_s,
            "end_s": outcome.end_s,
            "jct_s": jct,
            "queue_delay_s": delay,
            "duration_s": jobs.duration_s,
            "status": np.asarray(STATUS_NAMES, dtype=object)[outcome.status].astype(str),
            "placement": placement_strings(outcome.placements, cluster),
        }
    )
    jobs_df = pd.DataFrame(cols)
    done = outcome.status == STATUS_DONE
    span = recorder.last_time - recorder.first_time
    metrics = {
        "jobs_submitted": len(jobs),
        "jobs_completed": int(done.sum()),
        "jobs_unschedulable": int((outcome.status == STATUS_UNSCHEDULABLE).sum()),
        "jobs_dropped": int((outcome.status == STATUS_DROPPED).sum()),
        "jct_s": stats(jct[done]),
        "queue_delay_s": stats(delay[~np.isnan(delay)]),
        "makespan_s": float(np.nanmax(outcome.end_s) - jobs.submit_s.min()) if done.any() else 0.0,
        "gpu_allocation_mean": (
            recorder.allocated_gpu_seconds / (cluster.total_gpus * span)
            if span > 0 and cluster.total_gpus
            else 0.0
        ),
    }
    series = recorder.frame()
    if energy is not None:
        metrics.update(energy.summary(recorder.allocated_gpu_seconds))
        inputs.notes.extend(energy.notes)
        for name, values in energy.ledger.series_at(series["time_s"].to_numpy(), release=True).items():
            series[name] = values
        for name, signal in (("price_usd_per_mwh", energy.price), ("carbon_g_per_kwh", energy.carbon)):
            if signal is not None:
                series[name] = signal.value_at(series["time_s"].to_numpy())  # trace time, as the ledger
    return jobs_df, series, metrics, scheduler.describe()


def _run_packing(cfg, inputs: Inputs, placement, rng_order, rng_policy, progress):
    from ..policies.fgd import FragModel, typical_pods
    from .fgd_pwr import FragPowerObserver, packing_ratios

    jobs, cluster = inputs.jobs, inputs.cluster
    # Fragmentation against the trace's typical pods and binary-model power, after every pod (fgd-pwr.md §6).
    metrics_observer = FragPowerObserver(cluster, FragModel(cluster, typical_pods(jobs)))
    outcome = run_packing(
        jobs,
        cluster,
        placement,
        rng_order,
        rng_policy,
        inflate=cfg.inflate,
        shuffle=cfg.shuffle,
        observers=[metrics_observer],
        check_invariants=cfg.check_invariants,
        progress=progress,
    )
    sub = jobs.subset(outcome.order)
    cols = {"submission": np.arange(outcome.order.size), **_job_columns(sub)}
    cols.pop("submit_s")
    cols["placed"] = outcome.placed
    cols["placement"] = placement_strings(outcome.placements, cluster)
    jobs_df = pd.DataFrame(cols)
    series = outcome.series.frame()
    capacity = cluster.total_gpus * MILLI
    series["arrived_pct"] = series["arrived_gpu_milli"] / capacity * 100.0
    series["alloc_pct"] = series["allocated_gpu_milli"] / capacity * 100.0
    series["frag_ratio_pct"], series["grar"] = packing_ratios(series)
    for col in ("pod", "arrived_gpu_milli", "allocated_gpu_milli"):
        series[col] = series[col].astype(np.int64)
    series["placed"] = series["placed"].astype(bool)
    placed = int(outcome.placed.sum())
    arrived = max(outcome.arrived_milli_final, 1)
    metrics = {
        "jobs_submitted": int(outcome.order.size),
        "jobs_completed": 0,
        "jobs_unschedulable": 0,
        "jobs_dropped": int(outcome.order.size - placed),
        "jct_s": stats(np.array([])),
        "queue_delay_s": stats(np.array([])),
        "makespan_s": None,
        "gpu_allocation_mean": None,
        "jobs_placed": placed,
        "inflate": cfg.inflate,
        "gpu_allocation_final": outcome.allocated_milli_final / capacity,
        "arrived_gpu_ratio_final": outcome.arrived_milli_final / capacity,
        "grar_final": outcome.allocated_milli_final / arrived,
        "frag_ratio_pct_final": float(series["frag_ratio_pct"].iloc[-1]) if len(series) else None,
        "power_w_final_binary": float(series["power_w"].iloc[-1]) if len(series) else None,
    }
    return jobs_df, series, metrics
