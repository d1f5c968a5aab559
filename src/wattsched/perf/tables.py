"""Measured scaling tables: iterations/s of one model on one GPU type versus GPU count (and global batch size).

Two public sources are read (located through :mod:`wattsched.data.registry`, or read from ``path=``):

* ElasticFlow (dataset ``elasticflow-throughputs``), ``throughputs_<GPU>/<model>.csv``: header
  ``global_batch_size,1,2,4,...`` (one column per GPU count), one row per global batch size, cells in
  iterations/s.
* Gavel (dataset ``gavel-traces``), ``simulation_throughputs.json``: per worker type (``k80``, ``p100``,
  ``v100``) a key ``"('<job type>', <scale factor>)"`` maps to ``{"null": steps/s running alone,
  "('<other type>', <scale>)": [this job's steps/s, other job's steps/s] when co-located}``; the same layout
  under ``<worker>_unconsolidated`` holds steps/s when the job's GPUs are spread over more nodes than needed.
  A Gavel job type becomes a one-row table: its batch size is the number in ``(batch size N)`` in the type's
  name, or 0 when the name has none (``A3C``, ``CycleGAN``); its counts are the scale factors present.

What counts as measured
-----------------------
* A cell that is empty, ``nan`` (any case), JSON ``null``/``NaN`` or exactly 0 is *not measured* (NaN in the
  table): the upstream files use 0 for configurations that were not run or did not fit (ElasticFlow A100
  ``resnet50_cifar10`` at 16-64 GPUs, Gavel ``k80`` ResNet-50 at scale > 1, Gavel pairs ``[0.0, 0.0]``).
* A negative, infinite or non-numeric value is an error (:class:`~wattsched.core.errors.InputError` naming the
  file, the CSV line and the column), as are: a header without ``global_batch_size`` first or without GPU-count
  columns, a GPU-count column that is not a positive integer or is repeated, a row with the wrong number of
  cells, a batch size that is not a positive number, a repeated batch size, a row (or Gavel job type) with no
  measured cell, and a Gavel key or value of the wrong shape.
* A Gavel co-location pair counts only when both jobs run on one GPU (scale 1 on both sides) and both values
  are > 0.

``ScalingTable.throughput(n, batch, consolidated)`` rules
----------------------------------------------------------
Let ``c_1 < ... < c_k`` be the GPU counts measured (non-NaN) in one batch row and ``t(c)`` their cells.

1. ``n <= 0`` or a non-finite ``n``, and ``batch <= 0`` or a non-finite batch, raise ``ValueError``.
2. ``batch=None`` means the table's first (smallest) batch-size row.
3. ``n`` equal to a measured count: the cell itself (bit for bit).
4. ``c_i < n < c_{i+1}``: linear interpolation of it/s in ``n``:
   ``t(c_i) + (n - c_i) / (c_{i+1} - c_i) * (t(c_{i+1}) - t(c_i))``.
5. ``n > c_k`` (k >= 2): geometric continuation of the last measured step,
   ``t(n) = t(c_k) * r ** log2(n / c_k)`` with ``r = (t(c_k) / t(c_{k-1})) ** (1 / log2(c_k / c_{k-1}))``
   (a power law through the last two measured points; it may fall when the table falls; nothing is clamped).
6. ``n < c_1``: linear scaling from the smallest measured count, ``t(n) = n / c_1 * t(c_1)`` (this covers
   fractional GPU counts).
7. Only one measured count ``c``: ideal linear scaling ``t(n) = t(c) * n / c`` for every ``n``.
8. Global batch ``B`` equal to a row's batch size: that row with rules 3-7. ``B_lo < B < B_hi`` (two adjacent
   rows): apply rules 3-7 in each row, convert to samples/s (``S = it/s * batch``), interpolate ``S`` linearly in
   ``log2(batch)``, and return ``S / B``. ``B`` outside the measured batch range: the samples/s of the nearest
   row (rules 3-7) held constant, it/s ``= S_nearest / B``. A table whose only batch size is 0 (a Gavel type
   without a batch in its name) accepts only ``batch=None`` (``ValueError`` otherwise).
9. ``consolidated=False``: a table with ``its_unconsolidated`` uses that matrix, with each NaN cell filled from
   the consolidated matrix, under rules 2-8. A table without it returns the consolidated throughput times
   :data:`UNCONSOLIDATED_FACTOR` for ``n > 1``, and the consolidated throughput for ``n <= 1`` (one GPU, or a
   share of one, cannot be spread over nodes; in the Gavel data scale-1 unconsolidated == consolidated for all
   78 worker/job-type entries).

``measured_counts(batch)`` lists the counts measured in the row used for ``batch`` (the first row for None, the
nearest row outside the batch range) or, between two rows, the counts measured in both; ``max_measured_count``
is the largest of them.

Loaders are cached per (resolved path, mtime); the tables they return are immutable (read-only arrays).
"""

