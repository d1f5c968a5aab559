"""The tables, summary parts and plot of `wattsched experiment green` (experiments/green.py): the domination
verdict per seed, the ablation of each mechanism and the Pareto front of energy, cost and carbon against mean JCT
(carbon where the runs have a carbon series)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .protocol import Cell, Outcome, Section

GREEN = "wattsched-green"
PAIRS = (("energy_kwh", "energy"), ("cost_usd", "cost"), ("co2_kg", "carbon"))
JCT = "jct_mean_s"
# A mechanism whose ablation moves no figure by more than this (relative) contributes nothing measurable.
NOTHING = 1e-3


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether point `a` is no worse than `b` on both (lower is better) and better on one."""
    return a[0] <= b[0] and a[1] <= b[1] and (a[0] < b[0] or a[1] < b[1])


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (lower is better on both), by the first coordinate."""
    keep = [
        i for i, p in enumerate(points) if not any(dominates(q, p) for j, q in enumerate(points) if j != i)
    ]
    return sorted(keep, key=lambda i: (points[i][0], points[i][1]))


def pairs(records: pd.DataFrame) -> tuple[tuple[str, str], ...]:
    """The (figure, name) pairs of the tables: energy and cost always (as before carbon was added), carbon only
    where a run has a carbon series (co2_kg)."""
    return tuple(
        (key, what)
        for key, what in PAIRS
        if what != "carbon"
        or (key in records and np.isfinite(pd.to_numeric(records[key], errors="coerce")).any())
    )


def _change(new: float, old: float) -> float:
    return 100.0 * (new / old - 1.0) if old else float("nan")


def verdict_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per seed and baseline: wattsched-green's change on energy, cost and mean JCT against it (negative: green
    is lower) and whether it dominates it on (energy, JCT) and (cost, JCT); deadline misses, SLO hours and the
    training jobs it completed (totals over fewer completed jobs are not like for like)."""
    full = records[records["policy"] == GREEN]
    if full.empty:
        return pd.DataFrame()
    g = full.iloc[0]
    rows = []
    present = pairs(records)
    for r in records[records["kind"] != "green"].to_dict("records"):
        row = {"compared": r["policy"], "kind": r["kind"]}
        for key, what in present:
            row[f"{what} change %"] = _change(float(g[key]), float(r[key]))
        row["mean JCT change %"] = _change(float(g[JCT]), float(r[JCT]))
        for key, what in present:
            row[f"dominates on ({what}, JCT)"] = dominates((g[key], g[JCT]), (r[key], r[JCT]))
        row["its deadline misses"] = r["deadline_misses"]
        row["its SLO hours"] = r["slo_violation_hours"]
        row["its jobs completed"] = r.get("training_jobs_completed", float("nan"))
        rows.append(row)
    return pd.DataFrame(rows)


def ablation_table(records: pd.DataFrame) -> pd.DataFrame:
    """Per mechanism: the change with it off against the full policy (positive: the full policy is lower, i.e.
    the mechanism helps) and what it contributes in words."""
    full = records[records["policy"] == GREEN]
    if full.empty:
        return pd.DataFrame()
    g = full.iloc[0]
    rows = []
    for r in records[records["policy"].str.startswith(f"{GREEN} -")].to_dict("records"):
        mechanism = r["policy"][len(GREEN) + 2 :]
        row = {"mechanism": mechanism}
        changes = {}
        for key, what in (*pairs(records), (JCT, "mean JCT")):
            changes[what] = _change(float(r[key]), float(g[key]))
            row[f"{what} with it off %"] = changes[what]
        row["misses with it off"] = r["deadline_misses"]
        row["SLO hours with it off"] = r["slo_violation_hours"]
        # In words on energy, cost and JCT (as before carbon was added; carbon's column is beside them).
        row["contributes"] = contribution({k: v for k, v in changes.items() if k != "carbon"})
        rows.append(row)
    return pd.DataFrame(rows)


def contribution(changes: dict[str, float]) -> str:
    """In words, what turning a mechanism off did (`changes`: figure -> % change with it off)."""
    moved = {k: v for k, v in changes.items() if np.isfinite(v) and abs(v) > 100 * NOTHING}
    if not moved:
        return "nothing measurable (every figure within 0.1 %)"
    helps = [k for k, v in moved.items() if v > 0]
    hurts = [k for k, v in moved.items() if v < 0]
    parts = []
    if helps:
        parts.append("lowers " + ", ".join(helps))
    if hurts:
        parts.append("raises " + ", ".join(hurts))
    return "; ".join(parts)


