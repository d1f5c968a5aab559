"""Readers for job traces: Alibaba GPU v2023 pod lists, Philly (Pollux copy), Tiresias/HyperDrive, Gavel,
and the generic wattsched CSV schema (``docs/data-formats.md``).

Every reader returns a :class:`LoadedWorkload` whose submit times are re-based so that the earliest submission
is 0 s, whose ``source_line`` holds the 1-based file line of each job (header = line 1), and whose ``notes``
list the assumptions made. All parsing is vectorised with pandas/numpy. Before parsing, :func:`read_table`
checks that every non-blank row has as many fields as the header, in time linear in the file size (numpy
over the raw bytes; the csv module when the file has quoted fields), so that a malformed row is an
:class:`InputError` naming its line instead of a shifted or padded row.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.cluster import MILLI
from ..core.errors import InputError
from ..core.jobs import JobTable
from ..perf.catalog import normalise as normalise_model
from ..perf.tables import gavel_tables, parse_gavel_type
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
    parse_job_class,
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

_WHITESPACE = " \t\r\n\v\f"  # what bytes.strip() removes; a line of only these is blank
_SPACE = np.frombuffer(_WHITESPACE.encode(), dtype=np.uint8)

GENERIC_REQUIRED = ("job_id", "submit_time", "duration", "num_gpu")
GENERIC_OPTIONAL = (
    "gpu_milli", "cpu_milli", "memory_mib", "gpu_model", "job_class", "model_name", "batch_size", "deadline",
    "deadline_at", "user",
)  # fmt: skip
GENERIC_FIELDS = (*GENERIC_REQUIRED, *GENERIC_OPTIONAL)
_MAPPING_HINT = "; a trace with other column names: map them with --columns FIELD=COLUMN"
# ElasticFlow's traces (pkusys/ElasticFlow traces_for_ElasticFlow/*.csv): `ddl` is an absolute deadline in the
# submit_time clock; `iteration` / `real_iteration`, `batch_size` and `real_duration` feed no field.
ELASTICFLOW_COLUMNS = frozenset(
    {"job_id", "submit_time", "model_name", "ddl", "batch_size", "num_gpu", "duration"}
)
ELASTICFLOW_MAPPING = {"deadline_at": "ddl"}
# A deadline column is suspect when it leaves most jobs less time than their own duration.
DEADLINE_SUSPECT_SHARE = 0.5
_ALTERNATIVE = {"deadline": "deadline_at", "deadline_at": "deadline"}


# -- shared helpers ------------------------------------------------------------------------------------------


def read_table(
    path: str | Path,
    *,
    sep: str = ",",
    names: tuple[str, ...] | None = None,
    skipinitialspace: bool = False,
    quoting: int = csv.QUOTE_MINIMAL,
    data: bytes | None = None,
) -> tuple[pd.DataFrame, np.ndarray]:
    """Read a delimited file as text columns; return the frame and each row's 1-based file line.

    With ``names`` the file has no header (first data row = line 1). Every non-blank row must have as many
    fields as the header (or ``names``); blank rows are dropped. ``data`` is the file's content when the caller
    has already read it with :func:`read_text_bytes`.
    """
    path = Path(path)
    if data is None:
        data = read_text_bytes(path)
    if not data or data.isspace():
        raise InputError(path, 1, None, "file is empty")
    quoted = quoting != csv.QUOTE_NONE and b'"' in data
    expected = len(names) if names else None
    if quoted:
        row_lines = _check_fields_quoted(path, data, sep, expected, skipinitialspace)
    else:
        _check_fields_plain(path, data, sep, expected)
        row_lines = None
    try:
        df = pd.read_csv(
            io.BytesIO(data),
            sep=sep,
            header=None if names else 0,
            names=list(names) if names else None,  # not inferred from a (possibly blank) first line
            index_col=False,
            dtype=str,
            keep_default_na=False,
            skip_blank_lines=False,
            skipinitialspace=skipinitialspace,
            quoting=quoting,
            engine="c",
        )
    except pd.errors.EmptyDataError:
        raise InputError(path, 1, None, "file is empty") from None
    except pd.errors.ParserError as exc:
        text = one_line(str(exc))
        m = re.search(r"line (\d+)", text)
        line = int(m.group(1)) if m else None
        m = re.search(r"starting at row (\d+)", text)
        if m and row_lines is not None and int(m.group(1)) < len(row_lines):
            line = row_lines[int(m.group(1))]
            text = "a quoted field is never closed (missing '\"')"
        raise InputError(path, line, None, f"malformed row: {text}") from None
    first = 1 if names else 2
    if row_lines is not None and len(row_lines) == len(df) + first - 1:
        lines = np.asarray(row_lines[first - 1 :], dtype=np.int64)  # quoted fields may span lines
    else:
        lines = np.arange(first, first + len(df), dtype=np.int64)
    if names:
        if df.shape[1] != len(names):
            raise InputError(
                path, 1, None, f"expected {len(names)} fields separated by {sep!r}, found {df.shape[1]}"
            )
        df.columns = list(names)
    else:
        df.columns = [str(c).strip() for c in df.columns]
    blank = np.ones(len(df), dtype=bool)
    for col in df.columns:
        blank &= is_missing(df[col])
    if blank.any():
        df = df.loc[~blank].reset_index(drop=True)
        lines = lines[~blank]
    return df, lines


def read_text_bytes(path: str | Path, expected: str = "a CSV file") -> bytes:
    """The bytes of a UTF-8 text file, or an :class:`InputError` saying why it cannot be one."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, None, None, "file not found") from None
    except IsADirectoryError:
        raise InputError(path, None, None, f"is a directory, expected {expected}") from None
    except OSError as exc:
        if path.is_dir():
            raise InputError(path, None, None, f"is a directory, expected {expected}") from None
        reason = one_line(exc.strerror or str(exc)).lower()
        raise InputError(path, None, None, f"cannot read the file: {reason}") from None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, _line_at(data, exc.start), None, f"not UTF-8 text: {exc}") from None
    nul = data.find(b"\x00")
    if nul >= 0:
        raise InputError(path, _line_at(data, nul), None, "contains a NUL byte: not a text file")
    return data


