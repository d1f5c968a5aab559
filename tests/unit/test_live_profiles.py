"""Profiles from live runs: the agent's per-job windows (job hooks) and `serve slurm --record-profiles` (docs/profile.md
§6), on the fake NVML and the in-memory Slurm front end."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.agent_fixtures import running_agent
from wattsched.agent.control import GpuAgent
from wattsched.agent.fake_nvml import FakeNvml
from wattsched.agent.jobmeter import JobMeter
from wattsched.agent.nvml import AgentError, GpuDevice
from wattsched.backends.driver import LiveDriver
from wattsched.backends.profile_recorder import ProfileRecorder, model_and_batch, window_rows
from wattsched.backends.slurm.backend import SlurmBackend
from wattsched.backends.slurm.fake import FakeSlurm
from wattsched.backends.store import JobStore
from wattsched.cli.main import app
from wattsched.core.errors import InputError
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import build_scheduler
from wattsched.perf.profiles import load_profiles


class ManualClock:
    def __init__(self, now: float = 1_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _meter(nvml: FakeNvml, clock: ManualClock, interval_s: float = 3600.0) -> JobMeter:
    nvml.nvmlInit()
    return JobMeter([GpuDevice(nvml, i) for i in range(nvml.gpu_count)], "node7", interval_s, clock=clock)


def test_windows_follow_who_shares_which_gpu() -> None:
    clock = ManualClock()
    nvml = FakeNvml(2, clock=clock)  # GPU 0 draws 180 W, GPU 1 210 W (fixed profile)
    meter = _meter(nvml, clock)
    first = meter.sequence
    meter.begin("11", [0], "resnet50")
    clock.now += 5
    meter.begin("12", [1])  # another GPU: 11's window goes on
    clock.now += 5
    meter.end("12")
    clock.now += 5
    meter.begin("13", [0])  # shares 11's GPU: 11's window alone closes, a set opens
    clock.now += 4
    meter.end("11")
    clock.now += 2
    meter.end("13")
    windows = meter.windows(first)["windows"]
    summary = [([j["job_id"] for j in w["jobs"]], w["gpus"], w["window_s"]) for w in windows]
    assert summary == [(["12"], [1], 5), (["11"], [0], 15), (["11", "13"], [0], 4), (["13"], [0], 2)]
    assert [w["energy_source"] for w in windows] == ["nvml-counter"] * 4
    assert windows[0]["energy_j"] == pytest.approx(210 * 5) and windows[1]["energy_j"] == pytest.approx(
        180 * 15
    )
    assert windows[1]["power_mean_w"] == pytest.approx(180)  # one reading at the close (interval not reached)
    assert windows[1]["jobs"][0]["name"] == "resnet50"
    assert meter.windows(windows[-2]["seq"])["windows"] == [windows[-1]]  # after=N gives only later ones
    meter.close()


def test_a_multi_gpu_job_is_measured_per_gpu() -> None:
    clock = ManualClock()
    meter = _meter(FakeNvml(2, clock=clock), clock)
    meter.begin("21", [0, 1])
    clock.now += 10
    meter.end("21")
    (window,) = meter.windows(0)["windows"]
    assert window["gpus"] == [0, 1] and window["energy_j"] == pytest.approx((180 + 210) / 2 * 10)


def test_sampled_energy_where_the_gpu_has_no_counter() -> None:
    nvml = FakeNvml(1, energy_supported=False)
    nvml.nvmlInit()
    meter = JobMeter([GpuDevice(nvml, 0)], "node7", interval_s=0.01)
    meter.begin("31", [0])
    time.sleep(0.3)
    meter.end("31")
    (window,) = meter.windows(0)["windows"]
    assert window["energy_source"] == "sampled" and window["samples"] >= 5
    assert window["energy_j"] == pytest.approx(180 * window["window_s"], rel=0.1)
    assert window["util_gpu_mean_pct"] == 40 and window["sm_mhz_mean"] == 1410
    meter.close()


def test_hook_errors() -> None:
    clock = ManualClock()
    meter = _meter(FakeNvml(2, clock=clock), clock)
    with pytest.raises(AgentError, match="no GPU 5"):
        meter.begin("1", [5])
    with pytest.raises(AgentError, match="not being measured"):
        meter.end("2")


def test_job_names_give_model_and_batch() -> None:
    assert model_and_batch("resnet50") == ("resnet50", 0)
    assert model_and_batch("resnet50-b128") == ("resnet50", 128)
    assert model_and_batch("vgg16_bs64") == ("vgg16", 64)
    assert model_and_batch("bert:32") == ("bert", 32)
    assert model_and_batch("ResNet-50") == ("resnet", 50)  # a dash then digits reads as a batch
    assert model_and_batch("my job.sh") == ("myjobsh", 0)


def test_window_rows_name_the_set_and_carry_the_gpu_figures() -> None:
    window = {"seq": 7, "hostname": "gpu1", "gpu_name": "NVIDIA A100-SXM4-40GB", "gpus": [2],
              "jobs": [{"job_id": "5", "name": ""}, {"job_id": "6", "name": "x"}], "window_s": 12.5,
              "energy_j": 2500.0, "energy_source": "nvml-counter", "power_mean_w": 200.0, "power_max_w": 250.0,
              "util_gpu_mean_pct": 97.0, "util_mem_mean_pct": 30.0, "sm_mhz_mean": 1410.0,
              "power_limit_w": None}  # fmt: skip
    rows = window_rows(window, {"5": "alexnet-256", "6": "resnet50_bs128"})
    assert [(r["model"], r["batch"], r["set"], r["jobs_in_set"]) for r in rows] == [
        ("alexnet", 256, "alexnet+resnet50", 2), ("resnet50", 128, "alexnet+resnet50", 2)
    ]  # fmt: skip
    assert rows[0]["gpu"] == "A100" and rows[0]["repeat"] == "7@gpu1" and rows[0]["it_per_s"] is None
    assert rows[0]["gpu_energy_j"] == 2500.0 and "job 5 on gpu1 GPUs 2" in rows[0]["source"]


def test_agent_job_hooks_reach_the_agent_over_http(monkeypatch: pytest.MonkeyPatch) -> None:
    with running_agent(FakeNvml()) as (client, agent):
        monkeypatch.setenv("SLURM_JOB_ID", "77")
        monkeypatch.setenv("SLURM_JOB_GPUS", "1")
        monkeypatch.setenv("SLURM_JOB_NAME", "vgg16-64")
        start = CliRunner().invoke(
            app, ["agent-job", "start", "--socket", client.socket_path, "--comment", ""]
        )
        assert start.exit_code == 0 and "measuring GPUs 1" in start.output
        assert agent.jobs.job_gpus == {"77": (1,)}
        end = CliRunner().invoke(app, ["agent-job", "end", "--socket", client.socket_path])
        assert end.exit_code == 0 and "measurement closed" in end.output
        (window,) = client.windows(0)["windows"]
        assert window["jobs"] == [{"job_id": "77", "name": "vgg16-64"}] and window["gpus"] == [1]
        # unknown now: printed, exit 0
        again = CliRunner().invoke(app, ["agent-job", "end", "--socket", client.socket_path])
        assert again.exit_code == 0 and "not being measured" in again.output


def test_closing_the_agent_stops_the_meter() -> None:
    agent = GpuAgent(FakeNvml(1))
    agent.jobs.interval_s = 0.01
    agent.jobs.begin("1", [0])
    thread = agent.jobs._thread
    assert thread is not None and thread.is_alive()
    agent.close()
    assert not thread.is_alive()


def test_serve_records_live_jobs_as_profile_rows(tmp_path: Path) -> None:
    fake = FakeSlurm.uniform(1, gpus=4)
    alone = fake.submit(2, duration_s=60, name="resnet50-b128")
    pair_a = fake.submit(1, duration_s=60, name="alexnet")
    out = tmp_path / "live.csv"
    with running_agent(FakeNvml(gpu_count=4)) as (client, _agent):
        port = client.base_url.rsplit(":", 1)[1]
        driver = LiveDriver(SlurmBackend(runner=fake, retry_wait_s=0.0, clock=lambda: fake.now),
                            build_scheduler(SimulationConfig(queue="fifo", placement="best-fit").scheduler, None),
                            JobStore(":memory:"))  # fmt: skip
        driver.recorder = ProfileRecorder(out, f"http://127.0.0.1:{port}", interval_s=3600)
        driver.step()  # starts both: the prologs would now call the agent
        client.job_started(alone, [0, 1])
        client.job_started(pair_a, [2])
        client.job_started("999", [2], "bert-8")  # a job wattsched does not manage shares GPU 2 for a while
        time.sleep(0.05)
        client.job_ended("999")
        time.sleep(0.05)
        client.job_ended(alone)
        client.job_ended(pair_a)
        stop = threading.Event()
        stop.set()
        driver.run(0.1, stop)  # no step; the final read of the agents
    profiles = load_profiles([out])
    readings = sorted((p.model, p.batch, p.jobs_in_set) for p in profiles.power_only)
    assert readings == [("alexnet", 0, 1), ("alexnet", 0, 1), ("alexnet", 0, 2), ("bert", 8, 2),
                        ("resnet50", 128, 1)]  # fmt: skip
    assert {p.gpu for p in profiles.power_only} == {"A100"}
    assert all(p.power_w > 0 and p.energy_j > 0 for p in profiles.power_only)
    written = out.read_text()
    assert driver.recorder.poll(force=True) == 0 and out.read_text() == written  # nothing twice
    again = ProfileRecorder(out, f"http://127.0.0.1:{port}")  # a restarted scheduler knows what is written
    assert sum(len(v) for v in again.seen.values()) == 4


def test_a_foreign_file_is_refused_at_start(tmp_path: Path) -> None:
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="not a wattsched profile file"):
        ProfileRecorder(other)
    result = CliRunner().invoke(app, ["serve", "slurm", "--record-profiles", str(tmp_path / "no" / "p.csv"),
                                      "--max-steps", "0", "--metrics-port", "0"])  # fmt: skip
    assert result.exit_code == 2 and "does not exist" in " ".join(result.output.replace("│", " ").split())


def test_an_unreachable_agent_is_logged_not_fatal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    recorder = ProfileRecorder(tmp_path / "p.csv", "http://127.0.0.1:9", timeout_s=0.5)
    recorder.nodes = ["gpu1"]
    assert recorder.poll(force=True) == 0 and recorder.poll(force=True) == 0
    assert sum("cannot read the agent" in r.message for r in caplog.records) == 1  # once per outage
    assert not (tmp_path / "p.csv").exists()
