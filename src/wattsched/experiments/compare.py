"""The comparison table of runs, shared by `wattsched compare` and the HTML report.

A row is one run: a run directory (``summary.json`` and ``config.resolved.yaml``, written by ``simulate --out``),
each run directory inside a directory of runs (``wattsched demo``'s output), or each run of an experiment as its
``records.csv`` records it (the one run-record schema of ``experiments/protocol.py``). Columns: the run's label,
its policy, whether a registered policy it ran is a reconstruction and on what basis, the metrics (``METRICS``; a
column only where some run records it, NaN for a run that does not) and each metric's change against a baseline
run in per cent. Pure: directories in, a DataFrame out.

Run directories compared with one another are charged over one common window (``experiments.window``): their
energy, cost and carbon columns hold the common-window figures, ``own_window_kwh`` the run's own, and
``frame.attrs["window"]`` names the window. An experiment's rows are as the experiment reports them (each
experiment charges its compared runs over their common window itself).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.errors import WattschedError
from ..core.registry import Registry
from ..workloads.validate import one_line

MISSING = "\u2014"  # an em dash: how a value a run does not record is shown
DELTA_SUFFIX = "_delta_pct"
COMPONENT_PREFIX, COMPONENT_SUFFIX = "energy_", "_kwh"  # energy_gpu_active_kwh: one energy component
RUN_FILES = ("summary.json", "config.resolved.yaml")
LABEL_COLUMNS = ("run", "source", "experiment", "policy", "reconstructed", "basis", "baseline")


@dataclass(frozen=True)
class Metric:
    """One metric column: its key (SI units: kWh, s, a fraction) and how the terminal shows it."""

    key: str
    header: str
    scale: float = 1.0  # shown value = value x scale (seconds as hours, fractions as per cent)
    decimals: int = 2
    definition: str = ""  # printed under a table that shows the column, where the header alone is not enough


METRICS = (
    Metric("jobs_completed", "done", decimals=0),
    Metric("energy_kwh", "kWh", decimals=1),
    Metric("own_window_kwh", "own kWh", decimals=1),  # up to the run's own last completion
    # the energy components (energy_<component>_kwh) follow the total, in the order the runs record them
    Metric("cost_usd", "USD", decimals=0),
    Metric("co2_kg", "kg CO2", decimals=0),
    Metric("jct_mean_s", "JCT h", 1 / 3600),
    Metric("jct_p95_s", "p95 h", 1 / 3600),
    Metric("queue_delay_mean_s", "wait h", 1 / 3600),
    Metric("makespan_s", "span h", 1 / 3600, 1),
    Metric("gpu_allocation", "GPU %", 100, 1),
    Metric(
        "grar",
        "GRAR",
        decimals=3,
        definition="GPU resource allocation ratio: allocated over arrived GPU capacity once every pod has arrived",
    ),
    Metric(
        "deadline_misses",
        "misses",
        decimals=0,
        definition="jobs with a deadline that finished after it or not at all",
    ),
    Metric(
        "slo_violation_hours",
        "late svc-h",
        decimals=0,
        definition="inference service-hours whose GPUs started after the hour began, whose requests were not all "
        "served within the hour (on fewer GPUs than asked, slower, or stopped), or never served; each counts as one, "
        "however late (summary.json slo_violation_hours; the late requests are slo_violation_requests)",
    ),
    Metric("restarts", "restarts", decimals=0),
)


def column_definitions(frame: pd.DataFrame, keys: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """(header, definition) of every column of `frame` (of `keys`, if given) whose header needs one."""
    return [
        (m.header, m.definition)
        for m in metrics_of(frame)
        if m.definition and (keys is None or m.key in keys)
    ]


def is_component(key: str) -> bool:
    """Whether a column is one energy component (``energy_<component>_kwh``), not the total."""
    return key.startswith(COMPONENT_PREFIX) and key.endswith(COMPONENT_SUFFIX) and key != "energy_kwh"


def component_metric(key: str) -> Metric:
    name = key.removeprefix(COMPONENT_PREFIX).removesuffix(COMPONENT_SUFFIX)
    return Metric(key, name.replace("_", " "), decimals=1)


def metrics_of(frame: pd.DataFrame) -> list[Metric]:
    """The metrics of a comparison frame, in display order."""
    known = {m.key: m for m in METRICS}
    out = []
    for col in frame.columns:
        if col in known:
            out.append(known[col])
        elif is_component(col):
            out.append(component_metric(col))
    return out


def format_value(metric: Metric, value: float) -> str:
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{value * metric.scale:,.{metric.decimals}f}"


def format_delta(value: float) -> str:
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{round(value, 1) + 0.0:+.1f}%"  # + 0.0: no "-0.0%"


def shown_metrics(frame: pd.DataFrame) -> list[Metric]:
    """The metrics worth a column on screen: all of the frame's but energy components no run draws."""
    return [m for m in metrics_of(frame) if not (is_component(m.key) and (frame[m.key].fillna(0) == 0).all())]


