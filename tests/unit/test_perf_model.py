"""Job performance model (wattsched.perf.model, perf.catalog, perf.restart) against hand-computed values.

``tests/fixtures/perfdata`` is a data directory in the registry layout holding hand-written ElasticFlow-style T4
tables for the six Pollux applications (iterations/s at 1, 2, 4, 8 GPUs):

    cifar10      batch 128: 10, 18, nan, 48      batch 256: 6, 11, 20, 36
    ncf          batch 1024: 50, 80, 120         (1, 2, 4 GPUs)
    bert         batch 12: 2, 3.5, 6             (1, 2, 4 GPUs)
    imagenet     batch 256: 4, 7, 12, 20
    deepspeech2  batch 64: 5, 9, 16              (1, 2, 4 GPUs)
    yolov3       batch 32: 3, 5, 8               (1, 2, 4 GPUs)

``tests/fixtures/data/gavel-traces/simulation_throughputs.json`` is the Gavel toy file (v100: Alpha 10/16/25 steps/s
on 1/2/4 GPUs, Beta 2/3, A3C 3; pairs Alpha+Beta [6, 2] and A3C+Beta [2.5, 1.5]).

Catalog facts used by hand (perf/catalog.py): utilisation cifar10 0.75, ncf 0.35, bert 0.85, imagenet 0.90,
a3c 0.30; memory cifar10 2, ncf 1.5, bert 14, imagenet 10 GiB; parameters bert 110 M. T4: 10 W idle, 70 W max,
16 GiB. V100: 30 W idle, 300 W max.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import make_cluster, make_sim
from wattsched.core.jobs import JobTable
from wattsched.core.settings import DEFAULT_SETTING, GpuSetting
from wattsched.energy.dvfs import dvfs_response
from wattsched.energy.power_models import POWER_MODELS
from wattsched.engine.ledger import EnergyLedger
from wattsched.engine.temporal import Simulator
from wattsched.perf.catalog import MODEL_FACTS, OWN_MEASUREMENTS, TABLE_SOURCE, facts, normalise
from wattsched.perf.model import PerformanceModel
from wattsched.perf.restart import RestartModel
from wattsched.perf.tables import UNCONSOLIDATED_FACTOR
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.contract import AllocationPolicy, Decision, InvalidDecision, Target

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PERFDATA = FIXTURES / "perfdata"
GAVELDATA = FIXTURES / "data"
ALPHA = "Alpha (batch size 8)"
BETA = "Beta (batch size 4)"
RULE = DEFAULT_SETTING


def jobs_of(models, gpus=None, **kw) -> JobTable:
    n = len(models)
    return JobTable.build(
        job_id=[f"j{i}" for i in range(n)],
        submit_s=kw.pop("submit", [0.0] * n),
        duration_s=kw.pop("duration", [100.0] * n),
        num_gpu=gpus or [1] * n,
        model_name=models,
        **kw,
    )


def t4_cluster(nodes: int = 4, switches=None):
    """`nodes` x 4 T4; switch_id as given (default: two nodes per switch)."""
    spec = make_cluster([(4, "T4", 64_000, 262_144)] * nodes)
    ids = np.arange(nodes) // 2 if switches is None else np.asarray(switches)
    return dataclasses.replace(spec, switch_id=ids.astype(np.int64))


def v100_cluster(nodes: int = 2):
    return make_cluster([(4, "V100", 64_000, 262_144)] * nodes)


def t4_model(jobs, spec=None, **kw):
    return PerformanceModel.build(jobs, spec or t4_cluster(), data_dir=PERFDATA, **kw)


# -- catalog -------------------------------------------------------------------------------------------------


def test_catalog_names_facts_and_sources():
    assert normalise("ResNet-50 (batch size 64)") == "resnet50"
    assert normalise("resnet50_cifar10") == "resnet50cifar10"
    assert facts("Transformer (batch size 128)") is MODEL_FACTS["transformer"]
    assert facts("no-such-model") is None
    assert facts("cifar10").utilisation == 0.75 and facts("bert").memory_gib == 14.0
    assert facts("bert").checkpoint_gb == pytest.approx(110e6 * 4 * 3 / 1e9)  # 1.32 GB
    assert TABLE_SOURCE["T4"] == ("elasticflow", "T4") and TABLE_SOURCE["V100M32"] == ("gavel", "v100")
    assert TABLE_SOURCE["A10"] == ("elasticflow", "T4") and "A10" not in OWN_MEASUREMENTS


def test_proxy_gpu_uses_stated_tables_and_says_so():
    spec = make_cluster([(4, "A10", 64_000, 262_144)])
    model, _ = PerformanceModel.build(jobs_of(["cifar10"], batch_size=[128]), spec, data_dir=PERFDATA)
    assert model.describe()["tables"] == {"A10": "elasticflow/T4"}
    assert "no throughput measurements for A10: modelled with the elasticflow/T4 tables" in model.notes
    assert model.solo_rate(0, 0, 2, 1, 1, RULE) == 18.0


# -- solo rates ----------------------------------------------------------------------------------------------


def test_solo_rate_is_the_table_cell_at_measured_counts():
    jobs = jobs_of(["cifar10", "cifar10", "bert"], batch_size=[128, 256, 0])
    model, _ = t4_model(jobs)
    assert model.modelled.tolist() == [True, True, True]
    assert [model.solo_rate(0, 0, n, -(-n // 4), 1, RULE) for n in (1, 2, 8)] == [10.0, 18.0, 48.0]
    assert model.solo_rate(1, 0, 4, 1, 1, RULE) == 20.0  # batch 256 row
    assert model.batch[2] == 12.0  # no batch in the trace: the table's first row
    assert model.solo_rate(2, 0, 4, 1, 1, RULE) == 6.0


def test_solo_rate_interpolates_and_extrapolates_by_the_table_rules():
    model, _ = t4_model(jobs_of(["cifar10"], batch_size=[128]))
    # batch 128: 4 GPUs is not measured, 2 (18 it/s) and 8 (48 it/s) bracket it
    assert model.solo_rate(0, 0, 4, 1, 1, RULE) == pytest.approx(18 + (4 - 2) / (8 - 2) * (48 - 18))  # 28
    assert model.solo_rate(0, 0, 3, 1, 1, RULE) == pytest.approx(23.0)
    # above 8: the last measured step 2 -> 8 continued as a power law, r = (48/18)**(1/2) per doubling
    assert model.solo_rate(0, 0, 16, 4, 2, RULE) == pytest.approx(48 * math.sqrt(48 / 18))  # 78.38
    assert model.max_gpus(0, 0) == 8


def test_spread_placement_runs_at_the_unconsolidated_throughput():
    model, _ = t4_model(jobs_of(["cifar10"], batch_size=[128]))  # 4 nodes x 4 T4, two nodes per switch
    assert model.solo_rate(0, 0, 2, 2, 1, RULE) == pytest.approx(18 * UNCONSOLIDATED_FACTOR)  # 13.302
    assert model.solo_rate(0, 0, 8, 2, 2, RULE) == pytest.approx(48 * 0.739)  # 2 nodes fit under one switch
    assert model.solo_rate(0, 0, 8, 3, 1, RULE) == pytest.approx(48 * 0.739)  # a third node is not needed
    assert model.solo_rate(0, 0, 8, 2, 1, RULE) == 48.0
    assert model.solo_rate(0, 0, 16, 4, 2, RULE) == pytest.approx(
        48 * math.sqrt(48 / 18)
    )  # needs both switches
    # Gavel: the measured unconsolidated cell (Alpha on 2 GPUs over 2 nodes: 12 instead of 16 steps/s)
    gavel, _ = PerformanceModel.build(jobs_of([ALPHA]), v100_cluster(), data_dir=GAVELDATA)
    assert gavel.solo_rate(0, 0, 2, 1, 1, RULE) == 16.0
    assert gavel.solo_rate(0, 0, 2, 2, 1, RULE) == 12.0


def test_a_service_hour_scales_by_its_replicas_wherever_they_are():
    """An inference service's GPUs are independent replicas: n GPUs serve n times one GPU's rate, spread or not;
    a training job of the same model keeps its table's scaling and its spread penalty."""
    from wattsched.core.jobs import INFERENCE, TRAINING

    jobs = jobs_of(
        ["cifar10", "cifar10"], gpus=[2, 2], batch_size=[128, 128], job_class=[TRAINING, INFERENCE]
    )
    model, _ = t4_model(
        jobs
    )  # 4 nodes x 4 T4: cifar10 runs 10 steps/s on 1 GPU, 18 on 2, 48 on 8 (its table)
    one = model.solo_rate(1, 0, 1, 1, 1, RULE)
    assert one == model.solo_rate(0, 0, 1, 1, 1, RULE)
    for n, nodes, switches in [(2, 1, 1), (2, 2, 1), (8, 2, 1), (8, 4, 2), (3, 3, 2)]:
        assert model.solo_rate(1, 0, n, nodes, switches, RULE) == pytest.approx(n * one)
    assert model.solo_rate(0, 0, 2, 2, 1, RULE) == pytest.approx(18 * UNCONSOLIDATED_FACTOR)
    # its hour of work takes its hour on the GPUs it asked for, and twice that on half of them
    assert model.work[1] / model.solo_rate(1, 0, 2, 1, 1, RULE) == pytest.approx(100.0)
    assert model.work[1] / model.solo_rate(1, 0, 1, 1, 1, RULE) == pytest.approx(200.0)


