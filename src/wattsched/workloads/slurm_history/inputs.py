"""The replay's inputs from an operator's Slurm history: a generic job CSV (docs/data-formats.md §2) and a cluster
YAML (§3), written by :func:`write_replay_inputs` (``write_inputs`` in this package).

Which jobs are replayed (docs/whatif.md §5):

* every job that **started** (a finite ``start_s``) is replayed, whatever its final state (COMPLETED, FAILED,
  CANCELLED after it started, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, ...): it held its resources for its
  recorded run time, and that is what the replay gives it (``duration`` = the recorded ``elapsed_s``);
* a job still RUNNING at the export runs for the time it had run by then (its ``elapsed_s``; without one, the
  export time is not known and the job is left out);
* a job that never started (PENDING, or CANCELLED while waiting) is left out: it used nothing and its run time is
  unknown.

Submit times are written as UTC timestamps (``time_origin_utc`` + ``submit_s``) so that the replay keeps the
calendar and price and carbon signals line up with the real hours. A job's ``gpu_model`` is the GPU models of its
partition's nodes (``A100|H100`` for a mixed partition): the engine has no partitions, so this is how a job stays on
its partition's kind of GPU. CPU and memory requests are written when the history has them (columns ``cpu_milli``
or ``cpus`` or read_sacct's ``num_cpu``, ``memory_mib``; the contract's RECORDED_COLUMNS do not), else left at 0:
memory is NaN where AllocTRES has no ``mem=`` (a cluster that does not treat memory as consumable), and the
replay then does not constrain it either.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import yaml

from ...core.atomic import write_text
from ...core.errors import InputError

if TYPE_CHECKING:
    from . import SlurmHistory, SlurmNodes

JOBS_FILE = "jobs.csv"
CLUSTER_FILE = "cluster.yaml"
JOB_COLUMNS = ("job_id", "submit_time", "duration", "num_gpu", "cpu_milli", "memory_mib", "gpu_model", "user")


def replayed_mask(recorded: pd.DataFrame) -> np.ndarray:
    """Which recorded jobs the replay runs: those that started and have a run time (module docstring)."""
    start = pd.to_numeric(recorded["start_s"], errors="coerce").to_numpy(dtype=float)
    elapsed = run_time_s(recorded)
    return np.isfinite(start) & np.isfinite(elapsed) & (elapsed >= 0)


def run_time_s(recorded: pd.DataFrame) -> np.ndarray:
    """The recorded run time of each job: ``elapsed_s``, else ``end_s - start_s``."""
    elapsed = pd.to_numeric(recorded["elapsed_s"], errors="coerce").to_numpy(dtype=float)
    start = pd.to_numeric(recorded["start_s"], errors="coerce").to_numpy(dtype=float)
    end = pd.to_numeric(recorded["end_s"], errors="coerce").to_numpy(dtype=float)
    return np.where(np.isfinite(elapsed), elapsed, end - start)


def partition_gpu_models(nodes: SlurmNodes) -> dict[str, str]:
    """Partition -> the GPU models of its nodes, ``|``-separated in first-seen order ("" for CPU-only ones)."""
    out: dict[str, list[str]] = {}
    for row in nodes.nodes.itertuples(index=False):
        model = str(getattr(row, "gpu_model", "") or "")
        gpus = int(getattr(row, "gpus", 0) or 0)
        for part in _split(getattr(row, "partitions", "")):
            models = out.setdefault(part, [])
            if model and gpus > 0 and model not in models:
                models.append(model)
    by_name = nodes.nodes.set_index("name") if "name" in nodes.nodes.columns else None
    for part, names in nodes.partitions.items():
        out.setdefault(part, [])
        for name in names:
            if by_name is None or name not in by_name.index:
                continue
            model = str(by_name.at[name, "gpu_model"] or "")
            if model and int(by_name.at[name, "gpus"] or 0) > 0 and model not in out[part]:
                out[part].append(model)
    return {part: "|".join(models) for part, models in out.items()}


def _split(text: object) -> list[str]:
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return []
    return [p.strip() for p in str(text).split(",") if p.strip()]


def job_table(history: SlurmHistory, nodes: SlurmNodes) -> tuple[pd.DataFrame, list[str]]:
    """The generic job CSV's rows for the replayed jobs, and notes on what was left out or assumed."""
    recorded = history.recorded
    keep = replayed_mask(recorded)
    jobs = recorded.loc[keep]
    notes: list[str] = []
    left_out = recorded.loc[~keep]
    if len(left_out):
        counts = left_out["state"].astype(str).value_counts().sort_index()
        what = ", ".join(f"{n} {s}" for s, n in counts.items())
        notes.append(f"{len(left_out)} job(s) never started and are not replayed ({what})")
    running = int((jobs["state"].astype(str) == "RUNNING").sum())
    if running:
        notes.append(f"{running} job(s) still RUNNING at the export replay the run time they had by then")
    if jobs.empty:
        raise InputError(
            history.source or "sacct", None, None, "no job in the history started: nothing to replay"
        )
    origin = _parse_origin(history.time_origin_utc, history.source)
    submit = pd.to_numeric(jobs["submit_s"], errors="coerce").to_numpy(dtype=float)
    if not np.isfinite(submit).all():
        raise InputError(history.source or "sacct", None, "submit_s", "a replayed job has no submit time")
    models = partition_gpu_models(nodes)
    partitions = jobs["partition"].astype(str).to_numpy()
    unknown = sorted({p for p in partitions if p not in models})
    if unknown:
        notes.append(
            "partition(s) not in the node file, their jobs may run on any GPU: " + ", ".join(unknown)
        )
    num_gpu = pd.to_numeric(jobs["num_gpu"], errors="coerce").fillna(0).astype(np.int64).to_numpy()
    gpu_model = np.array(
        [models.get(p, "") if g > 0 else "" for p, g in zip(partitions, num_gpu, strict=True)]
    )
    cpu_milli, memory_mib, have = _cpu_and_memory(jobs)
    if not have:
        notes.append("the history has no CPU or memory requests: jobs ask for GPUs only (CPU and memory 0)")
    rows = pd.DataFrame(
        {
            "job_id": jobs["job_id"].astype(str).to_numpy(),
            "submit_time": [_timestamp(origin, s) for s in submit],
            "duration": np.round(run_time_s(jobs), 3),
            "num_gpu": num_gpu,
            "cpu_milli": cpu_milli,
            "memory_mib": memory_mib,
            "gpu_model": gpu_model,
            "user": jobs["user"].fillna("").astype(str).to_numpy(),
        },
        columns=list(JOB_COLUMNS),
    )
    return rows, notes


