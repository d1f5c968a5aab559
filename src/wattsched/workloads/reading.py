"""Reading a trace file as a table, shared by every reader: :func:`read_table` first checks that every non-blank
row has as many fields as the header, in time linear in the file size (numpy over the raw bytes; the csv module when
the file has quoted fields), so that a malformed row is an :class:`InputError` naming its line instead of a shifted
or padded row; and the finishing steps every reader shares (bad rows dropped or raised, columns cast, submit times
re-based so that the earliest is 0 s: ``_finish``).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import InputError
from ..core.jobs import JobTable
from .validate import (
    LoadedWorkload,
    RowValidator,
    is_missing,
    one_line,
)

if TYPE_CHECKING:
    import pandas as pd

_WHITESPACE = " \t\r\n\v\f"  # what bytes.strip() removes; a line of only these is blank
_SPACE = np.frombuffer(_WHITESPACE.encode(), dtype=np.uint8)


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
    import pandas as pd

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
    import pandas as pd

    return pd.Series(col, copy=False).astype(str).str.strip().to_numpy(dtype=object)


def _rebase(submit: np.ndarray) -> tuple[np.ndarray, float]:
    """Shift submit times so the earliest finite one is 0; returns the shifted times and the offset."""
    finite = np.isfinite(submit)
    if not finite.any():
        return submit, np.nan
    origin = float(submit[finite].min())
    return submit - origin, origin


def _iso_utc(epoch_s: float) -> str | None:
    import pandas as pd

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
    import pandas as pd

    return (prefix + pd.Series(lines - first_data_line, copy=False).astype(str)).to_numpy(dtype=object)
