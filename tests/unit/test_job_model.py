"""One job model per comparison (experiments/jobmodel.py): the settings runs may differ in are their policies;
`compare` and `report` warn about any other difference, the demo and the experiments refuse it; `compare
--baseline` takes a short label; the table marks EaCO as reconstructed and defines its columns."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.unit.test_compare import simulate as compare_run
from wattsched.cli.main import app
from wattsched.core.errors import WattschedError
from wattsched.experiments.compare import METRICS, comparison, reconstruction_bases
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.jobmodel import (
    POLICY_SETTINGS,
    differences,
    require_one_job_model,
    resolved_job_model,
    run_job_model,
)

runner = CliRunner()


def simulate(out: Path, *args) -> Path:
    """test_compare's short real run, with 60 jobs (the last --jobs given counts)."""
    return compare_run(out, "--jobs", "60", *args)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("jobmodel")
    return {
        "fifo": simulate(root / "fifo"),
        "idle": simulate(root / "idle", "--power-manager", "idle-timeout"),
        "eaco-sharing": simulate(root / "eaco-sharing", "--sharing-model", "eaco", "--seed", "4"),
    }


# --- the classification -----------------------------------------------------------------------------------
def test_policies_may_differ_and_nothing_else_may():
    base = SimulationConfig()
    policies = {
        "fifo": base,
        "sjf-first-fit": base.model_copy(update={"queue": "sjf", "placement": "first-fit"}),
        "idle": base.model_copy(update={"power_manager": "idle-timeout"}),
        "capped": SimulationConfig(power_model="dvfs", gpu_sm_clock=0.7),
        "capped-default": SimulationConfig(power_model="dvfs"),
        "budget": base.model_copy(update={"energy_budget_kwh": 10.0, "round_s": 60.0}),
        "timeout": SimulationConfig(power_states={"idle_timeout_s": 60.0}),
        "elsewhere": base.model_copy(update={"data_dir": "/somewhere", "check_invariants": True}),
    }
    plain = {k: v for k, v in policies.items() if not k.startswith("capped")}
    require_one_job_model(plain, "test")  # no error
    require_one_job_model({k: v for k, v in policies.items() if k.startswith("capped")}, "test")
    with pytest.raises(WattschedError) as err:
        require_one_job_model(policies, "the test comparison")
    message = str(err.value)
    assert message.startswith("the test comparison: its runs must share one job model")
    assert "power_model [power model]: linear" in message and "dvfs (capped, capped-default)" in message
    assert "\n" not in message
    assert {"queue", "allocation", "power_manager", "gpu_sm_clock", "governor"} <= POLICY_SETTINGS


@pytest.mark.parametrize(
    ("change", "setting"),
    [
        ({"sharing_model": "eaco"}, "sharing_model"),
        ({"seed": 1}, "seed"),
        ({"workload": "other.csv"}, "workload"),
        ({"cluster": "n8g8"}, "cluster"),
        ({"synthetic": {"num_jobs": 10}}, "synthetic.num_jobs"),
        ({"power_model": "binary"}, "power_model"),
        ({"region": "DE-LU"}, "region"),
        ({"power_states": {"boot_time_s": 10.0}}, "power_states.boot_time_s"),
        ({"deadline_slack": 2.0}, "deadline_slack"),
        ({"restart_model": "fixed"}, "restart_model"),
    ],
)
def test_every_job_model_setting_is_named_with_its_values(change, setting):
    a = SimulationConfig().model_dump(mode="json")
    b = SimulationConfig(**change).model_dump(mode="json")
    diffs = differences({"a": resolved_job_model(a), "b": resolved_job_model(b)})
    assert [d.setting for d in diffs] == [setting]
    assert diffs[0].values["a"] != diffs[0].values["b"]


def test_auto_performance_is_compared_as_it_resolves():
    # tables for an allocation policy, trace durations for queue + placement: two job models
    auto = {"fifo": SimulationConfig(), "tiresias": SimulationConfig(allocation="tiresias")}
    with pytest.raises(
        WattschedError, match=r"performance \[performance model\]: trace durations \(fifo\) vs"
    ):
        require_one_job_model(auto, "test")
    both = {k: v.model_copy(update={"performance": "tables"}) for k, v in auto.items()}
    require_one_job_model(both, "test")


# --- compare and report warn -------------------------------------------------------------------------------
def test_compare_warns_naming_each_differing_setting(runs):
    result = runner.invoke(app, ["compare", str(runs["fifo"]), str(runs["eaco-sharing"])])
    assert result.exit_code == 0, result.output
    warning = result.stderr.strip()
    assert warning.startswith("warning: the runs differ in more than their policies")
    assert "sharing_model [performance model]: slicing (fifo) vs eaco (eaco-sharing)" in warning
    assert "seed [seed]: 3 (fifo) vs 4 (eaco-sharing)" in warning
    assert "NOT LIKE FOR LIKE" in result.stdout


def test_compare_of_runs_that_differ_only_in_policies_is_silent(runs):
    result = runner.invoke(app, ["compare", str(runs["fifo"]), str(runs["idle"])])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr and "NOT LIKE FOR LIKE" not in result.stdout


def test_compare_warns_when_workload_or_cluster_differ(tmp_path, runs):
    other = simulate(tmp_path / "other", "--gpu-type", "V100", "--jobs", "40")
    result = runner.invoke(app, ["compare", str(runs["fifo"]), str(other)])
    assert result.exit_code == 0, result.output
    warning = " ".join(result.stderr.split())
    assert "gpu_type [cluster]: unset (fifo) vs V100 (other)" in warning
    assert "synthetic.num_jobs [workload]: 60 (fifo) vs 40 (other)" in warning


