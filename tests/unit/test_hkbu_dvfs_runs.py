"""HKBU-DVFS in `wattsched simulate` (the allocation policy) and `wattsched experiment hkbu-dvfs`."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.conftest import require_real_file
from wattsched.cli.experiment import experiment_app
from wattsched.core.errors import WattschedError
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.hkbu_dvfs import TraceSetup, run_experiment
from wattsched.experiments.run import run_simulation


def _run(allocation: str, slack: float | None, jobs: int = 150, power_manager: str = "always-on"):
    cfg = SimulationConfig(
        workload="synthetic",
        allocation=allocation,
        deadline_slack=slack,
        max_jobs=jobs,
        power_manager=power_manager,
        performance="trace",  # trace speeds: no throughput tables, so no dataset needed
        seed=3,
    )
    result = run_simulation(cfg)
    return result.summary, result.summary["policies"]["allocation"]["parameters"]


def test_without_deadlines_the_message_names_the_flag():
    with pytest.raises(WattschedError, match="--deadline-slack"):
        _run("hkbu-dvfs", None)


def test_loose_deadlines_run_below_default_clocks_and_save_training_energy():
    dvfs, p = _run("hkbu-dvfs", 4.0)
    base, q = _run("hkbu-dvfs-default-clocks", 4.0)
    assert p["jobs_started"] == 150 and p["jobs_below_default_speed"] > 100
    assert 0.5 < p["mean_chosen_speed"] < 1.0
    assert q["jobs_below_default_speed"] == 0 and q["mean_chosen_speed"] == 1.0
    assert dvfs["deadline_misses"] <= base["deadline_misses"]
    saving = 1 - dvfs["energy_by_component_kwh"]["gpu_active"] / base["energy_by_component_kwh"]["gpu_active"]
    assert saving > 0.05


def test_tighter_deadlines_get_faster_settings_and_no_extra_misses():
    # slack 1: the deadline is the job's trace duration, so little room for a slower level
    tight, p = _run("hkbu-dvfs", 1.0)
    base, _ = _run("hkbu-dvfs-default-clocks", 1.0)
    _, loose = _run("hkbu-dvfs", 4.0)
    assert p["mean_chosen_speed"] > loose["mean_chosen_speed"] + 0.02
    assert tight["deadline_misses"] <= base["deadline_misses"]
    assert p["started_able_to_meet_deadline"] + p["started_unable_to_meet_deadline"] == p["jobs_started"]


def test_sm_clock_variant_runs_and_reports_its_knob():
    _, p = _run("hkbu-dvfs-sm", 4.0, jobs=60)
    assert p["knob"] == "sm-clock" and p["jobs_started"] == 60


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    out = tmp_path_factory.mktemp("h1")
    result = run_experiment(
        out,
        models=["2070S", "tpds-synthetic"],
        utilisations=[0.4, 1.2],
        seeds=2,
        gpus=48,
        trace=None,
        workers=1,
    )
    return out, result


def test_experiment_writes_results_savings_summary_and_plots(experiment):
    out, _ = experiment
    for name in (
        "results.csv",
        "savings.csv",
        "summary.json",
        "summary.md",
        "energy_vs_u.png",
        "savings_vs_u.png",
    ):
        assert (out / name).stat().st_size > 0, name
    results = pd.read_csv(out / "results.csv")
    # 2 models x 2 U x 2 seeds task sets; offline 4 algorithms, online 2, each x DVFS x DRS
    assert len(results) == 2 * 2 * 2 * (4 + 2) * 4
    assert set(results.algorithm) == {"edf+spt", "edf+bf", "edf+wf", "lpt+ff", "edf+bin"}
    assert (results.total_j >= results.run_j).all()
    savings = pd.read_csv(out / "savings.csv")
    assert len(savings) == 2 * 2 * (4 + 2) * 2
    s = json.loads((out / "summary.json").read_text())
    assert s["published"]["eenergy_2019_training_saving_pct"] == [8.7, 23.1]
    assert s["trace"] == {"skipped": "not requested (--trace none)"}
    # the upstream synthetic draws put most power on the core clock: far larger savings than the kernel fits
    assert s["per_model"]["tpds-synthetic"]["run_saving_pct"]["min"] > 25
    assert s["per_model"]["2070S"]["run_saving_pct"]["max"] < 10
    md = (out / "summary.md").read_text()
    assert "TPDS 2022" in md and "e-Energy'19" in md


def test_experiment_bad_settings_are_clear_errors(tmp_path):
    with pytest.raises(WattschedError, match="task model"):
        run_experiment(tmp_path, models=["H100"], trace=None)
    with pytest.raises(WattschedError, match="--theta"):
        run_experiment(tmp_path, theta=2.0, trace=None)
    result = CliRunner().invoke(
        experiment_app, ["hkbu-dvfs", "--utilisations", "a,b", "--out", str(tmp_path)]
    )
    assert result.exit_code != 0 and "--utilisations" in result.output


def test_cli_small_run_without_trace(tmp_path):
    args = ["hkbu-dvfs", "--models", "1080Ti", "--modes", "online", "--utilisations", "0.4", "--seeds", "1",
            "--gpus", "32", "--trace", "none", "--workers", "1", "--quiet", "--out", str(tmp_path)]  # fmt: skip
    result = CliRunner().invoke(experiment_app, args)
    assert result.exit_code == 0, result.output
    assert "1080Ti" in result.output and "skipped" in result.output


@pytest.mark.realdata
def test_trace_part_on_philly_saves_training_energy_at_equal_deadline_satisfaction(tmp_path):
    require_real_file("philly-pollux", "philly.csv")
    trace = TraceSetup(max_jobs=1500)
    result = run_experiment(
        tmp_path, models=["2070S"], modes=["offline"], utilisations=[0.4], seeds=1, gpus=32, trace=trace,
        trace_gpus=["V100"], workers=1,
    )  # fmt: skip
    t = result.summary["trace"]["per_power_manager"]["always-on"]["V100"]
    assert t["deadline_misses_dvfs"] <= t["deadline_misses_default"]
    assert t["training_saving_pct"] > 5
    rows = pd.read_csv(tmp_path / "trace.csv")
    assert len(rows) == 4 and set(rows.variant) == {"dvfs", "default"}


def test_missing_trace_data_skips_the_trace_part_with_the_reason(tmp_path, monkeypatch):
    empty = tmp_path / "no-data"
    empty.mkdir()
    monkeypatch.setenv("WATTSCHED_CACHE", str(empty))  # no fetched copy either
    result = run_experiment(
        tmp_path / "out", models=["2070S"], modes=["offline"], utilisations=[0.4], seeds=1, gpus=16,
        trace=TraceSetup(data_dir=str(empty)), workers=1,
    )  # fmt: skip
    assert "wattsched data fetch philly-pollux" in result.summary["trace"]["skipped"]
    assert not (tmp_path / "out" / "trace.csv").exists()
    with pytest.raises(WattschedError, match="unknown workload"):
        run_experiment(tmp_path / "o2", trace=TraceSetup(workload="no-such-trace"), workers=1)
