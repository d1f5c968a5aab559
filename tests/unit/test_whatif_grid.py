"""The what-if grid on a small hand-built history: 30 jobs on two partitions (experiments/whatif.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.whatif_fixtures import fifo_history, hourly_signals, two_partition_nodes
from wattsched.core.errors import WattschedError
from wattsched.experiments.protocol import experiment, run_experiment
from wattsched.experiments.whatif import WhatIfConfig, provide_history


@pytest.fixture(scope="module")
def whatif_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whatif")
    price, carbon = hourly_signals(folder)
    provide_history("grid-sacct", "grid-nodes", fifo_history(30), two_partition_nodes())
    cfg = WhatIfConfig(
        sacct="grid-sacct", nodes="grid-nodes", inputs_dir=str(folder / "inputs"), price_csv=price,
        carbon_csv=carbon, deadline_slack=20.0,
    )  # fmt: skip
    return cfg, run_experiment(experiment("whatif"), cfg, folder / "out", workers=1, plots=False)


def test_every_variant_runs_on_one_job_model_baseline_first(whatif_run):
    _, result = whatif_run
    records = result.records
    assert records["variant"].tolist() == ["baseline", "right-sizing", "power-cap", "pwr-fgd", "price-shift"]
    assert (records["jobs_completed"] == 30).all()
    assert result.window  # one common accounting window
    base = records.iloc[0]
    by = records.set_index("variant")
    assert by.loc["right-sizing", "energy_kwh"] < base["energy_kwh"]  # idle nodes switched off
    assert by.loc["power-cap", "energy_kwh"] < base["energy_kwh"]  # capped GPUs draw less ...
    assert by.loc["power-cap", "jct_mean_s"] > base["jct_mean_s"]  # ... and run slower
    assert by.loc["price-shift", "cost_usd"] < 0.9 * base["cost_usd"]  # work moved to the cheap nights


def test_replay_check_against_the_recorded_fifo(whatif_run):
    _, result = whatif_run
    check = pd.read_csv(result.out / "replay_check.csv").set_index("figure")["value"]
    assert check["jobs_compared"] == 30
    # The fixture's history is a per-partition FIFO; backfill on the same nodes reproduces most starts.
    assert check["start_within_60s"] >= 0.5
    assert check["start_order_spearman"] > 0.9
    jobs = pd.read_csv(result.out / "replay_jobs.csv", dtype={"job_id": str})
    assert len(jobs) == 30 and jobs["recorded_energy_kwh"].notna().all()
    assert check["energy_recorded_kwh"] == pytest.approx(jobs["recorded_energy_kwh"].sum(), rel=1e-5)


def test_partition_and_group_tables_add_up_to_each_run(whatif_run):
    _, result = whatif_run
    records = result.records.set_index("variant")
    for name, column, keys in (("by_partition.csv", "partition", {"a100", "v100"}),
                               ("by_group.csv", "account", {"proj-a", "proj-b"})):  # fmt: skip
        table = pd.read_csv(result.out / name)
        assert set(table[column]) == keys | {"(unattributed)"}
        sums = table.groupby("variant")[["energy_kwh", "cost_usd", "co2_kg", "jobs"]].sum()
        for variant, row in sums.iterrows():
            assert row["jobs"] == 30
            for metric in ("energy_kwh", "cost_usd", "co2_kg"):
                assert row[metric] == pytest.approx(records.loc[variant, metric], rel=1e-4)
    summary = (result.out / "summary.md").read_text()
    for heading in ("## Replay check", "## Per partition", "## Per account", "## The history"):
        assert heading in summary


def test_co_location_needs_profiles_and_unknown_variants_are_named(tmp_path):
    provide_history("s2", "n2", fifo_history(5), two_partition_nodes())
    with pytest.raises(WattschedError, match="co-location needs measured profiles"):
        experiment("whatif").grid(WhatIfConfig(sacct="s2", nodes="n2", variants=["co-location"]))
    with pytest.raises(WattschedError, match="unknown dvfs"):
        experiment("whatif").grid(WhatIfConfig(sacct="s2", nodes="n2", variants=["dvfs"]))
    with pytest.raises(WattschedError, match="not both"):
        experiment("whatif").grid(
            WhatIfConfig(sacct="s2", nodes="n2", region="DE-LU", price_csv="p.csv", inputs_dir=str(tmp_path))
        )


def test_co_location_runs_on_measured_profiles_with_the_same_job_model(tmp_path):
    import os

    if not os.environ.get("WATTSCHED_DATA"):
        pytest.skip("needs WATTSCHED_DATA for the h200-colocation-probe profiles")
    price, carbon = hourly_signals(tmp_path)
    provide_history("s3", "n3", fifo_history(12), two_partition_nodes())
    cfg = WhatIfConfig(
        sacct="s3", nodes="n3", inputs_dir=str(tmp_path / "in"), price_csv=price, carbon_csv=carbon,
        profiles="h200-colocation-probe/gpu-bound.csv", variants=["co-location"],
    )  # fmt: skip
    result = run_experiment(experiment("whatif"), cfg, tmp_path / "out", workers=1, plots=False)
    assert result.records["variant"].tolist() == ["baseline", "co-location"]
    assert result.records["policy"].tolist()[1] == "eaco"
    assert (result.records["jobs_completed"] == 12).all()


def test_deadline_aware_power_capping_on_request(tmp_path):
    price, carbon = hourly_signals(tmp_path)
    provide_history("s4", "n4", fifo_history(12), two_partition_nodes())
    cfg = WhatIfConfig(
        sacct="s4", nodes="n4", inputs_dir=str(tmp_path / "in"), price_csv=price, carbon_csv=carbon,
        variants=["power-cap-deadline"],
    )  # fmt: skip
    records = run_experiment(experiment("whatif"), cfg, tmp_path / "out", workers=1, plots=False).records
    assert records["policy"].tolist() == ["backfill+best-fit", "hkbu-dvfs"]
    base, capped = records.iloc[0], records.iloc[1]
    assert capped["energy_kwh"] < base["energy_kwh"]
    assert capped["deadline_misses"] <= base["deadline_misses"]  # it picks limits that meet deadlines
