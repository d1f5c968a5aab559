"""Round-based policies keep what they look at every decision from the view's change journal, rather than scan
every running job: their schedules are those of a policy that reads the whole view afresh at every decision
(a journal that keeps nothing makes them read it afresh). And the view's short path for one job answers what
its array path answers."""

from __future__ import annotations

import numpy as np

from tests.conftest import make_cluster, make_jobs, random_jobs
from wattsched.core.states import STATUS_RUNNING
from wattsched.engine.temporal import Simulator
from wattsched.policies import contract
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.allocation.gandiva import Gandiva
from wattsched.policies.allocation.tiresias import Tiresias


def _oversubscribed():
    """Bursts of 1- and 2-GPU jobs on 8 GPUs: time-slicing and packing when oversubscribed, unpacking after."""
    rng = np.random.default_rng(11)
    rows = [
        {"submit": float(t), "duration": float(d), "gpus": int(g)}
        for t, d, g in zip(
            np.sort(np.concatenate([rng.uniform(0, 300, 30), rng.uniform(5000, 5300, 30)])),
            rng.uniform(200, 2000, 60),
            rng.choice([1, 2], 60),
            strict=True,
        )
    ]
    return make_jobs(rows), make_cluster([(4, "V100", 64_000, 262_144)] * 2)


def _gandiva_run(jobs, spec):
    policy = Gandiva()
    sim = Simulator(jobs, spec, RoundScheduler(policy, 60.0), np.random.default_rng(0), check_invariants=True)
    out = sim.run()
    return out, policy


def test_gandiva_packs_and_unpacks_the_same_from_the_journal_as_from_the_whole_view(monkeypatch):
    jobs, spec = _oversubscribed()
    kept, policy = _gandiva_run(jobs, spec)
    monkeypatch.setattr(contract, "JOURNAL_KEEP", 0)
    afresh, policy_afresh = _gandiva_run(jobs, spec)
    assert (
        policy.packings > 0 and min(kept.log.shares) < 1000
    )  # it packs: the kept set of packed jobs is used
    assert kept.preemptions.sum() > 0
    assert policy.packings == policy_afresh.packings
    for field in ("start_s", "end_s", "preemptions", "restarts"):
        np.testing.assert_array_equal(getattr(kept, field), getattr(afresh, field))
    assert kept.log.placements == afresh.log.placements and kept.log.shares == afresh.log.shares


class _CheckingTiresias(Tiresias):
    """Tiresias that, at every decision, asks the view for each job's work left alone and with all the others."""

    checked_running = 0

    def allocate(self, view):
        every = np.arange(len(view.status))
        together = view.remaining_work(every)
        alone = np.concatenate([view.remaining_work(every[j : j + 1]) for j in every.tolist()])
        assert alone.tobytes() == together.tobytes()  # bit for bit
        self.checked_running += int((view.status == STATUS_RUNNING).sum())
        return super().allocate(view)


def test_the_simulators_work_left_of_one_job_is_its_entry_of_all_of_them():
    jobs = random_jobs(3, 30, 2000)
    spec = make_cluster([(4, "V100", 64_000, 262_144)] * 2)
    policy = _CheckingTiresias(thresholds_gpu_s=(120.0,))
    out = Simulator(jobs, spec, RoundScheduler(policy, 60.0), np.random.default_rng(0)).run()
    assert policy.checked_running > 100 and out.preemptions.sum() > 0  # mid-run, preempted jobs included
