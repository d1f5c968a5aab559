"""Rounds that cost what changed: the change journal behind ``view.job_changes`` (simulator and live views), the
``keep_all`` decision and its at-once application, the plan that copies the cluster state only when it must, and
the shortcuts of Tiresias and of CE-DLA's greedy planner, each against the long way round."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import make_cluster, make_jobs, random_jobs
from tests.contract_harness import run_live, run_simulator
from wattsched.core.cluster import MILLI
from wattsched.engine.temporal import Simulator
from wattsched.policies import contract
from wattsched.policies.adapters import RoundScheduler, apply_decision
from wattsched.policies.allocation import cedla_greedy
from wattsched.policies.allocation.cedla_greedy import greedy_by_group
from wattsched.policies.allocation.cedla_milp import (
    InfeasiblePlan,
    PlanInstance,
    node_groups,
    random_instance,
)
from wattsched.policies.allocation.tiresias import Tiresias
from wattsched.policies.contract import ClusterView, Decision, Target
from wattsched.policies.planning import Plan


class CheckedTiresias(Tiresias):
    """Tiresias that checks, at every decision, the job sets it keeps from the journal against the view's."""

    name = "test-checked-tiresias"

    def __init__(self) -> None:
        super().__init__()
        self.checks = self.rebuilds = self.binds = 0

    def bind(self, ctx) -> None:
        super().bind(ctx)  # (again for every batch of jobs a live backend adds: the sets are read afresh)
        self.binds += 1

    def allocate(self, view: ClusterView) -> Decision:
        changed, _ = view.job_changes(self._mark)
        self.rebuilds += changed is None
        decision = super().allocate(view)
        pending, running = set(view.pending_jobs().tolist()), set(view.running_jobs().tolist())
        assert self._pending == pending and self._running == running
        assert self._active_gpus == sum(self._gpus[j] for j in pending | running)
        assert self._ran_before == {j for j in pending if view.previous_placement(j) is not None}
        self.checks += 1
        self.saw_stopped_waiting = getattr(self, "saw_stopped_waiting", False) or bool(self._ran_before)
        return decision


@pytest.mark.parametrize("keep", [contract.JOURNAL_KEEP, 1])
@pytest.mark.parametrize("kind", ["simulator", "slurm", "k8s"])
def test_a_policy_keeps_the_job_sets_from_the_journal_on_every_backend(kind, keep, tmp_path, monkeypatch):
    """Arrivals, starts, completions and preemptions reach the policy through ``job_changes``; with a journal
    trimmed to one entry the policy is often told to read the view afresh, and its sets are right either way."""
    monkeypatch.setattr(contract, "JOURNAL_KEEP", keep)
    policy = CheckedTiresias()
    policy.thresholds = np.array([60.0])  # low: jobs are demoted and preempted within the script
    sched = RoundScheduler(policy, 30.0)
    if kind == "simulator":
        run_simulator(sched, None)
    else:
        run_live(kind, sched, None, tmp_path)
    assert policy.checks > 10 and policy.saw_stopped_waiting  # preempted jobs waited to run again
    if keep == 1:
        assert policy.rebuilds > policy.binds
    else:
        assert policy.binds >= policy.rebuilds >= 1


def test_the_journal_lists_each_change_and_refuses_a_position_it_no_longer_reaches():
    counter = contract.ChangeCounter()
    assert counter.jobs_since(-1) == (None, 0)
    counter.journal += [3, 4, 3]
    assert counter.jobs_since(0) == ([3, 4, 3], 3)
    assert counter.jobs_since(2) == ([3], 3)
    counter.journal += list(range(2 * contract.JOURNAL_KEEP))
    counter.decided()
    end = 3 + 2 * contract.JOURNAL_KEEP
    assert counter.jobs_since(2) == (None, end)
    jobs, at = counter.jobs_since(end - 1)
    assert jobs == [2 * contract.JOURNAL_KEEP - 1] and at == end


class _Untouchable:
    """A view whose job sets must not be read."""

    def running_jobs(self):
        raise AssertionError("read the running jobs")

    status = property(running_jobs)


def test_keep_all_with_nothing_else_is_applied_without_reading_the_view():
    apply_decision(_Untouchable(), None, Decision(keep_all=True), "test")  # type: ignore[arg-type]


def _tiresias_sim(jobs, spec, round_s=60.0):
    policy = Tiresias(thresholds_gpu_s=(120.0,))
    sim = Simulator(
        jobs, spec, RoundScheduler(policy, round_s), np.random.default_rng(0), check_invariants=True
    )
    return sim.run()


def _contended():
    return random_jobs(7, 60, 4000), make_cluster([(4, "V100", 64_000, 262_144)] * 3)


def test_tiresias_decides_the_same_from_the_journal_as_from_the_whole_view(monkeypatch):
    """A journal that keeps nothing makes Tiresias read every decision afresh from the view (the way it decided
    before it kept its sets): the schedules agree, preemptions and the starvation guard included."""
    jobs, spec = _contended()
    kept = _tiresias_sim(jobs, spec)
    monkeypatch.setattr(contract, "JOURNAL_KEEP", 0)
    afresh = _tiresias_sim(jobs, spec)
    assert kept.preemptions.sum() > 0
    for field in ("start_s", "end_s", "preemptions", "restarts"):
        np.testing.assert_array_equal(getattr(kept, field), getattr(afresh, field))
    assert kept.log.placements == afresh.log.placements


