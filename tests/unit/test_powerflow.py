"""PowerFlow-reconstructed: the greedy under its energy budget, the floor, and its JCT against optimus-greedy.

Runs on ``tests/fixtures/perfdata`` (six Pollux jobs with hand-written T4 tables, cluster n16g4).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from wattsched.core.settings import DEFAULT_SETTING
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


def _energy_jct(result) -> tuple[float, float]:
    return result.summary["energy_kwh"], result.summary["jct_s"]["mean"]


def test_a_budget_below_the_floor_is_refused_with_the_floor_named():
    with pytest.raises(powerflow.BudgetBelowFloorError, match=r"below this run's floor of 19\.\d+ kWh"):
        _run("powerflow", budget_kwh=1e-3, power_model="dvfs")
    with pytest.raises(powerflow.BudgetBelowFloorError, match="least static draw"):
        _run("powerflow", budget_kwh=1e-3, power_model="dvfs", power_manager="idle-timeout")


def test_the_simulate_command_refuses_it_in_one_line():
    from typer.testing import CliRunner

    from wattsched.cli.main import app

    result = CliRunner().invoke(app, [
        "simulate", "--workload", "pollux/workload-1", "--cluster", "n16g4", "--gpu-type", "T4", "--data-dir",
        str(PERFDATA), "--allocation", "powerflow", "--energy-budget-kwh", "1", "--quiet",
    ])  # fmt: skip
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "floor of" in result.output


@pytest.mark.parametrize("budget_kwh", [20.32, 20.36, 20.40])
def test_a_feasible_budget_holds_within_two_percent_with_static_draw(budget_kwh):
    # Always-on: every node's static draw (about 17 kWh of the ~20) is paid whatever the policy does. The free run
    # uses 20.44 kWh; the cheapest PowerFlow can do is about 20.31 kWh.
    energy, _ = _energy_jct(_run("powerflow", budget_kwh=budget_kwh, power_model="dvfs"))
    assert energy == pytest.approx(budget_kwh, rel=0.02)


def test_more_budget_buys_a_shorter_mean_jct_until_it_is_unused():
    runs = [_energy_jct(_run("powerflow", budget_kwh=b, power_model="dvfs")) for b in (20.32, 20.36, 20.40)]
    free = _run("powerflow", power_model="dvfs")
    jcts = [j for _, j in runs] + [_energy_jct(free)[1]]
    assert jcts == sorted(jcts, reverse=True) and jcts[0] > jcts[-1]
    generous = _run("powerflow", budget_kwh=2 * _energy_jct(free)[0], power_model="dvfs")
    assert _energy_jct(generous) == pytest.approx(_energy_jct(free))  # spent no further than it helps
    params = generous.summary["policies"]["allocation"]["parameters"]
    assert params["budget_binding"] is False and params["rounds"] > 0


def test_idle_timeout_budget_holds_and_never_overruns_a_feasible_budget():
    free_energy, _ = _energy_jct(_run("powerflow", power_model="dvfs", power_manager="idle-timeout"))
    energy, _ = _energy_jct(
        _run("powerflow", budget_kwh=5.5, power_model="dvfs", power_manager="idle-timeout")
    )
    assert energy == pytest.approx(5.5, rel=0.02)
    for budget in (5.66, 6.1):  # between the GPU counts it can take: under, never over
        energy, _ = _energy_jct(
            _run("powerflow", budget_kwh=budget, power_model="dvfs", power_manager="idle-timeout")
        )
        assert energy <= budget * 1.02 and energy < free_energy


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
    scheduler = build_scheduler(cfg.scheduler_config(), None)
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

    def __init__(self, rates: dict[tuple[int, int], float], dyn_w_per_gpu: float):
        self.rates, self.dyn = rates, dyn_w_per_gpu
        self.codes = {0: 0, 1: 0}
        self.per_node = 4
        self.multiplier = 1.0

    def _options_at(self, job, gpus):
        return [DEFAULT_SETTING], np.array([self.rates[(job, gpus)]]), np.array([gpus * self.dyn])

    def _levels(self, job, capacity):
        return [n for n in (1, 2, 4) if n <= capacity]

    def _top_gpus(self, jobs):
        return np.full(len(jobs), 4)

    def _option_rows(self, jobs, levels):
        # rate0, dyn0, rate1, dyn1, options, restart_s: one clock option, no restart (no job is held)
        rows = [
            self._options_at(j, 1 << level) for j, level in zip(jobs.tolist(), levels.tolist(), strict=True)
        ]
        return np.array([[r[1][0], r[2][0], math.nan, math.nan, 1, 0.0] for r in rows]).reshape(-1, 6)

    def _optimal_settings(self, jobs, levels):
        return np.array([DEFAULT_SETTING] * len(jobs), dtype=object)


def _greedy(left_j: float):
    # Job 0 scales badly (1 -> 2 GPUs: 1.05x), job 1 perfectly; 100 W per GPU; a static draw of 1,000 W paid
    # until the last job ends. Both on one GPU: dynamic 2 x 100 W x 100 s, span 100 s, static 100 kJ: 120 kJ.
    rates = {(0, 1): 1.0, (0, 2): 1.05, (0, 4): 1.08, (1, 1): 1.0, (1, 2): 2.0, (1, 4): 4.0}
    budget = powerflow._Budget(left_j=left_j, static_w=1000.0, span_floor_s=0.0, queued_j=0.0)
    greedy = powerflow._Greedy(_StubPolicy(rates, 100.0), {}, {0: 100.0, 1: 100.0}, 8)
    greedy.run([0, 1], budget)
    return greedy


def test_greedy_keeps_the_budget_and_credits_only_static_energy_really_saved():
    tight = _greedy(120_000.0)
    # Doubling job 1 costs no dynamic energy and leaves the span to job 0: allowed. Doubling job 0 costs dynamic
    # energy (1.05x speed for 2x power); the span it saves (100 -> 95 s) is worth less static energy: refused.
    assert tight.gpus == {0: 1, 1: 4}
    assert tight.energy_to_go() <= 120_000.0 + 1e-6 and tight.bound
    free = _greedy(math.inf)
    assert free.gpus == {0: 4, 1: 4} and not free.bound  # without a budget every step that gains time


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
