"""The live backend contract on the in-memory Slurm front end: parsing, the mirror, batching, failures, restarts and
the sim-to-live check. The same flows on a real Slurm are in tests/live/."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from wattsched.backends.base import JOB_RUNNING, JOB_STARTING, JOB_WAITING, NODE_OFF, NODE_ON, BackendError
from wattsched.backends.driver import LiveDriver, LiveMetrics
from wattsched.backends.simcheck import compare
from wattsched.backends.slurm.backend import SlurmBackend, expand_hostlist, job_obs, node_obs, parse_gres
from wattsched.backends.slurm.fake import FakeNode, FakeSlurm
from wattsched.backends.store import JobStore
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import build_scheduler

FIXTURES = Path(__file__).parents[1] / "fixtures" / "slurm"


def _driver(fake: FakeSlurm, store: JobStore, placement: str = "best-fit", metrics=None) -> LiveDriver:
    backend = SlurmBackend(runner=fake, retry_wait_s=0.0, clock=lambda: fake.now)
    cfg = SimulationConfig(queue="fifo", placement=placement)
    return LiveDriver(backend, build_scheduler(cfg.scheduler_config(), None), store, metrics=metrics)


def _run(fake: FakeSlurm, driver: LiveDriver, seconds: int, step_s: float = 1.0) -> None:
    for _ in range(int(seconds / step_s)):
        fake.advance(fake.now + step_s)
        driver.step()


def test_recorded_slurm_json_parses():
    nodes = [node_obs(n) for n in json.loads((FIXTURES / "sinfo_3nodes.json").read_text())["nodes"]]
    assert [(n.name, n.gpus, n.gpu_model, n.cpus, n.memory_mib, n.power) for n in nodes] == [
        (f"gpu{i}", 4, "a100", 8, 16000, NODE_ON) for i in (1, 2, 3)
    ]
    held, free = (
        job_obs(j) for j in json.loads((FIXTURES / "squeue_held_and_gang.json").read_text())["jobs"]
    )
    assert (held.state, held.held, held.num_gpu, held.gpu_model, held.time_limit_s) == (
        JOB_WAITING, True, 2, "a100", 300.0,
    )  # fmt: skip
    assert (free.state, free.held, free.num_nodes, free.gpus_per_node) == (JOB_STARTING, False, 2, 4)
    assert free.time_limit_s == float("inf")


def test_host_lists_gres_and_power_flags():
    assert expand_hostlist("gpu[1-3,5],cpu01,node[08-10]") == [
        "gpu1", "gpu2", "gpu3", "gpu5", "cpu01", "node08", "node09", "node10",
    ]  # fmt: skip
    assert parse_gres("gres:gpu:a100:2") == ("a100", 2)
    assert parse_gres("gpu:4(S:0)") == ("", 4)
    assert parse_gres("gpu:h100:8(S:0-1),shard:16") == ("h100", 8)
    assert parse_gres("") == ("", 0)
    raw = {
        "name": "n1",
        "state": "idle",
        "state_flags": ["POWERED_DOWN"],
        "cpus": 8,
        "real_memory": 1,
        "gres": "",
    }
    assert node_obs(raw).power == NODE_OFF
    running = {"job_id": 7, "job_state": "RUNNING", "nodes": "gpu[1-2]", "node_count": 2,
               "tres_per_node": "gres:gpu:4", "time_limit": {"set": True, "infinite": False, "number": 2}}  # fmt: skip
    obs = job_obs(running)
    assert (obs.state, obs.nodes, obs.time_limit_s) == (JOB_RUNNING, ("gpu1", "gpu2"), 120.0)


def test_jobs_start_where_the_policy_places_them_once_each():
    fake = FakeSlurm.uniform(3)
    for g in (1, 2, 1, 4, 3, 2, 1, 1):
        fake.submit(g, duration_s=20)
    gang = fake.submit(4, num_nodes=2, duration_s=5)
    driver = _driver(fake, JobStore(":memory:"))
    _run(fake, driver, 90)
    assert all(j.state == "COMPLETED" and j.releases == 1 for j in fake.jobs.values())
    assert sorted(fake.jobs[int(gang)].nodes) == ["gpu2", "gpu3"]  # a 2-node gang, both nodes at once
    # fifo: starts in submission order; the first decision packs gpu1 (best fit) and leaves the 4-GPU job gpu2
    assert fake.order == sorted(fake.order)
    assert fake.jobs[1].nodes == fake.jobs[2].nodes == fake.jobs[3].nodes == ["gpu1"]


@pytest.mark.parametrize("placement", ["best-fit", "fgd"])
def test_live_and_simulated_runs_place_and_start_alike(placement):
    fake = FakeSlurm.uniform(3)
    durations = {}
    for k, (g, d, n) in enumerate([(1, 7, 1), (2, 13, 1), (4, 5, 1), (1, 11, 1), (3, 17, 1), (4, 4, 2),
                                   (2, 9, 1), (1, 3, 1), (2, 6, 1), (1, 15, 1), (3, 8, 1), (1, 2, 1)]):  # fmt: skip
        durations[fake.submit(g, num_nodes=n, duration_s=d, name=f"j{k}")] = float(d)
    driver = _driver(fake, JobStore(":memory:"), placement)
    _run(fake, driver, 120, step_s=0.5)
    table = compare(driver, SimulationConfig(queue="fifo", placement=placement).scheduler, durations)
    assert table.same_nodes.all(), table.to_string()
    assert table.same_rank.all(), table.to_string()


def test_a_powered_down_node_is_woken_by_the_job_sent_there():
    fake = FakeSlurm([FakeNode("gpu1", 4, powered=False)], resume_s=30)
    job = fake.submit(2, duration_s=5)
    driver = _driver(fake, JobStore(":memory:"))
    _run(fake, driver, 10)
    assert fake.jobs[int(job)].state == "PENDING" and fake.jobs[int(job)].required == ["gpu1"]
    _run(fake, driver, 40)
    assert fake.jobs[int(job)].state == "COMPLETED"


def test_unreadable_output_and_failed_calls_are_logged_and_retried(caplog):
    fake = FakeSlurm.uniform(1)
    jobs = [fake.submit(1, duration_s=5) for _ in range(3)]
    metrics = LiveMetrics()
    driver = _driver(fake, JobStore(":memory:"), metrics=metrics)
    fake.garble.append("squeue")  # a malformed squeue --json
    # every retry of one pin fails: that start fails and is retried at the next decision
    fake.fail.extend([(("scontrol", "update", f"jobid={jobs[1]}"), "Invalid node name specified")] * 3)
    fake.fail.extend([(("scontrol", "release"), "Unable to contact slurm controller")] * 4)  # batch + per job
    _run(fake, driver, 30)
    assert "unreadable JSON" in caplog.text and "squeue --json" in caplog.text
    assert "scontrol update jobid=" in caplog.text and "retried at the next decision" in caplog.text
    assert all(fake.jobs[int(j)].state == "COMPLETED" and fake.jobs[int(j)].releases == 1 for j in jobs)
    assert metrics.errors._value.get() >= 1


def test_restarting_wattsched_mid_run_loses_no_job_and_starts_none_twice(tmp_path):
    fake = FakeSlurm.uniform(2)
    jobs = [fake.submit(g, duration_s=d) for g, d in [(2, 20), (4, 30), (1, 10), (3, 25), (2, 5), (4, 8)]]
    db = tmp_path / "state.sqlite"
    first = _driver(fake, JobStore(db))
    _run(fake, first, 12)
    first.store.close()
    second = _driver(fake, JobStore(db))  # a new process: an empty mirror, the same record
    _run(fake, second, 120)
    assert all(fake.jobs[int(j)].state == "COMPLETED" and fake.jobs[int(j)].releases == 1 for j in jobs)
    assert max(JobStore(db).starts().values()) == 1


def test_backend_errors_name_the_command():
    def broken(argv):
        raise BackendError(
            f"`{' '.join(argv)}` exited 1: slurm_load_jobs error: Unable to contact slurm controller"
        )

    backend = SlurmBackend(runner=broken, retries=2, retry_wait_s=0.0)
    with pytest.raises(BackendError, match=r"(squeue|sinfo) --json"):
        backend.observe()
    assert backend.failures == 1 and backend.calls == 2


def test_serve_check_writes_the_side_by_side_report(tmp_path):
    from typer.testing import CliRunner

    from wattsched.cli.main import app

    res = CliRunner().invoke(app, ["serve", "check", "--placement", "best-fit", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "identical placements and start order" in res.output
    report = (tmp_path / "report.md").read_text()
    assert "same nodes: 12/12; same start order: 12/12" in report and "Decision latency" in report
    assert (tmp_path / "compare.csv").read_text().startswith("job,gpus,live_nodes,sim_nodes")


def test_a_running_job_the_mirror_has_no_room_for_is_never_started_again(caplog):
    from wattsched.backends.base import JobObs, NodeObs, Observation
    from wattsched.backends.live import LiveCluster
    from wattsched.core.states import STATUS_RUNNING

    def obs(t: float) -> Observation:
        node = NodeObs("gpu1", 4, "a100", 8, 16000, NODE_ON)
        jobs = (JobObs("1", "a", JOB_RUNNING, 1, 4, "a100", 1, 0, 0.0, 600.0, ("gpu1",)),
                JobObs("2", "b", JOB_RUNNING, 1, 2, "a100", 1, 0, 0.0, 600.0, ("gpu1",)))  # fmt: skip
        return Observation(t, (node,), jobs)

    calls = []
    backend = SlurmBackend(runner=lambda argv: calls.append(argv) or "", retry_wait_s=0.0)
    sched = build_scheduler(SimulationConfig(queue="fifo", placement="best-fit").scheduler, None)
    cluster = LiveCluster(backend, sched, obs(0.0), JobStore(":memory:"))
    for t in (1.0, 2.0, 3.0):
        cluster.update(obs(t))
        cluster.decide()
        cluster.flush()
    assert cluster.status[cluster.index["2"]] == STATUS_RUNNING and cluster.view.queue_length == 0
    assert calls == []  # no scontrol: job 2 runs already
    assert caplog.text.count("no room for it there") == 1


def _calls(fake: FakeSlurm, *prefix: str) -> list[list[str]]:
    return [c for c in fake.calls if tuple(c[: len(prefix)]) == prefix]


def test_an_allocation_policy_preempts_requeues_and_resizes_through_scontrol():
    from tests.scripted_policy import scripted_scheduler

    fake = FakeSlurm.uniform(3)
    long_job = fake.submit(2, duration_s=20, name="long")
    urgent = fake.submit(4, duration_s=5, name="urgent")
    backend = SlurmBackend(runner=fake, retry_wait_s=0.0, clock=lambda: fake.now)
    store = JobStore(":memory:")
    driver = LiveDriver(backend, scripted_scheduler(), store, allow_resize=True)
    _run(fake, driver, 40)
    assert _calls(fake, "scontrol", "requeuehold") == [["scontrol", "requeuehold", long_job]]
    # the second start of "long": its new shape, its new nodes and (the requeue pushed it back) a begin of now
    pins = _calls(fake, "scontrol", "update", f"jobid={long_job}")
    assert pins[-1] == ["scontrol", "update", f"jobid={long_job}", "NumNodes=2-2", "TresPerNode=gres:gpu:a100:1",
                        "nodelist=gpu2,gpu3", "StartTime=now"]  # fmt: skip
    assert fake.jobs[int(urgent)].nodes == ["gpu1"] and fake.jobs[int(urgent)].state == "COMPLETED"
    done = fake.jobs[int(long_job)]
    assert (done.state, done.nodes, done.gpus_per_node, done.releases) == (
        "COMPLETED",
        ["gpu2", "gpu3"],
        1,
        2,
    )
    assert store.starts() == {long_job: 2, urgent: 1}
    # started again well before the 121 s a requeue would have cost
    assert fake.order == [int(long_job), int(urgent), int(long_job)]


def test_without_resize_allowed_a_new_shape_is_left_waiting(caplog):
    from tests.scripted_policy import scripted_scheduler

    fake = FakeSlurm.uniform(3)
    long_job = fake.submit(2, duration_s=20, name="long")
    fake.submit(4, duration_s=5, name="urgent")
    backend = SlurmBackend(runner=fake, retry_wait_s=0.0, clock=lambda: fake.now)
    driver = LiveDriver(backend, scripted_scheduler(), JobStore(":memory:"))
    _run(fake, driver, 30)
    job = fake.jobs[int(long_job)]
    assert job.state == "PENDING" and job.held and job.gpus_per_node == 2
    # The one validator refuses the resize, as it would in a simulation without the capability.
    assert (
        "needs resizing jobs (another GPU count or shape than asked for), which this backend does not offer"
        in (caplog.text)
    )


def test_a_requeued_job_is_let_go_only_once_its_old_run_is_seen_gone():
    from wattsched.backends.base import JobObs, NodeObs, Observation
    from wattsched.backends.live import LiveCluster
    from wattsched.core.cluster import MILLI
    from wattsched.policies.contract import Target

    calls = []
    backend = SlurmBackend(runner=lambda argv: calls.append(argv) or "", retry_wait_s=0.0, clock=lambda: 3.0)
    sched = build_scheduler(SimulationConfig(queue="fifo", placement="best-fit").scheduler, None)
    node = NodeObs("gpu1", 4, "a100", 8, 16000, NODE_ON)

    def obs(t: float, state: str, ending: bool = False, nodes=("gpu1",)) -> Observation:
        job = JobObs("7", "a", state, 1, 2, "a100", 1, 0, 0.0, 600.0, nodes, held=state == JOB_WAITING,
                     ending=ending, restarts=int(ending or state == JOB_WAITING))  # fmt: skip
        return Observation(t, (node,), (job,))

    cluster = LiveCluster(backend, sched, obs(0.0, JOB_RUNNING), JobStore(":memory:"))
    cluster.update(obs(1.0, JOB_RUNNING))
    cluster.actions.move(0, Target(((0, (2, 3), MILLI, 0),)))
    assert calls == [["scontrol", "requeuehold", "7"]]
    assert cluster.flush() == 0  # not observed since the requeue
    cluster.update(obs(2.0, JOB_WAITING, ending=True, nodes=()))  # the old run winds down
    assert cluster.flush() == 0 and len(calls) == 1
    cluster.update(obs(3.0, JOB_WAITING, nodes=()))
    backend._eligible["7"] = (1, 123.0)  # squeue's eligible_time: the requeue pushed it 120 s ahead
    assert cluster.flush() == 1
    assert calls[1] == ["scontrol", "update", "jobid=7", "nodelist=gpu1", "StartTime=now"]
    assert calls[2] == ["scontrol", "release", "7"]


def test_the_idle_timeout_manager_drives_node_power_through_scontrol():
    from wattsched.core.states import BOOTING, OFF, ON
    from wattsched.policies.power import IdleTimeout

    fake = FakeSlurm.uniform(3, resume_s=5)
    backend = SlurmBackend(runner=fake, retry_wait_s=0.0, clock=lambda: fake.now)
    sched = build_scheduler(SimulationConfig(queue="fifo", placement="best-fit").scheduler, None)
    metrics = LiveMetrics()
    driver = LiveDriver(backend, sched, JobStore(":memory:"), power_manager=IdleTimeout(10), metrics=metrics)
    _run(fake, driver, 15)
    c = driver.cluster
    assert not any(n.powered for n in fake.nodes.values()) and (c.power_state == OFF).all()
    assert metrics.nodes.labels(power_state="off")._value.get() == 3
    job = fake.submit(4, duration_s=8)
    _run(fake, driver, 2)
    # one node booted for the job (the first in the policies' tie-break order), and nothing placed on it yet
    assert (c.power_state == BOOTING).sum() == 1 and fake.jobs[int(job)].state == "PENDING"
    assert len(_calls(fake, "scontrol", "update")) == 2  # the power-down of all three, one power-up
    _run(fake, driver, 10)
    booted = str(c.spec.node_names[int(np.flatnonzero(c.power_state == ON)[0])])
    started = fake.jobs[int(job)]
    assert (
        started.nodes == [booted] and started.start_time >= started.submit_time + fake.resume_s
    )  # after the boot
    _run(fake, driver, 25)  # the job ends, and its node goes off after the idle timeout
    assert fake.jobs[int(job)].state == "COMPLETED" and not any(n.powered for n in fake.nodes.values())
    assert (driver.cluster.power.boots, driver.cluster.power.shutdowns) == (1, 4)


@pytest.mark.parametrize("policy", ["tiresias", "optimus-greedy", "powerflow", "zeus-pl", "hkbu-dvfs"])
def test_allocation_policies_run_live_unchanged(policy, caplog):
    """The simulator's allocation policies on the in-memory Slurm: every job completes, each started as the policy
    placed it (jobs carry sbatch --deadline for the policies that plan by deadlines)."""
    fake = FakeSlurm.uniform(3)
    for g, d in [(2, 20), (4, 30), (1, 10), (3, 25), (2, 5), (4, 8), (1, 40)]:
        fake.submit(g, duration_s=d, time_limit_min=1, deadline=fake.now + 3600)
    backend = SlurmBackend(runner=fake, retry_wait_s=0.0, clock=lambda: fake.now)
    scheduler = build_scheduler(SimulationConfig(allocation=policy, round_s=5).scheduler, None)
    driver = LiveDriver(backend, scheduler, JobStore(":memory:"), allow_resize=True)
    _run(fake, driver, 300)
    assert [j.state for j in fake.jobs.values()] == ["COMPLETED"] * 7
    assert "decision cut short" not in caplog.text


def test_a_policy_that_shares_gpus_is_refused_on_slurm_before_anything_starts():
    """EaCO co-locates jobs on shared GPUs; Slurm's GPUs are exclusive: refused at start, nothing called."""
    from wattsched.policies.contract import MissingCapability

    fake = FakeSlurm.uniform(3)
    backend = SlurmBackend(runner=fake, retry_wait_s=0.0, clock=lambda: fake.now)
    with pytest.raises(MissingCapability, match="policy 'eaco' needs GPU sharing"):
        LiveDriver(
            backend,
            build_scheduler(SimulationConfig(allocation="eaco").scheduler, None),
            JobStore(":memory:"),
        )
    assert fake.calls == []


