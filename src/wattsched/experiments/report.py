"""The HTML report of runs: one self-contained file (styles inline, plots inline as SVG, no script, no network).

`build_report(paths, baseline)` reads run directories (``simulate --out``), directories of runs and experiment
outputs, and returns the HTML text: the comparison table of every run (experiments/compare.py builds it, with
each metric's change against the baseline), the assumptions the runs recorded (cluster sizing, workload, model
assignment, grid-signal alignment, energy model, reconstructed policies and their basis), and the plots the data
allows: cluster power with the price and carbon series on second axes, nodes on / booting / off, allocated GPUs
and queue length, JCT distributions (CDF), energy against mean JCT (the trade-off frontier) and, for FGD/PWR
packing experiments, their curves. Long series are thinned so the file stays small. Pure: directories in, text
out (the CLI writes it).

Still one file (~770 lines): the one HTML page, section by section (tables, assumptions, plots); its sections
share the page's escaping and styles. The per-experiment readers it needs shrink as experiments move onto the
protocol (``experiments/protocol.py``).
"""

from __future__ import annotations

import html
import importlib.util
import io
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .compare import (
    DELTA_SUFFIX,
    MISSING,
    column_definitions,
    comparison,
    format_delta,
    format_value,
    is_component,
    is_run_dir,
    job_model_differences,
    shown_metrics,
)
from .config import flat_settings
from .grid import thinned
from .jobmodel import summary_line

SERIES_POINTS = 500  # samples of a time series per run in a plot
CDF_POINTS = 200  # quantiles of a JCT distribution per run
MAX_LINES = 12  # runs drawn in a plot of one line per run; the rest are named in the caption
LABELLED_POINTS = 20  # the energy-vs-JCT plot names its points up to this many runs
PLOT_IDS = ("power", "nodes", "gpus-queue", "jct-cdf", "energy-jct", "fgd-pwr")

PathLike = str | Path


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


# -- plots ---------------------------------------------------------------------------------------------------
PLOTS_SKIPPED = "plots skipped: matplotlib is not installed (pip install 'wattsched[plots]')"


def plots_available() -> bool:
    """matplotlib is an extra (`wattsched[plots]`): without it the report has its tables and no figures."""
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        return False


def _svg(fig, key: str) -> str:
    """A figure as inline SVG: text kept as text, ids salted per figure (the SVGs share one document), no XML
    prolog, DOCTYPE or metadata block; the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"wattsched-{key}"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = buf.getvalue()
    text = re.sub(r"<\?xml[^>]*\?>\s*", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    return text.strip()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _on_grid(series: pd.DataFrame, column: str, times: np.ndarray) -> np.ndarray:
    """A step series (value holds from its event until the next) sampled at `times`."""
    t = series["time_s"].to_numpy(float)
    v = pd.to_numeric(series[column], errors="coerce").to_numpy(float)
    idx = np.searchsorted(t, times, side="right") - 1
    return np.where(idx >= 0, v[np.clip(idx, 0, len(v) - 1)], np.nan)


def _sampled(series: pd.DataFrame, columns: Sequence[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Hours and each column sampled on an even grid of at most SERIES_POINTS times (the series' own times
    when it is shorter)."""
    t = series["time_s"].to_numpy(float)
    if len(t) <= SERIES_POINTS:
        times = t
        values = {c: pd.to_numeric(series[c], errors="coerce").to_numpy(float) for c in columns}
    else:
        times = np.linspace(t[0], t[-1], SERIES_POINTS)
        values = {c: _on_grid(series, c, times) for c in columns}
    return times / 3600.0, values


def _with_series(runs: list[RunData], *columns: str) -> list[RunData]:
    return [
        r
        for r in runs
        if r.series is not None and len(r.series) > 0 and {"time_s", *columns} <= set(r.series)
    ]


def _series(run: RunData) -> pd.DataFrame:
    """The series of a run that `_with_series` kept."""
    assert run.series is not None
    return run.series


def _dropped(drawn: list[RunData], having: list[RunData]) -> str:
    left = having[len(drawn) :]
    return f" The first {len(drawn)} of {len(having)} runs are drawn." if left else ""


