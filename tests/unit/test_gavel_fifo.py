"""FIFO and FIFO with packing as Gavel has them (policies/allocation/gavel_fifo.py, docs/baselines.md): the
consolidating worker assignment, head-of-line blocking, and pairs of equal GPU count above the packing threshold
in FIFO order, re-formed when a partner completes."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import make_cluster
from wattsched.core.jobs import JobTable
from wattsched.engine.temporal import Simulator
from wattsched.perf.model import PerformanceModel
from wattsched.perf.restart import RestartModel
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.allocation.gavel_fifo import GavelFifo, GavelFifoPacked
from wattsched.policies.contract import ALLOCATION_POLICIES


def _jobs(models, submit, gpus, duration):
    n = len(models)
    durations = duration if isinstance(duration, list) else [duration] * n
    return JobTable.build(
        job_id=[f"j{i}" for i in range(n)],
        submit_s=submit,
        duration_s=durations,
        num_gpu=gpus,
        model_name=models,
    )


def _run(jobs, nodes, data_dir, policy, sharing="eaco"):
    from wattsched.perf.colocation import sharing_model

    spec = make_cluster([(8, "V100", 64_000, 786_432)] * nodes)
    perf, jobs = PerformanceModel.build(
        jobs, spec, RestartModel(), data_dir, sharing=sharing_model(sharing),
        loads=sharing_model("eaco") if sharing == "eaco" else None,
    )  # fmt: skip
    # with eaco: EaCO's testbed as the EaCO experiment runs it (its measured loads, gpu_loads: eaco-measured);
    # with slicing: the catalog's heavy loads
    sim = Simulator(
        jobs, spec, RoundScheduler(policy, policy.default_round_s), np.random.default_rng(0), perf=perf,
        check_invariants=True,
    )  # fmt: skip
    return sim, sim.run(), perf


def _nodes(placement) -> set[int]:
    return {node for node, *_ in placement}


def test_both_are_registered_by_name():
    assert isinstance(ALLOCATION_POLICIES.create("gavel-fifo"), GavelFifo)
    packed = ALLOCATION_POLICIES.create("gavel-fifo-packed")
    assert isinstance(packed, GavelFifoPacked) and packed.threshold == 1.5


def test_fifo_consolidates_a_one_gpu_job_onto_a_used_server(gavel_dir):
    # j0 takes 4 GPUs of one server; j1 (1 GPU) goes next to it, not to an empty server (spreading would).
    jobs = _jobs(["resnet50", "alexnet"], [0.0, 10.0], [4, 1], 3600.0)
    _sim, out, _ = _run(jobs, 3, gavel_dir, GavelFifo())
    assert _nodes(out.placements[0]) == _nodes(out.placements[1])


def test_fifo_blocks_at_the_head_of_the_queue(gavel_dir):
    # One server of 8 GPUs: j0 holds 6; j1 wants 4 (does not fit) and blocks j2 (1 GPU, which would fit).
    jobs = _jobs(["resnet50", "vgg16", "alexnet"], [0.0, 10.0, 20.0], [6, 4, 1], 3600.0)
    _sim, out, _ = _run(jobs, 1, gavel_dir, GavelFifo())
    end0 = out.end_s[0]
    assert out.start_s[1] == pytest.approx(end0) and out.start_s[2] >= out.start_s[1]
    assert np.isfinite(out.end_s).all()


def test_fifo_waits_for_a_server_unless_told_to_spread_like_gavels_count_rule(gavel_dir):
    # Two servers with 2 free GPUs each: a 4-GPU job waits for a server that fits it (by default); with Gavel's
    # count rule it starts at once over both.
    jobs = _jobs(["resnet50", "resnet50", "vgg16"], [0.0, 1.0, 10.0], [6, 6, 4], [7200.0, 7200.0, 3600.0])
    policy = GavelFifo()
    _sim, out, _ = _run(jobs, 2, gavel_dir, policy)
    assert _nodes(out.placements[0]) != _nodes(out.placements[1])
    assert out.start_s[2] == pytest.approx(min(out.end_s[:2])) and len(_nodes(out.placements[2])) == 1
    assert policy.spanning_starts == 0
    counting = GavelFifo(spread_over_servers=True)
    _sim, out, _ = _run(jobs, 2, gavel_dir, counting)
    assert out.start_s[2] == pytest.approx(10.0) and _nodes(out.placements[2]) == {0, 1}
    assert counting.spanning_starts == 1


def test_packing_pairs_equal_gpu_counts_above_the_threshold(gavel_dir):
    # One server: j0 and j1 (4 GPUs each) fill it; j2 (4 GPUs) waits and is packed with the partner of its GPU
    # count whose normalised throughput is best; j3 (2 GPUs) has no partner of its GPU count: it waits.
    jobs = _jobs(
        ["resnet50", "alexnet", "alexnet", "alexnet"],
        [0, 1, 2, 3],
        [4, 4, 4, 2],
        [20_000.0] * 2 + [3600.0] * 2,
    )
    policy = GavelFifoPacked()
    _sim, out, _ = _run(jobs, 1, gavel_dir, policy)
    assert policy.pairs_formed == 1
    assert out.start_s[2] == pytest.approx(2.0)  # packed at once, not queued until a completion
    gains = {k: policy.packed_throughput(2, k) for k in (0, 1)}
    partner = max(gains, key=gains.get)
    assert gains[partner] > 1.5 and gains[partner] > gains[1 - partner]
    assert out.placements[2] == out.placements[partner]
    assert out.start_s[3] >= min(out.end_s[0], out.end_s[1]) - 1e-6  # never packed onto 4-GPU jobs


def test_a_packed_job_takes_gpus_of_its_own_once_fifo_gives_it_some(gavel_dir):
    # As above, but j0 ends first: the allocation is recomputed and j2 (next in arrival order) gets j0's GPUs.
    jobs = _jobs(["resnet50", "alexnet", "alexnet"], [0, 1, 2], [4, 4, 4], [3600.0, 20_000.0, 20_000.0])
    policy = GavelFifoPacked()
    sim, out, _ = _run(jobs, 1, gavel_dir, policy)
    assert out.start_s[2] == pytest.approx(2.0) and sim.restarts[2] == 1
    assert out.placements[2] == out.placements[0] and out.placements[2] != out.placements[1]


def test_packing_never_pairs_below_the_threshold(gavel_dir):
    # Time-slicing two heavy jobs gives a normalised throughput near 1: below 1.5, so no pair.
    jobs = _jobs(["vgg16", "vgg16"], [0, 1], [8, 8], 3600.0)
    policy = GavelFifoPacked()
    _sim, out, _ = _run(jobs, 1, gavel_dir, policy, sharing="slicing")
    assert policy.packed_throughput(0, 1) <= 1.5
    assert policy.pairs_formed == 0 and out.start_s[1] == pytest.approx(out.end_s[0])
    # with a threshold the pair passes, the same jobs share
    low = GavelFifoPacked(packing_threshold=1.0)
    _sim, out, _ = _run(jobs, 1, gavel_dir, low, sharing="slicing")
    assert low.pairs_formed == 1 and out.start_s[1] < out.end_s[0]


def test_packing_keeps_fifo_order(gavel_dir):
    # Threshold 1.2 under time-slicing: the head j1 (vgg16) has no partner above it, so j2 (alexnet, which would
    # pass with j0) waits behind it.
    jobs = _jobs(["alexnet", "vgg16", "alexnet"], [0, 1, 2], [8, 8, 8], 3600.0)
    policy = GavelFifoPacked(packing_threshold=1.2)
    _sim, out, _ = _run(jobs, 1, gavel_dir, policy, sharing="slicing")
    assert policy.packed_throughput(1, 0) <= 1.2 < policy.packed_throughput(2, 0)
    assert policy.pairs_formed == 0
    assert out.start_s[1] == pytest.approx(out.end_s[0]) and out.start_s[2] >= out.start_s[1]


def test_partner_continues_alone_when_its_pair_completes(gavel_dir):
    # j0 long, j1 short packed with j0; when j1 completes, j0 runs alone at full speed on the same GPUs.
    jobs = _jobs(["alexnet", "resnet18"], [0, 1], [8, 8], [20_000.0, 3600.0])
    policy = GavelFifoPacked()
    sim, out, perf = _run(jobs, 1, gavel_dir, policy)
    assert policy.pairs_formed == 1 and out.placements[0] == out.placements[1]
    assert out.end_s[1] < out.end_s[0]
    slowdown = perf.predicted_shared_factor(0, 0, [[1]])
    assert slowdown < 1.0
    # j0 worked at the pair speed while j1 ran, then alone: its end is the solo remainder after j1's end
    shared_s = out.end_s[1] - out.start_s[0]
    expected = out.start_s[0] + shared_s + (20_000.0 - shared_s * slowdown)
    assert out.end_s[0] == pytest.approx(expected, rel=1e-3)
    assert sim.restarts[0] == 0  # never moved


def test_a_queued_job_pairs_with_the_survivor_of_a_pair(gavel_dir):
    jobs = _jobs(["alexnet", "resnet18", "resnet18"], [0, 1, 2], [8, 8, 8], [20_000.0, 3600.0, 3600.0])
    policy = GavelFifoPacked()
    _sim, out, _ = _run(jobs, 1, gavel_dir, policy)
    assert policy.pairs_formed == 2
    assert out.start_s[2] == pytest.approx(out.end_s[1], abs=1.0)
    assert out.placements[2] == out.placements[0]


def test_with_a_server_off_the_head_waits_for_its_boot_instead_of_packing(gavel_dir, tmp_path):
    """Gavel's servers are never off: a server that is off and could take the head whole counts as free, so the
    head waits for the power manager to boot it (no pair), then runs alone."""
    from wattsched.experiments.config import SimulationConfig
    from wattsched.experiments.run import run_simulation

    (tmp_path / "c.yaml").write_text(
        "name: two\nnode_groups:\n  - count: 2\n    gpus: 8\n    gpu_model: V100\n    cpu_milli: 64000\n"
        "    memory_mib: 786432\n"
    )
    # a fills one server for long; b arrives after the other server has idled out and been switched off
    rows = "job_id,submit_time,duration,num_gpu,model_name\na,0,40000,8,alexnet\nb,5000,3600,8,resnet18\n"
    (tmp_path / "jobs.csv").write_text(rows)
    cfg = SimulationConfig(
        workload=str(tmp_path / "jobs.csv"), cluster=str(tmp_path / "c.yaml"), allocation="gavel-fifo-packed",
        power_manager="idle-timeout", sharing_model="eaco", performance="tables", data_dir=str(gavel_dir),
        check_invariants=True,
    )  # fmt: skip
    run = run_simulation(cfg, None)
    params = run.summary["policies"]["allocation"]["parameters"]
    assert params["pairs_formed"] == 0
    jobs = run.jobs.set_index("job_id")
    assert jobs.loc["b", "start_s"] > 5000.0  # after the boot
    assert jobs.loc["b", "end_s"] - jobs.loc["b", "start_s"] == pytest.approx(3600.0, rel=1e-3)  # alone
    assert run.summary["node_boots"] >= 1


@pytest.mark.parametrize("gpus", [8, 16])
def test_a_job_of_one_or_several_servers_waits_for_off_servers_instead_of_packing(gavel_dir, gpus):
    """A 16-GPU job (a gang over two servers) counts the servers that are off like an 8-GPU job does: it waits for
    their boot and runs on GPUs of its own, never on the running job's."""
    from wattsched.engine.power import NodePower, PowerStateConfig
    from wattsched.perf.colocation import sharing_model
    from wattsched.policies.power import IdleTimeout

    jobs = _jobs(["resnet50", "resnet50"], [0.0, 5000.0], [gpus, gpus], [20_000.0, 3600.0])
    spec = make_cluster([(8, "V100", 64_000, 786_432)] * 4)
    perf, jobs = PerformanceModel.build(
        jobs, spec, RestartModel(), str(gavel_dir), sharing=sharing_model("eaco"), loads=sharing_model("eaco")
    )
    policy = GavelFifoPacked()
    sim = Simulator(
        jobs,
        spec,
        RoundScheduler(policy, policy.default_round_s),
        np.random.default_rng(0),
        perf=perf,
        power=NodePower(IdleTimeout(600), PowerStateConfig(idle_timeout_s=600)),
    )
    out = sim.run()
    assert policy.pairs_formed == 0
    assert out.start_s[1] > 5000.0  # after a boot
    held = {n for n, *_ in out.placements[0]}
    assert held.isdisjoint(n for n, *_ in out.placements[1])
    assert sim.power.boots >= 1
