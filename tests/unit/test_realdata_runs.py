"""The issue's acceptance commands on the real traces (skipped when WATTSCHED_DATA is not set)."""

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
    """Issue 9: `simulate --allocation eaco` on a Gavel trace (model names in the trace), and with prediction
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
