"""Temporal engine and queue policies on hand-checked scenarios."""

import numpy as np
import pytest

from tests.conftest import make_cluster, make_jobs, make_sim
from wattsched.core.settings import GpuSetting
from wattsched.core.states import STATUS_DONE, STATUS_UNSCHEDULABLE
from wattsched.energy.dvfs import dvfs_response
from wattsched.engine.observers import Observer


def simulate(jobs, spec, queue="fifo", placement="first-fit", observers=(), seed=0):
    sim = make_sim(jobs, spec, queue, placement, seed=seed, observers=observers)
    return sim, sim.run()


ONE_NODE = make_cluster([(4, "V100", 64_000, 100_000)])


@pytest.mark.parametrize("queue", ["fifo", "sjf", "backfill"])
def test_jobs_queue_behind_a_full_node(queue):
    jobs = make_jobs(
        [
            {"submit": 0, "duration": 100, "gpus": 4},
            {"submit": 10, "duration": 5, "gpus": 1},
            {"submit": 20, "duration": 50, "gpus": 4},
        ]
    )
    _, out = simulate(jobs, ONE_NODE, queue)
    assert out.start_s.tolist() == [0, 100, 105]
    assert out.end_s.tolist() == [100, 105, 155]
    assert (out.status == STATUS_DONE).all()


def test_fifo_blocks_but_sjf_reorders():
    jobs = make_jobs(
        [
            {"submit": 0, "duration": 100, "gpus": 4},
            {"submit": 1, "duration": 50, "gpus": 4},
            {"submit": 2, "duration": 5, "gpus": 4},
        ]
    )
    _, fifo = simulate(jobs, ONE_NODE, "fifo")
    _, sjf = simulate(jobs, ONE_NODE, "sjf")
    assert fifo.start_s.tolist() == [0, 100, 150]
    assert sjf.start_s.tolist() == [0, 105, 100]


def test_fifo_head_of_line_blocking_vs_easy_backfill():
    jobs = make_jobs(
        [
            {"submit": 0, "duration": 100, "gpus": 2},  # A
            {"submit": 1, "duration": 10, "gpus": 4},  # B: blocked until A ends (shadow time 100)
            {"submit": 2, "duration": 50, "gpus": 2},  # C: ends at 52 <= 100: backfills
            {"submit": 3, "duration": 500, "gpus": 1},  # D: would delay B and there are no extra GPUs
        ]
    )
    _, fifo = simulate(jobs, ONE_NODE, "fifo")
    _, easy = simulate(jobs, ONE_NODE, "backfill")
    assert fifo.start_s.tolist() == [0, 100, 110, 110]
    assert easy.start_s.tolist() == [0, 100, 2, 110]


def test_jobs_that_can_never_fit_are_unschedulable_and_the_run_goes_on():
    spec = make_cluster([(4, "V100", 8_000, 100_000), (2, "V100", 8_000, 100_000)])
    jobs = make_jobs(
        [
            {"submit": 0, "duration": 10, "gpus": 1, "spec": "T4"},  # no T4 in the cluster
            {"submit": 0, "duration": 10, "gpus": 1, "cpu": 9_000},  # more CPU than any node
            {"submit": 0, "duration": 10, "gpus": 6, "cpu": 6_000},  # a gang over both nodes: fits
            {"submit": 5, "duration": 10, "gpus": 1},
        ]
    )
    _, out = simulate(jobs, spec)
    assert out.status.tolist()[:2] == [STATUS_UNSCHEDULABLE] * 2
    assert out.start_s[2] == 0 and out.start_s[3] == 10
    assert sorted(len(g) for _, g, _, _ in out.placements[2]) == [2, 4]


def test_rate_change_recomputes_completion():
    jobs = make_jobs([{"submit": 0, "duration": 100, "gpus": 1}])
    slow = GpuSetting(sm_clock_fraction=0.6)

    class RetuneAtTen(Observer):
        def on_start(self, sim):
            sim.schedule(10.0, lambda view, actions: actions.retune(0, slow), sim.actions)

    _, out = simulate(jobs, ONE_NODE, observers=[RetuneAtTen()])
    speed = dvfs_response("V100", slow)[0]
    assert speed < 0.9
    assert out.end_s[0] == pytest.approx(10 + 90 / speed)


def test_interval_hook_covers_the_run_exactly():
    jobs = make_jobs([{"submit": 5, "duration": 100, "gpus": 2}, {"submit": 50, "duration": 10, "gpus": 4}])

    class GpuSeconds(Observer):
        total = 0.0
        span = 0.0

        def on_interval(self, sim, t0, t1):
            self.total += sim.state.allocated_milli / 1000 * (t1 - t0)
            self.span += t1 - t0

    obs = GpuSeconds()
    _, out = simulate(jobs, ONE_NODE, observers=[obs])
    assert out.end_s.tolist() == [105, 115]
    assert obs.total == pytest.approx(2 * 100 + 4 * 10)
    assert obs.span == pytest.approx(115 - 5)


def test_same_seed_same_result_different_seed_may_differ():
    spec = make_cluster([(8, "A100", 64_000, 100_000)] * 6)
    rows = [{"submit": i * 3.0, "duration": 40 + (i * 7) % 50, "gpus": 1 + i % 3} for i in range(60)]
    jobs = make_jobs(rows)
    _, a = simulate(jobs, spec, placement="random", seed=1)
    _, b = simulate(jobs, spec, placement="random", seed=1)
    _, c = simulate(jobs, spec, placement="random", seed=2)
    assert np.array_equal(a.start_s, b.start_s) and a.placements == b.placements
    assert a.placements != c.placements


def test_deadline_slack_sets_deadlines_and_the_summary_counts_misses(tmp_path):
    """`--deadline-slack 1.0` gives every training job a deadline at submit + duration: a job that waits for GPUs
    misses it, one that starts at once (and runs at trace speed) meets it."""
    from wattsched.experiments.config import SimulationConfig
    from wattsched.experiments.run import run_simulation

    csv = tmp_path / "jobs.csv"
    csv.write_text("job_id,submit_time,duration,num_gpu\na,0,100,1\nb,0,100,1\nc,0,100,1\n")
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        "name: one\nnode_groups:\n  - count: 1\n    gpus: 2\n    gpu_model: V100\n    cpu_milli: 8000\n"
        "    memory_mib: 65536\n"
    )
    base = {"workload": str(csv), "cluster": str(cluster), "queue": "fifo", "placement": "first-fit"}
    loose = run_simulation(SimulationConfig(**base), None).summary
    assert "deadline_jobs" not in loose  # no deadlines, no deadline figures
    tight = run_simulation(SimulationConfig(**base, deadline_slack=1.0), None).summary
    assert (
        tight["deadline_jobs"] == 3 and tight["deadline_misses"] == 1
    )  # two GPUs: the third job waits 100 s
    assert tight["deadline_lateness_mean_s"] == pytest.approx(100.0)
    relaxed = run_simulation(SimulationConfig(**base, deadline_slack=2.0), None).summary
    assert relaxed["deadline_misses"] == 0
