"""Run one simulation from a resolved config: load inputs, run the engine, assemble and write the outputs."""

from __future__ import annotations

import ctypes
import gc
import os
import platform
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import __version__
from ..core.cluster import MILLI, ClusterSpec
from ..core.errors import WattschedError
from ..core.jobs import INFERENCE, JOB_CLASSES, TRAINING, JobTable
from ..core.states import STATUS_DONE, STATUS_DROPPED, STATUS_NAMES, STATUS_UNSCHEDULABLE
from ..engine.alloc_log import JOB_STAT_FIELDS, AllocationLog, last_held
from ..engine.meter import PowerMeter
from ..engine.packing import run_packing
from ..engine.recorder import TimeSeriesRecorder
from ..engine.temporal import Simulator
from ..policies import PLACEMENT_POLICIES
from ..policies.adapters import policy_info
from ..policies.build import DEFAULT_ROUND_S, build_scheduler  # noqa: F401 (importable from here)
from .config import SimulationConfig
from .energy_setup import build_energy
from .jobmodel import input_files
from .outputs import placement_strings, stats, write_run_dir

if TYPE_CHECKING:
    import pandas as pd

    from .parallel import ProgressFn


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


SERVICE_END_TOLERANCE_S = 1.0  # float rounding of a run's end


def load_inputs(cfg: SimulationConfig) -> Inputs:
    from ..workloads.catalog import load_workload, refuse_column_mapping
    from ..workloads.synthetic import generate
    from ..workloads.validate import check_against_cluster

    cluster = _load_cluster(cfg)
    origin = None
    if cfg.workload.name == "synthetic":
        refuse_column_mapping(cfg.workload.name, cfg.workload.columns)
        jobs, skipped, examples, has_times, path = (
            generate(cfg.workload.synthetic, cfg.seed),
            0,
            [],
            True,
            "synthetic",
        )
    else:
        loaded = load_workload(
            cfg.workload.name, cfg.data_dir, cfg.workload.skip_invalid, cfg.workload.columns
        )
        jobs, skipped, examples = loaded.jobs, loaded.invalid_skipped, list(loaded.invalid_examples)
        has_times, path = loaded.has_times, loaded.path
        if loaded.time_origin_utc:
            origin = datetime.fromisoformat(loaded.time_origin_utc)
    jobs, too_big, big_examples = check_against_cluster(jobs, cluster, cfg.workload.skip_invalid, path)
    if cfg.workload.max_jobs is not None and cfg.workload.max_jobs < len(jobs):
        keep = np.sort(np.argsort(jobs.submit_s, kind="stable")[: cfg.workload.max_jobs])
        jobs = jobs.subset(keep)
    if cfg.workload.deadline_slack is not None:
        jobs = with_deadlines(jobs, cfg.workload.deadline_slack)
    if cfg.workload.services is not None:
        from ..perf.model import main_gpu_model
        from ..workloads.inference import with_services

        jobs = with_services(jobs, cfg.workload.services, main_gpu_model(cluster), cfg.seed, cfg.data_dir)
    notes = list(jobs.notes) + ([cluster.notes] if cluster.notes else [])
    return Inputs(jobs, cluster, skipped + too_big, examples + big_examples, has_times, notes, origin)


def _deadline_metrics(deadline: np.ndarray, end: np.ndarray) -> dict[str, float | int]:
    """Jobs with a deadline, how many finished after it (or not at all), and the mean lateness of those."""
    has = ~np.isnan(deadline)
    if not has.any():
        return {}
    late = has & ~(end <= deadline)  # unfinished (NaN end) counts as a miss
    finished_late = late & ~np.isnan(end)
    return {
        "deadline_jobs": int(has.sum()),
        "deadline_misses": int(late.sum()),
        "deadline_lateness_mean_s": float((end - deadline)[finished_late].mean())
        if finished_late.any()
        else 0.0,
    }


