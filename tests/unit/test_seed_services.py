"""Inference service-hours under the training-job seeds zeus-pl, hkbu-dvfs and hkbu-online-pd: each service-hour
holds its asked GPUs at the default setting from its submission to the end of its hour, outside the policy's own
rule (power limit, clock, admission), while training jobs keep the policy's treatment (docs/cedla.md §1.4)."""

from __future__ import annotations

import pandas as pd
import pytest

from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import run_simulation

CLUSTER = (
    "name: small\nnode_groups:\n  - count: 2\n    gpus: 4\n    gpu_model: V100\n    cpu_milli: 32000\n"
    "    memory_mib: 262144\n"
)
TRAINING_ROWS = [("t0", 0, 7200, 4), ("t1", 0, 3600, 2)]
SERVICE = ("svc@h0", 600, 3600, 2)  # one service for one hour: 2 GPUs, free when it arrives


def _run(tmp_path, policy: str, rows: list[tuple], services: list[tuple]):
    lines = ["job_id,submit_time,duration,num_gpu,job_class"]
    lines += [f"{j},{s},{d},{g},training" for j, s, d, g in rows]
    lines += [f"{j},{s},{d},{g},inference" for j, s, d, g in services]
    workload = tmp_path / f"jobs-{len(services)}.csv"
    workload.write_text("\n".join(lines) + "\n")
    cluster = tmp_path / "c.yaml"
    cluster.write_text(CLUSTER)
    cfg = SimulationConfig(
        workload=str(workload),
        cluster=str(cluster),
        allocation=policy,
        deadline_slack=3.0,
        power_model="dvfs",
        performance="trace",  # trace speeds: no throughput tables, so no dataset needed
        check_invariants=True,
    )
    return run_simulation(cfg)


def _training(jobs: pd.DataFrame) -> pd.DataFrame:
    cols = ["job_id", "status", "start_s", "end_s", "mean_power_limit_frac", "mean_sm_clock_frac"]
    return jobs.loc[jobs["job_class"] == "training", cols].reset_index(drop=True)


@pytest.mark.parametrize("policy", ["zeus-pl", "hkbu-dvfs", "hkbu-online-pd"])
def test_a_service_hour_holds_its_gpus_at_the_default_setting_for_its_hour(tmp_path, policy):
    with_service = _run(tmp_path, policy, TRAINING_ROWS, [SERVICE])
    alone = _run(tmp_path, policy, TRAINING_ROWS, [])
    jobs = with_service.jobs
    svc = jobs[jobs["job_class"] == "inference"].iloc[0]
    assert svc["status"] == "completed" and svc["num_gpu"] == 2
    assert svc["start_s"] == pytest.approx(600.0) and svc["end_s"] == pytest.approx(600.0 + 3600.0)
    assert svc["mean_power_limit_frac"] == pytest.approx(1.0) and svc["mean_sm_clock_frac"] == pytest.approx(
        1.0
    )
    assert with_service.summary["service_hours"] == 1 and with_service.summary["slo_violation_hours"] == 0
    # Training jobs: exactly what the policy does without the service (the service took GPUs nobody waited for).
    pd.testing.assert_frame_equal(_training(jobs), _training(alone.jobs))
    training = _training(jobs)
    if policy == "hkbu-online-pd":  # its own rule: priced, admitted, t1 planned for a later slot
        params = with_service.summary["policies"]["allocation"]["parameters"]
        assert params["admitted"] == 2 and params["rejected"] == 0
        assert training.loc[1, "start_s"] > 0
    else:  # its own rule: a power limit below the maximum for training jobs
        assert (training["mean_power_limit_frac"] < 0.9).all()


def test_zeus_starts_a_service_ahead_of_a_blocked_fifo_head(tmp_path):
    """Strict FIFO holds later training jobs behind a head that does not fit; a service-hour is not queued."""
    rows = [("t0", 0, 7200, 6), ("t1", 300, 3600, 4), ("t2", 400, 600, 1)]
    result = _run(tmp_path, "zeus-pl", rows, [SERVICE])
    jobs = result.jobs.set_index("job_id")
    assert jobs.loc["svc@h0", "start_s"] == pytest.approx(600.0)
    assert jobs.loc["svc@h0", "end_s"] == pytest.approx(4200.0)
    assert jobs.loc["t1", "start_s"] > 4200.0 and jobs.loc["t2", "start_s"] >= jobs.loc["t1", "start_s"]