def _cpu_and_memory(jobs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, bool]:
    n = len(jobs)
    cpu = np.zeros(n, dtype=np.int64)
    mem = np.zeros(n, dtype=np.int64)
    have = False
    if "cpu_milli" in jobs.columns:
        cpu = pd.to_numeric(jobs["cpu_milli"], errors="coerce").fillna(0).astype(np.int64).to_numpy()
        have = True
    else:
        # cpus (a hand-built history) or num_cpu (read_sacct: AllocTRES cpu=, the CPUs Slurm allocated)
        name = next((c for c in ("cpus", "num_cpu") if c in jobs.columns), None)
        if name is not None:
            cpu = (pd.to_numeric(jobs[name], errors="coerce").fillna(0) * 1000).astype(np.int64).to_numpy()
            have = True
    if "memory_mib" in jobs.columns:
        mem = pd.to_numeric(jobs["memory_mib"], errors="coerce").fillna(0).astype(np.int64).to_numpy()
        have = True
    return cpu, mem, have


def _parse_origin(text: str, source: str) -> datetime:
    try:
        origin = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise InputError(
            source or "sacct", None, "time_origin_utc", f"not an ISO 8601 instant: {text!r}"
        ) from None
    return origin.replace(tzinfo=UTC) if origin.tzinfo is None else origin.astimezone(UTC)


def _timestamp(origin: datetime, seconds: float) -> str:
    instant = origin + timedelta(seconds=float(seconds))
    text = instant.strftime("%Y-%m-%dT%H:%M:%S")
    if instant.microsecond:
        text += f".{instant.microsecond:06d}".rstrip("0")
    return text + "Z"


def node_groups(nodes: SlurmNodes) -> tuple[list[dict], list[str]]:
    """Identical nodes (GPU model and count, CPUs, memory) grouped, in first-seen order, as the cluster YAML's
    ``node_groups``; and notes."""
    frame = nodes.nodes
    if frame.empty:
        raise InputError(nodes.source or "nodes", None, None, "no node in the node file")
    groups: dict[tuple, dict] = {}
    notes: list[str] = []
    for row in frame.itertuples(index=False):
        gpus = int(_number(getattr(row, "gpus", 0)))
        model = str(getattr(row, "gpu_model", "") or "") if gpus > 0 else ""
        if gpus > 0 and not model:
            raise InputError(
                nodes.source or "nodes", None, "gpu_model",
                f"node {row.name} has {gpus} GPU(s) of no known model: the replay needs a GPU catalog model "
                "(core/gpus.py GPU_CATALOG) for their speed and power",
            )  # fmt: skip
        cpus = int(_number(getattr(row, "cpus", 0)))
        memory = int(_number(getattr(row, "memory_mib", 0)))
        key = (gpus, model, cpus, memory)
        group = groups.get(key)
        if group is None:
            group = groups[key] = {"count": 0, "gpus": gpus}
            if model:
                group["gpu_model"] = model
            group["cpu_milli"] = cpus * 1000
            group["memory_mib"] = memory
        group["count"] += 1
    states = frame["state"].astype(str).str.upper() if "state" in frame.columns else pd.Series(dtype=str)
    down = int(states.str.contains("DOWN|DRAIN|FAIL", regex=True).sum())
    if down:
        notes.append(f"{down} node(s) down or drained at the export are replayed as available")
    return list(groups.values()), notes


def _number(value: object) -> float:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(x) else x


def write_replay_inputs(history: SlurmHistory, nodes: SlurmNodes, out_dir: Path) -> tuple[Path, Path]:
    """Write ``jobs.csv`` and ``cluster.yaml`` into `out_dir` (atomically) and return their paths; the notes on
    what was assumed are appended to ``history.notes``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, job_notes = job_table(history, nodes)
    groups, node_notes = node_groups(nodes)
    jobs_csv, cluster_yaml = out_dir / JOBS_FILE, out_dir / CLUSTER_FILE
    write_text(jobs_csv, rows.to_csv(index=False, lineterminator="\n"))
    name = f"slurm-{Path(nodes.source).stem}" if nodes.source else "slurm"
    cluster = {
        "name": name,
        "notes": f"from {Path(nodes.source).name if nodes.source else 'a Slurm node file'}: "
        f"{int(sum(g['count'] for g in groups))} nodes in {len(groups)} group(s) of identical nodes",
        "node_groups": groups,
    }
    write_text(cluster_yaml, yaml.safe_dump(cluster, sort_keys=False))
    _extend_unique(history.notes, [*job_notes, *node_notes])
    return jobs_csv, cluster_yaml


def _extend_unique(notes: list[str], new: Iterable[str]) -> None:
    for note in new:
        if note not in notes:
            notes.append(note)
