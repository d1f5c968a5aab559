"""The replay check's figures and the per-job attribution of a run's energy (experiments/whatif_tables.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattsched.experiments.whatif_tables import attribute_jobs, check_lines, replay_check, step_integral


def _recorded(starts, submits, energy=None, waits=None, power_w=None, gpus=None):
    n = len(starts)
    return pd.DataFrame(
        {
            "job_id": [str(i) for i in range(n)], "partition": ["p"] * n, "submit_s": submits, "start_s": starts,
            "wait_s": waits if waits is not None else np.subtract(starts, submits),
            "elapsed_s": [100.0] * n, "energy_j": energy if energy is not None else [math.nan] * n,
            "measured_power_w": power_w if power_w is not None else [math.nan] * n,
            "num_gpu": gpus if gpus is not None else [1] * n,
        }
    )  # fmt: skip


def _replayed(starts, submits, energy_kwh=None):
    n = len(starts)
    return pd.DataFrame(
        {
            "job_id": [str(i) for i in range(n)], "submit_s": submits, "start_s": starts,
            "queue_delay_s": np.subtract(starts, submits),
            "energy_kwh": energy_kwh if energy_kwh is not None else [1.0] * n, "gpu_energy_kwh": [0.5] * n,
        }
    )  # fmt: skip


def test_start_errors_bands_and_rank_correlation():
    # Recorded clock: first submission at 1000 s; the replay's clock starts at that submission (offset 1000).
    submits = [1000.0, 1100.0, 1200.0, 1300.0, 1400.0]
    recorded_starts = [1000.0, 1100.0, 1300.0, 2000.0, 5000.0]
    errors = [0.0, 30.0, -300.0, 1200.0, -4000.0]  # replayed - recorded
    replay_starts = [r + e - 1000.0 for r, e in zip(recorded_starts, errors, strict=True)]
    f, jobs = replay_check(
        _recorded(recorded_starts, submits), _replayed(replay_starts, [s - 1000 for s in submits])
    )
    assert jobs["start_error_s"].tolist() == pytest.approx(errors)
    assert f["jobs_compared"] == 5
    assert f["start_abs_error_median_s"] == pytest.approx(300.0)
    assert f["start_abs_error_p90_s"] == pytest.approx(np.percentile(np.abs(errors), 90))
    assert f["start_within_60s"] == pytest.approx(2 / 5)
    assert f["start_within_600s"] == pytest.approx(3 / 5)
    assert f["start_within_3600s"] == pytest.approx(4 / 5)
    replayed_abs = np.add(recorded_starts, errors)
    from scipy.stats import kendalltau, spearmanr

    assert f["start_order_spearman"] == pytest.approx(spearmanr(recorded_starts, replayed_abs).statistic)
    assert f["start_order_kendall"] == pytest.approx(kendalltau(recorded_starts, replayed_abs).statistic)
    assert f["start_order_kendall"] < 1.0
    assert f["wait_mean_recorded_s"] == pytest.approx(np.mean(np.subtract(recorded_starts, submits)))


def test_identical_replay_is_exact():
    submits = [0.0, 50.0, 60.0]
    starts = [0.0, 80.0, 90.0]
    f, _ = replay_check(_recorded(starts, submits), _replayed(starts, submits))
    assert f["start_abs_error_p90_s"] == 0.0
    assert f["start_order_spearman"] == pytest.approx(1.0)
    assert f["wait_mean_replayed_s"] == f["wait_mean_recorded_s"]


def test_energy_is_compared_only_where_recorded():
    submits, starts = [0.0, 10.0, 20.0], [0.0, 10.0, 20.0]
    recorded = _recorded(starts, submits, energy=[3.6e6, math.nan, 7.2e6])  # 1 kWh, none, 2 kWh
    f, _ = replay_check(recorded, _replayed(starts, submits, energy_kwh=[1.5, 100.0, 1.5]))
    assert f["energy_jobs"] == 2
    assert f["energy_recorded_kwh"] == pytest.approx(3.0)
    assert f["energy_replayed_kwh"] == pytest.approx(3.0)  # the unrecorded job's 100 kWh is not counted
    assert f["gpu_energy_jobs"] == 0
    lines = check_lines(f)
    assert any("replayed 3.0 kWh against 3.0 kWh recorded (+0.0 %)" in line for line in lines)
    assert any("GPU energy (measured power): not recorded" in line for line in lines)


def test_measured_gpu_energy_is_power_per_gpu_times_gpus_times_run_time():
    submits, starts = [0.0, 10.0], [0.0, 10.0]
    # 250 W per GPU on 4 GPUs for 100 s, and a job without power samples
    recorded = _recorded(starts, submits, power_w=[250.0, math.nan], gpus=[4, 2])
    f, jobs = replay_check(recorded, _replayed(starts, submits))
    assert jobs["measured_gpu_energy_kwh"].iloc[0] == pytest.approx(250.0 * 4 * 100.0 / 3.6e6)
    assert f["gpu_energy_jobs"] == 1
    assert f["gpu_energy_recorded_kwh"] == pytest.approx(250.0 * 4 * 100.0 / 3.6e6)
    assert f["gpu_energy_replayed_kwh"] == pytest.approx(0.5)  # the job's own replayed GPU energy only


def test_step_integral_matches_hand_sums():
    t = np.array([0.0, 10.0, 30.0])
    v = np.array([2.0, 5.0, 99.0])  # the last row holds until the end of the series: nothing after it
    x = np.array([-5.0, 0.0, 5.0, 10.0, 20.0, 30.0, 50.0])
    assert step_integral(t, v, x).tolist() == [0.0, 0.0, 10.0, 20.0, 70.0, 120.0, 120.0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(1, 50), st.integers(1, 4)), min_size=1, max_size=6))
def test_attribution_adds_up_to_the_power_drawn_while_gpus_are_held(specs):
    # Jobs with no pauses: at every moment the power is split by allocated GPUs, so the shares add up exactly.
    jobs = pd.DataFrame(
        {
            "job_id": [str(i) for i in range(len(specs))], "status": "completed",
            "submit_s": [s for s, _, _ in specs], "start_s": [s for s, _, _ in specs],
            "end_s": [s + d for s, d, _ in specs], "queue_delay_s": 0.0, "jct_s": [d for _, d, _ in specs],
            "num_gpu": [g for _, _, g in specs], "gpu_milli": 1000,
        }
    )  # fmt: skip
    times = np.unique(np.concatenate([jobs["start_s"], jobs["end_s"]]))
    alloc = np.array([sum(g for s, d, g in specs if s <= t < s + d) for t in times], dtype=float)
    power = 500.0 + 300.0 * alloc  # idle draw shared too
    series = pd.DataFrame(
        {"time_s": times, "allocated_gpus": alloc, "power_w": power, "gpu_w": 300.0 * alloc}
    )
    out = attribute_jobs(jobs, series)
    held = float(np.sum(np.where(alloc[:-1] > 0, power[:-1], 0.0) * np.diff(times))) / 3.6e6
    assert out["energy_kwh"].sum() == pytest.approx(held, rel=1e-9, abs=1e-12)
    # A job of twice the GPUs over the same interval as another gets twice the energy.
    per_gpu_s = (
        out["gpu_energy_kwh"].to_numpy() * 3.6e6 / (jobs["num_gpu"] * (jobs["end_s"] - jobs["start_s"]))
    )
    assert np.allclose(per_gpu_s, 300.0)
    assert out["cost_usd"].isna().all()  # no price series, no cost