# -- what a run records ------------------------------------------------------------------------------------


def _number(obj: Any, *keys: str) -> float:
    """The number at `keys` in nested mappings; NaN when a key is missing or the value is not a number."""
    for key in keys:
        if not isinstance(obj, Mapping):
            return math.nan
        obj = obj.get(key)
    if isinstance(obj, bool) or not isinstance(obj, int | float):
        return math.nan
    return float(obj)


def reconstruction_bases(knobs: Mapping[str, str]) -> list[str]:
    """``name: basis`` of every reconstructed registered policy among `knobs` (setting -> registered name)."""
    from ..policies import PLACEMENT_POLICIES, QUEUE_POLICIES
    from ..policies.contract import ALLOCATION_POLICIES, POWER_MANAGERS

    registries: dict[str, Registry[Any]] = {
        "queue": QUEUE_POLICIES,
        "placement": PLACEMENT_POLICIES,
        "allocation": ALLOCATION_POLICIES,
        "power_manager": POWER_MANAGERS,
    }
    out = []
    for setting, name in knobs.items():
        registry = registries.get(setting)
        if registry is None or not isinstance(name, str) or name not in registry:
            continue
        factory: Any = registry.factory(name)  # a policy class: description is a class attribute
        if getattr(factory, "reconstructed", False):
            out.append(_basis_line(name, getattr(factory, "basis", "") or factory.description))
    return out


def _basis_line(name: str, basis: str | None) -> str:
    return f"{name}: {basis}" if basis else name


def _row(label: str, source: Path, experiment: str, policy: str, bases: list[str], metrics: dict) -> dict:
    return {
        "run": label,
        "source": str(source),
        "experiment": experiment,
        "policy": policy,
        "reconstructed": bool(bases),
        "basis": "; ".join(dict.fromkeys(bases)),
        **metrics,
    }


def _read_summary(path: Path) -> dict[str, Any]:
    file = path / "summary.json"
    try:
        summary = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WattschedError(f"{file}: cannot read the run summary ({exc})") from None
    if not isinstance(summary, dict):
        raise WattschedError(f"{file}: not a run summary (expected a JSON object)")
    return summary


def summary_policy(s: Mapping[str, Any]) -> tuple[str, list[str]]:
    """A run summary's policy label (allocation, else queue+placement; the power manager unless always-on) and
    the basis lines of the reconstructions it ran."""
    policies = s.get("policies")
    if not isinstance(policies, dict):
        policies = {}
    parts = {k: v for k, v in policies.items() if isinstance(v, dict) and isinstance(v.get("name"), str)}
    names = [parts[k]["name"] for k in ("allocation",) if k in parts] or [
        parts[k]["name"] for k in ("queue", "placement") if k in parts
    ]
    manager = s.get("power_manager")
    policy = "+".join(names) or MISSING
    if isinstance(manager, str) and manager != "always-on":
        policy += f", {manager}"
    bases = [_basis_line(p["name"], p.get("basis")) for p in parts.values() if p.get("reconstructed")]
    if isinstance(manager, str):
        bases += reconstruction_bases({"power_manager": manager})
    return policy, bases


