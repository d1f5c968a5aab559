"""`wattsched experiment eaco` end to end on a tiny generated trace and the fixture Gavel throughputs: the
protocol's records, its own results.csv, the summary, the plots, what `compare` reads, and its flags' errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from wattsched.cli.main import app

FIXTURE_DATA = Path(__file__).resolve().parent.parent / "fixtures" / "data"


def _trace(path: Path, n: int = 40) -> Path:
    rng = np.random.default_rng(1)
    pd.DataFrame(
        {
            "job_id": [f"j{i}" for i in range(n)],
            "submit_time": np.sort(rng.uniform(0, 4 * 3600, n)).round(1),
            "duration": rng.uniform(1800, 6 * 3600, n).round(1),
            "num_gpu": rng.choice([1, 2, 4, 8], size=n),
            "model_name": rng.choice(["A3C", "Alpha"], size=n),
        }
    ).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eaco")
    trace = _trace(tmp / "jobs.csv")
    out = tmp / "eaco"
    args = ["experiment", "eaco", "--nodes", "28", "--seeds", "2", "--workload", str(trace), "--max-jobs", "0",
            "--workers", "1", "--data-dir", str(FIXTURE_DATA), "--out", str(out), "--quiet"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return out, res.output


def test_experiment_writes_results_summary_and_plots(run):
    out, output = run
    results = pd.read_csv(out / "results.csv")
    assert sorted(results.policy.unique()) == ["eaco", "fifo", "fifo-packed", "gandiva"]
    assert len(results) == 8 and (results.jobs_completed == 40).all()
    assert (results.avg_active_nodes > 0).all() and (results.avg_active_nodes <= 28).all()
    # One common window per cluster size and seed: no run is charged less than its own energy.
    assert (results.energy_kwh >= results.own_window_kwh - 1e-6).all()
    summary = (out / "summary.md").read_text()
    assert "EaCO against each baseline, beside the paper" in summary and "reconstructed" in summary
    assert "common window per cluster size and seed" in summary and "## Targets" in summary
    assert (out / "policies.png").stat().st_size > 0 and (out / "active_nodes.png").stat().st_size > 0
    assert "eaco vs fifo" in output
    assert (out / "records.csv").is_file() and (out / "config.yaml").is_file()


def test_compare_reads_the_records_with_the_tables_metrics_and_labels(run):
    from wattsched.experiments.compare import rows_of

    out, _ = run
    results = pd.read_csv(out / "results.csv").set_index(["policy", "seed"])
    rows = rows_of(out)
    assert len(rows) == 8 and {r["experiment"] for r in rows} == {"eaco"}
    assert {r["policy"] for r in rows} == {"eaco", "fifo", "fifo-packed", "gandiva"}
    sources = {
        "jobs_completed": "jobs_completed", "energy_kwh": "energy_kwh", "own_window_kwh": "own_window_kwh",
        "jct_mean_s": "avg_jct_s", "queue_delay_mean_s": "avg_queue_s", "makespan_s": "makespan_s",
        "gpu_allocation": "gpu_allocation", "restarts": "restarts",
    }  # fmt: skip
    for r in rows:
        seed = int(r["run"].split("seed=")[1])
        assert f"nodes=28 variant={r['policy']} seed={seed}" in r["run"]
        expected = results.loc[(r["policy"], seed)]
        for metric, column in sources.items():
            assert r[metric] == pytest.approx(expected[column], rel=1e-5), (r["run"], metric)
        # Only EaCO is a reconstruction; Gavel's FIFO variants and Gandiva are not.
        assert r["reconstructed"] == (r["policy"] == "eaco")
        assert not r["reconstructed"] or r["basis"].startswith("eaco: ")
    assert "cost_usd" not in rows[0] and "co2_kg" not in rows[0]  # no region: neither is computed


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--nodes", "28,abc"], "--nodes: expected numbers such as 28,64, got '28,abc'"),
        (["--nodes", "30"], "unknown EaCO cluster size '30'"),
        (["--policies", "fifo,sjf"], "unknown policy 'sjf'"),
        (["--policies", "fifo,gandiva"], "--policies must include eaco"),
        (["--noise", "2"], "--noise must be in [0, 1], got 2.0"),
        (["--seeds", "0"], "--seeds must be at least 1, got 0"),
        (["--max-jobs", "-1"], "--max-jobs: Input should be greater than or equal to 0"),
    ],
)
def test_bad_flags_are_one_line_errors(tmp_path, flags, message):
    res = CliRunner().invoke(app, ["experiment", "eaco", *flags, "--out", str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], res.stderr
    assert "Traceback" not in res.output


def test_the_flags_keep_their_names_and_defaults():
    from wattsched.experiments.eaco import DEFAULT_POLICIES, EacoConfig

    res = CliRunner().invoke(app, ["experiment", "eaco", "--help"], terminal_width=200)
    for flag in ("--nodes", "--seeds", "--policies", "--workload", "--max-jobs", "--noise", "--profiles",
                 "--gpu-type", "--columns", "--data-dir", "--out", "--workers", "--backend", "--fresh"):  # fmt: skip
        assert flag in res.output, flag
    cfg = EacoConfig()
    assert (cfg.nodes, cfg.seeds, cfg.workload, cfg.max_jobs, cfg.noise) == (
        [28, 64],
        3,
        "gavel/msr/all",
        500,
        0.05,
    )
    assert tuple(cfg.policies) == DEFAULT_POLICIES


def test_fifo_rows_are_gavels_and_the_old_rows_stay_for_reference(tmp_path):
    from wattsched.experiments.eaco import DEFAULT_POLICIES, EacoConfig, Setup
    from wattsched.experiments.protocol import EXPERIMENTS, run_experiment

    setup = Setup()
    assert setup.config("fifo", 28, 42).scheduler.allocation == "gavel-fifo"
    assert setup.config("fifo-packed", 28, 42).scheduler.allocation == "gavel-fifo-packed"
    assert setup.config("fifo-spread", 28, 42).scheduler.placement == "least-allocated"
    assert "fifo-spread" not in DEFAULT_POLICIES and "fifo-best-fit" not in DEFAULT_POLICIES
    trace = _trace(tmp_path / "jobs.csv", n=30)
    cfg = EacoConfig(nodes=[28], seeds=1, workload=str(trace), max_jobs=0,
                     policies=["eaco", "fifo-packed", "fifo-spread"], data_dir=str(FIXTURE_DATA))  # fmt: skip
    result = run_experiment(EXPERIMENTS.create("eaco"), cfg, tmp_path / "eaco", workers=1, plots=False)
    results = pd.read_csv(tmp_path / "eaco" / "results.csv").set_index("policy")
    assert (results.jobs_completed == 30).all()
    assert results.loc["fifo-spread", "colocations"] == 0
    assert list(result.records["policy"]) == [
        "eaco",
        "fifo-packed",
        "fifo-spread",
    ]  # EaCO, the slowest, first
