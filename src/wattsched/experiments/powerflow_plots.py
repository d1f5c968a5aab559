"""The powerflow experiment's figures (``experiments/powerflow.py``), per power manager: mean and p95 JCT against
total energy (``jct_vs_energy``), the equal-energy JCT ratios (``jct_ratio``) and PowerFlow's energy against its
budget (``budget_tracking``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .powerflow_tables import BUDGET_TOLERANCE_PCT, LABEL, PAPER_RATIO, POLICY, TARGET_RATIO

if TYPE_CHECKING:
    from .powerflow import Prepared

_COLOURS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
)


def write_plots(
    out: Path,
    about: Prepared,
    s: dict[str, Any],
    results: pd.DataFrame,
    sweep: pd.DataFrame,
    suffix: str = "",
) -> list[Path]:
    """The three figures of one power manager's grid (`s`: its :func:`~.powerflow_summary.summarise`), named
    ``<figure><suffix>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .grid import save_figure

    written: list[Path] = []
    colour = {b: _COLOURS[i % len(_COLOURS)] for i, b in enumerate(s["baselines"])}
    setup = about.setup
    title = f"{setup.workload} on {setup.cluster}" + (f" ({setup.gpu_type})" if setup.gpu_type else "")
    if suffix:
        title += f", {s['power_manager']}"

    def save(fig, name: str, layout: bool = True) -> None:
        if layout:
            fig.tight_layout()
        path = out / f"{name}{suffix}.png"
        save_figure(fig, path, dpi=130)
        written.append(path)

    # 1. JCT against energy: one curve per policy (baselines over clock caps, PowerFlow over budgets).
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    mean = sweep.groupby(
        ["policy", "kind", "sm_clock_cap", "budget_fraction"], dropna=False, sort=False
    ).mean(numeric_only=True)
    mean = mean.reset_index()
    eq = results.groupby("baseline", sort=False).mean(numeric_only=True)
    for ax, col, label in ((axes[0], "mean_jct_s", "mean JCT (h)"), (axes[1], "p95_jct_s", "p95 JCT (h)")):
        for b in s["baselines"]:
            d = mean[(mean.policy == b) & (mean.kind == "clock-cap")].sort_values(
                "sm_clock_cap", ascending=False
            )
            ax.plot(d.energy_kwh, d[col] / 3600, "o-", color=colour[b], label=f"{b} (SM clock caps)")
            for e, v, cap in zip(d.energy_kwh, d[col] / 3600, d.sm_clock_cap, strict=True):
                ax.annotate(f"{cap:g}", (e, v), fontsize=6, xytext=(3, 3), textcoords="offset points")
        d = mean[(mean.policy == POLICY) & (mean.kind == "budget")].sort_values("budget_fraction")
        ax.plot(d.energy_kwh, d[col] / 3600, "s-", color="tab:red", lw=2, label=f"{LABEL} (budget sweep)")
        if len(d):
            # Budget points often land close together: label the sweep once rather than each point.
            ax.annotate(
                f"budgets {d.budget_kwh.min():.0f}-{d.budget_kwh.max():.0f} kWh\n"
                f"used {d.energy_kwh.min():.0f}-{d.energy_kwh.max():.0f} kWh",
                (d.energy_kwh.iloc[-1], d[col].iloc[-1] / 3600),
                fontsize=7,
                color="tab:red",
                xytext=(12, 18),
                textcoords="offset points",
                arrowprops={"arrowstyle": "-", "color": "tab:red", "lw": 0.6},
            )
        d = mean[(mean.policy == POLICY) & (mean.kind == "no-budget")]
        ax.plot(d.energy_kwh, d[col] / 3600, "*", color="black", ms=12, label=f"{LABEL}, no budget")
        pf_col = col.replace("_s", "_s_powerflow")
        for b in s["baselines"]:
            if b in eq.index:
                ax.plot(eq.loc[b, "energy_kwh_powerflow"], eq.loc[b, pf_col] / 3600, "D", mfc="none",
                        mec=colour[b], ms=9, label=f"{LABEL} at E_b of {b}")  # fmt: skip
        ax.set(xlabel="total energy (kWh)", ylabel=label, title=f"{label.split(' (')[0]} vs energy, {title}")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=4, frameon=False)
    fig.tight_layout(rect=(0, 0.06 + 0.025 * math.ceil(len(labels) / 4), 1, 1))
    save(fig, "jct_vs_energy", layout=False)

    # 2. The equal-energy JCT ratios.
    fig, ax = plt.subplots(figsize=(7, 4.6))
    stats = [(b, s["per_baseline"][b]["ratio"], s["per_baseline"][b]["ratio_std"]) for b in s["baselines"]]
    x = np.arange(len(stats))
    ax.bar(x, [r for _, r, _ in stats], yerr=[e for _, _, e in stats], capsize=4,
           color=[colour[b] for b, _, _ in stats])  # fmt: skip
    for i, (_, r, _) in enumerate(stats):
        top = r + (stats[i][2] if np.isfinite(stats[i][2]) else 0.0)
        ax.annotate(f"{r:.2f}x", (i, top), ha="center", xytext=(0, 4), textcoords="offset points", fontsize=8)
    ax.axhspan(
        *PAPER_RATIO, color="grey", alpha=0.15, label=f"paper: {PAPER_RATIO[0]}-{PAPER_RATIO[1]}x (at most)"
    )
    ax.axhline(TARGET_RATIO, color="tab:red", ls="--", lw=1, label=f"target {TARGET_RATIO}x")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [b for b, _, _ in stats])
    ax.set(ylabel="mean JCT baseline / PowerFlow", title=f"Equal-energy JCT ratio, {title}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    save(fig, "jct_ratio")

    # 3. Energy used against the budget.
    fig, ax = plt.subplots(figsize=(6.5, 5))
    pts = sweep[sweep.kind == "budget"]
    ax.plot(pts.budget_kwh, pts.energy_kwh, "s", color="tab:red", mfc="none", label="budget sweep")
    for b in s["baselines"]:
        d = results[results.baseline == b]
        ax.plot(d.budget_kwh, d.energy_kwh_powerflow, "D", color=colour[b], label=f"budget = E_b of {b}")
    lo = float(min(pts.budget_kwh.min() if len(pts) else np.inf, results.budget_kwh.min())) * 0.95
    hi = float(max(pts.budget_kwh.max() if len(pts) else 0, results.budget_kwh.max())) * 1.05
    grid = np.array([lo, hi])
    ax.plot(grid, grid, "k-", lw=0.8, label="energy = budget")
    ax.fill_between(grid, grid * (1 - BUDGET_TOLERANCE_PCT / 100), grid * (1 + BUDGET_TOLERANCE_PCT / 100),
                    color="grey", alpha=0.2, label=f"±{BUDGET_TOLERANCE_PCT:g} %")  # fmt: skip
    ax.axhline(s["no_budget_energy"][0], color="black", ls=":", lw=1, label="PowerFlow without a budget")
    ax.set(xlabel="budget (kWh)", ylabel="energy used by PowerFlow (kWh)", title=f"Budget tracking, {title}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "budget_tracking")
    return written
