"""What `hkbu-online-pd` (experiments/hkbu_online_pd.py) reports beside its runs: ``summary.json`` (the proven
bound, the empirical ratios per kind, the worst instance, the Philly replays, as data), the summary's headline and
sections (rendered by the protocol's one renderer) and its two figures."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..policies.hkbu_online_pd import LABEL, small_family_bound
from .protocol import Section

if TYPE_CHECKING:
    from .hkbu_online_pd import HkbuOnlinePdConfig

FAMILY = {"U_over_L": 8.0, "V_over_U": 5, "g_max": 2, "C_min": 8}
BOUND_FORMULA = (
    "OPT <= alpha (1 + 1/(2 eta)) ONLINE, alpha = max(1, (C/g)(B^(g/(C-g+1)) - 1)), B = 1 + 2 eta V/L "
    "(docs/hkbu-online-pd.md §3)"
)
CONSTRUCTIONS = (
    "Random instances: two GPU types (speed 1 and 1.5), 8-10 GPUs each per hourly slot, 10 slots, 14 jobs of "
    "0.5-4 GPU-hours on 1 or 2 GPUs, four clock levels (HKBU DVFS model), time-of-use energy prices. "
    "Adversarial: the value ladder (batches of 8 one-slot jobs, all at once, values rising geometrically from "
    "L to U: the classic lower-bound construction for online admission), and simultaneous arrivals of random "
    "instances in the worst order a local search found (start: rising best density; pairwise swaps kept when "
    "the online objective does not rise)."
)
WHY_REJECTS = (
    "Why it rejects so much: to keep its guarantee the price of a GPU-slot must reach V, the most value "
    "one GPU of any schedule can carry (a 64-day job), before the GPU-slot is full, so with V/L in the "
    "millions the price passes most jobs' value per GPU-slot once about a third of the cluster is "
    "reserved. Short jobs hold a whole 5-minute slot and carry little value per GPU-slot, so they go "
    "first; the long, valuable ones are admitted. The baselines meet every deadline here because the "
    "trace loads the cluster lightly (about a third of its GPUs on average), which is the regime where a "
    "worst-case-hedging online algorithm gives up most."
)


def per_kind(ratios: pd.DataFrame) -> dict[str, dict[str, Any]]:
    return {
        str(kind): {
            "instances": len(g),
            "ratio_mean": float(g["empirical_ratio"].mean()),
            "ratio_median": float(g["empirical_ratio"].median()),
            "ratio_max": float(g["empirical_ratio"].max()),
            "worst_instance": str(g.loc[g["empirical_ratio"].idxmax(), "instance"]),
        }
        for kind, g in ratios.groupby("kind", sort=True)
    }


def worst_instance(ratios: pd.DataFrame) -> dict[str, Any]:
    worst = ratios.loc[ratios["empirical_ratio"].idxmax()]
    return {
        "instance": str(worst["instance"]),
        "kind": str(worst["kind"]),
        "construction": str(worst["construction"]),
        "empirical_ratio": float(worst["empirical_ratio"]),
        "online_objective": float(worst["online_objective"]),
        "offline_optimum": float(worst["offline_optimum"]),
    }


def summary_data(
    cfg: HkbuOnlinePdConfig, ratios: pd.DataFrame, runs: list[dict[str, Any]], notes: list[str]
) -> dict[str, Any]:
    """``summary.json``: the bound, the ratios per kind, the worst instance, the replays (NaN written as null)."""
    from .grid import machine_description

    bound = small_family_bound(cfg.eta)
    violations = ratios[ratios["empirical_ratio"] > bound["competitive_ratio_bound"]]
    setup = {"max_jobs": cfg.max_jobs or None, "deadline_slack": cfg.deadline_slack, "data_dir": cfg.data_dir}
    return _finite(
        {
            "label": LABEL,
            "reconstructed": True,
            "competitive_ratio_bound": bound["competitive_ratio_bound"],
            "bound": bound,
            "bound_formula": BOUND_FORMULA,
            "family": {**FAMILY, "eta": cfg.eta},
            "worst_instance": worst_instance(ratios),
            "per_kind": per_kind(ratios),
            "bound_violations": len(violations),
            "instances": len(ratios),
            "milp_solve_s_total": float(ratios["milp_solve_s"].sum()),
            "philly": {"setup": setup if runs else None, "runs": runs},
            "notes": list(notes),
            "machine": machine_description(),
        }
    )


def _finite(obj: Any) -> Any:
    """JSON without NaN or infinity (written as null)."""
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    if isinstance(obj, np.generic):
        return _finite(obj.item())
    return obj


def headline(cfg: HkbuOnlinePdConfig, ratios: pd.DataFrame | None, records: pd.DataFrame) -> list[str]:
    """The bound, the empirical ratios and the worst instance (when the small instances are at hand), and the net
    value of each Philly replay; one list item each."""
    lines = []
    if ratios is not None and not ratios.empty:
        b, w = small_family_bound(cfg.eta), worst_instance(ratios)
        above = int((ratios["empirical_ratio"] > b["competitive_ratio_bound"]).sum())
        kinds = "; ".join(
            f"{kind} mean {r['ratio_mean']:.3f}, max {r['ratio_max']:.3f}"
            for kind, r in per_kind(ratios).items()
        )
        lines += [
            f"- **Proven competitive ratio bound {b['competitive_ratio_bound']:.3f}** (alpha {b['alpha']:.3f}, "
            f"small-job limit {b['small_job_limit']:.3f}); empirical ratio (offline optimum / online objective) "
            f"over {len(ratios)} small instances: {kinds}.",
            f"- **Worst instance `{w['instance']}`** ({w['kind']}): {w['empirical_ratio']:.3f}; instances above "
            f"the bound: {above}.",
        ]
    if not records.empty and "replay" in records:
        runs = "; ".join(
            f"{r['policy']} started {r['started']:,}, on time {r['on_time']:,}, net ${r['net_value_usd']:,.0f}, "
            f"{r['energy_kwh']:,.0f} kWh"
            for r in records.to_dict("records")
        )
        lines.append(f"- Philly (energy and net value over the common window of its runs): {runs}.")
    return lines


def sections(
    cfg: HkbuOnlinePdConfig, ratios: pd.DataFrame, runs: list[dict[str, Any]], notes: list[str]
) -> list[Section]:
    b = small_family_bound(cfg.eta)
    out = [
        Section(
            "The proven bound",
            [
                f"{LABEL} is a reconstruction: the HKBU project asks for an online primal-dual algorithm for "
                "resource allocation and task scheduling but publishes neither code nor paper; the formulation "
                "follows OASiS (Bao et al., INFOCOM 2018) and is stated with its proof in docs/hkbu-online-pd.md.",
                "",
                f"- Family of every small instance: U/L = {FAMILY['U_over_L']:g}, V = {FAMILY['V_over_U']} U "
                f"(schedules of at most 5 slots), g_max = {FAMILY['g_max']}, C_min = {FAMILY['C_min']} GPUs per "
                f"type and slot (demand fraction up to {b['demand_fraction_max']:.2f}), eta = {b['eta']:g}.",
                f"- B = 1 + 2 eta V/L = {b['B']:g}; alpha = {b['alpha']:.3f} (ln B = {b['ln_B']:.3f}: the "
                "demand-fraction term costs the difference).",
                f"- **Competitive ratio bound: OPT <= {b['competitive_ratio_bound']:.3f} x ONLINE** (the "
                f"small-job limit would be {b['small_job_limit']:.3f}).",
            ],
        )
    ]
    if not ratios.empty:
        w = worst_instance(ratios)
        table = pd.DataFrame(
            [
                [kind, r["instances"], *(f"{r[k]:.3f}" for k in ("ratio_mean", "ratio_median", "ratio_max")),
                 f"`{r['worst_instance']}`"]
                for kind, r in per_kind(ratios).items()
            ],
            columns=["kind", "instances", "mean", "median", "max", "worst instance"],
        )  # fmt: skip
        above = int((ratios["empirical_ratio"] > b["competitive_ratio_bound"]).sum())
        out.append(
            Section(
                "Empirical ratio (offline optimum / online objective)",
                [
                    f"**Worst instance: `{w['instance']}`** ({w['construction']}): ratio "
                    f"**{w['empirical_ratio']:.3f}** (online {w['online_objective']:.3f} $, offline "
                    f"{w['offline_optimum']:.3f} $) against the bound {b['competitive_ratio_bound']:.3f}; "
                    f"instances above the bound: {above}. Offline optima by HiGHS in "
                    f"{float(ratios['milp_solve_s'].sum()):.1f} s in all (every instance: `ratios.csv`).",
                    "",
                    CONSTRUCTIONS,
                ],
                table,
            )
        )
    if runs:
        subset = f"its first {cfg.max_jobs} jobs" if cfg.max_jobs else "the whole trace"
        lines = [
            f"Workload `philly` on cluster `philly` (160 x 8 P100), {subset}, deadlines at submit + "
            f"{cfg.deadline_slack:g} x duration. Utility is the policy's model for every run: $1.46 per GPU-hour of "
            "work done by the deadline, less half of it at the deadline; energy at $0.10/kWh (`USD` in the runs "
            "table); jobs done late earn nothing. Baselines admit every job and run it at the default clock. "
            "Every replay: `philly.csv`.",
        ]
        pd_row = next((r for r in runs if r["policy"] == "hkbu-online-pd"), None)
        if pd_row:
            lines += [
                "",
                f"`hkbu-online-pd`: {pd_row['late_starts']} late start(s) (no place at the planned time), "
                f"{pd_row['non_default_clock_jobs']} job(s) at a lowered clock; it started "
                f"{100 * pd_row['started_gpu_hours_share']:.1f} % of the trace's GPU-hours in "
                f"{100 * pd_row['started'] / max(pd_row['jobs'], 1):.1f} % of its jobs. A rejected job is counted "
                "as a deadline miss by the simulator.",
                "",
                WHY_REJECTS,
            ]
        out.append(Section("Philly", lines))
    if notes:
        out.append(Section("Notes", [f"- {n}" for n in notes]))
    return out


def write_plots(out: Path, ratios: pd.DataFrame, eta: float) -> list[Path]:
    """The empirical ratios by kind against the proven bound, and online against offline per instance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .grid import save_figure

    if ratios.empty:
        return []
    bound = small_family_bound(eta)["competitive_ratio_bound"]
    fig, ax = plt.subplots(figsize=(7, 4))
    top = max(float(ratios["empirical_ratio"].max()), 1.0)
    bins = np.linspace(1.0, top * 1.05, 30).tolist()
    for kind, g in ratios.groupby("kind", sort=True):
        ax.hist(g["empirical_ratio"], bins=bins, alpha=0.6, label=f"{kind} ({len(g)})")
    ax.axvline(bound, color="k", ls="--")
    ax.set_xlim(0.95, max(bound * 1.05, top * 1.1))
    ax.text(bound, ax.get_ylim()[1] * 0.9, f"proven bound {bound:.2f} ", ha="right")
    ax.set_xlabel("empirical ratio (offline optimum / online objective)")
    ax.set_ylabel("instances")
    ax.set_title(f"{LABEL}: empirical ratio vs the proven bound")
    ax.legend()
    fig.tight_layout()
    histogram = out / "ratio_histogram.png"
    save_figure(fig, histogram)

    fig, ax = plt.subplots(figsize=(5, 5))
    for kind, g in ratios.groupby("kind", sort=True):
        ax.scatter(g["offline_optimum"], g["online_objective"], s=14, label=kind)
    hi = float(ratios["offline_optimum"].max()) * 1.05
    xs = np.array([0.0, hi])
    ax.plot(xs, xs, "k-", lw=0.8, label="online = offline")
    ax.plot(xs, xs / bound, "k--", lw=0.8, label=f"offline / {bound:.2f}")
    ax.set_xlabel("offline optimum ($)")
    ax.set_ylabel("online objective ($)")
    ax.legend()
    fig.tight_layout()
    scatter = out / "online_vs_offline.png"
    save_figure(fig, scatter)
    return [histogram, scatter]
