"""GPU power states: a job restarting (process start, checkpoint load) holds its GPUs at the held draw, not at its
computing load (docs/energy.md, "GPU power states"). Every expected energy is computed by hand.

Scenarios run a scripted allocation policy in 10-s rounds: at given times it starts, stops (state saved) or moves
jobs; the restart model is `fixed`, so every restart takes exactly the stated delay.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import StepIntegrator, make_cluster
from wattsched.core.cluster import MILLI
from wattsched.core.gpus import GPU_CATALOG, gpu_model
from wattsched.core.jobs import JobTable
from wattsched.energy.power_models import POWER_MODELS
from wattsched.engine.ledger import COMPONENTS, EnergyLedger
from wattsched.engine.meter import PowerMeter
from wattsched.engine.temporal import Simulator
from wattsched.perf.model import PerformanceModel
from wattsched.perf.restart import RestartModel
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.contract import AllocationPolicy, Decision, Target

CPU_MILLI = 32_000  # one socket under the PWR topology: 15 W idle, nothing allocated
CPU_IDLE_W = 15.0
V100_HELD_W = 30 + (149.3 - 78.1) / (700 - 78.1) * (300 - 30)  # reconstructed: the H200's held share of range


class Scripted(AllocationPolicy):
    """At each listed time: start or move the jobs given a target, stop (state saved) those given None."""

    name = "test-scripted"
    decide_on_arrival = True
    decide_on_completion = True

    def __init__(self, steps: dict[float, dict[int, Target | None]]):
        self.steps = steps

    def allocate(self, view) -> Decision:
        step = self.steps.get(view.now, {})
        keep = [j for j in view.running_jobs().tolist() if j not in step]
        assign = {j: t for j, t in step.items() if t is not None}
        return Decision(keep=keep, assign=assign, save_on_stop=True)


def on(gpu: int, share: int = MILLI) -> Target:
    return Target(((0, (gpu,), 0, 0),), share)


def jobs_of(duration: list[float], util: list[float], milli: list[int] | None = None) -> JobTable:
    n = len(duration)
    return JobTable.build(
        job_id=[f"j{i}" for i in range(n)],
        submit_s=[0.0] * n,
        duration_s=duration,
        num_gpu=[1] * n,
        gpu_milli=milli or [MILLI] * n,
        gpu_util=util,
    )


def run(gpu: str, gpus: int, jobs: JobTable, steps, delay_s: float, model: str = "linear"):
    spec = make_cluster([(gpus, gpu, CPU_MILLI, 262_144)])
    perf, jobs = PerformanceModel.build(jobs, spec, RestartModel("fixed", fixed_s=delay_s))
    power_model = POWER_MODELS.create(model)
    ledger = EnergyLedger(power_model, node_base_w=0.0)
    integrator = StepIntegrator(model, 0.0)
    sim = Simulator(
        jobs,
        spec,
        RoundScheduler(Scripted(steps), 10.0),
        np.random.default_rng(0),
        perf=perf,
        observers=[ledger, integrator],
        check_invariants=True,
        power_meter=PowerMeter(ledger),
    )
    out = sim.run()
    return sim, out, ledger, integrator


def assert_books_agree(sim, ledger: EnergyLedger, integrator: StepIntegrator) -> None:
    """Ledger = the independent step integrator, per component; the live meter = the ledger's total."""
    got = ledger.energy_j
    for name, value in integrator.energy.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-6), name
    assert sim.power_meter.energy_j(sim) == pytest.approx(sum(got.values()), rel=1e-12)


def test_catalogue_held_draws():
    assert gpu_model("V100").held_draw_w == pytest.approx(V100_HELD_W, rel=1e-12)
    assert gpu_model("V100").held_draw_w == pytest.approx(60.91, abs=0.01)
    assert not gpu_model("V100").held_measured
    assert gpu_model("H200").held_draw_w == 149.3 and gpu_model("H200").held_measured


def test_v100_restart_is_charged_the_reconstructed_held_draw():
    # One V100 at utilisation 0.5 (30 + 270 x 0.5 = 165 W): runs [0, 40), stopped (state saved) [40, 60), resumed
    # at 60 with a 30-s restart [60, 90) at the held draw, then its last 60 s of work [90, 150).
    jobs = jobs_of([100.0], [0.5])
    steps = {0.0: {0: on(0)}, 40.0: {0: None}, 60.0: {0: on(0)}}
    sim, out, ledger, integrator = run("V100", 1, jobs, steps, delay_s=30.0)
    assert out.end_s.tolist() == [150.0] and out.restarts.tolist() == [1]
    assert out.restart_gpu_s.tolist() == [30.0]
    e = ledger.energy_j
    assert e["gpu_active"] == pytest.approx(165.0 * 100, rel=1e-12)  # 16,500 J: computing only
    assert e["gpu_held"] == pytest.approx((V100_HELD_W - 30.0) * 30, rel=1e-12)  # 927.4 J above bare idle
    assert e["gpu_idle"] == pytest.approx(30.0 * (20 + 30), rel=1e-12)  # stopped 20 s + the restart's floor
    assert e["cpu"] == pytest.approx(CPU_IDLE_W * 150, rel=1e-12)
    gpu_total = 165.0 * 100 + 30.0 * 20 + V100_HELD_W * 30  # 18,927.4 J
    assert e["gpu_active"] + e["gpu_held"] + e["gpu_idle"] == pytest.approx(gpu_total, rel=1e-12)
    # Charged at the job's load, as before this rule, the restart cost (165 - 60.9) x 30 = 3,122.6 J more.
    assert_books_agree(sim, ledger, integrator)