from __future__ import annotations

import ast
import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from ..core.errors import InputError, UnknownNameError
from ..data.registry import dataset, locate

ELASTICFLOW_DATASET = "elasticflow-throughputs"
ELASTICFLOW_GPUS = ("A100", "T4")
GAVEL_DATASET = "gavel-traces"
GAVEL_FILE = "simulation_throughputs.json"
GAVEL_WORKERS = ("k80", "p100", "v100")

# Unconsolidated / consolidated steps/s for a job spread over more nodes than needed. Median of N = 165 ratios
# over all (worker type in k80/p100/v100, job type, scale factor > 1) with both values measured (> 0) in
# gavel-traces/simulation_throughputs.json (Gavel @ c4fa400); the ratios range 0.105-1.355, median 0.73850.
UNCONSOLIDATED_FACTOR = 0.739

_BATCH_IN_NAME = re.compile(r"^(.*?)\s*\(batch size (\d+)\)\s*$")
_NOT_MEASURED = ("", "nan")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _check_positive(value: float, name: str) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return value


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _count_rule(counts: np.ndarray, row: np.ndarray, n: float) -> float:
    """Rules 3-7 of the module docstring on one batch row (NaN cells are not measured)."""
    measured = ~np.isnan(row)
    c = counts[measured].astype(np.float64)
    t = row[measured]
    k = len(c)
    i = int(np.searchsorted(c, n))
    if i < k and c[i] == n:
        return float(t[i])
    if k == 1 or i == 0:
        return float(t[0] * (n / c[0]))
    if i == k:
        r = (t[-1] / t[-2]) ** (1.0 / math.log2(c[-1] / c[-2]))
        return float(t[-1] * r ** math.log2(n / c[-1]))
    lo, hi = i - 1, i
    return float(t[lo] + (n - c[lo]) / (c[hi] - c[lo]) * (t[hi] - t[lo]))


