"""The what-if on real Slurm output: the history our own test Slurm (22.05.8 with slurmdbd) recorded of a scripted
workload, committed under tests/fixtures/slurm_history/real/ (its README says how). Both sacct formats import to
the submitted jobs, and `wattsched whatif` replays them within the bands of tests/whatif_fixtures.py. The same
checks run on a fresh capture in tests/live/test_slurm_accounting.py (marker `slurm`)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.whatif_fixtures import check_import_matches, check_replay, hourly_signals
from wattsched.cli.main import app
from wattsched.workloads.slurm_history.nodes import read_slurm_nodes
from wattsched.workloads.slurm_history.sacct import read_sacct

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "slurm_history" / "real"
EXPECTED = json.loads((REAL / "workload.json").read_text())["expected"]


@pytest.mark.parametrize("name", ["sacct.psv", "sacct-duplicates.psv", "sacct.json"])
def test_each_format_imports_the_submitted_jobs(name):
    history = read_sacct(REAL / name)
    check_import_matches(history, EXPECTED)
    assert history.state_counts == {"COMPLETED": 9, "FAILED": 1, "CANCELLED": 2, "TIMEOUT": 1}
    never = history.recorded[history.recorded["start_s"].isna()]
    assert list(never["job_id"]) == [i for i, r in EXPECTED.items() if r["name"] == "cancel-pending"]


def test_both_formats_agree_on_every_job():
    columns = ["job_id", "state", "partition", "num_gpu", "submit_s", "start_s", "end_s", "elapsed_s"]
    text = read_sacct(REAL / "sacct.psv").recorded[columns].sort_values("job_id", ignore_index=True)
    as_json = read_sacct(REAL / "sacct.json").recorded[columns].sort_values("job_id", ignore_index=True)
    pd.testing.assert_frame_equal(text, as_json, check_dtype=False)


def test_nodes_are_the_testbeds():
    nodes = read_slurm_nodes(REAL / "sinfo.json")
    assert sorted(nodes.nodes["name"]) == ["gpu1", "gpu2", "gpu3"]
    assert set(nodes.nodes["gpu_model"]) == {"A100"} and set(nodes.nodes["gpus"]) == {4}
    assert sorted(nodes.partitions["long"]) == ["gpu3"]


@pytest.mark.parametrize("name", ["sacct.psv", "sacct.json"])
def test_whatif_replays_the_real_history_within_the_bands(tmp_path, name):
    out = tmp_path / "whatif"
    price, carbon = hourly_signals(tmp_path, start="2026-11-26T00:00:00Z", hours=48)  # no dataset needed
    args = ["whatif", "--sacct", str(REAL / name), "--nodes", str(REAL / "sinfo.json"), "--out", str(out),
            "--price-csv", price, "--carbon-csv", carbon]  # fmt: skip
    result = CliRunner().invoke(
        app, [*args, "--variants", "baseline,right-sizing", "--workers", "1", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert "Replay check on 12 jobs" in result.output
    figures = check_replay(out)
    assert figures["jobs_compared"] == 12  # 13 jobs, the one cancelled while pending never ran
    assert (out / "report.html").stat().st_size > 10_000
    assert "Replay check" in (out / "report.html").read_text()
