"""Measured GPU profiles: the profile CSV (docs/data-formats.md, "Profile CSV"), read and written.

A profile file holds one row per job per measurement window, in the layout of the ``h200-colocation-probe``
dataset (one NVIDIA H200, measured for this project; docs/perf.md §9): a window of one job alone (a set of one)
or of several jobs time-slicing one GPU (a set of N, one row per job, the GPU's power repeated on each). A second
layout, the dataset's ``batch-sweep.csv``, adds a ``state`` column: ``training`` rows are jobs alone, the idle
states are the GPU's draw with no process (``idle-no-context*``) and with a job's context alive but not computing
(``held-context-idle``, ``idle-context-alive*``). A ``<stem>-device.json`` beside a file adds its idle readings
and each model's peak memory.

``wattsched profile`` and the node agent (``--record-profiles``) write the same columns (:func:`write_rows`).
A training row with an empty ``it_per_s`` (a job that did not report its steps: a plain ``--command``, a live
cluster's job) is a power-only reading (:class:`PowerReading`); a job alone under a ``power_limit_w`` the profiler
set is kept apart from the same job at the GPU's own limit (``Profiles.capped``).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import DataNotFoundError, InputError, WattschedError
from .catalog import normalise

# The dataset's columns, in its order. ``wattsched profile`` and the agent write these and EXTRA_COLUMNS.
PROFILE_COLUMNS = (
    "gpu", "regime", "set", "jobs_in_set", "repeat", "model", "batch", "iters", "job_seconds", "it_per_s",
    "window_s", "gpu_energy_j", "gpu_power_mean_w", "gpu_power_max_w", "util_gpu_mean_pct", "util_mem_mean_pct",
    "sm_mhz_mean",
)  # fmt: skip
# Optional columns wattsched adds: the idle state of a row without a job, the power limit the window ran under
# (empty: the default), the job's peak GPU memory, and who measured it.
EXTRA_COLUMNS = ("state", "power_limit_w", "peak_mem_gib", "source")

TRAINING = "training"
BARE_STATES = ("idle-no-context", "idle-no-context-before", "idle-bare")
HELD_STATES = ("held-context-idle", "idle-context-alive", "idle-context-alive-after", "idle-held")


@dataclass(frozen=True)
class Solo:
    """One (GPU, model, batch) measured alone: means over its windows (repeats)."""

    gpu: str
    model: str  # normalised model key
    batch: int
    regime: str
    it_per_s: float
    power_w: float
    utilisation: float  # fraction, 0..1
    windows: int
    spread: float  # (max - min) / mean of it/s over the windows
    memory_gib: float  # peak GPU memory (0: not measured)
    source: str  # "file:line,line"
    power_max_w: float = math.nan  # the highest draw sampled in its windows (NaN: not measured)


@dataclass(frozen=True)
class MeasuredSet:
    """One window of several jobs time-slicing one GPU."""

    gpu: str
    regime: str
    name: str
    members: tuple[tuple[str, int], ...]  # (model key, batch) per job
    it_per_s: tuple[float, ...]
    power_w: float
    energy_j: float
    window_s: float
    source: str


@dataclass(frozen=True)
class PowerReading:
    """One job's window whose speed is unknown: the GPU's draw while it ran (alone, or in a set of N)."""

    gpu: str
    model: str  # normalised model key ("" when unknown)
    batch: int
    jobs_in_set: int
    power_w: float
    energy_j: float
    window_s: float
    utilisation: float  # fraction, 0..1
    power_limit_w: float | None
    source: str  # "file:line"


@dataclass
class Profiles:
    """Everything read from one or more profile files."""

    solos: dict[tuple[str, str, int, str], Solo] = field(default_factory=dict)  # at the GPU's own power limit
    sets: list[MeasuredSet] = field(default_factory=list)
    capped: dict[tuple[str, str, int, str, float], Solo] = field(
        default_factory=dict
    )  # alone, under a limit W
    power_only: list[PowerReading] = field(default_factory=list)
    bare_idle_w: dict[str, list[float]] = field(default_factory=dict)
    held_idle_w: dict[str, list[float]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256

    def solo(self, gpu: str, model: str, batch: int = 0, regime: str | None = None) -> Solo | None:
        """The profile of `model` alone on `gpu` at `batch` (0, unknown: the smallest batch measured), in `regime`
        (None: the only one measured; a model measured in two regimes must be given one)."""
        key = normalise(model)
        found = [
            s for (g, m, b, r), s in self.solos.items()
            if g == gpu and m == key and (batch <= 0 or b == int(batch)) and (regime is None or r == regime)
        ]  # fmt: skip
        if not found:
            return None
        regimes = sorted({s.regime for s in found})
        if len(regimes) > 1:
            raise WattschedError(
                f"{model} on {gpu} is profiled in regimes {', '.join(regimes)} ({', '.join(self.files)}): "
                "give the profiles of one regime"
            )
        return min(found, key=lambda s: s.batch)

    def of_set(self, measured: MeasuredSet) -> list[Solo] | None:
        """The members of a measured set alone, in the set's regime (None if one was not measured alone)."""
        solos = [self.solos.get((measured.gpu, m, b, measured.regime)) for m, b in measured.members]
        return None if any(s is None for s in solos) else solos  # type: ignore[return-value]

    def gpus(self) -> list[str]:
        return sorted({k[0] for k in self.solos} | set(self.bare_idle_w) | set(self.held_idle_w))

    def models(self, gpu: str | None = None) -> list[str]:
        return sorted({k[1] for k in self.solos if gpu is None or k[0] == gpu})

    def held_w(self, gpu: str) -> float | None:
        """Measured draw of the GPU holding job contexts but computing nothing (mean of the readings)."""
        values = self.held_idle_w.get(gpu)
        return sum(values) / len(values) if values else None

    def bare_w(self, gpu: str) -> float | None:
        values = self.bare_idle_w.get(gpu)
        return min(values) if values else None

    def describe(self) -> dict[str, object]:
        return {
            "files": dict(self.files),
            "solo_profiles": len(self.solos),
            "measured_sets": len(self.sets),
            "capped_solo_profiles": len(self.capped),
            "power_only_readings": len(self.power_only),
            "gpus": self.gpus(),
        }


