"""The powerflow experiment: equal-energy runs, sweeps, outputs, records for `compare` and the CLI, on the tiny
Pollux fixture (tests/fixtures/perfdata: 6 jobs, T4 tables, n16g4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from wattsched.cli.main import app
from wattsched.core.errors import UnknownNameError, WattschedError
from wattsched.experiments import compare
from wattsched.experiments.powerflow import (
    PowerFlowConfig,
    budget_fractions,
    check_baselines,
    prepare,
)
from wattsched.experiments.powerflow_runs import run_task
from wattsched.experiments.powerflow_tables import (
    LABEL,
    RESULT_COLUMNS,
    STATUS_BELOW,
    STATUS_INTERPOLATED,
    STATUS_RUN,
    STATUS_UNUSED,
    SWEEP_COLUMNS,
    jct_at_energy,
)
from wattsched.experiments.protocol import EXPERIMENTS, run_experiment

PERFDATA = Path(__file__).resolve().parent.parent / "fixtures" / "perfdata"
ARGS = {"workload": "pollux/workload-1", "cluster": "n16g4", "gpu_type": "T4", "data_dir": str(PERFDATA)}
CLI = ["experiment", "powerflow", "--workload", "pollux/workload-1", "--cluster", "n16g4", "--gpu-type", "T4"]


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    """One grid under always-on: the protocol's result, the config and that manager's runs and tables."""
    out = tmp_path_factory.mktemp("pf")
    cfg = PowerFlowConfig(
        **ARGS, seeds=1, baselines=["fifo", "optimus-greedy"], budget_points=3, power_manager=["always-on"]
    )
    exp = EXPERIMENTS.create("powerflow")
    result = run_experiment(exp, cfg, out, workers=2)
    _, grids = exp.manager_grids(cfg, result.outcomes)
    return result, cfg, grids["always-on"]


def test_outputs_and_columns(experiment):
    result, _, grid = experiment
    out = result.out
    for name in ("results.csv", "sweep.csv", "runs.csv", "records.csv", "summary.md", "config.yaml"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    for name in ("jct_vs_energy.png", "jct_ratio.png", "budget_tracking.png"):
        assert (out / name) in result.files and (out / name).stat().st_size > 0, name
    results = pd.read_csv(out / "results.csv")
    assert list(results.columns) == list(RESULT_COLUMNS)
    assert results.baseline.tolist() == ["fifo", "optimus-greedy"] and results.seed.tolist() == [42, 42]
    sweep = pd.read_csv(out / "sweep.csv")
    assert list(sweep.columns) == list(SWEEP_COLUMNS)
    caps = sweep[sweep.kind == "clock-cap"]
    assert sorted(set(caps.policy)) == ["fifo", "optimus-greedy"]
    assert sorted(caps.sm_clock_cap.unique(), reverse=True) == [1.0, 0.9, 0.8, 0.7, 0.6]
    budgets = sweep[sweep.kind == "budget"]
    refused = grid.summary["refused"]
    # Sweep budgets are fractions of the largest baseline energy over the seed's window; those below PowerFlow's
    # floor are refused before their run starts (and listed), the others run.
    assert sorted(budgets.budget_fraction.tolist() + [0.0] * len(refused)) <= [0.6, 0.9, 1.2]
    assert len(budgets) + len(refused) == 3
    top = results.window_kwh_baseline.max()
    for row in budgets.itertuples():
        assert row.budget_kwh == pytest.approx(row.budget_fraction * top, rel=1e-6)
    assert (sweep[sweep.kind == "no-budget"].policy == "powerflow").all()
    assert len(grid.runs) == 2 * 5 + 2 + 3 + 1 - len(refused)
    assert len(result.records) == len(grid.runs) == len(pd.read_csv(out / "runs.csv"))


def test_ratios_and_budgets(experiment):
    result, _, grid = experiment
    r = grid.results  # in memory: exact
    np.testing.assert_array_equal(r.jct_ratio, r.mean_jct_s_baseline / r.mean_jct_s_powerflow)
    np.testing.assert_array_equal(r.p95_jct_ratio, r.p95_jct_s_baseline / r.p95_jct_s_powerflow)
    # Every PowerFlow run's budget is its baseline's energy over the seed's common window, which its budget
    # covers too (until_s), and the landing is judged on that window.
    np.testing.assert_allclose(r.budget_kwh, r.window_kwh_baseline, rtol=1e-9)
    equal = [rec for rec in grid.runs if rec.task.kind == "equal"]
    assert len(equal) == 2
    for rec in equal:
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
    assert grid.summary["models_identical"]
    assert len(set(pd.read_csv(result.out / "runs.csv").model_digest)) == 1
    # records.csv carries the comparison on PowerFlow's equal-energy rows, as results.csv has it.
    rows = result.records[result.records.kind == "equal"].set_index("baseline")
    for b in ("fifo", "optimus-greedy"):
        row = r[r.baseline == b].iloc[0]
        assert rows.loc[b, "budget_status"] == row.budget_status
        assert rows.loc[b, "jct_ratio"] == pytest.approx(row.jct_ratio, rel=1e-5)


def test_compare_reads_the_records(experiment):
    """`wattsched compare` reads records.csv: one row per run, the runs.csv figures under the comparison's names
    (energy over the seed's common window, the run's own beside it), policies as runs.csv names them, PowerFlow
    marked as a reconstruction."""
    result, _, _ = experiment
    rows = compare.rows_of(result.out)
    runs = pd.read_csv(result.out / "runs.csv")
    assert len(rows) == len(runs)
    assert {r["policy"] for r in rows} == {"fifo", "optimus-greedy", "powerflow"}
    for r in rows:
        assert r["experiment"] == "powerflow"
        assert r["reconstructed"] == (r["policy"] == "powerflow")
        if r["policy"] == "powerflow":
            assert r["basis"].startswith("powerflow: ")
    (equal,) = [r for r in rows if "kind=equal" in r["run"] and "baseline=fifo" in r["run"]]
    assert "power_manager=always-on" in equal["run"] and "seed=42" in equal["run"]
    expected = runs[(runs.kind == "equal") & (runs.baseline == "fifo")].iloc[0]
    for metric, column in (
        ("energy_kwh", "energy_kwh"),
        ("own_window_kwh", "own_window_kwh"),
        ("jct_mean_s", "mean_jct_s"),
        ("jct_p95_s", "p95_jct_s"),
        ("makespan_s", "makespan_s"),
        ("gpu_allocation", "gpu_allocation_mean"),
        ("restarts", "restarts"),
        ("jobs_completed", "jobs_completed"),
    ):
        assert equal[metric] == pytest.approx(float(expected[column]), rel=1e-5), metric


def test_jct_at_energy_interpolates_on_the_lower_envelope():
    points = [(10.0, 100.0), (12.0, 80.0), (11.0, 120.0), (14.0, 70.0)]  # (11, 120) is dominated
    assert jct_at_energy(points, 13.0, 60.0) == (pytest.approx(75.0), STATUS_INTERPOLATED)
    assert jct_at_energy(points, 15.0, 60.0) == (60.0, STATUS_UNUSED)  # above every run: the no-budget JCT
    assert jct_at_energy(points, 9.0, 60.0) == (100.0, STATUS_BELOW)


def test_summary_mentions_reconstruction_and_targets(experiment):
    result, _, _ = experiment
    text = (result.out / "summary.md").read_text()
    assert LABEL in text and "reconstruction" in text
    assert "1.57-3.39x" in text and "1.5x" in text
    assert "Wall time" in text and "What differs from the paper's setup" in text
    for b in ("fifo", "optimus-greedy"):
        assert f"vs {b}: mean JCT ratio" in text
        assert f"| always-on | {b} |" in text  # the equal-energy comparison table
    assert "![jct_ratio](jct_ratio.png)" in text


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
        prepare(PowerFlowConfig(**ARGS, caps=[0.3]))
    with pytest.raises(ValidationError, match="seeds"):
        PowerFlowConfig(**ARGS, seeds=0)
    prep = prepare(PowerFlowConfig(**ARGS, caps=[0.8]))
    assert prep.caps == [1.0, 0.8] and prep.jobs == 6
    assert prep.power_managers == ["always-on", "idle-timeout"]  # the default: both


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    return lines[0]


def test_cli_unknown_baseline_is_one_error_line():
    result = CliRunner().invoke(
        app, ["experiment", "powerflow", "--workload", "pollux/workload-1", "--cluster", "n16g4",
              "--baselines", "fifo,nope"],
    )  # fmt: skip
    assert "unknown baseline 'nope'" in one_error_line(result)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--caps", "0.9,abc"], "error: --caps: expected numbers such as 1,0.9, got '0.9,abc'"),
        (["--seeds", "0"], "error: --seeds: Input should be greater than or equal to 1"),
        (["--budget-points", "0"], "error: --budget-points: Input should be greater than or equal to 1"),
        (
            ["--caps", "1.5"],
            "error: --caps: SM-clock caps are fractions of the maximum clock in (0, 1], got 1.5",
        ),
    ],
)
def test_cli_bad_values_are_one_error_line(tmp_path, flags, message):
    args = [*CLI, "--data-dir", str(PERFDATA), "--out", str(tmp_path), *flags]
    assert one_error_line(CliRunner().invoke(app, args)) == message


def test_cli_small_run(tmp_path):
    out = tmp_path / "pf"
    args = [*CLI, "--seeds", "1", "--baselines", "fifo", "--budget-points", "2", "--caps", "1.0,0.7"]
    args += ["--workers", "1", "--data-dir", str(PERFDATA), "--out", str(out), "--quiet", "--no-plots"]
    args += ["--power-manager", "always-on"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "vs fifo: mean JCT ratio" in result.output
    assert len(pd.read_csv(out / "results.csv")) == 1
    assert len(pd.read_csv(out / "sweep.csv")) == 2 + 2 + 1
    assert len(pd.read_csv(out / "records.csv")) == 6
    assert not list(out.glob("*.png"))


def test_every_power_manager_runs_its_own_grid_and_budgets_come_from_its_own_baselines(tmp_path):
    """By default the grid runs under always-on and under idle-timeout; each PowerFlow budget is the energy its
    baseline measured under the same manager, and the headline is reported per manager."""
    out = tmp_path / "pf"
    args = [*CLI, "--seeds", "1", "--baselines", "fifo", "--budget-points", "1", "--caps", "1.0"]
    args += ["--workers", "1", "--data-dir", str(PERFDATA), "--out", str(out), "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "power manager always-on" in result.output and "power manager idle-timeout" in result.output
    text = (out / "summary.md").read_text()
    records = pd.read_csv(out / "records.csv")
    energies = {}
    for pm in ("always-on", "idle-timeout"):
        runs = pd.read_csv(out / pm / "runs.csv")
        base = runs[(runs.kind == "baseline") & (runs.policy == "fifo")].energy_kwh.item()
        equal = runs[runs.kind == "equal"]
        np.testing.assert_allclose(equal.budget_kwh, [base], rtol=1e-5)
        assert f"power manager {pm}, vs fifo" in text and f"| {pm} | fifo |" in text
        assert (out / f"jct_ratio_{pm}.png").is_file()
        mine = records[records.power_manager == pm]
        assert len(mine) == len(runs)
        fifo = mine[(mine.kind == "baseline") & (mine.policy == "fifo")]
        assert fifo.energy_kwh.item() == pytest.approx(base)
        energies[pm] = base
    assert energies["idle-timeout"] < energies["always-on"]  # switched-off nodes: a smaller budget
    headline = pd.read_csv(out / "headline.csv")
    assert headline.power_manager.tolist() == ["always-on", "idle-timeout"]
    assert headline.baseline.tolist() == ["fifo", "fifo"]
    np.testing.assert_allclose(
        headline.energy_kwh_baseline, [energies["always-on"], energies["idle-timeout"]]
    )


def test_unknown_power_manager_is_one_error_line(tmp_path):
    args = [*CLI, "--power-manager", "always-on,nope", "--data-dir", str(PERFDATA), "--out", str(tmp_path)]
    assert "nope" in one_error_line(CliRunner().invoke(app, args))


def test_the_budgets_come_from_a_first_round_of_runs():
    """A seed's budgets come from its own baselines: the first round runs every baseline at every cap and
    PowerFlow without a budget; the second (the protocol's next_cells) PowerFlow at each baseline's energy and
    the budget sweep; every run has its own row."""
    from wattsched.experiments.powerflow import OneRun
    from wattsched.experiments.protocol import Outcome

    cfg = PowerFlowConfig(**ARGS, seeds=2, baselines=["fifo"], budget_points=2, caps=[1.0, 0.7])
    experiment = EXPERIMENTS.create("powerflow")
    first = experiment.grid(cfg)
    assert all(isinstance(c.task, OneRun) for c in first)
    assert len(first) == 2 * 2 * (2 + 1)  # managers x seeds x (fifo at two caps, no budget)
    assert {c.task.task.kind for c in first} == {"baseline", "no-budget"}
    outcomes = [Outcome(None, c.task.task.policy, raw=run_task(c.task.setup, c.task.task)) for c in first]
    second = experiment.next_cells(cfg, first, outcomes)
    assert len(second) == 2 * 2 * (1 + 2)  # equal energy against fifo, two budgets
    fifo = {(c.keys["power_manager"], c.keys["seed"]): o.raw for c, o in zip(first, outcomes, strict=True)
            if c.task.task.kind == "baseline" and c.task.task.cap == 1.0}  # fmt: skip
    for c in second:
        assert c.task.task.budget_kwh > 0 and c.task.task.until_s is not None
        if c.task.task.kind == "equal":  # the baseline's energy over the seed's window: at least its own
            assert c.task.task.budget_kwh >= fifo[(c.keys["power_manager"], c.keys["seed"])].energy_kwh - 1e-6
    assert experiment.next_cells(cfg, [*first, *second], [*outcomes, *outcomes[: len(second)]]) == []