def test_a_round_that_starts_one_job_copies_no_state_and_two_starts_copy_it_once():
    jobs = make_jobs([{"submit": 0.0, "duration": 10.0, "gpus": 1}] * 3)
    spec = make_cluster([(4, "V100", 64_000, 262_144)])
    sim = Simulator(jobs, spec, RoundScheduler(Tiresias(), 60.0), np.random.default_rng(0))
    sim._enqueue(0), sim._enqueue(1)
    view, placement = sim.view, Tiresias().placement
    placement.bind(spec, np.random.default_rng(0), np.arange(spec.num_nodes))
    free_before = view.state.gpu_left.copy()
    plan = Plan(view)
    first = plan.place(0, placement)
    assert first is not None and plan._state is view.state  # no copy yet, nothing written to the view's
    second = plan.place(1, placement)
    assert second is not None and plan._state is not view.state
    np.testing.assert_array_equal(view.state.gpu_left, free_before)
    assert (plan.state.gpu_left == MILLI).sum() == (free_before == MILLI).sum() - 2
    assert {g for _, gs, _, _ in first for g in gs}.isdisjoint({g for _, gs, _, _ in second for g in gs})
    decision = plan.decision()
    assert decision.keep_all and list(decision.assign) == [0, 1]
    assert decision.assign[0] == Target(first, MILLI)
    with pytest.raises(RuntimeError, match="over-allocation of GPU"):
        plan.take(2, Target(first, MILLI))


def _instance(rng: np.random.Generator) -> PlanInstance:
    """Small instances, from roomy to contended, several node groups, windows from any slot."""
    nodes, slots, jobs = int(rng.integers(1, 5)), int(rng.integers(2, 9)), int(rng.integers(1, 14))
    gpus = int(rng.choice([1, 2, 4, 8]))
    first = rng.integers(0, slots, jobs) * (rng.random() < 0.5)
    window = rng.integers(1, slots + 1, jobs)
    deadline = np.minimum(first + window, slots + int(rng.integers(0, 2)))
    most = rng.choice([1, 2, 3, 4, 8], jobs).astype(float)
    span = np.maximum(np.minimum(deadline, slots) - first, 0)
    work = np.round(rng.uniform(0, 1.0, jobs) * span * most * rng.uniform(0.1, 1.2), int(rng.integers(0, 3)))
    service = rng.integers(0, max(nodes * gpus // 2, 1), (int(rng.integers(0, 3)), slots))
    return PlanInstance(
        gpus=np.full(nodes, gpus),
        node_on_w=np.full(nodes, 300.0),
        boot_j=np.zeros(nodes),
        boot_share=np.full(nodes, float(rng.choice([0.0, 0.3]))),
        price=np.round(rng.uniform(0.05, 0.2, slots), 2),
        job_work_gpu_h=work,
        job_max_gpus=most,
        job_first_slot=first,
        job_deadline_slot=deadline,
        job_busy_w=rng.uniform(100, 250, jobs),
        service_gpus=service.astype(float),
        service_busy_w=np.full(len(service), 150.0),
        initially_on=rng.random(nodes) < 0.5,
    )


def _solve(inst: PlanInstance):
    try:
        return greedy_by_group(inst, node_groups(inst))
    except InfeasiblePlan as exc:
        return str(exc)


def test_the_greedy_takes_the_same_gpus_whether_its_jobs_compete_or_not(monkeypatch):
    """Where no slot runs short the greedy computes every job's GPUs at once; the job-by-job loop, forced, takes
    exactly the same (GPUs per job, group and slot; services; nodes on; or the same refusal)."""
    rng = np.random.default_rng(0)
    instances = [_instance(rng) for _ in range(600)] + [random_instance(s, 4, 24, 12) for s in range(20)]
    real, used = cedla_greedy._uncontended_takes, []

    def counted(*args):
        out = real(*args)
        used.append(out is not None)
        return out

    monkeypatch.setattr(cedla_greedy, "_uncontended_takes", counted)
    shortcut = [_solve(inst) for inst in instances]
    monkeypatch.setattr(cedla_greedy, "_uncontended_takes", lambda *a: None)
    loop = [_solve(inst) for inst in instances]
    assert 200 < sum(used) < len(used)  # the shortcut applies to many, not all
    for inst, a, b in zip(instances, shortcut, loop, strict=True):
        if isinstance(a, str) or isinstance(b, str):
            assert a == b, inst
            continue
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


def test_node_groups_are_those_of_equal_rows_in_order_of_their_first_node():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        inst = random_instance(0, nodes=n, slots=24, jobs=1)
        inst = PlanInstance(**{**inst.__dict__, "gpus": rng.choice([4, 8], n), "initially_on": rng.random(n) < 0.5,
                               "node_on_w": rng.choice([300.0, -0.0, 0.0], n)})  # fmt: skip
        keys = np.stack([inst.gpus, inst.node_on_w, inst.boot_j, inst.boot_share, inst.initially_on], axis=1)
        _, first, inverse = np.unique(keys.astype(float), axis=0, return_index=True, return_inverse=True)
        expected = [np.flatnonzero(inverse.reshape(-1) == k).tolist() for k in np.argsort(first)]
        assert node_groups(inst) == expected