def test_job_without_a_table_runs_at_trace_speed_scaled_linearly():
    jobs = jobs_of(["", "cifar10"], gpus=[2, 1], duration=[500.0, 100.0], batch_size=[0, 128])
    model, _ = t4_model(jobs)
    assert model.modelled.tolist() == [False, True]
    assert model.work[0] == 500.0  # seconds of work at full speed
    assert [model.solo_rate(0, 0, n, 1, 1, RULE) for n in (1, 2, 4)] == [0.5, 1.0, 2.0]
    assert model.max_gpus(0, 0) == 2
    assert "1 GPU job(s) without a throughput table run at trace speed" in model.notes


# -- sharing ---------------------------------------------------------------------------------------------


def test_gavel_measured_pairs_give_the_shared_factor():
    jobs = jobs_of([ALPHA, BETA, "A3C", ALPHA], gpus=[1, 1, 1, 2], gpu_util=[0.8, np.nan, np.nan, 0.8])
    model, _ = PerformanceModel.build(jobs, v100_cluster(), data_dir=GAVELDATA)
    alpha, beta, a3c, alpha2 = range(4)
    assert model.shared_factor(alpha, 0, [[beta]]) == pytest.approx(6.0 / 10.0)
    assert model.shared_factor(beta, 0, [[alpha]]) == pytest.approx(2.0 / 2.0)  # stored under Alpha's entry
    assert model.shared_factor(a3c, 0, [[beta]]) == pytest.approx(2.5 / 3.0)
    assert model.shared_factor(beta, 0, [[a3c]]) == pytest.approx(1.5 / 2.0)
    # A3C + Alpha is [0, 0] in the file (not measured): time-slicing, A3C 0.30 (catalog) + Alpha 0.8 (trace)
    assert model.shared_factor(a3c, 0, [[alpha]]) == pytest.approx(1 / 1.1)
    # a 2-GPU Alpha job is not a measured one-GPU pair: time-slicing on the shared GPU, slowest GPU wins
    assert model.shared_factor(alpha2, 0, [[a3c], []]) == pytest.approx(1 / 1.1)
    assert model.shared_factor(alpha, 0, [[]]) == 1.0


