"""`wattsched experiment cedla` on the protocol, on a tiny market of its own (no dataset needed): records.csv with
the comparison's metrics and policy labels, its own results.csv, the summary's parts, and its flags' errors."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from wattsched.cli.main import app

runner = CliRunner()
POLICIES = "price-unaware-always-on,price-unaware-drs,price-aware-no-drs,cedla"


def _market(tmp: Path) -> dict[str, Path]:
    """Twelve training jobs on 2 nodes of 4 V100, a Gavel throughput file with the services' models, and a year
    of hourly prices (dear by day, cheap by night) and carbon."""
    jobs = ["job_id,submit_time,duration,num_gpu"] + [f"j{i},{i * 1800},7200,{1 + i % 4}" for i in range(12)]
    (tmp / "jobs.csv").write_text("\n".join(jobs) + "\n")
    (tmp / "c.yaml").write_text(
        "name: small\nnode_groups:\n  - count: 2\n    gpus: 4\n    gpu_model: V100\n    cpu_milli: 32000\n"
        "    memory_mib: 262144\n"
    )
    models = ["ResNet-50 (batch size 128)", "Transformer (batch size 128)", "LM (batch size 80)",
              "ResNet-18 (batch size 256)"]  # fmt: skip
    gavel = tmp / "data" / "gavel-traces"
    gavel.mkdir(parents=True)
    (gavel / "simulation_throughputs.json").write_text(
        json.dumps({"v100": {f"('{m}', 1)": {"null": 1.0e4} for m in models}})
    )
    price, carbon = ["time,price_usd_per_mwh"], ["time,carbon_g_per_kwh"]
    for h in range(24 * 365):
        t = (datetime(2023, 1, 1) + timedelta(hours=h)).strftime("%Y-%m-%dT%H:00:00Z")
        day = 8 <= h % 24 < 20
        price.append(f"{t},{90 if day else 30}")
        carbon.append(f"{t},{400 if day else 250}")
    (tmp / "market.csv").write_text("\n".join(price) + "\n")
    (tmp / "carbon.csv").write_text("\n".join(carbon) + "\n")
    return {"jobs": tmp / "jobs.csv", "cluster": tmp / "c.yaml", "data": tmp / "data", "price": tmp / "market.csv",
            "carbon": tmp / "carbon.csv"}  # fmt: skip


def _args(inputs: dict[str, Path]) -> list[str]:
    return ["experiment", "cedla", "--price-csv", str(inputs["price"]), "--carbon-csv", str(inputs["carbon"]),
            "--workload", str(inputs["jobs"]), "--cluster", str(inputs["cluster"]), "--data-dir",
            str(inputs["data"]), "--workers", "1", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cedla")
    inputs = _market(tmp)
    out = tmp / "out"
    res = runner.invoke(app, [*_args(inputs), "--policies", POLICIES, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out, res.output


def test_the_experiment_writes_its_results_the_records_and_the_summary(run):
    out, output = run
    results = pd.read_csv(out / "results.csv")
    assert list(results["policy"]) == POLICIES.split(",")  # the order of the policy table, whatever ran first
    assert set(results["region"]) == {"own:market.csv"}
    assert list(results.columns[:4]) == ["policy", "region", "cost_usd", "energy_kwh"]
    assert (results["cost_usd"] > 0).all() and (results["co2_kg"] > 0).all()
    # One common window per region: no run is charged less than its own energy, and the price per kWh follows.
    assert (results["energy_kwh"] >= results["own_window_kwh"] - 1e-6).all()
    assert np.allclose(results["usd_per_kwh"], results["cost_usd"] / results["energy_kwh"], rtol=1e-5)
    summary = (out / "summary.md").read_text()
    for part in ("# cedla", "**reconstructed**", "market.csv", "## Cost against FIFO always-on",
                 "## Where the saving comes from", "## Target", "common window per region"):  # fmt: skip
        assert part in summary, part
    assert "own:market.csv" in output and "against FIFO always-on" in output  # the headline
    for name in ("records.csv", "config.yaml", "cost.png", "price_vs_power.png", "nodes_on.png"):
        assert (out / name).stat().st_size > 0, name


def test_compare_reads_the_records_with_the_tables_metrics_and_labels(run):
    from wattsched.experiments.compare import rows_of

    out, _ = run
    results = pd.read_csv(out / "results.csv").set_index("policy")
    rows = rows_of(out)
    assert sorted(r["policy"] for r in rows) == sorted(POLICIES.split(","))
    sources = {
        "energy_kwh": "energy_kwh", "own_window_kwh": "own_window_kwh", "cost_usd": "cost_usd", "co2_kg": "co2_kg",
        "jct_mean_s": "mean_jct_s", "gpu_allocation": "gpu_allocation", "deadline_misses": "deadline_misses",
        "slo_violation_hours": "slo_violation_hours",
    }  # fmt: skip
    for r in rows:
        assert r["experiment"] == "cedla" and r["run"].endswith(
            f"variant={r['policy']} region=own:market.csv"
        )
        for metric, column in sources.items():
            assert r[metric] == pytest.approx(results.loc[r["policy"], column], rel=1e-5), (r["run"], metric)
        # The planner is a reconstruction (so is the forecast DRS, not run here); FIFO with idle-timeout is not.
        assert r["reconstructed"] == r["policy"].startswith(("price-aware", "cedla")), r["run"]
    assert "jobs_completed" not in rows[0]  # not in the experiment's table before either


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--policies", "cedla"], "--policies must include price-unaware-always-on"),
        (["--policies", "price-unaware-always-on,fifo"], "unknown policy 'fifo'"),
        (["--deadline-slack", "0.5"], "--deadline-slack must be at least 1, got 0.5"),
        (["--signal-fill", "nearest"], "--signal-fill: Input should be 'hold' or 'interpolate'"),
        (["--max-jobs", "-1"], "--max-jobs: Input should be greater than or equal to 0"),
        (["--region", "XX"], "unknown CE-DLA experiment region 'XX'"),
    ],
)
def test_bad_flags_are_one_line_errors(tmp_path, flags, message):
    res = runner.invoke(app, ["experiment", "cedla", *flags, "--out", str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], res.stderr
    assert "Traceback" not in res.output


def test_the_flags_keep_their_names_and_defaults():
    from wattsched.experiments.cedla import POLICIES as TABLE
    from wattsched.experiments.cedla import CedlaConfig

    res = runner.invoke(app, ["experiment", "cedla", "--help"], terminal_width=200)
    for flag in ("--region", "--year", "--policies", "--workload", "--cluster", "--deadline-slack", "--services",
                 "--max-jobs", "--profiles", "--columns", "--price-csv", "--carbon-csv", "--signal-tz",
                 "--signal-fill", "--signal-max-gap-hours", "--data-dir", "--out", "--workers"):  # fmt: skip
        assert flag in res.output, flag
    cfg = CedlaConfig()
    assert (cfg.region, cfg.year, cfg.workload, cfg.cluster, cfg.deadline_slack, cfg.services, cfg.max_jobs) == (
        None, 2023, "philly", "philly", 3.0, "default", None
    )  # fmt: skip
    assert cfg.policies == list(TABLE) and (cfg.signal_tz, cfg.signal_max_gap_hours) == ("UTC", 6)
