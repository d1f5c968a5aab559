"""Vectorised row validation for job tables read from CSV-like files.

A reader parses its columns through a :class:`RowValidator`, which records one boolean mask per rule. At
the end the validator either raises an :class:`InputError` for the first bad row (by file line) or drops every
bad row and reports how many were dropped, with a few example messages. No rule loops over rows in Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.cluster import MILLI, ClusterSpec
from ..core.errors import InputError
from ..core.gpus import GPU_CATALOG
from ..core.jobs import INFERENCE, JOB_CLASSES, TRAINING, JobTable

if TYPE_CHECKING:
    import pandas as pd

MAX_EXAMPLES = 5
INT64_LIMIT = 2.0**63  # integer columns are stored as int64

_LINE_BREAKS = re.compile(r"\s*[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]\s*")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")


def one_line(text: object) -> str:
    """``text`` (str() of it) as one printable line: line breaks become spaces, other control characters are escaped."""
    text = _LINE_BREAKS.sub(" ", str(text).strip())
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


@dataclass
class LoadedWorkload:
    """A job table plus what loading it dropped or could not provide.

    ``has_times`` is False when some job lacks a usable submit time or duration (e.g. the 5-column Alibaba
    files): packing experiments can still use it, temporal simulation must refuse it. ``time_origin_utc`` is
    the calendar instant of simulation time 0 (ISO 8601) when the trace has real timestamps.
    """

    jobs: JobTable
    invalid_skipped: int = 0
    invalid_examples: list[str] = field(default_factory=list)
    path: str = ""
    has_times: bool = True
    time_origin_utc: str | None = None


@dataclass
class _Rule:
    mask: np.ndarray
    field: str
    template: str  # may use {value}
    values: np.ndarray | None


def is_missing(raw) -> np.ndarray:
    """Empty cells: NaN/None or blank text."""
    import pandas as pd

    s = pd.Series(raw, copy=False)
    if s.dtype.kind in "fiub":
        return s.isna().to_numpy()
    return (s.isna() | (s.astype(str).str.strip() == "")).to_numpy()


class RowValidator:
    """Collects per-rule masks over the rows of one file. ``lines`` are the 1-based file lines of the rows;
    ``labels`` names a field's column in the file where the two differ (a mapped column), for error messages."""

    def __init__(self, path: str | Path, lines: np.ndarray, labels: dict[str, str] | None = None):
        self.path = str(path)
        self.lines = np.asarray(lines, dtype=np.int64)
        self.labels = labels or {}
        self.bad = np.zeros(len(self.lines), dtype=bool)
        self._rules: list[_Rule] = []

    def __len__(self) -> int:
        return len(self.lines)

    def flag(self, mask, field: str, template: str, values=None) -> None:
        """Mark rows where ``mask`` holds as bad; ``template`` may use ``{value}`` (the row's entry)."""
        mask = np.asarray(mask, dtype=bool)
        if mask.any():
            vals = None if values is None else np.asarray(values, dtype=object)
            self._rules.append(_Rule(mask, field, template, vals))
            self.bad |= mask

    # -- parsers ---------------------------------------------------------------------------------------------

    def number(
        self, raw, field: str, *, required: bool = True, integer: bool = False, default: float = np.nan
    ):
        """Parse a column as float64; flag unparseable text, missing values (if required), non-integers."""
        import pandas as pd

        raw_s = pd.Series(raw, copy=False)
        parsed = pd.to_numeric(raw_s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        missing = is_missing(raw_s)
        self.flag(~missing & np.isnan(parsed), field, "cannot parse {value!r} as a number", raw_s.to_numpy())
        if required:
            self.flag(missing, field, "missing value")
        parsed = np.where(missing, default, parsed)
        if integer:
            frac = np.isinf(parsed) | (np.isfinite(parsed) & (parsed != np.round(parsed)))
            self.flag(frac, field, "{value!r} is not an integer", raw_s.to_numpy())
            huge = np.isfinite(parsed) & (np.abs(parsed) >= INT64_LIMIT)
            self.flag(huge, field, "{value!r} is out of range", raw_s.to_numpy())
        return parsed

    def timestamp(self, raw, field: str, *, fmt: str = "ISO8601", required: bool = True) -> np.ndarray:
        """Parse timestamps to float seconds since the Unix epoch (UTC). Naive times are taken as UTC."""
        import pandas as pd

        raw_s = pd.Series(raw, copy=False).astype(object)
        missing = is_missing(raw_s)
        text = raw_s.where(~missing, None)
        ts = pd.to_datetime(text, format=fmt, errors="coerce", utc=True)
        secs = _epoch_seconds(ts)
        expect = "YYYY-MM-DD HH:MM:SS" if fmt == "%Y-%m-%d %H:%M:%S" else "an ISO 8601 timestamp"
        self.flag(~missing & np.isnan(secs), field, f"cannot parse {{value!r}} as {expect}", raw_s.to_numpy())
        if required:
            self.flag(missing, field, "missing value")
        return secs

    # -- result ----------------------------------------------------------------------------------------------

    def _error_for(self, row: int) -> InputError:
        for rule in self._rules:
            if rule.mask[row]:
                value = None if rule.values is None else rule.values[row]
                message = one_line(rule.template.format(value=value))
                field = self.labels.get(rule.field, rule.field)
                return InputError(self.path, int(self.lines[row]), field, message)
        raise AssertionError("row is not flagged")

    def finish(self, skip_invalid: bool) -> tuple[np.ndarray, int, list[str]]:
        """Return ``(keep_mask, skipped, examples)``, or raise for the first bad row when not skipping."""
        if not self.bad.any():
            return np.ones(len(self.lines), dtype=bool), 0, []
        bad_rows = np.flatnonzero(self.bad)
        bad_rows = bad_rows[np.argsort(self.lines[bad_rows], kind="stable")]
        if not skip_invalid:
            raise self._error_for(int(bad_rows[0]))
        examples = [str(self._error_for(int(r))) for r in bad_rows[:MAX_EXAMPLES]]
        return ~self.bad, int(bad_rows.size), examples


def _epoch_seconds(ts: pd.Series) -> np.ndarray:
    """Seconds since 1970-01-01 UTC as float64; NaT -> NaN. Works for any datetime64 resolution.

    Instants outside the nanosecond range (years 1677..2262; e.g. ``-1`` read as year -1) become NaN.
    """
    import pandas as pd

    epoch = pd.Timestamp(0, tz="UTC")
    try:
        delta = ts - epoch
    except (OverflowError, pd.errors.OutOfBoundsDatetime):
        lo, hi = pd.Timestamp.min.tz_localize("UTC"), pd.Timestamp.max.tz_localize("UTC")
        delta = ts.where((ts >= lo) & (ts <= hi)) - epoch
    return delta.dt.total_seconds().to_numpy(dtype=np.float64, na_value=np.nan)


# -- job-level rules -----------------------------------------------------------------------------------------


def check_times(
    v: RowValidator,
    submit: np.ndarray,
    duration: np.ndarray,
    fields: tuple[str, str],
    *,
    allow_nan: bool = False,
) -> None:
    """Negative submit times, and negative or NaN durations (NaN allowed when the trace may lack times)."""
    submit_f, dur_f = fields
    bad_submit = (submit < 0) | np.isinf(submit)
    v.flag(bad_submit, submit_f, "submit time must be finite and >= 0, got {value}", submit)
    bad_dur = (duration < 0) | np.isinf(duration)
    if not allow_nan:
        bad_dur |= np.isnan(duration)
    v.flag(bad_dur, dur_f, "duration must be a non-negative number, got {value}", duration)


def check_gpu_request(
    v: RowValidator, num_gpu: np.ndarray, gpu_milli: np.ndarray, fields: tuple[str, str]
) -> None:
    """num_gpu >= 0; gpu_milli 1..1000 for GPU jobs, 0 for CPU-only jobs; shared pods use one GPU."""
    num_f, milli_f = fields
    v.flag(num_gpu < 0, num_f, "num_gpu must be a non-negative integer, got {value}", num_gpu)
    gpu_job = num_gpu > 0
    v.flag(
        gpu_job & ~((gpu_milli >= 1) & (gpu_milli <= MILLI)),
        milli_f,
        "gpu_milli must be in 1..1000 for a GPU job, got {value}",
        gpu_milli,
    )
    v.flag(
        (num_gpu == 0) & (gpu_milli != 0),
        milli_f,
        "gpu_milli must be 0 for a job without GPUs (num_gpu 0), got {value}",
        gpu_milli,
    )
    v.flag(
        (num_gpu > 1) & (gpu_milli < MILLI),
        milli_f,
        "a shared-GPU request (gpu_milli {value} < 1000) must use exactly one GPU",
        gpu_milli,
    )


def check_non_negative(v: RowValidator, values: np.ndarray, field: str) -> None:
    v.flag(values < 0, field, "must be non-negative, got {value}", values)


def normalise_gpu_spec(v: RowValidator, raw, field: str) -> np.ndarray:
    """Strip an OR-list of GPU models (``A|B``) and flag models missing from the GPU catalog."""
    import pandas as pd

    s = pd.Series(raw, copy=False).astype(object)
    s = s.where(~pd.Series(is_missing(s)), "").astype(str).str.strip()
    uniq, inv = np.unique(s.to_numpy(dtype=object).astype(str), return_inverse=True)
    cleaned = np.empty(len(uniq), dtype=object)
    problem = np.empty(len(uniq), dtype=object)
    for i, text in enumerate(uniq):  # loops over distinct specs only (a handful)
        parts = [p.strip() for p in text.split("|")] if text else []
        unknown = [p for p in parts if p not in GPU_CATALOG]
        cleaned[i] = "|".join(parts)
        problem[i] = ", ".join(repr(p) for p in unknown) if unknown else ""
    row_problem = problem[inv]
    v.flag(
        row_problem != "",
        field,
        "unknown GPU model {value} (known: " + ", ".join(sorted(GPU_CATALOG)) + ")",
        row_problem,
    )
    return cleaned[inv]


def parse_job_class(v: RowValidator, raw, field: str) -> np.ndarray:
    """``training`` (default when empty) or ``inference``, case-insensitive."""
    import pandas as pd

    s = pd.Series(raw, copy=False).astype(object)
    text = s.where(~pd.Series(is_missing(s)), "").astype(str).str.strip().str.lower().to_numpy(dtype=object)
    ok = (text == "") | np.isin(text, JOB_CLASSES)
    v.flag(~ok, field, "unknown job_class {value!r} (valid: " + ", ".join(JOB_CLASSES) + ")", s.to_numpy())
    return np.where(text == JOB_CLASSES[INFERENCE], INFERENCE, TRAINING).astype(np.int8)


def check_against_cluster(
    jobs: JobTable, spec: ClusterSpec, skip_invalid: bool, path: str
) -> tuple[JobTable, int, list[str]]:
    """Jobs asking for more GPUs than the whole cluster has can never run: error, or drop and count them."""
    total = spec.total_gpus
    too_big = jobs.num_gpu > total
    if not too_big.any():
        return jobs, 0, []
    v = RowValidator(path, jobs.source_line)
    v.flag(too_big, "num_gpu", f"requests {{value}} GPUs; cluster '{spec.name}' has {total}", jobs.num_gpu)
    keep, skipped, examples = v.finish(skip_invalid)
    out = jobs.subset(np.flatnonzero(keep))
    out.notes.append(
        f"{skipped} job(s) asking for more GPUs than cluster '{spec.name}' has ({total}) were skipped"
    )
    return out, skipped, examples
