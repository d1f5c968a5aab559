"""A job's GPU setting through the testbed's real Prolog/Epilog: scheduler comment -> `wattsched agent-job` -> agent.

The node agent runs with the fake NVML (4 GPUs, a state file); the job prolog and epilog of the local Slurm (run as
root, as slurmd runs them) call it over its Unix socket once ``LocalSlurm.set_agent_socket`` is on (docs/live-slurm.md
§2.3). Each test leaves the testbed as it found it:
no jobs, nodes idle, the hook off.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live.test_local_slurm import cancelled_after, output, poll, sbatch, state_is
from tests.slurm_testbed import LocalSlurm
from wattsched.agent import fake_nvml
from wattsched.agent.client import AgentClient
from wattsched.agent.fake_nvml import read_state_file
from wattsched.backends.slurm.backend import SlurmBackend, subprocess_runner
from wattsched.core.settings import GpuSetting

pytestmark = pytest.mark.slurm

GPUS = 4
JOB = "echo GPUS=$CUDA_VISIBLE_DEVICES; sleep 3"


@pytest.fixture
def hook(local_slurm: LocalSlurm) -> Iterator[LocalSlurm]:
    """The testbed, left as found: hook off, no jobs, nodes idle."""
    try:
        yield local_slurm
    finally:
        local_slurm.set_agent_socket(None)
        local_slurm.cancel_all()
        local_slurm.wait_idle(timeout=30)


@pytest.fixture
def agent(hook: LocalSlurm) -> Iterator[tuple[AgentClient, Path]]:
    """`wattsched agent --nvml fake` on a free localhost port and its own socket, and the job hook pointed at it."""
    with tempfile.TemporaryDirectory(prefix="wattsched-agent-") as tmp:
        state_file = Path(tmp) / "fake-nvml.json"
        socket_path = str(Path(tmp) / "agent.sock")
        env = {**os.environ, fake_nvml.STATE_FILE_ENV: str(state_file), fake_nvml.GPU_COUNT_ENV: str(GPUS)}
        command = [sys.executable, "-m", "wattsched.cli.main", "agent", "--nvml", "fake", "--port", "0",
                   "--socket", socket_path]  # fmt: skip
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(process.stdout, selectors.EVENT_READ)
                assert selector.select(timeout=20), "the agent did not start within 20 s"
            line = process.stdout.readline()
            assert "via fake NVML at http://127.0.0.1:" in line, line
            port = int(line.split("http://127.0.0.1:", 1)[1].split(" ", 1)[0])
            assert (
                f"changes only on {socket_path} (srw-rw---- root:root) from root" in process.stdout.readline()
            )
            hook.set_agent_socket(socket_path)
            yield AgentClient("127.0.0.1", port, socket_path=socket_path), state_file
        finally:
            hook.set_agent_socket(None)
            process.terminate()
            process.communicate(timeout=15)


def hook_log(slurm: LocalSlurm, *job_ids: str) -> str:
    """The prolog/epilog output (DIR/log/agent-job.log) about these jobs."""
    lines = (slurm.base / "log" / "agent-job.log").read_text().splitlines()
    return "\n".join(line for line in lines if any(f" {job_id}:" in line for job_id in job_ids))


def gpus(client: AgentClient) -> dict[int, dict]:
    return {gpu["index"]: gpu for gpu in client.state()["gpus"]}


def limits(client: AgentClient) -> dict[int, float]:
    return {index: gpu["power_limit_w"] for index, gpu in gpus(client).items()}


def started(slurm: LocalSlurm, job_id: str) -> list[int]:
    """Wait until the batch script runs (after its prolog) and return the job's GPUs as it printed them."""
    path = slurm.jobs_dir / f"slurm-{job_id}.out"
    poll(f"job {job_id} to start", lambda: path.exists() and "GPUS=" in path.read_text(), timeout=30)
    return [int(g) for g in path.read_text().split("GPUS=", 1)[1].split()[0].split(",")]