@dataclass(frozen=True, eq=False)
class ScalingTable:
    """Measured iterations/s of one model on one GPU type vs GPU count (and global batch size).

    Rules for :meth:`throughput` are in the module docstring. ``eq=False``: tables compare by identity (numpy
    fields have no single truth value).
    """

    source: str  # e.g. "elasticflow/T4", "gavel/v100"
    gpu: str  # GPU type label as in the source ("T4", "A100", "v100", ...)
    model: str  # model / job type name as in the source
    batch_sizes: (
        np.ndarray
    )  # float64 [B] ascending global batch sizes (Gavel: one row, the name's batch or 0)
    counts: np.ndarray  # int64 [C] ascending GPU counts that have a column
    its: np.ndarray  # float64 [B, C] iterations/s; NaN = not measured
    its_unconsolidated: np.ndarray | None = (
        None  # same shape (Gavel only): spread over more nodes than needed
    )
    _merged: np.ndarray | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        batch = np.array(self.batch_sizes, dtype=np.float64, copy=True).reshape(-1)
        counts = np.array(self.counts, copy=True).reshape(-1)
        if counts.size and not np.all(np.equal(np.mod(counts, 1), 0)):
            raise ValueError(f"{self.model}: GPU counts must be integers, got {counts.tolist()}")
        counts = counts.astype(np.int64)
        its = np.array(self.its, dtype=np.float64, copy=True)
        if batch.size == 0 or counts.size == 0:
            raise ValueError(f"{self.model}: a table needs at least one batch size and one GPU count")
        if its.shape != (batch.size, counts.size):
            raise ValueError(f"{self.model}: its has shape {its.shape}, expected {(batch.size, counts.size)}")
        if not np.all(np.isfinite(batch)) or np.any(np.diff(batch) <= 0) or batch[0] < 0:
            raise ValueError(f"{self.model}: batch sizes must be finite and strictly ascending, got {batch}")
        if batch[0] == 0 and batch.size > 1:
            raise ValueError(f"{self.model}: batch size 0 (unknown) is only allowed in a one-row table")
        if counts[0] < 1 or np.any(np.diff(counts) <= 0):
            raise ValueError(f"{self.model}: GPU counts must be >= 1 and strictly ascending, got {counts}")
        unc = None
        if self.its_unconsolidated is not None:
            unc = np.array(self.its_unconsolidated, dtype=np.float64, copy=True)
            if unc.shape != its.shape:
                raise ValueError(
                    f"{self.model}: its_unconsolidated has shape {unc.shape}, expected {its.shape}"
                )
        for name, matrix in (("its", its), ("its_unconsolidated", unc)):
            if matrix is not None and np.any(~np.isnan(matrix) & ~(np.isfinite(matrix) & (matrix > 0))):
                raise ValueError(
                    f"{self.model}: {name} cells must be NaN (not measured) or positive and finite"
                )
        if np.any(np.isnan(its).all(axis=1)):
            raise ValueError(f"{self.model}: every batch row needs at least one measured GPU count")
        object.__setattr__(self, "batch_sizes", _readonly(batch))
        object.__setattr__(self, "counts", _readonly(counts))
        object.__setattr__(self, "its", _readonly(its))
        if unc is not None:
            object.__setattr__(self, "its_unconsolidated", _readonly(unc))
            object.__setattr__(self, "_merged", _readonly(np.where(np.isnan(unc), its, unc)))

    # -- queries ---------------------------------------------------------------------------------------------
    def _matrix(self, consolidated: bool) -> np.ndarray:
        return self.its if consolidated or self._merged is None else self._merged

    def _rows(self, batch: float | None) -> tuple[int, int, float]:
        """(lo, hi, w) for ``batch``: lo == hi for an exact row or outside the range, else log2 weight w of hi."""
        if batch is None:
            return 0, 0, 0.0
        batch = _check_positive(batch, "batch")
        bs = self.batch_sizes
        if bs[0] == 0:
            raise ValueError(
                f"{self.source} {self.model}: the table has no batch size (0); call with batch=None"
            )
        hi = int(np.searchsorted(bs, batch))
        if hi < len(bs) and bs[hi] == batch:
            return hi, hi, 0.0
        if hi == 0:
            return 0, 0, 0.0
        if hi == len(bs):
            return hi - 1, hi - 1, 0.0
        w = (math.log2(batch) - math.log2(bs[hi - 1])) / (math.log2(bs[hi]) - math.log2(bs[hi - 1]))
        return hi - 1, hi, w

    def throughput(self, num_gpus: float, batch: float | None = None, consolidated: bool = True) -> float:
        """Iterations/s on ``num_gpus`` GPUs at global batch ``batch`` (rules 1-9 of the module docstring)."""
        n = _check_positive(num_gpus, "num_gpus")
        lo, hi, w = self._rows(batch)
        matrix = self._matrix(consolidated)
        factor = 1.0
        if not consolidated and self._merged is None and n > 1:
            factor = UNCONSOLIDATED_FACTOR
        t_lo = _count_rule(self.counts, matrix[lo], n)
        if batch is None or self.batch_sizes[lo] == batch:
            return t_lo * factor
        b_lo = float(self.batch_sizes[lo])
        if lo == hi:  # outside the measured batch range: samples/s of the nearest row held constant
            return t_lo * b_lo / float(batch) * factor
        b_hi = float(self.batch_sizes[hi])
        s_lo = t_lo * b_lo
        s_hi = _count_rule(self.counts, matrix[hi], n) * b_hi
        return (s_lo + w * (s_hi - s_lo)) / float(batch) * factor

    def measured_counts(self, batch: float | None = None, consolidated: bool = True) -> np.ndarray:
        """GPU counts measured in the row used for ``batch`` (between two rows: measured in both)."""
        lo, hi, _ = self._rows(batch)
        matrix = self._matrix(consolidated)
        measured = ~np.isnan(matrix[lo]) & ~np.isnan(matrix[hi])
        return self.counts[measured].copy()

    def max_measured_count(self, batch: float | None = None, consolidated: bool = True) -> int:
        """The largest GPU count in :meth:`measured_counts`."""
        counts = self.measured_counts(batch, consolidated)
        if counts.size == 0:
            raise ValueError(f"{self.source} {self.model}: no GPU count is measured in both bracketing rows")
        return int(counts[-1])


