"""The contract's deferral and headroom (Decision.defer / undefer / keep_free_gpus) in the simulator: deferred jobs
leave the queue power managers boot for, and headroom keeps powered GPUs free."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import run_simulation
from wattsched.policies.base import PLACEMENT_POLICIES
from wattsched.policies.contract import ALLOCATION_POLICIES, AllocationPolicy, Decision
from wattsched.policies.planning import Plan

HOLD_UNTIL_S = 3 * 3600.0


@ALLOCATION_POLICIES.register("test-hold")
class HoldThenRun(AllocationPolicy):
    """Defers every job until HOLD_UNTIL_S, then starts them; asks for `headroom` free GPUs throughout."""

    name = "test-hold"
    default_round_s = 600.0
    decide_on_arrival = True
    headroom: float | None = None

    def bind(self, ctx):
        self.placement = PLACEMENT_POLICIES.create("best-fit")
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)

    def allocate(self, view):
        running, pending = view.running_jobs(), view.pending_jobs()
        held = set(view.deferred_jobs().tolist())
        plan = Plan(view)
        if view.now < HOLD_UNTIL_S:
            decision = plan.decision(running, defer=[j for j in pending.tolist() if j not in held])
        else:
            for j in pending.tolist():
                plan.place(j, self.placement)
            decision = plan.decision(running, undefer=sorted(held))
        decision.keep_free_gpus = self.headroom
        return decision


@pytest.fixture
def setup(tmp_path):
    (tmp_path / "c.yaml").write_text(
        "name: small\nnode_groups:\n  - count: 2\n    gpus: 4\n    gpu_model: V100\n    cpu_milli: 32000\n"
        "    memory_mib: 262144\n"
    )
    (tmp_path / "jobs.csv").write_text("job_id,submit_time,duration,num_gpu\na,0,3600,2\nb,60,3600,2\n")
    return tmp_path


def _run(setup, headroom=None):
    HoldThenRun.headroom = headroom
    cfg = SimulationConfig(
        workload=str(setup / "jobs.csv"), cluster=str(setup / "c.yaml"), allocation="test-hold",
        power_manager="idle-timeout", check_invariants=True,
    )  # fmt: skip
    return run_simulation(cfg, None)


def test_deferred_jobs_boot_nothing_and_start_when_released(setup):
    run = _run(setup)
    assert (run.jobs["start_s"] >= HOLD_UNTIL_S).all()
    # both nodes idle-out after 600 s and stay off through the hold: nothing boots for deferred jobs
    assert run.summary["node_hours_off"] > 2 * (HOLD_UNTIL_S - 600 - 60 - 300) / 3600
    assert run.summary["jobs_completed"] == 2


def test_headroom_keeps_free_gpus_powered(setup):
    kept = _run(setup, headroom=8.0)
    assert kept.summary["node_hours_off"] == 0.0  # 8 free GPUs asked: no node may go off
    half = _run(setup, headroom=4.0)
    off = half.summary["node_hours_off"]
    assert 0 < off < _run(setup).summary["node_hours_off"]  # one node kept, the other off


def test_deferring_a_running_job_is_an_invalid_decision(setup):
    from wattsched.core.states import STATUS_PENDING
    from wattsched.policies.adapters import apply_decision
    from wattsched.policies.contract import InvalidDecision

    view = SimpleNamespace(
        status=np.array([STATUS_PENDING + 1]),
        jobs=SimpleNamespace(job_id=np.array(["a"], dtype=object)),
        running_jobs=lambda: np.zeros(0, dtype=np.int64),
    )
    with pytest.raises(InvalidDecision, match="defers a job that is not pending"):
        apply_decision(view, None, Decision(defer=[0]), "p")
