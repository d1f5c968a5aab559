"""A power limit on a job with a measured profile: a limit at or above the draw the job measured alone does not
bind (it runs and draws as measured, in prediction and in accounting alike); below it the modelled response applies
(docs/dvfs.md §5). The fixture: `gamma` an input-bound job (150 W mean, 170 W peak on a 700 W
H200), `delta` a busier one (420 W mean, 480 W peak)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require_real_file
from wattsched.core.settings import DEFAULT_SETTING, GpuSetting
from wattsched.energy.dvfs import dvfs_response, power_limit_range
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import build_perf, load_inputs, run_simulation

FIXTURES = Path(__file__).parent.parent / "fixtures" / "profiles"
PROFILES = str(FIXTURES / "input-bound.csv")
CLUSTER = """name: one-h200
node_groups:
  - count: 1
    gpus: 4
    gpu_model: H200
    cpu_milli: 64000
    memory_mib: 262144
"""
H200_LIMIT_MAX_W = 700.0


def _config(tmp_path: Path, models: list[str], **extra) -> SimulationConfig:
    rows = [f"j{i},{i * 60},{4 * 3600},1,{m},{128 if m == 'gamma' else 64}" for i, m in enumerate(models)]
    (tmp_path / "jobs.csv").write_text(
        "job_id,submit_time,duration,num_gpu,model_name,batch_size\n" + "\n".join(rows)
    )
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    return SimulationConfig(
        workload=str(tmp_path / "jobs.csv"), cluster=str(tmp_path / "cluster.yaml"), profiles=PROFILES,
        power_model="dvfs", **extra,
    )  # fmt: skip


def _perf(tmp_path: Path):
    cfg = _config(tmp_path, ["gamma", "delta"], queue="fifo", placement="best-fit")
    inputs = load_inputs(cfg)
    return build_perf(cfg, inputs.jobs, inputs.cluster, None, np.random.default_rng(0))[0]


LIMITS = [float(f) for f in np.linspace(power_limit_range("H200")[0], 1.0, 7)[:-1]]


@pytest.mark.parametrize("fraction", LIMITS)
def test_a_limit_above_the_measured_draw_neither_slows_nor_lowers_the_draw(tmp_path, fraction):
    perf = _perf(tmp_path)
    setting = GpuSetting(power_limit_fraction=fraction)
    gamma, delta = 0, 1
    assert fraction * H200_LIMIT_MAX_W >= 170.0  # every allowed limit is above gamma's peak
    assert perf.setting_response(gamma, 0, setting) == (1.0, 1.0)
    assert perf.solo_rate(gamma, 0, 1, 1, 1, setting) == perf.solo_rate(gamma, 0, 1, 1, 1, DEFAULT_SETTING)
    assert perf.gpu_power_w(gamma, 0, setting) == perf.gpu_power_w(gamma, 0, DEFAULT_SETTING)
    # delta's peak (480 W) is above the limits below 480 / 700: there the modelled response applies
    expected = (1.0, 1.0) if fraction * H200_LIMIT_MAX_W >= 480.0 else dvfs_response("H200", setting)
    assert perf.setting_response(delta, 0, setting) == expected


def test_the_run_records_which_jobs_no_limit_binds(tmp_path):
    described = _perf(tmp_path).describe()
    assert described["profiled_jobs_no_power_limit_binds"] == {"H200": 1}  # gamma only
    assert "measured" in described["power_limit_response"]


def test_a_static_limit_above_the_draw_changes_neither_run_time_nor_energy(tmp_path):
    plain = run_simulation(_config(tmp_path, ["gamma"], queue="fifo", placement="best-fit"))
    capped = run_simulation(
        _config(tmp_path, ["gamma"], queue="fifo", placement="best-fit", gpu_power_limit=0.5)
    )
    assert capped.jobs.loc[0, "mean_power_limit_frac"] == pytest.approx(0.5)
    assert capped.jobs.loc[0, "jct_s"] == pytest.approx(plain.jobs.loc[0, "jct_s"])
    gpu = "gpu_active"
    assert capped.summary["energy_by_component_kwh"][gpu] == pytest.approx(
        plain.summary["energy_by_component_kwh"][gpu], rel=1e-12
    )


def test_green_clocks_neither_slow_an_input_bound_job_nor_raise_its_energy(tmp_path):
    require_real_file(
        "elasticflow-throughputs", "throughputs_A100/bert.csv"
    )  # green reads the throughput tables
    runs = {
        name: run_simulation(_config(tmp_path, ["gamma"] * 3, allocation=name))
        for name in (
            "wattsched-green-no-price-shift-no-gpus",
            "wattsched-green-no-price-shift-no-gpus-no-clocks",
        )
    }
    on, off = runs.values()
    assert (on.jobs["mean_power_limit_frac"] == 1).all()
    assert on.summary["policies"]["allocation"]["parameters"]["slowed_starts"] == 0
    assert (on.jobs["jct_s"] == off.jobs["jct_s"]).all()
    assert on.summary["energy_kwh"] <= off.summary["energy_kwh"] * (1 + 1e-12)


def test_green_clocks_still_slow_a_job_the_limit_binds(tmp_path):
    require_real_file(
        "elasticflow-throughputs", "throughputs_A100/bert.csv"
    )  # green reads the throughput tables
    out = run_simulation(
        _config(tmp_path, ["delta"] * 3, allocation="wattsched-green-no-price-shift-no-gpus")
    )
    assert (out.jobs["mean_power_limit_frac"] < 1).all()
    run_time = out.jobs["end_s"] - out.jobs["start_s"]
    assert (run_time <= 1.10 * out.jobs["duration_s"] + 1e-6).all()