def summary_metrics(s: Mapping[str, Any]) -> dict[str, float]:
    """A run summary's figures under the comparison's metric names (``METRICS``; NaN where it records none)."""
    allocation = _number(s, "gpu_allocation_mean")
    components = s.get("energy_by_component_kwh")
    return {
        # the packing procedure places pods and completes none
        "jobs_completed": _number(s, "jobs_completed") if s.get("mode") != "packing" else math.nan,
        "energy_kwh": _number(s, "energy_kwh"),
        **{
            f"{COMPONENT_PREFIX}{name}{COMPONENT_SUFFIX}": _number(components, name)
            for name in (components if isinstance(components, dict) else {})
        },
        "cost_usd": _number(s, "cost_usd"),
        "co2_kg": _number(s, "co2_kg"),
        "jct_mean_s": _number(s, "jct_s", "mean"),
        "jct_p95_s": _number(s, "jct_s", "p95"),
        "queue_delay_mean_s": _number(s, "queue_delay_s", "mean"),
        "makespan_s": _number(s, "makespan_s"),
        # packing runs record the allocation once every pod has arrived, not a time average
        "gpu_allocation": allocation if not math.isnan(allocation) else _number(s, "gpu_allocation_final"),
        "grar": _number(s, "grar_final"),
        "deadline_misses": _number(s, "deadline_misses"),
        "slo_violation_hours": _number(s, "slo_violation_hours"),
        "restarts": _number(s, "restarts"),
    }


def run_row(path: Path) -> dict[str, Any]:
    """The comparison row of one run directory."""
    s = _read_summary(path)
    policy, bases = summary_policy(s)
    metrics = summary_metrics(s)
    row = _row(str(path), path, "", policy, bases, metrics)
    if isinstance(s.get("tail_power"), dict):
        row["_summary"] = s  # for the common window (`_on_common_window`)
    return row


# -- a protocol experiment's records: one schema for any experiment (experiments/protocol.py) -----------------
PROTOCOL_RECORDS = "records.csv"
PROTOCOL_MARKER = frozenset({"experiment", "policy", "basis"})


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == ""


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def is_protocol_output(path: Path) -> bool:
    file = path / PROTOCOL_RECORDS
    if not file.is_file():
        return False
    try:
        return set(pd.read_csv(file, nrows=0).columns) >= PROTOCOL_MARKER
    except (OSError, ValueError, pd.errors.ParserError):
        return False


def protocol_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a protocol experiment's ``records.csv``: its metric columns carry the comparison's names
    already; the columns between ``experiment`` and ``policy`` tell its runs apart (the row label); columns of the
    experiment's own after the metrics are not compared."""
    file = path / PROTOCOL_RECORDS
    try:
        table = pd.read_csv(file)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise WattschedError(f"{file}: cannot read the experiment's records ({one_line(exc)})") from None
    known = {m.key for m in METRICS}
    metric_columns = [c for c in table.columns if c in known or is_component(c)]
    columns = list(table.columns)
    keys = columns[columns.index("experiment") + 1 : columns.index("policy")]  # the schema: keys sit between
    rows = []
    for i, row in enumerate(table.to_dict("records")):
        label = " ".join(f"{k}={_text(row[k])}" for k in keys if not _is_missing(row[k])) or f"row {i + 1}"
        bases = [b for b in str(row.get("basis") or "").split(" | ") if b and b != "nan"]
        metrics = {c: float(pd.to_numeric(row[c], errors="coerce")) for c in metric_columns}
        rows.append(_row(f"{path} {label}", path, str(row["experiment"]), str(row["policy"]), bases, metrics))
    return rows


def _no_runs_reason(path: Path) -> str:
    """Why a protocol experiment recorded no runs: its summary.md says (the line after its title and
    description is its settings; a grid of the experiment's own kind only, e.g. small instances of a ratio
    study, states it)."""
    try:
        title = (path / "summary.md").read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
    except (OSError, UnicodeDecodeError, IndexError):
        title = "the"
    return (
        f"the {title} experiment recorded none in {PROTOCOL_RECORDS} (every cell of its grid is of its own kind; "
        "see its summary.md and its own tables)"
    )


