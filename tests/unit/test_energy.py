"""Energy layer: power models, node power states, accounting identities, cost and carbon."""

from datetime import UTC, datetime

import numpy as np
import pytest

from tests.conftest import make_cluster, make_jobs, require_real_file, simulate_energy
from wattsched.core.states import STATUS_DONE
from wattsched.energy.power_models import POWER_MODELS
from wattsched.energy.signals.alignment import align
from wattsched.energy.signals.clean import GridSignal
from wattsched.energy.utilisation import job_gpu_load
from wattsched.experiments.cluster_power import cluster_power_table
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import run_simulation

CLUSTER = make_cluster([(8, "A100", 64_000, 10**6), (4, "V100", 32_000, 10**6), (2, "T4", 16_000, 10**6)])


def simulate(jobs, spec=CLUSTER, **kw):
    return simulate_energy(jobs, spec, **kw)


def idle_watts(spec, model):
    m = POWER_MODELS.create(model)
    m.bind(spec)
    return float(m.node_idle_w(np.arange(spec.num_nodes)).sum())


@pytest.mark.parametrize("model", ["binary", "linear"])
def test_idle_cluster_uses_exactly_idle_power_times_duration(model):
    horizon = 7_200.0
    jobs = make_jobs([{"submit": 0, "duration": horizon, "gpus": 0, "cpu": 0}])  # holds nothing
    _, _, acc, _ = simulate(jobs, model=model, base=25.0)
    expected = (idle_watts(CLUSTER, model) + 25.0 * CLUSTER.num_nodes) * horizon
    assert sum(acc.energy_j.values()) == pytest.approx(expected, rel=1e-12)
    assert acc.energy_j["gpu_active"] == 0.0


def test_hand_computed_energy_per_component_and_pue_overhead():
    # One node: 2 V100 (30 W idle, 300 W max), 32 vCPU = 16 cores = 1 socket of the fallback CPU (15 W idle,
    # 120 W max, linear in the allocated CPU share), 25 W node base, PUE 1.5, linear model.
    spec = make_cluster([(2, "V100", 32_000, 10**6)])
    jobs = make_jobs(
        [
            {"submit": 0, "duration": 100, "gpus": 1, "cpu": 8_000},  # [0, 100): 1 GPU at 50 %, 1/4 of CPU
            {"submit": 150, "duration": 50, "gpus": 2, "cpu": 16_000},  # [150, 200): 2 GPUs at 100 %, 1/2 CPU
        ]
    )
    jobs.gpu_util[:] = [0.5, 1.0]
    _, out, acc, _ = simulate(jobs, spec, model="linear", base=25.0, pue=1.5)
    assert out.start_s.tolist() == [0.0, 150.0] and out.end_s.tolist() == [100.0, 200.0]
    gpu_active = (30 + 270 * 0.5) * 100 + 2 * 300 * 50  # busy GPUs: 16 500 + 30 000 J
    gpu_idle = (
        1 * 30 * 100 + 2 * 30 * 50 + 0 * 30 * 50
    )  # free GPUs: [0,100) one, [100,150) two, [150,200) none
    cpu = (15 + 105 * 0.25) * 100 + 15 * 50 + (15 + 105 * 0.5) * 50  # 4 125 + 750 + 3 375 J
    node_base = 25 * 200
    it = gpu_active + gpu_idle + cpu + node_base  # 65 750 J
    expected = {
        "gpu_active": 46_500.0,
        "gpu_held": 0.0,  # no job restarts
        "gpu_idle": 6_000.0,
        "cpu": 8_250.0,
        "node_base": 5_000.0,
        "power_transitions": 0.0,
        "facility_overhead": 0.5 * 65_750.0,  # (PUE - 1) x IT energy
    }
    assert (gpu_active, gpu_idle, cpu, node_base, it) == (46_500, 6_000, 8_250, 5_000, 65_750)
    assert acc.energy_j == pytest.approx(expected, rel=1e-12, abs=1e-9)
    summary = acc.summary(allocated_gpu_seconds=1.0)
    assert summary["energy_kwh"] == pytest.approx(1.5 * 65_750 / 3.6e6, rel=1e-12)
    assert summary["avg_power_kw"] == pytest.approx(1.5 * 65_750 / 200 / 1000, rel=1e-12)
    # Peak: [150, 200) draws 600 W GPU + 67.5 W CPU + 25 W base = 692.5 W, times PUE.
    assert summary["peak_power_kw"] == pytest.approx(1.5 * 692.5 / 1000, rel=1e-12)


