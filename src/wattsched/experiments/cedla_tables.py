"""The CE-DLA experiment's summary parts and figures (the experiment itself: ``cedla.py``).

Per region: each policy's cost against FIFO always-on and the price it paid per kWh, where the saving comes from
(switched-off nodes against shifted energy), and the target; the three figures read the per-run series kept on the
run records.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .cedla import BASELINE, POLICIES, CedlaConfig, RunRecord, regions_of, results_frame
from .protocol import Section


def _pct_below(value: float, base: float) -> float:
    return 100.0 * (base - value) / base if base else float("nan")


def per_region(frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per region (in the frame's order): each policy's row with its saving against FIFO always-on, the load, and
    where the saving comes from. `frame`: records.csv's or results.csv's rows (both have the columns read)."""
    per: dict[str, Any] = {}
    for region, rows in frame.groupby("region", sort=False):
        by = {str(r["policy"]): dict(r) for r in rows.to_dict("records")}
        if BASELINE not in by:
            continue
        base = by[BASELINE]
        entry: dict[str, Any] = {"policies": by, "load": base["gpu_allocation"]}
        for r in by.values():
            r["cost_saving_pct"] = _pct_below(r["cost_usd"], base["cost_usd"])
        if "price-unaware-drs" in by and "price-aware-no-drs" in by:
            entry["from_switched_off_nodes_usd"] = base["cost_usd"] - by["price-unaware-drs"]["cost_usd"]
            entry["from_shifted_energy_usd"] = base["cost_usd"] - by["price-aware-no-drs"]["cost_usd"]
        per[str(region)] = entry
    return per


def _ordered(records: pd.DataFrame) -> pd.DataFrame:
    """Records (in the order the runs started) by region as run, then in the order of POLICIES."""
    regions = list(dict.fromkeys(records["region"]))
    key = records["region"].map(regions.index) * len(POLICIES) + records["policy"].map(list(POLICIES).index)
    return records.iloc[np.argsort(key.to_numpy(), kind="stable")]


def headline_lines(records: pd.DataFrame) -> list[str]:
    lines = []
    for region, e in per_region(_ordered(records)).items():
        rows = {p: r for p, r in e["policies"].items() if p != BASELINE}
        if not rows:
            continue
        pick = "cedla" if "cedla" in rows else min(rows, key=lambda p: rows[p]["cost_usd"])
        r, base = rows[pick], e["policies"][BASELINE]
        drs = e["policies"].get("price-unaware-drs-forecast")
        against_drs = (
            f", {100.0 * (r['cost_usd'] / drs['cost_usd'] - 1.0):+.1f} % against the forecast DRS"
            if drs is not None and pick != "price-unaware-drs-forecast"
            else ""
        )
        line = (
            f"- **{region}**: {pick} costs ${r['cost_usd']:,.0f} ({-r['cost_saving_pct'] + 0.0:+.1f} % against "
            f"FIFO always-on, ${base['cost_usd']:,.0f}{against_drs}); {r['deadline_misses']:.0f} deadline misses, "
            f"{r['slo_violation_hours']:.0f} late service-hours"
        )
        lines.append(line)
    return lines


def _signal_line(cfg: CedlaConfig) -> str:
    if cfg.price_csv:
        where = f"- Prices of your own market from `{cfg.price_csv}` ({cfg.signal_tz})" + (
            f", carbon from `{cfg.carbon_csv}`" if cfg.carbon_csv else ", no carbon series"
        )
    else:
        where = f"- Prices and carbon of {cfg.year} per region (electricity-prices-greendcc)"
    fill = (
        f"gaps over {cfg.signal_max_gap_hours} h filled by `{cfg.signal_fill}`"
        if cfg.signal_fill
        else f"gaps up to {cfg.signal_max_gap_hours} h interpolated, longer ones an error"
    )
    return f"{where}; {fill} (docs/signals.md)."


def _setup(cfg: CedlaConfig, runs: Sequence[RunRecord]) -> Section:
    jobs = runs[0].jobs_submitted if runs else 0
    return Section(
        "Setup",
        [
            "CE-DLA (Kang, Lee, Kim, Energies 15(2):474, 2022) publishes only its abstract; the formulation, the "
            "rolling greedy policy, the services and the deadlines here are **reconstructed** (docs/cedla.md).",
            "",
            f"- Workload `{cfg.workload}` on cluster `{cfg.cluster}`, plus the built-in inference services "
            f"(`{cfg.services}`): {jobs} jobs in all (training jobs and service-hours).",
            f"- Training deadlines at submit + {cfg.deadline_slack:g} x duration (reconstructed slack).",
            _signal_line(cfg),
            "- Policies: `price-unaware-always-on` (FIFO, best-fit, every node on), `price-unaware-drs` (FIFO with "
            "idle-timeout right-sizing, no headroom), `price-unaware-drs-forecast` (FIFO with the `forecast` power "
            "manager: the strongest DRS without price), `price-aware-no-drs` (`cedla` planner, every node on), "
            "`cedla` (planner with idle-timeout right-sizing).",
            f"- This machine: {os.cpu_count()} CPUs ({platform.machine()}); "
            f"{sum(r.wall_s for r in runs):.0f} s summed over the runs.",
        ],
    )