# -- rows of any directory ---------------------------------------------------------------------------------


def is_run_dir(path: Path) -> bool:
    return all((path / name).is_file() for name in RUN_FILES)


def rows_of(path: str | Path) -> list[dict[str, Any]]:
    """The comparison rows of a run directory, an experiment's output directory or a directory of runs."""
    path = Path(path)
    if not path.exists():
        raise WattschedError(f"{path}: no such directory")
    if not path.is_dir():
        raise WattschedError(
            f"{path}: is a file; expected a run directory or an experiment's output directory"
        )
    if is_run_dir(path):
        return [run_row(path)]
    if is_protocol_output(path):
        rows = protocol_rows(path)
        if not rows:
            raise WattschedError(f"{path}: no runs to compare: {_no_runs_reason(path)}")
        return rows
    runs = sorted(p for p in path.iterdir() if p.is_dir() and is_run_dir(p))
    if runs:
        return [run_row(p) for p in runs]
    if (path / "summary.json").is_file():
        raise WattschedError(
            f"{path}: not a complete run directory (no config.resolved.yaml beside summary.json)"
        )
    raise WattschedError(
        f"{path}: not a run directory ({' and '.join(RUN_FILES)}), nor the output of a wattsched experiment, nor a "
        "directory of run directories"
    )


def _joined(rows: list[dict], new: list[dict], first: bool = False) -> list[dict]:
    labels = {r["run"] for r in rows}
    for r in new:
        if r["run"] in labels:
            raise WattschedError(f"{r['run']} is given twice")
    return new + rows if first else rows + new


def comparison(paths: Sequence[str | Path], baseline: str | Path | None = None) -> pd.DataFrame:
    """One row per run of `paths` (run directories, experiment outputs, directories of runs), its metrics and
    each metric's change in per cent against `baseline`: a row's label (``run``), a run directory among or
    beside `paths` (added as the first row), or None for the first row."""
    if not paths:
        raise WattschedError("no run directories given")
    rows: list[dict] = []
    for path in paths:
        rows = _joined(rows, rows_of(path))
    rows, base = _with_baseline(rows, baseline)
    window = _on_common_window(rows)
    frame = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])
    frame["baseline"] = np.arange(len(frame)) == base
    metric_cols = [m.key for m in metrics_of(frame)]
    present = [c for c in metric_cols if frame[c].notna().any()]  # a metric no run records is left out
    frame = frame[[*LABEL_COLUMNS, *present]].copy()
    for col in present:
        frame[col + DELTA_SUFFIX] = _delta_pct(frame[col].to_numpy(float), float(frame[col].iloc[base]))
    frame.attrs["window"] = window
    return frame


def short_label(row: Mapping[str, Any]) -> str:
    """A row's label without its directory: a run directory's name, an experiment row's keys."""
    label, source = str(row["run"]), str(row["source"])
    if label == source:
        return Path(source).name
    return label[len(source) :].strip() if label.startswith(source) else label


def _short_matches(rows: list[dict], text: str) -> list[int]:
    """Rows a short `--baseline` names: by their short label, else by their policy or one of their keys' values
    (``fifo`` for ``runs/eaco nodes=28 policy=fifo seed=42``)."""
    exact = [i for i, r in enumerate(rows) if short_label(r) == text]
    if exact:
        return exact
    loose = []
    for i, r in enumerate(rows):
        words = short_label(r).split()
        values = {w.partition("=")[2] for w in words if "=" in w} | set(words)
        if text in values or text == r["policy"] or text == str(r["policy"]).split(",")[0]:
            loose.append(i)
    return loose


