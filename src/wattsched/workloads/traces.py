"""Readers for job traces: Alibaba GPU v2023 pod lists, Philly (Pollux copy), Tiresias/HyperDrive and Gavel
(``docs/data-formats.md``); the generic wattsched CSV schema is ``generic_csv.py``, the table reading they share
``reading.py``.

Every reader returns a :class:`LoadedWorkload` whose submit times are re-based so that the earliest submission
is 0 s, whose ``source_line`` holds the 1-based file line of each job (header = line 1), and whose ``notes``
list the assumptions made. All parsing is vectorised with pandas/numpy.
"""

from __future__ import annotations

import ast
import csv
import io
import json
from functools import cache
from pathlib import Path

import numpy as np

from ..core.cluster import MILLI
from ..core.errors import InputError
from ..perf.catalog import normalise as normalise_model
from ..perf.tables import gavel_tables, parse_gavel_type
from .reading import _WHITESPACE, _finish, _ids, _text, read_table, read_text_bytes, require_columns
from .validate import (
    INT64_LIMIT,
    LoadedWorkload,
    RowValidator,
    check_gpu_request,
    check_non_negative,
    check_times,
    is_missing,
    normalise_gpu_spec,
    one_line,
)

PHILLY_CPU_MILLI_PER_GPU = 8000
PHILLY_MEMORY_MIB_PER_GPU = 65536
PHILLY_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"

GAVEL_MSR_FIELDS = (
    "job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time", "scale_factor",
)  # fmt: skip
GAVEL_PHYSICAL_FIELDS = (
    "job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps",
    "scale_factor", "priority_weight", "SLO", "arrival_time",
)  # fmt: skip


# -- Alibaba GPU v2023 ---------------------------------------------------------------------------------------