def test_h200_migration_is_charged_the_measured_held_draw():
    # Two H200s (idle 78.1 W, held 149.3 W measured, max 700 W); the job at utilisation 0.5 draws
    # 78.1 + 621.9 x 0.5 = 389.05 W. GPU 0 [0, 40), moved to GPU 1 at 40: restart [40, 70), then 60 s [70, 130).
    jobs = jobs_of([100.0], [0.5])
    steps = {0.0: {0: on(0)}, 40.0: {0: on(1)}}
    sim, out, ledger, integrator = run("H200", 2, jobs, steps, delay_s=30.0)
    assert out.end_s.tolist() == [130.0] and out.restarts.tolist() == [1]
    e = ledger.energy_j
    busy = 78.1 + (700 - 78.1) * 0.5
    assert e["gpu_active"] == pytest.approx(busy * 100, rel=1e-12)  # 38,905 J
    assert e["gpu_held"] == pytest.approx((149.3 - 78.1) * 30, rel=1e-12)  # 2,136 J
    # bare idle: GPU 1 before the move (40 s), GPU 0 after it (90 s), GPU 1's floor while restarting (30 s)
    assert e["gpu_idle"] == pytest.approx(78.1 * (40 + 90 + 30), rel=1e-12)
    assert sum(e.values()) == pytest.approx(
        busy * 100 + 149.3 * 30 + 78.1 * 130 + CPU_IDLE_W * 130, rel=1e-12
    )
    assert_books_agree(sim, ledger, integrator)


@pytest.mark.parametrize(
    ("util_a", "gpu0_restart_w"),
    [
        (0.5, 30 + 270 * 0.25),  # A's computing draw (97.5 W) is above the held draw: it stands
        (0.1, V100_HELD_W),  # A's computing draw of 43.5 W is lifted to the held floor
    ],
)
def test_shared_gpu_with_a_computing_and_a_restarting_job(util_a, gpu0_restart_w):
    # Two V100s. A (share 500, utilisation util_a, 200 s) computes on GPU 0 throughout; B (share 500, 0.5, 100 s)
    # starts on GPU 1 and at 40 moves next to A: restarting [40, 70) beside A, then computing [70, 130). A shared
    # pod's load is its utilisation times its share (A: util_a / 2, B: 0.25); the summed utilisation stays <= 1,
    # so neither slows down.
    jobs = jobs_of([200.0, 100.0], [util_a, 0.5], milli=[500, 500])
    steps = {0.0: {0: on(0, 500), 1: on(1, 500)}, 40.0: {1: on(0, 500)}}
    sim, out, ledger, integrator = run("V100", 2, jobs, steps, delay_s=30.0)
    assert out.end_s.tolist() == [200.0, 130.0]

    def busy(load):
        return 30 + 270 * load

    a, b = util_a / 2, 0.25
    a_alone = busy(a) * (40 + 70)  # [0, 40) and [130, 200)
    together = busy(a + b) * 60  # [70, 130)
    e = ledger.energy_j
    assert e["gpu_active"] == pytest.approx(a_alone + busy(a) * 30 + together + busy(b) * 40, rel=1e-12)
    assert e["gpu_held"] == pytest.approx((gpu0_restart_w - busy(a)) * 30, rel=1e-12, abs=1e-9)
    assert e["gpu_idle"] == pytest.approx(30.0 * 160, rel=1e-12)  # GPU 1 after B left it
    gpu0 = a_alone + gpu0_restart_w * 30 + together
    assert e["gpu_active"] + e["gpu_held"] + e["gpu_idle"] == pytest.approx(
        gpu0 + busy(b) * 40 + 30.0 * 160, rel=1e-12
    )
    assert_books_agree(sim, ledger, integrator)


def test_binary_model_charges_a_held_gpu_its_tdp():
    # PWR charges any allocation at TDP: a held GPU draws 300 W, booked as 270 W above bare idle.
    jobs = jobs_of([100.0], [0.5])
    steps = {0.0: {0: on(0)}, 40.0: {0: None}, 60.0: {0: on(0)}}
    sim, _, ledger, integrator = run("V100", 1, jobs, steps, delay_s=30.0, model="binary")
    e = ledger.energy_j
    assert e["gpu_active"] == pytest.approx(300.0 * 100)
    assert e["gpu_held"] == pytest.approx(270.0 * 30)
    assert_books_agree(sim, ledger, integrator)


