"""The powerflow experiment: equal-energy runs, sweeps, outputs and the CLI, on the tiny Pollux
fixture (tests/fixtures/perfdata: 6 jobs, T4 tables, n16g4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from wattsched.cli.experiment import experiment_app
from wattsched.core.errors import UnknownNameError, WattschedError
from wattsched.experiments.powerflow import (
    LABEL,
    RESULT_COLUMNS,
    STATUS_BELOW,
    STATUS_INTERPOLATED,
    STATUS_RUN,
    STATUS_UNUSED,
    SWEEP_COLUMNS,
    budget_fractions,
    check_baselines,
    jct_at_energy,
    prepare,
    run_experiment,
)

PERFDATA = Path(__file__).resolve().parent.parent / "fixtures" / "perfdata"
ARGS = {"workload": "pollux/workload-1", "cluster": "n16g4", "gpu_type": "T4", "data_dir": PERFDATA}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    out = tmp_path_factory.mktemp("pf")
    return run_experiment(
        **ARGS, seeds=1, baselines=["fifo", "optimus-greedy"], budget_points=3, out=out, workers=2
    )


def test_outputs_and_columns(experiment):
    out = experiment.out
    for name in ("results.csv", "sweep.csv", "runs.csv", "summary.md", "jct_vs_energy.png", "jct_ratio.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    results = pd.read_csv(out / "results.csv")
    assert list(results.columns) == list(RESULT_COLUMNS)
    assert results.baseline.tolist() == ["fifo", "optimus-greedy"] and results.seed.tolist() == [42, 42]
    sweep = pd.read_csv(out / "sweep.csv")
    assert list(sweep.columns) == list(SWEEP_COLUMNS)
    caps = sweep[sweep.kind == "clock-cap"]
    assert sorted(set(caps.policy)) == ["fifo", "optimus-greedy"]
    assert sorted(caps.sm_clock_cap.unique(), reverse=True) == [1.0, 0.9, 0.8, 0.7, 0.6]
    budgets = sweep[sweep.kind == "budget"]
    refused = experiment.summary["refused"]
    # Sweep budgets are fractions of the largest baseline energy over the seed's window; those below PowerFlow's
    # floor are refused before their run starts (and listed), the others run.
    assert sorted(budgets.budget_fraction.tolist() + [0.0] * len(refused)) <= [0.6, 0.9, 1.2]
    assert len(budgets) + len(refused) == 3
    top = results.window_kwh_baseline.max()
    for row in budgets.itertuples():
        assert row.budget_kwh == pytest.approx(row.budget_fraction * top, rel=1e-6)
    assert (sweep[sweep.kind == "no-budget"].policy == "powerflow").all()
    assert len(experiment.runs) == 2 * 5 + 2 + 3 + 1 - len(refused)


def test_ratios_and_budgets(experiment):
    r = experiment.results  # in memory: exact
    np.testing.assert_array_equal(r.jct_ratio, r.mean_jct_s_baseline / r.mean_jct_s_powerflow)
    np.testing.assert_array_equal(r.p95_jct_ratio, r.p95_jct_s_baseline / r.p95_jct_s_powerflow)
    # Every PowerFlow run's budget is its baseline's energy over the seed's common window, which its budget
    # covers too (until_s), and the landing is judged on that window.
    np.testing.assert_allclose(r.budget_kwh, r.window_kwh_baseline, rtol=1e-9)
    for rec in experiment.runs:
        if rec.task.kind == "equal":
            assert rec.task.until_s is not None and rec.task.until_s > 0
    np.testing.assert_allclose(
        r.budget_error_pct,
        100 * (r.window_kwh_powerflow - r.window_kwh_baseline) / r.window_kwh_baseline,
        rtol=1e-12,
    )
    assert set(r.budget_status) <= {STATUS_RUN, STATUS_INTERPOLATED, STATUS_UNUSED, STATUS_BELOW}
    landed = r[r.budget_status == STATUS_RUN]
    assert (landed.budget_error_pct.abs() <= 2.0).all()
    np.testing.assert_array_equal(landed.mean_jct_s_powerflow, landed.mean_jct_s_powerflow_run)
    # FIFO and the others run on the same job model: iterations from the tables, one model assignment.
    assert experiment.summary["models_identical"]
    assert len(set(pd.read_csv(experiment.out / "runs.csv").model_digest)) == 1


def test_jct_at_energy_interpolates_on_the_lower_envelope():
    points = [(10.0, 100.0), (12.0, 80.0), (11.0, 120.0), (14.0, 70.0)]  # (11, 120) is dominated
    assert jct_at_energy(points, 13.0, 60.0) == (pytest.approx(75.0), STATUS_INTERPOLATED)
    assert jct_at_energy(points, 15.0, 60.0) == (60.0, STATUS_UNUSED)  # above every run: the no-budget JCT
    assert jct_at_energy(points, 9.0, 60.0) == (100.0, STATUS_BELOW)


def test_summary_mentions_reconstruction_and_targets(experiment):
    text = (experiment.out / "summary.md").read_text()
    assert LABEL in text and "reconstruction" in text
    assert "1.57-3.39x" in text and "1.5x" in text
    assert "Wall time" in text and "What differs from the paper's setup" in text
    for b in ("fifo", "optimus-greedy"):
        assert f"vs {b}: mean JCT ratio" in text


def test_budget_rules():
    assert budget_fractions(7) == [0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]
    assert budget_fractions(1) == [1.0]
    with pytest.raises(WattschedError, match="budget-points"):
        budget_fractions(0)


def test_bad_settings_fail_before_any_run():
    with pytest.raises(UnknownNameError, match="unknown baseline 'sjf'"):
        check_baselines(["fifo", "sjf"])
    with pytest.raises(UnknownNameError):
        check_baselines(["powerflow"])  # not a baseline of itself
    assert check_baselines(["tiresias", "fifo", "tiresias"]) == ["tiresias", "fifo"]
    with pytest.raises(WattschedError, match="outside the range"):
        prepare(**ARGS, caps=[0.3])
    with pytest.raises(WattschedError, match="seeds"):
        prepare(**ARGS, seeds=0)
    prep = prepare(**ARGS, caps=[0.8])
    assert prep.caps == [1.0, 0.8] and prep.jobs == 6


def test_cli_unknown_baseline_is_one_error_line():
    result = CliRunner().invoke(
        experiment_app,
        ["powerflow", "--workload", "pollux/workload-1", "--cluster", "n16g4", "--baselines", "fifo,nope"],
    )
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "unknown baseline 'nope'" in lines[0]


def test_cli_small_run(tmp_path):
    out = tmp_path / "pf"
    args = ["powerflow", "--workload", "pollux/workload-1", "--cluster", "n16g4", "--gpu-type", "T4"]
    args += ["--seeds", "1", "--baselines", "fifo", "--budget-points", "2", "--caps", "1.0,0.7"]
    args += ["--workers", "1", "--data-dir", str(PERFDATA), "--out", str(out), "--quiet"]
    args += ["--power-manager", "always-on"]
    result = CliRunner().invoke(experiment_app, args)
    assert result.exit_code == 0, result.output
    assert "vs fifo: mean JCT ratio" in result.output
    assert len(pd.read_csv(out / "results.csv")) == 1
    assert len(pd.read_csv(out / "sweep.csv")) == 2 + 2 + 1


def test_every_power_manager_runs_its_own_grid_and_budgets_come_from_its_own_baselines(tmp_path):
    """By default the grid runs under always-on and under idle-timeout; each PowerFlow budget is the energy its
    baseline measured under the same manager, and the headline is reported per manager."""
    out = tmp_path / "pf"
    args = ["powerflow", "--workload", "pollux/workload-1", "--cluster", "n16g4", "--gpu-type", "T4"]
    args += ["--seeds", "1", "--baselines", "fifo", "--budget-points", "1", "--caps", "1.0"]
    args += ["--workers", "1", "--data-dir", str(PERFDATA), "--out", str(out), "--quiet"]
    result = CliRunner().invoke(experiment_app, args)
    assert result.exit_code == 0, result.output
    assert "power manager always-on" in result.output and "power manager idle-timeout" in result.output
    energies = {}
    for pm in ("always-on", "idle-timeout"):
        runs = pd.read_csv(out / pm / "runs.csv")
        base = runs[(runs.kind == "baseline") & (runs.policy == "fifo")].energy_kwh.item()
        equal = runs[runs.kind == "equal"]
        np.testing.assert_allclose(equal.budget_kwh, [base], rtol=1e-5)
        assert f"power manager `{pm}`" in (out / pm / "summary.md").read_text()
        energies[pm] = base
    assert energies["idle-timeout"] < energies["always-on"]  # switched-off nodes: a smaller budget
    headline = pd.read_csv(out / "headline.csv")
    assert headline.power_manager.tolist() == ["always-on", "idle-timeout"]
    assert headline.baseline.tolist() == ["fifo", "fifo"]
    np.testing.assert_allclose(
        headline.energy_kwh_baseline, [energies["always-on"], energies["idle-timeout"]]
    )
    text = (out / "summary.md").read_text()
    assert "| always-on | fifo |" in text and "| idle-timeout | fifo |" in text


def test_unknown_power_manager_is_one_error_line(tmp_path):
    args = ["powerflow", "--workload", "pollux/workload-1", "--cluster", "n16g4", "--gpu-type", "T4"]
    args += ["--power-manager", "always-on,nope", "--data-dir", str(PERFDATA), "--out", str(tmp_path)]
    result = CliRunner().invoke(experiment_app, args)
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "nope" in lines[0]
