"""Allocation baselines (policies/allocation: tiresias, gandiva, optimus-greedy, zeus-pl) on hand-built scenarios
run through the simulator in rounds, every expected time and split computed by hand.

Throughput tables: ``tests/fixtures/perfdata`` (T4; see tests/unit/test_perf_model.py for the values used here:
cifar10 batch 128 -> 10, 18, nan, 48 it/s on 1, 2, 4, 8 GPUs; ncf batch 1024 -> 50, 80, 120 on 1, 2, 4) and the
Gavel toy file in ``tests/fixtures/data`` (v100: Alpha 10 steps/s on one GPU).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import make_cluster
from wattsched.core.jobs import JobTable
from wattsched.core.settings import GpuSetting
from wattsched.energy.dvfs import dvfs_response
from wattsched.energy.power_models import POWER_MODELS
from wattsched.engine.ledger import EnergyLedger
from wattsched.engine.observers import Observer
from wattsched.engine.temporal import Simulator
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import DEFAULT_ROUND_S, build_scheduler
from wattsched.perf.model import PerformanceModel
from wattsched.perf.restart import RestartModel
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.allocation.gandiva import Gandiva
from wattsched.policies.allocation.optimus import OptimusGreedy
from wattsched.policies.allocation.tiresias import Tiresias
from wattsched.policies.allocation.zeus import ZeusPowerLimit

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PERFDATA = FIXTURES / "perfdata"
GAVELDATA = FIXTURES / "data"
ALPHA = "Alpha (batch size 8)"


def table(gpus, submit, duration, models=None, **kw) -> JobTable:
    n = len(gpus)
    return JobTable.build(
        job_id=[f"j{i}" for i in range(n)],
        submit_s=submit,
        duration_s=duration,
        num_gpu=gpus,
        model_name=models or [""] * n,
        **kw,
    )


def run(policy, jobs, spec, data_dir=PERFDATA, restart=None, observers=(), seed=0, round_s=None):
    """The policy in rounds (its own round length, else the run default) with the run's performance model."""
    perf, jobs = PerformanceModel.build(jobs, spec, restart, data_dir)
    scheduler = RoundScheduler(policy, round_s or policy.default_round_s or DEFAULT_ROUND_S)
    sim = Simulator(
        jobs,
        spec,
        scheduler,
        np.random.default_rng(seed),
        perf=perf,
        observers=observers,
        check_invariants=True,
    )
    return sim, sim.run()


def holds(sim, job: int) -> list[tuple[float, float, tuple, int]]:
    """(from, to, GPUs held as ((node, (gpu, ...)), ...), milli per GPU) per stretch the job held GPUs; log
    entries on the same GPUs at the same share back to back (rate or phase changes) are merged."""
    rows = sim.log.intervals(sim.now)
    out: list[tuple[float, float, tuple, int]] = []
    for t0, t1, j, a in zip(rows["time_s"], rows["end_s"], rows["job"], rows["alloc"], strict=True):
        if j != job:
            continue
        gpus = tuple((n, tuple(g)) for n, g, _, _ in sim.log.placements[a])
        share = int(sim.log.shares[a])
        if out and out[-1][2] == gpus and out[-1][3] == share and out[-1][1] == t0:
            out[-1] = (out[-1][0], float(t1), gpus, share)
        else:
            out.append((float(t0), float(t1), gpus, share))
    return [(round(a, 6), round(b, 6), g, s) for a, b, g, s in out]  # microsecond-exact times


def spans(sim, job: int) -> list[tuple[float, float]]:
    return [(a, b) for a, b, _, _ in holds(sim, job)]


def test_build_scheduler_uses_the_policy_round_or_the_default():
    gandiva = build_scheduler(SimulationConfig(allocation="gandiva").scheduler, None)
    assert isinstance(gandiva.policy, Gandiva) and gandiva.round_s == 60.0
    tiresias = build_scheduler(SimulationConfig(allocation="tiresias").scheduler, None)
    assert tiresias.round_s == DEFAULT_ROUND_S == 300.0
    assert (
        build_scheduler(SimulationConfig(allocation="optimus-greedy").scheduler, None).round_s == 60.0
    )  # Pollux's
    assert (
        build_scheduler(SimulationConfig(allocation="optimus-greedy", round_s=120).scheduler, None).round_s
        == 120.0
    )


# -- Tiresias ------------------------------------------------------------------------------------------------


