"""``sacct`` output (``--parsable2`` or ``--json``) read into a :class:`SlurmHistory` (docs/whatif.md §2).

The parsable reader streams: the file is read in blocks of whole lines, each block checked (UTF-8, NUL bytes,
field counts, with file lines in the errors) and parsed column-wise by pyarrow, and only the per-job columns
are kept, so a history of a million jobs and their steps is read in bounded memory besides the jobs themselves.

Folding rules (the same for both formats):

- a step (``123.batch``, ``123.extern``, ``123.0``, ``123_4.batch``) is never a job: its ConsumedEnergyRaw is
  summed into its job's when the job's own line has none;
- an array task (``123_4``) is a job with id ``123_4``; a pending array range (``123_[5-10]``) is one pending job;
- the components of a heterogeneous job (``123+0``, ``123+1``) fold into one job ``123``: GPUs, nodes and energy
  summed, the earliest submit and start, the latest end, the leader's (``+0``) state, user and partition;
- a job listed several times (``sacct --duplicates``: requeued, preempted or node-failed runs) keeps its last
  record, the count of earlier ones goes to the notes;
- a job that never started (``Start`` Unknown/None) is kept with ``start_s`` NaN.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...core.errors import InputError, WattschedError
from ..reading import _field_count_error, _line_at
from ..validate import one_line
from . import JOB_STATES, RECORDED_COLUMNS, SlurmHistory
from ._slurm_text import DURATION_PATTERN, MEMORY_UNITS_MIB, STATE_ALIASES, map_state, parse_duration

# Columns beyond RECORDED_COLUMNS that the readers also fill (what the replay's job table can use).
EXTRA_COLUMNS = (
    "num_cpu",  # int: CPUs allocated (AllocTRES cpu=), 0 when not recorded
    "memory_mib",  # float: memory allocated (AllocTRES mem=), NaN when not recorded
    "gpu_type",  # str: Slurm's GPU type name from gres/gpu:<type>= ("" when untyped)
    "requeues",  # int: earlier records of the job dropped (sacct --duplicates)
)

# sacct --format for the parsable reader (docs/whatif.md §1).
SACCT_FIELDS = (
    "JobID", "JobIDRaw", "User", "Account", "Partition", "Submit", "Start", "End", "Elapsed", "State",
    "AllocTRES", "ReqTRES", "NodeList", "NNodes", "Timelimit", "ConsumedEnergyRaw",
)  # fmt: skip
REQUIRED_FIELDS = ("JobID", "Submit", "Start", "End", "State")
# Read when present (besides SACCT_FIELDS): ElapsedRaw (s) and TimelimitRaw (min) are exact where the text
# forms are not needed.
OPTIONAL_EXTRA_FIELDS = ("ElapsedRaw", "TimelimitRaw")
_USED_FIELDS = tuple(dict.fromkeys(SACCT_FIELDS + OPTIONAL_EXTRA_FIELDS))

BLOCK_BYTES = 16 << 20
NOT_A_TIME = ("Unknown", "None", "", "N/A")

_JOBID_PATTERN = r"^(?P<key>[^.+\s]+)(?P<het>\+[0-9]+)?(?P<step>\.[^\s]+)?$"
_EPOCH_PATTERN = r"^[0-9]+$"

Progress = Callable[[int, int], None]


def read_sacct(
    path: str | Path, fmt: str = "auto", progress: Progress | None = None, tz: str = "UTC"
) -> SlurmHistory:
    """Read ``sacct --parsable2`` or ``sacct --json`` output.

    ``fmt``: ``auto`` (JSON when the file starts with ``{``), ``parsable2`` or ``json``. ``tz``: the time zone
    of sacct's timestamps (it writes local wall time without a zone; UTC by default; an IANA name such as
    ``Europe/Berlin``); JSON times are epoch seconds and need none. ``progress(bytes_done, bytes_total)`` is
    called after each block.
    """
    path = Path(path)
    if fmt not in ("auto", "parsable2", "json"):
        raise ValueError(f"fmt must be auto, parsable2 or json, got {fmt!r}")
    _check_tz(tz)
    first = _first_bytes(path)
    if fmt == "auto":
        fmt = "json" if first.lstrip()[:1] in (b"{", b"[") else "parsable2"
    if fmt == "json":
        return _read_json(path, progress)
    return _read_parsable(path, progress, tz)


# -- shared ----------------------------------------------------------------------------------------------------


def _check_tz(tz: str) -> None:
    import pandas as pd

    try:
        pd.Timestamp(0).tz_localize(tz)
    except Exception:
        raise WattschedError(
            f"unknown time zone {tz!r} (an IANA name such as UTC or Europe/Berlin)"
        ) from None


def _first_bytes(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except FileNotFoundError:
        raise InputError(path, None, None, "file not found") from None
    except IsADirectoryError:
        raise InputError(path, None, None, "is a directory, expected sacct output") from None
    except OSError as exc:
        raise InputError(path, None, None, f"cannot read the file: {one_line(exc.strerror or exc)}") from None
    if not head.strip():
        raise InputError(path, 1, None, "file is empty")
    return head


def _finish(
    cols: dict[str, np.ndarray], path: Path, notes: list[str], state_raw_unknown: dict[str, int]
) -> SlurmHistory:
    """Fold heterogeneous components, re-base times, count states. ``cols`` holds one array per name of
    ``_JOB_FRAME_COLUMNS`` over the kept records: ``key``, ``het`` (component offset, -1 when not heterogeneous),
    epoch-second times, ... The arrays are taken over (replaced one at a time, so that memory stays near the
    output's size)."""
    import pandas as pd

    if len(cols["key"]) == 0:
        raise InputError(path, None, None, "contains no jobs (only job steps or a header)")
    het_mask = cols["het"] >= 0
    if het_mask.any():
        _fold_het(cols, het_mask, notes)
    for name in ("key", "user", "account", "partition", "state", "node_list", "gpu_type"):
        cols[name] = _text_column(cols[name])
    submit = _owned(cols.pop("submit_epoch"), np.float64)
    origin = float(np.nanmin(submit))
    submit = submit - origin
    start = cols.pop("start_epoch").astype(np.float64, copy=False) - origin
    end = cols.pop("end_epoch").astype(np.float64, copy=False) - origin
    n = len(submit)
    # Slurm 22.05 prints a job cancelled while pending with Start = End (the cancel time) and NodeList "None
    # assigned" (NNodes is the request): it never ran, like a Start of Unknown.
    unallocated = (cols["node_list"] == "") & (start == end)
    cancelled_pending = int(unallocated.sum())
    if cancelled_pending:
        start = np.where(unallocated, np.nan, start)
        notes.append(
            f"{cancelled_pending} job(s) with Start = End, NodeList None assigned (cancelled while pending) "
            "taken as never started"
        )
    data = {
        "job_id": cols.pop("key"),
        "user": cols.pop("user"),
        "account": cols.pop("account"),
        "partition": cols.pop("partition"),
        "state": cols.pop("state"),
        "submit_s": submit,
        "start_s": start,
        "end_s": end,
        "wait_s": start - submit,
        "elapsed_s": _owned(cols.pop("elapsed_s"), np.float64),
        "timelimit_s": _owned(cols.pop("timelimit_s"), np.float64),
        "num_gpu": _owned(cols.pop("num_gpu"), np.int64),
        "num_nodes": _owned(cols.pop("num_nodes"), np.int64),
        "node_list": cols.pop("node_list"),
        "energy_j": _owned(cols.pop("energy_j"), np.float64),
        "measured_power_w": np.full(n, np.nan),
        "num_cpu": _owned(cols.pop("num_cpu"), np.int64),
        "memory_mib": _owned(cols.pop("memory_mib"), np.float64),
        "gpu_type": cols.pop("gpu_type"),
        "requeues": _owned(cols.pop("requeues"), np.int64),
    }
    cols.clear()
    recorded = pd.DataFrame(data, columns=[*RECORDED_COLUMNS, *EXTRA_COLUMNS], copy=False)
    del data
    states, counts = np.unique(recorded["state"].to_numpy(dtype=object).astype(str), return_counts=True)
    found = dict(zip(states.tolist(), counts.tolist(), strict=True))
    state_counts = {s: int(found[s]) for s in JOB_STATES if s in found}
    if state_raw_unknown:
        listed = ", ".join(f"{k} ({v})" for k, v in sorted(state_raw_unknown.items()))
        notes.append(f"states not in Slurm's list counted as OTHER: {listed}")
    never = int(np.isnan(start).sum())
    if never:
        notes.append(f"{never} job(s) never started: kept with start_s NaN")
    energy = recorded["energy_j"].to_numpy()
    if np.isfinite(energy).any():
        notes.append(f"ConsumedEnergyRaw recorded for {int(np.isfinite(energy).sum())} of {n} jobs")
    else:
        notes.append("no job has ConsumedEnergyRaw (no acct_gather_energy plugin): energy_j is NaN")
    notes.append("times re-based: the earliest submission is 0 s")
    origin_iso = pd.Timestamp(origin, unit="s", tz="UTC").isoformat()
    return SlurmHistory(
        recorded=recorded,
        time_origin_utc=origin_iso,
        state_counts=state_counts,
        notes=notes,
        source=str(path),
    )


_JOB_FRAME_COLUMNS = (
    "key", "het", "line", "user", "account", "partition", "state", "submit_epoch", "start_epoch", "end_epoch",
    "elapsed_s", "timelimit_s", "num_gpu", "num_nodes", "node_list", "energy_j", "num_cpu", "memory_mib",
    "gpu_type", "requeues",
)  # fmt: skip


def _owned(values: np.ndarray, dtype) -> np.ndarray:
    """``values`` as a writable array of ``dtype`` (arrays viewed from Arrow are read-only), copied only if
    needed."""
    out = np.asarray(values).astype(dtype, copy=False)
    return out if out.flags.writeable else out.copy()


def _text_column(values: np.ndarray) -> np.ndarray:
    """An object array of str ("" where missing)."""
    out = np.asarray(values, dtype=object)
    import pandas as pd

    missing = np.asarray(pd.isna(out), dtype=bool)
    if missing.any() or not out.flags.writeable:
        out = out.copy()
        out[missing] = ""
    return out


def _fold_het(cols: dict[str, np.ndarray], het_mask: np.ndarray, notes: list[str]) -> None:
    """One row per heterogeneous job (sums and extremes over its components, the leader's labels), in place."""
    import pandas as pd

    het = pd.DataFrame({name: cols[name][het_mask] for name in _JOB_FRAME_COLUMNS})
    het = het.sort_values(["key", "het"], kind="stable")
    grouped = het.groupby("key", sort=False)

    def nan_min(s):
        return s.min(skipna=True)

    def nan_sum(s):
        return s.sum(min_count=1)

    def joined(s):
        return ",".join(dict.fromkeys(str(x) for x in s if x))

    folded = grouped.agg(
        het=("het", "min"),
        line=("line", "first"),
        user=("user", "first"),
        account=("account", "first"),
        partition=("partition", joined),
        state=("state", "first"),
        submit_epoch=("submit_epoch", nan_min),
        start_epoch=("start_epoch", nan_min),
        end_epoch=("end_epoch", "max"),
        elapsed_s=("elapsed_s", "max"),
        timelimit_s=("timelimit_s", "max"),
        num_gpu=("num_gpu", "sum"),
        num_nodes=("num_nodes", "sum"),
        node_list=("node_list", joined),
        energy_j=("energy_j", nan_sum),
        num_cpu=("num_cpu", "sum"),
        memory_mib=("memory_mib", nan_sum),
        gpu_type=("gpu_type", lambda s: next((x for x in s if x), "")),
        requeues=("requeues", "sum"),
    ).reset_index()
    span = (folded["end_epoch"] - folded["start_epoch"]).to_numpy()
    elapsed = folded["elapsed_s"].to_numpy()
    folded["elapsed_s"] = np.where(np.isfinite(span), np.maximum(span, elapsed), elapsed)
    folded["het"] = -1
    notes.append(
        f"{len(folded)} heterogeneous job(s) ({len(het)} components, e.g. JobID {folded['key'].iloc[0]}+0) folded "
        "into one job each: GPUs, nodes and energy summed, earliest submit and start, latest end, the leader's state"
    )
    lines = np.concatenate([cols["line"][~het_mask], folded["line"].to_numpy()])
    order = np.argsort(lines, kind="stable")
    for name in _JOB_FRAME_COLUMNS:  # one column at a time: the old array is freed before the next
        merged = np.concatenate([np.asarray(cols[name])[~het_mask], folded[name].to_numpy()])
        cols[name] = merged[order]


# -- parsable2 -------------------------------------------------------------------------------------------------


def _read_parsable(path: Path, progress: Progress | None, tz: str) -> SlurmHistory:
    import pyarrow as pa

    total = path.stat().st_size
    notes: list[str] = [f"read as sacct --parsable2 output; timestamps taken as local time in {tz}"]
    with path.open("rb") as f:
        header_bytes = f.readline()
        header = _header(path, header_bytes)
        columns = [c for c in header if c]
        missing = [c for c in REQUIRED_FIELDS if c not in columns]
        found = one_line(", ".join(columns))
        if missing:
            hint = " (is this sacct --parsable2 output with its header line? see docs/whatif.md §1)"
            raise InputError(path, 1, missing[0], f"missing required column (found: {found}){hint}")
        if "AllocTRES" not in columns and "ReqTRES" not in columns:
            raise InputError(path, 1, "AllocTRES", f"missing required column (found: {found}); or ReqTRES")
        absent = [c for c in SACCT_FIELDS if c not in columns]
        if absent:
            notes.append("sacct fields not in the file (left empty): " + ", ".join(absent))
        names = _unique_names(header)
        state = _BlockState()
        job_tables: list[pa.Table] = []
        step_tables: list[pa.Table] = []
        first_line = 2
        done = len(header_bytes)
        carry = b""
        while True:
            data = f.read(BLOCK_BYTES)
            if not data:
                block, carry = carry, b""
            else:
                data = carry + data
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    carry = data
                    continue
                block, carry = data[:cut], data[cut:]
            if block:
                jobs_t, steps_t, n_lines = _parse_block(path, block, first_line, names, state, tz)
                if jobs_t is not None:
                    job_tables.append(jobs_t)
                if steps_t is not None:
                    step_tables.append(steps_t)
                first_line += n_lines
                done += len(block)
                if progress is not None:
                    progress(done, total)
            if not data:
                break
    return _assemble(path, job_tables, step_tables, notes, state.unknown_states)


def _header(path: Path, header_bytes: bytes) -> list[str]:
    try:
        text = header_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, 1, None, f"not UTF-8 text: {exc}") from None
    text = text.rstrip("\r\n").lstrip("\ufeff")  # a byte-order mark, if an editor added one
    if not text.strip():
        raise InputError(path, 1, None, "the header line is empty (expected sacct's field names)")
    if "|" not in text and text.strip() not in REQUIRED_FIELDS:
        raise InputError(
            path, 1, None, "no '|' in the header line: expected sacct --parsable2 output (docs/whatif.md §1)"
        )
    fields = [c.strip() for c in text.split("|")]
    return fields


