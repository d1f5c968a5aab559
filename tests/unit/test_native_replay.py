"""The compiled event loop (engine/native_replay.py, replay_kernel.c) against the Python loop: the same simulator
state afterwards and the same run directory, on random workloads with gangs, GPU-model constraints, CPU-only and
never-fitting jobs, shared-GPU pods and equal submission times, for every queue and placement the compiled loop
covers; the kernel's emulation of Python's set order; and the runs it must leave to the Python loop."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import random

import numpy as np
import pytest

from tests.conftest import make_cluster, make_jobs, make_sim
from wattsched.engine import kernels, native_replay
from wattsched.engine.native_packing import STATE_ARRAYS  # the cluster state's arrays
from wattsched.engine.power import NodePower, PowerStateConfig
from wattsched.engine.recorder import TimeSeriesRecorder
from wattsched.engine.temporal import Simulator
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import run_simulation
from wattsched.policies.placement import BestFit
from wattsched.policies.power import AlwaysOn

QUEUES = ["fifo", "sjf", "edf-greedy", "arrival-greedy"]
PLACEMENTS = ["best-fit", "first-fit"]
CLUSTER = make_cluster(
    [(4, "V100", 32_000, 262_144)] * 3
    + [(2, "T4", 16_000, 131_072)] * 2
    + [(8, "A100", 64_000, 524_288), (0, "", 16_000, 65_536)]
)
# Every per-job array of the run: the outcome's and the working ones (the list the simulator releases).
SIM_ARRAYS = ("status", "start_s", "end_s", *Simulator._WORKING_ARRAYS)


@pytest.fixture(scope="module", autouse=True)
def compiled(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("WATTSCHED_KERNEL_CACHE", str(tmp_path_factory.mktemp("kernels")))
    kernels._loaded.clear()
    if kernels.load("replay_kernel") is None:
        mp.undo()
        pytest.skip("no C compiler: the compiled loop cannot be built here")
    yield
    mp.undo()
    kernels._loaded.clear()


def random_jobs(seed: int, n: int = 300, shared: float = 0.0, span: int = 4000):
    """Random jobs; `shared`: the fraction of one-GPU jobs that are shared pods (100..900 milli)."""
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.integers(0, span, n)).astype(float)
    submit[rng.random(n) < 0.2] = 1000.0  # a burst of equal submission times
    rows = []
    for i in range(n):
        rows.append(
            {
                "submit": float(submit[i]),
                "duration": float(rng.choice([5, 60, 60, 300, 1200, 3600])) + float(rng.integers(0, 3)),
                "gpus": int(rng.choice([0, 1, 1, 1, 2, 2, 4, 8, 12, 16, 40])),
                "cpu": int(rng.choice([0, 2000, 8000, 20_000, 100_000])),
                "mem": int(rng.choice([0, 16_384, 65_536, 400_000])),
                "spec": str(rng.choice(["", "", "", "V100", "T4", "A100|V100", "H100"])),
            }
        )
        if rows[-1]["gpus"] == 1 and rng.random() < shared:  # small pods, so that many share GPUs
            milli = int(rng.choice([100, 250, 300, 500, 750, 900]))
            rows[-1].update(
                milli=milli, cpu=int(rng.choice([0, 2000])), mem=0, spec=str(rng.choice(["", "V100"]))
            )
    return make_jobs(rows)


def watch_compiled(monkeypatch) -> list[bool]:
    """What each compiled run answered (True: it ran the loop), in order."""
    used: list[bool] = []
    original = native_replay.CompiledReplay.run

    def spy(self):
        result = original(self)
        used.append(result)
        return result

    monkeypatch.setattr(native_replay.CompiledReplay, "run", spy)
    return used


def simulate(jobs, queue, placement, native, monkeypatch, power=True, interference=0.0):
    monkeypatch.setenv("WATTSCHED_NATIVE", "1" if native else "0")
    used = watch_compiled(monkeypatch)
    recorder = TimeSeriesRecorder()
    node_power = NodePower(AlwaysOn(), PowerStateConfig()) if power else None
    sim = make_sim(
        jobs,
        CLUSTER,
        queue,
        placement,
        seed=7,
        observers=[recorder],
        check_invariants=False,
        power=node_power,
    )
    # Catalog loads of shared pods add up to at most one GPU, so plain time-slicing never slows them:
    # interference makes every change of co-runners re-rate the others.
    sim.perf.sharing = dataclasses.replace(sim.perf.sharing, interference=interference)
    sim.run()
    return sim, recorder, used == [True]


def assert_same_state(a, b, rec_a, rec_b):
    for name in SIM_ARRAYS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name, strict=True)
    for name in STATE_ARRAYS:
        np.testing.assert_array_equal(
            getattr(a.state, name), getattr(b.state, name), err_msg=name, strict=True
        )
    for name in ("allocated_milli", "nodes_busy", "release_epoch"):
        assert getattr(a.state, name) == getattr(b.state, name), name
    assert a.log._rows().tobytes() == b.log._rows().tobytes()
    assert list(a.log.placements) == list(b.log.placements)
    shares_a = [s for p in a.log.placements for s in p]
    shares_b = [s for p in b.log.placements for s in p]
    assert [type(s) for s in shares_a] == [type(s) for s in shares_b]
    assert list(a.log.shares) == list(b.log.shares)
    assert list(a._pending) == list(b._pending)
    assert a.changes.counts == b.changes.counts and a.changes._mark == b.changes._mark
    for name in ("now", "_last_start", "_released", "_seq", "running_changes", "_next_arrival"):
        assert getattr(a, name) == getattr(b, name), name
    assert not a.running and not b.running and not a._heap and not b._heap
    assert rec_a.series.rows().tobytes() == rec_b.series.rows().tobytes()
    assert (rec_a.allocated_gpu_seconds, rec_a.last_time) == (rec_b.allocated_gpu_seconds, rec_b.last_time)
    if a.power is not None:
        np.testing.assert_array_equal(a.power.idle_since, b.power.idle_since, strict=True)
        assert a.power.watch._last_queue == b.power.watch._last_queue


@pytest.mark.parametrize("queue", QUEUES)
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_compiled_loop_leaves_the_simulator_as_the_python_loop(queue, placement, monkeypatch):
    jobs = random_jobs(seed=len(queue) * 10 + len(placement))
    py, rec_py, used_py = simulate(jobs, queue, placement, False, monkeypatch)
    c, rec_c, used_c = simulate(jobs, queue, placement, True, monkeypatch)
    assert used_c and not used_py
    assert_same_state(py, c, rec_py, rec_c)


@pytest.mark.parametrize("queue", QUEUES)
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_compiled_loop_with_shared_gpus(queue, placement, monkeypatch):
    # Many shared pods in bursts: co-runners are re-rated on every start and finish on their GPU.
    jobs = random_jobs(seed=len(queue) * 7 + len(placement), n=400, shared=0.8, span=800)
    assert ((jobs.gpu_milli > 0) & (jobs.gpu_milli < 1000)).sum() > 50
    py, rec_py, used_py = simulate(jobs, queue, placement, False, monkeypatch, interference=0.4)
    c, rec_c, used_c = simulate(jobs, queue, placement, True, monkeypatch, interference=0.4)
    assert used_c and not used_py
    held = py.log.columns()["alloc"] >= 0
    assert held.sum() - len(np.unique(py.log.columns()["job"][held])) >= 10  # co-runners re-rated
    assert_same_state(py, c, rec_py, rec_c)


def test_equal_completion_times_of_co_runners(monkeypatch):
    # Identical pods started together on one GPU finish at the same instant: their completion order (heap push
    # order, which follows Python's set order when co-runners are re-rated) decides every later rate.
    rows = [{"submit": 0.0, "gpus": 1, "milli": 250, "duration": 600.0} for _ in range(12)]
    rows += [
        {"submit": float(t), "gpus": 1, "milli": 500, "duration": 300.0} for t in (100, 100, 700, 700, 701)
    ]
    jobs = make_jobs(rows)
    for interference in (0.0, 0.25):
        py, rec_py, _ = simulate(jobs, "fifo", "best-fit", False, monkeypatch, interference=interference)
        c, rec_c, used = simulate(jobs, "fifo", "best-fit", True, monkeypatch, interference=interference)
        assert used
        assert_same_state(py, c, rec_py, rec_c)
        assert len(np.unique(c.end_s)) < len(jobs)


def test_set_order_matches_python():
    lib = kernels.load("replay_kernel")
    lib.ws_set_order.restype = ctypes.c_int64
    rng = random.Random(3)
    for _ in range(20_000):
        items = [rng.randrange(rng.choice([16, 100, 10**6, 2**40])) for _ in range(rng.randint(0, 30))]
        expected = set()
        expected.update(items)  # as Simulator._sharers_of builds it
        data = np.array(items, dtype=np.int64)
        out = np.zeros(len(items) + 1, dtype=np.int64)
        m = lib.ws_set_order(
            data.ctypes.data_as(ctypes.c_void_p),
            ctypes.c_int64(len(items)),
            out.ctypes.data_as(ctypes.c_void_p),
        )
        assert out[:m].tolist() == list(expected), items


def test_without_node_power(monkeypatch):
    jobs = random_jobs(seed=5)
    py, rec_py, _ = simulate(jobs, "fifo", "best-fit", False, monkeypatch, power=False)
    c, rec_c, used = simulate(jobs, "fifo", "best-fit", True, monkeypatch, power=False)
    assert used
    assert_same_state(py, c, rec_py, rec_c)


def assert_same_run_dirs(a, b) -> dict:
    """Two run directories hold the same files, byte for byte, and summaries equal but for the wall time; returns
    the summary."""
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    summary: dict = {}
    for name in names:
        if name == "summary.json":
            sa, sb = (json.loads((d / name).read_text()) for d in (a, b))
            sa.pop("wall_time_s"), sb.pop("wall_time_s")
            assert sa == sb
            summary = sa
        else:
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    return summary


def run_dir(tmp_path, name, native, monkeypatch, **settings):
    monkeypatch.setenv("WATTSCHED_NATIVE", "1" if native else "0")
    used = watch_compiled(monkeypatch)
    out = tmp_path / name
    run_simulation(SimulationConfig.model_validate(settings), out)
    assert used == ([True] if native else [])
    return out


@pytest.mark.parametrize(
    ("queue", "placement", "share_fraction"),
    [("fifo", "best-fit", 0.0), ("arrival-greedy", "first-fit", 0.0), ("fifo", "best-fit", 0.6)],
)
def test_run_directory_is_byte_identical(tmp_path, monkeypatch, queue, placement, share_fraction):
    from tests.golden.test_golden import HERE

    settings = {
        "workload": {
            "name": "synthetic",
            "skip_invalid": True,
            "synthetic": {"num_jobs": 400, "share_fraction": share_fraction},
        },
        "cluster": str(HERE / "cluster.yaml"),
        "queue": queue,
        "placement": placement,
        "seed": 11,
    }
    a = run_dir(tmp_path, "python", False, monkeypatch, **settings)
    b = run_dir(tmp_path, "compiled", True, monkeypatch, **settings)
    assert_same_run_dirs(a, b)


class MyBestFit(BestFit):
    pass


def _prepared(jobs, placement="best-fit", **kw):
    return native_replay.compiled_replay(make_sim(jobs, CLUSTER, "fifo", placement, **kw))


def test_runs_the_compiled_loop_does_not_mirror_stay_in_python(monkeypatch):
    monkeypatch.setenv("WATTSCHED_NATIVE", "1")
    whole = make_jobs([{"submit": 0, "gpus": 1}, {"submit": 1, "gpus": 2}])
    assert _prepared(whole, check_invariants=False) is not None
    assert _prepared(whole, check_invariants=True) is None  # invariants are checked by the Python loop
    shared = make_jobs([{"submit": 0, "gpus": 1, "milli": 500}])
    assert _prepared(shared, check_invariants=False) is not None  # time-slicing, loads add up
    noisy = make_sim(shared, CLUSTER, "fifo", "best-fit", check_invariants=False)
    noisy.perf.sharing_noise = 0.1  # seeded per co-runner set in Python
    assert native_replay.compiled_replay(noisy) is None
    checkpointed = make_sim(shared, CLUSTER, "fifo", "best-fit", check_invariants=False)
    checkpointed.ckpt_interval[:] = 60.0  # a re-rated job would settle its checkpoints
    assert native_replay.compiled_replay(checkpointed) is None
    assert _prepared(whole, placement="gpu-packing", check_invariants=False) is None
    sim = make_sim(whole, CLUSTER, "backfill", "best-fit", check_invariants=False)
    assert native_replay.compiled_replay(sim) is None
    from wattsched.policies.adapters import QueuePlacementScheduler
    from wattsched.policies.queue import Fifo

    assert QueuePlacementScheduler(Fifo(), MyBestFit()).native_plan() is None
    monkeypatch.setenv("WATTSCHED_NATIVE", "0")
    assert _prepared(whole, check_invariants=False) is None


@pytest.mark.parametrize(
    "rows",
    [
        [{"submit": 5.0, "gpus": 1}],
        [{"submit": 0.0, "gpus": 64}, {"submit": 1.0, "gpus": 1, "cpu": 10**9}],  # none can ever fit
        [{"submit": 0.0, "gpus": 0, "cpu": 1000}, {"submit": 0.0, "gpus": 0}],  # CPU-only jobs
        [{"submit": 0.0, "gpus": 12, "cpu": 30_000, "mem": 10}, {"submit": 0.0, "gpus": 16}],  # gangs
    ],
)
def test_small_workloads(rows, monkeypatch):
    jobs = make_jobs(rows)
    py, rec_py, _ = simulate(jobs, "fifo", "best-fit", False, monkeypatch)
    c, rec_c, used = simulate(jobs, "fifo", "best-fit", True, monkeypatch)
    assert used
    assert_same_state(py, c, rec_py, rec_c)


def test_kernel_cache_is_reused_and_an_unusable_one_falls_back(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("WATTSCHED_KERNEL_CACHE", str(cache))
    monkeypatch.setattr(kernels, "_loaded", {})
    assert kernels.load("replay_kernel") is not None
    built = sorted(cache.iterdir())
    assert len(built) == 1 and built[0].suffix == ".so"
    monkeypatch.setattr(kernels, "_loaded", {})
    assert kernels.load("replay_kernel") is not None
    assert sorted(cache.iterdir()) == built  # loaded from the cache, not built again
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("WATTSCHED_KERNEL_CACHE", str(blocked / "under-a-file"))
    monkeypatch.setattr(kernels, "_loaded", {})
    assert kernels.load("replay_kernel") is None  # the engine then runs its Python loop
    monkeypatch.setenv("WATTSCHED_NATIVE", "0")
    monkeypatch.setattr(kernels, "_loaded", {})
    assert kernels.load("replay_kernel") is None