def test_time_slicing_factor_from_catalog_utilisations():
    jobs = jobs_of(
        ["cifar10", "bert", "ncf", "ncf", "cifar10", "cifar10"],
        gpus=[1, 1, 1, 1, 2, 1],
        batch_size=[128, 0, 0, 0, 128, 128],
        gpu_util=[np.nan] * 5 + [0.5],
    )
    model, _ = t4_model(jobs)
    cifar, bert, ncf1, ncf2, cifar2, slow = range(6)
    assert model.slicing_utilisation(cifar) == 0.75 and model.slicing_utilisation(ncf1) == 0.35
    assert model.shared_factor(cifar, 0, [[bert]]) == pytest.approx(1 / (0.75 + 0.85))  # 0.625
    assert model.shared_factor(bert, 0, [[cifar]]) == pytest.approx(0.625)
    assert model.shared_factor(ncf1, 0, [[ncf2]]) == 1.0  # 0.35 + 0.35 <= 1: no slowdown
    assert model.shared_factor(cifar, 0, [[ncf1, ncf2]]) == pytest.approx(1 / (0.75 + 0.35 + 0.35))
    assert model.shared_factor(ncf1, 0, [[ncf2, cifar]]) == pytest.approx(1 / 1.45)
    # a 2-GPU job runs at the pace of its most crowded GPU
    assert model.shared_factor(cifar2, 0, [[ncf1], [bert]]) == pytest.approx(1 / 1.6)
    # the trace's utilisation overrides the catalog's
    assert model.shared_factor(slow, 0, [[bert]]) == pytest.approx(1 / (0.5 + 0.85))


