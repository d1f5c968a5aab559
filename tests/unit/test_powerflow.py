"""PowerFlow-reconstructed: the greedy under the budget pace, and its JCT against optimus-greedy.

Runs on ``tests/fixtures/perfdata`` (six Pollux jobs with hand-written T4 tables, cluster n16g4).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from wattsched.energy.dvfs import DEFAULT_SETTING
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import run_simulation
from wattsched.policies.allocation import powerflow
from wattsched.policies.contract import ALLOCATION_POLICIES

PERFDATA = Path(__file__).resolve().parent.parent / "fixtures" / "perfdata"


def _run(allocation: str, budget_kwh: float | None = None, **kw):
    cfg = SimulationConfig(
        workload="pollux/workload-1",
        cluster="n16g4",
        gpu_type="T4",
        data_dir=str(PERFDATA),
        allocation=allocation,
        energy_budget_kwh=budget_kwh,
        **kw,
    )
    return run_simulation(cfg, None)


def test_registered_and_labelled_as_a_reconstruction():
    policy = ALLOCATION_POLICIES.create("powerflow")
    assert policy.reconstructed and "PowerFlow" in policy.basis
    assert policy.default_round_s == 60.0
    summary = _run("powerflow").summary
    info = summary["policies"]["allocation"]
    assert info["reconstructed"] and info["parameters"]["energy_budget_kwh"] is None


def test_unlimited_budget_is_no_slower_than_optimus_greedy():
    pf, opt = _run("powerflow").summary, _run("optimus-greedy").summary
    assert pf["jobs_completed"] == opt["jobs_completed"] == 6
    assert pf["jct_s"]["mean"] <= opt["jct_s"]["mean"]


def test_gpu_counts_are_powers_of_two():
    jobs = _run("powerflow").jobs
    for counts in jobs["gpu_counts"]:
        for n in str(counts).split(">"):
            assert int(n) & (int(n) - 1) == 0, counts


def test_a_tight_budget_never_costs_more_energy_than_no_budget():
    free = _run("powerflow", power_manager="idle-timeout")
    tight = _run("powerflow", budget_kwh=1e-3, power_manager="idle-timeout")
    assert tight.summary["energy_kwh"] <= free.summary["energy_kwh"] * (1 + 1e-12)
    assert np.nanmean(tight.jobs["mean_num_gpu"]) <= np.nanmean(free.jobs["mean_num_gpu"])


def test_energy_optimal_clock_minimises_energy_per_iteration():
    from wattsched.experiments.run import build_perf, build_scheduler, load_inputs

    cfg = SimulationConfig(
        workload="pollux/workload-1",
        cluster="n16g4",
        gpu_type="T4",
        data_dir=str(PERFDATA),
        allocation="powerflow",
    )
    inputs = load_inputs(cfg)
    scheduler = build_scheduler(cfg, None)
    perf, jobs = build_perf(cfg, inputs.jobs, inputs.cluster, scheduler, np.random.default_rng(0))
    from wattsched.policies.contract import BindContext

    policy = scheduler.policy
    policy.bind(BindContext(inputs.cluster, jobs, np.random.default_rng(0), np.arange(16), perf))
    for job in range(len(jobs)):
        settings, rates, _ = policy._options_at(job, 1)
        code = int(policy.codes[job])
        grid = policy._clock_grid(job)
        energy = [perf.energy_per_iteration(job, code, 1, 1, 1, s) for s in grid]
        assert settings[0] == grid[int(np.argmin(energy))]
        assert settings[-1] == DEFAULT_SETTING  # the fastest option is the unconstrained clock
        assert np.all(np.diff(rates) >= 0)  # options are ordered from the optimum upwards in speed


class _StubPolicy:
    """Just enough of PowerFlow for its greedy: one clock option per GPU count, hand-set rates and power."""

    def __init__(self, rates: dict[tuple[int, int], float], dyn_w_per_gpu: float, pace: float):
        self.rates, self.dyn = rates, dyn_w_per_gpu
        self.budget_j = math.inf if math.isinf(pace) else 1.0
        self.ref_gpu_s_per_unit = {0: 1.0, 1: 1.0}
        self.codes = {0: 0, 1: 0}

    def _options_at(self, job, gpus):
        return [DEFAULT_SETTING], np.array([self.rates[(job, gpus)]]), np.array([gpus * self.dyn])

    def _levels(self, job, capacity):
        return [n for n in (1, 2, 4) if n <= capacity]

    def _idle_w(self, code):
        return 0.0


class _StubView:
    def power_w(self):
        return 0.0  # no static draw: every step's cost is its own dynamic power

    def target(self, job):
        return None


@pytest.mark.parametrize(("pace", "expected"), [(math.inf, {0: 4, 1: 4}), (100.0, {0: 1, 1: 4})])
def test_greedy_refuses_a_doubling_that_breaks_the_pace(pace, expected):
    # Job 0 scales badly (1 -> 2 GPUs: 1.05x), job 1 perfectly. Power 100 W per GPU, no static draw, so the
    # cluster ratio (W per unit of work rate) starts at 100 (both jobs on one GPU, rates 1 + 1, power 200).
    # Doubling job 1 keeps the ratio at 100 (allowed at pace 100); doubling job 0 raises it above 100.
    rates = {(0, 1): 1.0, (0, 2): 1.05, (0, 4): 1.08, (1, 1): 1.0, (1, 2): 2.0, (1, 4): 4.0}
    greedy = powerflow._Greedy(_StubPolicy(rates, 100.0, pace), _StubView(), {}, {0: 100.0, 1: 100.0}, 8)
    greedy.run([0, 1], pace)
    assert greedy.gpus == expected
    if not math.isinf(pace):
        assert greedy._ratio(greedy.work, greedy.power) <= pace + 1e-9


def test_cpu_only_jobs_are_started_too():
    from tests.conftest import make_cluster, make_jobs
    from wattsched.core.states import STATUS_DONE
    from wattsched.engine.temporal import Simulator
    from wattsched.perf.model import PerformanceModel
    from wattsched.policies.adapters import RoundScheduler

    spec = make_cluster([(4, "T4", 64_000, 262_144)])
    jobs = make_jobs(
        [{"submit": 0.0, "duration": 50.0, "gpus": 1}, {"submit": 10.0, "duration": 30.0, "gpus": 0}]
    )
    perf, jobs = PerformanceModel.build(jobs, spec)
    sim = Simulator(
        jobs,
        spec,
        RoundScheduler(ALLOCATION_POLICIES.create("powerflow"), 60.0),
        np.random.default_rng(0),
        perf=perf,
    )
    out = sim.run()
    assert (out.status == STATUS_DONE).all()  # the CPU-only job ran instead of waiting forever
    assert out.end_s[1] == pytest.approx(out.start_s[1] + 30.0)
