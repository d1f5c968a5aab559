"""The reproduction commands on the real traces (skipped when WATTSCHED_DATA is not set)."""

import json

import pytest
from typer.testing import CliRunner

from tests.conftest import require_real_file
from wattsched.cli.main import app

pytestmark = pytest.mark.realdata
runner = CliRunner()
PHILLY_ARGS = "simulate --workload philly --cluster philly --queue fifo --placement best-fit --quiet".split()  # noqa: SIM905
ALIBABA_ARGS = (  # noqa: SIM905
    "simulate --workload alibaba-v2023/default --cluster alibaba-v2023 --mode packing"
    " --inflate 1.3 --placement best-fit --seed 42 --quiet"
).split()


def test_philly_replay_fifo_best_fit(tmp_path):
    require_real_file("philly-pollux", "philly.csv")
    out = tmp_path / "p"
    res = runner.invoke(
        app,
        [*PHILLY_ARGS, "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["jobs_submitted"] == 82_247
    assert s["jobs_completed"] + s["jobs_unschedulable"] == 82_247
    assert s["jct_s"]["p50"] >= 1144.0  # JCT >= duration; the trace's median duration is 1,144 s
    assert 0.2 < s["gpu_allocation_mean"] < 0.5  # 374 GPUs busy on average over 1,280 (plus the drain tail)


def test_alibaba_default_packing_best_fit(tmp_path):
    require_real_file("alibaba-gpu-v2023", "csv/openb_pod_list_default.csv")
    out = tmp_path / "a"
    res = runner.invoke(
        app,
        [*ALIBABA_ARGS, "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    # Inflation stops just below 1.3 x 6,212,000 milli-GPU of requests.
    assert s["arrived_gpu_ratio_final"] > 1.29 and s["arrived_gpu_ratio_final"] <= 1.3
    assert s["jobs_placed"] + s["jobs_dropped"] == s["jobs_submitted"] > 8152
    # Published BestFit mean at 130 % arrived is 93.08 % (FGD repo expected results); one seed varies.
    assert 0.90 < s["gpu_allocation_final"] < 0.96


def test_eaco_on_the_gavel_msr_traces_without_noise_never_undoes(tmp_path):
    """EaCO: `simulate --allocation eaco` on a Gavel trace (model names in the trace), and with prediction
    noise 0 every observed epoch confirms its prediction."""
    require_real_file("gavel-traces", "simulation_throughputs.json")
    out = tmp_path / "e"
    args = ["simulate", "--workload", "gavel/msr/all", "--max-jobs", "200", "--cluster", "eaco-28",
            "--allocation", "eaco", "--sharing-model", "eaco", "--power-manager", "idle-timeout", "--quiet",
            "--out", str(out)]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    params = s["policies"]["allocation"]["parameters"]
    assert s["jobs_completed"] == 200
    assert params["colocations"] > 0 and params["observations"] > 0 and params["undone"] == 0
    assert s["performance_model"]["sharing_model"] == "eaco"


def test_eaco_runs_on_a_trace_without_model_names_through_the_assignment_rule(tmp_path):
    require_real_file("philly-pollux", "philly.csv")
    require_real_file("gavel-traces", "simulation_throughputs.json")
    out = tmp_path / "p"
    args = ["simulate", "--workload", "philly/vc-103959", "--max-jobs", "150", "--cluster", "eaco-28",
            "--allocation", "eaco", "--quiet", "--out", str(out)]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["jobs_completed"] == 150
    assert s["performance_model"]["model_assignment"]["jobs_assigned"] == 150


def test_cedla_experiment_and_simulate_on_philly(tmp_path):
    """CE-DLA: `experiment cedla` writes results, summary and plots (first 400 training jobs, one region), and
    `simulate --allocation cedla --region DE-LU` runs; a region or year without data lists those that exist."""
    require_real_file("philly-pollux", "philly.csv")
    out = tmp_path / "ce"
    res = runner.invoke(app, ["experiment", "cedla", "--region", "US-CAL-CISO", "--year", "2023", "--max-jobs",
                              "400", "--workers", "1", "--out", str(out), "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    import pandas as pd

    df = pd.read_csv(out / "results.csv")
    assert set(df["policy"]) == {
        "price-unaware-always-on",
        "price-unaware-drs",
        "price-unaware-drs-forecast",
        "price-aware-no-drs",
        "cedla",
    }
    for col in ("region", "cost_usd", "energy_kwh", "co2_kg", "deadline_misses", "slo_violation_hours",
                "mean_jct_s"):  # fmt: skip
        assert col in df.columns
    assert (df["cost_usd"] > 0).all() and (df["region"] == "US-CAL-CISO").all()
    base = df.set_index("policy")
    # right-sizing must lower the energy of the same FIFO schedule
    assert base.loc["price-unaware-drs", "energy_kwh"] < base.loc["price-unaware-always-on", "energy_kwh"]
    for name in ("summary.md", "cost.png", "price_vs_power.png", "nodes_on.png"):
        assert (out / name).stat().st_size > 0
    assert "Where the saving comes from" in (out / "summary.md").read_text()
    sim = tmp_path / "c"
    args = ["simulate", "--workload", "philly", "--cluster", "philly", "--allocation", "cedla", "--region",
            "DE-LU", "--year", "2023", "--max-jobs", "300", "--quiet", "--out", str(sim)]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads((sim / "summary.json").read_text())["policies"]["allocation"]["name"] == "cedla"
    bad_year = ["simulate", "--workload", "philly", "--cluster", "philly", "--allocation", "cedla", "--region",
                "DE-LU", "--year", "2010", "--quiet", "--out", str(tmp_path / "x")]  # fmt: skip
    res = runner.invoke(app, bad_year)
    assert res.exit_code != 0 and "2023" in res.output and "2010" in res.output
    res = runner.invoke(
        app, ["experiment", "cedla", "--region", "XX", "--out", str(tmp_path / "y"), "--quiet"]
    )
    assert res.exit_code != 0 and "US-CAL-CISO" in res.output


def test_cedla_experiment_on_your_own_market_and_the_gap_rules(tmp_path):
    """CE-DLA: `--price-csv` replaces the region (results name the file); a region year with a long gap stops
    with the gap and the flag that fills it, and runs with `--signal-fill`."""
    require_real_file("philly-pollux", "philly.csv")
    from datetime import datetime, timedelta

    rows = ["time,price_usd_per_mwh"]
    for h in range(24 * 365):
        t = datetime(2023, 1, 1) + timedelta(hours=h)
        rows.append(t.strftime("%Y-%m-%dT%H:00:00Z") + ("," + ("90" if 8 <= t.hour < 20 else "30")))
    (tmp_path / "market.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "own"
    res = runner.invoke(app, ["experiment", "cedla", "--price-csv", str(tmp_path / "market.csv"), "--max-jobs",
                              "150", "--policies", "price-unaware-always-on,cedla", "--workers", "1", "--out",
                              str(out), "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    import pandas as pd

    df = pd.read_csv(out / "results.csv")
    assert set(df["region"]) == {"own:market.csv"} and len(df) == 2
    assert "market.csv" in (out / "summary.md").read_text()
    gap = ["experiment", "cedla", "--region", "US-MIDA-PJM", "--max-jobs", "50", "--policies",
           "price-unaware-always-on", "--workers", "1", "--quiet"]  # fmt: skip
    res = runner.invoke(app, [*gap, "--out", str(tmp_path / "g1")])
    assert res.exit_code != 0 and "--signal-fill" in res.output and "US-MIDA-PJM" in res.output
    res = runner.invoke(app, [*gap, "--signal-fill", "interpolate", "--out", str(tmp_path / "g2")])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("policy", ["hkbu-dvfs", "hkbu-dag", "hkbu-online-pd"])
def test_hkbu_policies_on_the_tiresias_480_job_trace(tmp_path, policy):
    """HKBU: each HKBU policy runs in `simulate` on a Tiresias trace with deadlines from a slack factor."""
    require_real_file("tiresias-traces", "480_job_trace.csv")
    out = tmp_path / "t"
    args = ["simulate", "--workload", "tiresias/480_job_trace", "--cluster", "n32g4", "--allocation", policy,
            "--deadline-slack", "3", "--quiet", "--out", str(out)]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["jobs_submitted"] == 480 and s["deadline_jobs"] == 480
    params = s["policies"]["allocation"]["parameters"]
    if (
        policy == "hkbu-online-pd"
    ):  # admission control: every job is admitted or rejected, admitted ones finish
        assert params["admitted"] + params["rejected"] == 480
        assert s["jobs_completed"] == params["admitted"] > 0
    else:
        assert s["jobs_completed"] == 480
