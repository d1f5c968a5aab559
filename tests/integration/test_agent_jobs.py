"""A job's GPU setting from the live scheduler to the node agent: the job comment, the prolog command and the agent
calls (docs/agent.md §7)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.agent_fixtures import running_agent
from wattsched.agent.fake_nvml import FakeNvml
from wattsched.agent.jobs import apply_setting, decode_setting, encode_setting, job_gpus, reset_gpus
from wattsched.backends.driver import LiveDriver
from wattsched.backends.slurm.backend import SlurmBackend
from wattsched.backends.slurm.fake import FakeSlurm
from wattsched.backends.store import JobStore
from wattsched.cli.main import app
from wattsched.core.errors import WattschedError
from wattsched.core.settings import DEFAULT_SETTING, GpuSetting
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import build_scheduler
from wattsched.policies.contract import Target


def test_settings_round_trip_through_the_job_comment():
    for setting in (GpuSetting(power_limit_fraction=0.6), GpuSetting(sm_clock_fraction=0.75)):
        assert decode_setting(encode_setting(setting)) == setting
    assert encode_setting(DEFAULT_SETTING) == "" and decode_setting("user text") == DEFAULT_SETTING
    with pytest.raises(WattschedError, match="unknown GPU setting"):
        decode_setting("wattsched-gpu:voltage=1")
    with pytest.raises(WattschedError, match=r"\(0, 1\]"):
        decode_setting("wattsched-gpu:power_limit_fraction=1.5")
    assert job_gpus({"SLURM_JOB_GPUS": "2,3"}) == [2, 3]
    assert job_gpus({"CUDA_VISIBLE_DEVICES": "0"}) == [0]


def test_the_agent_applies_a_fraction_of_each_gpus_own_range_and_resets_it():
    with running_agent(FakeNvml()) as (client, _agent):
        high = client.gpu_state(1)["power_limit_range_w"][1]
        assert apply_setting(client, [1], GpuSetting(power_limit_fraction=0.5))
        assert client.gpu_state(1)["power_limit_w"] == pytest.approx(0.5 * high, abs=1)
        lo, hi = client.gpu_state(0)["sm_clock_range_mhz"]
        apply_setting(client, [0], GpuSetting(sm_clock_fraction=0.8))
        assert client.gpu_state(0)["locked_clocks_mhz"] == [lo, round(0.8 * hi)]
        reset_gpus(client, [0, 1])
        assert client.gpu_state(0)["locked_clocks_mhz"] is None
        assert client.gpu_state(1)["power_limit_w"] == pytest.approx(high, abs=1)


def test_the_scheduler_writes_the_setting_on_the_job_before_letting_it_go():
    fake = FakeSlurm.uniform(1)
    job_id = fake.submit(2, duration_s=5)
    driver = LiveDriver(SlurmBackend(runner=fake, retry_wait_s=0.0, clock=lambda: fake.now),
                        build_scheduler(SimulationConfig(queue="fifo", placement="best-fit").scheduler, None),
                        JobStore(":memory:"))  # fmt: skip
    driver.step()  # places it at default clocks
    assert fake.jobs[int(job_id)].comment == ""
    second = fake.submit(2, duration_s=5)
    fake.advance(fake.now + 1)
    c = driver.cluster
    c.update(driver.backend.observe())
    job = c.index[second]
    placement = ((0, (2, 3), 1000, 0),)
    c.actions.start(job, Target(placement, 1000, GpuSetting(power_limit_fraction=0.6)))
    c.flush()
    assert fake.jobs[int(second)].comment == "wattsched-gpu:power_limit_fraction=0.6"
    calls = [" ".join(a) for a in fake.calls]
    comment_at = calls.index(f"scontrol update jobid={second} comment=wattsched-gpu:power_limit_fraction=0.6")
    assert comment_at < calls.index(f"scontrol release {second}")


def test_agent_job_command_applies_and_resets_and_never_fails_the_job(monkeypatch):
    runner = CliRunner()
    with running_agent(FakeNvml()) as (client, _agent):
        monkeypatch.setenv("SLURM_JOB_ID", "42")
        monkeypatch.setenv("SLURM_JOB_GPUS", "0,1")
        sock = ["--socket", client.socket_path]
        res = runner.invoke(
            app, ["agent-job", "start", *sock, "--comment", "wattsched-gpu:power_limit_fraction=0.5"]
        )
        assert res.exit_code == 0 and "GPU 1: power limit" in res.output
        high = client.gpu_state(0)["power_limit_range_w"][1]
        assert client.gpu_state(0)["power_limit_w"] == pytest.approx(0.5 * high, abs=1)
        # an old prolog's --port: a notice, and the socket all the same
        res = runner.invoke(app, ["agent-job", "end", *sock, "--port", "9400"])
        assert res.exit_code == 0 and "warning: agent-job end 42: --port is no longer used" in res.output
        assert "GPU 1: reset" in res.output
        assert client.gpu_state(0)["power_limit_w"] == pytest.approx(high, abs=1)
    # no agent listening: reported, exit status 0 (a failing prolog would drain the node)
    res = runner.invoke(
        app, ["agent-job", "start", *sock, "--comment", "wattsched-gpu:sm_clock_fraction=0.5"]
    )
    assert (
        res.exit_code == 0
        and "agent-job start 42" in res.output
        and "unreachable: no such socket" in res.output
    )