def test_tiresias_demotes_past_3600_gpu_seconds_and_a_newcomer_preempts():
    policy = Tiresias()
    assert policy.parameters()["queues"] == 2 and policy.parameters()["thresholds_gpu_s"] == [3600.0]
    assert policy.parameters()["starvation_knob"] == 8.0
    spec = make_cluster([(2, "V100", 64_000, 262_144)])
    # A holds 2 GPUs: 3,600 GPU-s after 1,800 s. B (1 GPU) arrives at 2,000 s: A is in Q1, B in Q0.
    sim, out = run(policy, table([2, 1], [0.0, 2000.0], [10_000.0, 1000.0]), spec)
    assert spans(sim, 1) == [(2000.0, 3000.0)]
    # A stops for B (both cannot fit), resumes on the same GPUs when B ends: 2 s restart, 8,000 s of work left
    assert spans(sim, 0) == [(0.0, 2000.0), (3000.0, 3000.0 + 2.0 + 8000.0)]
    assert out.preemptions.tolist() == [1, 0] and out.restarts.tolist() == [1, 0]
    # B arriving at 1,700 s finds A still in Q0 (3,400 GPU-s): it waits for the round at 1,800 s that demotes A
    sim, out = run(Tiresias(), table([2, 1], [0.0, 1700.0], [10_000.0, 1000.0]), spec)
    assert spans(sim, 1) == [(1800.0, 2800.0)]
    assert spans(sim, 0) == [(0.0, 1800.0), (2800.0, 2800.0 + 2.0 + 8200.0)]