def test_prolog_applies_the_jobs_setting_on_its_gpus_only_and_epilog_resets(
    local_slurm: LocalSlurm, agent: tuple[AgentClient, Path]
) -> None:
    slurm = local_slurm
    client, state_file = agent
    default = limits(client)
    high = gpus(client)[0]["power_limit_range_w"][1]
    backend = SlurmBackend(runner=subprocess_runner(env=slurm.env), retry_wait_s=0.1)
    # Two jobs on gpu2 at once: one with a power limit, one without (its prolog must change nothing).
    tuned = sbatch(slurm, "--hold", "--gres=gpu:a100:2", "--wrap", JOB)
    plain = sbatch(slurm, "--hold", "--gres=gpu:a100:2", "--wrap", JOB)
    with cancelled_after(slurm, tuned, plain):
        backend.set_gpu_setting(tuned, ["gpu2"], GpuSetting(power_limit_fraction=0.6))
        for job_id in (tuned, plain):
            slurm.run(["scontrol", "update", f"jobid={job_id}", "nodelist=gpu2"])
        slurm.run(["scontrol", "release", f"{tuned},{plain}"])
        tuned_gpus, plain_gpus = started(slurm, tuned), started(slurm, plain)
        assert len(tuned_gpus) == 2 and sorted(tuned_gpus + plain_gpus) == list(range(GPUS))
        # The batch script starts only after its prolog has returned: the limit is already set.
        during = gpus(client)
        for g in tuned_gpus:
            assert during[g]["power_limit_w"] == pytest.approx(0.6 * high, abs=1)
        for g in plain_gpus:
            assert during[g]["power_limit_w"] == default[g] and during[g]["original_power_limit_w"] is None
        on_file = read_state_file(state_file)["gpus"]  # what the fake NVML holds
        for g in tuned_gpus:
            assert on_file[g]["power_limit_mw"] == pytest.approx(0.6 * high * 1000, abs=1000)
        for job_id in (tuned, plain):
            done = poll(f"job {job_id} to end", state_is(slurm, job_id, "COMPLETED", "FAILED"))
            assert done["job_state"] == "COMPLETED"
        poll("the epilog to reset the GPUs", lambda: limits(client) == default, timeout=15)
    log = hook_log(slurm, tuned, plain)
    assert f"agent-job start {tuned}: GPU {tuned_gpus[0]}: power limit {0.6 * high:.0f} W" in log, log
    assert f"agent-job end {tuned}: GPU {tuned_gpus[0]}: reset" in log, log
    assert f"agent-job start {plain}: GPU" not in log and "error" not in log, log
    # Both jobs were measured from prolog to epilog on exactly their GPUs (--record-profiles reads these windows).
    assert f"agent-job start {plain}: measuring GPUs {','.join(map(str, plain_gpus))}" in log, log
    windows = {w["jobs"][0]["job_id"]: w for w in client.windows(0)["windows"] if len(w["jobs"]) == 1}
    assert windows[tuned]["gpus"] == sorted(tuned_gpus) and windows[plain]["gpus"] == sorted(plain_gpus)
    assert windows[tuned]["window_s"] >= 3 and windows[tuned]["energy_j"] > 0  # the job sleeps 3 s


def test_a_job_runs_and_completes_when_the_agent_is_down(hook: LocalSlurm, tmp_path: Path) -> None:
    slurm = hook
    dead = tmp_path / "agent.sock"  # no agent: no socket
    slurm.set_agent_socket(dead)
    job_id = sbatch(slurm, "--hold", "--gres=gpu:a100:2", "--comment", "wattsched-gpu:power_limit_fraction=0.6",
                    "--wrap", "echo ran")  # fmt: skip
    with cancelled_after(slurm, job_id):
        slurm.run(["scontrol", "update", f"jobid={job_id}", "nodelist=gpu1"])
        slurm.run(["scontrol", "release", job_id])
        done = poll("the job to complete", state_is(slurm, job_id, "COMPLETED", "FAILED"), timeout=30)
        assert done["job_state"] == "COMPLETED" and output(slurm, job_id).strip() == "ran"
        slurm.wait_idle(["gpu1"], timeout=20)  # not drained by a failed prolog
    log = hook_log(slurm, job_id)
    assert f"error: agent-job start {job_id}: agent at {dead} unreachable: no such socket" in log, log
    assert f"error: agent-job end {job_id}:" in log
