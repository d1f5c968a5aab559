"""`wattsched-green`: its names, each mechanism's effect on small simulated fixtures, and the experiment's
verdict arithmetic (docs/green.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import require_real_file
from tests.market_fixtures import write_day_night_market
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.green_tables import (
    ablation_table,
    contribution,
    dominates,
    headline_lines,
    pareto_front,
    verdict_table,
)
from wattsched.experiments.run import run_simulation
from wattsched.policies.allocation import green
from wattsched.policies.allocation.green import (
    BURST_WINDOW_S,
    MECHANISMS,
    WattschedGreen,
    green_name,
    parse_name,
)
from wattsched.policies.contract import ALLOCATION_POLICIES, Capability


# --- names ----------------------------------------------------------------------------------------------------
def test_every_mechanism_can_be_switched_off_by_name():
    full = ALLOCATION_POLICIES.create("wattsched-green")
    assert full.mechanisms == frozenset(MECHANISMS)
    for m in MECHANISMS:
        policy = ALLOCATION_POLICIES.create(f"wattsched-green-no-{m}")
        assert policy.mechanisms == frozenset(MECHANISMS) - {m}
    both = ALLOCATION_POLICIES.create("wattsched-green-no-clocks-no-price-shift-w0.5-s0.2-g0.3")
    assert both.mechanisms == frozenset(MECHANISMS) - {"clocks", "price-shift"}
    assert (both.usd_per_job_hour, both.max_slowdown, both.scale_tolerance) == (0.5, 0.2, 0.3)
    narrow = ALLOCATION_POLICIES.create("wattsched-green-no-shrink-x2.5")
    assert "shrink" not in narrow.mechanisms and narrow.max_stretch == 2.5
    assert green_name(("shrink",), max_stretch=2.5) == "wattsched-green-no-shrink-x2.5"


@pytest.mark.parametrize(
    "name",
    [
        "wattsched-green-no-cheese",
        "wattsched-green-no-clocks-no-clocks",
        "wattsched-green-w1-w2",
        "wattsched-green-x1-x2",
        "wattsched-green-no-shrink-no-shrink",
        "wattsched-greenish",
    ],
)
def test_malformed_names_are_not_policies(name):
    assert parse_name(name) is None
    assert name not in ALLOCATION_POLICIES


@given(
    st.sets(st.sampled_from(MECHANISMS)),
    st.one_of(st.none(), st.floats(0, 100)),
    st.one_of(st.none(), st.floats(0, 0.99)),
    st.one_of(st.none(), st.floats(0, 0.99)),
    st.one_of(st.none(), st.floats(0, 20)),
    st.one_of(st.none(), st.floats(0, 50)),
)
def test_names_round_trip(off, w, s, g, x, k):
    params = parse_name(green_name(off, w, s, g, x, k))
    assert params is not None
    assert set(params["mechanisms"]) == set(MECHANISMS) - off
    weights = (
        ("usd_per_job_hour", w),
        ("max_slowdown", s),
        ("scale_tolerance", g),
        ("max_stretch", x),
        ("kwh_per_job_hour", k),
    )
    for key, value in weights:
        if value is None:
            assert key not in params
        else:
            assert params[key] == pytest.approx(value, abs=1e-6)


def test_bad_weights_are_refused():
    with pytest.raises(ValueError, match="unknown wattsched-green mechanism"):
        WattschedGreen(mechanisms=("queue", "turbo"))
    with pytest.raises(ValueError, match="max_slowdown"):
        WattschedGreen(max_slowdown=1.5)
    with pytest.raises(ValueError, match="usd_per_job_hour"):
        WattschedGreen(usd_per_job_hour=-1)
    with pytest.raises(ValueError, match="max_stretch"):
        WattschedGreen(max_stretch=-0.5)
    with pytest.raises(ValueError, match="kwh_per_job_hour"):
        WattschedGreen(kwh_per_job_hour=float("inf"))


def test_capabilities_follow_the_mechanisms():
    full = WattschedGreen().required_capabilities({})
    assert {Capability.SETS_GPU_SETTINGS, Capability.RESIZES} <= full
    bare = WattschedGreen(mechanisms=("queue", "placement", "right-sizing")).required_capabilities({})
    assert bare == frozenset()
    assert WattschedGreen(mechanisms=("shrink",)).required_capabilities({}) == {Capability.RESIZES}


# --- shrink: the GPU count of least energy per unit of work --------------------------------------------------------
class _SublinearPerf:
    """A job whose rate grows as the square root of its GPUs at 200 W a GPU: its energy per unit of work grows with
    its count (least on one GPU), and halving its GPUs stretches its run by sqrt(2)."""

    def has_table(self, job, code):
        return True

    def solo_rate(self, job, code, gpus, nodes, switches, setting):
        return float(gpus) ** 0.5

    def gpu_power_w(self, job, code, setting):
        return 200.0


def _shrinker(
    max_stretch: float, gpus: int = 8, deadline: float = float("nan"), kwh_per_job_hour: float = 0.0
) -> WattschedGreen:
    policy = WattschedGreen(max_stretch=max_stretch, kwh_per_job_hour=kwh_per_job_hour)
    policy.perf = _SublinearPerf()
    policy.gpus = np.array([gpus])
    policy.codes = np.array([0])
    policy.deadline = np.array([deadline])
    policy.gpus_per_node, policy.base_share_w = 8, 20.0
    return policy


@pytest.mark.parametrize(
    ("max_stretch", "expected"), [(0.0, 8), (0.3, 8), (0.5, 4), (1.0, 2), (2.0, 1), (10.0, 1)]
)
def test_shrink_takes_the_least_energy_count_within_the_stretch_bound(max_stretch, expected):
    count, left = _shrinker(max_stretch)._narrower(0, now=0.0, seconds_left=1000.0)
    assert count == expected
    assert left == pytest.approx(1000.0 * (8 / expected) ** 0.5)
    assert left <= 1000.0 * (1 + max_stretch) + 1e-6


@pytest.mark.parametrize(("kwh_per_job_hour", "expected"), [(0.2, 1), (0.5, 2), (1.0, 4), (2.0, 8)])
def test_shrink_trades_energy_for_run_time_at_the_weight(kwh_per_job_hour, expected):
    # 1000 s at 8 GPUs (220 W each with the base share): energy 0.489 kWh, halving saves less and stretches more
    # each step, so a dearer job-hour stops the halving earlier (break-even weights 1.245, 0.622, 0.311 kWh/h).
    policy = _shrinker(10.0, kwh_per_job_hour=kwh_per_job_hour)
    assert policy._narrower(0, now=0.0, seconds_left=1000.0)[0] == expected


def test_shrink_keeps_the_deadline():
    # 1000 s of work at 8 GPUs; 4 GPUs need 1414 s, 2 GPUs 2000 s; the deadline (less its margin) leaves 1500 s.
    policy = _shrinker(10.0, deadline=1500.0 + green.DEADLINE_MARGIN_S)
    assert policy._narrower(0, now=0.0, seconds_left=1000.0)[0] == 4
    assert policy._narrower(0, now=200.0, seconds_left=1000.0)[0] == 8  # 1300 s left: no narrower count fits
    assert _shrinker(10.0, gpus=1)._narrower(0, now=0.0, seconds_left=1000.0) == (1, 1000.0)


# --- the forecast of right-sizing -------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 200_000), st.integers(1, 8)), min_size=1, max_size=40),
    st.floats(0, 300_000),
)
def test_forecast_is_the_busiest_boot_window_of_the_last_day(arrivals, now):
    from wattsched.core.jobs import JobTable
    from wattsched.policies.allocation import green

    jobs = JobTable.build(
        job_id=[f"j{i}" for i in range(len(arrivals))],
        submit_s=[a for a, _ in arrivals],
        duration_s=[60.0] * len(arrivals),
        num_gpu=[g for _, g in arrivals],
    )
    policy = WattschedGreen()
    policy._submit_sorted = np.sort(jobs.submit_s)
    order = np.argsort(jobs.submit_s, kind="stable")
    policy._gpus_cum = np.concatenate([[0.0], np.cumsum(jobs.num_gpu[order].astype(float))])
    seen = [(t, g) for t, g in arrivals if now - green.BURST_HISTORY_S <= t <= now]
    expected = max((sum(g for u, g in seen if t <= u <= t + BURST_WINDOW_S) for t, _ in seen), default=0.0)
    assert policy._burst_gpus(now) == pytest.approx(expected)


# --- mechanisms in the simulator ------------------------------------------------------------------------------
@pytest.fixture
def market(tmp_path):
    """Price $200/MWh from 00:00 to 12:00 UTC, $20 after; 2 nodes x 4 V100. The clocks and GPU-count mechanisms read
    the jobs' scaling from Gavel's measured throughputs (a dataset): skipped without it."""
    require_real_file("gavel-traces", "simulation_throughputs.json")
    return write_day_night_market(tmp_path)


def _run(market, rows: list[tuple[float, float, int, float | None]], allocation: str, **more):
    """rows: (submit s, duration s, GPUs, deadline s after 0 or None)."""
    with_deadline = any(r[3] is not None for r in rows)
    header = "job_id,submit_time,duration,num_gpu" + (",deadline_at" if with_deadline else "")
    lines = [header]
    for i, (submit, duration, gpus, deadline) in enumerate(rows):
        extra = f",{deadline:g}" if with_deadline else ""
        lines.append(f"j{i},{submit:g},{duration:g},{gpus}{extra}")
    (market / "jobs.csv").write_text("\n".join(lines) + "\n")
    cfg = SimulationConfig(
        workload=str(market / "jobs.csv"), cluster=str(market / "c.yaml"), price_csv=str(market / "p.csv"),
        year=2023, allocation=allocation, **more,
    )  # fmt: skip
    return run_simulation(cfg, None)


def test_price_shift_waits_for_cheap_hours_within_the_deadline(market):
    rows = [(i * 600.0, 7200.0, 2, 30 * 3600.0) for i in range(4)]
    # Idle nodes switch off while the work waits (as the experiment runs every policy); no forecast headroom, which
    # would keep a node on through the dear hours for arrivals like these (measured alone here).
    shifted = _run(market, rows, "wattsched-green-no-right-sizing-w0", power_manager="idle-timeout")
    plain = _run(market, rows, "wattsched-green-no-right-sizing-no-price-shift", power_manager="idle-timeout")
    # trace time 0 is Monday 00:00 UTC: the cheap hours start at 12:00 = 43,200 s
    assert (shifted.jobs["start_s"] >= 43_200).all()
    assert (plain.jobs["start_s"] < 43_200).all()
    assert shifted.summary["deadline_misses"] == 0 == plain.summary["deadline_misses"]
    assert shifted.summary["cost_usd"] < 0.5 * plain.summary["cost_usd"]


def test_price_shift_never_defers_what_its_deadline_cannot_wait_for(market):
    rows = [(i * 600.0, 7200.0, 2, i * 600.0 + 3 * 3600.0) for i in range(4)]  # 2 h of work, 3 h to do it
    tight = _run(market, rows, "wattsched-green-w0")
    assert (tight.jobs["start_s"] < 43_200).all()
    assert tight.summary["deadline_misses"] == 0


def test_a_high_delay_weight_shifts_nothing(market):
    rows = [(i * 600.0, 7200.0, 2, 30 * 3600.0) for i in range(4)]
    dear = _run(market, rows, "wattsched-green-w1000")
    assert (dear.jobs["start_s"] < 43_200).all()


def test_queue_order_runs_short_jobs_first(market):
    # The cluster (8 GPUs) is busy for an hour; a long job, then short ones, each on all 8 GPUs, wait for it.
    rows = [(0.0, 3600.0, 8, None), (10.0, 10 * 3600.0, 8, None)] + [
        (20.0 + i, 600.0, 8, None) for i in range(4)
    ]
    base = "wattsched-green-no-price-shift-no-gpus-no-clocks-no-shrink"
    ordered = _run(market, rows, base)
    fifo = _run(market, rows, base.replace("green-", "green-no-queue-", 1))
    short = ordered.jobs["duration_s"] < 3600
    assert ordered.jobs.loc[short, "jct_s"].mean() < fifo.jobs.loc[short, "jct_s"].mean()
    assert ordered.jobs["jct_s"].mean() < fifo.jobs["jct_s"].mean()


def test_clocks_lower_energy_within_the_slowdown_bound(market):
    rows = [(i * 60.0, 4 * 3600.0, 1, None) for i in range(3)]
    slow = _run(market, rows, "wattsched-green-no-price-shift-no-gpus", power_model="dvfs")
    fast = _run(market, rows, "wattsched-green-no-price-shift-no-gpus-no-clocks", power_model="dvfs")
    assert (slow.jobs["mean_power_limit_frac"] < 1).all()
    assert (fast.jobs["mean_power_limit_frac"] == 1).all()
    run_time = slow.jobs["end_s"] - slow.jobs["start_s"]
    assert (run_time <= 1.10 * slow.jobs["duration_s"] + 1e-6).all()  # max_slowdown 0.10
    gpu = "gpu_active"
    assert slow.summary["energy_by_component_kwh"][gpu] < fast.summary["energy_by_component_kwh"][gpu]


def test_clocks_go_back_to_the_default_when_jobs_wait(market):
    # two long 4-GPU jobs fill the cluster at a low limit; a third arrives and must wait: both go back to 1.0
    rows = [(0.0, 10 * 3600.0, 4, None), (0.0, 10 * 3600.0, 4, None), (3600.0, 600.0, 4, None)]
    out = _run(market, rows, "wattsched-green-no-price-shift-no-gpus-no-shrink", power_model="dvfs")
    first = out.jobs.iloc[:2]
    # slowed for the first hour only: their mean limit is between the low one and the default
    assert ((first["mean_power_limit_frac"] > 0.9) & (first["mean_power_limit_frac"] < 1)).all()


def test_shrink_runs_wide_jobs_on_fewer_gpus_for_less_energy(market):
    # Two 4-GPU jobs (models from Gavel's V100 tables): at 2 GPUs ResNet-50 runs 1.19x longer, LM faster.
    rows = [(i * 60.0, 4 * 3600.0, 4, None) for i in range(2)]
    base = "wattsched-green-no-price-shift-no-gpus-no-clocks-x1-k0"
    narrow = _run(market, rows, base, power_model="dvfs")
    wide = _run(market, rows, base.replace("-x1-k0", "-no-shrink"), power_model="dvfs")
    assert (wide.jobs["mean_num_gpu"] == 4).all()
    assert (narrow.jobs["mean_num_gpu"] < 4).all()
    run_time = narrow.jobs["end_s"] - narrow.jobs["start_s"]
    assert (run_time <= 2.0 * narrow.jobs["duration_s"] + 1e-6).all()  # max_stretch 1.0
    assert narrow.summary["energy_kwh"] < wide.summary["energy_kwh"]
    assert narrow.summary["policies"]["allocation"]["parameters"]["shrunk_starts"] == 2


def test_shrink_stays_within_a_tight_stretch_bound_and_deadline(market):
    base = "wattsched-green-no-price-shift-no-gpus-no-clocks"
    rows = [(i * 60.0, 4 * 3600.0, 4, None) for i in range(2)]
    tight = _run(market, rows, base + "-x0.1-k0", power_model="dvfs").jobs.set_index("model_name")
    # ResNet-50 would stretch 1.19x at 2 GPUs: it keeps 4; LM runs faster at 2 and shrinks.
    assert tight.loc["ResNet-50 (batch size 64)", "mean_num_gpu"] == 4
    assert tight.loc["LM (batch size 20)", "mean_num_gpu"] == 2
    # A deadline that leaves less than the stretched run keeps the trace count, with no miss.
    rows = [(0.0, 4 * 3600.0, 4, 4 * 3600.0 + green.DEADLINE_MARGIN_S + 1000.0)]
    out = _run(market, rows, base + "-k0", power_model="dvfs")
    assert out.jobs["mean_num_gpu"].iloc[0] == 4
    assert out.summary["deadline_misses"] == 0
    # A dear job-hour keeps ResNet-50 at 4 GPUs; LM still shrinks (faster and cheaper at 2).
    rows = [(i * 60.0, 4 * 3600.0, 4, None) for i in range(2)]
    dear = _run(market, rows, base + "-k5", power_model="dvfs").jobs.set_index("model_name")
    assert dear.loc["ResNet-50 (batch size 64)", "mean_num_gpu"] == 4
    assert dear.loc["LM (batch size 20)", "mean_num_gpu"] == 2


# --- the experiment's arithmetic --------------------------------------------------------------------------------
def test_domination_and_the_pareto_front():
    assert dominates((1, 1), (1, 2)) and dominates((0, 2), (1, 2))
    assert not dominates((1, 2), (1, 2)) and not dominates((0, 3), (1, 2))
    points = [(1, 5), (2, 2), (3, 3), (5, 1), (2, 6)]
    assert pareto_front(points) == [0, 1, 3]


def _records():
    return pd.DataFrame(
        [
            {"policy": "wattsched-green", "kind": "green", "energy_kwh": 90.0, "cost_usd": 9.0, "jct_mean_s": 100.0,
             "deadline_misses": 0, "slo_violation_hours": 0},
            {"policy": "wattsched-green -clocks", "kind": "green", "energy_kwh": 100.0, "cost_usd": 10.0,
             "jct_mean_s": 95.0, "deadline_misses": 0, "slo_violation_hours": 0},
            {"policy": "wattsched-green -queue", "kind": "green", "energy_kwh": 90.0, "cost_usd": 9.0,
             "jct_mean_s": 100.0, "deadline_misses": 0, "slo_violation_hours": 0},
            {"policy": "fifo", "kind": "baseline", "energy_kwh": 100.0, "cost_usd": 10.0, "jct_mean_s": 100.0,
             "deadline_misses": 3, "slo_violation_hours": 7},
            {"policy": "cedla", "kind": "seed", "energy_kwh": 80.0, "cost_usd": 12.0, "jct_mean_s": 200.0,
             "deadline_misses": 0, "slo_violation_hours": 0},
        ]
    )  # fmt: skip


def test_verdict_says_whom_green_dominates_and_by_how_much():
    table = verdict_table(_records()).set_index("compared")
    assert table.loc["fifo", "dominates on (energy, JCT)"] and table.loc["fifo", "dominates on (cost, JCT)"]
    assert table.loc["fifo", "energy change %"] == pytest.approx(-10.0)
    assert not table.loc["cedla", "dominates on (energy, JCT)"]  # cedla uses less energy
    assert table.loc["cedla", "dominates on (cost, JCT)"]
    assert table.loc["cedla", "mean JCT change %"] == pytest.approx(-50.0)
    assert table.loc["fifo", "its SLO hours"] == 7


def test_verdict_names_a_run_that_completed_fewer_jobs():
    records = _records().assign(training_jobs_completed=[10.0, 10.0, 10.0, 10.0, 4.0])
    table = verdict_table(records).set_index("compared")
    assert table.loc["cedla", "its jobs completed"] == 4 and table.loc["fifo", "its jobs completed"] == 10
    lines = headline_lines(records)
    assert any("cedla (4)" in line and "fifo" not in line for line in lines)
    assert not any(
        "fewer" in line for line in headline_lines(_records().assign(training_jobs_completed=10.0))
    )


def test_headline_names_an_undominated_run_that_left_service_hours_late():
    records = _records()
    records.loc[records["policy"] == "cedla", "slo_violation_hours"] = 12
    lines = headline_lines(records)
    # cedla is not dominated on (energy, JCT) and left 12 service-hours late; fifo (7 h) is dominated on both
    assert any(
        "service-hours late" in line and "cedla (12 h)" in line and "fifo" not in line for line in lines
    )
    assert not any("service-hours late" in line for line in headline_lines(_records()))


def test_ablation_names_what_each_mechanism_contributes():
    table = ablation_table(_records()).set_index("mechanism")
    assert table.loc["clocks", "energy with it off %"] == pytest.approx(100 / 9 * 1.0, rel=1e-6)
    assert table.loc["clocks", "contributes"] == "lowers energy, cost; raises mean JCT"
    assert table.loc["queue", "contributes"].startswith("nothing measurable")
    assert contribution({"energy": float("nan")}).startswith("nothing")


# --- the experiment end to end ----------------------------------------------------------------------------------
def test_experiment_runs_the_ablation_and_the_seeds_and_writes_the_verdict(market, tmp_path):
    from wattsched.experiments.green import GreenConfig
    from wattsched.experiments.protocol import experiment, run_experiment

    rows = ["job_id,submit_time,duration,num_gpu"]
    rows += [f"j{i},{i * 900},{3600 * (1 + i % 3)},{1 + i % 4}" for i in range(12)]
    (market / "jobs.csv").write_text("\n".join(rows) + "\n")
    cfg = GreenConfig(
        workload=str(market / "jobs.csv"), cluster=str(market / "c.yaml"), price_csv=str(market / "p.csv"),
        services="none", compared=["fifo", "cedla"],
    )  # fmt: skip
    out = run_experiment(experiment("green"), cfg, tmp_path / "out", workers=1, plots=False)
    policies = out.records["policy"].tolist()
    assert policies[0] == "wattsched-green"
    assert {f"wattsched-green -{m}" for m in MECHANISMS} | {"fifo", "cedla"} <= set(policies)
    verdict = pd.read_csv(tmp_path / "out" / "verdict.csv")
    assert set(verdict["compared"]) == {"cedla", "fifo"}
    assert verdict["dominates on (energy, JCT)"].dtype == bool
    assert len(pd.read_csv(tmp_path / "out" / "ablation.csv")) == len(MECHANISMS)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Domination verdict" in summary and "## Ablation" in summary


def test_experiment_refuses_an_unknown_seed(market):
    from wattsched.core.errors import UnknownNameError
    from wattsched.experiments.green import Green, GreenConfig

    with pytest.raises(UnknownNameError, match="nosuch"):
        Green().grid(GreenConfig(workload=str(market / "jobs.csv"), compared=["nosuch"]))


def _urgent_wide_run(tmp_path, deadline_slack: float, width: int = 5, duration_s: int = 600):
    """5 nodes x 4 V100, each holding a long 3-GPU job; then a `width`-GPU job (by default wider than a node) of
    `duration_s`: 5 GPUs are free, one on each node, and no whole node."""
    require_real_file("gavel-traces", "simulation_throughputs.json")  # the policy reads the throughput tables
    write_day_night_market(tmp_path)
    (tmp_path / "c.yaml").write_text(
        "name: five\nnode_groups:\n  - count: 5\n    gpus: 4\n    gpu_model: V100\n    cpu_milli: 64000\n"
        "    memory_mib: 524288\n"
    )
    rows = ["job_id,submit_time,duration,num_gpu"]
    rows += [f"long{i},{i},{20 * 3600},3" for i in range(5)]
    rows += [f"wide,600,{duration_s},{width}"]
    (tmp_path / "jobs.csv").write_text("\n".join(rows) + "\n")
    cfg = SimulationConfig(
        workload=str(tmp_path / "jobs.csv"), cluster=str(tmp_path / "c.yaml"), price_csv=str(tmp_path / "p.csv"),
        year=2023, allocation="wattsched-green-no-right-sizing-no-shrink-no-regrow-no-gpus", power_model="dvfs",
        deadline_slack=deadline_slack,
    )  # fmt: skip
    jobs = run_simulation(cfg, None).jobs.set_index("job_id")
    return jobs.loc["wide"]


def test_a_wide_job_whose_deadline_cannot_wait_takes_gpus_across_nodes(tmp_path):
    urgent = _urgent_wide_run(tmp_path, deadline_slack=2.0)  # 20 min of slack: less than an hour
    assert urgent["start_s"] == pytest.approx(600.0)  # started at once, on free GPUs of several nodes
    assert len({p.split(":")[0] for p in urgent["placement"].split(";")}) == 5
    patient = _urgent_wide_run(tmp_path, deadline_slack=100.0)  # 16 h of slack: it waits until it is urgent
    assert patient["start_s"] > 3600.0
    # slower across nodes (here it runs past its deadline), but it ends long before whole nodes free up
    assert urgent["end_s"] < patient["start_s"]


def test_a_node_wide_job_that_cannot_wait_for_a_boot_spreads_across_nodes(tmp_path):
    # 4 GPUs (a whole node) for 3 minutes, deadline 6 minutes after submission: less slack than a boot and a round
    urgent = _urgent_wide_run(tmp_path, deadline_slack=2.0, width=4, duration_s=180)
    assert urgent["start_s"] == pytest.approx(600.0)
    assert len({p.split(":")[0] for p in urgent["placement"].split(";")}) == 4
    # 24 minutes of slack: it waits for a node until its slack falls under 10 minutes (here no node frees up)
    patient = _urgent_wide_run(tmp_path, deadline_slack=8.0, width=4, duration_s=180)
    deadline = 600.0 + 8.0 * 180
    assert patient["start_s"] >= deadline - 180 - green.SPREAD_SLACK_S