def test_shared_pod_utilisation_is_scaled_by_its_share():
    jobs = jobs_of(["cifar10"], batch_size=[128], gpu_milli=[500])
    model, _ = t4_model(jobs)
    assert model.slicing_utilisation(0) == pytest.approx(0.375)
    assert model.gpu_load(0, 0, RULE) == pytest.approx(0.375)


class Pin(AllocationPolicy):
    """Starts each pending job on the target given for it (a test double)."""

    name = "pin"
    decide_on_arrival = True

    def __init__(self, targets: dict[int, Target]):
        self.targets = targets

    def allocate(self, view):
        assign = {j: self.targets[j] for j in view.pending_jobs().tolist()}
        return Decision(keep=view.running_jobs(), assign=assign)


def run_pinned(jobs, spec, targets, observers=(), data_dir=PERFDATA):
    perf, jobs = PerformanceModel.build(jobs, spec, data_dir=data_dir)
    sim = Simulator(
        jobs,
        spec,
        RoundScheduler(Pin(targets), 300.0),
        np.random.default_rng(0),
        perf=perf,
        observers=observers,
        check_invariants=True,
    )
    return sim, sim.run()


def on_gpu(gpu: int, share: int = 500) -> Target:
    return Target(((0, (gpu,), 0, 0),), share)


def test_power_of_a_shared_gpu_is_capped_linear_in_summed_utilisation():
    spec = make_cluster([(2, "T4", 64_000, 262_144)])
    jobs = jobs_of(["cifar10", "bert", "ncf", "ncf"], batch_size=[128, 0, 0, 0])
    model, _ = t4_model(jobs, spec)
    assert model.gpu_power_w(0, 0, RULE) == pytest.approx(10 + 60 * 0.75)  # 55 W running alone
    assert model.gpu_power_w(1, 0, RULE) == pytest.approx(10 + 60 * 0.85)  # 61 W
    ledger = EnergyLedger(POWER_MODELS.create("linear"), node_base_w=0.0)
    targets = {0: on_gpu(0), 1: on_gpu(0), 2: on_gpu(1), 3: on_gpu(1)}
    _, out = run_pinned(jobs, spec, targets, observers=[ledger])
    # GPU 0: cifar10 + bert, U = 1.6 -> each at 0.625 of its speed (100 s of work -> 160 s), the GPU at 70 W
    # GPU 1: ncf + ncf, U = 0.7 -> no slowdown (100 s), the GPU at 10 + 60 x 0.7 = 52 W
    np.testing.assert_allclose(out.end_s, [160.0, 160.0, 100.0, 100.0])
    assert ledger.energy_j["gpu_active"] == pytest.approx(70.0 * 160 + 52.0 * 100)


def test_gpu_memory_must_fit_when_jobs_share_a_gpu():
    spec = make_cluster([(1, "T4", 64_000, 262_144)])
    fits = jobs_of(["bert", "cifar10"], batch_size=[0, 128])  # 14 + 2 = 16 GiB on a 16 GiB T4
    model, _ = t4_model(fits, spec)
    assert (model.memory_gib(0), model.memory_gib(1)) == (14.0, 2.0)
    _, out = run_pinned(fits, spec, {0: on_gpu(0), 1: on_gpu(0)})
    np.testing.assert_allclose(out.end_s, [160.0, 160.0])  # U = 0.85 + 0.75: both at 1/1.6 of their speed
    refused = jobs_of(["bert", "imagenet"], batch_size=[0, 256])  # 14 + 10 = 24 GiB
    with pytest.raises(InvalidDecision, match=r"GPU memory does not fit: 24\.0 GiB needed on a 16 GiB GPU"):
        run_pinned(refused, spec, {0: on_gpu(0), 1: on_gpu(0)})


# -- energy per iteration --------------------------------------------------------------------------------


