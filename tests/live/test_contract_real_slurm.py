"""The policy contract suite on a real local Slurm (tests/slurm_fixtures.py): the same decisions as the simulator
on a short scripted history, for queue + placement pairs and allocation policies that Slurm can run (the full
matrix runs on the in-memory front end, tests/unit/test_policy_contract.py)."""

from __future__ import annotations

import pytest

from tests.contract_harness import SHORT_SCRIPT, first_difference, run_real_slurm, run_simulator
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import build_scheduler

pytestmark = pytest.mark.slurm

# Real daemons: a start or an end reaches the mirror up to a poll (0.1 s) plus Slurm's own latency later.
TOLERANCE_S = 2.5


@pytest.mark.parametrize(
    "policy",
    [
        {"queue": "fifo", "placement": "best-fit"},
        {"queue": "sjf", "placement": "first-fit"},
        {"queue": "fifo", "placement": "fgd"},
        {"allocation": "gavel-fifo"},
        {"allocation": "tiresias"},
    ],
    ids=lambda p: "+".join(p.values()),
)
def test_real_slurm_decides_as_the_simulator(local_slurm, tmp_path, policy):
    sim = run_simulator(
        build_scheduler(SimulationConfig(**policy).scheduler_config(), None), None, script=SHORT_SCRIPT
    )
    live = run_real_slurm(
        local_slurm,
        build_scheduler(SimulationConfig(**policy).scheduler_config(), None),
        SHORT_SCRIPT,
        tmp_path,
    )
    assert len(sim) >= len(SHORT_SCRIPT)
    diff = first_difference(sim, live, TOLERANCE_S)
    assert diff is None, diff
