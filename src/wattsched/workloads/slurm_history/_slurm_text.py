"""Slurm's text conventions, shared by the sacct, node and power readers (docs/whatif.md §2).

- durations: ``[D-]HH:MM:SS``, ``MM:SS``, ``UNLIMITED``, ``Partition_Limit`` (sacct's Elapsed and Timelimit);
- node lists: ``gpu[01-03,05],cpu1`` expanded to names and compressed back;
- job states: sacct's State text (``CANCELLED by 1000``) mapped to :data:`JOB_STATES`;
- memory sizes with Slurm's unit letters (``64G``; no letter means MiB).
"""

from __future__ import annotations

import re

import numpy as np

from . import JOB_STATES

# Slurm states outside JOB_STATES, mapped to the nearest one (Slurm's job_state_string names; sacct prints the
# base state first, e.g. "CANCELLED by 1000", "RUNNING+" with a trailing '+' where it was cut).
STATE_ALIASES = {
    "COMPLETING": "RUNNING",
    "CONFIGURING": "RUNNING",
    "RESIZING": "RUNNING",
    "SIGNALING": "RUNNING",
    "STAGE_OUT": "RUNNING",
    "REQUEUE_FED": "REQUEUED",
    "REQUEUE_HOLD": "REQUEUED",
    "RESV_DEL_HOLD": "PENDING",
    "REVOKED": "CANCELLED",
    "SPECIAL_EXIT": "FAILED",
    "STOPPED": "SUSPENDED",
    "PLANNED": "PENDING",
    "OOM": "OUT_OF_MEMORY",
    "CA": "CANCELLED",
    "CD": "COMPLETED",
    "F": "FAILED",
    "TO": "TIMEOUT",
    "PR": "PREEMPTED",
    "NF": "NODE_FAIL",
    "R": "RUNNING",
    "PD": "PENDING",
    "RQ": "REQUEUED",
    "DL": "DEADLINE",
    "BF": "BOOT_FAIL",
    "S": "SUSPENDED",
}

_STATE_WORD = re.compile(r"[A-Za-z_]+")


def map_state(raw: str) -> tuple[str, bool]:
    """``(state, known)``: the JOB_STATES name for sacct's State text; OTHER (known False) when unrecognised."""
    m = _STATE_WORD.search(raw or "")
    word = m.group().upper() if m else ""
    if word in JOB_STATES:
        return word, True
    if word in STATE_ALIASES:
        return STATE_ALIASES[word], True
    return "OTHER", False


# -- durations -----------------------------------------------------------------------------------------------

DURATION_PATTERN = r"^(?:(?P<days>\d+)-)?(?:(?P<hours>\d+):)?(?P<minutes>\d+):(?P<seconds>\d+(?:\.\d+)?)$"
_DURATION = re.compile(DURATION_PATTERN)
UNLIMITED_WORDS = ("UNLIMITED", "PARTITION_LIMIT", "INFINITE", "NONE", "")


def parse_duration(text: str) -> float:
    """Seconds of a Slurm duration; NaN for UNLIMITED/Partition_Limit/empty; ValueError for anything else.

    ``D-HH:MM:SS``, ``HH:MM:SS``, ``MM:SS`` (sacct prints these), and ``D-HH`` / ``D-HH:MM`` (the forms sbatch
    accepts, where the day makes the first number hours).
    """
    s = text.strip()
    if s.upper() in UNLIMITED_WORDS:
        return float("nan")
    m = _DURATION.match(s)
    if m:
        days = int(m["days"] or 0)
        return days * 86400 + int(m["hours"] or 0) * 3600 + int(m["minutes"]) * 60 + float(m["seconds"])
    m = re.match(r"^(\d+)-(\d+)(?::(\d+))?$", s)
    if m:
        return int(m[1]) * 86400 + int(m[2]) * 3600 + int(m[3] or 0) * 60
    raise ValueError(f"{text!r} is not a duration ([D-]HH:MM:SS, MM:SS or UNLIMITED)")


def format_duration(seconds: int) -> str:
    """Slurm's own ``[D-]HH:MM:SS`` (the inverse of :func:`parse_duration` for whole seconds)."""
    days, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    body = f"{h:02d}:{m:02d}:{s:02d}"
    return f"{days}-{body}" if days else body


# -- memory --------------------------------------------------------------------------------------------------

MEMORY_UNITS_MIB = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}


def memory_mib(text: str) -> float:
    """MiB of a Slurm memory size (``64G``, ``512M``, ``1.5T``, a bare number is MiB); ValueError otherwise."""
    m = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]?)i?B?\s*$", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"{text!r} is not a memory size (a number with K, M, G or T)")
    return float(m[1]) * MEMORY_UNITS_MIB[m[2].upper()]


# -- node lists ----------------------------------------------------------------------------------------------


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in node list {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unclosed '[' in node list {text!r}")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_range(body: str, whole: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m:
            raise ValueError(f"bad range {item!r} in node list {whole!r}")
        lo, hi = m[1], m[2] if m[2] is not None else m[1]
        if int(hi) < int(lo):
            raise ValueError(f"range {item!r} runs backwards in node list {whole!r}")
        width = len(lo)  # Slurm keeps the first number's zero padding
        out.extend(f"{n:0{width}d}" for n in range(int(lo), int(hi) + 1))
    return out


def expand_nodelist(text: str) -> list[str]:
    """Node names of a Slurm host list: ``gpu[01-03,05],cpu1`` -> gpu01, gpu02, gpu03, gpu05, cpu1.

    Several bracket groups in one name (``r[1-2]n[1-2]``) expand to every combination, as Slurm's hostlist
    does. ``None assigned`` and ``(null)`` (sacct's text for a job without nodes) give no names.
    """
    text = (text or "").strip()
    if not text or text in ("None assigned", "(null)", "None"):
        return []
    names: list[str] = []
    for part in _split_top(text):
        pieces = re.split(r"(\[[^\]]*\])", part)
        combos = [""]
        for piece in pieces:
            if piece.startswith("["):
                values = _expand_range(piece[1:-1], text)
                combos = [c + v for c in combos for v in values]
            elif piece:
                if "[" in piece or "]" in piece:
                    raise ValueError(f"unbalanced brackets in node list {text!r}")
                combos = [c + piece for c in combos]
        names.extend(combos)
    return names


def compress_nodelist(names) -> str:
    """A Slurm host list for ``names`` (sorted, duplicates dropped): names ending in digits of one prefix and
    one width share a bracket (``gpu[01-03,05]``); the inverse of :func:`expand_nodelist`."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in sorted(set(names)):
        m = re.fullmatch(r"(.*?)(\d+)", name)
        if m and "[" not in name and "," not in name:
            groups.setdefault((m[1], len(m[2])), []).append(int(m[2]))
        else:
            plain.append(name)
    parts = list(plain)
    for (prefix, width), numbers in groups.items():
        numbers.sort()
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        runs, lo, prev = [], numbers[0], numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            runs.append(f"{lo:0{width}d}" if lo == prev else f"{lo:0{width}d}-{prev:0{width}d}")
            if n is not None:
                lo = prev = n
        parts.append(f"{prefix}[{','.join(runs)}]")
    return ",".join(sorted(parts))


def nan_sum(values: np.ndarray) -> float:
    """Sum of the finite values; NaN when there are none."""
    finite = values[np.isfinite(values)]
    return float(finite.sum()) if finite.size else float("nan")
