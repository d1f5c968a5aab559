"""`wattsched report`: the self-contained HTML report (experiments/report.py) of real short `simulate` runs made
here (synthetic workload, power managers, a generated hourly price and carbon series) and of the per-run tables
of every experiment (tests/fixtures/compare/). The report holds the comparison table, the recorded assumptions
and every plot the data allows, escapes its text and references nothing on the network; the browser test loads it
in headless Chromium (Debian's `chromium`, installed by .ci/run as root) and checks the DOM, the console and the
screenshot, and skips with the reason when no browser is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wattsched.cli.main import app
from wattsched.experiments.browser import find_chromium, load_page, network_refs
from wattsched.experiments.compare import comparison
from wattsched.experiments.report import build_report, frontier

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from report_screenshot import demo_runs

runner = CliRunner()
EXPERIMENTS = Path(__file__).resolve().parent.parent / "fixtures" / "compare"
TEMPORAL_PLOTS = ("power", "nodes", "gpus-queue", "jct-cdf", "energy-jct")
RUNS = {
    "always-on": [],
    "idle-timeout": ["--power-manager", "idle-timeout"],
    "forecast": ["--power-manager", "forecast"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    return demo_runs(tmp_path_factory.mktemp("report-runs"), jobs=150, runs=RUNS)


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    result = runner.invoke(app, ["report", *map(str, runs), "--out", str(out), "--baseline", str(runs[0])])
    assert result.exit_code == 0, result.output
    assert "report written to" in result.output
    return out


def test_the_report_holds_the_table_every_plot_and_the_assumptions(report, runs):
    text = report.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert 'id="comparison-table"' in text and 'id="component-table"' in text
    for key in TEMPORAL_PLOTS:
        assert f'<figure id="plot-{key}">' in text, key
    assert text.count("<svg") == len(TEMPORAL_PLOTS)
    # the comparison's rows and changes, the baseline marked
    frame = comparison(runs, runs[0])
    for label in frame["run"]:
        assert f'<td class="l">{label}' in text
    assert "(baseline)" in text and "-0.0%" not in text
    # reconstructed policies with their basis, and the recorded assumptions
    assert "reconstructed" in text and "Helios" in text
    for topic in ("cluster", "workload", "model assignment", "energy model", "signal alignment"):
        assert f"<b>{topic}</b>" in text, topic
    assert "generated-price.csv" in text and "Monday 00:00" in text
    assert "price (right axis)" in text and "carbon intensity (right axis)" in text
    assert network_refs(text) == []
    assert "<script" not in text


def test_experiment_outputs_get_their_table():
    """Every experiment's records (tests/fixtures/compare/, written without figures) in one report; an
    experiment's own figures are embedded where it drew them (test_experiment_protocol.py)."""
    dirs = sorted(p for p in EXPERIMENTS.iterdir() if p.name != "hkbu-online-pd-no-philly")
    text = build_report(dirs)
    assert 'id="comparison-table"' in text
    for d in dirs:
        assert f'<td class="l">{d} ' in text, d  # each experiment's rows, labelled by their keys
    assert '<figure id="plot-energy-jct">' in text  # the experiments that record energy and mean JCT
    assert 'id="plot-power-missing"' in text  # no time series in per-run tables: said, not drawn
    assert network_refs(text) == []


def test_text_is_escaped(runs, tmp_path):
    odd = tmp_path / "<b>a&b"
    odd.mkdir()
    for f in runs[0].iterdir():
        (odd / f.name).write_bytes(f.read_bytes())
    text = build_report([odd], title="<script>alert(1)</script>")
    assert "<b>a&b" not in text and "&lt;b&gt;a&amp;b" in text
    assert "<script>" not in text


def test_the_frontier_keeps_the_runs_nothing_beats():
    import numpy as np

    energy = np.array([10.0, 8.0, 9.0, 5.0, 6.0])
    jct = np.array([1.0, 2.0, 3.0, 4.0, 4.5])
    assert list(frontier(energy, jct)) == [0, 1, 3]


def test_a_directory_that_is_no_run_is_one_error_line(tmp_path):
    result = runner.invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "r.html")])
    assert result.exit_code != 0 and "not a run directory" in result.output
    assert not (tmp_path / "r.html").exists()


@pytest.mark.browser
def test_the_report_loads_in_headless_chromium(report, tmp_path):
    if find_chromium() is None:
        pytest.skip("chromium is not installed (as root, .ci/run installs Debian's chromium)")
    load = load_page(report, tmp_path / "report.png")
    assert load.console == [], load.console  # no console errors, no uncaught exceptions
    assert re.search(r'<table id="comparison-table"', load.dom)
    for key in TEMPORAL_PLOTS:
        figure = re.search(rf'<figure id="plot-{key}">.*?</figure>', load.dom, re.S)
        assert figure and "<svg" in figure.group(0), key
    assert network_refs(load.dom) == []
    png = load.screenshot.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert load.seconds - load.baseline_seconds < 5.0
