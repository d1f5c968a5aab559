"""The generic wattsched CSV schema (``docs/data-formats.md``): required and optional columns, a mapping of other
column names onto them (``--columns FIELD=COLUMN``, ElasticFlow's traces recognised by their header), deadlines
relative or absolute, submit times in seconds or timestamps.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.cluster import MILLI
from ..core.errors import InputError
from .reading import _finish, _text, read_table, require_columns
from .validate import (
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

if TYPE_CHECKING:
    import pandas as pd

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


# -- generic CSV ---------------------------------------------------------------------------------------------


def read_generic_csv(
    path: str | Path,
    skip_invalid: bool = False,
    source: str | None = None,
    columns: Mapping[str, str] | None = None,
) -> LoadedWorkload:
    """The wattsched job CSV schema (``docs/data-formats.md``). ``columns`` maps wattsched's field names to the
    file's own column names (``{"submit_time": "submission_time"}``), so another trace loads as it is."""
    import pandas as pd

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
