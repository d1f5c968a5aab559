"""What the HTML report (experiments/report.py) reads of runs and experiment outputs: each run directory's summary,
resolved config, time series and per-job table, the short names of the legends, and the assumptions runs and
experiments recorded (cluster sizing, workload, model assignment, signal alignment, energy model, notes)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .compare import MISSING
from .config import flat_settings


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


# -- what the runs hold ------------------------------------------------------------------------------------


@dataclass
class RunData:
    """What the plots and the assumptions need of one run directory."""

    label: str  # the comparison row's label
    name: str  # a short name for legends
    path: Path
    summary: dict[str, Any]
    config: dict[str, Any]  # its config.resolved.yaml by flat keys (config.flat_settings), in either form
    series: pd.DataFrame | None
    jobs: pd.DataFrame | None


def _read_table(path: Path, stem: str, columns: Sequence[str] | None = None) -> pd.DataFrame | None:
    """`stem`.parquet, else `stem`.csv, of a run directory; None when neither is readable."""
    for suffix, reader in ((".parquet", pd.read_parquet), (".csv", pd.read_csv)):
        file = path / f"{stem}{suffix}"
        if not file.is_file():
            continue
        try:
            frame = reader(file)
        except (OSError, ValueError, ImportError):
            continue
        if columns is not None:
            frame = frame[[c for c in columns if c in frame.columns]]
        return frame
    return None


def _read_json(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_yaml(file: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def load_run(label: str, name: str, path: Path) -> RunData:
    return RunData(
        label=label,
        name=name,
        path=path,
        summary=_read_json(path / "summary.json"),
        config=flat_settings(_read_yaml(path / "config.resolved.yaml")),
        series=_read_table(path, "timeseries"),
        jobs=_read_table(path, "jobs", ("jct_s", "status", "model_assigned")),
    )


def short_names(frame: pd.DataFrame) -> list[str]:
    """Legend names: a run directory's name (with as many parent folders as tell them apart), an experiment
    row's keys (after its directory's name when several directories are compared)."""
    sources = list(dict.fromkeys(frame["source"]))
    names: list[str | None] = []
    for label, source in zip(frame["run"], frame["source"], strict=True):
        if label == source:
            names.append(None)
            continue
        keys = label[len(source) :].strip() if label.startswith(source) else label
        names.append(f"{Path(source).name} {keys}" if len(sources) > 1 else keys)
    runs = [i for i, n in enumerate(names) if n is None]
    for depth in range(1, 8):
        tried = {i: "/".join(Path(frame["run"].iloc[i]).parts[-depth:]) for i in runs}
        if len(set(tried.values())) == len(tried) or depth == 7:
            for i, n in tried.items():
                names[i] = n
            break
    return [str(n) for n in names]


# -- assumptions -------------------------------------------------------------------------------------------


def _signal_lines(kind: str, s: dict[str, Any]) -> list[str]:
    where = s.get("region") or MISSING
    lines = [
        f"{kind} signal: {where}, year {s.get('year', MISSING)}, time zone {s.get('tz', MISSING)} "
        f"({s.get('unit', '')}); alignment rule {s.get('rule', MISSING)}, wrap {s.get('wrap', MISSING)}, "
        f"trace time 0 at {s.get('anchor_local') or s.get('anchor_utc') or MISSING}"
    ]
    for key in ("trace_start_assumption", "value_convention", "attribution"):
        if s.get(key):
            lines.append(f"{kind} signal: {s[key]}")
    report = s.get("report")
    if not isinstance(report, dict):
        report = {}
    filled = report.get("filled_hours") or 0
    if filled:
        lines.append(f"{kind} signal: {filled} hour(s) filled ({report.get('fill')})")
    for gap in report.get("gaps") or []:
        lines.append(f"{kind} signal gap: {gap}")
    for borrowed in report.get("borrowed") or []:
        lines.append(f"{kind} signal borrowed: {borrowed}")
    return lines


def run_assumptions(run: RunData) -> list[tuple[str, str]]:
    """(topic, text) of everything one run directory records about how it was set up."""
    s, cfg = run.summary, run.config
    out: list[tuple[str, str]] = []
    cluster = s.get("cluster") if isinstance(s.get("cluster"), dict) else {}
    if cluster:
        models = cluster.get("gpu_models") or {}
        mix = ", ".join(f"{v.get('nodes')} nodes x {m}" for m, v in models.items() if isinstance(v, dict))
        out.append(
            (
                "cluster",
                f"{cluster.get('name', MISSING)}: {cluster.get('nodes', MISSING)} nodes, "
                f"{cluster.get('gpus', MISSING)} GPUs" + (f" ({mix})" if mix else ""),
            )
        )
        if cluster.get("notes"):
            out.append(("cluster", str(cluster["notes"])))
    if s.get("workload_source"):
        out.append(
            (
                "workload",
                f"{s['workload_source']} ({s.get('mode', 'temporal')} mode, {s.get('jobs_submitted', MISSING)} "
                f"jobs submitted, {s.get('jobs_invalid_skipped', 0)} invalid rows skipped, seed "
                f"{s.get('seed', MISSING)})",
            )
        )
    for note in s.get("notes") or []:
        out.append(("note", str(note)))
    if run.jobs is not None and "model_assigned" in run.jobs:
        assigned = int(run.jobs["model_assigned"].astype(str).str.lower().eq("true").sum())
        out.append(
            (
                "model assignment",
                f"assign_models={cfg.get('assign_models', MISSING)}: {assigned} of {len(run.jobs)} jobs were "
                "given a model by the seeded rule",
            )
        )
    model = s.get("energy_model") if isinstance(s.get("energy_model"), dict) else {}
    if model:
        manager = s.get("power_manager", cfg.get("power_manager", MISSING))
        out.append(
            (
                "energy model",
                f"power model {model.get('power_model', MISSING)}, node base {model.get('node_base_w', MISSING)} W, "
                f"PUE {model.get('pue', MISSING)}, power manager {manager}",
            )
        )
        states = model.get("power_states")
        if isinstance(states, dict) and manager != "always-on":
            out.append(("power states", ", ".join(f"{k}={v}" for k, v in states.items())))
        for kind in ("price", "carbon"):
            if isinstance(model.get(kind), dict):
                out += [("signal alignment", line) for line in _signal_lines(kind, model[kind])]
    perf = s.get("performance_model")
    if not isinstance(perf, dict):
        perf = {}
    tables = perf.get("tables")
    if isinstance(tables, dict) and tables:
        text = ", ".join(f"{gpu}: {table}" for gpu, table in tables.items())
        out.append(("performance model", f"throughput tables {text} ({perf.get('jobs_with_table', 0)} jobs)"))
    for key in ("work_unit", "restart_model", "formula", "sharing_model"):
        if isinstance(perf.get(key), str):
            out.append(("performance model", f"{key.replace('_', ' ')}: {perf[key]}"))
    policies = s.get("policies")
    if not isinstance(policies, dict):
        policies = {}
    for part, p in policies.items():
        if isinstance(p, dict) and p.get("reconstructed"):
            out.append(
                ("reconstructed policy", f"{part} {p.get('name')}: {p.get('basis') or 'no basis recorded'}")
            )
    return out


def experiment_assumptions(source: Path) -> tuple[list[tuple[str, str]], str | None]:
    """(topic, text) of an experiment directory's recorded notes and settings (an experiment's summary.json
    where it writes one, its config.yaml), and its summary.md text when present."""
    s = {**_read_yaml(source / "config.yaml"), **_read_json(source / "summary.json")}
    out = [("note", str(n)) for n in s.get("notes") or []]
    for key in ("cluster", "trace", "workload"):
        if isinstance(s.get(key), str | int | float):
            out.append((key, str(s[key])))
    try:
        text = (source / "summary.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = None
    return out, text
