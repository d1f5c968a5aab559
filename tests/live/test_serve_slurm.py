"""wattsched's live Slurm backend on a real local Slurm (no mocks): placements match the simulator's, gangs, a
powered-down node woken by its job, restarts of slurmctld and of wattsched, unreadable output and failed calls.

Jobs are submitted held (``sbatch --hold``) and placed by the same policy objects the simulator runs. Each test
cancels what it submitted and leaves every node idle and powered up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.live.test_local_slurm import job, poll
from tests.slurm_testbed import LocalSlurm
from wattsched.backends.driver import LiveDriver
from wattsched.backends.simcheck import DEFAULT_SCRIPT, ScriptedJob, compare, sbatch_args
from wattsched.backends.slurm.backend import BackendError, SlurmBackend, expand_hostlist, subprocess_runner
from wattsched.backends.store import JobStore
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import build_scheduler

pytestmark = pytest.mark.slurm

# The sim-to-live script runs at half its length here (32 s instead of 64.5 s), polled every 0.1 s: the live tests'
# share of CI stays small, and completions still come >= 1.5 s apart, fifteen polls.
TIME_SCALE = 0.5


def submit(slurm: LocalSlurm, gpus: int, seconds: float, nodes: int = 1, payload: str = "") -> str:
    out = slurm.run(sbatch_args(ScriptedJob(gpus, seconds, nodes), payload or None)).stdout
    return out.strip().split(";")[0]


def driver_for(slurm: LocalSlurm, placement: str, store: JobStore, runner=None) -> LiveDriver:
    backend = SlurmBackend(runner=runner or subprocess_runner(env=slurm.env), retry_wait_s=0.2)
    cfg = SimulationConfig(queue="fifo", placement=placement)
    return LiveDriver(backend, build_scheduler(cfg.scheduler_config(), None), store)


def serve_until(driver: LiveDriver, done: Callable[[], bool], timeout: float, interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"jobs not finished after {timeout:.0f} s")
        driver.step()
        time.sleep(interval)


def finished(slurm: LocalSlurm, ids: Sequence[str]) -> Callable[[], bool]:
    def check() -> bool:
        states = {str(j["job_id"]): j["job_state"] for j in slurm.json(["squeue"])["jobs"]}
        return all(states.get(i) in ("COMPLETED", "FAILED", "CANCELLED") for i in ids)

    return check


@pytest.fixture
def cleanup(local_slurm):
    submitted: list[str] = []
    yield submitted
    if submitted:
        local_slurm.run(["scancel", *submitted], check=False)
    local_slurm.run(["scontrol", "update", "nodename=gpu[1-3]", "state=power_up"], check=False)


@pytest.mark.parametrize("placement", ["best-fit", "fgd"])
def test_live_placements_and_start_order_match_the_simulator(local_slurm, cleanup, tmp_path, placement):
    durations = {}
    for j in DEFAULT_SCRIPT:  # at half the script's length, completions are >= 1.5 s apart in the simulator
        job_id = submit(local_slurm, j.gpus_per_node, j.duration_s * TIME_SCALE, j.num_nodes)
        cleanup.append(job_id)
        durations[job_id] = j.duration_s * TIME_SCALE
    driver = driver_for(local_slurm, placement, JobStore(tmp_path / "state.sqlite"))
    serve_until(driver, finished(local_slurm, list(durations)), timeout=150, interval=0.1)
    driver.step()  # the mirror sees the last completions
    table = compare(driver, SimulationConfig(queue="fifo", placement=placement).scheduler, durations)
    assert table.same_nodes.all(), table.to_string()
    assert table.same_rank.all(), table.to_string()
    # where Slurm really ran them: the nodes the policy chose; the 2-node gang started on both at once
    for row in table.itertuples():
        record = job(local_slurm, row.job)
        assert record["job_state"] == "COMPLETED"
        assert ",".join(sorted(expand_hostlist(record["nodes"]))) == row.live_nodes
    gang = table[table.gpus == 8].iloc[0]
    assert len(gang.live_nodes.split(",")) == 2


def test_a_job_sent_to_a_powered_down_node_wakes_it(local_slurm, cleanup, tmp_path):
    local_slurm.run(["scontrol", "update", "nodename=gpu3", "state=power_down"])
    poll("gpu3 powered down", lambda: "POWERED_DOWN" in local_slurm.node_states()["gpu3"][1], timeout=40)
    ids = [submit(local_slurm, 4, 2) for _ in range(3)]  # three whole nodes: one has to be gpu3
    cleanup.extend(ids)
    driver = driver_for(local_slurm, "best-fit", JobStore(tmp_path / "state.sqlite"))
    serve_until(driver, finished(local_slurm, ids), timeout=90)
    assert {job(local_slurm, i)["nodes"] for i in ids} == {"gpu1", "gpu2", "gpu3"}
    assert all(job(local_slurm, i)["job_state"] == "COMPLETED" for i in ids)
    # Slurm ran the testbed's resume program for gpu3 (docs/live-slurm.md §2.4), at once; the job then waited
    # in CONFIGURING until slurmctld's 30 s pass
    assert "resume gpu3" in (local_slurm.base / "log" / "power.log").read_text()
    local_slurm.wait_idle(["gpu3"], timeout=30)


def test_restarts_of_slurmctld_and_of_wattsched_lose_no_job_and_start_none_twice(
    local_slurm, cleanup, tmp_path
):
    """Five rounds; in each, slurmctld and then wattsched are killed and started again mid-run. Every job writes
    one line per run to its own file: exactly one line each means no job was lost or started twice."""
    out = Path(local_slurm.jobs_dir)
    db = tmp_path / "state.sqlite"
    for round_ in range(5):
        ids = [submit(local_slurm, g, 0, payload=f"echo run >> {out}/run-{round_}-$SLURM_JOB_ID; sleep {s}")
               for g, s in [(2, 3), (4, 2), (1, 4), (3, 2), (2, 2), (4, 3)]]  # fmt: skip
        cleanup.extend(ids)
        driver = driver_for(local_slurm, "best-fit", JobStore(db))
        for _ in range(6):
            driver.step()
            time.sleep(0.25)
        local_slurm.stop_slurmctld()
        quick = SlurmBackend(runner=subprocess_runner(env=local_slurm.env, timeout_s=5), retries=1)
        with pytest.raises(BackendError):  # what the loop logs and retries while the controller is down
            quick.observe()
        local_slurm.start_slurmctld()
        driver.store.close()
        driver = driver_for(local_slurm, "best-fit", JobStore(db))  # a new wattsched, the same record
        serve_until(driver, finished(local_slurm, ids), timeout=60)
        for i in ids:
            assert job(local_slurm, i)["job_state"] == "COMPLETED", i
            assert (out / f"run-{round_}-{i}").read_text().count("run") == 1, f"job {i} ran more than once"
    assert max(JobStore(db).starts().values()) == 1


def test_unreadable_json_and_failed_scontrol_are_logged_and_retried(local_slurm, cleanup, tmp_path, caplog):
    real = subprocess_runner(env=local_slurm.env)
    faults = {"squeue": 2, "scontrol update": 3}

    def flaky(argv: Sequence[str]) -> str:
        key = next((k for k in faults if " ".join(argv).startswith(k) and faults[k] > 0), None)
        if key == "squeue":
            faults[key] -= 1
            return real(argv)[:100]  # cut short: not JSON
        if key is not None:
            faults[key] -= 1
            raise BackendError(
                f"`{' '.join(argv)}` exited 1: slurm_update error: Unable to contact slurm controller"
            )
        return real(argv)

    ids = [submit(local_slurm, 2, 2) for _ in range(3)]
    cleanup.extend(ids)
    caplog.set_level(logging.WARNING)
    driver = driver_for(local_slurm, "best-fit", JobStore(tmp_path / "state.sqlite"), runner=flaky)
    serve_until(driver, finished(local_slurm, ids), timeout=60)
    assert "squeue --json` printed unreadable JSON" in caplog.text
    assert "scontrol update jobid=" in caplog.text and "retried at the next decision" in caplog.text
    assert all(job(local_slurm, i)["job_state"] == "COMPLETED" for i in ids)


def test_an_allocation_policy_preempts_requeues_and_resizes_on_real_slurm(local_slurm, cleanup, tmp_path):
    """The scripted policy (tests/scripted_policy.py) runs "long" on gpu1, preempts it for "urgent" (requeuehold)
    and puts it back on gpu2 + gpu3 with one GPU each (a resize): "long" runs twice, the second time in its new
    shape, without waiting out the begin time a requeue sets."""
    from tests.scripted_policy import scripted_scheduler

    out = Path(local_slurm.jobs_dir)
    payload = f"echo $SLURM_JOB_NODELIST $SLURM_JOB_NUM_NODES >> {out}/runs-$SLURM_JOB_ID; sleep 4"
    long_job = submit(local_slurm, 2, 0, payload=payload)
    urgent = submit(local_slurm, 4, 2)
    cleanup.extend([long_job, urgent])
    backend = SlurmBackend(runner=subprocess_runner(env=local_slurm.env), retry_wait_s=0.2)
    store = JobStore(tmp_path / "state.sqlite")
    driver = LiveDriver(backend, scripted_scheduler(), store, allow_resize=True)
    serve_until(driver, finished(local_slurm, [long_job, urgent]), timeout=60)
    assert (out / f"runs-{long_job}").read_text().split("\n")[:2] == ["gpu1 1", "gpu[2-3] 2"]
    record = job(local_slurm, long_job)
    assert record["job_state"] == "COMPLETED" and record["tres_per_node"] == "gres:gpu:a100:1"
    assert record["restart_cnt"] == 1
    assert job(local_slurm, urgent)["nodes"] == "gpu1"
    assert store.starts() == {long_job: 2, urgent: 1}


def test_the_idle_timeout_manager_powers_nodes_down_and_up_through_slurm(local_slurm, cleanup, tmp_path):
    """wattsched's right-sizing instead of Slurm's SuspendTime: idle nodes go down after the timeout
    (scontrol power_down), a waiting job boots one node (power_up) and runs there once it is up."""
    from wattsched.core.states import OFF
    from wattsched.policies.power import IdleTimeout

    backend = SlurmBackend(runner=subprocess_runner(env=local_slurm.env), retry_wait_s=0.2)
    sched = build_scheduler(SimulationConfig(queue="fifo", placement="best-fit").scheduler, None)
    driver = LiveDriver(backend, sched, JobStore(tmp_path / "state.sqlite"), power_manager=IdleTimeout(2))
    serve_until(driver, lambda: driver.cluster is not None and (driver.cluster.power_state == OFF).all(), 60)
    assert all("POWERED_DOWN" in flags for _, flags in local_slurm.node_states().values())
    ids = [submit(local_slurm, 4, 2)]
    cleanup.extend(ids)
    serve_until(driver, finished(local_slurm, ids), timeout=60)
    power = driver.cluster.power
    assert (power.boots, power.shutdowns) == (1, 3)
    ran_on = job(local_slurm, ids[0])["nodes"]
    assert "POWERED_DOWN" not in local_slurm.node_states()[ran_on][1]
    assert sum("POWERED_DOWN" in flags for _, flags in local_slurm.node_states().values()) == 2
    # leave every node up and idle for the next test
    local_slurm.run(["scontrol", "update", "nodename=gpu[1-3]", "state=power_up"])
    poll("nodes up", lambda: all(not flags for _, flags in local_slurm.node_states().values()), timeout=60)
