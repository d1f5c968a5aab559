"""PowerFlow-reconstructed with inference service-hours: a service holds its asked GPUs at the default setting for
its whole hour (the hour's SLO requirement, docs/cedla.md §1.4), while training jobs are still sized by the greedy
in the GPUs left (docs/powerflow.md, "Inference services")."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import make_cluster
from wattsched.core.jobs import INFERENCE, TRAINING, JobTable
from wattsched.core.states import STATUS_DONE
from wattsched.energy.power_models import POWER_MODELS
from wattsched.engine.ledger import EnergyLedger
from wattsched.engine.meter import PowerMeter
from wattsched.engine.temporal import Simulator
from wattsched.perf.model import PerformanceModel
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.contract import ALLOCATION_POLICIES


def _run(budget_kwh: float | None = None):
    # Two 4-GPU T4 nodes. At t = 0: a service-hour asking 6 GPUs (replicas, so over both nodes) and a training job
    # of 4 GPUs (1,000 s there; no table, so its rate is linear in its GPUs). At 4,000 s, after the hour, a second
    # training job of 4 GPUs, which the greedy may then give its 4 GPUs.
    spec = make_cluster([(4, "T4", 64_000, 262_144), (4, "T4", 64_000, 262_144)])
    jobs = JobTable.build(
        ["svc@h0", "train-a", "train-b"],
        [0.0, 0.0, 4000.0],
        [3600.0, 1000.0, 1000.0],
        [6, 4, 4],
        job_class=np.array([INFERENCE, TRAINING, TRAINING], dtype=np.int8),
        gpu_util=[0.5, 1.0, 1.0],
        request_rate_rps=[1000.0, np.nan, np.nan],
    )
    perf, jobs = PerformanceModel.build(jobs, spec)
    ledger = EnergyLedger(POWER_MODELS.create("linear"), node_base_w=100.0)
    sim = Simulator(
        jobs,
        spec,
        RoundScheduler(ALLOCATION_POLICIES.create("powerflow", energy_budget_kwh=budget_kwh), 60.0),
        np.random.default_rng(0),
        perf=perf,
        observers=[ledger],
        power_meter=PowerMeter(ledger),
    )
    out = sim.run()
    stats = out.log.job_stats(len(jobs), float(out.end_s.max()))
    return out, stats, sim


def test_a_service_holds_its_asked_gpus_for_its_hour_while_training_is_resized():
    out, stats, _ = _run()
    assert (out.status == STATUS_DONE).all()
    # The service: its 6 GPUs from its submission, at the default clock, done at submit + 3,600 s.
    assert out.start_s[0] == 0.0
    assert out.end_s[0] == pytest.approx(3600.0)
    assert stats["gpu_counts"][0] == "6"
    assert stats["mean_sm_clock_frac"][0] == 1.0
    assert out.restarts[0] == 0
    # Training job a is sized by the greedy in the 2 GPUs the service leaves (not its 4): 2,000 s.
    assert stats["gpu_counts"][1] == "2"
    assert out.end_s[1] == pytest.approx(2000.0, rel=0.05)
    # Training job b, after the hour, grows through the greedy's doublings to 4 GPUs.
    assert stats["gpu_counts"][2].split(">")[-1] == "4"


def _energy_kwh(sim) -> float:
    ledger = next(o for o in sim.observers if isinstance(o, EnergyLedger))
    return sum(ledger.energy_j.values()) / 3.6e6


def test_a_budget_counts_the_service_as_fixed_demand_and_never_shrinks_it():
    # The floor counts the service at its asked GPUs for its hour, so a budget 1 % above what the run uses
    # without one is accepted, kept, and leaves the service whole.
    _, _, free = _run()
    budget = 1.01 * _energy_kwh(free)
    out, stats, sim = _run(budget_kwh=budget)
    assert stats["gpu_counts"][0] == "6" and stats["mean_sm_clock_frac"][0] == 1.0
    assert out.end_s[0] == pytest.approx(3600.0)
    assert _energy_kwh(sim) <= budget