def test_energy_per_iteration_by_hand_on_t4():
    model, _ = t4_model(jobs_of(["cifar10"], batch_size=[128]))
    p = 10 + 60 * 0.75  # 55 W per GPU
    cases = {(1, 1): 1 * p / 10, (2, 1): 2 * p / 18, (8, 2): 8 * p / 48, (8, 3): 8 * p / (48 * 0.739)}
    for (n, nodes), expected in cases.items():
        assert model.energy_per_iteration(0, 0, n, nodes, 1, RULE) == pytest.approx(expected)
        rate = model.solo_rate(0, 0, n, nodes, 1, RULE)
        assert model.energy_per_unit(0, 0, n, nodes, 1, RULE) == pytest.approx(
            n * model.gpu_power_w(0, 0, RULE) / rate
        )
    # sub-linear scaling and spreading both cost energy per iteration
    values = [cases[k] for k in ((1, 1), (2, 1), (8, 2), (8, 3))]
    assert values == sorted(values) and len(set(values)) == 4


def test_energy_per_iteration_falls_with_the_power_limit_on_v100():
    model, _ = PerformanceModel.build(jobs_of([ALPHA], gpu_util=[1.0]), v100_cluster(), data_dir=GAVELDATA)
    energies = []
    for p in (1.0, 0.9, 0.7, 0.5):
        setting = GpuSetting(power_limit_fraction=p)
        speed, scale = dvfs_response("V100", setting)
        expected = (30 + 270 * min(1.0, scale)) / (10.0 * speed)  # W per GPU / (it/s)
        assert model.energy_per_iteration(0, 0, 1, 1, 1, setting) == pytest.approx(expected)
        assert model.solo_rate(0, 0, 1, 1, 1, setting) == pytest.approx(10.0 * speed)
        energies.append(expected)
    assert energies[0] == pytest.approx(30.0)  # 300 W / 10 it/s at the maximum limit
    assert all(a > b for a, b in itertools.pairwise(energies))


# -- model assignment and work ---------------------------------------------------------------------------

# Hand table: iterations/s at the trace GPU counts used below, per (model, batch).
RATE = {
    ("cifar10", 128): {1: 10, 2: 18, 8: 48},
    ("cifar10", 256): {1: 6, 2: 11, 8: 36},
    ("ncf", 1024): {1: 50, 2: 80},
    ("bert", 12): {1: 2, 2: 3.5},
    ("imagenet", 256): {1: 4, 2: 7, 8: 20},
    ("deepspeech2", 64): {1: 5, 2: 9},
    ("yolov3", 32): {1: 3, 2: 5},
}


def assignment_jobs() -> JobTable:
    gpus = [1, 1, 1, 1, 2, 2, 8, 8, 8, 1, 0, 1, 1, 2]
    n = len(gpus)
    return JobTable.build(
        job_id=[f"j{i}" for i in range(n)],
        submit_s=[0.0] * n,
        duration_s=[100.0 + i for i in range(n)],
        num_gpu=gpus,
        gpu_milli=[0 if g == 0 else 1000 for g in gpus],
        model_name=[""] * 9 + ["bert", "", "", "", ""],
    )


def test_model_assignment_is_seeded_recorded_and_follows_the_rule():
    jobs = assignment_jobs()
    spec = t4_cluster(2)
    runs = [t4_model(jobs, spec, assign=True, rng=np.random.default_rng(s)) for s in (3, 3, 4)]
    (m1, j1), (_, j2), (m3, j3) = runs
    names1 = j1.model_name.astype(str).tolist()
    assert names1 == j2.model_name.astype(str).tolist() and j1.batch_size.tolist() == j2.batch_size.tolist()
    assert names1 != j3.model_name.astype(str).tolist()
    expected_assigned = [True] * 9 + [False, False, True, True, True]  # named job and CPU-only job are not
    for model, table in ((m1, j1), (m3, j3)):
        names = table.model_name.astype(str)
        assert model.assigned.tolist() == expected_assigned
        assert names[9] == "bert" and names[10] == ""
        assert set(names[6:9]) <= {"cifar10", "imagenet"}  # only these tables reach 8 GPUs
        assert sum(model.assignment_counts.values()) == 12
        assert model.assignment_counts == {
            m: int((names[model.assigned] == m).sum()) for m in set(names[model.assigned])
        }
        info = model.describe()["model_assignment"]
        assert info["jobs_assigned"] == 12 and info["per_model"] == dict(
            sorted(model.assignment_counts.items())
        )
        for j in np.flatnonzero(model.assigned).tolist():
            key = (str(names[j]), int(table.batch_size[j]))
            assert key in RATE  # a measured batch size of the chosen model
            # work = trace duration x throughput at the trace's GPU count (one node: consolidated)
            assert model.work[j] == pytest.approx(table.duration_s[j] * RATE[key][int(table.num_gpu[j])])
        assert model.work[9] == pytest.approx(109.0 * 2)  # named bert, batch from the table's first row
        assert model.work[10] == 110.0  # CPU-only: seconds
    without, same = t4_model(jobs, spec)  # no assignment: only the named job has a table
    assert without.modelled.tolist() == [False] * 9 + [True] + [False] * 4
    assert "model_assignment" not in without.describe() and same.model_name[0] == ""