def _costs(per: dict[str, dict[str, Any]]) -> Section:
    rows = [
        {
            "region": region,
            "policy": p,
            "cost ($)": f"{r['cost_usd']:,.0f}",
            "vs always-on": f"{-r['cost_saving_pct'] + 0.0:+.1f} %",
            "$/kWh": f"{r['usd_per_kwh']:.4f}",
        }
        for region, e in per.items()
        for p, r in e["policies"].items()
    ]
    return Section(
        "Cost against FIFO always-on",
        ["Cost and energy over the common window of each region's runs; the price paid is their ratio."],
        pd.DataFrame(rows) if rows else None,
    )


def _where(per: dict[str, dict[str, Any]]) -> Section:
    lines = [
        f"- {region}: switching idle nodes off alone saves ${e['from_switched_off_nodes_usd']:,.0f} (FIFO "
        f"always-on -> FIFO with DRS, the energy drops); shifting work to cheaper hours alone saves "
        f"${e['from_shifted_energy_usd']:,.0f} (FIFO always-on -> cedla always-on, the price paid per kWh drops)."
        for region, e in per.items()
        if "from_switched_off_nodes_usd" in e
    ]
    if not lines:
        lines = ["Needs both `price-unaware-drs` and `price-aware-no-drs` among the policies run."]
    return Section("Where the saving comes from", lines)


def _target_met(r: dict[str, Any]) -> bool:
    return r["cost_saving_pct"] >= 20.0 and r["deadline_misses"] == 0 and r["slo_violation_hours"] == 0


def _target(per: dict[str, dict[str, Any]]) -> Section:
    lines = []
    for region, e in per.items():
        r = e["policies"].get("cedla")
        if r is None:
            continue
        verdict = "met" if _target_met(r) else "**not met**"
        lines.append(
            f"- {region} (load: mean GPU allocation {e['load']:.1%} under FIFO always-on): cedla costs "
            f"{r['cost_saving_pct']:.1f} % less, {r['deadline_misses']} deadline misses, "
            f"{r['slo_violation_hours']} late service-hours. Target (>= 20 %, zero misses, zero late "
            f"service-hours): {verdict}."
        )
        drs = e["policies"].get("price-unaware-drs-forecast")
        if drs is not None:
            lines.append(
                f"  - against the strongest right-sizing without price (`price-unaware-drs-forecast`, "
                f"${drs['cost_usd']:,.0f}, {drs['deadline_misses']} misses, {drs['slo_violation_hours']} late "
                f"service-hours): cedla's cost against it {100.0 * (r['cost_usd'] / drs['cost_usd'] - 1.0):+.1f} %."
            )
    return Section("Target", lines or ["Needs `cedla` among the policies run."])


def summary_sections(cfg: CedlaConfig, records: pd.DataFrame, runs: Sequence[RunRecord]) -> list[Section]:
    per = per_region(
        results_frame(runs, regions_of(cfg))
    )  # the run records: integer counts, the price per kWh
    return [_setup(cfg, runs), _costs(per), _where(per), _target(per)]


def write_plots(out: Path, runs: Sequence[RunRecord], regions: Sequence[str]) -> list[Path]:
    """``cost.png``: cost per policy and region; ``price_vs_power.png``: cluster power of FIFO always-on and cedla
    against the price, first week, first region; ``nodes_on.png``: powered-on nodes over time per policy, first
    region."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .grid import save_figure

    order = {p: i for i, p in enumerate(POLICIES)}
    records = sorted(runs, key=lambda r: (list(regions).index(r.region), order[r.policy]))
    colour = dict(
        zip(POLICIES, ("tab:gray", "tab:blue", "tab:purple", "tab:orange", "tab:green"), strict=True)
    )
    shown_regions = list(dict.fromkeys(r.region for r in records))
    fig, ax = plt.subplots(figsize=(2.5 + 2.2 * len(shown_regions), 4))
    shown = [p for p in POLICIES if any(r.policy == p for r in records)]
    width = 0.8 / len(shown)
    for i, p in enumerate(shown):
        vals = [
            next((r.cost_usd for r in records if r.region == g and r.policy == p), np.nan)
            for g in shown_regions
        ]
        x = np.arange(len(shown_regions)) + (i - (len(shown) - 1) / 2) * width
        ax.bar(x, vals, width, color=colour[p], label=p)
    ax.set_xticks(np.arange(len(shown_regions)), shown_regions)
    ax.set(ylabel="electricity cost ($)", title="cost per policy and region")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out / "cost.png")
    first = shown_regions[0]
    fig, ax = plt.subplots(figsize=(12, 4))
    twin = ax.twinx()
    for r in records:
        if r.region == first and r.policy in (BASELINE, "cedla") and r.week_t:
            t = np.asarray(r.week_t) / 86400
            ax.step(
                t, r.week_power_kw, where="post", color=colour[r.policy], lw=0.8, label=f"{r.policy} power"
            )
            if r.policy == "cedla":
                twin.step(t, r.week_price, where="post", color="tab:red", lw=1, alpha=0.7, label="price")
    ax.set(
        xlabel="days", ylabel="cluster power (kW)", title=f"price against cluster power, first week, {first}"
    )
    twin.set_ylabel("price ($/MWh)", color="tab:red")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out / "price_vs_power.png")
    fig, ax = plt.subplots(figsize=(12, 4))
    for r in records:
        if r.region == first and r.series_t:
            ax.step(np.asarray(r.series_t) / 86400, r.series_nodes_on, where="post", color=colour[r.policy],
                    lw=0.8, label=r.policy)  # fmt: skip
    ax.set(xlabel="days", ylabel="nodes on", title=f"nodes on over time, {first}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out / "nodes_on.png")
    return [out / "cost.png", out / "price_vs_power.png", out / "nodes_on.png"]