def _service_metrics(jobs: JobTable, start: np.ndarray, end: np.ndarray) -> dict[str, float | int]:
    """SLO figures of inference jobs (service-hours): one violates its SLO when its GPUs start late, or when its
    requests are not all served within its time (it ends after submit + its duration, an hour for a service-hour:
    it ran on fewer GPUs than it asked for, slower, or was stopped), since requests then queue beyond the latency
    target. The seconds it is late, the later of its late start and its overrun (at most its duration; never
    served: all of it), times its rate are its violating requests (docs/cedla.md §1.4)."""
    hours = np.flatnonzero(jobs.job_class == INFERENCE)
    if not hours.size:
        return {}
    submit, asked = jobs.submit_s[hours], jobs.duration_s[hours]
    late_s = np.fmax(start[hours] - submit, end[hours] - (submit + asked))
    late_s = np.where(np.isnan(end[hours]), asked, np.clip(late_s, 0.0, asked))  # fmax skips a NaN start
    late_s[late_s <= SERVICE_END_TOLERANCE_S] = 0.0
    rate = np.nan_to_num(jobs.request_rate_rps[hours])
    return {
        "service_hours": int(hours.size),
        "slo_violation_hours": int((late_s > 0).sum()),
        "slo_violation_requests": float((rate * late_s).sum()),
        "service_gpu_hours": float(jobs.num_gpu[hours].sum()),
    }


def with_deadlines(jobs: JobTable, slack: float) -> JobTable:
    """Training jobs without a deadline get one at submit + `slack` x their trace duration (docs/cedla.md §1.3)."""
    missing = np.isnan(jobs.deadline_s) & (jobs.job_class == TRAINING)
    deadline = np.where(missing, jobs.submit_s + slack * jobs.duration_s, jobs.deadline_s)
    notes = [
        *jobs.notes,
        f"{int(missing.sum())} training job(s) given a deadline at submit + {slack:g} x duration",
    ]
    return replace(jobs, deadline_s=deadline, notes=notes)


def _load_cluster(cfg: SimulationConfig) -> ClusterSpec:
    from ..workloads.clusters import load_cluster, spec_names

    if cfg.gpu_type and cfg.cluster in spec_names():
        return load_cluster(f"{cfg.cluster}@{cfg.gpu_type}", cfg.data_dir)
    cluster = load_cluster(cfg.cluster, cfg.data_dir)
    return cluster.with_gpu_model(cfg.gpu_type) if cfg.gpu_type else cluster


# Arrays of at least this many bytes get their own memory mapping from glibc's malloc.
MMAP_THRESHOLD_BYTES = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def return_freed_arrays_to_the_os() -> None:
    """Make glibc's malloc give large blocks their own mapping, so that a freed array's memory goes back to the
    system. By default glibc raises its mapping threshold each time a mapped block is freed (up to 32 MB), after
    which arrays of a 10^6-job run come from the heap, whose freed middle is never returned: the run's peak
    memory then counts every phase's temporaries on top of the next phase's (measured: ~115 MB of 1.4 GB).
    Only on glibc, and not where MALLOC_MMAP_THRESHOLD_ already sets it."""
    if platform.system() != "Linux" or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    if platform.libc_ver()[0] != "glibc":
        return
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(ctypes.c_int(_M_MMAP_THRESHOLD), ctypes.c_int(MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):  # not glibc after all: leave the allocator as it is
        pass


def run_simulation(
    cfg: SimulationConfig, out_dir: str | Path | None = None, progress: ProgressFn | None = None
) -> RunResult:
    started = time.perf_counter()
    return_freed_arrays_to_the_os()
    inputs = load_inputs(cfg)
    seeds = np.random.SeedSequence(cfg.seed).spawn(3)
    rng_order, rng_policy, rng_models = (np.random.default_rng(s) for s in seeds)
    placement = PLACEMENT_POLICIES.create(cfg.scheduler.placement)
    if cfg.scheduler.mode == "temporal":
        if not inputs.has_times:
            raise WattschedError(
                f"workload '{cfg.workload.name}' has no submission/deletion times; use --mode packing"
            )
        jobs_df, series_df, metrics, policies, tables = _run_temporal(
            cfg, inputs, rng_policy, rng_models, progress
        )
    else:
        jobs_df, series_df, metrics = _run_packing(cfg, inputs, placement, rng_order, rng_policy, progress)
        policies, tables = {"placement": policy_info(placement)}, {}
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
        "mode": cfg.scheduler.mode,
        "workload": cfg.workload.name,
        "workload_source": inputs.jobs.source,
        "cluster": inputs.cluster.describe(),
        "policies": policies,
        "seed": cfg.seed,
        "invalid_examples": inputs.invalid_examples,
        "input_files": input_files(cfg),
        "notes": inputs.notes,
        "wattsched_version": __version__,
        "wall_time_s": round(time.perf_counter() - started, 3),
    }
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        # The tables are made: the inputs, the performance model and the simulator (reference cycles, which only
        # the cyclic collector frees) go before writing them (10^6 jobs: ~200 MB).
        del inputs
        gc.collect()
        write_run_dir(out, cfg.model_dump(mode="json"), jobs_df, series_df, summary, tables)
    return RunResult(cfg, summary, jobs_df, series_df, out)