def headline_lines(records: pd.DataFrame) -> list[str]:
    table = verdict_table(records)
    if table.empty:
        return []
    lines = []
    for _, what in pairs(records):
        col = f"dominates on ({what}, JCT)"
        won = table[table[col]]["compared"].tolist()
        lost = table[~table[col]]["compared"].tolist()
        lines.append(
            f"**wattsched-green dominates {len(won)} of {len(table)} on ({what}, mean JCT)**"
            + (f"; not: {', '.join(lost)}" if lost else "")
            + "."
        )
    g = records[records["policy"] == GREEN].iloc[0]
    fewer = fewer_completed(table, g)
    if fewer:
        lines.append(
            f"Completed fewer training jobs than wattsched-green ({int(g['training_jobs_completed']):,}): "
            + ", ".join(fewer)
            + "; their energy and cost are totals over less work."
        )
    late = late_where_not_dominated(table, g)
    if late:
        lines.append(
            "Not dominated, and left more inference service-hours late (SLO-violating) than wattsched-green "
            f"({int(g['slo_violation_hours']):,}): "
            + ", ".join(late)
            + "; their energy and cost do not include serving those hours in time."
        )
    lines.append(
        f"wattsched-green: {int(g['deadline_misses'])} deadline misses, {int(g['slo_violation_hours'])} SLO-violating "
        "hours."
    )
    return lines


def late_where_not_dominated(table: pd.DataFrame, green: pd.Series) -> list[str]:
    """`name (late service-hours)` of each compared run that wattsched-green does not dominate on some pair and
    that left more service-hours late than it: a saving bought with the inference SLO, not like for like."""
    mine = float(green.get("slo_violation_hours", float("nan")))
    if "its SLO hours" not in table or not np.isfinite(mine):
        return []
    won = np.logical_and.reduce(
        [table[c].to_numpy(bool) for c in table.columns if c.startswith("dominates on")]
    )
    late = table[~won & (table["its SLO hours"] > mine)]
    return [f"{r['compared']} ({int(r['its SLO hours']):,} h)" for r in late.to_dict("records")]


def fewer_completed(table: pd.DataFrame, green: pd.Series) -> list[str]:
    """`name (completed)` of each compared run that completed fewer training jobs than wattsched-green."""
    mine = float(green.get("training_jobs_completed", float("nan")))
    if "its jobs completed" not in table or not np.isfinite(mine):
        return []
    less = table[table["its jobs completed"] < mine]
    return [f"{r['compared']} ({int(r['its jobs completed']):,})" for r in less.to_dict("records")]


def summary_sections(records: pd.DataFrame) -> list[Section]:
    out = []
    verdict = verdict_table(records)
    if not verdict.empty:
        out.append(
            Section(
                "Domination verdict",
                [
                    "wattsched-green's change against each compared policy (negative: green is lower), and whether "
                    "it dominates it (no worse on both, better on one); figures charged over the common window. A "
                    "run that completed fewer training jobs (`its jobs completed`) is charged for less work: its "
                    "totals are not like for like."
                ],
                verdict,
            )
        )
    ablation = ablation_table(records)
    if not ablation.empty:
        out.append(
            Section(
                "Ablation",
                [
                    "Each mechanism off in turn against the full policy (positive: the figure is higher without it, so "
                    "the mechanism lowers it)."
                ],
                ablation,
            )
        )
    for key, what in pairs(records):
        points = list(zip(records[key].astype(float), records[JCT].astype(float), strict=True))
        front = pareto_front(points)
        names = [records["policy"].iloc[i] for i in front]
        out.append(Section(f"Pareto front ({what}, mean JCT)", [", ".join(names)]))
    return out


def write_tables(out: Path, cells: Sequence[Cell], outcomes: Sequence[Outcome]) -> list[Path]:
    from .grid import write_csv

    rows = [
        {"policy": o.policy, "kind": c.keys["kind"], **(o.metrics or {})}
        for c, o in zip(cells, outcomes, strict=True)
        if o.metrics is not None
    ]
    records = pd.DataFrame(rows)
    paths = []
    for name, table in (("verdict.csv", verdict_table(records)), ("ablation.csv", ablation_table(records))):
        if not table.empty:
            write_csv(out / name, table)
            paths.append(out / name)
    return paths


def write_pareto_plot(out: Path, records: pd.DataFrame) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .grid import save_figure

    colour = {"green": "C2", "seed": "C0", "baseline": "C7"}
    present = pairs(records)
    fig, axes = plt.subplots(1, len(present), figsize=(6 * len(present), 5), squeeze=False)
    for ax, (key, what) in zip(axes[0], present, strict=True):
        jct_h = records[JCT].astype(float) / 3600.0
        y = records[key].astype(float)
        for x_, y_, label, kind in zip(jct_h, y, records["policy"], records["kind"], strict=True):
            ax.scatter(
                x_,
                y_,
                color=colour.get(kind, "C3"),
                marker="*" if label == GREEN else "o",
                s=90 if label == GREEN else 30,
            )
            ax.annotate(label, (x_, y_), fontsize=7, xytext=(4, 2), textcoords="offset points")
        front = pareto_front(list(zip(jct_h, y, strict=True)))
        ax.plot(jct_h.iloc[front], y.iloc[front], color="C3", lw=1, ls="--", label="Pareto front")
        ax.set_xlabel("mean JCT of training jobs (h)")
        ax.set_ylabel({"energy_kwh": "energy (kWh)", "cost_usd": "cost (USD)"}.get(key, "carbon (kg CO2)"))
        ax.set_title(f"{what} against mean JCT (common window)")
        ax.legend(fontsize=8)
    path = out / "pareto.png"
    save_figure(fig, path)
    plt.close(fig)
    return path