def test_serve_slurm_names_the_power_choices_on_a_bad_power_option():
    from typer.testing import CliRunner

    from wattsched.cli.main import app

    res = CliRunner().invoke(app, ["serve", "slurm", "--power", "sometimes", "--metrics-port", "0"])
    assert res.exit_code != 0
    assert "--power: slurm, none or one of" in res.output and "idle-timeout" in res.output


def _simulated_script(script, placement: str):
    """The scripted jobs as the sim-to-live check simulates them: (placements as node-name tuples, end times)."""
    from wattsched.backends.simcheck import simulate_like

    fake = FakeSlurm.uniform(3)
    durations = {fake.submit(j.gpus_per_node, num_nodes=j.num_nodes, duration_s=j.duration_s): j.duration_s
                 for j in script}  # fmt: skip
    driver = _driver(fake, JobStore(":memory:"), placement)
    driver.step()  # the mirror holds every job, none started yet
    jobs, outcome = simulate_like(
        driver, SimulationConfig(queue="fifo", placement=placement).scheduler, durations
    )
    names = driver.cluster.spec.node_names
    placed = [tuple(sorted(str(names[n]) for n, *_ in p)) for p in outcome.placements]
    return placed, np.asarray(outcome.start_s) + jobs.duration_s


@pytest.mark.parametrize("placement", ["best-fit", "fgd"])
def test_the_sim_to_live_script_has_no_near_simultaneous_completions(placement):
    """The live check compares orders of events; it is only fair if the simulator's completions are far apart
    and a slow job launch (up to 1.5 s on any job) would not change where later jobs go."""
    from wattsched.backends.simcheck import DEFAULT_SCRIPT, ScriptedJob

    placed, end = _simulated_script(DEFAULT_SCRIPT, placement)
    assert np.diff(np.sort(end)).min() >= 3.0
    rng = np.random.default_rng(7)
    for _ in range(8):
        delayed = [ScriptedJob(j.gpus_per_node, j.duration_s + float(rng.uniform(0, 1.5)), j.num_nodes)
                   for j in DEFAULT_SCRIPT]  # fmt: skip
        assert _simulated_script(delayed, placement)[0] == placed