def _text(values: np.ndarray) -> np.ndarray:
    """A column of text for a table: an object array of strings as it is (pandas makes the same string column
    from it as from ``astype(str)``, without a fixed-width copy and a string object per row on the way: 10^6
    jobs, ~100 MB a column), anything else as ``astype(str)``."""
    from pandas.api.types import infer_dtype

    if values.dtype == object and infer_dtype(values, skipna=False) == "string":
        return values
    return values.astype(str)


def _job_columns(jobs: JobTable) -> dict[str, Any]:
    columns = {
        "job_id": _text(jobs.job_id),
        "submit_s": jobs.submit_s,
        "num_gpu": jobs.num_gpu,
        "gpu_milli": jobs.gpu_milli,
        "cpu_milli": jobs.cpu_milli,
        "memory_mib": jobs.memory_mib,
        "gpu_spec": _text(jobs.gpu_spec),
        "job_class": np.asarray(JOB_CLASSES, dtype=object)[jobs.job_class],
        "model_name": _text(jobs.model_name),
        "user": _text(jobs.user),
    }
    # Columns only some workloads have: training deadlines and the request rates of service-hours.
    if not np.isnan(jobs.deadline_s).all():
        columns["deadline_s"] = jobs.deadline_s
    if not np.isnan(jobs.request_rate_rps).all():
        columns["request_rate_rps"] = jobs.request_rate_rps
    return columns


def build_perf(cfg: SimulationConfig, jobs: JobTable, cluster: ClusterSpec, scheduler, rng):
    """The job performance model, and the job table with any assigned model names."""
    from ..perf.colocation import sharing_model
    from ..perf.model import PerformanceModel
    from ..perf.restart import RestartModel

    policy = getattr(scheduler, "policy", None)
    assign = cfg.workload.assign_models == "always" or (
        cfg.workload.assign_models == "auto" and bool(getattr(policy, "needs_models", False))
    )
    tables = (
        assign
        or cfg.perf.performance in ("tables", "generated")
        or (cfg.perf.performance == "auto" and cfg.scheduler.allocation is not None)
    )
    restart = RestartModel(cfg.perf.restart_model, fixed_s=cfg.perf.restart_delay_s)
    return PerformanceModel.build(
        jobs,
        cluster,
        restart,
        cfg.data_dir,
        assign=assign,
        rng=rng,
        use_tables=tables and cfg.perf.performance != "trace",
        sharing=sharing_model(cfg.perf.sharing_model),
        loads=sharing_model("eaco") if cfg.perf.gpu_loads == "eaco-measured" else None,
        sharing_noise=cfg.perf.sharing_noise,
        noise_seed=cfg.seed,
        generated=cfg.perf.performance == "generated",
        profiles=load_run_profiles(cfg),
    )


def load_run_profiles(cfg: SimulationConfig):
    """The run's measured profiles (None without --profiles)."""
    if not cfg.perf.profiles:
        return None
    from ..experiments.grid import parse_list
    from ..perf.profiles import load_profiles

    return load_profiles(parse_list(cfg.perf.profiles), cfg.data_dir)


