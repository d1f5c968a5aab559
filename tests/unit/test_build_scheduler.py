"""policies/build.py: the one scheduler builder, from its own small config or from a SimulationConfig's scheduler
group."""

import pytest

from wattsched.core.errors import WattschedError
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import build_scheduler as run_build_scheduler
from wattsched.policies.adapters import QueuePlacementScheduler, RoundScheduler
from wattsched.policies.build import DEFAULT_ROUND_S, SchedulerConfig, build_scheduler


def test_queue_and_placement():
    s = build_scheduler(SchedulerConfig(queue="fifo", placement="best-fit"))
    assert isinstance(s, QueuePlacementScheduler)
    assert s.describe() == run_build_scheduler(SimulationConfig().scheduler, None).describe()


@pytest.mark.parametrize("name", ["gandiva", "tiresias", "powerflow", "eaco"])
def test_allocation_policies_match_the_simulation_config(name):
    cfg = SimulationConfig(allocation=name, energy_budget_kwh=5.0 if name == "powerflow" else None)
    ours, theirs = build_scheduler(cfg.scheduler), run_build_scheduler(cfg.scheduler_config(), None)
    assert isinstance(ours, RoundScheduler) and isinstance(theirs, RoundScheduler)
    assert (ours.name, ours.round_s, ours.decide_on_arrival, ours.decide_on_release) == (
        theirs.name, theirs.round_s, theirs.decide_on_arrival, theirs.decide_on_release
    )  # fmt: skip
    assert ours.params == theirs.params


def test_round_defaults_and_validation():
    assert build_scheduler(SchedulerConfig(allocation="optimus-greedy")).round_s == 60.0  # the policy's own
    assert build_scheduler(SchedulerConfig(allocation="optimus-greedy", round_s=120)).round_s == 120.0
    assert DEFAULT_ROUND_S == 300.0
    with pytest.raises(WattschedError, match="round_s"):
        SchedulerConfig(allocation="gandiva", round_s=0)
