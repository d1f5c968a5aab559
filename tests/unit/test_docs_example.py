"""The example allocation policy in docs/architecture.md is real code: extract it, register it, run it.

The block is the fenced ``python`` block right after the ``<!-- example-policy -->`` marker. The test runs it
through the simulator on a small fixture workload and checks that every job completes and that the policy's
choices held: each job ran on exactly its trace GPU count, on one node when it fits on one, and a waiting
smaller job started before a waiting larger one even when the larger one was submitted first.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import make_cluster, make_jobs
from wattsched.core.states import STATUS_DONE
from wattsched.engine.temporal import Simulator
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import build_scheduler, run_simulation
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.contract import ALLOCATION_POLICIES, AllocationPolicy

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
MARKER = "<!-- example-policy -->"
NAME = "smallest-first"


def example_code() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert MARKER in text, f"{DOC} has no {MARKER} marker"
    match = re.search(r"```python\n(.*?)\n```", text[text.index(MARKER) :], re.DOTALL)
    assert match is not None, f"no fenced python block after {MARKER} in {DOC}"
    return match.group(1)


@pytest.fixture
def policy_class(monkeypatch):
    """Exec the documented block with the allocation registry copied, so the registration is undone after."""
    monkeypatch.setattr(ALLOCATION_POLICIES, "_items", dict(ALLOCATION_POLICIES._items))
    namespace: dict = {"__name__": "docs_example_policy"}
    exec(compile(example_code(), str(DOC), "exec"), namespace)
    assert NAME in ALLOCATION_POLICIES.names(), "the example must register itself by name"
    cls = ALLOCATION_POLICIES.factory(NAME)
    assert isinstance(cls, type) and issubclass(cls, AllocationPolicy)
    return cls


def test_example_is_short():
    lines = [line for line in example_code().splitlines() if line.strip()]
    assert len(lines) <= 30, f"the example should stay about 20 lines, it has {len(lines)}"


# 2 nodes x 4 GPUs. An 8-GPU job holds the whole cluster until t=100; meanwhile jobs of 4, 2, 1 and 3 GPUs
# arrive (in that order). Smallest first at t=100: 1, 2 and 3 GPUs start (6 of 8 GPUs), the 4-GPU job, although
# submitted first, waits until they finish at t=150. FIFO would start the 4-GPU job at t=100 instead.
ROWS = [
    {"id": "big", "submit": 0.0, "duration": 100.0, "gpus": 8},
    {"id": "four", "submit": 10.0, "duration": 50.0, "gpus": 4},
    {"id": "two", "submit": 11.0, "duration": 50.0, "gpus": 2},
    {"id": "one", "submit": 12.0, "duration": 50.0, "gpus": 1},
    {"id": "three", "submit": 13.0, "duration": 50.0, "gpus": 3},
]


def _cluster():
    return make_cluster([(4, "A100", 64_000, 262_144)] * 2)


def _run(scheduler):
    jobs, spec = make_jobs(ROWS), _cluster()
    sim = Simulator(jobs, spec, scheduler, np.random.default_rng(0), check_invariants=True)
    return jobs, sim, sim.run()


def _check(jobs, sim, out):
    assert (out.status == STATUS_DONE).all(), "every job completes"
    log = out.log.frame(sim.spec.node_names, jobs.job_id)
    held = log[log["num_gpu"] > 0]
    for job_id, rows in held.groupby("job_id"):
        trace = int(jobs.num_gpu[list(jobs.job_id).index(job_id)])
        assert (rows["num_gpu"] == trace).all(), f"{job_id} ran on its trace GPU count"
        nodes = {p.split(":")[0] for p in ";".join(rows["placement"]).split(";")}
        assert len(nodes) == (1 if trace <= 4 else 2), f"{job_id} consolidated"
    assert out.restarts.sum() == 0 and out.preemptions.sum() == 0, "no preemption"
    start = dict(zip(jobs.job_id.tolist(), out.start_s.tolist(), strict=True))
    assert start["big"] == 0.0
    assert start["one"] == start["two"] == start["three"] == 100.0, "small jobs start when capacity frees"
    assert start["four"] == 150.0, "the larger job waits although it was submitted first"
    np.testing.assert_allclose(out.end_s - out.start_s, jobs.duration_s)  # trace speed, no table


def test_example_policy_runs_in_the_simulator(policy_class):
    jobs, sim, out = _run(RoundScheduler(policy_class(), round_s=300.0))
    _check(jobs, sim, out)


def test_example_policy_by_name_as_the_cli_builds_it(policy_class):
    """`--allocation smallest-first` resolves through the registry exactly as `wattsched simulate` does."""
    scheduler = build_scheduler(SimulationConfig(allocation=NAME, round_s=300.0).scheduler, None)
    assert isinstance(scheduler, RoundScheduler) and isinstance(scheduler.policy, policy_class)
    jobs, sim, out = _run(scheduler)
    _check(jobs, sim, out)
    assert scheduler.describe()["allocation"]["name"] == NAME


def test_example_policy_end_to_end_run_directory(policy_class, tmp_path):
    csv = tmp_path / "jobs.csv"
    csv.write_text(
        "job_id,submit_time,duration,num_gpu\n"
        + "".join(f"{r['id']},{r['submit']},{r['duration']},{r['gpus']}\n" for r in ROWS),
        encoding="utf-8",
    )
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "name: two-nodes\nnode_groups:\n  - count: 2\n    gpus: 4\n    gpu_model: A100\n"
        "    cpu_milli: 64000\n    memory_mib: 262144\n",
        encoding="utf-8",
    )
    cfg = SimulationConfig(workload=str(csv), cluster=str(cluster), allocation=NAME, energy=False)
    result = run_simulation(cfg, tmp_path / "run")
    assert result.summary["jobs_completed"] == len(ROWS)
    assert result.summary["policies"]["allocation"]["name"] == NAME
    assert (tmp_path / "run" / "allocations.csv").is_file()
    jobs = result.jobs.set_index("job_id")
    assert jobs.loc["four", "start_s"] > jobs.loc["three", "start_s"]
    assert (jobs["gpu_counts"].astype(str) == jobs["num_gpu"].astype(str)).all()