def test_gpu_busy_power_linear_capped_and_binary_at_tdp():
    spec = make_cluster([(1, "V100", 8000, 10**6)])
    node = np.array([0, 0, 0])
    linear, binary = POWER_MODELS.create("linear"), POWER_MODELS.create("binary")
    linear.bind(spec)
    binary.bind(spec)
    load = np.array([0.0, 0.6, 1.7])
    # V100: 30 W idle, 300 W max; sharers' utilisations add up and are capped at 1.
    assert linear.gpu_busy_w(load, node).tolist() == pytest.approx([30.0, 30 + 270 * 0.6, 300.0])
    assert binary.gpu_busy_w(load, node).tolist() == [300.0] * 3  # any allocation draws TDP


def test_shared_gpu_draws_the_sum_of_its_sharers():
    spec = make_cluster([(1, "V100", 8000, 10**6)])
    jobs = make_jobs(
        [
            {"submit": 0, "duration": 100, "gpus": 1, "milli": 500},
            {"submit": 0, "duration": 50, "gpus": 1, "milli": 500},
        ]
    )
    jobs.gpu_util[:] = 0.8  # each pod adds 0.8 x its 0.5 share = 0.4
    _, _, ledger, _ = simulate(jobs, spec, base=0.0)
    both, one = 30 + 270 * 0.8, 30 + 270 * 0.4
    assert ledger.energy_j["gpu_active"] == pytest.approx(both * 50 + one * 50)
    assert ledger.energy_j["gpu_idle"] == pytest.approx(0.0)


def test_job_load_uses_trace_then_model_then_class_defaults():
    jobs = make_jobs([{"gpus": 1}, {"gpus": 1, "milli": 500}, {"gpus": 0}])
    jobs.model_name[:] = ["ncf", "resnet50", ""]
    jobs.gpu_util[0] = 0.5
    load = job_gpu_load(jobs)
    assert load.tolist() == pytest.approx([0.5, 0.9 * 0.5, 0.0])


def test_off_node_boots_and_the_work_waits_for_it():
    spec = make_cluster([(4, "V100", 32_000, 10**6)])
    jobs = make_jobs([{"submit": 0, "duration": 5, "gpus": 1}, {"submit": 50, "duration": 10, "gpus": 2}])
    _, out, acc, ctrl = simulate(
        jobs, spec, manager="idle-timeout", idle_timeout_s=10, boot_time_s=100, shutdown_time_s=0
    )
    assert out.start_s.tolist() == [0.0, 150.0]  # node off at 15, booted on demand at 50, ready at 150
    assert ctrl.boots == 1 and ctrl.shutdowns >= 1
    assert ctrl.node_seconds_off == pytest.approx(50 - 15)
    idle = idle_watts(spec, "linear") + 100.0
    assert acc.energy_j["power_transitions"] == pytest.approx(idle * 100)


def test_constant_price_gives_price_times_energy():
    start = datetime(2023, 1, 1, tzinfo=UTC)
    flat = GridSignal("price", "price", "USD/MWh", "TEST", 2023, "UTC", start, np.full(8760, 42.0))
    flat_ci = GridSignal(
        "carbon_direct", "carbon", "gCO2eq/kWh", "TEST", 2023, "UTC", start, np.full(8760, 42.0)
    )
    anchor = {"rule": "offset", "grid_start": datetime(2023, 3, 1, 7, 30, tzinfo=UTC)}
    rows = [{"submit": i * 100.0, "duration": 900, "gpus": 1 + i % 3} for i in range(20)]
    _, _, acc, _ = simulate(
        make_jobs(rows), price=align(flat, None, **anchor), carbon=align(flat_ci, None, **anchor)
    )
    summary = acc.summary(1.0)
    assert summary["cost_usd"] == pytest.approx(42.0 * summary["energy_kwh"] / 1000, rel=1e-9)
    assert summary["co2_kg"] == pytest.approx(42.0 * summary["energy_kwh"] / 1000, rel=1e-9)  # 42 g/kWh