def _unique_names(header: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for i, name in enumerate(header):
        base = name or f"_empty{i}"  # `sacct --parsable` (-p) ends each line with '|': an empty last field
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return out


class _BlockState:
    """What one block hands the next: the last job record seen (its steps may continue into the next block)."""

    def __init__(self) -> None:
        self.last_record = ""
        self.last_line = 0
        self.unknown_states: dict[str, int] = {}


def _line_layout(path: Path, block: bytes, first_line: int, expected: int) -> np.ndarray:
    """Indices of the block's non-blank lines; raises for a line with the wrong number of fields."""
    buf = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    if ends.size == 0 or ends[-1] != len(block) - 1:
        ends = np.append(ends, len(block))
    starts = np.concatenate(([0], ends[:-1] + 1))
    seps = np.flatnonzero(buf == ord("|"))
    counts = np.diff(np.searchsorted(seps, ends), prepend=0) + 1
    odd = np.flatnonzero(counts != expected)
    blank = []
    for i in odd:  # blank lines (empty or whitespace) are allowed; few lines are odd
        if block[starts[i] : ends[i]].strip():
            err = _field_count_error(path, first_line + int(i), "|", expected, int(counts[i]))
            hint = ""
            if counts[i] > expected:
                hint = " (a '|' inside a field, e.g. JobName? leave it out of --format)"
            raise InputError(err.path, err.line, None, err.message + hint)
        blank.append(int(i))
    keep = np.ones(len(ends), dtype=bool)
    keep[blank] = False
    return np.flatnonzero(keep)


def _parse_block(
    path: Path,
    block: bytes,
    first_line: int,
    names: list[str],
    state: _BlockState,
    tz: str,
):
    """Parse one block of whole lines: (job rows, step energies, lines in the block)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    try:
        block.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            path, first_line - 1 + _line_at(block, exc.start), None, f"not UTF-8 text: {exc}"
        ) from None
    nul = block.find(b"\x00")
    if nul >= 0:
        raise InputError(
            path, first_line - 1 + _line_at(block, nul), None, "contains a NUL byte: not a text file"
        )
    n_lines = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
    kept = _line_layout(path, block, first_line, len(names))
    if kept.size == 0:
        return None, None, n_lines
    if kept.size != n_lines:  # drop blank lines (rare) so that pyarrow sees whole rows only
        lines_text = block.split(b"\n")
        block = b"\n".join(lines_text[i] for i in kept) + b"\n"
    lines = (first_line + kept).astype(np.int64)
    include = [n for n in names if n in _USED_FIELDS]
    table = pacsv.read_csv(
        pa.py_buffer(block),
        read_options=pacsv.ReadOptions(column_names=names, use_threads=True),
        parse_options=pacsv.ParseOptions(
            delimiter="|", quote_char=False, double_quote=False, escape_char=False
        ),
        convert_options=pacsv.ConvertOptions(
            include_columns=include,
            column_types=dict.fromkeys(include, pa.string()),
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    errors = _Errors(path, lines)

    def col(name: str):
        if name in table.column_names:
            return pc.utf8_trim_whitespace(table.column(name).combine_chunks())
        return pa.array([""] * table.num_rows, type=pa.string())

    jobid = col("JobID")
    parts = pc.extract_regex(jobid, _JOBID_PATTERN)
    bad_id = pc.is_null(parts).to_numpy(zero_copy_only=False)
    errors.flag(bad_id, "JobID", "{value!r} is not a Slurm job id (123, 123_4, 123+0, 123.batch)", jobid)
    errors.raise_first()
    key = pc.struct_field(parts, "key")
    het_text = pc.struct_field(parts, "het")
    step_text = pc.struct_field(parts, "step")
    is_step = pc.not_equal(step_text, "").to_numpy(zero_copy_only=False)
    record = pc.binary_join_element_wise(key, het_text, "")  # the job's id without the step

    # Steps: energy summed per (record, owner) where the owner is the nearest preceding job line of that record
    # (sacct prints each record's steps under it; with --duplicates a requeued job's runs each have theirs).
    idx = np.arange(len(lines))
    last_job = np.maximum.accumulate(np.where(~is_step, idx, -1))
    above = np.maximum(last_job, 0)
    same_as_above = _mask(pc.equal(pc.take(record, pa.array(above)), record))
    same_as_carried = _mask(pc.equal(record, state.last_record))  # rows above the block's first job line
    same = np.where(last_job >= 0, same_as_above, same_as_carried)
    owner_line = np.where(last_job >= 0, lines[above], state.last_line)
    owner_line = np.where(same, owner_line, 0)  # 0: no record above it (an orphan step)
    steps_t = None
    if is_step.any():
        energy_all = _numbers(errors, col("ConsumedEnergyRaw"), "ConsumedEnergyRaw", is_step)
        errors.raise_first()
        sel = np.flatnonzero(is_step)
        steps_t = (
            pa.table(
                {
                    "record": pc.take(record, pa.array(sel)),
                    "owner_line": pa.array(owner_line[sel], type=pa.int64()),
                    "energy": pa.array(energy_all[sel], type=pa.float64(), from_pandas=True),
                }
            )
            .group_by(["record", "owner_line"])
            .aggregate([("energy", "sum"), ("energy", "count")])
        )
    job_rows = np.flatnonzero(~is_step)
    if job_rows.size:
        state.last_record = str(record[int(job_rows[-1])].as_py())
        state.last_line = int(lines[job_rows[-1]])
    if job_rows.size == 0:
        return None, steps_t, n_lines

    take = pa.array(job_rows)
    jerr = _Errors(path, lines[job_rows])

    def jcol(name: str):
        return pc.take(col(name), take)

    submit = _timestamps(jerr, jcol("Submit"), "Submit", tz, required=True)
    start = _timestamps(jerr, jcol("Start"), "Start", tz)
    end = _timestamps(jerr, jcol("End"), "End", tz)
    elapsed = _durations(jerr, jcol("Elapsed"), "Elapsed")
    if "ElapsedRaw" in table.column_names:
        raw = _numbers(jerr, jcol("ElapsedRaw"), "ElapsedRaw")
        elapsed = np.where(np.isfinite(raw), raw, elapsed)
    timelimit = _durations(jerr, jcol("Timelimit"), "Timelimit")
    if "TimelimitRaw" in table.column_names:
        raw_min = _numbers(jerr, jcol("TimelimitRaw"), "TimelimitRaw", allow_words=True)
        timelimit = np.where(np.isfinite(raw_min), raw_min * 60.0, timelimit)
    no_elapsed = np.isnan(elapsed)
    if no_elapsed.any():
        run_end = end
        elapsed = np.where(no_elapsed & np.isfinite(start) & np.isfinite(run_end), run_end - start, elapsed)
        elapsed = np.where(np.isnan(elapsed) & np.isnan(start), 0.0, elapsed)
    states = _states(jerr, jcol("State"), state)
    alloc = jcol("AllocTRES")
    req = jcol("ReqTRES")
    tres = pc.if_else(pc.equal(alloc, ""), req, alloc)
    gpus, gpu_type, cpus, mem, tres_nodes = _tres(jerr, tres, "AllocTRES")
    nnodes = _numbers(jerr, jcol("NNodes"), "NNodes")
    nnodes = np.where(np.isfinite(nnodes), nnodes, tres_nodes)
    energy = _numbers(jerr, jcol("ConsumedEnergyRaw"), "ConsumedEnergyRaw")
    if "AllocTRES" in table.column_names:  # the job's ConsumedEnergyRaw is its allocation's energy TRES
        tres_energy = pc.struct_field(pc.extract_regex(alloc, _TRES_ENERGY), "n")
        tres_energy_j = pc.cast(pc.fill_null(tres_energy, "nan"), pa.float64()).to_numpy(zero_copy_only=False)
        energy = np.where(np.isnan(energy) | (energy == 0), tres_energy_j, energy)
    jerr.raise_first()
    het_num = pc.utf8_slice_codeunits(pc.take(het_text, take), 1)
    het = pc.cast(pc.if_else(pc.equal(het_num, ""), "-1", het_num), pa.int64())
    jobs_t = pa.table(
        {
            "key": pc.take(key, take),
            "record": pc.take(record, take),
            "het": het,
            "line": pa.array(lines[job_rows]),
            "user": pc.dictionary_encode(jcol("User")),
            "account": pc.dictionary_encode(jcol("Account")),
            "partition": pc.dictionary_encode(jcol("Partition")),
            "state": pc.dictionary_encode(pa.array(states, type=pa.string())),
            "submit_epoch": pa.array(submit),
            "start_epoch": pa.array(start),
            "end_epoch": pa.array(end),
            "elapsed_s": pa.array(elapsed),
            "timelimit_s": pa.array(timelimit),
            "num_gpu": pa.array(np.nan_to_num(gpus).astype(np.int64)),
            "num_nodes": pa.array(np.nan_to_num(nnodes).astype(np.int64)),
            "node_list": pc.dictionary_encode(
                pc.if_else(
                    pc.is_in(jcol("NodeList"), value_set=pa.array(["None assigned", "(null)", "None"])),
                    "",
                    jcol("NodeList"),
                )
            ),
            "line_energy": pa.array(energy),
            "num_cpu": pa.array(np.nan_to_num(cpus).astype(np.int64)),
            "memory_mib": pa.array(mem),
            "gpu_type": pc.dictionary_encode(gpu_type),
        }
    )
    return jobs_t, steps_t, n_lines


class _Errors:
    """The first bad value of a block, by file line (vectorised checks flag masks; one error is raised)."""

    def __init__(self, path: Path, lines: np.ndarray):
        self.path = path
        self.lines = lines
        self.best: tuple[int, str, str] | None = None

    def flag(self, mask: np.ndarray, field: str, template: str, values) -> None:
        if not mask.any():
            return
        i = int(np.flatnonzero(mask)[0])
        line = int(self.lines[i])
        if self.best is None or line < self.best[0]:
            value = values[i].as_py() if hasattr(values, "to_numpy") else values[i]
            self.best = (line, field, one_line(template.format(value=value)))

    def raise_first(self) -> None:
        if self.best is not None:
            line, field, message = self.best
            raise InputError(self.path, line, field, message)


def _mask(arr) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _timestamps(errors: _Errors, text, field: str, tz: str, required: bool = False) -> np.ndarray:
    """Epoch seconds of sacct's ``YYYY-MM-DDTHH:MM:SS`` (local wall time in ``tz``) or of plain epoch seconds
    (``SLURM_TIME_FORMAT=%s``); NaN for Unknown/None/empty."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parsed = pc.strptime(text, format="%Y-%m-%dT%H:%M:%S", unit="s", error_is_null=True)
    secs = pc.cast(parsed, pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64)
    is_epoch = _mask(pc.match_substring_regex(text, _EPOCH_PATTERN))
    if is_epoch.any():
        epoch = pc.cast(pc.if_else(pa.array(is_epoch), text, "0"), pa.float64()).to_numpy(
            zero_copy_only=False
        )
    missing = _mask(pc.is_in(text, value_set=pa.array(NOT_A_TIME)))
    bad = np.isnan(secs) & ~missing & ~is_epoch
    errors.flag(bad, field, "{value!r} is not a timestamp", text)
    if required:
        errors.flag(missing & ~bad, field, "{value!r} is not a timestamp (this field is required)", text)
    if tz != "UTC" and np.isfinite(secs).any():
        secs = _local_to_utc(secs, tz)
    if is_epoch.any():
        secs = np.where(is_epoch, epoch, secs)
    return secs


def _local_to_utc(secs: np.ndarray, tz: str) -> np.ndarray:
    """Naive wall-clock seconds in ``tz`` to epoch seconds. The repeated hour when clocks go back is taken as
    its first pass (daylight time); a wall time skipped when clocks go forward is shifted forward."""
    import pandas as pd

    finite = np.isfinite(secs)
    wall = pd.DatetimeIndex(pd.to_datetime(np.where(finite, secs, 0).astype(np.int64), unit="s"))
    local = wall.tz_localize(tz, ambiguous=np.ones(len(wall), dtype=bool), nonexistent="shift_forward")
    out = (local - pd.Timestamp(0, tz="UTC")).total_seconds().to_numpy(dtype=np.float64)
    return np.where(finite, out, np.nan)


def _durations(errors: _Errors, text, field: str) -> np.ndarray:
    """Seconds of ``[D-]HH:MM:SS`` / ``MM:SS``; NaN for UNLIMITED, Partition_Limit and empty."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = pc.extract_regex(text, DURATION_PATTERN)
    ok = ~_mask(pc.is_null(parts))
    out = np.full(len(text), np.nan)
    if ok.any():

        def num(name: str) -> np.ndarray:
            s = pc.struct_field(parts, name)
            s = pc.if_else(pc.or_kleene(pc.is_null(s), pc.equal(s, "")), "0", s)
            return pc.cast(s, pa.float64()).to_numpy(zero_copy_only=False)

        total = num("days") * 86400 + num("hours") * 3600 + num("minutes") * 60 + num("seconds")
        out = np.where(ok, total, np.nan)
    words = _mask(
        pc.is_in(pc.utf8_upper(text), value_set=pa.array(["UNLIMITED", "PARTITION_LIMIT", "INVALID", ""]))
    )
    bad = ~ok & ~words
    if bad.any():  # the rarer forms (D-HH, D-HH:MM) row by row; the rest is an error
        values = text.to_pylist()
        for i in np.flatnonzero(bad):
            try:
                out[i] = parse_duration(values[i])
                bad[i] = False
            except ValueError:
                pass
    errors.flag(bad, field, "{value!r} is not a duration ([D-]HH:MM:SS, MM:SS or UNLIMITED)", text)
    return out


def _numbers(errors: _Errors, text, field: str, rows: np.ndarray | None = None, allow_words: bool = False):
    """Float values of a numeric column; NaN for empty (and for UNLIMITED-like words when ``allow_words``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    numeric = _mask(pc.match_substring_regex(text, r"^[0-9]+(\.[0-9]+)?$"))
    values = pc.cast(pc.if_else(pa.array(numeric), text, "nan"), pa.float64()).to_numpy(zero_copy_only=False)
    empty = _mask(pc.equal(text, ""))
    bad = ~numeric & ~empty
    if allow_words:
        bad &= ~_mask(
            pc.is_in(pc.utf8_upper(text), value_set=pa.array(["UNLIMITED", "PARTITION_LIMIT", "INVALID"]))
        )
    if rows is not None:
        bad &= rows
    errors.flag(bad, field, "{value!r} is not a non-negative number", text)
    return values


def _states(errors: _Errors, text, state: _BlockState) -> np.ndarray:
    """JOB_STATES names of sacct's State text ("CANCELLED by 1000" -> CANCELLED)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    word = pc.utf8_upper(
        pc.struct_field(
            pc.extract_regex(pc.if_else(pc.equal(text, ""), "?", text), r"^(?P<w>[A-Za-z_?]*)"), "w"
        )
    )
    uniq = pc.unique(word).to_pylist()
    mapping = {}
    for w in uniq:
        mapped, known = map_state(w)
        mapping[w] = mapped
        if not known:
            count = int(pc.sum(pc.equal(word, w)).as_py() or 0)
            label = w if w not in ("", "?") else "(empty)"
            state.unknown_states[label] = state.unknown_states.get(label, 0) + count
    keys = pa.array(list(mapping))
    vals = np.array(list(mapping.values()), dtype=object)
    return vals[pc.index_in(word, value_set=keys).to_numpy(zero_copy_only=False)]


_TRES_GPU = r"(?:^|,)gres/gpu=(?P<n>[0-9]+)(?:,|$)"
_TRES_GPU_TYPED = r"(?:^|,)gres/gpu:(?P<t>[^=,]+)=(?P<n>[0-9]+)(?:,|$)"
_TRES_CPU = r"(?:^|,)cpu=(?P<n>[0-9]+)(?:,|$)"
_TRES_NODE = r"(?:^|,)node=(?P<n>[0-9]+)(?:,|$)"
_TRES_ENERGY = r"(?:^|,)energy=(?P<n>[0-9]+)(?:,|$)"
_TRES_MEM = r"(?:^|,)mem=(?P<n>[0-9]+(?:\.[0-9]+)?)(?P<u>[KMGTP]?)(?:,|$)"


def _tres(errors: _Errors, text, field: str):
    """(gpus, gpu type, cpus, memory MiB, nodes) of TRES strings like ``cpu=8,mem=64G,node=1,gres/gpu=4``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def count(pattern: str) -> np.ndarray:
        m = pc.struct_field(pc.extract_regex(text, pattern), "n")
        return np.array(pc.cast(pc.fill_null(m, "nan"), pa.float64()).to_numpy(zero_copy_only=False))

    gpus = count(_TRES_GPU)
    typed = pc.extract_regex(text, _TRES_GPU_TYPED)
    gpu_type = pc.fill_null(pc.struct_field(typed, "t"), "")
    no_plain = np.isnan(gpus) & ~_mask(pc.is_null(typed))
    if no_plain.any():  # only typed counts (gres/gpu:a100=2,gres/gpu:v100=1): their sum
        values = text.to_pylist()
        for i in np.flatnonzero(no_plain):
            gpus[i] = sum(int(n) for _, n in re.findall(r"(?:^|,)gres/gpu:([^=,]+)=([0-9]+)", values[i]))
    gpus = np.where(np.isnan(gpus), 0.0, gpus)
    cpus = count(_TRES_CPU)
    nodes = count(_TRES_NODE)
    mem_parts = pc.extract_regex(text, _TRES_MEM)
    mem_n = pc.cast(pc.fill_null(pc.struct_field(mem_parts, "n"), "nan"), pa.float64()).to_numpy(
        zero_copy_only=False
    )
    mem_u = np.asarray(
        pc.fill_null(pc.struct_field(mem_parts, "u"), "").to_numpy(zero_copy_only=False), dtype=object
    )
    scale = np.array([MEMORY_UNITS_MIB[u] for u in mem_u], dtype=np.float64) if len(mem_u) else np.ones(0)
    mem = mem_n * scale
    malformed = ~_mask(pc.match_substring_regex(text, r"^([^=,]+=[^,=]*)?(,[^=,]+=[^,=]*)*$"))
    errors.flag(malformed, field, "{value!r} is not a TRES list (cpu=8,mem=64G,gres/gpu=4)", text)
    return gpus, gpu_type, cpus, mem, nodes


# States that end a run Slurm requeues: with --duplicates the earlier runs of a requeued job are listed under
# the same id with one of these; an earlier record in any other state is another job that reused the id (job
# ids reset, `sacct --duplicates` in the man page).
RUN_ENDING_STATES = ("REQUEUED", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL")


def _superseded_runs(record, line, state):
    """Per record line: (superseded, requeues, reused) boolean/int arrays in file order.

    superseded: an earlier run of a requeued job (dropped); requeues: on a job's last record, how many earlier
    runs it had; reused: an earlier record of another job with the same id (kept, renamed)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(line)
    narrow = pa.table({"record": record, "line": line, "pos": pa.array(np.arange(n))})
    last = narrow.group_by("record").aggregate([("line", "max")])
    if len(last) == n:
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    marked = narrow.join(last, "record").sort_by("pos")
    is_last = pc.equal(marked.column("line"), marked.column("line_max")).to_numpy(zero_copy_only=False)
    run_ending = pc.is_in(state, value_set=pa.array(RUN_ENDING_STATES)).to_numpy(zero_copy_only=False)
    superseded = ~is_last & run_ending
    requeues = np.zeros(n, dtype=np.int64)
    if superseded.any():
        counts = (
            pa.table({"record": pc.filter(record, pa.array(superseded))})
            .group_by("record")
            .aggregate([("record", "count")])
        )
        joined = narrow.join(counts, "record", join_type="inner")
        pos = joined.column("pos").to_numpy()
        on_last = is_last[pos]
        requeues[pos[on_last]] = joined.column("record_count").to_numpy()[on_last]
    reused = ~is_last & ~run_ending
    return superseded, requeues, reused


def _note_duplicates(notes: list[str], superseded: int, requeued_jobs: int, reused: int) -> None:
    if superseded:
        notes.append(
            f"{superseded} earlier run(s) of {requeued_jobs} requeued job(s) (records ending REQUEUED, PREEMPTED, "
            "NODE_FAIL or BOOT_FAIL under the same id, sacct --duplicates) dropped; the last record of each job kept"
        )
    if reused:
        notes.append(
            f"{reused} record(s) share their id with a later job (job ids reset): kept as separate jobs, "
            "named <id>~<file line> (JSON: ~<index in jobs>)"
        )


def _rename_reused(cols, reused: np.ndarray) -> None:
    keys = np.array(cols["key"], dtype=object)
    lines = np.asarray(cols["line"])
    for i in np.flatnonzero(reused):
        keys[i] = f"{keys[i]}~{lines[i]}"
    cols["key"] = keys


def _assemble(
    path: Path, job_tables, step_tables, notes: list[str], unknown_states: dict[str, int]
) -> SlurmHistory:
    """Keep each record's last line, add its steps' energy where its own line has none, build the history.

    The joins run in Arrow on narrow tables (record, line): no Python string per row besides the output's."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not job_tables:
        raise InputError(path, None, None, "contains no jobs (only job steps or a header)")
    jobs_t = pa.concat_tables(job_tables, promote_options="permissive")
    job_tables.clear()
    superseded, requeues, reused = _superseded_runs(
        jobs_t.column("record"), jobs_t.column("line"), pc.cast(jobs_t.column("state"), pa.string())
    )
    if superseded.any():
        jobs_t = jobs_t.filter(pa.array(~superseded))
        requeues, reused = requeues[~superseded], reused[~superseded]
    _note_duplicates(notes, int(superseded.sum()), int((requeues > 0).sum()), int(reused.sum()))
    energy = jobs_t.column("line_energy").to_numpy().astype(np.float64)
    energy = np.where(energy > 0, energy, np.nan)  # sacct writes 0 where no energy plugin measured
    if step_tables:
        steps = pa.concat_tables(step_tables)
        step_tables.clear()
        steps = steps.filter(pc.greater(steps.column("energy_count"), 0))
        if len(steps):
            owners = pa.table(
                {
                    "record": jobs_t.column("record"),
                    "line": jobs_t.column("line"),
                    "pos": np.arange(len(jobs_t)),
                }
            )
            merged = steps.join(owners, "record", join_type="inner")
            owner = merged.column("owner_line")
            own = pc.or_(pc.equal(owner, merged.column("line")), pc.equal(owner, 0))
            per_job = merged.filter(own).group_by("pos").aggregate([("energy_sum", "sum")])
            from_steps = np.full(len(jobs_t), np.nan)
            from_steps[per_job.column("pos").to_numpy()] = per_job.column("energy_sum_sum").to_numpy()
            from_steps = np.where(from_steps > 0, from_steps, np.nan)
            use = np.isnan(energy) & np.isfinite(from_steps)
            if use.any():
                notes.append(f"energy of {int(use.sum())} job(s) summed over their steps' ConsumedEnergyRaw")
            energy = np.where(use, from_steps, energy)
        del steps
    array_ranges = int(pc.sum(pc.match_substring(jobs_t.column("key"), "[")).as_py() or 0)
    if array_ranges:
        notes.append(f"{array_ranges} pending array range(s) (123_[5-10]) kept as one pending job each")
    cols: dict[str, np.ndarray] = {"energy_j": energy, "requeues": requeues}
    for name in _JOB_FRAME_COLUMNS:
        if name not in cols:
            cols[name] = _arrow_to_numpy(jobs_t.column(name))
    del jobs_t
    pa.default_memory_pool().release_unused()
    if reused.any():
        _rename_reused(cols, reused)
    return _finish(cols, path, notes, unknown_states)


def _arrow_to_numpy(column) -> np.ndarray:
    """A column as numpy; dictionary-encoded text decoded through its (small) dictionaries, so that equal
    strings are one Python object."""
    import pyarrow as pa

    if pa.types.is_dictionary(column.type):
        parts = []
        for chunk in column.chunks:
            words = np.asarray(chunk.dictionary.to_pylist(), dtype=object)
            idx = chunk.indices.to_numpy(zero_copy_only=False)
            parts.append(words[idx] if len(words) else np.full(len(idx), "", dtype=object))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=object)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return np.asarray(column.to_numpy(zero_copy_only=False), dtype=object)
    return np.asarray(column.to_numpy())


# -- JSON ------------------------------------------------------------------------------------------------------


def _num(value: Any) -> float:
    """A number from Slurm's JSON: plain, or 23.02+'s ``{"set", "infinite", "number"}``; NaN when unset,
    infinite or null."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return math.nan
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return math.nan
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and re.fullmatch(r"[0-9]+(\.[0-9]+)?", value.strip()):
        return float(value)
    raise ValueError(f"{value!r} is not a number")


def _state_text(value: Any) -> str:
    """state.current: a string (22.05) or a list of flags (23.x, base state first)."""
    if isinstance(value, list):
        for item in value:
            if map_state(str(item))[1]:
                return str(item)
        return str(value[0]) if value else ""
    return "" if value is None else str(value)


def _json_tres(items: Any) -> tuple[float, str, float, float, float, float]:
    """(gpus, gpu type, cpus, memory MiB, nodes, energy J) of a TRES list ``[{"type","name","count"}, ...]``."""
    gpus = typed = 0.0
    gpu_type = ""
    cpus = mem = nodes = energy = math.nan
    for item in items or []:
        kind = str(item.get("type", ""))
        name = str(item.get("name") or "")
        count = _num(item.get("count"))
        if kind == "gres" and name == "gpu":
            gpus = max(gpus, count)
        elif kind == "gres" and name.startswith("gpu:"):
            typed += count
            gpu_type = gpu_type or name.split(":", 1)[1]
        elif kind == "cpu":
            cpus = count
        elif kind == "mem":
            mem = count  # MiB (Slurm counts memory TRES in MB)
        elif kind == "node":
            nodes = count
        elif kind == "energy":
            energy = count  # what sacct prints as the job's ConsumedEnergyRaw
    return (gpus or typed), gpu_type, cpus, mem, nodes, energy


def _read_json(path: Path, progress: Progress | None) -> SlurmHistory:
    import pandas as pd

    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, _line_at(raw, exc.start), None, f"not UTF-8 text: {exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, None, f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    if progress is not None:
        progress(len(raw), len(raw))
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise InputError(path, 1, "jobs", "expected sacct --json output: an object with a 'jobs' list")
    version = ""
    meta = doc.get("meta") or {}
    if isinstance(meta, dict):
        slurm = (meta.get("slurm") or meta.get("Slurm") or {}).get("version") or {}
        release = (meta.get("slurm") or meta.get("Slurm") or {}).get("release")
        if release:
            version = str(release)
        elif isinstance(slurm, dict) and slurm:
            version = ".".join(str(slurm.get(k, "")) for k in ("major", "minor", "micro"))
    notes = [
        f"read as sacct --json output{f' (Slurm {version})' if version else ''}; times are epoch seconds"
    ]
    state = _BlockState()
    rows = []
    step_energy_jobs = 0
    for i, job in enumerate(doc["jobs"]):
        where = f"jobs[{i}]"
        if not isinstance(job, dict):
            raise InputError(path, None, where, "expected an object")
        try:
            row, used_steps = _json_job(job, state)
        except (ValueError, TypeError, KeyError) as exc:
            label = job.get("job_id", "?")
            field, _, message = str(exc).partition(": ")
            raise InputError(path, None, f"{where}.{field}", f"{message} (job {label})") from None
        step_energy_jobs += used_steps
        row["line"] = i
        rows.append(row)
    if step_energy_jobs:
        notes.append(
            f"energy of {step_energy_jobs} job(s) summed over their steps' statistics.energy.consumed"
        )
    jobs = pd.DataFrame(rows)
    if len(jobs) == 0:
        raise InputError(path, None, "jobs", "contains no jobs")
    import pyarrow as pa

    superseded, requeues, reused = _superseded_runs(
        pa.array(jobs["record"].to_numpy(dtype=object), type=pa.string()),
        pa.array(jobs["line"].to_numpy()),
        pa.array(jobs["state"].to_numpy(dtype=object), type=pa.string()),
    )
    jobs["requeues"] = requeues
    jobs = jobs.loc[~superseded].reset_index(drop=True)
    _note_duplicates(notes, int(superseded.sum()), int((requeues > 0).sum()), int(reused.sum()))
    cols = {name: jobs[name].to_numpy() for name in _JOB_FRAME_COLUMNS}
    if reused.any():
        _rename_reused(cols, reused[~superseded])
    return _finish(cols, path, notes, state.unknown_states)


def _get(obj: dict, dotted: str) -> Any:
    cur: Any = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _json_job(job: dict, state: _BlockState) -> tuple[dict, int]:
    def number(key: str) -> float:
        try:
            return _num(_get(job, key))
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None

    def epoch(key: str) -> float:
        v = number(key)
        return math.nan if not v or v <= 0 else v  # Slurm writes 0 for "not yet"

    job_id = number("job_id")
    if math.isnan(job_id):
        raise ValueError("job_id: missing")
    array_job = number("array.job_id")
    task = number("array.task_id")
    het_job = number("het.job_id")
    het_offset = number("het.job_offset")
    if array_job and not math.isnan(array_job) and not math.isnan(task):
        key = f"{int(array_job)}_{int(task)}"
    elif array_job and not math.isnan(array_job) and _get(job, "array.task"):
        key = f"{int(array_job)}_[{_get(job, 'array.task')}]"
    elif het_job and not math.isnan(het_job):
        key = str(int(het_job))
    else:
        key = str(int(job_id))
    is_het = bool(het_job) and not math.isnan(het_job) and not math.isnan(het_offset)
    record = f"{key}+{int(het_offset)}" if is_het else key
    state_text = _state_text(_get(job, "state.current"))
    mapped, known = map_state(state_text)
    if not known:
        label = state_text or "(empty)"
        state.unknown_states[label] = state.unknown_states.get(label, 0) + 1
    alloc = _get(job, "tres.allocated") or []
    gpus, gpu_type, cpus, mem, tres_nodes, _ = _json_tres(alloc if alloc else _get(job, "tres.requested"))
    job_energy = _json_tres(alloc)[5]
    nodes = number("allocation_nodes")
    if math.isnan(nodes) or nodes == 0:
        nodes = tres_nodes
    start = epoch("time.start")
    end = epoch("time.end")
    elapsed = number("time.elapsed")
    limit_min = number("time.limit")
    energy = math.nan
    used_steps = 0
    step_sum = 0.0
    for s, step in enumerate(job.get("steps") or []):
        try:
            e = _num(_get(step, "statistics.energy.consumed"))
        except ValueError as exc:
            raise ValueError(f"steps[{s}].statistics.energy.consumed: {exc}") from None
        if e > 0 and e < 2**63:
            step_sum += e
    if job_energy > 0:
        energy = job_energy
    elif step_sum > 0:
        energy = step_sum
        used_steps = 1
    node_list = _get(job, "nodes") or ""
    if node_list == "None assigned":
        node_list = ""
    submit = epoch("time.submission")
    if math.isnan(submit):
        raise ValueError("time.submission: missing (every job has a submission time)")
    return {
        "key": key,
        "record": record,
        "het": int(het_offset) if is_het else -1,
        "user": str(job.get("user") or ""),
        "account": str(job.get("account") or ""),
        "partition": str(job.get("partition") or ""),
        "state": mapped,
        "submit_epoch": submit,
        "start_epoch": start,
        "end_epoch": end,
        "elapsed_s": 0.0 if math.isnan(elapsed) else elapsed,
        "timelimit_s": limit_min * 60.0,
        "num_gpu": int(gpus or 0),
        "num_nodes": 0 if math.isnan(nodes) else int(nodes),
        "node_list": str(node_list),
        "energy_j": energy,
        "num_cpu": 0 if math.isnan(cpus) else int(cpus),
        "memory_mib": mem,
        "gpu_type": gpu_type,
    }, used_steps


__all__ = ["EXTRA_COLUMNS", "REQUIRED_FIELDS", "SACCT_FIELDS", "STATE_ALIASES", "read_sacct"]