def _on_common_window(rows: list[dict]) -> list[str]:
    """Charge the run directories among `rows` over their common window (in place): their energy, components,
    cost and carbon become the common-window figures, ``own_window_kwh`` keeps their own. Lines naming the
    window(s) the table uses."""
    from .config import resolve_config
    from .window import charge_summaries

    runs = [r for r in rows if "_summary" in r]
    lines = []
    if runs:
        summaries = [dict(r["_summary"]) for r in runs]
        configs = [resolve_config(Path(r["source"]) / "config.resolved.yaml", {}) for r in runs]
        lines.append("run directories: " + charge_summaries(summaries, configs))
        for r, s in zip(runs, summaries, strict=True):
            w = s["common_window"]
            r["own_window_kwh"] = r["energy_kwh"]
            r["energy_kwh"] = w["energy_kwh"]
            for name, kwh in w["energy_by_component_kwh"].items():
                r[f"{COMPONENT_PREFIX}{name}{COMPONENT_SUFFIX}"] = kwh
            r["cost_usd"] = _number(w, "cost_usd")
            r["co2_kg"] = _number(w, "co2_kg")
    others: dict[str, bool] = {}
    for r in rows:
        if "_summary" in r or math.isnan(r.get("energy_kwh", math.nan)):
            continue  # charged above, or no energy to charge (packing runs)
        name = r["experiment"] or "run directories without a recorded tail"
        common = not math.isnan(r.get("own_window_kwh", math.nan))
        others[name] = others.get(name, True) and common
    for name, common in sorted(others.items()):
        lines.append(
            f"{name}: the common window of the experiment's compared runs, as its table records it"
            if common
            else f"{name}: each run's own window, from its first submission to its own last completion (written "
            "before common-window accounting: rerun to compare over a common window)"
        )
    return lines


def _with_baseline(rows: list[dict], baseline: str | Path | None) -> tuple[list[dict], int]:
    """The rows (with the baseline's prepended when it is not among them) and the baseline's index: `baseline` is
    a row's label, its short label (:func:`short_label`, or its policy when that names one row), a run directory
    among the rows, or a run directory beside them."""
    if baseline is None:
        return rows, 0
    text = str(baseline)
    labels = [r["run"] for r in rows]
    if text in labels:
        return rows, labels.index(text)
    short = _short_matches(rows, text)
    if len(short) == 1:
        return rows, short[0]
    if len(short) > 1:
        some = ", ".join(repr(short_label(rows[i])) for i in short[:4])
        raise WattschedError(
            f"--baseline {text} matches {len(short)} runs ({some}{', ...' if len(short) > 4 else ''}); "
            "give one of their labels"
        )
    with_source = [i for i, r in enumerate(rows) if _same_path(r["source"], text)]
    if len(with_source) == 1:
        return rows, with_source[0]
    if len(with_source) > 1:
        some = ", ".join(repr(labels[i]) for i in with_source[:2])
        raise WattschedError(
            f"--baseline {text} holds {len(with_source)} runs; give the label of one of them, e.g. {some}"
        )
    if not Path(text).is_dir():
        names = ", ".join(dict.fromkeys(short_label(r) for r in rows))
        raise WattschedError(
            f"--baseline {text}: matches none of the runs compared and is not a run directory; labels: {names}"
        )
    added = rows_of(text)
    if len(added) != 1:
        raise WattschedError(f"--baseline {text} holds {len(added)} runs; give a single run directory")
    return _joined(rows, added, first=True), 0


def _same_path(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, ValueError):
        return False


def _delta_pct(values: np.ndarray, base: float) -> np.ndarray:
    """(value - base) / |base| in per cent; 0 where both are 0, NaN where the base is 0 (or missing) otherwise."""
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = (values - base) / abs(base) * 100.0
    if base == 0:
        delta = np.where(values == 0, 0.0, np.nan)
    return delta


# -- one job model -----------------------------------------------------------------------------------------


def job_model_differences(frame: pd.DataFrame):
    """The settings other than the policies in which the run directories of a comparison frame differ
    (experiments/jobmodel.py); experiment rows are left out (every experiment checks its own runs)."""
    from .jobmodel import run_differences

    records = [r for r in frame.to_dict("records") if not r["experiment"] and is_run_dir(Path(r["source"]))]
    short = [short_label(r) for r in records]
    unique = len(set(short)) == len(short)  # a directory's name where it tells the runs apart
    return run_differences(
        {(s if unique else str(r["run"])): str(r["source"]) for s, r in zip(short, records, strict=True)}
    )