# -- file helpers --------------------------------------------------------------------------------------------


def _stat_file(path: Path, expected: str) -> tuple[str, int]:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InputError(path, None, None, "file not found") from None
    except OSError as exc:
        raise InputError(
            path, None, None, f"cannot read the file: {_one_line(exc.strerror or exc)}"
        ) from None
    if path.is_dir():
        raise InputError(path, None, None, f"is a directory, expected {expected}")
    return str(path.resolve()), st.st_mtime_ns


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(
            path, None, None, f"cannot read the file: {_one_line(exc.strerror or exc)}"
        ) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(path, None, None, f"not UTF-8 text (byte {exc.start})") from None


def _cell(path: Path, line: int, column: str, text: str) -> float:
    """One throughput cell: NaN when not measured (empty, nan, 0); InputError when negative/non-numeric."""
    text = text.strip()
    if text.lower() in _NOT_MEASURED:
        return math.nan
    try:
        value = float(text)
    except ValueError:
        raise InputError(path, line, column, f"not a number: {_one_line(text)!r}") from None
    return _measured(
        value, lambda: InputError(path, line, column, f"{_POSITIVE} (or nan/0 = not measured), got {text}")
    )


# -- ElasticFlow ---------------------------------------------------------------------------------------------


@cache
def _elasticflow_file(resolved: str, mtime_ns: int, gpu: str) -> ScalingTable:
    path = Path(resolved)
    reader = csv.reader(io.StringIO(_read_text(path), newline=""))
    header = [c.strip() for c in next(reader, [])]
    if not any(header):
        raise InputError(path, 1, None, "empty header, expected 'global_batch_size,1,2,4,...'")
    if header[0] != "global_batch_size":
        raise InputError(path, 1, header[0], "the first header column must be 'global_batch_size'")
    if len(header) < 2:
        raise InputError(
            path, 1, None, "missing GPU-count header columns (expected 'global_batch_size,1,2,...')"
        )
    counts: list[int] = []
    for name in header[1:]:
        if not (name.isascii() and name.isdigit()) or int(name) < 1:
            raise InputError(path, 1, name, "GPU-count header columns must be positive integers")
        if int(name) in counts:
            raise InputError(path, 1, name, "repeated GPU-count column")
        counts.append(int(name))
    batches: dict[float, int] = {}
    values: list[list[float]] = []
    for row in reader:
        line = reader.line_num
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise InputError(path, line, None, f"expected {len(header)} cells, got {len(row)}")
        text = row[0].strip()
        try:
            batch = float(text)
        except ValueError:
            raise InputError(path, line, header[0], f"not a number: {_one_line(text)!r}") from None
        if not math.isfinite(batch) or batch <= 0:
            raise InputError(path, line, header[0], f"batch size must be a positive number, got {text}")
        if batch in batches:
            raise InputError(
                path, line, header[0], f"repeated batch size {text} (first on line {batches[batch]})"
            )
        cells = [_cell(path, line, name, cell) for name, cell in zip(header[1:], row[1:], strict=True)]
        if all(math.isnan(c) for c in cells):
            raise InputError(path, line, None, "no measured throughput in this row")
        batches[batch] = line
        values.append(cells)
    if not values:
        raise InputError(path, None, None, "no data rows after the header")
    order = np.argsort(np.array(list(batches)))
    col = np.argsort(np.array(counts))
    return ScalingTable(
        source=f"elasticflow/{gpu}",
        gpu=gpu,
        model=path.stem,
        batch_sizes=np.array(list(batches), dtype=np.float64)[order],
        counts=np.array(counts, dtype=np.int64)[col],
        its=np.array(values, dtype=np.float64)[order][:, col],
    )


