"""`wattsched whatif`: the command on a tiny history, with the readers replaced (cli/whatif.py)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import wattsched.experiments.whatif as whatif
from tests.whatif_fixtures import fifo_history, hourly_signals, two_partition_nodes
from wattsched.cli.main import app
from wattsched.core.errors import InputError


@pytest.fixture
def readers(monkeypatch):
    """The readers (slurm_history/sacct.py, nodes.py) replaced by the fixture's history and nodes."""
    monkeypatch.setattr(whatif, "read_history", lambda cfg: (fifo_history(12), two_partition_nodes()))


def test_whatif_prints_the_check_and_a_line_per_policy_and_writes_the_report(readers, tmp_path):
    price, carbon = hourly_signals(tmp_path)
    out = tmp_path / "out"
    args = ["whatif", "--sacct", "sacct.txt", "--nodes", "nodes.json", "--out", str(out), "--price-csv", price,
            "--carbon-csv", carbon, "--variants", "right-sizing,power-cap", "--workers", "1", "--quiet"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "14 jobs from sacct.txt" in text and "States: CANCELLED 1, COMPLETED" in text
    assert "2 job(s) never started" in text  # the inputs' notes, printed before the grid
    assert "Replay check on 12 jobs" in text
    for variant in ("baseline:", "right-sizing:", "power-cap:"):
        assert f"- {variant}" in text
    assert "pwr-fgd:" not in text
    assert (out / "inputs" / "jobs.csv").is_file() and (out / "inputs" / "cluster.yaml").is_file()
    html = (out / "report.html").read_text()
    assert ">Replay check</h2>" in html and ">Per partition</h2>" in html and ">Per account</h2>" in html
    assert "start_order_spearman" in html
    assert "report.html" in text


def test_whatif_no_report(readers, tmp_path):
    price, carbon = hourly_signals(tmp_path)
    args = ["whatif", "--sacct", "s", "--nodes", "n", "--out", str(tmp_path / "o"), "--price-csv", price,
            "--carbon-csv", carbon, "--variants", "baseline", "--workers", "1", "--quiet", "--no-report"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "o" / "report.html").exists()
    assert (tmp_path / "o" / "replay_check.csv").is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--variants", "baseline,turbo"], "unknown turbo"),
        (["--group-by", "team"], "--group-by"),
        (["--variants", "co-location"], "needs measured profiles"),
    ],
)
def test_bad_settings_are_one_line_exit_2(readers, tmp_path, extra, message):
    args = ["whatif", "--sacct", "s", "--nodes", "n", "--out", str(tmp_path / "o"), *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_reader_error_is_one_line(monkeypatch, tmp_path):
    def broken(cfg):
        raise InputError("sacct.txt", 7, "Elapsed", "'12:xx' is not a duration")

    monkeypatch.setattr(whatif, "read_history", broken)
    result = CliRunner().invoke(
        app, ["whatif", "--sacct", "sacct.txt", "--nodes", "n", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "sacct.txt:7: field 'Elapsed': '12:xx' is not a duration" in result.output


def test_experiment_command_has_the_whatif_flags():
    result = CliRunner().invoke(app, ["experiment", "whatif", "--help"])
    assert result.exit_code == 0
    assert "--sacct" in result.output and "--idle-timeout-s" in result.output


def test_the_stand_in_help_is_the_commands():
    from wattsched.cli import main
    from wattsched.cli.whatif import WHATIF_HELP

    assert main.WHATIF_HELP == WHATIF_HELP
