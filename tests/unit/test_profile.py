"""`wattsched profile` without a GPU: the fake NVML and simulated (or plain-command) jobs (docs/profile.md)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wattsched.agent.control import StopRequested
from wattsched.agent.fake_nvml import DEFAULT_POWER_LIMIT_MW, FakeNvml, read_state_file
from wattsched.agent.nvml import GpuDevice
from wattsched.cli.main import app
from wattsched.perf.profiles import EXTRA_COLUMNS, PROFILE_COLUMNS, load_profiles, write_rows
from wattsched.profiling.fake import SimulatedJobRunner
from wattsched.profiling.jobs import JobSpec, ProfileError, label_jobs, parse_command, parse_models, plan_sets
from wattsched.profiling.runner import Profiler, catalog_gpu
from wattsched.profiling.sampler import ENERGY_COUNTER, ENERGY_SAMPLED, NvmlSampler, Sample, integrate_power
from wattsched.profiling.workers import ProcessJobRunner, check_torch

SRC = Path(__file__).resolve().parents[2] / "src"
WINDOW_S = 0.25
IDLE_S = 0.1


def _profiler(nvml: FakeNvml, models: str = "alexnet:256,resnet50:128", sizes=(1, 2), **kwargs) -> Profiler:
    jobs = label_jobs(parse_models(models))
    runner = kwargs.pop("runner", None) or SimulatedJobRunner(nvml)
    return Profiler(nvml, runner, jobs, plan_sets(jobs, sizes, kwargs.pop("named", [])), window_s=WINDOW_S,
                    idle_s=IDLE_S, sample_interval_s=0.01, **kwargs)  # fmt: skip


def _limit_mw(nvml: FakeNvml, index: int = 0) -> int:
    return nvml.gpus[index].power_limit_mw


# -- jobs and sets -------------------------------------------------------------------------------------------


def test_models_and_sets_are_parsed_and_planned() -> None:
    jobs = label_jobs(parse_models("alexnet:256, resnet18:128,resnet50:128"))
    assert [(j.model, j.batch) for j in jobs] == [("alexnet", 256), ("resnet18", 128), ("resnet50", 128)]
    sets = plan_sets(jobs, [1, 2], ["resnet50+alexnet", "alexnet+resnet18+resnet50"])
    assert sets[:3] == [(0,), (1,), (2,)]
    assert sets[3:] == [(0, 1), (0, 2), (1, 2), (0, 1, 2)]  # the named pair is one of the pairs: not twice
    with pytest.raises(ProfileError, match="no job 'vgg16'"):
        plan_sets(jobs, [1], ["alexnet+vgg16"])
    with pytest.raises(ProfileError, match="MODEL:BATCH"):
        parse_models("resnet50")
    with pytest.raises(ProfileError, match="a set of 4"):
        plan_sets(jobs, [4], [])


def test_one_model_at_two_batches_gets_distinct_labels() -> None:
    jobs = label_jobs(parse_models("resnet50:64,resnet50:128,vgg16:64"))
    assert [j.name for j in jobs] == ["resnet50:64", "resnet50:128", "vgg16"]
    with pytest.raises(ProfileError, match="given twice"):
        label_jobs(parse_models("vgg16:64,vgg16:64"))


def test_command_names_only_from_a_prefix_without_spaces() -> None:
    assert parse_command("mynet:64=python train.py --lr=0.1", 1) == JobSpec(
        "mynet", 64, command="python train.py --lr=0.1"
    )
    assert parse_command("python train.py --lr=0.1", 2) == JobSpec(
        "command2", 0, command="python train.py --lr=0.1"
    )
    assert parse_command("bert=torchrun x.py", 3).batch == 0


def test_catalog_gpu_names() -> None:
    assert catalog_gpu("NVIDIA H200") == "H200"
    assert catalog_gpu("NVIDIA A100-SXM4-40GB") == "A100"
    assert catalog_gpu("NVIDIA H100 PCIe") == "H100-PCIE"
    assert catalog_gpu("NVIDIA GeForce RTX 4090") == "GEFORCE-RTX-4090"


# -- sampling and energy -------------------------------------------------------------------------------------


def test_integrate_power_holds_each_sample_until_the_next() -> None:
    samples = [Sample(1.0, 100.0, None, None, None, None), Sample(2.0, 300.0, None, None, None, None)]
    # 100 W from the window's start (0) to 2 s, then 300 W to the end (3 s)
    assert integrate_power(samples, 0.0, 3.0) == pytest.approx(100 * 2 + 300 * 1)


@pytest.mark.parametrize("counter", [True, False])
def test_window_energy_from_counter_or_integrated_samples(counter: bool) -> None:
    nvml = FakeNvml(1, energy_supported=counter)
    nvml.nvmlInit()
    nvml.set_load(0, 50)  # 60 W + 3 W per %: 210 W
    sampler = NvmlSampler(GpuDevice(nvml, 0), interval_s=0.01)
    with sampler.window() as window:
        time.sleep(0.3)
    reading = window.reading
    assert reading.energy_source == (ENERGY_COUNTER if counter else ENERGY_SAMPLED)
    assert reading.power_mean_w == pytest.approx(210)
    assert reading.energy_j == pytest.approx(210 * reading.seconds, rel=0.05)
    assert reading.util_gpu_mean_pct == 50 and reading.sm_mhz_mean == 1410
    assert reading.samples >= 5


def test_fake_energy_counter_follows_the_load() -> None:
    clock = [0.0]
    nvml = FakeNvml(1, clock=lambda: clock[0])
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    start = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    nvml.set_load(0, 0)  # 60 W
    clock[0] = 10.0
    nvml.set_load(0, 100)  # 360 W
    clock[0] = 12.0
    assert nvml.nvmlDeviceGetTotalEnergyConsumption(handle) - start == 60 * 10 * 1000 + 360 * 2 * 1000


# -- the profile: windows, rows, the CSV ----------------------------------------------------------------------


def test_profile_rows_follow_the_sets_and_read_back(tmp_path: Path) -> None:
    nvml = FakeNvml(1)
    profiler = _profiler(nvml, "alexnet:256,resnet18:128,resnet50:128", (1,), named=["alexnet+resnet50"],
                         repeats=2)  # fmt: skip
    steps: list[tuple[int, int]] = []
    profiler.progress = lambda done, total: steps.append((done, total))
    rows = profiler.run()
    states = [r["state"] for r in rows]
    assert states[:2] == ["idle-bare", "idle-held"] and states[2:] == ["training"] * (2 * (3 + 2))
    assert steps[-1] == (2 + 2 * 4, 2 + 2 * 4)  # two idle readings, 4 windows twice
    pair = [r for r in rows if r.get("set") == "alexnet+resnet50"]
    assert [(r["model"], r["jobs_in_set"], r["repeat"]) for r in pair] == [
        ("alexnet", 2, 0), ("resnet50", 2, 0), ("alexnet", 2, 1), ("resnet50", 2, 1)
    ]  # fmt: skip
    assert pair[0]["gpu_energy_j"] == pair[1]["gpu_energy_j"]  # the GPU's window, on each member's row
    alone = next(r for r in rows if r.get("set") == "alexnet")
    assert pair[0]["it_per_s"] == pytest.approx(alone["it_per_s"] / 2, rel=0.1)  # time-sliced
    assert alone["gpu"] == "A100" and alone["source"] == "wattsched profile; energy=nvml-counter"
    assert rows[0]["gpu_power_mean_w"] == 60 and rows[1]["gpu_power_mean_w"] == 66  # bare 0 %, held 2 %
    out = tmp_path / "profile.csv"
    assert write_rows(out, rows) == len(rows)
    with out.open() as handle:
        assert next(csv.reader(handle)) == list(PROFILE_COLUMNS + EXTRA_COLUMNS)
    profiles = load_profiles([out])
    assert sorted(key[1] for key in profiles.solos) == ["alexnet", "resnet18", "resnet50"]
    assert profiles.solo("A100", "alexnet", 256).windows == 2
    assert [s.name for s in profiles.sets] == ["alexnet+resnet50"] * 2
    assert profiles.bare_w("A100") == 60 and profiles.held_w("A100") == 66


def test_without_power_limits_nothing_is_changed() -> None:
    nvml = FakeNvml(1)
    _profiler(nvml, sizes=(1, 2)).run()
    assert nvml.calls == []
    assert _limit_mw(nvml) == DEFAULT_POWER_LIMIT_MW


def test_steps_unknown_give_power_only_rows(tmp_path: Path) -> None:
    nvml = FakeNvml(1)
    runner = SimulatedJobRunner(nvml, reports_steps=False)
    rows = _profiler(nvml, runner=runner).run()
    assert all(r["iters"] is None and r["it_per_s"] is None for r in rows if r["state"] == "training")
    write_rows(tmp_path / "p.csv", rows)
    profiles = load_profiles([tmp_path / "p.csv"])
    assert profiles.solos == {} and profiles.sets == []
    assert len(profiles.power_only) == 4 and {p.jobs_in_set for p in profiles.power_only} == {1, 2}


# -- power limits: set, kept apart, always restored -----------------------------------------------------------


def test_power_limits_are_measured_and_the_original_restored(tmp_path: Path) -> None:
    nvml = FakeNvml(1)
    nvml.nvmlInit()
    nvml.nvmlDeviceSetPowerManagementLimit(nvml.nvmlDeviceGetHandleByIndex(0), 350_000)  # not the default
    nvml.calls.clear()
    rows = _profiler(nvml, "alexnet:256", (1,), power_limits_w=[300, 150]).run()
    training = [r for r in rows if r["state"] == "training"]
    assert [r["power_limit_w"] for r in training] == [None, 300, 150]
    assert training[0]["gpu_power_mean_w"] > 150 and training[2]["gpu_power_max_w"] <= 150  # the cap holds
    set_to = [args[1] for name, args in nvml.calls if name == "nvmlDeviceSetPowerManagementLimit"]
    assert set_to[1:3] == [300_000, 150_000] and set_to[-1] == 350_000  # checked, set, set, restored
    assert _limit_mw(nvml) == 350_000
    write_rows(tmp_path / "p.csv", rows)
    profiles = load_profiles([tmp_path / "p.csv"])
    assert [k[:3] for k in profiles.solos] == [
        ("A100", "alexnet", 256)
    ]  # the capped windows are not averaged in
    assert sorted(k[:3] + k[4:] for k in profiles.capped) == [
        ("A100", "alexnet", 256, 150.0),
        ("A100", "alexnet", 256, 300.0),
    ]


def test_power_limit_restored_when_a_job_fails() -> None:
    nvml = FakeNvml(1)
    runner = SimulatedJobRunner(nvml)

    def fail_under_the_cap(members) -> None:
        if _limit_mw(nvml) == 200_000:
            raise ProfileError("job alexnet: CUDA out of memory")

    runner.on_run = fail_under_the_cap
    with pytest.raises(ProfileError, match="out of memory"):
        _profiler(nvml, "alexnet:256", (1,), power_limits_w=[200], runner=runner).run()
    assert _limit_mw(nvml) == DEFAULT_POWER_LIMIT_MW
    assert runner.closed == 1


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_power_limit_restored_on_signal(stop_signal: signal.Signals) -> None:
    nvml = FakeNvml(1)
    runner = SimulatedJobRunner(nvml)
    runner.on_run = lambda members: _limit_mw(nvml) == 200_000 and os.kill(os.getpid(), stop_signal)
    before = signal.getsignal(stop_signal)
    with pytest.raises(StopRequested, match=stop_signal.name):
        _profiler(nvml, "alexnet:256", (1,), power_limits_w=[200], runner=runner).run()
    assert _limit_mw(nvml) == DEFAULT_POWER_LIMIT_MW
    assert runner.closed == 1
    assert signal.getsignal(stop_signal) == before  # the handlers are put back


def test_power_limits_refused_without_the_right() -> None:
    nvml = FakeNvml(1, deny_set=True)
    runner = SimulatedJobRunner(nvml)
    with pytest.raises(ProfileError, match=r"needs the right .*\(root"):
        _profiler(nvml, "alexnet:256", (1,), power_limits_w=[200], runner=runner).run()
    assert runner.log == []  # refused before any job started
    assert nvml.calls == []


def test_power_limit_outside_the_range_is_refused() -> None:
    nvml = FakeNvml(1)
    with pytest.raises(ProfileError, match=r"450 W is outside .* 100-400 W"):
        _profiler(nvml, "alexnet:256", (1,), power_limits_w=[450]).run()
    assert nvml.calls == []


@pytest.mark.slow  # a profiler process, ~4 s: `make test-fast` leaves it out
def test_profile_process_restores_power_limit_on_sigterm(tmp_path: Path) -> None:
    state_file = tmp_path / "fake-nvml.json"
    state_file.write_text(json.dumps({"gpus": [{"power_limit_mw": 320_000, "locked_clocks_mhz": None}]}))
    env = dict(os.environ, PYTHONPATH=str(SRC), WATTSCHED_FAKE_NVML_STATE=str(state_file),
               WATTSCHED_FAKE_NVML_GPUS="1")  # fmt: skip
    out = tmp_path / "p.csv"
    process = subprocess.Popen(
        [sys.executable, "-m", "wattsched.profiling", "--nvml", "fake", "--models", "alexnet:256",
         "--power-limits", "250", "--window-s", "3", "--idle-s", "0.1", "--out", str(out), "--quiet"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while read_state_file(state_file)["gpus"][0]["power_limit_mw"] != 250_000:
            assert time.monotonic() < deadline and process.poll() is None, "the cap was never set"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    assert read_state_file(state_file)["gpus"][0]["power_limit_mw"] == 320_000
    assert not out.exists()


# -- real job processes that need no GPU: plain commands -------------------------------------------------------

STEPPER = (
    "import time\n"
    "for i in range(1, 100000):\n"
    "    time.sleep(0.01)\n"
    "    if i % 5 == 0:\n"
    "        print('wattsched-steps', i, flush=True)\n"
)


@pytest.mark.slow  # job processes, ~4 s: `make test-fast` leaves it out
def test_command_jobs_report_steps_or_give_power_only(tmp_path: Path) -> None:
    script = tmp_path / "stepper.py"
    script.write_text(STEPPER)
    jobs = label_jobs([parse_command(f"stepper:32={sys.executable} {script}", 1),
                       parse_command(f"{sys.executable} -c 'import time; time.sleep(60)'", 2)])  # fmt: skip
    runner = ProcessJobRunner(0, warmup_steps=10, command_warmup_s=0.5)
    nvml = FakeNvml(1)
    rows = Profiler(nvml, runner, jobs, plan_sets(jobs, [1, 2], []), window_s=1.0, idle_s=IDLE_S).run()
    assert [r["state"] for r in rows] == ["idle-bare"] + ["training"] * 4  # no held reading: commands restart
    stepper = next(r for r in rows if r.get("set") == "stepper")
    assert stepper["batch"] == 32 and 40 < stepper["it_per_s"] < 110  # ~100 steps/s, reported every 5
    silent = next(r for r in rows if r.get("set") == "command2")
    assert silent["iters"] is None and silent["it_per_s"] is None
    assert runner._commands == {}  # every command stopped after its window
    assert nvml.calls == []


def test_builtin_jobs_without_pytorch_are_a_clear_error(tmp_path: Path) -> None:
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text(f'#!/bin/sh\nexec {sys.executable} -S -I "$@"\n')  # no site-packages: no torch
    no_torch.chmod(0o755)
    with pytest.raises(ProfileError, match=r"need PyTorch and torchvision.*--command"):
        check_torch(str(no_torch))


# -- the command line ----------------------------------------------------------------------------------------


def test_cli_fake_profile_writes_and_appends(tmp_path: Path) -> None:
    out = tmp_path / "p.csv"
    args = ["profile", "--nvml", "fake", "--models", "alexnet:256,vgg16:64", "--sets", "1,2",
            "--window-s", "0.2", "--idle-s", "0.1", "--out", str(out), "--quiet"]  # fmt: skip
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "wrote 6 rows" in first.output  # 2 idle, 2 alone, a pair
    second = CliRunner().invoke(app, [*args, "--append"])
    assert second.exit_code == 0, second.output
    profiles = load_profiles([out])
    assert profiles.solo("A100", "vgg16", 64).windows == 2 and len(profiles.sets) == 2
    with out.open() as handle:
        assert {r["repeat"] for r in csv.DictReader(handle) if r["set"]} == {
            "0",
            "1",
        }  # appended: next repeat


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "nothing to profile"),
        (["--models", "resnet50"], "MODEL:BATCH"),
        (["--models", "resnet50:8", "--regime", "cpu-bound"], "--regime"),
        (["--models", "resnet50:8", "--device-index", "3"], "no GPU 3"),
        (["--models", "resnet50:8", "--out", "/nonexistent/dir/p.csv"], "does not exist"),
    ],
)
def test_cli_errors_are_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["profile", "--nvml", "fake", "--quiet", *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_cli_append_refuses_a_foreign_file(tmp_path: Path) -> None:
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    result = CliRunner().invoke(app, ["profile", "--nvml", "fake", "--models", "alexnet:8", "--out", str(other),
                                      "--append", "--quiet"])  # fmt: skip
    assert result.exit_code == 2 and "not a wattsched profile file" in result.output
    assert other.read_text() == "a,b\n1,2\n"


def test_cli_without_nvidia_driver_is_one_error_line() -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
        pytest.skip("a GPU driver is present")
    except pynvml.NVMLError:
        pass
    result = CliRunner().invoke(app, ["profile", "--models", "resnet50:8", "--quiet"])
    assert result.exit_code == 2
    assert "NVML initialisation failed" in result.output and "Traceback" not in result.output


def test_profiler_imports_no_pydantic() -> None:
    """`python -m wattsched.profiling` must not need pydantic through wattsched (GPU machines may lack it)."""
    probe = (
        "import sys\n"
        "import wattsched.cli.profile, wattsched.profiling.runner, wattsched.profiling.workers\n"
        "import wattsched.profiling.fake, wattsched.perf.profiles, wattsched.agent.control\n"
        "sys.exit(3 if {'pydantic', 'prometheus_client', 'pandas'} & set(sys.modules) else 0)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