def read_alibaba_pods(
    path: str | Path, skip_invalid: bool = False, source: str | None = None
) -> LoadedWorkload:
    """``openb_pod_list_*.csv``: 11 columns, or the first 5 (no gpu_spec, no times) in the multigpu files."""
    path = Path(path)
    df, lines = read_table(path)
    require_columns(df, path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    v = RowValidator(path, lines)
    v.flag(is_missing(df["name"]), "name", "missing value")
    cpu = v.number(df["cpu_milli"], "cpu_milli", integer=True)
    mem = v.number(df["memory_mib"], "memory_mib", integer=True)
    num = v.number(df["num_gpu"], "num_gpu", integer=True)
    milli = v.number(df["gpu_milli"], "gpu_milli", integer=True)
    check_non_negative(v, cpu, "cpu_milli")
    check_non_negative(v, mem, "memory_mib")
    check_gpu_request(v, num, milli, ("num_gpu", "gpu_milli"))
    spec = normalise_gpu_spec(v, df["gpu_spec"], "gpu_spec") if "gpu_spec" in df else None
    notes = [
        "Alibaba GPU v2023 pod list: gpu_milli is the per-GPU share as given; "
        "CPU-only pods have num_gpu 0 and gpu_milli 0",
        "job_class is not in the trace: every pod is treated as training",
    ]
    ignored = [c for c in ("qos", "pod_phase") if c in df.columns]
    if ignored:
        notes.append(f"columns ignored: {', '.join(ignored)}")
    time_cols = ("creation_time", "deletion_time", "scheduled_time")
    n = len(df)
    if all(c in df.columns for c in time_cols):
        created = v.number(df["creation_time"], "creation_time", required=False)
        deleted = v.number(df["deletion_time"], "deletion_time", required=False)
        scheduled = v.number(df["scheduled_time"], "scheduled_time", required=False)
        start = np.where(np.isnan(scheduled), created, scheduled)
        duration = deleted - start
        check_times(v, created, duration, ("creation_time", "deletion_time"), allow_nan=True)
        notes.append(
            "submit = creation_time; duration = deletion_time - scheduled_time (creation_time where "
            f"scheduled_time is empty: {int(np.isnan(scheduled).sum())} pod(s)); "
            "the time columns' semantics are unclear upstream"
        )
        no_time = int((np.isnan(created) | np.isnan(duration)).sum())
        if no_time:
            notes.append(f"{no_time} pod(s) without creation or deletion time have NaN submit/duration")
        submit = created
    else:
        submit = np.full(n, np.nan)
        duration = np.full(n, np.nan)
        notes.append("no time columns in this file: submit and duration are NaN (packing mode only)")
    return _finish(
        v, skip_invalid, path, source or path.stem, notes,
        job_id=_text(df["name"]), submit_s=submit, duration_s=duration, num_gpu=num, gpu_milli=milli,
        cpu_milli=cpu, memory_mib=mem, gpu_spec=spec,
    )  # fmt: skip


# -- Philly (Pollux copy) ------------------------------------------------------------------------------------


def read_philly(
    path: str | Path,
    skip_invalid: bool = False,
    source: str | None = None,
    cpu_milli_per_gpu: int = PHILLY_CPU_MILLI_PER_GPU,
    memory_mib_per_gpu: int = PHILLY_MEMORY_MIB_PER_GPU,
) -> LoadedWorkload:
    """``philly-pollux/philly.csv``: timestamp, duration, num_gpus, gpu_time, cluster (rows not sorted)."""
    path = Path(path)
    df, lines = read_table(path)
    require_columns(df, path, ("timestamp", "duration", "num_gpus", "cluster"))
    v = RowValidator(path, lines)
    ts = v.timestamp(df["timestamp"], "timestamp", fmt=PHILLY_TIME_FORMAT)
    duration = v.number(df["duration"], "duration")
    num = v.number(df["num_gpus"], "num_gpus", integer=True)
    check_times(v, ts, duration, ("timestamp", "duration"))
    milli = np.where(num > 0, MILLI, 0)
    check_gpu_request(v, num, milli, ("num_gpus", "num_gpus"))
    notes = [
        "Philly timestamps have no stated time zone: assumed UTC",
        (
            f"CPU and memory are not in the trace: {cpu_milli_per_gpu} milli-CPU and {memory_mib_per_gpu} MiB "
            "requested per GPU (assumption, matching the philly cluster's node shape)"
            if cpu_milli_per_gpu or memory_mib_per_gpu
            else "CPU and memory are not in the trace and none is requested: GPUs only are scheduled"
        ),
        "user = Philly virtual cluster (cluster column); gpu_time ignored (= duration x num_gpus)",
    ]
    safe = np.where(np.isfinite(num), num, 0)  # bad rows (NaN, inf) are flagged above
    return _finish(
        v, skip_invalid, path, source or "philly", notes, epoch_times=True,
        job_id=_ids("philly-", lines, 2), submit_s=ts, duration_s=duration, num_gpu=num, gpu_milli=milli,
        cpu_milli=safe * cpu_milli_per_gpu, memory_mib=safe * memory_mib_per_gpu, user=_text(df["cluster"]),
    )  # fmt: skip


# -- Tiresias / mltiply --------------------------------------------------------------------------------------


def read_tiresias(path: str | Path, skip_invalid: bool = False, source: str | None = None) -> LoadedWorkload:
    """Tiresias format: job_id, num_gpu, submit_time, iterations, model_name, duration, interval (seconds)."""
    path = Path(path)
    df, lines = read_table(path)
    require_columns(df, path, ("job_id", "num_gpu", "submit_time", "duration"))
    v = RowValidator(path, lines)
    v.flag(is_missing(df["job_id"]), "job_id", "missing value")
    num = v.number(df["num_gpu"], "num_gpu", integer=True)
    submit = v.number(df["submit_time"], "submit_time")
    duration = v.number(df["duration"], "duration")
    check_times(v, submit, duration, ("submit_time", "duration"))
    milli = np.where(num > 0, MILLI, 0)
    check_gpu_request(v, num, milli, ("num_gpu", "num_gpu"))
    model = _text(df["model_name"]) if "model_name" in df else None
    notes = ["Tiresias-format trace: no CPU/memory request (0); iterations and interval ignored"]
    return _finish(
        v, skip_invalid, path, source or path.stem, notes,
        job_id=_text(df["job_id"]), submit_s=submit, duration_s=duration, num_gpu=num, gpu_milli=milli,
        model_name=model,
    )  # fmt: skip


def read_hyperdrive(
    path: str | Path, skip_invalid: bool = False, source: str | None = None
) -> LoadedWorkload:
    """``philly_hyperdrive_workload.csv``: experiment-id, job-id, start-time, run-time, num-gpus.

    Values have a leading space after each comma.
    """
    path = Path(path)
    df, lines = read_table(path, skipinitialspace=True)
    require_columns(df, path, ("experiment-id", "job-id", "start-time", "run-time", "num-gpus"))
    v = RowValidator(path, lines)
    v.flag(is_missing(df["job-id"]), "job-id", "missing value")
    ts = v.timestamp(df["start-time"], "start-time", fmt=PHILLY_TIME_FORMAT)
    duration = v.number(df["run-time"], "run-time")
    num = v.number(df["num-gpus"], "num-gpus", integer=True)
    check_times(v, ts, duration, ("start-time", "run-time"))
    milli = np.where(num > 0, MILLI, 0)
    check_gpu_request(v, num, milli, ("num-gpus", "num-gpus"))
    notes = [
        "HyperDrive trace: submit = start-time (time zone not stated: assumed UTC); user = experiment-id",
        "no CPU/memory request (0)",
    ]
    return _finish(
        v, skip_invalid, path, source or path.stem, notes, epoch_times=True,
        job_id=_text(df["job-id"]), submit_s=ts, duration_s=duration, num_gpu=num, gpu_milli=milli,
        user=_text(df["experiment-id"]),
    )  # fmt: skip


# -- Gavel ---------------------------------------------------------------------------------------------------


@cache
def _throughput_tables(path: str, mtime_ns: int) -> dict[str, dict[str, dict[int, float]]]:
    """worker type -> job type -> scale factor -> steps/s when running alone (key ``"null"``)."""
    raw = json.loads(Path(path).read_text())
    out: dict[str, dict[str, dict[int, float]]] = {}
    for worker, table in raw.items():
        per_type: dict[str, dict[int, float]] = {}
        for key, entry in table.items():
            job_type, scale = ast.literal_eval(key)  # keys look like "('ResNet-50 (batch size 64)', 1)"
            if isinstance(entry, dict) and entry.get("null") is not None:
                per_type.setdefault(job_type, {})[int(scale)] = float(entry["null"])
        out[worker] = per_type
    return out


def gavel_throughputs(path: str | Path, worker_type: str = "v100") -> dict[str, dict[int, float]]:
    path = Path(path)
    try:
        tables = _throughput_tables(str(path), path.stat().st_mtime_ns)
    except FileNotFoundError:
        raise InputError(path, None, None, "file not found") from None
    except IsADirectoryError:
        raise InputError(path, None, None, "is a directory, expected a throughputs JSON file") from None
    except (ValueError, SyntaxError, TypeError, AttributeError, KeyError, RecursionError) as exc:
        raise InputError(path, None, None, f"cannot read throughputs: {one_line(str(exc))}") from None
    if worker_type not in tables:
        raise InputError(
            path, None, None, f"no worker type '{worker_type}' (have: {', '.join(sorted(tables))})"
        )
    return tables[worker_type]


def read_gavel(
    path: str | Path,
    throughputs_path: str | Path,
    skip_invalid: bool = False,
    source: str | None = None,
    worker_type: str = "v100",
    user: str | None = None,
) -> LoadedWorkload:
    """Gavel ``.trace`` (tab-separated, no header; 7-field msr or 10-field physical_cluster layout).

    Duration = total_steps / steps-per-second of the job type at its scale factor on ``worker_type``, running
    alone; a scale factor without a measurement (absent, or 0 in the file) gets the performance model's rate
    (``perf.tables`` rules: interpolated between measured scale factors, continued as a power law past the
    largest, ideal scaling when only one is measured), so that a job run alone at its trace scale factor takes
    its trace duration with or without the performance model.

    ``iterations`` = total_steps; ``batch_size`` = the N of ``(batch size N)`` in the job type (0 when the type
    has none, e.g. ``A3C``); ``model_name`` = the type's family normalised as the performance catalog keys it
    (``'ResNet-50 (batch size 64)'`` -> ``'resnet50'``), so the performance model finds Gavel's table for the
    job's family and batch size.
    """
    import pandas as pd

    path = Path(path)
    data = read_text_bytes(path, "a Gavel .trace file")
    fields = _gavel_layout(path, data)
    df, lines = read_table(path, sep="\t", names=fields, quoting=csv.QUOTE_NONE, data=data)
    v = RowValidator(path, lines)
    job_type = _text(df["job_type"])
    v.flag(is_missing(df["job_type"]), "job_type", "missing value")
    steps = v.number(df["total_steps"], "total_steps")
    check_non_negative(v, steps, "total_steps")
    arrival = v.number(df["arrival_time"], "arrival_time")
    scale = v.number(df["scale_factor"], "scale_factor", integer=True)
    v.flag(scale < 1, "scale_factor", "scale_factor must be at least 1, got {value}", scale)
    table = gavel_throughputs(throughputs_path, worker_type)

    # Throughput per distinct (job type, scale factor): a few dozen pairs, not one per row.
    whole = np.isfinite(scale) & (np.abs(scale) < INT64_LIMIT)  # other rows are flagged above
    pairs = pd.DataFrame({"t": job_type, "s": np.where(whole, scale, 0).astype(np.int64)})
    codes, uniq = pd.factorize(pd.MultiIndex.from_frame(pairs))
    rate = np.full(len(uniq), np.nan)
    extrapolated = np.zeros(len(uniq), dtype=bool)
    modelled = None  # the performance model's tables, loaded only when a scale factor is not measured
    for i, (jt, s) in enumerate(uniq):
        measured = table.get(jt)
        if not measured or s < 1:
            continue
        if measured.get(s, 0.0) > 0:
            rate[i] = measured[s]
            continue
        if modelled is None:
            modelled = gavel_tables(worker_type, path=throughputs_path)
        # (a type with no measured value at all makes gavel_tables raise, naming the type)
        rate[i] = modelled[jt].throughput(s)
        extrapolated[i] = True
    row_rate = rate[codes]
    v.flag(np.isnan(row_rate) & (scale >= 1) & ~is_missing(df["job_type"]), "job_type",
           f"no measured throughput for job type {{value!r}} on {worker_type}", job_type)  # fmt: skip
    duration = steps / row_rate
    check_times(v, arrival, duration, ("arrival_time", "total_steps"), allow_nan=True)

    notes = [
        "Gavel traces are synthetic (Philly-VC-shaped arrivals; Gavel job types and step counts), "
        "not raw Philly data",
        f"duration = total_steps / measured steps/s of the job type at its scale factor on {worker_type}, "
        f"running alone ({Path(throughputs_path).name})",
        "num_gpu = scale_factor; iterations = total_steps; model_name = the job type's model family, normalised "
        "('ResNet-50 (batch size 64)' -> 'resnet50'); batch_size = the type's '(batch size N)' (0 when none); "
        "no CPU/memory request (0)",
    ]
    # Model family and batch size per distinct job type (a handful of types, not one parse per row).
    type_codes, types = pd.factorize(pd.Series(job_type, dtype=object))
    parsed = [parse_gavel_type(str(t)) for t in types]
    family = np.array([normalise_model(f) for f, _ in parsed] + [""], dtype=object)[type_codes]
    batch = np.array([b for _, b in parsed] + [0], dtype=np.int64)[type_codes]
    n_extra = int(extrapolated[codes].sum())
    if n_extra:
        notes.append(
            f"{n_extra} job(s) have a scale factor without a measured throughput: steps/s interpolated or "
            "extrapolated by the performance model's rules (between measured scale factors, power law past the "
            "largest, ideal scaling when only one is measured; perf/tables.py)"
        )
    if len(fields) == len(GAVEL_PHYSICAL_FIELDS):
        notes.append("priority_weight and SLO are ignored")
    stem = path.stem
    users = np.full(len(df), user if user is not None else stem, dtype=object)
    milli = np.where(scale > 0, MILLI, 0)
    return _finish(
        v, skip_invalid, path, source or f"gavel/{stem}", notes,
        job_id=_ids(f"{stem}-", lines, 1), submit_s=arrival, duration_s=duration, num_gpu=scale,
        gpu_milli=milli, model_name=family, batch_size=batch, iterations=steps, user=users,
    )  # fmt: skip


def _gavel_layout(path: Path, data: bytes) -> tuple[str, ...]:
    """Pick the 7- or 10-field layout from the first non-empty line."""
    lines = enumerate(io.StringIO(data.decode("utf-8"), newline=None), start=1)
    number, first = next(((i, line) for i, line in lines if line.strip(_WHITESPACE)), (1, ""))
    n = len(first.rstrip("\r\n").split("\t"))
    if n == len(GAVEL_MSR_FIELDS):
        return GAVEL_MSR_FIELDS
    if n == len(GAVEL_PHYSICAL_FIELDS):
        return GAVEL_PHYSICAL_FIELDS
    if not first:
        raise InputError(path, 1, None, "file is empty")
    raise InputError(
        path, number, None, f"expected 7 (msr) or 10 (physical_cluster) tab-separated fields, found {n}"
    )
