"""Tiresias in rounds in the compiled loop (replay_kernel.c tiresias_pass) against the Python loop: the same
simulator, adapter and recorder state afterwards and the same run directory, on random workloads with gangs,
GPU-model constraints, never-fitting jobs and equal submission times. A run where Tiresias contends (GPUs asked
for beyond the cluster's: preemptions) leaves the kernel and runs in Python from the start, with the Python loop's
results all the same; runs the kernel does not mirror never enter it."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import make_jobs
from tests.unit.test_native_replay import (
    assert_same_run_dirs,
    assert_same_state,
    compiled,
    run_dir,
    watch_compiled,
)
from wattsched.core.cluster import ClusterSpec
from wattsched.core.states import STATUS_DONE
from wattsched.engine import native_replay
from wattsched.engine.power import NodePower, PowerStateConfig
from wattsched.engine.recorder import TimeSeriesRecorder
from wattsched.engine.temporal import Simulator
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import run_simulation
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.allocation.tiresias import Tiresias
from wattsched.policies.power import AlwaysOn

__all__ = ["compiled"]  # the module fixture that builds the kernel into a temporary cache

# Switch 0: three V100 nodes (a 12-GPU V100 gang fits there only, whole); switch 1: one V100 node; switch 2: two
# T4 nodes and an A100 node (consolidated gangs take whole free nodes under one switch).
SHAPES = (
    [(4, "V100", 32_000, 262_144)] * 4 + [(2, "T4", 16_000, 131_072)] * 2 + [(8, "A100", 64_000, 524_288)]
)
CLUSTER = ClusterSpec.from_arrays(
    name="switches",
    node_names=[f"n{i}" for i in range(len(SHAPES))],
    cpu_milli=[s[2] for s in SHAPES],
    memory_mib=[s[3] for s in SHAPES],
    gpu_count=[s[0] for s in SHAPES],
    gpu_model_names=[s[1] for s in SHAPES],
    switch_id=[0, 0, 0, 1, 2, 2, 2],
)


def random_jobs(
    seed: int,
    n: int = 250,
    span: int = 20_000,
    longest: float = 3600.0,
    burst: float = 0.15,
):
    """Random jobs (1 to 12 GPUs, and 40 that never fit), `burst` of them submitted at once at t = 3000 s."""
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.integers(0, span, n)).astype(float)
    submit[rng.random(n) < burst] = 3000.0  # a burst of equal submission times
    sizes = [1] * 6 + [2, 2, 4, 8, 12, 40]
    rows = []
    for i in range(n):
        rows.append(
            {
                "submit": float(submit[i]),
                "duration": float(rng.choice([5.0, 60.0, 300.0, 1200.0, longest]))
                + float(rng.integers(0, 3)),
                "gpus": int(rng.choice(sizes)),
                "cpu": int(rng.choice([0, 2000, 8000, 20_000])),
                "mem": int(rng.choice([0, 16_384, 65_536])),
                "spec": str(rng.choice(["", "", "", "V100", "T4", "A100|V100", "H100"])),
            }
        )
    return make_jobs(rows)


def simulate(jobs, native, monkeypatch, round_s=300.0, power=True, cluster=CLUSTER):
    monkeypatch.setenv("WATTSCHED_NATIVE", "1" if native else "0")
    used = watch_compiled(monkeypatch)
    recorder = TimeSeriesRecorder()
    scheduler = RoundScheduler(Tiresias(), round_s)
    node_power = NodePower(AlwaysOn(), PowerStateConfig()) if power else None
    sim = Simulator(
        jobs, cluster, scheduler, np.random.default_rng(7), observers=[recorder], power=node_power
    )
    sim.run()
    return sim, recorder, list(used)  # a copy: a later run's spy wraps this one's


def assert_same_rounds(a, b, rec_a, rec_b):
    heap_a, heap_b = a._heap, b._heap
    a._heap, b._heap = [], []  # the next round, compared here
    try:
        assert_same_state(a, b, rec_a, rec_b)
    finally:
        a._heap, b._heap = heap_a, heap_b
    assert [entry[:4] for entry in heap_a] == [entry[:4] for entry in heap_b]
    for sim, heap in ((a, heap_a), (b, heap_b)):
        assert all(entry[4] == (sim.scheduler._round, sim.actions) for entry in heap)
    np.testing.assert_array_equal(a.preemptions, b.preemptions, strict=True)
    assert a.scheduler.describe() == b.scheduler.describe()
    assert a.scheduler._rounds_stopped == b.scheduler._rounds_stopped


@pytest.mark.parametrize("seed", [1, 2, 5])
def test_uncontended_tiresias_runs_compiled_as_in_python(seed, monkeypatch):
    # Spread out and short (seeds where the GPUs asked for always fit), with gangs and jobs that wait for room.
    jobs = random_jobs(seed, span=100_000, longest=1200.0, burst=0.03)
    py, rec_py, used_py = simulate(jobs, False, monkeypatch)
    c, rec_c, used_c = simulate(jobs, True, monkeypatch)
    assert used_py == [] and used_c == [True]
    assert py.preemptions.sum() == 0
    assert py.scheduler.rounds > 10 and (py.status == STATUS_DONE).sum() > 100  # rounds ran, jobs finished
    assert (py.start_s > jobs.submit_s).sum() >= 3  # and some waited
    # The rounds' rows outgrew the recorder buffer handed to the kernel (one row per arrival and completion).
    assert len(rec_c.series.rows()) > 2 * len(jobs) + 1
    assert_same_rounds(py, c, rec_py, rec_c)


def test_gangs_and_queues_without_contention(monkeypatch):
    # Gangs over whole nodes and jobs that wait for space, but never more GPUs asked for than the cluster has.
    # Two 4-GPU jobs take two V100 nodes; the 12-GPU gang needs switch 0's three V100 nodes whole: it waits.
    rows = [
        {"submit": float(t), "gpus": 4, "duration": d, "spec": "V100"} for t, d in ((0, 900.0), (1, 1500.0))
    ]
    rows += [{"submit": 2.0, "gpus": 12, "duration": 600.0, "spec": "V100"}]
    rows += [{"submit": 5.0, "gpus": 2, "duration": 50.0, "spec": "T4"} for _ in range(3)]  # one waits
    rows += [
        {"submit": 7000.0, "gpus": 1, "duration": 10.0},
        {"submit": 40_000.0, "gpus": 1, "duration": 10.0},
    ]
    rows += [{"submit": 7000.0, "gpus": 64, "duration": 10.0}]  # fits nowhere: unschedulable
    jobs = make_jobs(rows)
    for round_s in (300.0, 77.0):
        py, rec_py, _ = simulate(jobs, False, monkeypatch, round_s=round_s)
        c, rec_c, used = simulate(jobs, True, monkeypatch, round_s=round_s)
        assert used == [True]
        assert_same_rounds(py, c, rec_py, rec_c)
        assert (c.start_s > jobs.submit_s).any()  # some waited for a later decision


@pytest.mark.parametrize("seed", [4, 5])
def test_contended_tiresias_leaves_the_kernel_with_python_results(seed, monkeypatch):
    jobs = random_jobs(seed, span=3000)  # dense and large: Tiresias preempts
    py, rec_py, _ = simulate(jobs, False, monkeypatch)
    c, rec_c, used = simulate(jobs, True, monkeypatch)
    assert used == [False]  # tried, left, ran in Python
    assert py.preemptions.sum() > 0
    assert_same_rounds(py, c, rec_py, rec_c)


def test_without_node_power(monkeypatch):
    jobs = random_jobs(1, span=100_000, longest=1200.0, burst=0.03)
    py, rec_py, _ = simulate(jobs, False, monkeypatch, power=False)
    c, rec_c, used = simulate(jobs, True, monkeypatch, power=False)
    assert used == [True]
    assert_same_rounds(py, c, rec_py, rec_c)


def test_runs_the_kernel_does_not_mirror_stay_in_python(monkeypatch):
    monkeypatch.setenv("WATTSCHED_NATIVE", "1")

    def prepared(jobs, policy=None, **kw):
        scheduler = RoundScheduler(policy or Tiresias(), 300.0, **kw)
        sim = Simulator(jobs, CLUSTER, scheduler, np.random.default_rng(0))
        scheduler.on_start(sim.view, sim.actions)
        sim.now = float(jobs.submit_s.min())
        return native_replay.compiled_replay(sim)

    rows = [{"submit": 0.0, "gpus": 1, "duration": 10.0}, {"submit": 1.0, "gpus": 2, "duration": 10.0}]

    class MyTiresias(Tiresias):
        pass

    assert prepared(make_jobs(rows)) is not None
    assert prepared(make_jobs([*rows, {"submit": 2.0, "gpus": 0, "duration": 5.0}])) is None  # CPU-only
    assert prepared(make_jobs([*rows, {"submit": 2.0, "gpus": 1, "milli": 500, "duration": 5.0}])) is None
    assert prepared(make_jobs(rows), MyTiresias()) is None
    assert prepared(make_jobs(rows), on_arrival=False) is None


LIGHT = {
    "num_jobs": 150,
    "mean_interarrival_s": 2000.0,
    "duration_median_s": 600.0,
    "duration_max_s": 3600.0,
    "gpu_count_mix": {1: 0.7, 2: 0.2, 4: 0.1},
}


@pytest.mark.parametrize(("synthetic", "compiled_run"), [(LIGHT, True), ({"num_jobs": 400}, False)])
def test_run_directory_is_byte_identical(tmp_path, monkeypatch, synthetic, compiled_run):
    # A light synthetic workload Tiresias never contends on (compiled), and a heavy one it preempts on (handed
    # back to Python); trace speeds: the compiled loop has no throughput tables.
    from tests.golden.test_golden import HERE

    settings = {
        "workload": {
            "name": "synthetic",
            "skip_invalid": True,
            "synthetic": {**synthetic, "share_fraction": 0.0},
        },
        "cluster": str(HERE / "cluster.yaml"),
        "allocation": "tiresias",
        "round_s": 300,
        "perf": {"performance": "trace"},
        "seed": 11,
    }
    a = run_dir(tmp_path, "python", False, monkeypatch, **settings)
    monkeypatch.setenv("WATTSCHED_NATIVE", "1")
    used = watch_compiled(monkeypatch)
    b = tmp_path / "compiled"
    run_simulation(SimulationConfig.model_validate(settings), b)
    assert used == [compiled_run]
    summary = assert_same_run_dirs(a, b)
    assert summary["policies"]["rounds"] > 10 and (summary["preemptions"] > 0) != compiled_run
