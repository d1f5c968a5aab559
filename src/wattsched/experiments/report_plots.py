"""The figures of the HTML report (experiments/report.py): cluster power with price and carbon on second axes, nodes
on / booting / off, allocated GPUs and queue length, JCT distributions, energy against mean JCT (the trade-off
frontier), each as inline SVG, and each experiment's own figures (its PNGs, embedded as data). Long series are
thinned so the page stays small; matplotlib (the [plots] extra) is imported only when a figure is drawn."""

from __future__ import annotations

import importlib.util
import io
import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .grid import thinned
from .report_data import RunData, esc

SERIES_POINTS = 500  # samples of a time series per run in a plot
CDF_POINTS = 200  # quantiles of a JCT distribution per run
MAX_LINES = 12  # runs drawn in a plot of one line per run; the rest are named in the caption
LABELLED_POINTS = 20  # the energy-vs-JCT plot names its points up to this many runs
PLOT_IDS = ("power", "nodes", "gpus-queue", "jct-cdf", "energy-jct")  # and each experiment's own figures


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


FIGURE_LINK = re.compile(r"^!\[([^\]]*)\]\(([^)/\\]+\.png)\)$", re.MULTILINE)


def experiment_figures(source: Path) -> list[tuple[str, str]]:
    """(name, inline ``<img>``) of the figures an experiment's summary.md shows (its own plots, PNG files beside
    it), embedded as data so the page stays self-contained; a file that is gone is skipped."""
    import base64

    try:
        text = (source / "summary.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for name, file in FIGURE_LINK.findall(text):
        try:
            data = base64.b64encode((source / file).read_bytes()).decode("ascii")
        except OSError:
            continue
        out.append((name, f'<img alt="{esc(name)}" src="data:image/png;base64,{data}">'))
    return out
