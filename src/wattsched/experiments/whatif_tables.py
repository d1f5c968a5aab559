"""The what-if's own tables: per-job attribution of a run's energy, cost and carbon, the replay check against the
recorded history, and the per-partition and per-group breakdowns (docs/whatif.md §3-§4)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .grid import write_csv
from .protocol import Cell, Outcome, Section

if TYPE_CHECKING:
    from ..workloads.slurm_history import SlurmHistory

J_PER_KWH = 3.6e6
START_BANDS_S = (60.0, 600.0, 3600.0)  # the replay check's bands of |replayed - recorded start|
UNATTRIBUTED = "(unattributed)"


# -- attribution -------------------------------------------------------------------------------------------------
def step_integral(t: np.ndarray, v: np.ndarray, x: np.ndarray) -> np.ndarray:
    """∫ from t[0] to each x of the step function that holds v[i] on [t[i], t[i+1]) (0 before t[0] and after
    the last row)."""
    t = np.asarray(t, dtype=float)
    v = np.nan_to_num(np.asarray(v, dtype=float))
    x = np.asarray(x, dtype=float)
    if t.size == 0:
        return np.zeros_like(x)
    cum = np.concatenate(([0.0], np.cumsum(v[:-1] * np.diff(t))))
    i = np.searchsorted(t, x, side="right") - 1
    inside = (i >= 0) & (i < t.size - 1)
    j = np.clip(i, 0, t.size - 1)
    out = np.where(inside, cum[j] + v[j] * (x - t[j]), 0.0)
    return np.where(i >= t.size - 1, cum[-1], out)


def attribute_jobs(jobs: pd.DataFrame, series: pd.DataFrame) -> pd.DataFrame:
    """Each job's share of the run's energy, cost and carbon: at every moment the cluster's power is shared among
    the running jobs by their allocated GPUs (idle nodes' power included), and the job's share is integrated over
    its run; cost and carbon weight that power by the hour's price and intensity. Jobs without GPUs get none;
    what no job holds (power while no GPU is allocated) stays unattributed. Where jobs paused within their run
    the shares add up to more than was drawn while GPUs were held, and are scaled down to it in proportion."""
    t = series["time_s"].to_numpy(dtype=float)
    alloc = series["allocated_gpus"].to_numpy(dtype=float)
    per_gpu = {}
    for name, column in (("power", "power_w"), ("gpu", "gpu_w")):
        watts = series[column].to_numpy(dtype=float) if column in series else np.zeros_like(t)
        per_gpu[name] = np.divide(watts, alloc, out=np.zeros_like(watts), where=alloc > 0)
    price = series["price_usd_per_mwh"].to_numpy(dtype=float) if "price_usd_per_mwh" in series else None
    carbon = series["carbon_g_per_kwh"].to_numpy(dtype=float) if "carbon_g_per_kwh" in series else None
    start = jobs["start_s"].to_numpy(dtype=float)
    end = jobs["end_s"].to_numpy(dtype=float)
    ran = np.isfinite(start) & np.isfinite(end)
    s, e = np.where(ran, start, 0.0), np.where(ran, end, 0.0)
    gpus = jobs["mean_num_gpu"] if "mean_num_gpu" in jobs else jobs["num_gpu"]
    share = gpus.to_numpy(dtype=float) * jobs["gpu_milli"].to_numpy(dtype=float) / 1000.0
    share = np.where(ran, np.nan_to_num(share), 0.0)

    def over_run(values: np.ndarray) -> np.ndarray:
        # A job paused inside [start, end] (a plan's deferral, a preemption) held no GPUs for a while, so the
        # shares are scaled to what was drawn while GPUs were held: exact (scale 1) for runs without pauses.
        raw = share * (step_integral(t, values, e) - step_integral(t, values, s))
        held_total = float(step_integral(t, values * alloc, t[-1:])[0]) if t.size else 0.0
        total = float(raw.sum())
        return raw * (held_total / total) if total > held_total > 0 else raw

    out = pd.DataFrame(
        {
            "job_id": jobs["job_id"].astype(str).to_numpy(),
            "status": jobs["status"].astype(str).to_numpy(),
            "submit_s": jobs["submit_s"].to_numpy(dtype=float),
            "start_s": start,
            "end_s": end,
            "queue_delay_s": jobs["queue_delay_s"].to_numpy(dtype=float),
            "jct_s": jobs["jct_s"].to_numpy(dtype=float),
            "energy_kwh": over_run(per_gpu["power"]) / J_PER_KWH,
            "gpu_energy_kwh": over_run(per_gpu["gpu"]) / J_PER_KWH,
            "cost_usd": np.nan if price is None else over_run(per_gpu["power"] * price) / J_PER_KWH / 1000.0,
            "co2_kg": np.nan if carbon is None else over_run(per_gpu["power"] * carbon) / J_PER_KWH / 1000.0,
        }
    )
    return out


# -- the replay check --------------------------------------------------------------------------------------------
def replay_jobs(recorded: pd.DataFrame, replayed: pd.DataFrame) -> pd.DataFrame:
    """Per job of the baseline replay: recorded and replayed start and wait, on the history's clock (the replay's
    clock starts at the earliest replayed submission; the offset is taken from the submit times, which the replay
    keeps)."""
    rec = recorded.assign(job_id=recorded["job_id"].astype(str)).set_index("job_id")
    rep = replayed.set_index("job_id")
    common = rep.index.intersection(rec.index)
    rec, rep = rec.loc[common], rep.loc[common]
    offset = float(np.nanmedian(rec["submit_s"].to_numpy(float) - rep["submit_s"].to_numpy(float)))
    frame = pd.DataFrame(
        {
            "job_id": common.to_numpy(),
            "partition": rec["partition"].astype(str).to_numpy(),
            "recorded_start_s": rec["start_s"].to_numpy(float),
            "replayed_start_s": rep["start_s"].to_numpy(float) + offset,
            "recorded_wait_s": rec["wait_s"].to_numpy(float),
            "replayed_wait_s": rep["queue_delay_s"].to_numpy(float),
            "recorded_energy_kwh": rec["energy_j"].to_numpy(float) / J_PER_KWH,
            "replayed_energy_kwh": rep["energy_kwh"].to_numpy(float),
            # measured_power_w is per GPU (slurm_history/power.py): the job's GPUs draw it each
            "measured_gpu_energy_kwh": rec["measured_power_w"].to_numpy(float)
            * rec["num_gpu"].to_numpy(float)
            * rec["elapsed_s"].to_numpy(float)
            / J_PER_KWH,
            "replayed_gpu_energy_kwh": rep["gpu_energy_kwh"].to_numpy(float),
        }
    )
    frame["start_error_s"] = frame["replayed_start_s"] - frame["recorded_start_s"]
    return frame


def replay_check(recorded: pd.DataFrame, replayed: pd.DataFrame) -> tuple[dict[str, float], pd.DataFrame]:
    """How close the baseline replay is to the history: figures by name, and the per-job frame they come from."""
    from scipy.stats import kendalltau, spearmanr

    jobs = replay_jobs(recorded, replayed)
    both = jobs.dropna(subset=["recorded_start_s", "replayed_start_s"])
    err = both["start_error_s"].abs().to_numpy(float)
    figures: dict[str, float] = {
        "jobs_compared": float(len(both)),
        "jobs_not_started_in_replay": float(jobs["replayed_start_s"].isna().sum()),
        "start_abs_error_median_s": float(np.median(err)) if err.size else math.nan,
        "start_abs_error_p90_s": float(np.percentile(err, 90)) if err.size else math.nan,
        "start_error_mean_s": float(both["start_error_s"].mean()) if err.size else math.nan,
    }
    for band in START_BANDS_S:
        figures[f"start_within_{band:g}s"] = float(np.mean(err <= band)) if err.size else math.nan
    if len(both) >= 2:
        rho = spearmanr(both["recorded_start_s"], both["replayed_start_s"]).statistic
        tau = kendalltau(both["recorded_start_s"], both["replayed_start_s"]).statistic
    else:
        rho = tau = math.nan
    figures["start_order_spearman"] = float(rho)
    figures["start_order_kendall"] = float(tau)
    figures["wait_mean_recorded_s"] = float(jobs["recorded_wait_s"].mean())
    figures["wait_mean_replayed_s"] = float(jobs["replayed_wait_s"].mean())
    for kind, rec_col, rep_col in (
        ("energy", "recorded_energy_kwh", "replayed_energy_kwh"),
        ("gpu_energy", "measured_gpu_energy_kwh", "replayed_gpu_energy_kwh"),
    ):
        have = jobs[rec_col].notna() & jobs[rep_col].notna()
        figures[f"{kind}_jobs"] = float(have.sum())
        figures[f"{kind}_recorded_kwh"] = float(jobs.loc[have, rec_col].sum()) if have.any() else math.nan
        figures[f"{kind}_replayed_kwh"] = float(jobs.loc[have, rep_col].sum()) if have.any() else math.nan
    return figures, jobs


def check_lines(f: dict[str, float]) -> list[str]:
    """The replay check as sentences (printed by `wattsched whatif` and in summary.md)."""

    def pct(x: float) -> str:
        return "—" if not math.isfinite(x) else f"{100 * x:.1f} %"

    lines = [
        f"Replay check on {f['jobs_compared']:.0f} jobs (baseline against the recorded history): start time "
        f"off by {_duration(f['start_abs_error_median_s'])} at the median and {_duration(f['start_abs_error_p90_s'])} "
        f"at p90; within 1 min {pct(f['start_within_60s'])}, 10 min {pct(f['start_within_600s'])}, 1 h "
        f"{pct(f['start_within_3600s'])}.",
        f"Start order: Spearman {f['start_order_spearman']:.3f}, Kendall {f['start_order_kendall']:.3f}. Mean wait "
        f"replayed {_duration(f['wait_mean_replayed_s'])} against {_duration(f['wait_mean_recorded_s'])} recorded.",
    ]
    if f["jobs_not_started_in_replay"]:
        lines.append(
            f"{f['jobs_not_started_in_replay']:.0f} job(s) did not start in the replay (too large to place)."
        )
    for kind, what in (
        ("energy", "Energy (sacct ConsumedEnergy)"),
        ("gpu_energy", "GPU energy (measured power)"),
    ):
        if f[f"{kind}_jobs"]:
            rec, rep = f[f"{kind}_recorded_kwh"], f[f"{kind}_replayed_kwh"]
            change = 100 * (rep / rec - 1) if rec else math.nan
            lines.append(
                f"{what} of {f[f'{kind}_jobs']:.0f} jobs: replayed {rep:,.1f} kWh against {rec:,.1f} kWh recorded "
                f"({change:+.1f} %)."
            )
        else:
            lines.append(f"{what}: not recorded in this history, not checked.")
    return lines


def _energy(kwh: float) -> str:
    # A small history (the test Slurm's) is Wh, a month of a cluster MWh: three significant figures either way.
    if abs(kwh) < 1:
        return f"{kwh * 1000:.3g} Wh"
    return f"{kwh:,.1f} kWh" if abs(kwh) < 1e4 else f"{kwh / 1000:,.1f} MWh"


def _money(usd: float) -> str:
    return f"{usd:,.2f} USD" if abs(usd) >= 1 else f"{usd:.3g} USD"


def _carbon(kg: float) -> str:
    return f"{kg:,.1f} kg CO2" if abs(kg) >= 1 else f"{kg * 1000:.3g} g CO2"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "—"
    if abs(seconds) < 120:
        return f"{seconds:.0f} s"
    if abs(seconds) < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def check_table(f: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame({"figure": list(f), "value": list(f.values())})


# -- breakdowns ---------------------------------------------------------------------------------------------------
def breakdown(
    history: SlurmHistory,
    by: str,
    variants: Sequence[str],
    records: pd.DataFrame,
    outcomes: Sequence[Outcome],
) -> pd.DataFrame:
    """Per `by` (``partition``, ``user`` or ``account``) and variant: jobs, attributed energy, cost and carbon,
    mean JCT and wait of the jobs that completed; and a row of what no job holds (the common window's total less
    the attributed sums)."""
    recorded = history.recorded.assign(job_id=history.recorded["job_id"].astype(str))
    group = recorded.set_index("job_id")[by].fillna("").astype(str).replace("", "(none)")
    rows: list[dict[str, Any]] = []
    for variant, (_, record), outcome in zip(variants, records.iterrows(), outcomes, strict=True):
        jobs = outcome.raw
        if not isinstance(jobs, pd.DataFrame):
            continue
        jobs = jobs.assign(**{by: group.reindex(jobs["job_id"]).fillna("(none)").to_numpy()})
        done = jobs["status"] == "completed"
        for key, part in jobs.groupby(by, sort=True):
            ok = part[done.loc[part.index]]
            rows.append(
                {
                    by: key, "variant": variant, "jobs": len(part), "energy_kwh": part["energy_kwh"].sum(),
                    "cost_usd": part["cost_usd"].sum(min_count=1), "co2_kg": part["co2_kg"].sum(min_count=1),
                    "jct_mean_h": ok["jct_s"].mean() / 3600, "wait_mean_h": ok["queue_delay_s"].mean() / 3600,
                }
            )  # fmt: skip
        rest = {
            k: float(record.get(k, math.nan)) - float(jobs[k].sum())
            for k in ("energy_kwh", "cost_usd", "co2_kg")
        }
        rows.append({by: UNATTRIBUTED, "variant": variant, "jobs": 0, **rest,
                     "jct_mean_h": math.nan, "wait_mean_h": math.nan})  # fmt: skip
    return pd.DataFrame(
        rows, columns=[by, "variant", "jobs", "energy_kwh", "cost_usd", "co2_kg", "jct_mean_h", "wait_mean_h"]
    )


def _variants(cells: Sequence[Cell]) -> list[str]:
    return [str(c.keys["variant"]) for c in cells]


def baseline_outcome(variants: Sequence[str], outcomes: Sequence[Outcome]) -> Outcome | None:
    for variant, outcome in zip(variants, outcomes, strict=True):
        if variant == "baseline":
            return outcome
    return None


def write_tables(
    history: SlurmHistory, group_by: str, cells: Sequence[Cell], outcomes: Sequence[Outcome], out: Path
) -> list[Path]:
    """``replay_check.csv`` (the figures), ``replay_jobs.csv`` (per job, baseline against recorded),
    ``by_partition.csv`` and ``by_group.csv``."""
    variants = _variants(cells)
    records = pd.DataFrame([o.metrics or {} for o in outcomes])
    files: list[Path] = []
    base = baseline_outcome(variants, outcomes)
    if base is not None and isinstance(base.raw, pd.DataFrame):
        figures, jobs = replay_check(history.recorded, base.raw)
        files += [out / "replay_check.csv", out / "replay_jobs.csv"]
        write_csv(files[0], check_table(figures))
        write_csv(files[1], jobs)
    for name, by in (("by_partition.csv", "partition"), ("by_group.csv", group_by)):
        path = out / name
        write_csv(path, breakdown(history, by, variants, records, outcomes))
        files.append(path)
    return files


def whatif_sections(
    history: SlurmHistory,
    group_by: str,
    variants: Sequence[str],
    records: pd.DataFrame,
    outcomes: Sequence[Outcome],
) -> list[Section]:
    from .whatif import WHAT_EACH_IS

    sections = [
        Section(
            "The variants",
            [f"- `{v}`: {WHAT_EACH_IS[v]}" for v in variants]
            + [
                "",
                "Not replayed: carbon-driven shifting (CE-DLA plans on price; carbon is accounted for every "
                "variant), per-partition backfill reservations (one cluster-wide reservation), Slurm's time limits "
                "as backfill estimates (the recorded run times are used: an oracle).",
            ],
        )
    ]
    base = baseline_outcome(variants, outcomes)
    if base is not None and isinstance(base.raw, pd.DataFrame):
        figures, _ = replay_check(history.recorded, base.raw)
        sections.append(Section("Replay check", check_lines(figures), check_table(figures)))
    sections.append(Section("The history", history_lines(history)))
    for title, by in (("Per partition", "partition"), (f"Per {group_by}", group_by)):
        sections.append(
            Section(
                title,
                [
                    "Energy, cost and carbon attributed to jobs by their share of allocated GPUs at each moment; "
                    f"`{UNATTRIBUTED}`: the common window's rest (no GPU allocated, CPU-only jobs, the tail)."
                ],
                breakdown(history, by, variants, records, outcomes),
            )
        )
    return sections


def history_lines(history: SlurmHistory) -> list[str]:
    counts = ", ".join(f"{state} {n}" for state, n in sorted(history.state_counts.items()))
    lines = [
        f"{len(history.recorded)} jobs from {history.source or 'sacct'} (t = 0 at {history.time_origin_utc})"
    ]
    if counts:
        lines.append(f"States: {counts}.")
    lines += [f"- {note}" for note in history.notes]
    return lines


def policy_lines(records: pd.DataFrame) -> list[str]:
    """One line per variant: its energy, cost, carbon, mean JCT and wait, and the change against the baseline."""
    if records.empty or "variant" not in records:
        return []
    base = records[records["variant"] == "baseline"]
    b = base.iloc[0] if len(base) else None
    lines = []
    for _, r in records.iterrows():
        parts = []
        for key, show in (
            ("energy_kwh", _energy), ("cost_usd", _money), ("co2_kg", _carbon),
            ("jct_mean_s", lambda v: f"{_duration(v)} mean JCT"),
            ("queue_delay_mean_s", lambda v: f"{_duration(v)} mean wait"),
        ):  # fmt: skip
            value = float(r.get(key, math.nan))
            if not math.isfinite(value):
                continue
            text = show(value)
            if b is not None and r["variant"] != "baseline":
                ref = float(b.get(key, math.nan))
                if math.isfinite(ref) and ref:
                    text += f" ({100 * (value / ref - 1):+.1f} %)"
            parts.append(text)
        lines.append(f"- **{r['variant']}**: " + ", ".join(parts))
    return lines
