"""`wattsched-green`'s `regrow`: running training jobs widened into spare GPUs within the energy tolerance, given
back when jobs wait (docs/green.md, section 4; policies/allocation/green_regrow.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import require_real_file
from tests.market_fixtures import write_day_night_market
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import run_simulation
from wattsched.policies.allocation import green_regrow
from wattsched.policies.allocation.green import MECHANISMS, WattschedGreen
from wattsched.policies.contract import ALLOCATION_POLICIES, Capability

# Only regrow resizes: gpus (wider at start) and shrink (narrower at start) off, no price-shift or clocks; the
# energy tolerance fixed at 0.3 (ResNet-50 at batch 128 then widens from one GPU to two, not four).
BASE = "wattsched-green-no-gpus-no-clocks-no-price-shift-no-shrink"


def _name(more_off: str = "", tolerance: str = "0.3") -> str:
    return f"{BASE}{more_off}-g{tolerance}"


@pytest.fixture
def market(tmp_path):
    """2 nodes x 4 V100; the jobs' scaling from Gavel's measured throughputs (a dataset): skipped without it."""
    require_real_file("gavel-traces", "simulation_throughputs.json")
    return write_day_night_market(tmp_path)


def _run(market, rows: list[tuple[float, float, int]], allocation: str):
    """rows: (submit s, duration s, GPUs), each job ResNet-50 at batch 128: on V100 two GPUs run it 1.7x as fast
    for at most 30 % more energy per unit of work, four do not (Gavel's table)."""
    lines = ["job_id,submit_time,duration,num_gpu,model_name,batch_size"]
    lines += [
        f"j{i},{submit:g},{duration:g},{gpus},ResNet-50,128"
        for i, (submit, duration, gpus) in enumerate(rows)
    ]
    (market / "jobs.csv").write_text("\n".join(lines) + "\n")
    cfg = SimulationConfig(
        workload=str(market / "jobs.csv"), cluster=str(market / "c.yaml"), price_csv=str(market / "p.csv"),
        year=2023, allocation=allocation, power_model="dvfs",
    )  # fmt: skip
    return run_simulation(cfg, None)


def _counters(out) -> dict:
    return out.summary["policies"]["allocation"]["parameters"]


def test_regrow_is_a_mechanism_that_moves_running_jobs():
    assert MECHANISMS[-1] == "regrow"
    assert "regrow" not in ALLOCATION_POLICIES.create("wattsched-green-no-regrow").mechanisms
    needs = WattschedGreen(mechanisms=("regrow",)).required_capabilities({})
    assert needs == {Capability.RESIZES, Capability.PREEMPTS}
    assert green_regrow.COOLDOWN_ROUNDS * WattschedGreen.default_round_s == 3600.0


def test_a_long_one_gpu_job_is_widened_into_spare_gpus(market):
    rows = [(0.0, 20 * 3600.0, 1)]
    wide = _run(market, rows, _name())
    plain = _run(market, rows, _name("-no-regrow"))
    assert plain.jobs["mean_num_gpu"].iloc[0] == 1
    assert wide.jobs["mean_num_gpu"].iloc[0] > 1.9
    assert wide.jobs["jct_s"].iloc[0] < 0.8 * plain.jobs["jct_s"].iloc[0]
    assert _counters(wide)["regrown_jobs"] == 1 and _counters(wide)["returned_gpus"] == 0
    assert _counters(plain)["regrown_jobs"] == 0
    # one widening, each a checkpoint-restart (no work lost), and the widest count within its scaling at once
    assert _counters(wide)["regrow_widenings"] == 1 == wide.summary["restarts"]


def test_no_widening_where_it_costs_more_energy_per_unit_of_work_than_the_tolerance(market):
    rows = [(0.0, 20 * 3600.0, 1)]
    strict = _run(market, rows, _name(tolerance="0"))  # no extra energy per unit of work allowed
    assert strict.jobs["mean_num_gpu"].iloc[0] == 1
    assert _counters(strict)["regrown_jobs"] == 0 and strict.summary["restarts"] == 0


def test_widened_gpus_are_given_back_when_a_job_waits(market):
    # Four long one-GPU jobs are widened to two GPUs each after their first round (no right-sizing headroom here):
    # every GPU is busy. An hour later a one-GPU job arrives: a widened job goes back to one GPU in that round, so
    # the newcomer starts at once instead of waiting 10 h for a GPU.
    rows = [(0.0, 20 * 3600.0, 1)] * 4 + [(3600.0, 3600.0, 1)]
    out = _run(market, rows, _name("-no-right-sizing"))
    plain = _run(market, rows, _name("-no-right-sizing-no-regrow"))
    jobs = out.jobs.set_index("job_id")
    assert _counters(out)["regrown_jobs"] == 4
    assert _counters(out)["returned_gpus"] >= 1
    assert jobs.loc["j4", "start_s"] - 3600.0 < 60.0
    assert jobs.loc["j4", "mean_num_gpu"] == 1
    assert out.jobs["jct_s"].mean() < plain.jobs["jct_s"].mean()
    # widened, one given back (and widened again once the newcomer ends): each a restart
    assert out.summary["restarts"] >= 5


def test_off_changes_nothing_where_there_is_nothing_to_widen(market):
    # Every GPU busy with trace-count jobs: nothing to widen or give back, so the run is that of regrow off.
    rows = [(0.0, 6 * 3600.0, 4), (0.0, 6 * 3600.0, 4), (600.0, 3600.0, 2)]
    on = _run(market, rows, _name())
    off = _run(market, rows, _name("-no-regrow"))
    assert _counters(on)["regrown_jobs"] == 0 == _counters(off)["regrown_jobs"]
    cols = ["start_s", "end_s", "jct_s", "mean_num_gpu"]
    assert np.array_equal(on.jobs[cols].to_numpy(), off.jobs[cols].to_numpy())
    assert on.summary["energy_kwh"] == off.summary["energy_kwh"]


def test_off_never_resizes_a_running_job(market):
    rows = [(0.0, 20 * 3600.0, 1), (3600.0, 3600.0, 4)]
    off = _run(market, rows, _name("-no-regrow"))
    assert off.summary["restarts"] == 0
    assert (off.jobs["mean_num_gpu"] == [1, 4]).all()
    assert _counters(off)["regrown_jobs"] == 0 == _counters(off)["returned_gpus"]


def test_a_job_about_to_end_is_not_widened_for_less_than_its_restarts(market):
    # 400 s of work: at the next round (300 s) 100 s are left; two GPUs would save about 40 s, less than the two
    # restarts (about 33 s each for ResNet-50 on two GPUs) a widening must pay for.
    rows = [(0.0, 400.0, 1)]
    out = _run(market, rows, _name())
    assert _counters(out)["regrown_jobs"] == 0 and out.summary["restarts"] == 0
    assert out.jobs["jct_s"].iloc[0] == pytest.approx(400.0)
    assert green_regrow.RESTARTS_PAID == 2.0