def _bursty(manager):
    cfg = SimulationConfig(
        power_manager=manager,
        seed=11,
        check_invariants=True,
        synthetic={"num_jobs": 600, "arrival": "bursty", "mean_interarrival_s": 300, "burst_amplitude": 0.95},
    )
    return run_simulation(cfg).summary


def test_idle_timeout_saves_energy_on_a_bursty_trace_and_reports_the_delay():
    always, timeout = _bursty("always-on"), _bursty("idle-timeout")
    assert timeout["energy_kwh"] < always["energy_kwh"]
    assert timeout["node_hours_off"] > 0 and timeout["node_boots"] > 0
    assert always["node_hours_off"] == 0
    extra_delay = timeout["queue_delay_s"]["mean"] - always["queue_delay_s"]["mean"]
    print(
        f"idle-timeout: {1 - timeout['energy_kwh'] / always['energy_kwh']:.1%} less energy, "
        f"+{extra_delay:.0f} s mean queueing delay"
    )
    assert extra_delay >= 0  # jobs may wait for boots, never less than with every node on


def test_forecast_manager_keeps_fewer_nodes_on_than_always_on():
    forecast, always = _bursty("forecast"), _bursty("always-on")
    assert forecast["energy_kwh"] < always["energy_kwh"]
    assert forecast["jobs_completed"] == always["jobs_completed"] == 600
    assert any("reconstruction" in n for n in forecast["notes"])


def test_energy_keys_in_summary():
    s = run_simulation(SimulationConfig(synthetic={"num_jobs": 100})).summary
    for key in (
        "energy_kwh",
        "energy_by_component_kwh",
        "avg_power_kw",
        "peak_power_kw",
        "cost_usd",
        "co2_kg",
        "energy_per_gpu_hour_kwh",
        "node_hours_off",
    ):
        assert key in s
    assert s["cost_usd"] is None and any("--region" in n for n in s["notes"])  # no region: said, not guessed


def test_binary_idle_alibaba_cluster_is_230100_w():
    require_real_file("alibaba-gpu-v2023", "csv/openb_node_list_gpu_node.csv")
    table = cluster_power_table("alibaba-v2023", "binary", None)
    assert table["idle"]["cpu"] == 55_665 and table["idle"]["gpu"] == 174_435
    assert table["idle"]["total"] == 230_100
    assert table["fully allocated"]["total"] == 1_474_110


def test_philly_idle_timeout_with_caiso_prices(tmp_path):
    require_real_file("philly-pollux", "philly.csv")
    require_real_file("electricity-prices-greendcc", "processed/US-CAL-CISO_electricity_prices_2023.csv")
    common = dict(
        workload="philly",
        cluster="philly",
        placement="best-fit",
        power_model="linear",
        region="US-CAL-CISO",
        year=2023,
    )
    timeout = run_simulation(SimulationConfig(power_manager="idle-timeout", **common)).summary
    always = run_simulation(SimulationConfig(power_manager="always-on", **common)).summary
    assert always["energy_kwh"] > timeout["energy_kwh"] > 0
    assert timeout["cost_usd"] > 0 and timeout["co2_kg"] > 0
    assert timeout["energy_model"]["price"]["trace_start_utc"].startswith("2017-09-04")


