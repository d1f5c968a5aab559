"""`wattsched experiment eaco` end to end on a tiny generated trace and the fixture Gavel throughputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
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


def test_experiment_writes_results_summary_and_plots(tmp_path):
    trace = _trace(tmp_path / "jobs.csv")
    out = tmp_path / "eaco"
    args = ["experiment", "eaco", "--nodes", "28", "--seeds", "2", "--workload", str(trace), "--max-jobs", "0",
            "--workers", "1", "--data-dir", str(FIXTURE_DATA), "--out", str(out), "--quiet"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    results = pd.read_csv(out / "results.csv")
    assert sorted(results.policy.unique()) == ["eaco", "fifo", "fifo-packed", "gandiva"]
    assert len(results) == 8 and (results.jobs_completed == 40).all()
    assert (results.avg_active_nodes > 0).all() and (results.avg_active_nodes <= 28).all()
    summary = (out / "summary.md").read_text()
    assert "EaCO against each baseline, beside the paper" in summary and "reconstructed" in summary
    assert (out / "policies.png").stat().st_size > 0 and (out / "active_nodes.png").stat().st_size > 0
    assert "eaco vs fifo" in res.output


def test_experiment_rejects_unknown_sizes_and_policies(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["experiment", "eaco", "--nodes", "30", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "unknown EaCO cluster size '30'" in res.output
    res = runner.invoke(app, ["experiment", "eaco", "--policies", "fifo,sjf", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "unknown policy 'sjf'" in res.output


def test_fifo_rows_are_gavels_and_the_old_rows_stay_for_reference(tmp_path):
    from wattsched.experiments.eaco import DEFAULT_POLICIES, Setup

    setup = Setup()
    assert setup.config("fifo", 28, 42).scheduler.allocation == "gavel-fifo"
    assert setup.config("fifo-packed", 28, 42).scheduler.allocation == "gavel-fifo-packed"
    assert setup.config("fifo-spread", 28, 42).scheduler.placement == "least-allocated"
    assert "fifo-spread" not in DEFAULT_POLICIES and "fifo-best-fit" not in DEFAULT_POLICIES
    trace = _trace(tmp_path / "jobs.csv", n=30)
    out = tmp_path / "eaco"
    args = ["experiment", "eaco", "--nodes", "28", "--seeds", "1", "--workload", str(trace), "--max-jobs", "0",
            "--policies", "eaco,fifo-packed,fifo-spread", "--workers", "1", "--data-dir", str(FIXTURE_DATA),
            "--out", str(out), "--quiet"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    results = pd.read_csv(out / "results.csv").set_index("policy")
    assert (results.jobs_completed == 30).all()
    assert results.loc["fifo-spread", "colocations"] == 0