@pytest.mark.parametrize(
    ("knob", "expected"),
    [
        # A waited 2,000 s >= 0.5 x 4,000 s executed at the round at 6,000 s: back to Q0 (service from zero),
        # ahead of C by submission time; it is demoted again 3,600 GPU-s after it resumed (10,600 s), and C takes
        # over at the round at 10,800 s.
        (0.5, {0: [(0.0, 4000.0), (7000.0, 10800.0), (13800.0, 16004.0)], 2: [(10800.0, 13800.0)]}),
        # no guard: C (Q0) runs before A (Q1)
        (1e9, {0: [(0.0, 4000.0), (10000.0, 16002.0)], 2: [(7000.0, 10000.0)]}),
    ],
)
def test_tiresias_starvation_guard_promotes_a_waiting_job(knob, expected):
    spec = make_cluster([(1, "V100", 64_000, 262_144)])
    jobs = table([1, 1, 1], [0.0, 4000.0, 4500.0], [10_000.0, 3000.0, 3000.0])
    sim, out = run(Tiresias(starvation_knob=knob), jobs, spec)
    assert spans(sim, 1) == [(4000.0, 7000.0)]  # B preempts A (4,000 GPU-s, Q1) on arrival
    assert spans(sim, 0) == expected[0]
    assert spans(sim, 2) == expected[2]
    # A's work adds up: 4,000 + (3,800 - 2) + (2,204 - 2) s with the guard; 4,000 + 6,000 without
    assert out.end_s[0] == expected[0][-1][1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tiresias_places_consolidated(seed):
    spec = make_cluster([(4, "V100", 64_000, 262_144)] * 4)
    spec = dataclasses.replace(spec, switch_id=np.array([0, 0, 1, 1]))
    jobs = table([1, 2, 4, 8], [0.0, 10.0, 20.0, 30.0], [5000.0] * 4)
    sim, _ = run(Tiresias(), jobs, spec, seed=seed)
    first = [holds(sim, j)[0][2] for j in range(4)]
    ((a_node, _),) = first[0]
    ((b_node, b_gpus),) = first[1]
    ((c_node, c_gpus),) = first[2]
    assert b_node == a_node and len(b_gpus) == 2  # the fullest node that fits
    assert c_node != a_node and c_gpus == (0, 1, 2, 3)  # a whole free node
    d_nodes = [n for n, _ in first[3]]
    assert len(d_nodes) == 2 and all(g == (0, 1, 2, 3) for _, g in first[3])
    assert spec.switch_id[d_nodes[0]] == spec.switch_id[d_nodes[1]]  # whole nodes under one switch
    a_switch, c_switch = spec.switch_id[a_node], spec.switch_id[c_node]
    if a_switch == c_switch:  # the other switch is wholly free: D starts on arrival
        assert holds(sim, 3)[0][0] == 30.0 and spec.switch_id[d_nodes[0]] != a_switch
    else:  # two free nodes, but in different switches: D waits for A and B (ends 5,000 and 5,010 s)
        assert holds(sim, 3)[0][0] == 5010.0 and spec.switch_id[d_nodes[0]] == a_switch


# -- Gandiva -------------------------------------------------------------------------------------------------


def one_t4(gpus: int = 1):
    return make_cluster([(gpus, "T4", 64_000, 262_144)])


def test_gandiva_packs_two_low_utilisation_jobs_when_oversubscribed():
    ledger = EnergyLedger(POWER_MODELS.create("linear"), node_base_w=0.0)
    policy = Gandiva()
    jobs = table([1, 1], [0.0, 0.0], [150.0, 150.0], models=["ncf", "ncf"])
    sim, out = run(policy, jobs, one_t4(), observers=[ledger])
    # 2 GPUs wanted, 1 GPU: paired (0.35 + 0.35 <= 1, 3 GiB) and both run at full speed on GPU 0
    for j in (0, 1):
        assert holds(sim, j) == [(0.0, 150.0, ((0, (0,)),), 500)]
    assert policy.packings == 1 and out.preemptions.tolist() == [0, 0]
    assert ledger.energy_j["gpu_active"] == pytest.approx((10 + 60 * 0.7) * 150)  # 52 W
    # not oversubscribed: each its own GPU
    sim, _ = run(Gandiva(), jobs, one_t4(2))
    assert {holds(sim, j)[0][2] for j in (0, 1)} == {((0, (0,)),), ((0, (1,)),)}
    assert {holds(sim, j)[0][3] for j in (0, 1)} == {1000}


def test_gandiva_pairs_when_packing_beats_time_slicing_and_memory_fits():
    ledger = EnergyLedger(POWER_MODELS.create("linear"), node_base_w=0.0)
    jobs = table([1, 1], [0.0, 0.0], [150.0, 150.0], models=["cifar10", "bert"], batch_size=[128, 0])
    sim, _ = run(Gandiva(), jobs, one_t4(), observers=[ledger])
    # U = 0.75 + 0.85 = 1.6: each at 1/1.6 of its speed, summed 1.25 > 1; 2 + 14 GiB fit the 16 GiB T4
    assert [spans(sim, j) for j in (0, 1)] == [[(0.0, 240.0)], [(0.0, 240.0)]]
    assert ledger.energy_j["gpu_active"] == pytest.approx(70.0 * 240)  # summed utilisation capped at 1
    # bert + imagenet (14 + 10 GiB) do not fit together: no packing
    jobs = table([1, 1], [0.0, 0.0], [150.0, 150.0], models=["bert", "imagenet"])
    policy = Gandiva()
    sim, _ = run(policy, jobs, one_t4())
    assert policy.packings == 0 and all(s[3] == 1000 for j in (0, 1) for s in holds(sim, j))


def test_gandiva_pairs_a_newcomer_with_a_running_job_only_where_its_cpu_fits_beside():
    """A job that runs alone and a newcomer it would pair with: the newcomer's CPU must fit beside the host's on
    the host's node (it used to be taken unchecked: over-allocation of CPU, the run stopped)."""
    node = make_cluster([(1, "T4", 10_000, 262_144)])
    jobs = table([1, 1], [0.0, 10.0], [150.0, 150.0], models=["ncf", "ncf"], cpu_milli=[6_000, 6_000])
    policy = Gandiva()
    sim, _ = run(policy, jobs, node)  # check_invariants on: no over-allocation anywhere
    assert policy.packings == 0  # 6 + 6 cores do not fit 10: the newcomer waits for the GPU
    assert holds(sim, 0) == [(0.0, 150.0, ((0, (0,)),), 1000)]
    assert spans(sim, 1)[0][0] >= 150.0
    # with room for both, they pair on the running job's GPU
    jobs = table([1, 1], [0.0, 10.0], [150.0, 150.0], models=["ncf", "ncf"], cpu_milli=[4_000, 4_000])
    policy = Gandiva()
    sim, _ = run(policy, jobs, node)
    assert policy.packings == 1 and holds(sim, 1)[0][2:] == (((0, (0,)),), 500)


def test_gandiva_unpacks_when_gpus_free_up():
    # three ncf jobs on two T4: demand 3 > 2, so two share GPU 0; when the third ends (100 s) one of the pair
    # moves to the freed GPU (a migration: 2 + 27 + 2 x (log2 1 + 1) s + 2 x 0.048 GB / 1 GB/s = 31.096 s)
    jobs = table([1, 1, 1], [0.0] * 3, [300.0, 300.0, 100.0], models=["ncf"] * 3)
    sim, out = run(Gandiva(), jobs, one_t4(2))
    assert holds(sim, 0) == [(0.0, 100.0, ((0, (0,)),), 500), (100.0, 331.096, ((0, (1,)),), 1000)]
    assert holds(sim, 1) == [(0.0, 100.0, ((0, (0,)),), 500), (100.0, 300.0, ((0, (0,)),), 1000)]  # stays
    assert holds(sim, 2) == [(0.0, 100.0, ((0, (1,)),), 1000)]
    assert out.restarts.tolist() == [1, 0, 0]


def test_gandiva_time_slices_in_turns_of_60_s():
    jobs = table([1, 1], [0.0, 0.0], [150.0, 150.0], models=["bert", "imagenet"])
    sim, out = run(Gandiva(), jobs, one_t4(), restart=RestartModel("fixed", fixed_s=0.0))
    assert spans(sim, 0) == [(0.0, 60.0), (120.0, 180.0), (240.0, 270.0)]
    assert spans(sim, 1) == [(60.0, 120.0), (180.0, 240.0), (270.0, 300.0)]  # alone after 270: runs on
    assert out.work_lost.tolist() == [0.0, 0.0]  # suspended with state saved


class Deadline(Observer):
    """Fails a run whose simulated time passes `limit_s` (a livelock would otherwise never end)."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s

    def on_interval(self, sim, t0: float, t1: float) -> None:
        if t1 > self.limit_s:
            raise AssertionError(f"still running at {t1:.0f} s: livelock?")


def test_gandiva_keeps_a_slice_through_arrivals_restarts_and_completions():
    # four jobs that cannot pack (memory) on one T4, two arriving mid-slice: every unit gets whole 60 s slices in
    # the order it waited; a decision inside a slice (arrival, restart end, completion) does not rotate.
    jobs = table(
        [1] * 4, [0.0, 0.0, 20.0, 40.0], [150.0] * 4, models=["bert", "imagenet", "deepspeech2", "yolov3"]
    )
    sim, out = run(Gandiva(), jobs, one_t4(), observers=[Deadline(2000.0)])
    # resume on the same GPU: 2 s + 2 x checkpoint (parameters x 12 B) / 1 GB/s
    delay = [2 + 2 * p * 12 / 1000 for p in (110.0, 25.6, 38.0, 61.9)]  # 4.64, 2.6144, 2.912, 3.4856
    end = 480.0
    for j in range(4):
        start = end
        end = start + 30 + 2 * delay[j]  # 150 s of work: 60, then 60 - delay, then the rest after a delay
        first, second = 60.0 * j, 240.0 + 60.0 * j
        assert spans(sim, j) == [(first, first + 60), (second, second + 60), (round(start, 6), round(end, 6))]
    assert out.preemptions.tolist() == [2, 2, 2, 2] and out.restarts.tolist() == [2, 2, 2, 2]


def test_gandiva_rotates_a_packed_pair_with_a_single_job():
    # ncf + ncf pack into one unit; cifar10 is the other unit on the one GPU: the two units take turns
    jobs = table([1, 1, 1], [0.0] * 3, [150.0] * 3, models=["ncf", "ncf", "cifar10"], batch_size=[0, 0, 128])
    sim, out = run(Gandiva(), jobs, one_t4(), restart=RestartModel("fixed", fixed_s=0.0))
    for j in (0, 1):
        assert spans(sim, j) == [(0.0, 60.0), (120.0, 180.0), (240.0, 270.0)]
        assert all(s[3] == 500 for s in holds(sim, j))
    assert spans(sim, 2) == [(60.0, 120.0), (180.0, 240.0), (270.0, 300.0)]
    assert out.preemptions.tolist() == [2, 2, 2]
    # with the ElasticFlow restart model a resume on the same GPU costs 2 s + 2 x checkpoint / (1 GB/s):
    # ncf 4.0 M parameters x 12 B = 0.048 GB, cifar10 11.2 M x 12 B = 0.1344 GB
    sim, out = run(Gandiva(), jobs, one_t4())
    ncf_delay, cifar_delay = 2 + 2 * 0.048, 2 + 2 * 0.1344
    ncf_end = 240 + ncf_delay + (150 - 60 - (60 - ncf_delay))
    cifar_end = ncf_end + cifar_delay + (150 - 60 - (60 - cifar_delay))
    np.testing.assert_allclose(out.end_s, [ncf_end, ncf_end, cifar_end])  # 274.192, 308.7296
    assert out.restarts.tolist() == [2, 2, 2]


# -- Optimus (greedy) ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("durations", "split"),
    [
        # work W = duration x rate on 1 GPU: cifar10 10,000 it, ncf 20,000 it. Gains (t(n) - t(n+1)) x W:
        # cifar10 1->2 (1/10 - 1/18) x 10,000 = 444.4, 2->3 (1/18 - 1/23) x 10,000 = 120.8;
        # ncf 1->2 (1/50 - 1/80) x 20,000 = 150, 2->3 (1/80 - 1/100) x 20,000 = 50.
        # One GPU each, then 444.4 (cifar10), then 150 (ncf): 2 + 2.
        ((1000.0, 400.0), (2, 2)),
        # cifar10 1,000 it: gains 44.4, 12.1; ncf as above: 150 (ncf), 50 (ncf) > 44.4: 1 + 3.
        ((100.0, 400.0), (1, 3)),
    ],
)
def test_optimus_greedy_hands_gpus_to_the_largest_marginal_gain(durations, split):
    spec = make_cluster([(4, "T4", 64_000, 262_144)])
    jobs = table([1, 1], [0.0, 0.0], list(durations), models=["cifar10", "ncf"], batch_size=[128, 1024])
    sim, out = run(OptimusGreedy(), jobs, spec, round_s=300.0)
    np.testing.assert_array_equal(sim.perf.work, [durations[0] * 10, durations[1] * 50])
    first = [holds(sim, j)[0] for j in (0, 1)]
    assert first[0][0] == first[1][0] == out.start_s[0]  # both start in the same round
    assert tuple(len(h[2][0][1]) for h in first) == split
    if split == (2, 2):
        t0 = out.start_s[0]
        assert out.end_s[1] == pytest.approx(t0 + 20_000 / 80)  # ncf on 2 GPUs
        # the next round gives cifar10 all 4 GPUs: a move (2 + 27 + 2 x (log2 4 + 1) s + 2 x 0.1344 GB / 1 GB/s)
        # with 10,000 - 300 x 18 it left at 28 it/s (4 GPUs interpolated between 2 and 8)
        delay = 2 + 27 + 2 * (math.log2(4) + 1) + 2 * 0.1344
        assert out.end_s[0] == pytest.approx(t0 + 300 + delay + (10_000 - 300 * 18) / 28)
        assert len(holds(sim, 0)[-1][2][0][1]) == 4


# -- Zeus power limit ----------------------------------------------------------------------------------------


def test_zeus_picks_the_least_cost_limit_and_charges_profiling():
    spec = make_cluster([(2, "V100", 64_000, 262_144)])
    jobs = table([1], [0.0], [100.0], models=[ALPHA], gpu_util=[1.0])  # 1,000 steps at 10 steps/s
    ledger = EnergyLedger(POWER_MODELS.create("linear"), node_base_w=0.0)
    policy = ZeusPowerLimit()
    sim, out = run(policy, jobs, spec, data_dir=GAVELDATA, observers=[ledger])
    limits = [300.0, 275.0, 250.0, 225.0, 200.0, 175.0, 150.0]  # 25 W steps down to the 150 W minimum
    speed, scale = {}, {}
    for w in limits:
        speed[w], scale[w] = dvfs_response("V100", GpuSetting(power_limit_fraction=w / 300))
    rate = {w: 10.0 * speed[w] for w in limits}
    power = {w: 30 + 270 * min(1.0, scale[w]) for w in limits}  # W: utilisation 1 x the limit's power scale
    cost = {w: 0.5 * power[w] / rate[w] + 0.5 * 300 * 1 / rate[w] for w in limits}  # per step
    best = min(limits, key=cost.get)
    assert policy.chosen == {0: best}
    assert best == 225.0  # an interior optimum: neither the maximum nor the minimum limit
    # 50 steps (10 warm-up + 40 measured) at every limit, highest first, are real progress; the rest at `best`
    profile_s = sum(50 / rate[w] for w in limits)
    end = profile_s + (1000 - 50 * len(limits)) / rate[best]
    assert out.end_s[0] == pytest.approx(end)
    assert out.end_s[0] > 1000 / rate[best]  # later than running at the chosen limit from the start
    energy = sum(power[w] * 50 / rate[w] for w in limits) + power[best] * (1000 - 350) / rate[best]
    assert ledger.energy_j["gpu_active"] == pytest.approx(energy)
    frame = sim.log.frame(spec.node_names, jobs.job_id)
    held = frame[frame["num_gpu"] > 0]
    np.testing.assert_allclose(held["power_limit_frac"], [w / 300 for w in [*limits, best]])
