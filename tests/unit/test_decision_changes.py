"""What a policy is told changed since its last decision (``view.changes``), the memo fixes that rely on it, and
the stall detector.

The case that prompted them: EaCO kept its last answer while the running and waiting job sets stayed the same, and a
node that had just booted does not change them, so under idle-timeout a late job waited for the next arrival (or,
alone, until the 3,650-simulated-day limit, minutes of wall time later).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.conftest import make_cluster, make_jobs
from wattsched.cli.main import app
from wattsched.core.cluster import MILLI
from wattsched.core.errors import WattschedError
from wattsched.core.states import STATUS_DONE
from wattsched.engine.power import NodePower, PowerStateConfig
from wattsched.engine.temporal import STALL_DECISIONS, Simulator
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.contract import AllocationPolicy, ChangeSet, ClusterView, Decision, Target
from wattsched.policies.power import power_manager_from_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BOOT_S = PowerStateConfig().boot_time_s


def _simulate(policy, jobs, spec, round_s=60.0, manager="idle-timeout", config=None):
    config = config or PowerStateConfig()
    power = NodePower(power_manager_from_config(manager, config), config) if manager else None
    sim = Simulator(
        jobs, spec, RoundScheduler(policy, round_s), np.random.default_rng(0), power=power,
        check_invariants=True,
    )  # fmt: skip
    return sim, sim.run()


def _first_free(view: ClusterView, job: int) -> Target | None:
    """One whole free GPU on a node that is on, or None."""
    state = view.state
    for node in np.flatnonzero(state.available).tolist():
        free = np.flatnonzero(state.gpu_left[node] == MILLI)
        if free.size:
            return Target(((node, (int(free[0]),), 0, 0),))
    return None


class StaleMemo(AllocationPolicy):
    """Starts waiting jobs on free GPUs, but keeps its last answer while the job sets are unchanged, as EaCO did:
    blind to a node that has just booted."""

    name = "test-stale-memo"
    decide_on_arrival = True
    decide_on_completion = True

    def __init__(self) -> None:
        self.signature = None

    def allocate(self, view: ClusterView) -> Decision:
        running, pending = view.running_jobs(), view.pending_jobs()
        signature = (running.tobytes(), pending.tobytes())
        if signature == self.signature:
            return Decision(keep=running)
        assign = {}
        for job in pending.tolist():
            target = _first_free(view, job)
            if target is None:
                break
            assign[job] = target
            break  # one start per decision: no scratch copy of the state needed
        self.signature = None if assign else signature
        return Decision(keep=running, assign=assign)


class MemoOnChanges(StaleMemo):
    """The same memo, dropped whenever the engine says something changed."""

    name = "test-memo-on-changes"

    def allocate(self, view: ClusterView) -> Decision:
        if view.changes.any:
            self.signature = None
        return super().allocate(view)


class Recorder(MemoOnChanges):
    name = "test-recorder"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, ChangeSet]] = []

    def allocate(self, view: ClusterView) -> Decision:
        self.seen.append((view.now, view.changes))
        return super().allocate(view)


def _late_jobs():
    return make_jobs([{"id": "a", "submit": 0.0, "duration": 3600.0}, {"id": "b", "submit": 100_000.0,
                      "duration": 3600.0}])  # fmt: skip


def _spec():
    return make_cluster([(2, "V100", 64_000, 262_144)] * 2)


# --- view.changes ------------------------------------------------------------------------------------------------
def test_a_policy_is_told_of_arrivals_completions_and_booted_nodes_but_not_of_its_own_actions():
    policy = Recorder()
    _sim, out = _simulate(policy, _late_jobs(), _spec())
    assert (out.status == STATUS_DONE).all()
    first_t, first = policy.seen[0]
    assert first_t == 0.0 and first.first and first.any
    # Right after its own start of job a, the next decision hears of nothing (its own action is not news).
    assert not policy.seen[1][1].any
    boot_done = [(t, c) for t, c in policy.seen if c.booted]
    assert boot_done and boot_done[0][0] == pytest.approx(100_000.0 + BOOT_S)
    assert boot_done[0][1].booted == 1 and boot_done[0][1].capacity
    arrival = next(c for t, c in policy.seen if t == 100_000.0)
    assert arrival.arrived == 1 and not arrival.booted
    off = [c for t, c in policy.seen if c.switched_off]
    assert off and sum(c.switched_off for c in off) == 2
    done = [c for t, c in policy.seen if c.left]
    assert done and done[0].released == 1
    # The late job starts as soon as the node that booted for it is on.
    assert out.start_s[1] == pytest.approx(100_000.0 + BOOT_S)


def test_a_memo_that_listens_to_the_changes_starts_the_late_job_once_its_node_booted():
    _sim, out = _simulate(MemoOnChanges(), _late_jobs(), _spec())
    assert out.start_s[1] == pytest.approx(100_000.0 + BOOT_S)


# --- EaCO: the case as a user met it ---------------------------------------------------------------------------
def test_eaco_under_idle_timeout_starts_each_late_job_once_a_node_has_booted(tmp_path, monkeypatch):
    monkeypatch.setenv("WATTSCHED_DATA", str(FIXTURES / "data"))
    out = tmp_path / "run"
    args = ["simulate", "--workload", str(FIXTURES / "jobs_late_gaps.csv"), "--cluster", "n8g8",
            "--allocation", "eaco", "--power-manager", "idle-timeout", "--out", str(out), "--quiet"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    jobs = pd.read_csv(out / "jobs.csv").set_index("job_id")
    assert jobs.loc["a", "start_s"] == 0.0
    # Every node went off in the long gaps; b and c each wait only for the node booted for them (300 s).
    for job, submit in (("b", 100_000.0), ("c", 200_000.0)):
        assert jobs.loc[job, "start_s"] == pytest.approx(submit + BOOT_S)
        assert jobs.loc[job, "jct_s"] == pytest.approx(3600.0 + BOOT_S)


# --- the stall detector ------------------------------------------------------------------------------------------
def test_a_memo_blind_to_booted_nodes_is_reported_as_a_stall_within_seconds_naming_policy_and_jobs():
    t0 = time.perf_counter()
    with pytest.raises(WattschedError) as err:
        _simulate(StaleMemo(), _late_jobs(), _spec())
    assert time.perf_counter() - t0 < 5.0
    msg = str(err.value)
    assert "simulation stalled" in msg and "'test-stale-memo'" in msg and "'idle-timeout'" in msg
    assert "(b)" in msg and "4 free GPU(s) on 2 of 2 node(s) on" in msg


class NeverStarts(AllocationPolicy):
    name = "test-never-starts"

    def allocate(self, view: ClusterView) -> Decision:
        return Decision(keep=view.running_jobs())


def test_a_policy_that_never_starts_anything_stalls_after_a_bounded_number_of_rounds():
    jobs = make_jobs([{"id": f"job{i}", "submit": float(i), "duration": 100.0} for i in range(8)])
    t0 = time.perf_counter()
    with pytest.raises(WattschedError) as err:
        _simulate(NeverStarts(), jobs, _spec(), round_s=300.0, manager=None)
    assert time.perf_counter() - t0 < 5.0
    msg = str(err.value)
    assert "'test-never-starts'" in msg and "job0, job1, job2, job3, job4, and 3 more" in msg
    assert f"{STALL_DECISIONS} decisions in a row" in msg
    # The round at 300 s sees the last arrivals, the last change: from the next one, STALL_DECISIONS rounds of
    # 300 s later it fires (about 8 simulated hours, not 3,650 days).
    assert f"(t = 600 s to {600 + 300 * (STALL_DECISIONS - 1)} s)" in msg


class WaitsOnPurpose(AllocationPolicy):
    """Holds every job until `start_at`, by deferring it (``defer``) or by a planned start (``wake_at``)."""

    name = "test-waits-on-purpose"
    decide_on_arrival = True

    def __init__(self, start_at: float, defer: bool) -> None:
        self.start_at, self.defer = start_at, defer

    def allocate(self, view: ClusterView) -> Decision:
        running, pending = view.running_jobs(), view.pending_jobs()
        if view.now < self.start_at:
            held = pending[~np.isin(pending, view.deferred_jobs())].tolist() if self.defer else []
            return Decision(keep=running, defer=held, wake_at=self.start_at)
        assign = {}
        plan_free = {}
        for job in pending.tolist():
            target = _first_free(view, job)
            if target is None or target.placement[0][:2] in plan_free:
                break
            plan_free[target.placement[0][:2]] = job
            assign[job] = target
            break
        return Decision(keep=running, assign=assign, undefer=[j for j in assign if self.defer])


@pytest.mark.parametrize("defer", [True, False], ids=["deferred", "planned-start"])
def test_no_stall_while_a_policy_waits_on_purpose_for_a_time_it_named(defer):
    jobs = make_jobs([{"id": "a", "submit": 0.0, "duration": 100.0}])
    later = 7 * 86400.0  # 10,080 rounds of 60 s with nothing running
    _sim, out = _simulate(WaitsOnPurpose(later, defer), jobs, _spec(), manager=None)
    assert out.start_s[0] == pytest.approx(later)


def test_no_stall_while_jobs_wait_for_a_long_running_job():
    # One node, one GPU: b waits ten days for a, through 14,400 rounds in which nothing changes.
    spec = make_cluster([(1, "V100", 64_000, 262_144)])
    jobs = make_jobs([{"id": "a", "submit": 0.0, "duration": 864_000.0}, {"id": "b", "submit": 1.0}])
    _sim, out = _simulate(MemoOnChanges(), jobs, spec, manager=None)
    assert out.start_s[1] == pytest.approx(864_000.0)


# --- the live mirror tells the same -----------------------------------------------------------------------------
def test_live_eaco_under_idle_timeout_starts_a_job_once_the_node_booted_for_it_is_on():
    """EaCO shares GPUs, so it runs live on Kubernetes (Slurm refuses it): its memo must not keep a job waiting
    beside the node that was booted for it."""
    from tests.contract_harness import Kubelet
    from wattsched.backends.driver import LiveDriver
    from wattsched.backends.k8s.backend import K8sBackend
    from wattsched.backends.k8s.fake import FakeCoreV1Api, make_node, make_pod
    from wattsched.backends.store import JobStore
    from wattsched.core.states import OFF, ON
    from wattsched.experiments.config import SimulationConfig
    from wattsched.experiments.run import build_scheduler
    from wattsched.policies.power import IdleTimeout

    now = [1_700_000_000.0]
    api = FakeCoreV1Api(nodes=[make_node(f"gpu{i + 1}", 4, cpu="8", memory="16000Mi") for i in range(3)])
    api.clock = lambda: now[0]
    booted_at: dict[str, float] = {}

    def hook(argv):  # the node power hook: a node powered up is Ready 5 s later
        if argv[0] == "up":
            booted_at[argv[1]] = now[0] + 5
            api.nodes[argv[1]]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]

    backend = K8sBackend(api, power_up_cmd="up {node}", power_down_cmd="down {node}", eviction_grace_s=0,
                         clock=lambda: now[0], hook_runner=hook)  # fmt: skip
    scheduler = build_scheduler(SimulationConfig(allocation="eaco", round_s=5).scheduler, None)
    driver = LiveDriver(backend, scheduler, JobStore(":memory:"), power_manager=IdleTimeout(10))
    kubelet = Kubelet(api, {"late": 8})

    def run(seconds: int) -> None:
        for _ in range(seconds):
            now[0] += 1.0
            for name, at in list(booted_at.items()):
                if now[0] >= at:
                    api.nodes[name]["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
                    del booted_at[name]
            kubelet.tick(now[0])
            driver.step()
            kubelet.tick(now[0])

    run(15)
    c = driver.cluster
    assert (c.power_state == OFF).all() and c.view.changes.switched_off == 3
    pod = make_pod("late", gpus=1, memory_mib=0)
    pod["metadata"]["creationTimestamp"] = api.now_text()
    pod["spec"]["activeDeadlineSeconds"] = 8
    api.add_pod(pod)
    submitted = now[0]
    run(12)  # the job arrives, a node boots (5 s), then the policy hears of it and starts the job
    assert (c.power_state == ON).sum() == 1
    started = api.pods["default/late"]
    assert started["status"]["phase"] in ("Running", "Succeeded")
    job = c.index["default.late"]
    assert c.start_s[job] + c.origin >= submitted + 5
    assert not c.view.changes.any  # the decision that started it is the last one: nothing new since


def test_live_mirror_counts_a_cancelled_waiting_job_and_a_job_held_again():
    """Queue changes the cluster manager makes outside wattsched reach the policy as the simulator's would: a
    waiting job cancelled leaves, a job that was the cluster manager's to place and is held again arrives."""
    from dataclasses import replace

    from wattsched.backends.base import JOB_FINISHED, JOB_STARTING, JOB_WAITING
    from wattsched.backends.driver import LiveDriver
    from wattsched.backends.slurm.backend import SlurmBackend
    from wattsched.backends.slurm.fake import FakeSlurm
    from wattsched.backends.store import JobStore
    from wattsched.core.states import STATUS_DROPPED, STATUS_FUTURE, STATUS_PENDING
    from wattsched.experiments.config import SimulationConfig
    from wattsched.experiments.run import build_scheduler

    fake = FakeSlurm.uniform(1, gpus=4)
    backend = SlurmBackend(runner=fake, retry_wait_s=0.0, clock=lambda: fake.now)
    driver = LiveDriver(
        backend,
        build_scheduler(SimulationConfig(allocation="gavel-fifo", round_s=5).scheduler, None),
        JobStore(":memory:"),
    )

    def run(seconds: int) -> None:
        for _ in range(seconds):
            fake.advance(fake.now + 1.0)
            driver.step()

    fake.submit(4, duration_s=100, time_limit_min=5)  # fills the node
    run(3)
    waiting = fake.submit(4, duration_s=10, time_limit_min=5)
    run(3)
    c = driver.cluster
    job = c.index[str(waiting)]
    assert c.status[job] == STATUS_PENDING and not c.view.changes.any
    c._update_job(job, replace(c.obs[job], state=JOB_FINISHED), None)
    assert c.status[job] == STATUS_DROPPED and c.view.changes.left == 1

    submitted = fake.submit(1, duration_s=10, time_limit_min=5)
    run(2)
    other = c.index[str(submitted)]
    c._update_job(other, replace(c.obs[other], state=JOB_STARTING, nodes=()), None)
    assert c.status[other] == STATUS_FUTURE
    c.changes.decided()
    c._update_job(other, replace(c.obs[other], state=JOB_WAITING, held=True), None)
    assert c.status[other] == STATUS_PENDING and c.view.changes.arrived == 1