def _line_at(data: bytes, offset: int) -> int:
    """1-based line of a byte offset; line breaks are \\n, \\r\\n and a lone \\r (as pandas counts them)."""
    head = data[:offset]
    return head.count(b"\n") + head.count(b"\r") - head.count(b"\r\n") + 1


def _field_count_error(path: Path, line: int, sep: str, expected: int, found: int) -> InputError:
    what = "field" if expected == 1 else "fields"
    how = "" if sep == "," else f" separated by {sep!r}"
    return InputError(path, line, None, f"expected {expected} {what}{how}, found {found}")


def _check_fields_plain(path: Path, data: bytes, sep: str, expected: int | None) -> None:
    """Field counts of a file without quoted fields: one row per line, fields = separators + 1.

    Vectorised over the bytes (linear time); raises for the first non-blank line whose count differs from
    ``expected`` (the header's count when None).
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)  # each line's terminator (\n, or the \n of \r\n)
    if b"\r" in data:
        lone_cr = buf == 13
        lone_cr[:-1] &= buf[1:] != 10
        ends = np.union1d(ends, np.flatnonzero(lone_cr))
    if ends.size == 0 or ends[-1] != len(data) - 1:
        ends = np.append(ends, len(data))  # last line without a terminator
    seps = np.flatnonzero(buf == ord(sep))
    counts = np.diff(np.searchsorted(seps, ends), prepend=0) + 1
    starts = np.concatenate(([0], ends[:-1] + 1))
    if expected is None:
        if not data[starts[0] : ends[0]].strip():
            raise InputError(path, 1, None, "the header line is empty (expected column names)")
        expected = int(counts[0])
    odd = np.flatnonzero(counts != expected)
    size = ends[odd] - starts[odd]
    odd = odd[(size > 1) | ((size == 1) & ~np.isin(buf[np.minimum(starts[odd], len(buf) - 1)], _SPACE))]
    for i in odd:  # blank lines (empty, or only whitespace) are allowed whatever their count
        if data[starts[i] : ends[i]].strip():
            raise _field_count_error(path, int(i) + 1, sep, expected, int(counts[i]))


def _check_fields_quoted(
    path: Path, data: bytes, sep: str, expected: int | None, skipinitialspace: bool
) -> list[int]:
    """Field counts of a file with quoted fields (which may hold separators and line breaks).

    Returns the first file line of every row (blank rows included), in file order.
    """
    reader = csv.reader(
        io.StringIO(data.decode("utf-8"), newline=""),
        delimiter=sep,
        quotechar='"',
        doublequote=True,
        skipinitialspace=skipinitialspace,
        strict=False,
    )
    row_lines: list[int] = []
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, len(data) + 1))  # pandas has no field size limit
    try:
        end = 0
        for row in reader:
            line = end + 1
            end = reader.line_num
            row_lines.append(line)
            n = len(row)
            if n == expected:
                continue
            if expected is None and line == 1:
                if n == 0 or (n == 1 and not row[0].strip(_WHITESPACE)):
                    raise InputError(path, 1, None, "the header line is empty (expected column names)")
                expected = n
                continue
            if n == 0 or (all(not c.strip(_WHITESPACE) for c in row) and (n == 1 or sep in _WHITESPACE)):
                continue  # blank line
            message = _field_count_error(path, line, sep, expected or 0, n).message
            if reader.line_num > line:  # the row ran over several lines: likely an unclosed quote
                message += f" (row runs to line {reader.line_num}: is a closing '\"' missing?)"
            raise InputError(path, line, None, message)
    except csv.Error as exc:
        raise InputError(
            path, reader.line_num or None, None, f"malformed row: {one_line(str(exc))}"
        ) from None
    finally:
        csv.field_size_limit(limit)
    return row_lines


def require_columns(df: pd.DataFrame, path: str | Path, columns, hint: str = "") -> None:
    for col in columns:
        if col not in df.columns:
            found = one_line(", ".join(df.columns))
            raise InputError(path, 1, col, f"missing required column (found: {found}){hint}")


def _text(col) -> np.ndarray:
    return pd.Series(col, copy=False).astype(str).str.strip().to_numpy(dtype=object)


def _rebase(submit: np.ndarray) -> tuple[np.ndarray, float]:
    """Shift submit times so the earliest finite one is 0; returns the shifted times and the offset."""
    finite = np.isfinite(submit)
    if not finite.any():
        return submit, np.nan
    origin = float(submit[finite].min())
    return submit - origin, origin


def _iso_utc(epoch_s: float) -> str | None:
    if not np.isfinite(epoch_s):
        return None
    return pd.Timestamp(epoch_s, unit="s", tz="UTC").isoformat()


def _finish(
    v: RowValidator,
    skip_invalid: bool,
    path: Path,
    source: str,
    notes: list[str],
    *,
    epoch_times: bool = False,
    **cols,
) -> LoadedWorkload:
    """Drop (or raise for) bad rows, cast the kept columns, re-base submit times and wrap it all up."""
    keep, skipped, examples = v.finish(skip_invalid)
    idx = np.flatnonzero(keep)
    kept = {k: (None if c is None else np.asarray(c)[idx]) for k, c in cols.items()}
    submit, origin = _rebase(np.asarray(kept.pop("submit_s"), dtype=np.float64))
    if kept.get("deadline_s") is not None and np.isfinite(origin):
        kept["deadline_s"] = np.asarray(kept["deadline_s"], dtype=np.float64) - origin  # same clock as submit
    if skipped:
        notes.append(f"{skipped} invalid row(s) skipped")
    if np.isfinite(origin) and origin != 0:
        unit = "timestamp" if epoch_times else "submit time"
        notes.append(f"submit times re-based: the earliest {unit} is 0 s")
    for name in ("num_gpu", "gpu_milli", "cpu_milli", "memory_mib", "batch_size"):
        if kept.get(name) is not None:
            kept[name] = np.asarray(kept[name], dtype=np.float64).astype(np.int64)
    jobs = JobTable.build(submit_s=submit, source_line=v.lines[idx], source=source, notes=notes, **kept)
    has_times = bool(
        len(jobs) == 0 or (np.isfinite(jobs.submit_s).all() and np.isfinite(jobs.duration_s).all())
    )
    return LoadedWorkload(
        jobs=jobs,
        invalid_skipped=skipped,
        invalid_examples=examples,
        path=str(path),
        has_times=has_times,
        time_origin_utc=_iso_utc(origin) if epoch_times else None,
    )


def _ids(prefix: str, lines: np.ndarray, first_data_line: int) -> np.ndarray:
    """Stable ids from the data-row number (independent of skipped rows)."""
    return (prefix + pd.Series(lines - first_data_line, copy=False).astype(str)).to_numpy(dtype=object)


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


# -- generic CSV ---------------------------------------------------------------------------------------------


def read_generic_csv(
    path: str | Path,
    skip_invalid: bool = False,
    source: str | None = None,
    columns: Mapping[str, str] | None = None,
) -> LoadedWorkload:
    """The wattsched job CSV schema (``docs/data-formats.md``). ``columns`` maps wattsched's field names to the
    file's own column names (``{"submit_time": "submission_time"}``), so another trace loads as it is."""
    path = Path(path)
    df, lines = read_table(path)
    notes = ["generic wattsched job CSV"]
    labels: dict[str, str] = {}
    columns, layout_note = _with_elasticflow_mapping(df, columns)
    if layout_note:
        notes.append(layout_note + "; its batch_size is not used (as before profiles existed)")
        df = df.drop(columns=["batch_size"])
    if columns:
        df, labels, mapping_notes = _map_generic_columns(df, path, columns)
        notes += mapping_notes
    require_columns(df, path, GENERIC_REQUIRED, hint=_MAPPING_HINT)
    for col in df.columns:
        if col not in GENERIC_FIELDS:
            valid = ", ".join(GENERIC_FIELDS)
            raise InputError(path, 1, one_line(col), f"unknown column (valid: {valid}){_MAPPING_HINT}")
    v = RowValidator(path, lines, labels)
    n = len(df)
    ids = _text(df["job_id"])
    v.flag(is_missing(df["job_id"]), "job_id", "missing value")
    dup = pd.Series(ids).duplicated().to_numpy() & ~is_missing(df["job_id"])
    v.flag(dup, "job_id", "duplicate job_id {value!r}", ids)

    submit, epoch_times = _generic_submit(v, df["submit_time"])
    duration = v.number(df["duration"], "duration")
    check_times(v, submit, duration, ("submit_time", "duration"))
    num = v.number(df["num_gpu"], "num_gpu", integer=True)

    def optional_number(col: str, default) -> np.ndarray:
        if col not in df:
            return np.full(n, default, dtype=np.float64)
        return v.number(df[col], col, required=False, integer=col != "deadline", default=np.nan)

    milli = optional_number("gpu_milli", np.nan)
    milli = np.where(np.isnan(milli) & ~np.isnan(num), np.where(num > 0, MILLI, 0), milli)
    check_gpu_request(v, num, milli, ("num_gpu", "gpu_milli"))
    cpu = np.nan_to_num(optional_number("cpu_milli", 0), nan=0.0)
    mem = np.nan_to_num(optional_number("memory_mib", 0), nan=0.0)
    batch = np.nan_to_num(optional_number("batch_size", 0), nan=0.0)
    check_non_negative(v, cpu, "cpu_milli")
    check_non_negative(v, mem, "memory_mib")
    check_non_negative(v, batch, "batch_size")
    deadline, deadline_note = _generic_deadline(v, df, path, submit, duration, epoch_times, optional_number)
    spec = normalise_gpu_spec(v, df["gpu_model"], "gpu_model") if "gpu_model" in df else None
    job_class = parse_job_class(v, df["job_class"], "job_class") if "job_class" in df else None
    if epoch_times:
        notes.append("submit_time given as timestamps: times without a zone are taken as UTC")
    if deadline_note:
        notes.append(deadline_note)
    return _finish(
        v, skip_invalid, path, source or path.name, notes, epoch_times=epoch_times,
        job_id=ids, submit_s=submit, duration_s=duration, num_gpu=num, gpu_milli=milli, cpu_milli=cpu,
        memory_mib=mem, gpu_spec=spec, job_class=job_class,
        model_name=_text(df["model_name"]) if "model_name" in df else None,
        batch_size=batch if "batch_size" in df else None,
        deadline_s=deadline, user=_text(df["user"]) if "user" in df else None,
    )  # fmt: skip


