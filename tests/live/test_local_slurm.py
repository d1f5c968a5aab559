"""The local test Slurm itself, on real daemons (no mocks): what the live Slurm backend relies on.

Each test leaves the shared testbed as it found it: no jobs left, all nodes idle and powered up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.slurm_testbed import LocalSlurm

pytestmark = pytest.mark.slurm


def poll(what: str, fn: Callable[[], Any], timeout: float = 20.0, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def job(slurm: LocalSlurm, job_id: str) -> dict[str, Any]:
    """The job's record from ``squeue --json`` (finished jobs stay listed for MinJobAge, 300 s)."""
    # 22.05's --json prints every job and ignores the filters (--jobs, --states): filter here.
    jobs = [j for j in slurm.json(["squeue"])["jobs"] if str(j["job_id"]) == job_id]
    assert len(jobs) == 1, f"job {job_id}: {len(jobs)} records"
    return jobs[0]


def state_is(slurm: LocalSlurm, job_id: str, *states: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        record = job(slurm, job_id)
        return record if record["job_state"] in states else None

    return check


def sbatch(slurm: LocalSlurm, *args: str) -> str:
    return slurm.run(["sbatch", "--parsable", *args]).stdout.strip().split(";")[0]


def output(slurm: LocalSlurm, job_id: str) -> str:
    return (slurm.jobs_dir / f"slurm-{job_id}.out").read_text()


@contextmanager
def cancelled_after(slurm: LocalSlurm, *job_ids: str) -> Iterator[None]:
    try:
        yield
    finally:
        slurm.run(["scancel", *job_ids], check=False)


def test_three_idle_nodes_with_four_a100(local_slurm: LocalSlurm) -> None:
    nodes = {n["name"]: n for n in local_slurm.json(["sinfo"])["nodes"]}
    assert sorted(nodes) == ["gpu1", "gpu2", "gpu3"]
    for node in nodes.values():
        assert node["state"] == "idle"
        assert "POWERED_DOWN" not in node["state_flags"]
        assert node["gres"] == "gpu:a100:4"
        assert node["cpus"] == 8


def test_held_job_is_placed_by_nodelist_and_release(local_slurm: LocalSlurm) -> None:
    slurm = local_slurm
    job_id = sbatch(slurm, "--hold", "--gres=gpu:a100:2", "--wrap", "echo CVD=$CUDA_VISIBLE_DEVICES; sleep 2")
    with cancelled_after(slurm, job_id):
        # A held job is never started by Slurm itself: still pending after a scheduling pass.
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            record = job(slurm, job_id)
            assert record["job_state"] == "PENDING", record["job_state"]
            assert record["state_reason"] == "JobHeldUser"
            time.sleep(0.3)
        slurm.run(["scontrol", "update", f"jobid={job_id}", "nodelist=gpu2"])
        slurm.run(["scontrol", "release", job_id])
        running = poll("the released job to run", state_is(slurm, job_id, "RUNNING", "COMPLETED"))
        assert running["nodes"] == "gpu2"
        assert running["tres_per_node"] == "gres:gpu:a100:2"
        shown = slurm.run(["scontrol", "show", "job", job_id]).stdout
        assert " NodeList=gpu2" in shown
        poll("the job to complete", state_is(slurm, job_id, "COMPLETED"), timeout=20)
        devices = output(slurm, job_id).split("CVD=")[1].split()[0]
        assert len(devices.split(",")) == 2, devices


def test_two_node_gang_starts_on_both_nodes_at_once(local_slurm: LocalSlurm) -> None:
    slurm = local_slurm
    step = "srun -l bash -c 'echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $(date +%s.%N)'; sleep 1"
    job_id = sbatch(slurm, "-N2", "--ntasks-per-node=1", "--gres=gpu:a100:4", "--wrap", step)
    with cancelled_after(slurm, job_id):
        done = poll("the gang job to complete", state_is(slurm, job_id, "COMPLETED", "FAILED"), timeout=30)
        assert done["job_state"] == "COMPLETED", output(slurm, job_id)
        assert done["node_count"] == 2
        lines = [line.split(":", 1)[1].split() for line in output(slurm, job_id).splitlines() if ":" in line]
        assert sorted(node for node, _, _ in lines) == sorted(
            slurm.run(["scontrol", "show", "hostnames", done["nodes"]]).stdout.split()
        )
        assert {devices for _, devices, _ in lines} == {"0,1,2,3"}
        starts = [float(t) for _, _, t in lines]
        assert max(starts) - min(starts) < 2.0, starts


def test_queued_jobs_survive_a_slurmctld_restart(local_slurm: LocalSlurm) -> None:
    slurm = local_slurm
    job_id = sbatch(slurm, "--hold", "--gres=gpu:a100:1", "--wrap", "echo after restart")
    with cancelled_after(slurm, job_id):
        slurm.stop_slurmctld()
        assert slurm.run(["scontrol", "ping"], check=False).returncode != 0
        slurm.start_slurmctld()
        record = job(slurm, job_id)
        assert (record["job_state"], record["state_reason"]) == ("PENDING", "JobHeldUser")
        assert record["tres_per_node"] == "gres:gpu:a100:1"
        slurm.run(["scontrol", "release", job_id])
        poll("the recovered job to complete", state_is(slurm, job_id, "COMPLETED"), timeout=20)