def _read_elasticflow(path: Path, gpu: str) -> ScalingTable:
    return _elasticflow_file(*_stat_file(path, "an ElasticFlow throughput CSV"), gpu)


def elasticflow_tables(
    gpu: str, data_dir: str | Path | None = None, path: str | Path | None = None
) -> dict[str, ScalingTable]:
    """Model name (file stem) -> table for one ElasticFlow GPU type (``ELASTICFLOW_GPUS``).

    Without ``path`` the files listed for ``throughputs_<gpu>/`` in the dataset registry are located through
    ``data_dir`` / ``WATTSCHED_DATA`` / the download cache. ``path`` reads one CSV file, or every ``*.csv`` in
    a directory, directly (e.g. test fixtures).
    """
    if gpu not in ELASTICFLOW_GPUS:
        raise UnknownNameError("ElasticFlow GPU type", gpu, ELASTICFLOW_GPUS)
    if path is not None:
        path = Path(path)
        if path.is_dir():
            files = sorted(path.glob("*.csv"))
            if not files:
                raise InputError(path, None, None, "no *.csv throughput tables in this directory")
        else:
            files = [path]
    else:
        prefix = f"throughputs_{gpu}/"
        rels = [f.path for f in dataset(ELASTICFLOW_DATASET).files if f.path.startswith(prefix)]
        files = [locate(ELASTICFLOW_DATASET, rel, data_dir) for rel in rels]
    return {f.stem: _read_elasticflow(f, gpu) for f in files}


# -- Gavel ---------------------------------------------------------------------------------------------------


def parse_gavel_type(job_type: str) -> tuple[str, int]:
    """``'ResNet-50 (batch size 64)'`` -> ``('ResNet-50', 64)``; a name without a batch -> ``(name, 0)``."""
    match = _BATCH_IN_NAME.match(job_type)
    if match is None:
        return job_type.strip(), 0
    return match.group(1), int(match.group(2))


def _gavel_key(path: Path, worker: str, key: object) -> tuple[str, int]:
    try:
        parsed = ast.literal_eval(key) if isinstance(key, str) else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        parsed = None
    if (
        not isinstance(parsed, tuple)
        or len(parsed) != 2
        or not isinstance(parsed[0], str)
        or isinstance(parsed[1], bool)
        or not isinstance(parsed[1], int)
        or parsed[1] < 1
    ):
        raise InputError(
            path, None, worker, f"key {_one_line(key)!r} is not \"('<job type>', <scale factor >= 1>)\""
        )
    return parsed[0], parsed[1]


def _gavel_value(path: Path, worker: str, where: str, value: object) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(path, None, worker, f"{where}: expected a number, got {_one_line(value)!r}")
    value = float(value)
    return _measured(
        value,
        lambda: InputError(path, None, worker, f"{where}: {_POSITIVE} (or 0 = not measured), got {value}"),
    )


_POSITIVE = "throughput must be positive"


def _measured(value: float, error) -> float:
    """A throughput cell: NaN or 0 mean "not measured" (NaN); negative or infinite is the input's error."""
    if math.isnan(value) or value == 0:
        return math.nan
    if not math.isfinite(value) or value < 0:
        raise error()
    return value


_Entry = tuple[float, dict[tuple[str, int], tuple[float, float]]]


@cache
def _gavel_file(resolved: str, mtime_ns: int) -> dict[str, dict[tuple[str, int], _Entry]]:
    """worker key -> (job type, scale) -> (steps/s alone or NaN, {(other type, scale): (mine, theirs)})."""
    path = Path(resolved)
    try:
        raw = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, None, f"invalid JSON: {_one_line(exc.msg)}") from None
    except RecursionError:
        raise InputError(path, None, None, "invalid JSON: nested too deeply") from None
    if not isinstance(raw, dict):
        raise InputError(path, None, None, "expected a JSON object of worker types at the top level")
    out: dict[str, dict[tuple[str, int], _Entry]] = {}
    for worker, table in raw.items():
        if not isinstance(table, dict):
            raise InputError(path, None, worker, "expected an object of job entries")
        entries: dict[tuple[str, int], _Entry] = {}
        for key, entry in table.items():
            job = _gavel_key(path, worker, key)
            if not isinstance(entry, dict) or "null" not in entry:
                raise InputError(path, None, worker, f"entry {key!r}: expected an object with a 'null' key")
            alone = _gavel_value(path, worker, f"entry {key!r}", entry["null"])
            pairs: dict[tuple[str, int], tuple[float, float]] = {}
            for other_key, pair in entry.items():
                if other_key == "null":
                    continue
                other = _gavel_key(path, worker, other_key)
                where = f"entry {key!r} pair {other_key!r}"
                if not isinstance(pair, list) or len(pair) != 2:
                    raise InputError(path, None, worker, f"{where}: expected [steps/s, other's steps/s]")
                pairs[other] = (
                    _gavel_value(path, worker, where, pair[0]),
                    _gavel_value(path, worker, where, pair[1]),
                )
            entries[job] = (alone, pairs)
        out[worker] = entries
    return out


