"""Runs on measured profiles (`--profiles`): jobs the profiles cover run and draw as measured alone, share a GPU
under the measured sharing model, and every job records which source its speed and power came from."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.conftest import require_real_file
from wattsched.cli.main import app
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import run_simulation

FIXTURES = Path(__file__).parent.parent / "fixtures" / "profiles"
H200_IDLE, H200_MAX = 78.1, 700.0  # catalogue: measured bare idle, board limit
CLUSTER = """name: one-h200
node_groups:
  - count: 1
    gpus: 2
    gpu_model: H200
    cpu_milli: 64000
    memory_mib: 262144
"""


def _run(tmp_path: Path, jobs: str, **extra):
    (tmp_path / "jobs.csv").write_text(jobs)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    cfg = SimulationConfig(
        workload=str(tmp_path / "jobs.csv"), cluster=str(tmp_path / "cluster.yaml"), queue="fifo",
        placement="best-fit", profiles=str(FIXTURES / "pair.csv"), **extra,
    )  # fmt: skip
    return run_simulation(cfg, out_dir=tmp_path / "run")


def test_job_alone_runs_and_draws_as_measured(tmp_path):
    res = _run(tmp_path, "job_id,submit_time,duration,num_gpu,model_name,batch_size\na,0,1000,1,alpha,32\n")
    jobs = res.jobs
    assert jobs.loc[0, "jct_s"] == pytest.approx(1000.0)
    assert jobs.loc[0, "perf_source"] == "measured:pair.csv:2,6"
    assert jobs.loc[0, "work"] == pytest.approx(1000 * 101.0)  # trace duration x measured it/s
    # The busy GPU draws the measured 490 W, not P_idle + (P_max - P_idle) x utilisation (669 W).
    gpu_active_kwh = res.summary["energy_by_component_kwh"]["gpu_active"]
    assert gpu_active_kwh * 3.6e6 == pytest.approx(490.0 * 1000.0, rel=1e-9)
    assert res.summary["performance_model"]["jobs_by_perf_source"] == {"measured": 1}


def test_two_jobs_share_a_gpu_under_the_measured_model(tmp_path):
    res = _run(
        tmp_path,
        "job_id,submit_time,duration,num_gpu,gpu_milli,model_name,batch_size\n"
        "a,0,1000,1,500,alpha,32\nb,0,1000,1,500,beta,64\nc,0,500,1,1000,resnet50,0\n",
    )
    assert res.summary["performance_model"]["sharing_model"] == "measured"
    jobs = res.jobs.set_index("job_id")
    assert jobs.loc["a", "placement"] == jobs.loc["b", "placement"]
    o, lam, held = 0.125, 0.296, 150.0  # shipped fit; the fixture's held draw (pair-device.json)
    sa, sb = (1 - o) / 2 / 0.95, (1 - o) / 2 / 0.96
    t1 = 1000 / sa
    end_b = t1 + (1000 - sb * t1)  # beta alone at full speed after alpha leaves
    assert jobs.loc["a", "jct_s"] == pytest.approx(t1)
    assert jobs.loc["b", "jct_s"] == pytest.approx(end_b)
    pair_w = held + sa * 340 + lam * o * 340 / 0.95 / 2 + sb * 450 + lam * o * 450 / 0.96 / 2
    resnet_w = H200_IDLE + 0.9 * (H200_MAX - H200_IDLE)  # catalog utilisation: the current model answers
    expected_j = pair_w * t1 + 600 * (end_b - t1) + resnet_w * 500  # busy GPUs' draw
    active = res.summary["energy_by_component_kwh"]["gpu_active"] * 3.6e6
    assert active == pytest.approx(expected_j, rel=1e-6)
    assert jobs.loc["c", "perf_source"] == "trace"
    saved = pd.read_csv(tmp_path / "run" / "jobs.csv")
    assert set(saved["perf_source"].str.split(":").str[0]) == {"measured", "trace"}


def test_slicing_can_still_be_chosen_and_is_recorded(tmp_path):
    res = _run(
        tmp_path,
        "job_id,submit_time,duration,num_gpu,gpu_milli,model_name,batch_size\n"
        "a,0,1000,1,500,alpha,32\nb,0,1000,1,500,beta,64\n",
        sharing_model="slicing",
    )
    assert res.summary["performance_model"]["sharing_model"] == "slicing"
    # Time-slicing by measured utilisation: U = 1.91, each at 1 / 1.91 of its speed.
    assert res.jobs.loc[0, "jct_s"] == pytest.approx(1000 * 1.91)


def test_profiles_are_an_input_file_of_the_run(tmp_path):
    res = _run(tmp_path, "job_id,submit_time,duration,num_gpu,model_name,batch_size\na,0,10,1,alpha,32\n")
    files = res.summary["input_files"]
    assert files["profiles[0]"]["path"].endswith("pair.csv") and len(files["profiles[0]"]["sha256"]) == 64


def test_assigned_models_come_from_the_profiles(tmp_path):
    res = _run(
        tmp_path,
        "job_id,submit_time,duration,num_gpu\n" + "".join(f"j{i},{i},100,1\n" for i in range(12)),
        assign_models="always",
        performance="trace",  # no throughput tables (no dataset): the profiles alone give speed and power
    )
    assert set(res.jobs["model_name"]) <= {"alpha", "beta", "gamma"}
    assert (res.jobs["perf_source"].str.startswith("measured")).all()


runner = CliRunner()


def test_cli_colocate_json_with_fixture_profiles():
    result = runner.invoke(
        app, ["perf", "colocate", "--profiles", str(FIXTURES / "pair.csv"), "--models", "alpha,beta,gamma",
              "--gpu", "H200", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert {"energy_saving", "power_w"} <= set(out["set"])
    assert {name: round(job["speed"], 4) for name, job in out["jobs"].items()}["gamma"] == 1.0


def test_cli_colocate_unknown_model_is_one_line():
    result = runner.invoke(
        app,
        ["perf", "colocate", "--profiles", str(FIXTURES / "pair.csv"), "--models", "nope", "--gpu", "H200"],
    )
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "no profile of 'nope'" in result.output


@pytest.mark.realdata
@pytest.mark.parametrize("regime", ["gpu-bound", "input-bound"])
def test_done_when_commands_on_the_dataset(regime):
    path = require_real_file("h200-colocation-probe", f"{regime}.csv")
    result = runner.invoke(
        app, ["perf", "colocate", "--profiles", str(path), "--models", "alexnet,resnet18,resnet50", "--gpu", "H200",
              "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    speeds = [out["jobs"][m]["speed"] for m in ("alexnet", "resnet18", "resnet50")]
    if regime == "gpu-bound":
        assert all(0.25 < s < 0.35 for s in speeds) and out["set"]["energy_saving"] < 0
    else:
        assert speeds == pytest.approx([1.0, 1.0, 1.0]) and out["set"]["energy_saving"] > 0.3


def test_experiments_carry_the_profiles_into_every_run():
    from wattsched.experiments import cedla, eaco, powerflow

    configs = [
        eaco.Setup(profiles="p.csv", gpu_type="H200").config("fifo", 28, 42),
        powerflow.Setup("w", "c", profiles="p.csv").config("fifo", 42),
        cedla.Setup("w", "c", 2023, 3.0, "default", None, None, profiles="p.csv").config(
            "cedla", "US-CAL-CISO"
        ),
    ]
    for cfg in configs:
        assert cfg.perf.profiles == "p.csv" and cfg.perf.sharing_model == "measured"
    assert configs[0].gpu_type == "H200" and configs[0].perf.gpu_loads == "catalog"
    assert (
        eaco.Setup().config("fifo", 28, 42).perf.sharing_model == "eaco"
    )  # EaCO's own setting without profiles


def test_the_profiles_held_draw_replaces_the_catalogues(tmp_path):
    res = _run(tmp_path, "job_id,submit_time,duration,num_gpu,model_name,batch_size\na,0,10,1,alpha,32\n")
    held = res.summary["energy_model"]["gpu_held_w"]["H200"]
    assert held == {"w": 150.0, "basis": "measured: the run's profiles"}  # pair-device.json, not the 149.3 W


def test_restart_on_a_profiled_gpu_is_charged_the_profiles_held_draw():
    from wattsched.core.cluster import ClusterSpec
    from wattsched.energy.power_models import POWER_MODELS

    spec = ClusterSpec.from_arrays(
        name="x", node_names=["n"], cpu_milli=[64000], memory_mib=[1024], gpu_count=[2], gpu_model_names=["H200"]
    )  # fmt: skip
    model = POWER_MODELS.create("linear")
    model.measured_held_w["H200"] = 150.0
    model.bind(spec)
    import numpy as np

    draw, _ = model.gpu_state_w(np.array([0.0]), np.array([False]), np.array([True]), np.array([0]))
    assert draw[0] == pytest.approx(150.0)


def test_documented_example_runs_on_the_repositorys_own_profiles(tmp_path):
    docs = Path(__file__).parent.parent.parent / "docs"
    cfg = SimulationConfig(
        workload=str(docs / "examples" / "h200-jobs.csv"), cluster=str(docs / "examples" / "h200-node.yaml"),
        queue="fifo", placement="best-fit", profiles=str(docs / "measurements" / "profile_h200_gpu_bound.csv"),
    )  # fmt: skip
    jobs = run_simulation(cfg).jobs.set_index("job_id")
    assert (
        jobs.loc["r18", "perf_source"].startswith("measured:") and jobs.loc["bert", "perf_source"] == "trace"
    )
    assert jobs.loc["a1", "placement"] == jobs.loc["r50", "placement"]
    assert 2.1 < jobs.loc["a1", "jct_s"] / 3600 < 2.3  # GPU-bound pair: about 0.45 of their speed alone
    assert jobs.loc["bert", "jct_s"] == pytest.approx(3600.0)


def test_a_job_profiled_only_on_a_secondary_gpu_type_keeps_one_work_unit(tmp_path):
    # The cluster's main type (most GPUs) is A100, which the profiles do not cover; the job is pinned to the H200
    # its profile measured. Its work comes from that profile (iterations), so alone it takes its trace duration
    # (a first version counted its work in seconds but its speed in iterations: it finished in 9.9 s).
    (tmp_path / "cluster.yaml").write_text(
        "name: mixed\nnode_groups:\n"
        "  - {count: 2, gpus: 8, gpu_model: A100, cpu_milli: 64000, memory_mib: 262144}\n"
        "  - {count: 1, gpus: 2, gpu_model: H200, cpu_milli: 64000, memory_mib: 262144}\n"
    )
    (tmp_path / "jobs.csv").write_text(
        "job_id,submit_time,duration,num_gpu,gpu_model,model_name,batch_size\na,0,1000,1,H200,alpha,32\n"
    )
    cfg = SimulationConfig(
        workload=str(tmp_path / "jobs.csv"), cluster=str(tmp_path / "cluster.yaml"), queue="fifo",
        placement="best-fit", profiles=str(FIXTURES / "pair.csv"),
    )  # fmt: skip
    job = run_simulation(cfg).jobs.iloc[0]
    assert job["jct_s"] == pytest.approx(1000.0)
    assert job["work"] == pytest.approx(1000 * 101.0) and job["perf_source"].startswith("measured:")
