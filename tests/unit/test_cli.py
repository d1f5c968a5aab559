"""End-to-end CLI behaviour: outputs, determinism, config precedence, and one-line errors for bad input."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wattsched.cli.main import app

runner = CliRunner()
SUMMARY_KEYS = {
    "jobs_submitted",
    "jobs_completed",
    "jobs_unschedulable",
    "jobs_dropped",
    "jobs_invalid_skipped",
    "jct_s",
    "queue_delay_s",
    "makespan_s",
    "gpu_allocation_mean",
    "wall_time_s",
}
GOLDEN = Path(__file__).parent.parent / "golden"


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_simulate_synthetic_writes_run_directory(tmp_path):
    out = tmp_path / "run"
    res = run("simulate", "--jobs", 300, "--queue", "backfill", "--placement", "gpu-packing", "--out", out)
    assert res.exit_code == 0, res.output
    for name in ("config.resolved.yaml", "jobs.csv", "jobs.parquet", "timeseries.csv", "timeseries.parquet"):
        assert (out / name).is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= SUMMARY_KEYS
    assert summary["jobs_submitted"] == summary["jobs_completed"] == 300
    assert set(summary["jct_s"]) == {"mean", "p50", "p95", "p99"}
    assert 0 < summary["gpu_allocation_mean"] <= 1
    assert summary["jct_s"]["p50"] <= summary["jct_s"]["p99"]


def test_same_seed_gives_byte_identical_outputs(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for out, seed in ((a, 5), (b, 5), (c, 6)):
        assert (
            run("simulate", "--jobs", 400, "--placement", "random", "--seed", seed, "--out", out).exit_code
            == 0
        )
    for name in ("jobs.csv", "jobs.parquet", "timeseries.csv", "timeseries.parquet", "config.resolved.yaml"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    sa.pop("wall_time_s"), sb.pop("wall_time_s")  # the only field that measures the machine
    assert sa == sb
    assert (a / "jobs.csv").read_bytes() != (c / "jobs.csv").read_bytes()


def test_config_file_with_flag_overrides(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("queue: sjf\nseed: 3\nsynthetic:\n  num_jobs: 50\n  arrival: bursty\n")
    out = tmp_path / "run"
    assert run("simulate", "--config", cfg, "--seed", 9, "--out", out).exit_code == 0
    resolved = (out / "config.resolved.yaml").read_text()
    assert "queue: sjf" in resolved and "seed: 9" in resolved
    assert "num_jobs: 50" in resolved and "arrival: bursty" in resolved


def test_bad_config_key_names_file_line_and_field(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("queue: fifo\nplacment: best-fit\n")
    res = run("simulate", "--config", cfg)
    assert res.exit_code == 2
    assert f"{cfg}:2: field 'placment'" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--placement", "nope", "unknown placement policy 'nope'; valid placement policies: best-fit"),
        ("--queue", "lifo", "unknown queue policy 'lifo'"),
        ("--cluster", "moon", "unknown cluster 'moon'"),
        ("--workload", "nowhere", "unknown workload 'nowhere'"),
    ],
)
def test_unknown_names_list_the_valid_ones(flag, value, expected):
    res = run("simulate", flag, value, "--jobs", 10)
    assert res.exit_code == 2
    assert expected.split(";")[0] in res.output
    assert "valid" in res.output and "Traceback" not in res.output


def test_bad_row_is_reported_then_skipped_and_counted(tmp_path):
    rows = (GOLDEN / "workload.csv").read_text().splitlines()
    rows[3] = rows[3].replace(",600,", ",-600,")  # line 4: negative duration
    rows[5] = rows[5].replace(",250,", ",1250,")  # line 6: milli outside 1..1000
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(rows) + "\n")
    cluster = GOLDEN / "cluster.yaml"
    res = run("simulate", "--workload", bad, "--cluster", cluster, "--out", tmp_path / "x")
    assert res.exit_code == 2
    assert f"{bad}:4: field 'duration'" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "x" / "summary.json").exists()
    res = run("simulate", "--workload", bad, "--cluster", cluster, "--skip-invalid", "--out", tmp_path / "y")
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "y" / "summary.json").read_text())
    assert summary["jobs_invalid_skipped"] == 2
    assert summary["jobs_submitted"] == len(rows) - 1 - 2


def test_more_gpus_than_the_cluster_is_an_input_error(tmp_path):
    wl = tmp_path / "big.csv"
    wl.write_text("job_id,submit_time,duration,num_gpu\na,0,10,1\nb,5,10,64\n")
    res = run("simulate", "--workload", wl, "--cluster", GOLDEN / "cluster.yaml")
    assert res.exit_code == 2 and f"{wl}:3: field 'num_gpu'" in res.output


def test_packing_mode_on_synthetic_reports_drops(tmp_path):
    res = run("simulate", "--mode", "packing", "--jobs", 500, "--inflate", 1.2, "--out", tmp_path / "p")
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["mode"] == "packing"
    assert (
        summary["jobs_dropped"] > 0
        and summary["jobs_placed"] + summary["jobs_dropped"] == summary["jobs_submitted"]
    )
    assert summary["gpu_allocation_final"] <= 1.0


def test_policies_lists_registered_names():
    res = run("policies")
    assert res.exit_code == 0
    for name in ("fifo", "sjf", "backfill", "random", "first-fit", "best-fit", "dotprod", "gpu-clustering"):
        assert name in res.output


@pytest.mark.slow  # the whole demo, ~7 s: `make test-fast` leaves it out
def test_demo_runs_the_energy_aware_policies_on_built_in_data_only(tmp_path, monkeypatch):
    import pandas as pd
    import yaml

    from wattsched.experiments.browser import network_refs
    from wattsched.experiments.demo import BASELINE, DEMO_RUNS

    empty = tmp_path / "no-data"
    empty.mkdir()
    monkeypatch.setenv("WATTSCHED_DATA", str(empty))  # no dataset anywhere: the demo must not need one
    monkeypatch.setenv("WATTSCHED_CACHE", str(empty))
    out = tmp_path / "demo"
    res = run("demo", "--jobs", 150, "--quiet", "--out", out)
    assert res.exit_code == 0, res.output
    names = [r.name for r in DEMO_RUNS]
    table = pd.read_csv(out / "comparison.csv")
    assert table["run"].tolist() == names
    assert (table["jobs_completed"] == 150).all()
    assert f"changes against {BASELINE}" in res.output
    for name in names:
        cfg = yaml.safe_load((out / name / "config.resolved.yaml").read_text())
        assert cfg["perf"]["performance"] == "generated"
        assert cfg["signals"]["price_csv"].endswith("generated-price.csv")
    # PowerFlow's budget is the baseline's own-window energy; the table compares over the common window
    own_kwh = table.loc[table["run"] == BASELINE, "own_window_kwh"].iloc[0]
    pf_cfg = yaml.safe_load((out / "powerflow" / "config.resolved.yaml").read_text())
    assert pf_cfg["scheduler"]["energy_budget_kwh"] == pytest.approx(own_kwh, rel=1e-6)
    base_end = json.loads((out / BASELINE / "summary.json").read_text())["tail_power"]["end_s"]
    assert pf_cfg["scheduler"]["energy_budget_until_s"] == pytest.approx(
        base_end
    )  # the budget covers the baseline's window
    # the demo says where PowerFlow landed against the budget (within ±2 % here, or why not)
    assert "powerflow used" in " ".join(res.output.split()) and "kWh budget" in " ".join(res.output.split())
    base_kwh = table.loc[table["run"] == BASELINE, "energy_kwh"].iloc[0]
    windows = [json.loads((out / n / "summary.json").read_text())["common_window"] for n in names]
    assert len({(w["start_s"], w["end_s"]) for w in windows}) == 1
    assert table["energy_kwh"].tolist() == pytest.approx([w["energy_kwh"] for w in windows], rel=1e-9)
    assert "window: run directories: energy, cost and carbon over the common window" in " ".join(
        res.output.split()
    )
    # the right-sizing runs switch nodes off; the baseline never does
    assert table.loc[table["run"] == "idle-timeout", "energy_kwh"].iloc[0] < base_kwh
    html = (out / "report.html").read_text()
    assert "GENERATED scaling tables" in html and "GENERATED daily sines" in html
    assert html.count("<svg") >= 5 and not network_refs(html)
    assert "not market data" in " ".join(res.output.split())  # rich wraps at the terminal width