def replay_fuzzed(rows, spec, **kw):
    """Replay a case from the fuzzer: rows of (submit, duration, GPUs, milli, CPU, GPU spec)."""
    keys = ("submit", "duration", "gpus", "milli", "cpu", "spec")
    jobs = make_jobs([dict(zip(keys, r, strict=True)) for r in rows])
    sim, out, _, _ = simulate_energy(jobs, spec, placement="best-fit", base=10.0, **kw)
    return sim, out


@pytest.mark.slow  # ~13 s on 2 cores: `make test-fast` leaves it out
def test_work_arriving_after_the_queue_drained_still_boots_nodes():
    # A case found by fuzzing: the queue emptied while nodes were off, then a 12-GPU gang arrived. The re-plan
    # trigger compared against the queue length from before the queue drained, so nothing booted and the gang
    # waited until the stall guard (ten simulated years of forecast ticks).
    spec = make_cluster(
        [(8, "A100", 8000, 10**6), (8, "T4", 8000, 10**6), (2, "T4", 8000, 10**6), (2, "T4", 16000, 10**6)]
    )
    rows = [
        (278.9, 206.1, 2, 1000, 6000, ""),
        (462.0, 63.1, 1, 1000, 15000, "V100|A100"),
        (381.9, 188.3, 12, 1000, 17000, ""),
        (73.4, 237.6, 1, 700, 12000, ""),
        (191.7, 249.5, 1, 700, 15000, "V100|A100"),
        (339.4, 44.3, 8, 1000, 15000, "T4"),
        (142.9, 62.3, 1, 250, 16000, "T4"),
        (18.6, 122.2, 1, 1000, 0, "V100|A100"),
        (115.3, 14.0, 2, 1000, 19000, "T4"),
    ]
    sim, out = replay_fuzzed(rows, spec, manager="forecast", boot_time_s=20, forecast_interval_s=50)
    assert (out.status != 1).all()  # nothing left pending
    assert out.status[2] == STATUS_DONE
    assert sim.now < 10_000  # not the ten-year stall


def test_gang_boot_plan_counts_only_gpus_the_gang_can_use():
    # A case found by fuzzing: a 12-GPU gang takes CPU per GPU, so the 8-GPU V100 node (8 vCPU) can hold only 4 of
    # its GPUs. Counting all 8 booted too few nodes, and nothing re-planned: the gang waited forever.
    spec = make_cluster(
        [
            (8, "T4", 40000, 10**6),
            (4, "A100", 64000, 10**6),
            (8, "V100", 8000, 10**6),
            (2, "T4", 16000, 10**6),
        ]
    )
    rows = [
        (33.5, 297.2, 1, 1000, 3000, "T4"),
        (89.4, 255.3, 1, 1000, 8000, ""),
        (294.6, 284.1, 12, 1000, 20000, ""),
    ]
    sim, out = replay_fuzzed(rows, spec, manager="idle-timeout", boot_time_s=0, idle_timeout_s=30)
    assert (out.status == STATUS_DONE).all()
    assert sim.now < 10_000


def test_power_timers_run_after_the_decision_of_their_instant(tmp_path):
    """Node B's idle timeout expires at 600 s, the instant a job that needs it arrives: the job takes B at once,
    as the power manager acts on the state after the scheduling decision (it used to switch B off first and make
    the job wait for a boot)."""
    (tmp_path / "c.yaml").write_text(
        "name: two\nnode_groups:\n  - count: 2\n    gpus: 4\n    gpu_model: V100\n    cpu_milli: 32000\n"
        "    memory_mib: 262144\n"
    )
    (tmp_path / "jobs.csv").write_text("job_id,submit_time,duration,num_gpu\na,0,100000,4\nb,600,100,4\n")
    cfg = SimulationConfig(
        workload=str(tmp_path / "jobs.csv"), cluster=str(tmp_path / "c.yaml"), power_manager="idle-timeout",
        power_states={"idle_timeout_s": 600.0},
    )  # fmt: skip
    run = run_simulation(cfg)
    assert run.jobs.set_index("job_id").loc["b", "start_s"] == 600.0
    assert run.summary["node_boots"] == 0
