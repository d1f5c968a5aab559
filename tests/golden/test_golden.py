"""Golden results on a small checked-in trace and cluster, one per policy pair and mode.

The expected per-job tables in ``expected/`` were produced by this code once and reviewed by hand (the timeline of
``fifo_best-fit`` was checked against a manual trace of the queue). Regenerate only on purpose:
``WATTSCHED_REGEN_GOLDEN=1 pytest tests/golden`` and review the diff.
"""

import json
import os
from pathlib import Path

import pytest

from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import run_simulation

HERE = Path(__file__).parent
CASES = [
    ("temporal", "fifo", "best-fit"),
    ("temporal", "sjf", "gpu-packing"),
    ("temporal", "backfill", "first-fit"),
    ("temporal", "fifo", "dotprod"),
    ("temporal", "fifo", "gpu-clustering"),
    ("packing", "fifo", "best-fit"),
    ("packing", "fifo", "random"),
]
COLUMNS = ["job_id", "start_s", "end_s", "status", "placement"]
PACKING_COLUMNS = ["submission", "job_id", "placed", "placement"]


@pytest.mark.parametrize(("mode", "queue", "placement"), CASES)
def test_golden(mode, queue, placement):
    cfg = SimulationConfig(
        workload=str(HERE / "workload.csv"),
        cluster=str(HERE / "cluster.yaml"),
        mode=mode,
        queue=queue,
        placement=placement,
        seed=3,
        inflate=1.0,
        check_invariants=True,
    )
    result = run_simulation(cfg)
    cols = COLUMNS if mode == "temporal" else PACKING_COLUMNS
    got = result.jobs[cols]
    expected_path = HERE / "expected" / f"{mode}_{queue}_{placement}.csv"
    summary_path = expected_path.with_suffix(".json")
    keys = ("jobs_submitted", "jobs_completed", "jobs_unschedulable", "jobs_dropped", "makespan_s")
    summary = {k: result.summary[k] for k in keys}
    if os.environ.get("WATTSCHED_REGEN_GOLDEN"):
        got.to_csv(expected_path, index=False)
        summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    assert got.to_csv(index=False) == expected_path.read_text()
    assert summary == json.loads(summary_path.read_text())