# --- reading ------------------------------------------------------------------------------------------------------
def resolve_path(name: str | Path, data_dir: str | Path | None = None) -> Path:
    """A profile file: a path, else ``<dataset>/<file>`` in the data directory (registry, data/registry.py)."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    parts = Path(name).parts
    if len(parts) == 2:
        from ..data.registry import locate

        try:
            return locate(parts[0], parts[1], data_dir)
        except DataNotFoundError:
            pass
    raise DataNotFoundError(f"profile file '{name}' not found (a path, or <dataset>/<file> under --data-dir)")


def load_profiles(
    paths: Sequence[str | Path], data_dir: str | Path | None = None, default_gpu: str | None = None
) -> Profiles:
    """Read profile files into one :class:`Profiles`. Windows of the same (GPU, model, batch, regime) alone are
    averaged (the dataset's repeats)."""
    out = Profiles()
    # (gpu, model, batch, regime), or (gpu, model, batch, regime, limit) for a window under a set power limit
    singles: dict[tuple, list[tuple[dict, str]]] = {}
    for name in paths:
        path = resolve_path(name, data_dir)
        raw = path.read_bytes()
        out.files[str(path)] = hashlib.sha256(raw).hexdigest()
        memory, bare, held, device_gpu = _device_facts(path)
        rows = _parse(path, raw.decode("utf-8-sig"), default_gpu or device_gpu)
        if rows and held:
            out.held_idle_w.setdefault(rows[0]["gpu"], []).extend(held)
        if rows and bare:
            out.bare_idle_w.setdefault(rows[0]["gpu"], []).extend(bare)
        groups: dict[tuple, list[dict]] = {}
        for row in rows:
            state = row["state"]
            if state in BARE_STATES:
                out.bare_idle_w.setdefault(row["gpu"], []).append(row["power_w"])
                continue
            if state in HELD_STATES:
                out.held_idle_w.setdefault(row["gpu"], []).append(row["power_w"])
                continue
            row["memory_gib"] = row["memory_gib"] or memory.get(row["model"], 0.0)
            if row["jobs_in_set"] == 1 and math.isnan(row["it_per_s"]):
                out.power_only.append(_power_reading(row, path))
            elif row["jobs_in_set"] == 1:
                key: tuple = (row["gpu"], row["model"], row["batch"], row["regime"])
                key = key if row["limit"] is None else (*key, row["limit"])
                singles.setdefault(key, []).append((row, str(path)))
            else:
                groups.setdefault(
                    (row["gpu"], row["regime"], row["set"], row["repeat"], row["limit"]), []
                ).append(row)
        for (gpu, regime, set_name, _, _), members in groups.items():
            first = members[0]
            if len(members) != first["jobs_in_set"]:
                says = f"set '{set_name}' says {first['jobs_in_set']} jobs but has {len(members)} rows"
                raise InputError(path, first["line"], "jobs_in_set", says)
            if any(math.isnan(m["it_per_s"]) for m in members):  # a member's speed unknown: power only
                out.power_only.extend(_power_reading(m, path) for m in members)
                continue
            out.sets.append(MeasuredSet(
                gpu, regime, set_name, tuple((m["model"], m["batch"]) for m in members),
                tuple(m["it_per_s"] for m in members), first["power_w"], first["energy_j"], first["window_s"],
                f"{path.name}:{','.join(str(m['line']) for m in members)}",
            ))  # fmt: skip
    for key, entries in singles.items():
        if len(key) == 4:
            out.solos[key] = _mean_solo(key, entries)
        else:
            out.capped[key] = _mean_solo(key, entries)
    return out


def _power_reading(row: dict, path: Path) -> PowerReading:
    return PowerReading(
        row["gpu"], row["model"], row["batch"], row["jobs_in_set"], row["power_w"], row["energy_j"],
        row["window_s"], row["util"], row["limit"], f"{path.name}:{row['line']}",
    )  # fmt: skip


def _mean_solo(key: tuple, entries: list[tuple[dict, str]]) -> Solo:
    rows = [row for row, _ in entries]
    speeds = [r["it_per_s"] for r in rows]
    mean_speed = sum(speeds) / len(speeds)
    return Solo(
        gpu=key[0], model=key[1], batch=key[2], regime=key[3], it_per_s=mean_speed,
        power_w=sum(r["power_w"] for r in rows) / len(rows),
        utilisation=sum(r["util"] for r in rows) / len(rows), windows=len(rows),
        spread=(max(speeds) - min(speeds)) / mean_speed if mean_speed > 0 else 0.0,
        memory_gib=max(r["memory_gib"] for r in rows),
        source=f"{Path(entries[0][1]).name}:{','.join(str(r['line']) for r in rows)}",
        power_max_w=max((r["power_max_w"] for r in rows if not math.isnan(r["power_max_w"])), default=math.nan),
    )  # fmt: skip


def _device_facts(path: Path) -> tuple[dict[str, float], list[float], list[float], str | None]:
    """Peak memory per model and idle readings from ``<stem>-device.json`` beside the file (if any)."""
    device = path.with_name(f"{path.stem}-device.json")
    if not device.is_file():
        return {}, [], [], None
    try:
        facts = json.loads(device.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(device, None, None, f"not valid JSON ({exc})") from None
    memory = {normalise(k): float(v) for k, v in (facts.get("peak_mem_gib") or {}).items()}
    bare = [float(facts["idle_bare"]["power_mean_w"])] if "idle_bare" in facts else []
    held = [float(facts["idle_with_contexts"]["power_mean_w"])] if "idle_with_contexts" in facts else []
    name = str(facts.get("name", ""))
    gpu = name.split()[-1] if name else None
    return memory, bare, held, gpu


def _parse(path: Path, text: str, default_gpu: str | None) -> list[dict]:
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    state_layout = "state" in header
    need = ["it_per_s", "gpu_power_mean_w", "util_gpu_mean_pct", "model", "batch"]
    if not state_layout:
        need += ["set", "jobs_in_set"]
    if "gpu" not in header and not default_gpu:
        need.append("gpu")
    missing = [c for c in need if c not in header]
    if missing:
        raise InputError(
            path, 1, missing[0], f"missing column(s) {', '.join(missing)} (docs/data-formats.md)"
        )
    rows = []
    for line, rec in enumerate(reader, start=2):
        rows.append(_row(path, line, rec, default_gpu))
    if not rows:
        raise InputError(path, None, None, "no rows")
    return rows


def _number(path: Path, line: int, rec: Mapping[str, str], column: str, required: bool = True) -> float:
    value = (rec.get(column) or "").strip()
    if not value:
        if required:
            raise InputError(path, line, column, "empty")
        return math.nan
    try:
        number = float(value)
    except ValueError:
        raise InputError(path, line, column, f"not a number: {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise InputError(path, line, column, f"must be a finite number >= 0, got {value!r}")
    return number


def _row(path: Path, line: int, rec: Mapping[str, str], default_gpu: str | None) -> dict:
    state = (rec.get("state") or TRAINING).strip() or TRAINING
    gpu = (rec.get("gpu") or "").strip() or default_gpu
    if not gpu:
        raise InputError(path, line, "gpu", "empty (name the GPU, e.g. H200)")
    power = _number(path, line, rec, "gpu_power_mean_w", required=False)
    peak = _number(path, line, rec, "gpu_power_max_w", required=False)
    window = _number(path, line, rec, "window_s", required=False)
    energy = _number(path, line, rec, "gpu_energy_j", required=False)
    if math.isnan(power):
        if math.isnan(energy) or not window > 0:
            raise InputError(
                path, line, "gpu_power_mean_w", "empty, and no gpu_energy_j and window_s to derive it"
            )
        power = energy / window
    base = {
        "line": line,
        "gpu": gpu,
        "state": state,
        "power_w": power,
        "power_max_w": peak,
        "energy_j": energy,
        "window_s": window,
    }
    if state != TRAINING:
        if state not in BARE_STATES + HELD_STATES:
            known = ", ".join((TRAINING, *BARE_STATES, *HELD_STATES))
            raise InputError(path, line, "state", f"unknown state {state!r}; one of {known}")
        return base
    model = normalise((rec.get("model") or "").strip())
    if not model:
        raise InputError(path, line, "model", "empty")
    speed = _number(path, line, rec, "it_per_s", required=False)  # empty: speed unknown, a power-only reading
    if not (speed > 0 or math.isnan(speed)):
        raise InputError(path, line, "it_per_s", "must be > 0 for a training row (or empty: unknown)")
    util = _number(path, line, rec, "util_gpu_mean_pct")
    if util > 100:
        raise InputError(path, line, "util_gpu_mean_pct", f"a percentage, got {util}")
    batch = _number(path, line, rec, "batch")
    jobs_in_set = _number(path, line, rec, "jobs_in_set", required=False)
    limit = _number(path, line, rec, "power_limit_w", required=False)
    memory = _number(path, line, rec, "peak_mem_gib", required=False)
    return {
        **base, "model": model, "batch": int(batch), "it_per_s": speed, "util": util / 100.0,
        "regime": (rec.get("regime") or "").strip(), "set": (rec.get("set") or model).strip(),
        "jobs_in_set": 1 if math.isnan(jobs_in_set) else int(jobs_in_set),
        "repeat": (rec.get("repeat") or "0").strip(), "limit": None if math.isnan(limit) else limit,
        "memory_gib": 0.0 if math.isnan(memory) else memory,
    }  # fmt: skip


# --- writing ------------------------------------------------------------------------------------------------------
def write_rows(target: str | Path, rows: Iterable[Mapping[str, object]], append: bool = False) -> int:
    """Write profile rows (dicts keyed by PROFILE_COLUMNS and EXTRA_COLUMNS; missing keys empty) atomically. With
    `append`, the file's existing rows are kept (its header must be ours). Returns the number of rows written."""
    from ..core.atomic import atomic_open

    target = Path(target)
    columns = PROFILE_COLUMNS + EXTRA_COLUMNS
    kept: list[dict] = []
    if append and target.is_file():
        with target.open(newline="") as handle:
            reader = csv.DictReader(handle)
            if list(reader.fieldnames or []) != list(columns):
                raise InputError(
                    target, 1, None, "not a wattsched profile file (other columns); give a new file"
                )
            kept = list(reader)
    new = [{c: _cell(row.get(c)) for c in columns} for row in rows]
    with atomic_open(target, "w") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(kept)
        writer.writerows(new)
    return len(new)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return str(value)
