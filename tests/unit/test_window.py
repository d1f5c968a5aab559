"""One accounting window for compared runs (docs/energy.md, "Accounting window").

The hand-computed case: one node of 2 V100 (30 W idle, 300 W at full load), 32 vCPU = one socket of the fallback
CPU (15 W idle; the jobs take no CPU), 25 W node base, linear power model, PUE 1. Three jobs, all submitted at 0,
all at 100 % GPU utilisation: a (1 GPU, 100 s), b (2 GPUs, 50 s), c (1 GPU, 100 s).

* ``sjf`` runs b on [0, 50), then a and c together on [50, 150): 640 W throughout (2 x 300 + 15 + 25), own
  window 96,000 J, ends at 150.
* ``fifo`` runs a on [0, 100) beside a free GPU (300 + 30 + 15 + 25 = 370 W), b on [100, 150) (640 W), c on
  [150, 250) (370 W): 37,000 + 32,000 + 37,000 = 106,000 J, ends at 250.

The common window is [0, 250]. Always on, sjf's node idles on [150, 250) at 2 x 30 + 15 + 25 = 100 W: +10,000 J,
106,000 J in all. Idle-timeout (20 s), shutdown 10 s, 5 W off: sjf's node idles at 100 W on [150, 170), shuts down
drawing its idle power and base (100 W) on [170, 180) and draws 5 W off on [180, 250): +2,000 + 1,000 + 350 J,
99,350 J in all. fifo ends at 250: its common-window figures are its own.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.conftest import make_cluster, make_jobs, make_sim
from wattsched.cli.main import app
from wattsched.energy.power_models import POWER_MODELS
from wattsched.energy.signals.alignment import align
from wattsched.energy.signals.clean import GridSignal
from wattsched.engine.ledger import EnergyLedger
from wattsched.engine.power import NodePower, PowerStateConfig
from wattsched.engine.tail import PowerTail
from wattsched.experiments import window
from wattsched.policies.power import power_manager_from_config

J = 3.6e6  # J per kWh
SPEC = make_cluster([(2, "V100", 32_000, 10**6)])


def _jobs():
    jobs = make_jobs(
        [
            {"id": "a", "submit": 0, "duration": 100, "gpus": 1},
            {"id": "b", "submit": 0, "duration": 50, "gpus": 2},
            {"id": "c", "submit": 0, "duration": 100, "gpus": 1},
        ]
    )
    jobs.gpu_util[:] = 1.0
    return jobs


def run(queue: str, manager: str = "always-on", price=None, **states):
    config = PowerStateConfig(**states)
    power = NodePower(power_manager_from_config(manager, config), config)
    ledger = EnergyLedger(
        POWER_MODELS.create("linear"),
        node_base_w=25.0,
        controller=power,
        off_power_w=config.off_power_w,
        price=price,
    )
    sim = make_sim(_jobs(), SPEC, queue, "first-fit", observers=[ledger], power=power)
    out = sim.run()
    return out, ledger, power


IDLE = {"manager": "idle-timeout", "idle_timeout_s": 20.0, "shutdown_time_s": 10.0, "off_power_w": 5.0}


def test_the_two_runs_end_where_the_hand_computation_says():
    out_sjf, sjf, _ = run("sjf")
    out_fifo, fifo, _ = run("fifo")
    assert out_sjf.end_s.tolist() == [150.0, 50.0, 150.0]
    assert out_fifo.end_s.tolist() == [100.0, 150.0, 250.0]
    # Own windows, as today: each run up to its own last completion.
    assert sum(sjf.energy_j.values()) == pytest.approx(96_000.0, rel=1e-12)
    assert sum(fifo.energy_j.values()) == pytest.approx(106_000.0, rel=1e-12)


def test_always_on_common_window_is_hand_computed():
    tails = [run("sjf")[1].tail(), run("fifo")[1].tail()]
    assert window.window_of(tails) == (0.0, 250.0)
    sjf, fifo = window.charge(tails)
    assert sjf["energy_kwh"] * J == pytest.approx(106_000.0, rel=1e-12)
    assert fifo["energy_kwh"] * J == pytest.approx(106_000.0, rel=1e-12)
    assert sjf["energy_by_component_kwh"]["gpu_idle"] * J == pytest.approx(6_000.0, rel=1e-12)
    assert sjf["energy_by_component_kwh"]["cpu"] * J == pytest.approx(15 * 250.0, rel=1e-12)
    assert sjf["energy_by_component_kwh"]["node_base"] * J == pytest.approx(25 * 250.0, rel=1e-12)
    assert sjf["avg_power_kw"] == pytest.approx(106_000.0 / 250 / 1000, rel=1e-12)
    assert (sjf["start_s"], sjf["end_s"], sjf["own_end_s"], sjf["tail_s"]) == (0.0, 250.0, 150.0, 100.0)
    assert "latest end among the compared runs" in sjf["rule"]


def test_idle_timeout_common_window_charges_the_shutdown_and_the_off_draw():
    _, sjf_ledger, sjf_power = run("sjf", **IDLE)
    _, fifo_ledger, _ = run("fifo", **IDLE)
    # The own window is unchanged by the tail: the shutdown after the last completion is not in the run's records.
    assert sum(sjf_ledger.energy_j.values()) == pytest.approx(96_000.0, rel=1e-12)
    assert sjf_power.shutdowns == 0 and sjf_power.node_seconds_off == 0.0
    tail = sjf_ledger.tail()
    assert tail.t_s.tolist() == [150.0, 170.0, 180.0]
    assert tail.power_w.tolist() == pytest.approx([100.0, 100.0, 5.0])
    assert tail.settled
    sjf, fifo = window.charge([tail, fifo_ledger.tail()])
    assert sjf["energy_kwh"] * J == pytest.approx(96_000.0 + 2_000.0 + 1_000.0 + 350.0, rel=1e-12)
    assert sjf["energy_by_component_kwh"]["power_transitions"] * J == pytest.approx(
        1_000.0 + 350.0, rel=1e-12
    )
    assert fifo["energy_kwh"] * J == pytest.approx(106_000.0, rel=1e-12)
    # Beyond every run's end, the one that ended last gets its own tail too.
    later = fifo_ledger.tail().over(300.0)
    assert later["energy_kwh"] * J == pytest.approx(106_000.0 + 2_000.0 + 1_000.0 + 5 * 20.0, rel=1e-12)


def test_common_window_cost_uses_the_price_integral():
    start = datetime(2023, 1, 1, tzinfo=UTC)
    hourly = np.where(np.arange(8760) % 2 == 0, 40.0, 100.0)  # 40 USD/MWh in even hours, 100 in odd ones
    flat = GridSignal("price", "price", "USD/MWh", "TEST", 2023, "UTC", start, hourly)
    # trace time 0 is 00:59:00: [0, 60) at 40, from 60 s on at 100
    price = align(flat, None, rule="offset", grid_start=datetime(2023, 1, 1, 0, 59, tzinfo=UTC))
    _, sjf, _ = run("sjf", price=price)
    _, fifo, _ = run("fifo", price=price)
    own = (640 * 60 * 40 + 640 * 90 * 100) / 3.6e9
    assert sjf.cost_usd == pytest.approx(own, rel=1e-12)
    a, _ = window.charge([sjf.tail(), fifo.tail()], [(price, None), (price, None)])
    assert a["cost_usd"] == pytest.approx(own + 100 * 100 * 100 / 3.6e9, rel=1e-12)
    assert a["co2_kg"] is None  # no carbon signal


def test_tail_survives_summary_json():
    _, ledger, _ = run("sjf", **IDLE)
    summary = ledger.summary(1.0)
    summary["tail_power"] = ledger.tail().to_dict()
    back = PowerTail.from_summary(json.loads(json.dumps(summary)))
    assert back.over(250.0) == ledger.tail().over(250.0)


def test_a_forecast_manager_with_periodic_timers_stops_at_the_horizon():
    _, ledger, power = run("sjf", manager="forecast")
    tail = ledger.tail()
    assert not tail.settled and tail.drained_to_s > tail.end_s
    assert power.transitions == [] or all(t <= tail.end_s for t, *_ in power.transitions)


def test_a_window_past_an_unsettled_tail_says_so():
    """A forecast tail that never settles is held at its last drained state past the horizon, and the window line
    says so."""
    _, ledger, _ = run("sjf", manager="forecast")
    tail = ledger.tail()
    summary = {window.KEY: window.block(tail, 0.0, tail.drained_to_s + 3600.0)}
    assert "not settled" in window.held_note([summary])
    assert window.held_note([{window.KEY: window.block(tail, 0.0, tail.end_s)}]) == ""


def test_a_window_ending_before_the_run_is_refused():
    _, ledger, _ = run("fifo")
    with pytest.raises(Exception, match="at or after the run's own end"):
        ledger.tail().over(100.0)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=6),
    st.lists(st.floats(0, 500, allow_nan=False), min_size=6, max_size=6),
    st.floats(0, 1e5, allow_nan=False),
)
def test_extending_never_lowers_energy_and_the_own_end_gives_the_own_figures(gaps, watts, extra):
    t = np.cumsum([100.0, *gaps[:-1]])
    t = np.unique(t)
    tail = PowerTail(
        start_s=0.0,
        end_s=float(t[0]),
        energy_kwh=1.25,
        energy_by_component_kwh={"gpu_active": 1.0, "gpu_idle": 0.25},
        cost_usd=None,
        co2_kg=None,
        pue=1.2,
        t_s=t,
        component_w={
            n: np.asarray(watts[: len(t)]) for n in ("gpu_idle", "cpu", "node_base", "power_transitions")
        },
        drained_to_s=float(t[-1]),
        settled=True,
    )
    own = tail.over(tail.end_s)
    assert own["energy_kwh"] == 1.25
    longer = tail.over(tail.end_s + extra)
    assert longer["energy_kwh"] >= own["energy_kwh"]
    assert longer["energy_kwh"] == pytest.approx(sum(longer["energy_by_component_kwh"].values()), rel=1e-9)


# -- compare and report name the window and show its figures ------------------------------------------------------

runner = CliRunner()


def _simulate(out, *args):
    result = runner.invoke(
        app, ["simulate", "--quiet", "--jobs", "60", "--seed", "5", *map(str, args), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("window")
    return (
        _simulate(root / "fifo", "--power-manager", "idle-timeout"),
        _simulate(root / "sjf", "--queue", "sjf", "--power-manager", "idle-timeout"),
    )


def test_summary_keeps_its_own_figures_and_records_the_tail(two_runs):
    for path in two_runs:
        s = json.loads((path / "summary.json").read_text())
        tail = s["tail_power"]
        assert tail["t_s"][0] == tail["end_s"] and len(tail["power_w"]) == len(tail["t_s"])
        assert PowerTail.from_summary(s).over(tail["end_s"])["energy_kwh"] == s["energy_kwh"]
        assert "common_window" not in s  # a single run is not compared


def test_compare_shows_common_window_figures_and_names_the_window(two_runs, tmp_path):
    from wattsched.experiments.compare import comparison

    frame = comparison(list(two_runs))
    summaries = [json.loads((p / "summary.json").read_text()) for p in two_runs]
    ends = [s["tail_power"]["end_s"] for s in summaries]
    tails = [PowerTail.from_summary(s) for s in summaries]
    expected = [t.over(max(ends))["energy_kwh"] for t in tails]
    assert frame["energy_kwh"].tolist() == pytest.approx(expected, rel=1e-12)
    assert frame["own_window_kwh"].tolist() == [s["energy_kwh"] for s in summaries]
    assert any("common window" in line for line in frame.attrs["window"])
    result = runner.invoke(app, ["compare", *map(str, two_runs), "--csv", str(tmp_path / "t.csv")])
    assert result.exit_code == 0, result.output
    assert "window:" in result.output and "common window" in result.output
    assert "own_window_kwh" in (tmp_path / "t.csv").read_text().splitlines()[0]


def test_report_names_the_window(two_runs):
    from wattsched.experiments.report import build_report

    html = build_report(list(two_runs))
    assert 'id="window"' in html and "common window" in html


def test_recording_in_run_dirs_adds_a_named_common_window_block(two_runs, tmp_path):
    import shutil

    dirs = [shutil.copytree(p, tmp_path / p.name) for p in two_runs]
    before = [json.loads((d / "summary.json").read_text()) for d in dirs]
    line = window.record_in_run_dirs(dirs)
    after = [json.loads((d / "summary.json").read_text()) for d in dirs]
    assert "common window" in line
    end = max(s["tail_power"]["end_s"] for s in before)
    for b, a in zip(before, after, strict=True):
        assert {k: v for k, v in a.items() if k != "common_window"} == b  # own figures untouched
        assert a["common_window"]["end_s"] == end and a["common_window"]["energy_kwh"] >= b["energy_kwh"]


def test_compare_charges_the_tail_with_the_runs_own_price_and_carbon(tmp_path):
    from wattsched.energy.signals.csv_files import load_csv_signal
    from wattsched.experiments.compare import comparison
    from wattsched.experiments.demo import SIGNAL_YEAR, write_generated_signals

    price_csv, carbon_csv = write_generated_signals(tmp_path, SIGNAL_YEAR)
    # The hand-computed case above, in hours, as files: sjf ends at 3 h, fifo at 5 h.
    (tmp_path / "cluster.yaml").write_text(
        "name: one\nnode_groups:\n  - {count: 1, gpus: 2, gpu_model: V100, cpu_milli: 32000, memory_mib: 1000000}\n"
    )
    (tmp_path / "jobs.csv").write_text(
        "job_id,submit_time,duration,num_gpu\na,0,7200,1\nb,0,3600,2\nc,0,7200,1\n"
    )
    common = ("--workload", tmp_path / "jobs.csv", "--cluster", tmp_path / "cluster.yaml", "--power-manager",
              "idle-timeout", "--price-csv", price_csv, "--carbon-csv", carbon_csv, "--year", SIGNAL_YEAR)  # fmt: skip
    runs = [_simulate(tmp_path / q, "--queue", q, *common) for q in ("fifo", "sjf")]
    frame = comparison(runs)
    summaries = [json.loads((p / "summary.json").read_text()) for p in runs]
    tails = [PowerTail.from_summary(s) for s in summaries]
    end = max(t.end_s for t in tails)
    assert any(t.end_s < end for t in tails)  # one run has a tail inside the window
    # The signals built here from the CSV files directly, not through the runs' configs.
    price = align(load_csv_signal(price_csv, "price", SIGNAL_YEAR), None)
    carbon = align(load_csv_signal(carbon_csv, "carbon", SIGNAL_YEAR), None)
    for row, tail in zip(frame.to_dict("records"), tails, strict=True):
        expected = tail.over(end, price, carbon)
        assert row["cost_usd"] == pytest.approx(expected["cost_usd"], rel=1e-12)
        assert row["co2_kg"] == pytest.approx(expected["co2_kg"], rel=1e-12)
        if tail.end_s < end:
            assert row["cost_usd"] > tail.cost_usd and row["co2_kg"] > tail.co2_kg
    # Without the series files the tail's cost and carbon cannot be charged: shown as missing, and said so.
    price_csv.unlink()
    carbon_csv.unlink()
    window._signals_cached.cache_clear()
    again = comparison(runs)
    for row, tail in zip(again.to_dict("records"), tails, strict=True):
        assert np.isnan(row["cost_usd"]) if tail.end_s < end else row["cost_usd"] == tail.cost_usd
    assert "are not shown" in " ".join(again.attrs["window"])


def test_compare_from_another_folder_finds_series_given_by_relative_path(tmp_path, monkeypatch):
    """Runs made with `--price-csv prices.csv` in their folder: compare, run from elsewhere, still charges the
    tail's cost and carbon (the run recorded the files' absolute paths in summary.json ``input_files``)."""
    from wattsched.experiments.compare import comparison
    from wattsched.experiments.demo import SIGNAL_YEAR, write_generated_signals

    work = tmp_path / "work"
    work.mkdir()
    price_csv, carbon_csv = write_generated_signals(work, SIGNAL_YEAR)
    (work / "jobs.csv").write_text(
        "job_id,submit_time,duration,num_gpu\na,0,7200,1\nb,0,3600,2\nc,0,7200,1\n"
    )
    (work / "cluster.yaml").write_text(
        "name: one\nnode_groups:\n  - {count: 1, gpus: 2, gpu_model: V100, cpu_milli: 32000, memory_mib: 1000000}\n"
    )
    monkeypatch.chdir(work)
    price, carbon = price_csv.relative_to(work), carbon_csv.relative_to(work)
    common = ("--workload", "jobs.csv", "--cluster", "cluster.yaml", "--power-manager", "idle-timeout",
              "--price-csv", price, "--carbon-csv", carbon, "--year", SIGNAL_YEAR)  # fmt: skip
    runs = [_simulate(tmp_path / q, "--queue", q, *common) for q in ("fifo", "sjf")]
    monkeypatch.chdir(tmp_path)
    window._signals_cached.cache_clear()
    frame = comparison(runs)
    assert frame["cost_usd"].notna().all() and frame["co2_kg"].notna().all()
    assert "are not shown" not in " ".join(frame.attrs["window"])