JOBS_CSV = "job_id,submit_time,duration,num_gpu\n" + "".join(
    f"j{i},{60 * i},{600 + 10 * i},1\n" for i in range(12)
)


def _csv_run(folder: Path, out: Path, rows: int, *args) -> Path:
    """`simulate --workload jobs.csv` run from `folder` (the working directory), with the first `rows` jobs of
    JOBS_CSV in its jobs.csv."""
    (folder / "jobs.csv").write_text("".join(JOBS_CSV.splitlines(keepends=True)[: rows + 1]))
    result = runner.invoke(app, ["simulate", "--quiet", "--workload", "jobs.csv", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_compare_sees_two_workload_files_under_one_relative_name(tmp_path, monkeypatch):
    """Both runs record `workload: jobs.csv`, but the files differ: the job model compares the contents."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "a")
    first = _csv_run(tmp_path / "a", tmp_path / "ra", 12)
    monkeypatch.chdir(tmp_path / "b")
    second = _csv_run(tmp_path / "b", tmp_path / "rb", 7)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["compare", str(first), str(second)])
    assert result.exit_code == 0, result.output
    warning = " ".join(result.stderr.split())
    assert "workload [workload]: a file with sha256" in warning


def test_one_workload_file_named_two_ways_is_one_workload(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    first = _csv_run(tmp_path / "a", tmp_path / "r1", 12)
    result = runner.invoke(
        app,
        [
            "simulate",
            "--quiet",
            "--workload",
            str(tmp_path / "a" / "jobs.csv"),
            "--out",
            str(tmp_path / "r2"),
        ],
    )
    assert result.exit_code == 0, result.output
    compared = runner.invoke(app, ["compare", str(first), str(tmp_path / "r2")])
    assert compared.exit_code == 0, compared.output
    assert "warning" not in compared.stderr and "NOT LIKE FOR LIKE" not in compared.stdout


def test_synthetic_settings_are_not_compared_for_a_trace_workload():
    a = SimulationConfig(workload="philly")
    b = a.model_copy(update={"synthetic": a.workload.synthetic.model_copy(update={"num_jobs": 5})})
    require_one_job_model({"a": a, "b": b}, "test")
    c = SimulationConfig(workload="synthetic")
    d = c.model_copy(update={"synthetic": c.workload.synthetic.model_copy(update={"num_jobs": 5})})
    with pytest.raises(WattschedError, match=r"synthetic\.num_jobs"):
        require_one_job_model({"c": c, "d": d}, "test")


def test_report_warns_in_the_page_and_on_stderr(runs, tmp_path):
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(runs["fifo"]), str(runs["eaco-sharing"]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "sharing_model" in result.stderr and result.stderr.startswith("warning: ")
    html = out.read_text()
    assert 'id="job-model-warning"' in html and "Not like for like" in html


# --- compare --baseline ------------------------------------------------------------------------------------
def test_baseline_by_short_label(runs):
    frame = comparison([runs["fifo"], runs["idle"]], "idle")
    assert frame.loc[frame["baseline"], "run"].tolist() == [str(runs["idle"])]
    result = runner.invoke(app, ["compare", str(runs["fifo"]), str(runs["idle"]), "--baseline", "idle"])
    assert result.exit_code == 0, result.output
    assert f"changes against {runs['idle']}" in " ".join(result.stdout.split())


def test_a_baseline_matching_no_run_lists_the_labels(runs):
    result = runner.invoke(app, ["compare", str(runs["fifo"]), str(runs["idle"]), "--baseline", "nosuch"])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0] == (
        "error: --baseline nosuch: matches none of the runs compared and is not a run directory; "
        "labels: fifo, idle"
    )


def test_an_ambiguous_short_baseline_names_the_matches(runs):
    # both runs are fifo+best-fit
    with pytest.raises(WattschedError, match=r"--baseline fifo\+best-fit matches 2 runs \('fifo', 'idle'\)"):
        comparison([runs["fifo"], runs["idle"]], "fifo+best-fit")


# --- the table's definitions ---------------------------------------------------------------------------------
def test_eaco_is_marked_reconstructed_with_its_parameters():
    (basis,) = reconstruction_bases({"allocation": "eaco"})
    assert basis.startswith("eaco: EaCO") and "alpha 0.5" in basis and "epoch 1440 s" in basis


def test_the_slo_column_says_what_it_counts():
    (metric,) = [m for m in METRICS if m.key == "slo_violation_hours"]
    assert metric.header == "late svc-h" and "service-hours" in metric.definition


# --- the demo ------------------------------------------------------------------------------------------------
def test_the_demo_runs_record_one_job_model(tmp_path, monkeypatch):
    from wattsched.experiments.demo import DEMO_RUNS, run_demo

    monkeypatch.setenv("WATTSCHED_DATA", str(tmp_path / "none"))
    result = run_demo(tmp_path / "demo", num_jobs=60, workers=1)
    models = {r.name: run_job_model(tmp_path / "demo" / r.name) for r in DEMO_RUNS}
    assert all(m is not None for m in models.values())
    first = next(iter(models.values()))
    for name, model in models.items():
        assert model == first, name
    assert first["sharing_model"] == "eaco" and first["performance_model.jobs_with_table"] == 60
    assert not differences(models)
    assert result.comparison.loc[result.comparison["run"] == "eaco", "reconstructed"].item()