def _gavel_source(worker: str, data_dir: str | Path | None, path: str | Path | None) -> tuple[str, int]:
    """(resolved path, mtime) of the Gavel file holding ``worker``; errors for unknown or absent workers."""
    if worker not in GAVEL_WORKERS:
        raise UnknownNameError("Gavel worker type", worker, GAVEL_WORKERS)
    path = Path(path) if path is not None else locate(GAVEL_DATASET, GAVEL_FILE, data_dir)
    resolved, mtime = _stat_file(path, "a Gavel throughputs JSON file")
    parsed = _gavel_file(resolved, mtime)
    if worker not in parsed:
        raise InputError(path, None, None, f"no worker type '{worker}' (have: {', '.join(sorted(parsed))})")
    return resolved, mtime


@cache
def _gavel_tables(resolved: str, mtime_ns: int, worker: str) -> dict[str, ScalingTable]:
    parsed = _gavel_file(resolved, mtime_ns)
    cons = parsed[worker]
    unc = parsed.get(f"{worker}_unconsolidated")
    types: dict[str, set[int]] = {}
    for source in (cons, unc or {}):
        for job_type, scale in source:
            types.setdefault(job_type, set()).add(scale)
    out: dict[str, ScalingTable] = {}
    for job_type, scales in types.items():
        counts = np.array(sorted(scales), dtype=np.int64)
        its = np.array([[cons.get((job_type, int(s)), (math.nan,))[0] for s in counts]])
        if np.isnan(its).all():
            raise InputError(resolved, None, worker, f"job type {job_type!r} has no measured throughput")
        its_unc = None
        if unc is not None:
            its_unc = np.array([[unc.get((job_type, int(s)), (math.nan,))[0] for s in counts]])
        out[job_type] = ScalingTable(
            source=f"gavel/{worker}",
            gpu=worker,
            model=job_type,
            batch_sizes=np.array([float(parse_gavel_type(job_type)[1])]),
            counts=counts,
            its=its,
            its_unconsolidated=its_unc,
        )
    return out


def gavel_tables(
    worker: str, data_dir: str | Path | None = None, path: str | Path | None = None
) -> dict[str, ScalingTable]:
    """Job type -> one-row table of steps/s running alone on ``worker`` (``GAVEL_WORKERS``), with
    ``its_unconsolidated`` from ``<worker>_unconsolidated`` when the file has it. ``path`` reads a given
    ``simulation_throughputs.json`` directly; otherwise it is located through the dataset registry."""
    return dict(_gavel_tables(*_gavel_source(worker, data_dir, path), worker))


def gavel_pairs(
    worker: str, data_dir: str | Path | None = None, path: str | Path | None = None
) -> dict[tuple[str, str], tuple[float, float]]:
    """(a type, b type) -> (a's steps/s, b's steps/s) when a and b share one ``worker`` GPU (both scale 1);
    only pairs with both values measured (> 0)."""
    parsed = _gavel_file(*_gavel_source(worker, data_dir, path))
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for (job_type, scale), (_, pairs) in parsed[worker].items():
        if scale != 1:
            continue
        for (other, other_scale), (mine, theirs) in pairs.items():
            if other_scale == 1 and not math.isnan(mine) and not math.isnan(theirs):
                out[(job_type, other)] = (mine, theirs)
    return out