def _with_elasticflow_mapping(
    df: pd.DataFrame, columns: Mapping[str, str] | None
) -> tuple[Mapping[str, str] | None, str | None]:
    """The column mapping, with ElasticFlow's absolute `ddl` read as `deadline_at` when the file has ElasticFlow's
    layout and the mapping does not say otherwise; and the note that says so."""
    header = {str(c) for c in df.columns}
    elasticflow = header >= ELASTICFLOW_COLUMNS and bool({"iteration", "real_iteration"} & header)
    given = dict(columns or {})
    if (
        not elasticflow
        or "ddl" in {c.strip() for c in given.values()}
        or {"deadline", "deadline_at"} & set(given)
    ):
        return columns, None
    note = "ElasticFlow trace layout: its ddl column is read as an absolute deadline (deadline_at=ddl)"
    return {**ELASTICFLOW_MAPPING, **given}, note


def _generic_deadline(v, df, path: Path, submit, duration, epoch_times: bool, optional_number):
    """Absolute deadlines (the submit_time clock) from ``deadline`` (seconds after submit) or ``deadline_at``
    (absolute), and a note; a warning is added when the deadlines leave most jobs less than their duration."""
    if "deadline" in df and "deadline_at" in df:
        raise InputError(
            path, 1, None, "give deadline (seconds after submit) or deadline_at (an absolute time), not both"
        )
    note: str | None
    if "deadline_at" in df:
        field = "deadline_at"
        if epoch_times:
            at = v.timestamp(df[field], field, required=False)
        else:
            at = v.number(df[field], field, required=False, default=np.nan)
        msg = "deadline_at {value} is not after the job's submit_time (seconds after submit go in `deadline`)"
        v.flag(at <= submit, field, msg, df[field].to_numpy())
        absolute, note = at, "deadline_at: absolute deadlines in the submit_time clock"
    else:
        field = "deadline"
        relative = optional_number("deadline", np.nan)
        msg = "deadline must be a positive number of seconds after submit, got {value}"
        v.flag(relative <= 0, "deadline", msg, relative)
        absolute = submit + relative
        note = (
            "deadline: seconds after submission (stored as submit + deadline)" if "deadline" in df else None
        )
    has = np.isfinite(absolute) & np.isfinite(submit) & np.isfinite(duration) & ~v.bad
    short = has & (absolute - submit < duration)
    if has.any() and short.sum() > DEADLINE_SUSPECT_SHARE * has.sum():
        other = (
            "if the column holds absolute times, map it with --columns deadline_at=COLUMN"
            if field == "deadline"
            else "if the column holds seconds after submission, map it with --columns deadline=COLUMN"
        )
        column = v.labels.get(field, field)
        note = (
            f"warning: {path.name}: {int(short.sum())} of {int(has.sum())} jobs have a deadline ({field}, column "
            f"'{column}') sooner than submit + their duration; {other}"
        )
    return absolute, note


