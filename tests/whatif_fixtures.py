"""Small Slurm histories built directly as the importer's types (no sacct file), for the what-if's tests."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from wattsched.workloads.slurm_history import RECORDED_COLUMNS, SlurmHistory, SlurmNodes


def two_partition_nodes(source: str = "nodes.json") -> SlurmNodes:
    """2 A100 nodes of 4 GPUs (partition `a100`), 2 V100 nodes of 2 GPUs (`v100`), 1 CPU node (`cpu`)."""
    rows = [
        ("a01", "a100,all", "A100", 4, 64, 256_000, "IDLE"),
        ("a02", "a100,all", "A100", 4, 64, 256_000, "MIXED"),
        ("v01", "v100,all", "V100", 2, 32, 128_000, "IDLE"),
        ("v02", "v100,all", "V100", 2, 32, 128_000, "DOWN+DRAIN"),
        ("c01", "cpu", "", 0, 16, 64_000, "IDLE"),
    ]
    frame = pd.DataFrame(
        rows, columns=["name", "partitions", "gpu_model", "gpus", "cpus", "memory_mib", "state"]
    )
    parts = {
        "a100": ["a01", "a02"],
        "v100": ["v01", "v02"],
        "cpu": ["c01"],
        "all": ["a01", "a02", "v01", "v02"],
    }
    return SlurmNodes(frame, parts, source=source)


def fifo_history(n: int = 30, seed: int = 0, energy: bool = True, source: str = "sacct.txt") -> SlurmHistory:
    """`n` GPU jobs on two partitions, recorded as a strict per-partition FIFO with no waiting where capacity
    allows (so the replay can match it closely), plus one PENDING and one CANCELLED-before-start job."""
    rng = np.random.default_rng(seed)
    rows = []
    free_at = {"a100": [0.0] * 8, "v100": [0.0] * 4}  # per GPU, when it is free
    t = 0.0
    for i in range(n):
        t += float(rng.integers(60, 900))
        part = "a100" if i % 3 else "v100"
        gpus = int(rng.choice([1, 2])) if part == "v100" else int(rng.choice([1, 2, 4]))
        run = float(rng.integers(300, 5400))
        slots = sorted(free_at[part])
        start = max(t, slots[gpus - 1])
        chosen = sorted(range(len(free_at[part])), key=lambda k: free_at[part][k])[:gpus]
        for k in chosen:
            free_at[part][k] = start + run
        user = f"u{i % 4}"
        rows.append(
            {
                "job_id": str(1000 + i), "user": user, "account": "proj-a" if i % 2 else "proj-b",
                "partition": part, "state": "COMPLETED" if i % 7 else "FAILED", "submit_s": t, "start_s": start,
                "end_s": start + run, "wait_s": start - t, "elapsed_s": run, "timelimit_s": 4 * 3600.0,
                "num_gpu": gpus, "num_nodes": 1, "node_list": f"{part[0]}01",
                "energy_j": gpus * 250.0 * run if energy else math.nan,
                "measured_power_w": math.nan,
            }
        )  # fmt: skip
    never = {"user": "u9", "account": "", "partition": "a100", "start_s": math.nan, "end_s": math.nan,
             "wait_s": math.nan, "elapsed_s": 0.0, "timelimit_s": 3600.0, "num_gpu": 1, "num_nodes": 1,
             "node_list": "", "energy_j": math.nan, "measured_power_w": math.nan}  # fmt: skip
    rows.append({"job_id": "pend1", "state": "PENDING", "submit_s": t + 10, **never})
    rows.append({"job_id": "canc1", "state": "CANCELLED", "submit_s": t + 20, **never})
    recorded = pd.DataFrame(rows, columns=list(RECORDED_COLUMNS))
    counts = recorded["state"].value_counts().to_dict()
    return SlurmHistory(recorded, "2023-03-06T08:00:00Z", {str(k): int(v) for k, v in counts.items()},
                        ["read by the test fixture"], source)  # fmt: skip


def hourly_signals(folder, start: str = "2023-03-05T00:00:00Z", hours: int = 24 * 10) -> tuple[str, str]:
    """An hourly price CSV (cheap nights, dear days) and a flat carbon CSV covering the fixture's dates."""
    from pathlib import Path

    times = pd.date_range(start, periods=hours, freq="h")
    price = np.where((times.hour >= 8) & (times.hour < 20), 120.0, 30.0)
    stamps = times.strftime("%Y-%m-%dT%H:%M:%SZ")
    price_csv, carbon_csv = Path(folder) / "price.csv", Path(folder) / "carbon.csv"
    pd.DataFrame({"time": stamps, "price_usd_per_mwh": price}).to_csv(price_csv, index=False)
    pd.DataFrame({"time": stamps, "carbon_g_per_kwh": 300.0}).to_csv(carbon_csv, index=False)
    return str(price_csv), str(carbon_csv)


# -- the what-if on real Slurm output (tests/unit/test_whatif_real_slurm.py, tests/live/test_slurm_accounting.py) --
# Bands for the replay of a real Slurm's history. Slurm starts a job on the event that frees its GPUs (main
# scheduler) or at the next backfill pass (bf_interval, 30 s by default); the replay starts it the instant the
# GPUs are free, with the same EASY backfill. So most starts agree to the second and none should be off by more
# than one backfill interval plus the 1-s resolution of sacct's timestamps.
START_P90_BAND_S = 31.0
WITHIN_60S_AT_LEAST = 0.9
SPEARMAN_AT_LEAST = 0.7


def expected_jobs(expected: dict[str, dict]) -> dict[str, tuple[str, int]]:
    """What was submitted, as the importer names jobs: het components (``10+0``, ``10+1``) folded into ``10``
    with their GPUs summed; ``{job_id: (state, gpus)}``."""
    jobs: dict[str, tuple[str, int]] = {}
    for sacct_id, rec in expected.items():
        job_id = sacct_id.split("+")[0]
        state, gpus = jobs.get(job_id, (rec["state"], 0))
        jobs[job_id] = (state, gpus + int(rec["gpus"]))
    return jobs


def check_import_matches(history: SlurmHistory, expected: dict[str, dict]) -> None:
    """The imported jobs are exactly the submitted ones, with their end states and GPU counts."""
    recorded = history.recorded.set_index("job_id")
    want = expected_jobs(expected)
    assert sorted(recorded.index) == sorted(want)
    for job_id, (state, gpus) in want.items():
        row = recorded.loc[job_id]
        assert row["state"] == state, job_id
        if state != "CANCELLED" or not math.isnan(
            row["start_s"]
        ):  # cancelled while pending: nothing allocated
            assert int(row["num_gpu"]) == gpus, job_id


def check_replay(out) -> dict[str, float]:
    """The what-if's replay check of a real history, against the bands above; returns its figures."""
    figures = dict(pd.read_csv(out / "replay_check.csv").itertuples(index=False, name=None))
    figures = {k: float(v) for k, v in figures.items()}
    assert figures["jobs_compared"] >= 10
    assert figures["jobs_not_started_in_replay"] == 0
    assert figures["start_abs_error_p90_s"] <= START_P90_BAND_S, figures
    assert figures["start_within_60s"] >= WITHIN_60S_AT_LEAST, figures
    assert figures["start_order_spearman"] >= SPEARMAN_AT_LEAST, figures
    return figures
