"""HKBU-DVFS in `wattsched simulate` (the allocation policy) and `wattsched experiment hkbu-dvfs`."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.conftest import require_real_file
from wattsched.cli.experiment import experiment_app
from wattsched.core.errors import WattschedError
from wattsched.experiments.compare import rows_of
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.hkbu_dvfs import HkbuDvfsConfig
from wattsched.experiments.protocol import EXPERIMENTS, run_experiment
from wattsched.experiments.run import run_simulation


def run_hkbu_dvfs(out, **settings):
    return run_experiment(EXPERIMENTS.create("hkbu-dvfs"), HkbuDvfsConfig(**settings), out, workers=1)


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
    # Every training start weighs the deadline; inference service-hours start at the default setting unweighed.
    weighed = p["started_able_to_meet_deadline"] + p["started_unable_to_meet_deadline"]
    assert tight["service_hours"] > 0 and weighed + tight["service_hours"] == p["jobs_started"]


def test_sm_clock_variant_runs_and_reports_its_knob():
    _, p = _run("hkbu-dvfs-sm", 4.0, jobs=60)
    assert p["knob"] == "sm-clock" and p["jobs_started"] == 60


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    out = tmp_path_factory.mktemp("h1")
    result = run_hkbu_dvfs(
        out, models=["2070S", "tpds-synthetic"], utilisations=[0.4, 1.2], seeds=2, gpus=48, trace="none"
    )
    return out, result


def test_experiment_writes_results_savings_summary_and_plots(experiment):
    out, _ = experiment
    for name in (
        "records.csv",
        "results.csv",
        "savings.csv",
        "summary.json",
        "summary.md",
        "config.yaml",
        "energy_vs_u.png",
        "savings_vs_u.png",
        "nodes_vs_u.png",
    ):
        assert (out / name).stat().st_size > 0, name
    assert not (out / "trace.csv").exists()
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
    assert "DL trace part skipped: not requested (--trace none)" in md


def test_compare_reads_every_schedule_with_its_energy_misses_and_label(experiment):
    """records.csv: one record per schedule, labelled by its keys (the trace keys empty), energy in kWh and the
    deadline misses of its task set; no schedule is a reconstruction of a registered policy."""
    out, _ = experiment
    records = pd.read_csv(out / "records.csv")
    keys = ["model", "mode", "utilisation", "seed", "algorithm", "dvfs", "drs"]
    assert list(records.columns[1:12]) == [*keys, "gpu", "power_manager", "variant", "policy"]
    assert records[["gpu", "power_manager", "variant"]].isna().all().all()
    results = records[keys].merge(pd.read_csv(out / "results.csv"), on=keys, how="left")
    rows = rows_of(out)
    assert len(rows) == len(results) == 192
    first = results.iloc[0]
    assert rows[0]["run"] == (
        f"{out} model={first.model} mode={first['mode']} utilisation={first.utilisation:g} seed=42 "
        f"algorithm={first.algorithm} dvfs={first.dvfs} drs={first.drs}"
    )
    policies = [" ".join([a, *(["dvfs"] if d else []), *(["drs"] if r else [])])
                for a, d, r in zip(results.algorithm, results.dvfs, results.drs, strict=True)]  # fmt: skip
    assert [r["policy"] for r in rows] == policies
    assert not any(r["reconstructed"] for r in rows)
    np.testing.assert_allclose([r["energy_kwh"] for r in rows], results.total_j / 3.6e6, rtol=1e-5)
    misses = (results.tasks * (1 - results.deadline_met_fraction)).round()
    np.testing.assert_array_equal([r["deadline_misses"] for r in rows], misses)


def test_experiment_bad_settings_are_clear_errors(tmp_path):
    with pytest.raises(WattschedError, match="task model"):
        run_hkbu_dvfs(tmp_path, models=["H100"], trace="none")
    with pytest.raises(WattschedError, match="--theta"):
        run_hkbu_dvfs(tmp_path, theta=2.0, trace="none")
    for args, message in [
        (["--utilisations", "a,b"], "--utilisations: expected numbers such as 0.2,0.4, got 'a,b'"),
        (["--models", "H100"], "unknown task model 'H100'"),
        (["--seeds", "0"], "--seeds must be at least 1, got 0"),
        (["--trace-jobs", "-1"], "--trace-jobs: Input should be greater than or equal to 0"),
    ]:
        result = CliRunner().invoke(
            experiment_app, ["hkbu-dvfs", *args, "--trace", "none", "--quiet", "--out", str(tmp_path)]
        )
        assert result.exit_code != 0 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_cli_small_run_without_trace(tmp_path):
    args = ["hkbu-dvfs", "--models", "1080Ti", "--modes", "online", "--utilisations", "0.4", "--seeds", "1",
            "--gpus", "32", "--trace", "none", "--workers", "1", "--quiet", "--out", str(tmp_path)]  # fmt: skip
    result = CliRunner().invoke(experiment_app, args)
    assert result.exit_code == 0, result.output
    assert "1080Ti" in result.output and "skipped" in result.output


@pytest.mark.realdata
def test_trace_part_on_philly_saves_training_energy_at_equal_deadline_satisfaction(tmp_path):
    require_real_file("philly-pollux", "philly.csv")
    run_hkbu_dvfs(tmp_path, models=["2070S"], modes=["offline"], utilisations=[0.4], seeds=1, gpus=32,
                  trace_jobs=1500, trace_gpus=["V100"])  # fmt: skip
    s = json.loads((tmp_path / "summary.json").read_text())
    t = s["trace"]["per_power_manager"]["always-on"]["V100"]
    assert t["deadline_misses_dvfs"] <= t["deadline_misses_default"]
    assert t["training_saving_pct"] > 5
    rows = pd.read_csv(tmp_path / "trace.csv")
    assert len(rows) == 4 and set(rows.variant) == {"dvfs", "default"}
    # compare: the trace runs by GPU type, power manager and variant, their total over the common window
    runs = {r["run"].removeprefix(f"{tmp_path} "): r for r in rows_of(tmp_path) if "gpu=" in r["run"]}
    for row in rows.itertuples():
        r = runs[f"gpu=V100 power_manager={row.power_manager} variant={row.variant}"]
        assert r["policy"] == row.policy and r["reconstructed"] and r["basis"].startswith(f"{row.policy}: ")
        assert r["energy_kwh"] == pytest.approx(row.total_energy_kwh, rel=1e-5)
        assert r["own_window_kwh"] == pytest.approx(row.own_window_kwh, rel=1e-5)
        assert r["energy_gpu_active_kwh"] == pytest.approx(row.training_energy_kwh, rel=1e-5)
        assert r["deadline_misses"] == row.deadline_misses
    assert rows.total_energy_kwh.ge(rows.own_window_kwh - 1e-6).all()  # charged over the common window


def test_missing_trace_data_skips_the_trace_part_with_the_reason(tmp_path, monkeypatch):
    empty = tmp_path / "no-data"
    empty.mkdir()
    monkeypatch.setenv("WATTSCHED_CACHE", str(empty))  # no fetched copy either
    run_hkbu_dvfs(tmp_path / "out", models=["2070S"], modes=["offline"], utilisations=[0.4], seeds=1, gpus=16,
                  data_dir=str(empty))  # fmt: skip
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "wattsched data fetch philly-pollux" in s["trace"]["skipped"]
    assert not (tmp_path / "out" / "trace.csv").exists()
    with pytest.raises(WattschedError, match="unknown workload"):
        run_hkbu_dvfs(tmp_path / "o2", trace="no-such-trace")