def _check_column_mapping(columns: Mapping[str, str], where: str | Path) -> None:
    """A mapping of generic-CSV fields to file columns names only known fields, and each column once."""
    read_by: dict[str, str] = {}
    for field, column in columns.items():
        if field not in GENERIC_FIELDS:
            raise InputError(
                where, None, None,
                f"column mapping {field}={column}: '{field}' is not a field of the generic job CSV "
                f"(fields: {', '.join(GENERIC_FIELDS)})",
            )  # fmt: skip
        if column in read_by:
            raise InputError(
                where, None, None,
                f"column mapping: '{read_by[column]}' and '{field}' are both mapped to column '{column}'; "
                "a column feeds one field",
            )  # fmt: skip
        read_by[column] = field


def _map_generic_columns(
    df: pd.DataFrame, path: Path, columns: Mapping[str, str]
) -> tuple[pd.DataFrame, dict[str, str], list[str]]:
    """The file's columns as wattsched's fields: a mapped field reads its column, any other field the column of
    its own name. Returns the renamed frame, field -> file column of the mapped fields (row errors name the
    file's column) and notes. Columns that feed no field are dropped: a foreign trace has columns of its own."""
    columns = {f.strip(): c.strip() for f, c in columns.items()}
    _check_column_mapping(columns, path)
    for field, column in columns.items():
        if column not in df.columns:
            found = one_line(", ".join(df.columns))
            raise InputError(
                path, 1, None,
                f"column mapping {field}={column}: the file has no column '{column}' (its columns: {found})",
            )  # fmt: skip
    field_of: dict[str, str] = {}  # file column -> the field it feeds
    for field in GENERIC_FIELDS:
        column = columns.get(field, field)
        if column not in df.columns or (field not in columns and _ALTERNATIVE.get(field) in columns):
            continue  # a deadline given one way is not also read the other way by its name
        if column in field_of:
            first, second = (
                f"'{f}'" + ("" if f in columns else " (by its name)") for f in (field_of[column], field)
            )
            raise InputError(
                path, 1, None,
                f"column mapping: column '{column}' would feed both {first} and {second}; a column feeds one "
                "field",
            )  # fmt: skip
        field_of[column] = field
    unused = [c for c in df.columns if c not in field_of]
    notes = ["columns mapped: " + ", ".join(f"{c} -> {f}" for f, c in columns.items())]
    if unused:
        notes.append(f"columns not used: {one_line(', '.join(unused))}")
    return df[list(field_of)].rename(columns=field_of), columns, notes


def _generic_submit(v: RowValidator, raw: pd.Series) -> tuple[np.ndarray, bool]:
    """Seconds when the first non-empty value is a number, else ISO 8601 timestamps (as epoch seconds)."""
    present = raw[~is_missing(raw)]
    first = str(present.iloc[0]).strip() if len(present) else "0"
    try:
        float(first)
    except ValueError:
        return v.timestamp(raw, "submit_time"), True
    return v.number(raw, "submit_time"), False