# -- properties ------------------------------------------------------------------------------------------------


@given(name=st.sampled_from(sorted(GPU_CATALOG)))
def test_held_draw_lies_between_idle_and_max_for_every_catalogue_gpu(name):
    g = GPU_CATALOG[name]
    assert g.idle_w <= g.held_draw_w <= g.max_w
    if not g.held_measured:  # the reconstruction: the same share of the dynamic range everywhere
        assert (g.held_draw_w - g.idle_w) / (g.max_w - g.idle_w) == pytest.approx(71.2 / 621.9, rel=1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(GPU_CATALOG)),
    util=st.floats(0.0, 1.0),
    delay=st.sampled_from([0.0, 3.0, 30.0, 95.0]),
    stop_at=st.sampled_from([10.0, 50.0]),
    model=st.sampled_from(["linear", "dvfs", "binary"]),
)
def test_energy_is_the_sum_of_its_components_and_restarts_cost_the_held_draw(
    name, util, delay, stop_at, model
):
    jobs = jobs_of([100.0], [util])
    resume = stop_at + 10.0
    steps = {0.0: {0: on(0)}, stop_at: {0: None}, resume: {0: on(0)}}
    sim, out, ledger, integrator = run(name, 1, jobs, steps, delay_s=delay, model=model)
    assert out.end_s[0] == pytest.approx(110.0 + delay)
    g = gpu_model(name)
    held_w = g.max_w if model == "binary" else g.held_draw_w
    assert ledger.energy_j["gpu_held"] == pytest.approx((held_w - g.idle_w) * delay, rel=1e-9, abs=1e-9)
    summary = ledger.summary(1.0)
    parts = summary["energy_by_component_kwh"]
    assert list(parts) == list(COMPONENTS)
    assert summary["energy_kwh"] == pytest.approx(sum(parts.values()), rel=1e-12)
    assert_books_agree(sim, ledger, integrator)


# -- the live side -------------------------------------------------------------------------------------------------


def test_live_power_estimate_charges_a_starting_job_the_held_draw():
    from wattsched.backends.driver import LiveDriver
    from wattsched.backends.slurm.backend import SlurmBackend
    from wattsched.backends.slurm.fake import FakeSlurm
    from wattsched.backends.store import JobStore
    from wattsched.core.states import PHASE_RELEASED, PHASE_RUNNING
    from wattsched.experiments.config import SimulationConfig
    from wattsched.experiments.run import build_scheduler

    fake = FakeSlurm.uniform(1)  # one node of 4 A100s: idle 50 W, max 400 W
    fake.submit(2, duration_s=20)
    backend = SlurmBackend(runner=fake, retry_wait_s=0.0, clock=lambda: fake.now)
    driver = LiveDriver(backend, build_scheduler(SimulationConfig().scheduler, None), JobStore(":memory:"))
    driver.step()  # the job is placed and let go; Slurm has not started it yet
    c = driver.cluster
    (job,) = c.targets
    assert c.phase[job] == PHASE_RELEASED
    held_w = 50 + (149.3 - 78.1) / (700 - 78.1) * (400 - 50)  # A100, reconstructed: 90.07 W
    model = c.meter.model
    rest = float(model.cpu_w(c.state.cpu_left, np.arange(1))[0]) + model.default_node_base_w + 2 * 50
    assert driver.power_estimate_w() == pytest.approx(rest + 2 * held_w, rel=1e-12)
    fake.advance(fake.now + 1)
    driver.step()  # Slurm reports it running: its GPUs at full load
    assert c.phase[job] == PHASE_RUNNING
    assert driver.power_estimate_w() == pytest.approx(rest + 2 * 400, rel=1e-12)


@pytest.mark.parametrize(
    ("gpu", "power_model", "held"),
    [("H200", "linear", (149.3, "measured")), ("V100", "linear", (V100_HELD_W, "reconstructed")),
     ("V100", "binary", (300.0, "TDP"))],
)  # fmt: skip
def test_summary_records_the_held_draw_and_its_component(gpu, power_model, held):
    from wattsched.experiments.config import SimulationConfig
    from wattsched.experiments.run import run_simulation

    cfg = SimulationConfig(synthetic={"num_jobs": 20}, gpu_type=gpu, power_model=power_model)
    s = run_simulation(cfg).summary
    record = s["energy_model"]["gpu_held_w"][gpu]
    assert record["w"] == pytest.approx(held[0], rel=1e-12) and record["basis"].startswith(held[1])
    parts = s["energy_by_component_kwh"]
    assert list(parts) == list(COMPONENTS)
    assert s["energy_kwh"] == pytest.approx(sum(parts.values()), rel=1e-12)