def test_a_job_keeps_its_duration_at_its_trace_configuration():
    spec = t4_cluster(1)
    jobs = JobTable.build(
        job_id=["plain", "named", "assigned"],
        submit_s=[0.0, 0.0, 0.0],
        duration_s=[123.4, 77.7, 55.5],
        num_gpu=[2, 2, 1],
        model_name=["", "cifar10", ""],
        batch_size=[0, 256, 0],
    )
    perf, jobs = t4_model(jobs, spec, assign=False)
    assert perf.work[0] == 123.4 and perf.work[1] == pytest.approx(77.7 * 11)
    sim = make_sim(jobs, spec, perf=perf)
    out = sim.run()
    assert out.end_s[0] - out.start_s[0] == 123.4
    assert out.end_s[1] - out.start_s[1] == pytest.approx(77.7, rel=1e-12)
    perf2, jobs2 = t4_model(jobs, spec, assign=True, rng=np.random.default_rng(0))
    assert perf2.assigned.tolist() == [True, False, True]
    out2 = make_sim(jobs2, spec, perf=perf2).run()
    np.testing.assert_allclose(out2.end_s - out2.start_s, [123.4, 77.7, 55.5], rtol=1e-12)


# -- restarts ----------------------------------------------------------------------------------------------


def test_elasticflow_restart_delays_by_hand():
    r = RestartModel()
    assert r.delay_s(8, same_gpus=False) == pytest.approx(2 + 27 + 2 * (3 + 1))  # 37 s
    assert r.delay_s(8, same_gpus=True) == 2.0
    assert r.delay_s(1, same_gpus=False) == pytest.approx(31.0)
    assert r.delay_s(3, same_gpus=False) == pytest.approx(29 + 2 * (math.log2(3) + 1))
    assert r.delay_s(256, same_gpus=False) == pytest.approx(7 + 27 + 20 + 2 * (8 + 1))  # 72 s
    assert r.delay_s(256, same_gpus=True) == 7.0
    assert r.delay_s(8, False, checkpoint_gb=1.32) == pytest.approx(37 + 2.64)  # save + load at 1 GB/s
    assert RestartModel(storage_gb_per_s=2.0).delay_s(8, False, 1.32) == pytest.approx(37 + 1.32)


def test_fixed_restart_delay_and_unknown_kind():
    assert RestartModel("fixed").delay_s(1, False) == 30.0
    fixed = RestartModel("fixed", fixed_s=45.0)
    assert fixed.delay_s(512, False, 100.0) == fixed.delay_s(1, True) == 45.0
    assert fixed.describe() == {"restart_model": "fixed", "restart_delay_s": 45.0}
    with pytest.raises(ValueError, match="unknown restart model 'pollux'"):
        RestartModel("pollux")


def test_restart_delay_of_a_job_adds_its_checkpoint():
    jobs = jobs_of(["bert", ""], gpus=[4, 4])
    model, _ = t4_model(jobs)
    assert model.checkpoint_gb.tolist() == pytest.approx([1.32, 0.0])
    assert model.restart_delay_s(0, 4, False) == pytest.approx(2 + 27 + 2 * 3 + 2 * 1.32)  # 37.64
    assert model.restart_delay_s(0, 4, True) == pytest.approx(2 + 2 * 1.32)
    assert model.restart_delay_s(1, 4, False) == pytest.approx(35.0)
    fixed, _ = PerformanceModel.build(jobs, t4_cluster(), RestartModel("fixed", 12.0), data_dir=PERFDATA)
    assert fixed.restart_delay_s(0, 4, False) == 12.0