def _colors(n: int) -> list:
    plt = _pyplot()
    return list(plt.get_cmap("tab10").colors * (n // 10 + 1))[:n]


def _legend_below(ax, handles=None, labels=None) -> None:
    """The figure's legend under its axes, out of the data's way (the SVG is cut to fit it)."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    fig = ax.figure
    fig.tight_layout()
    fig.legend(
        handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, frameon=False
    )


def plot_power(runs: list[RunData]) -> tuple[str, str] | None:
    having = _with_series(runs, "power_w")
    if not having:
        return None
    plt = _pyplot()
    drawn = having[:MAX_LINES]
    fig, ax = plt.subplots(figsize=(10, 4.2))
    for r, color in zip(drawn, _colors(len(drawn)), strict=True):
        hours, v = _sampled(r.series, ["power_w"])
        ax.step(hours, v["power_w"] / 1e3, where="post", lw=0.9, color=color, label=r.name)
    ax.set(xlabel="time (h)", ylabel="cluster power (kW)", title="Cluster power over time")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    signals = []
    for column, name, unit, color, offset in (
        ("price_usd_per_mwh", "price", "USD/MWh", "black", 1.0),
        ("carbon_g_per_kwh", "carbon intensity", "gCO2/kWh", "tab:green", 1.12),
    ):
        recording = [r for r in having if column in _series(r) and _series(r)[column].notna().any()]
        if not recording:
            continue
        # Runs sample the signal at their own events: the most densely sampled run draws it most faithfully.
        source = max(recording, key=lambda r: int(_series(r)[column].notna().sum()))
        twin = ax.twinx()
        twin.spines["right"].set_position(("axes", offset))
        hours, v = _sampled(source.series, [column])
        (line,) = twin.step(hours, v[column], where="post", lw=1.0, ls="--", color=color, alpha=0.7)
        twin.set_ylabel(f"{name} ({unit})", color=color)
        twin.tick_params(axis="y", colors=color)
        handles.append(line)
        labels.append(f"{name} (right axis)")
        signals.append(f"the {name} series as {source.name} sampled it")
    _legend_below(ax, handles, labels)
    caption = "Cluster power of each run (left axis, kW)"
    caption += (
        f"; dashed, on the right axes: {' and '.join(signals)}." if signals else "; no run records a price."
    )
    return _svg(fig, "power"), caption + _dropped(drawn, having)


def plot_nodes(runs: list[RunData]) -> tuple[str, str] | None:
    columns = ("nodes_on", "nodes_booting", "nodes_off")
    having = _with_series(runs, *columns)
    if not having:
        return None
    plt = _pyplot()
    drawn = having[:MAX_LINES]
    fig, axes = plt.subplots(3, 1, figsize=(10, 5.4), sharex=True)
    for r, color in zip(drawn, _colors(len(drawn)), strict=True):
        hours, v = _sampled(r.series, columns)
        for ax, column in zip(axes, columns, strict=True):
            ax.step(hours, v[column], where="post", lw=0.9, color=color, label=r.name)
    for ax, column in zip(axes, columns, strict=True):
        ax.set_ylabel(column.replace("_", " "))
        ax.grid(alpha=0.3)
    axes[0].set_title("Nodes on, booting and off")
    axes[-1].set_xlabel("time (h)")
    _legend_below(axes[-1])
    return _svg(fig, "nodes"), "Node power states of each run over time." + _dropped(drawn, having)


def plot_gpus_queue(runs: list[RunData]) -> tuple[str, str] | None:
    columns = ("allocated_gpus", "queue_length")
    having = _with_series(runs, *columns)
    if not having:
        return None
    plt = _pyplot()
    drawn = having[:MAX_LINES]
    fig, (ax_gpu, ax_queue) = plt.subplots(2, 1, figsize=(10, 4.8), sharex=True)
    for r, color in zip(drawn, _colors(len(drawn)), strict=True):
        hours, v = _sampled(r.series, columns)
        ax_gpu.step(hours, v["allocated_gpus"], where="post", lw=0.9, color=color, label=r.name)
        ax_queue.step(hours, v["queue_length"], where="post", lw=0.9, color=color, label=r.name)
    ax_gpu.set(ylabel="allocated GPUs", title="Allocated GPUs and queue length")
    ax_queue.set(ylabel="queued jobs", xlabel="time (h)")
    for ax in (ax_gpu, ax_queue):
        ax.grid(alpha=0.3)
    _legend_below(ax_queue)
    return _svg(fig, "gpus-queue"), "Allocated GPUs and queued jobs of each run." + _dropped(drawn, having)


def _jct(run: RunData) -> np.ndarray:
    jobs = run.jobs
    if jobs is None or "jct_s" not in jobs:
        return np.zeros(0)
    done = jobs["status"].astype(str) == "completed" if "status" in jobs else np.ones(len(jobs), bool)
    values = pd.to_numeric(jobs.loc[done, "jct_s"], errors="coerce").to_numpy(float)
    return np.sort(values[np.isfinite(values)])


def plot_jct_cdf(runs: list[RunData]) -> tuple[str, str] | None:
    having = [(r, jct) for r in runs if len(jct := _jct(r))]
    if not having:
        return None
    plt = _pyplot()
    drawn = having[:MAX_LINES]
    fig, ax = plt.subplots(figsize=(10, 4.2))
    for (r, jct), color in zip(drawn, _colors(len(drawn)), strict=True):
        idx = thinned(len(jct), CDF_POINTS)
        ax.step(jct[idx] / 3600.0, (idx + 1) / len(jct), where="post", lw=1.0, color=color, label=r.name)
    if min(jct[0] for _, jct in drawn) > 0:
        ax.set_xscale("log")
    ax.set(xlabel="job completion time (h)", ylabel="fraction of completed jobs", ylim=(0, 1.01),
           title="JCT distribution (CDF)")  # fmt: skip
    ax.grid(alpha=0.3, which="both")
    _legend_below(ax)
    caption = "Completion time of every completed job, one line per run."
    return _svg(fig, "jct-cdf"), caption + _dropped([r for r, _ in drawn], [r for r, _ in having])


def frontier(energy: np.ndarray, jct: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both energy and mean JCT, by increasing JCT."""
    order = np.lexsort((energy, jct))
    best, out = math.inf, []
    for i in order:
        if energy[i] < best:
            best = energy[i]
            out.append(int(i))
    return np.asarray(out, dtype=np.int64)


def plot_energy_jct(frame: pd.DataFrame, names: list[str]) -> tuple[str, str] | None:
    if "energy_kwh" not in frame or "jct_mean_s" not in frame:
        return None
    ok = (frame["energy_kwh"].notna() & frame["jct_mean_s"].notna()).to_numpy()
    if not ok.any():
        return None
    plt = _pyplot()
    energy = frame["energy_kwh"].to_numpy(float)[ok]
    jct = frame["jct_mean_s"].to_numpy(float)[ok] / 3600.0
    base = frame["baseline"].to_numpy(bool)[ok]
    labels = [n for n, keep in zip(names, ok, strict=True) if keep]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    ax.scatter(jct[~base], energy[~base], s=28, color="tab:blue", zorder=3, label="run")
    ax.scatter(jct[base], energy[base], s=90, marker="*", color="tab:red", zorder=4, label="baseline")
    front = frontier(energy, jct)
    if len(front) > 1:
        ax.plot(jct[front], energy[front], color="grey", lw=1, ls="--", zorder=2, label="frontier")
    if len(labels) <= LABELLED_POINTS:
        for x, y, name in zip(jct, energy, labels, strict=True):
            ax.annotate(name, (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.set(xlabel="mean JCT (h)", ylabel="energy (kWh)", title="Energy against mean JCT")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    caption = (
        f"One point per run ({int(ok.sum())} of {len(frame)} record both); the dashed line joins the runs no "
        "other run beats on both energy and mean JCT (the trade-off frontier)."
    )
    return _svg(fig, "energy-jct"), caption


def plot_fgd_pwr(source: Path, key: str) -> tuple[str, str] | None:
    """The FGD/PWR curves of one experiment directory: GPU allocation and fragmentation against the arrived
    workload, estimated cluster power and GRAR on the 0.005 grid, each the mean over seeds per policy."""
    from .fgd_pwr import line_style

    try:
        curves = pd.read_csv(source / "curves.csv")
    except (OSError, ValueError):
        return None
    grid = None
    if (source / "grid.csv").is_file():
        try:
            grid = pd.read_csv(source / "grid.csv")
        except (OSError, ValueError):
            grid = None
    if not {"policy", "arrived_pct", "alloc_pct"} <= set(curves.columns):
        return None
    plt = _pyplot()
    policies = list(dict.fromkeys(curves["policy"].astype(str)))
    spare = iter(plt.get_cmap("tab10").colors * 4)
    style = {p: line_style(p, spare) for p in policies}
    mean_curve = curves.groupby(["policy", "arrived_pct"], sort=False).mean(numeric_only=True).reset_index()
    panels = [("arrived_pct", "alloc_pct", "GPU allocation ratio (%)", mean_curve)]
    if "frag_ratio_pct" in curves:
        panels.append(("arrived_pct", "frag_ratio_pct", "fragmentation ratio (%)", mean_curve))
    if grid is not None and {"policy", "x", "power_w"} <= set(grid.columns):
        mean_grid = grid.groupby(["policy", "x"], sort=False).mean(numeric_only=True).reset_index()
        mean_grid["power_mw"] = mean_grid["power_w"] / 1e6
        panels.append(("x", "power_mw", "cluster power (MW)", mean_grid))
        if {"used_milli", "arrived_milli"} <= set(grid.columns):
            mean_grid["grar"] = mean_grid["used_milli"] / mean_grid["arrived_milli"].where(
                mean_grid["arrived_milli"] > 0
            )
            panels.append(("x", "grar", "GRAR (used / arrived)", mean_grid))
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(11, 3.6 * rows), squeeze=False)
    for ax, (x, y, ylabel, data) in zip(axes.flat, panels, strict=False):
        for p in policies:
            d = data[data["policy"].astype(str) == p]
            if len(d) > SERIES_POINTS:
                d = d.iloc[thinned(len(d), SERIES_POINTS)]
            ax.plot(d[x], d[y], label=p, **style[p])
        xlabel = "arrived workload (% of GPU capacity)" if x == "arrived_pct" else "arrived GPUs / capacity"
        ax.set(xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    axes[0][0].legend(fontsize=7, ncol=2)
    fig.suptitle(f"FGD/PWR curves: {source.name}")
    seeds = curves["seed"].nunique() if "seed" in curves else 1
    caption = f"{source}: {len(policies)} placement policies, mean over {seeds} seed(s) per policy."
    return _svg(fig, key), caption


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
    """(topic, text) of an experiment directory's recorded notes, and its summary.md text when present."""
    s = _read_json(source / "summary.json")
    out = [("note", str(n)) for n in s.get("notes") or []]
    for key in ("cluster", "trace", "workload"):
        if isinstance(s.get(key), str | int | float):
            out.append((key, str(s[key])))
    try:
        text = (source / "summary.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = None
    return out, text


# -- HTML ------------------------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:1rem 1.5rem;color:#1d2330;background:#fff;line-height:1.45}
h1{font-size:1.6rem;margin:.2rem 0}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #d8dde6;
padding-bottom:.2rem}
.meta{color:#5a6272;font-size:.85rem}
nav a{margin-right:1rem;font-size:.9rem}
.scroll{overflow-x:auto;max-height:75vh;overflow-y:auto;border:1px solid #e3e7ee}
table{border-collapse:collapse;font-size:.8rem;width:100%}
th,td{padding:.25rem .45rem;border-bottom:1px solid #eef0f4;text-align:right;white-space:nowrap;vertical-align:top}
th{background:#f3f5f9;position:sticky;top:0;z-index:1}
td.l,th.l{text-align:left;white-space:normal;min-width:8rem}
tr.base td{background:#fff7e0}
.delta{display:block;font-size:.72rem;color:#6b7385}.better{color:#1a7f37}.worse{color:#b3261e}
.rec{display:inline-block;font-size:.7rem;background:#fff1c2;color:#7a5b00;border-radius:3px;padding:0 .3rem;
margin-left:.3rem}
figure{margin:1rem 0 1.6rem}figure svg{max-width:100%;height:auto}
figcaption{font-size:.85rem;color:#5a6272}
.missing{color:#8a91a0;font-style:italic;font-size:.9rem}
ul.assume{font-size:.85rem}ul.assume li{margin:.15rem 0}.runs{color:#6b7385}
p.warn{background:#fde8e6;border-left:3px solid #b3261e;padding:.5rem 1rem;font-size:.9rem}
ul.notes{font-size:.9rem;background:#f7f8fb;border-left:3px solid #c9a227;padding:.5rem 1rem .5rem 2rem}
details pre{white-space:pre-wrap;font-size:.75rem;background:#f7f8fb;padding:.5rem}
"""

LOWER_IS_BETTER = {
    "energy_kwh", "cost_usd", "co2_kg", "jct_mean_s", "jct_p95_s", "queue_delay_mean_s", "makespan_s",
    "deadline_misses", "slo_violation_hours", "restarts",
}  # fmt: skip
HIGHER_IS_BETTER = {"jobs_completed", "gpu_allocation", "grar"}


def _delta_class(key: str, delta: float) -> str:
    if not math.isfinite(delta) or round(delta, 1) == 0:
        return ""
    lower = key in LOWER_IS_BETTER or is_component(key)
    if not lower and key not in HIGHER_IS_BETTER:
        return ""
    return " better" if (delta < 0) == lower else " worse"


def table_html(frame: pd.DataFrame, metrics: list, table_id: str) -> str:
    head = "".join(f'<th title="{esc(m.key)}">{esc(m.header)}</th>' for m in metrics)
    rows = []
    for r in frame.to_dict("records"):
        policy = esc(r["policy"])
        if r["reconstructed"]:
            policy += f'<span class="rec" title="{esc(r["basis"])}">reconstructed</span>'
        cells = []
        for m in metrics:
            cell = esc(format_value(m, r[m.key]))
            if not r["baseline"]:
                delta = r[m.key + DELTA_SUFFIX]
                cell += f'<span class="delta{_delta_class(m.key, delta)}">{esc(format_delta(delta))}</span>'
            cells.append(f"<td>{cell}</td>")
        mark = " <b>(baseline)</b>" if r["baseline"] else ""
        rows.append(
            f'<tr{" class=base" if r["baseline"] else ""}><td class="l">{esc(r["run"])}{mark}</td>'
            f'<td class="l">{policy}</td>{"".join(cells)}</tr>'
        )
    return (
        f'<div class="scroll"><table id="{table_id}"><thead><tr><th class="l">run</th><th class="l">policy</th>'
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _figure(key: str, title: str, made: tuple[str, str] | None, why: str) -> str:
    if made is None:
        return f'<h3>{esc(title)}</h3><p class="missing" id="plot-{key}-missing">{esc(why)}</p>'
    svg, caption = made
    return (
        f'<figure id="plot-{key}"><h3>{esc(title)}</h3>{svg}<figcaption>{esc(caption)}</figcaption></figure>'
    )


def _assumptions_html(items: list[tuple[str, str, str]], total: int) -> str:
    """items: (topic, text, run name); one line per (topic, text) with the runs that record it."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for topic, text, run in items:
        grouped.setdefault((topic, text), [])
        if run not in grouped[(topic, text)]:
            grouped[(topic, text)].append(run)
    lines = []
    for (topic, text), runs in grouped.items():
        who = "all runs" if len(runs) == total and total > 1 else ", ".join(runs)
        lines.append(f'<li><b>{esc(topic)}</b>: {esc(text)} <span class="runs">({esc(who)})</span></li>')
    return f'<ul class="assume" id="assumptions-list">{"".join(lines)}</ul>'


def build_report(
    paths: Sequence[PathLike],
    baseline: PathLike | None = None,
    title: str = "wattsched report",
    generated: str | None = None,
    notes: Sequence[str] = (),
    frame: pd.DataFrame | None = None,
) -> str:
    """The report of the runs in `paths` (see the module's docstring) as one HTML document; `notes` (what the
    reader must know first, such as generated inputs) open it. `frame`: their comparison
    (``comparison(paths, baseline)``) where the caller has it already."""
    frame = comparison(paths, baseline) if frame is None else frame
    names = short_names(frame)
    runs = [
        load_run(label, name, Path(source))
        for label, name, source, experiment in zip(
            frame["run"], names, frame["source"], frame["experiment"], strict=True
        )
        if not experiment and is_run_dir(Path(source))
    ]
    experiments = list(
        dict.fromkeys((s, e) for s, e in zip(frame["source"], frame["experiment"], strict=True) if e)
    )
    base = frame.loc[frame["baseline"], "run"].iloc[0]
    diffs = job_model_differences(frame)

    metrics = shown_metrics(frame)
    components = [m for m in metrics if is_component(m.key)]
    main = [m for m in metrics if not is_component(m.key)]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">{len(frame)} run(s) from {esc(", ".join(str(p) for p in paths))}; changes against '
        f"<b>{esc(base)}</b>" + (f"; generated {esc(generated)}" if generated else "") + "</p>",
        '<nav><a href="#comparison">comparison</a><a href="#assumptions">assumptions</a>'
        '<a href="#plots">plots</a></nav>',
        *(
            ['<ul class="notes" id="notes">', *(f"<li>{esc(n)}</li>" for n in notes), "</ul>"]
            if notes
            else []
        ),
        *(
            [
                f'<p class="warn" id="job-model-warning"><b>Not like for like.</b> {esc(summary_line(diffs))}</p>'
            ]
            if diffs
            else []
        ),
        '<h2 id="comparison">Comparison</h2>',
        f'<p class="meta">Each cell: the value, below it the change against the baseline ({esc(MISSING)}: not '
        "recorded, or no change against a baseline of 0). Green: better, red: worse. Times in hours.</p>",
        *(
            [
                '<ul class="notes" id="window">',
                *(f"<li>Window: {esc(w)}</li>" for w in frame.attrs["window"]),
                "</ul>",
            ]
            if frame.attrs.get("window")
            else []
        ),
        table_html(frame, main, "comparison-table"),
    ]
    defined = column_definitions(frame, [m.key for m in main])
    if defined:
        parts.append('<ul class="assume" id="column-definitions">')
        parts += [f"<li><b>{esc(header)}</b>: {esc(text)}</li>" for header, text in defined]
        parts.append("</ul>")
    if components:
        total = [m for m in main if m.key == "energy_kwh"]
        parts += [
            "<h3>Energy by component (kWh)</h3>",
            table_html(frame, total + components, "component-table"),
        ]
    bases = list(dict.fromkeys(frame.loc[frame["reconstructed"], "basis"]))
    if bases:
        parts.append('<h3>Reconstructed policies</h3><ul class="assume" id="reconstructed-list">')
        parts += [f"<li>{esc(b)}</li>" for b in bases]
        parts.append("</ul>")

    parts.append('<h2 id="assumptions">Assumptions the runs recorded</h2>')
    items = [(topic, text, r.name) for r in runs for topic, text in run_assumptions(r)]
    details = []
    for source, experiment in experiments:
        found, summary_md = experiment_assumptions(Path(source))
        items += [(topic, text, f"{experiment} {Path(source).name}") for topic, text in found]
        if summary_md:
            details.append(
                f"<details><summary>{esc(experiment)}: {esc(source)}/summary.md</summary>"
                f"<pre>{esc(summary_md)}</pre></details>"
            )
    if items:
        parts.append(_assumptions_html(items, len(runs)))
    elif not details:
        parts.append('<p class="missing">None recorded.</p>')
    if details:
        parts.append('<p class="meta">The experiments state their setup in their own summaries:</p>')
    parts += details

    parts.append('<h2 id="plots">Plots</h2>')
    if not plots_available():
        parts.append(f'<p class="missing" id="plots-skipped">{esc(PLOTS_SKIPPED.capitalize())}.</p>')
        parts.append("</body></html>\n")
        return "\n".join(parts)
    no_series = "No run directory among the inputs records this time series (experiment tables hold none)."
    figures: list[tuple[str, str, Callable[[], tuple[str, str] | None], str]] = [
        ("power", "Cluster power, price and carbon", lambda: plot_power(runs), no_series),
        ("nodes", "Nodes on / booting / off", lambda: plot_nodes(runs), no_series),
        ("gpus-queue", "Allocated GPUs and queue length", lambda: plot_gpus_queue(runs), no_series),
        (
            "jct-cdf",
            "JCT distributions",
            lambda: plot_jct_cdf(runs),
            "No run records per-job completion times.",
        ),
        (
            "energy-jct",
            "Energy against mean JCT",
            lambda: plot_energy_jct(frame, names),
            "No run records both energy and mean JCT.",
        ),
    ]
    for key, heading, make, why in figures:
        parts.append(_figure(key, heading, make(), why))
    fgd = [Path(s) for s, e in experiments if e == "fgd-pwr"]
    for i, source in enumerate(fgd):
        key = "fgd-pwr" if i == 0 else f"fgd-pwr-{i + 1}"
        parts.append(_figure(key, f"FGD/PWR curves ({source.name})", plot_fgd_pwr(source, key), "no curves"))
    parts.append("</body></html>\n")
    return "\n".join(parts)