def _run_temporal(cfg, inputs: Inputs, rng_policy, rng_models, progress):
    cluster = inputs.cluster
    energy = build_energy(cfg, inputs.time_origin_utc) if cfg.energy.enabled else None
    scheduler = build_scheduler(cfg.scheduler_config(), energy.setting_rule if energy else None)
    scheduler.check_inputs(inputs.jobs, cfg.workload.name)
    perf, jobs = build_perf(cfg, inputs.jobs, cluster, scheduler, rng_models)
    if energy is not None:
        energy.use_measured_held(perf.profiles)
    recorder = TimeSeriesRecorder()
    sim = Simulator(
        jobs,
        cluster,
        scheduler,
        rng_policy,
        perf=perf,
        power=energy.power if energy else None,
        checkpoint_interval_s=cfg.perf.checkpoint_interval_s,
        observers=[*([energy.ledger] if energy else []), recorder],
        check_invariants=cfg.check_invariants,
        progress=progress,
        signals=(energy.price, energy.carbon) if energy else (None, None),
        power_meter=PowerMeter(energy.ledger) if energy else None,
    )
    sim.release_after_run = True  # only the outcome, the log and the observers are read below
    outcome = sim.run()
    import pandas as pd  # after the run: the simulation starts without it

    # 10^6 jobs: each table is built from arrays without a second copy, and the run's large records (the
    # simulator's working arrays, the allocation log, the ledger's step functions, the recorder's rows) are let go
    # once read, before the next table. The job table reads the log's holding intervals (kept from the ledger's
    # sort of the log) and placements, not its entries.
    log, outcome.log = outcome.log, AllocationLog()
    sim.release_working_state()
    tables = {}
    if cfg.scheduler.allocation is not None:
        tables["allocations"] = log.frame(cluster.node_names, jobs.job_id)
    held = log.intervals(sim.now, fields=JOB_STAT_FIELDS)
    log.drop_entries()
    series_columns = recorder.columns(release=True)
    times = series_columns["time_s"]
    if energy is not None:
        series_columns.update(energy.ledger.series_at(times, release=True))
        for name, signal in (("price_usd_per_mwh", energy.price), ("carbon_g_per_kwh", energy.carbon)):
            if signal is not None:
                series_columns[name] = signal.value_at(times)  # trace time, as the ledger
    series = pd.DataFrame(series_columns, copy=False)
    del series_columns, times
    placement = log.placement_texts(last_held(held, len(jobs)), cluster.node_names)
    job_stats = log.job_stats(len(jobs), sim.now, held)
    del log, held
    jct = outcome.end_s - jobs.submit_s
    delay = outcome.start_s - jobs.submit_s
    cols = _job_columns(jobs)
    if perf.profiles is not None:
        cols["perf_source"] = _text(perf.source)
    cols.update(
        {
            "start_s": outcome.start_s,
            "end_s": outcome.end_s,
            "jct_s": jct,
            "queue_delay_s": delay,
            "duration_s": jobs.duration_s,
            "status": np.asarray(STATUS_NAMES, dtype=object)[outcome.status],
            "placement": placement,
            "model_assigned": perf.assigned,
            "work": perf.work,
            "restarts": outcome.restarts,
            "preemptions": outcome.preemptions,
            "work_lost": outcome.work_lost,
            **job_stats,
        }
    )
    del placement, job_stats
    jobs_df = pd.DataFrame(cols, copy=False)  # 10^6 jobs: no second copy of every column
    del cols
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
        "restarts": int(outcome.restarts.sum()),
        "restart_gpu_hours": float(outcome.restart_gpu_s.sum()) / 3600.0,
        "preemptions": int(outcome.preemptions.sum()),
        # Summed as GPU time: jobs count work in their own units (iterations, or seconds without a table).
        "preemption_lost_gpu_hours": float(outcome.lost_gpu_s.sum()) / 3600.0,
        **_deadline_metrics(jobs.deadline_s, outcome.end_s),
        **_service_metrics(jobs, outcome.start_s, outcome.end_s),
    }
    if energy is not None:
        metrics.update(energy.summary(recorder.allocated_gpu_seconds))
        inputs.notes.extend(energy.notes)
    metrics["performance_model"] = perf.describe()
    inputs.notes.extend(perf.notes)
    return jobs_df, series, metrics, scheduler.describe(), tables


def _run_packing(cfg, inputs: Inputs, placement, rng_order, rng_policy, progress):
    import pandas as pd

    from ..policies.fgd import FragModel, typical_pods
    from .fgd_pwr import FragPowerObserver, packing_ratios

    jobs, cluster = inputs.jobs, inputs.cluster
    # Fragmentation against the trace's typical pods and binary-model power, after every pod (docs/fgd-pwr.md §6).
    metrics_observer = FragPowerObserver(cluster, FragModel(cluster, typical_pods(jobs)))
    outcome = run_packing(
        jobs,
        cluster,
        placement,
        rng_order,
        rng_policy,
        inflate=cfg.workload.inflate,
        shuffle=cfg.workload.shuffle,
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
        "inflate": cfg.workload.inflate,
        "gpu_allocation_final": outcome.allocated_milli_final / capacity,
        "arrived_gpu_ratio_final": outcome.arrived_milli_final / capacity,
        "grar_final": outcome.allocated_milli_final / arrived,
        "frag_ratio_pct_final": float(series["frag_ratio_pct"].iloc[-1]) if len(series) else None,
        "power_w_final_binary": float(series["power_w"].iloc[-1]) if len(series) else None,
    }
    return jobs_df, series, metrics
