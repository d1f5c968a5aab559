"""`wattsched-green`'s objective beyond energy and cost: carbon's price in price-shift, and PowerFlow's energy
budget (docs/green.md, "Carbon" and "Energy budget"); the experiment's carbon verdict."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import require_real_file
from tests.market_fixtures import write_day_night_market
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.green_tables import headline_lines, pairs, verdict_table
from wattsched.experiments.run import run_simulation
from wattsched.policies.allocation.energy_budget import BudgetBelowFloorError
from wattsched.policies.allocation.green import WattschedGreen, green_name, parse_name
from wattsched.policies.allocation.green_carbon import carbon_priced
from wattsched.policies.contract import ALLOCATION_POLICIES, Capability


# --- carbon: names and the hourly figure ------------------------------------------------------------------------
def test_the_carbon_weight_has_a_name_suffix():
    policy = ALLOCATION_POLICIES.create("wattsched-green-no-clocks-c50")
    assert policy.usd_per_tonne_co2 == 50.0 and "clocks" not in policy.mechanisms
    assert ALLOCATION_POLICIES.create("wattsched-green").usd_per_tonne_co2 == 0.0
    assert green_name(("shrink",), usd_per_tonne_co2=120) == "wattsched-green-no-shrink-c120"
    assert parse_name("wattsched-green-c1-c2") is None
    with pytest.raises(ValueError, match="usd_per_tonne_co2"):
        WattschedGreen(usd_per_tonne_co2=-1)


@given(st.floats(0, 1000), st.one_of(st.none(), st.floats(0, 100)))
def test_carbon_weight_round_trips_with_the_others(c, k):
    params = parse_name(green_name((), kwh_per_job_hour=k, usd_per_tonne_co2=c))
    assert params is not None and params["usd_per_tonne_co2"] == pytest.approx(c, abs=1e-6)


class _Forecasts:
    """A view with a carbon forecast that counts its reads."""

    def __init__(self, carbon):
        self.carbon, self.reads = carbon, 0

    def carbon_ahead_g_per_kwh(self, hours):
        self.reads += 1
        return None if self.carbon is None else np.asarray(self.carbon[:hours], dtype=float)


def test_carbon_folds_into_an_effective_price():
    prices = np.array([100.0, 50.0, 10.0])
    view = _Forecasts([400.0, 200.0, 300.0])
    same, used = carbon_priced(view, prices, 0.0, 3)
    assert same is prices and not used and view.reads == 0  # weight 0: the forecast is not even read
    priced, used = carbon_priced(view, prices, 100.0, 3)
    # 400 g/kWh = 0.4 t/MWh, at $100/t: $40/MWh
    assert used and priced.tolist() == pytest.approx([140.0, 70.0, 40.0])
    alone, used = carbon_priced(view, None, 100.0, 3)
    assert used and alone.tolist() == pytest.approx([40.0, 20.0, 30.0])
    none, used = carbon_priced(_Forecasts(None), prices, 100.0, 3)
    assert none is prices and not used


# --- carbon in the simulator ------------------------------------------------------------------------------------
@pytest.fixture
def market(tmp_path):
    """The day-night market's cluster, a flat $50/MWh price and a carbon series of 500 g/kWh from 00:00 to 12:00
    UTC, 100 after (the model's scaling reads Gavel's throughputs: skipped without them)."""
    require_real_file("gavel-traces", "simulation_throughputs.json")
    write_day_night_market(tmp_path)
    price, carbon = ["time,price_usd_per_mwh"], ["time,carbon_g_per_kwh"]
    for h in range(24 * 366):
        t = (datetime(2023, 1, 1) + timedelta(hours=h)).strftime("%Y-%m-%dT%H:00:00Z")
        price.append(f"{t},50")
        carbon.append(f"{t},{500 if h % 24 < 12 else 100}")
    (tmp_path / "flat.csv").write_text("\n".join(price) + "\n")
    (tmp_path / "carbon.csv").write_text("\n".join(carbon) + "\n")
    return tmp_path


def _run(folder, rows: list[str], allocation: str, **more):
    (folder / "jobs.csv").write_text(
        "\n".join(["job_id,submit_time,duration,num_gpu,deadline_at", *rows]) + "\n"
    )
    cfg = SimulationConfig(
        workload=str(folder / "jobs.csv"), cluster=str(folder / "c.yaml"), year=2023, allocation=allocation,
        power_manager="idle-timeout", **more,
    )  # fmt: skip
    return run_simulation(cfg, None)


def test_a_carbon_price_shifts_work_into_clean_hours(market):
    rows = [f"j{i},{i * 600},7200,2,{30 * 3600}" for i in range(4)]
    signals = {"price_csv": str(market / "flat.csv"), "carbon_csv": str(market / "carbon.csv")}
    base = "wattsched-green-no-right-sizing-w0"
    flat = _run(market, rows, base, **signals)
    priced = _run(market, rows, base + "-c200", **signals)
    # A flat price gives price-shift nothing to act on; at $200/t the clean hours (from 12:00) are worth waiting for.
    assert (flat.jobs["start_s"] < 43_200).all()
    assert (priced.jobs["start_s"] >= 43_200).all()
    assert priced.summary["deadline_misses"] == 0
    assert priced.summary["co2_kg"] < 0.5 * flat.summary["co2_kg"]
    params = priced.summary["policies"]["allocation"]["parameters"]
    assert params["usd_per_tonne_co2"] == 200 and params["rounds_with_carbon"] > 0
    assert flat.summary["policies"]["allocation"]["parameters"]["rounds_with_carbon"] == 0


# --- the energy budget ------------------------------------------------------------------------------------------
def _contended(market, budget_kwh: float | None, name: str = "wattsched-green-no-price-shift"):
    """Twelve 4-hour one-GPU jobs on 8 GPUs: four wait, so unbudgeted clocks stay at the default."""
    rows = [f"j{i},{i},{4 * 3600}," + "1," for i in range(12)]
    return _run(
        market, rows, name, price_csv=str(market / "p.csv"), power_model="dvfs", energy_budget_kwh=budget_kwh
    )


def test_a_budget_that_binds_is_kept(market):
    free = _contended(market, None)
    budget = 0.95 * free.summary["energy_kwh"]
    kept = _contended(market, budget)
    params = kept.summary["policies"]["allocation"]["parameters"]
    assert params["budget_binding"] is True and params["energy_budget_kwh"] == pytest.approx(budget)
    assert kept.summary["energy_kwh"] <= budget < free.summary["energy_kwh"]
    assert params["floor_kwh"] < budget
    assert kept.summary["jobs_completed"] == free.summary["jobs_completed"] == 12
    assert (kept.jobs["mean_power_limit_frac"] < 1).all()  # clocks moved towards least energy


def test_a_budget_below_the_floor_is_refused_with_the_floor_named(market):
    with pytest.raises(
        BudgetBelowFloorError, match=r"below this run's floor of \d+\.\d+ kWh.*least static draw"
    ):
        _contended(market, 0.5)


def test_the_simulate_command_refuses_it_in_one_line(market, tmp_path):
    from typer.testing import CliRunner

    from wattsched.cli.main import app

    rows = ["job_id,submit_time,duration,num_gpu", *(f"j{i},{i},{4 * 3600},1" for i in range(12))]
    (market / "jobs.csv").write_text("\n".join(rows) + "\n")
    result = CliRunner().invoke(app, [
        "simulate", "--workload", str(market / "jobs.csv"), "--cluster", str(market / "c.yaml"), "--price-csv",
        str(market / "p.csv"), "--year", "2023", "--allocation", "wattsched-green", "--power-model", "dvfs",
        "--energy-budget-kwh", "0.5", "--quiet", "--out", str(tmp_path / "run"),
    ])  # fmt: skip
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "floor of" in result.output and len(result.output.strip().splitlines()) == 1


def test_no_budget_changes_nothing(market):
    free = _contended(market, None)
    loose = _contended(market, 1e6)  # a budget that never binds runs exactly as none
    assert free.summary["energy_kwh"] == loose.summary["energy_kwh"]
    pd.testing.assert_frame_equal(free.jobs, loose.jobs)
    assert free.summary["policies"]["allocation"]["parameters"]["budget_binding"] is None
    assert loose.summary["policies"]["allocation"]["parameters"]["budget_binding"] is False


def test_a_budget_needs_a_meter():
    assert Capability.METERS_ENERGY in WattschedGreen().required_capabilities({"energy_budget_kwh": 10.0})
    assert Capability.METERS_ENERGY not in WattschedGreen().required_capabilities({})


# --- the experiment's carbon verdict ----------------------------------------------------------------------------
def _records(co2: list[float] | None):
    rows = pd.DataFrame(
        {
            "policy": ["wattsched-green", "fifo", "cedla"],
            "kind": ["green", "baseline", "seed"],
            "energy_kwh": [90.0, 100.0, 80.0],
            "cost_usd": [9.0, 10.0, 12.0],
            "jct_mean_s": [100.0, 100.0, 200.0],
            "deadline_misses": [0, 3, 0],
            "slo_violation_hours": [0, 7, 0],
        }
    )
    return rows if co2 is None else rows.assign(co2_kg=co2)


def test_the_verdict_has_carbon_where_the_runs_have_it():
    table = verdict_table(_records([50.0, 40.0, 60.0])).set_index("compared")
    assert not table.loc["fifo", "dominates on (carbon, JCT)"]  # fifo emitted less
    assert table.loc["cedla", "dominates on (carbon, JCT)"]
    assert table.loc["fifo", "carbon change %"] == pytest.approx(25.0)
    assert any("on (carbon, mean JCT)" in line for line in headline_lines(_records([50.0, 40.0, 60.0])))
    # Without a carbon series (NaN), the tables are as they were: energy and cost only.
    bare = verdict_table(_records([float("nan")] * 3))
    assert not any("carbon" in c for c in bare.columns)
    assert [w for _, w in pairs(_records(None))] == ["energy", "cost"]


def test_policies_see_the_carbon_ahead(tmp_path, monkeypatch):
    """view.carbon_ahead_g_per_kwh(h): the next h hourly intensities, the first being the one now; None without a
    carbon series."""
    from wattsched.policies.allocation.tiresias import Tiresias

    seen = []
    original = Tiresias.allocate

    def recording(self, view):
        if not seen:
            seen.append((view.now, view.carbon_g_per_kwh(), view.carbon_ahead_g_per_kwh(30)))
        return original(self, view)

    monkeypatch.setattr(Tiresias, "allocate", recording)
    rows = ["time,carbon_g_per_kwh"]
    for h in range(24 * 366):
        t = datetime(2023, 1, 1) + timedelta(hours=h)
        rows.append(t.strftime("%Y-%m-%dT%H:00:00Z") + f",{100 + t.hour}")
    (tmp_path / "carbon.csv").write_text("\n".join(rows) + "\n")
    cfg = SimulationConfig(
        workload="synthetic", carbon_csv=str(tmp_path / "carbon.csv"), year=2023, max_jobs=20,
        allocation="tiresias", performance="trace",
    )  # fmt: skip
    run_simulation(cfg, None)
    now, carbon_now, ahead = seen[0]
    assert len(ahead) == 30 and ahead[0] == carbon_now
    hour0 = int(now // 3600)  # trace time 0 is Monday 00:00 UTC (no calendar start)
    assert ahead.tolist() == [100.0 + (hour0 + k) % 24 for k in range(30)]
    seen.clear()
    run_simulation(
        SimulationConfig(workload="synthetic", max_jobs=20, allocation="tiresias", performance="trace")
    )
    assert seen[0][2] is None
