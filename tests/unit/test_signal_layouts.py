"""`--price-csv` / `--carbon-csv` read the layouts of the sources the project ships (GreenDCC standardized and
processed prices, Electricity Maps hourly carbon intensity), recognised by header, for regions it does not ship.

Fixtures: ``tests/fixtures/signals/greendcc_standardized_XX.csv`` and ``electricitymaps_XX_2023_hourly.csv`` (a
made-up region XX, a few hand-written rows in the real files' exact header), and full years synthesised below."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.conftest import require_real_file
from wattsched.cli.main import app
from wattsched.core.errors import InputError, WattschedError
from wattsched.energy.signals.clean import daily_profile
from wattsched.energy.signals.csv_files import load_csv_signal

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "signals"
STANDARDIZED = FIX / "greendcc_standardized_XX.csv"
EM_HOURLY = FIX / "electricitymaps_XX_2023_hourly.csv"
EM_HEADER = (
    "Datetime (UTC),Country,Zone Name,Zone Id,Carbon Intensity gCO₂eq/kWh (direct),Carbon Intensity gCO₂eq/kWh "
    "(LCA),Low Carbon Percentage,Renewable Percentage,Data Source,Data Estimated,Data Estimation Method"
)
runner = CliRunner()


def standardized_year(path: Path, offset_h: int = 1, late_h: int = 0) -> Path:
    """A full 2023 in the GreenDCC standardized layout; price = 50 + the true UTC hour of day. `late_h` > 0 writes
    the upstream bug: the UTC column late by that many hours, the local column's wall clock the true UTC."""
    rows = ["Datetime (UTC),Datetime (Local),Price (USD/MWh)"]
    zone = f"{'+' if offset_h >= 0 else '-'}{abs(offset_h):02d}:00"
    for h in range(8760):
        true = datetime(2023, 1, 1) + timedelta(hours=h)
        utc = true + timedelta(hours=late_h)
        local = utc + timedelta(hours=offset_h)
        rows.append(f"{utc:%Y-%m-%d %H:%M:%S}+00:00,{local:%Y-%m-%d %H:%M:%S}{zone},{50 + true.hour}")
    path.write_text("\n".join(rows) + "\n")
    return path


def em_year(path: Path) -> Path:
    """A full 2023 in the Electricity Maps hourly layout; direct CI = 100 + UTC hour, LCA = direct + 40."""
    rows = [EM_HEADER]
    for h in range(8760):
        t = datetime(2023, 1, 1) + timedelta(hours=h)
        rows.append(f"{t:%Y-%m-%d %H:%M:%S},Nowhere,Nowhere,XX,{100 + t.hour},{140 + t.hour},40,30,x,false,")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_greendcc_standardized_prices_of_a_region_not_shipped():
    s = load_csv_signal(STANDARDIZED, "price", 2023, fill="hold")
    assert s.unit == "USD/MWh" and s.hours == 8760 and s.region == "csv:greendcc_standardized_XX.csv"
    assert s.values[:4].tolist() == [40.5, 41.5, -3.25, 44.0]  # Datetime (UTC) as written, negatives kept
    assert s.report["layout"].startswith("GreenDCC standardized")
    assert any("smoothed" in n for n in s.report["notes"])


def test_electricity_maps_hourly_carbon_direct_and_lca():
    direct = load_csv_signal(EM_HOURLY, "carbon", 2023, fill="hold")
    lca = load_csv_signal(EM_HOURLY, "carbon", 2023, fill="hold", carbon="lca")
    assert direct.name == "carbon_direct" and direct.unit == "gCO2eq/kWh"
    assert direct.values[:4].tolist() == [210.5, 205.0, 199.5, 190.0]
    assert lca.name == "carbon_lca" and lca.values[:4].tolist() == [250.25, 245.0, 240.5, 231.0]
    assert "Electricity Maps" in direct.attribution and direct.report["layout"].startswith("Electricity Maps")


def test_header_cells_match_loosely(tmp_path):
    """Electricity Maps exports spell the columns with other case and a plain 2; the header still matches."""
    path = tmp_path / "em.csv"
    path.write_text(
        EM_HOURLY.read_text(encoding="utf-8").replace("Carbon Intensity gCO₂eq", "carbon intensity gCO2eq")
    )
    assert load_csv_signal(path, "carbon", 2023, fill="hold").values[0] == 210.5


def test_full_years_need_no_fill_and_keep_the_hour_of_day(tmp_path):
    price = load_csv_signal(standardized_year(tmp_path / "XX_prices.csv"), "price", 2023)
    carbon = load_csv_signal(em_year(tmp_path / "XX_2023_hourly.csv"), "carbon", 2023)
    assert price.report["gaps"] == [] and carbon.report["gaps"] == []
    assert daily_profile(price, "utc").tolist() == [50.0 + h for h in range(24)]
    assert daily_profile(carbon, "utc").tolist() == [100.0 + h for h in range(24)]


def test_shipped_us_standardized_file_is_read_by_its_local_wall_clock(tmp_path):
    """The green-dcc standardized CAISO file's UTC column is late by the UTC offset; its local wall clock is the
    true UTC time, and that is what is read (said in the notes)."""
    path = standardized_year(tmp_path / "US-CAL-CISO_electricity_prices_2023.csv", offset_h=-8, late_h=8)
    s = load_csv_signal(path, "price", 2023, fill="hold")
    assert daily_profile(s, "utc").tolist() == [50.0 + h for h in range(24)]  # not shifted by 8 h
    assert s.report["timestamps"] == "Datetime (Local) wall clock read as UTC"
    assert any("late by the UTC offset" in n for n in s.report["notes"])


def test_greendcc_processed_euro_prices_are_converted(tmp_path):
    path = tmp_path / "XX_electricity_prices_2023.csv"
    rows = ["Datetime,Price (EUR/MWh)"] + [
        f"{datetime(2023, 1, 1) + timedelta(hours=h):%Y-%m-%d %H:%M:%S},100" for h in range(8760)
    ]
    path.write_text("\n".join(rows) + "\n")
    s = load_csv_signal(path, "price", 2023)
    assert s.unit == "USD/MWh" and s.values[0] == pytest.approx(107.764)
    assert any("EUR->USD" in n for n in s.report["notes"])


def test_other_headers_list_the_accepted_layouts(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("when,cost\n2023-01-01 00:00:00,3\n")
    with pytest.raises(InputError) as exc:
        load_csv_signal(bad, "price", 2023)
    msg = str(exc.value)
    assert msg.startswith(f"{bad}:1: header not recognised (when, cost)") and "\n" not in msg
    for layout in ("time, price_usd_per_mwh", "GreenDCC standardized", "GreenDCC processed"):
        assert layout in msg
    with pytest.raises(InputError, match=r"a carbon file \(electricitymaps layout\), not a price file"):
        load_csv_signal(EM_HOURLY, "price", 2023)
    with pytest.raises(InputError, match=r"a price file .*Electricity Maps hourly"):
        load_csv_signal(STANDARDIZED, "carbon", 2023)


def test_bad_rows_name_file_line_and_field(tmp_path):
    bad = tmp_path / "p.csv"
    lines = STANDARDIZED.read_text().splitlines()
    lines[2] = "2023-01-01 01:00:00+00:00,2023-01-01 05:00:00+01:00,41.5"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"p.csv:3: field 'Datetime \(Local\)': .* is not the instant of"):
        load_csv_signal(bad, "price", 2023, fill="hold")
    lines = EM_HOURLY.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3].replace("199.5", "n/a")
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(
        InputError, match=r"p.csv:4: field 'Carbon Intensity gCO₂eq/kWh \(direct\)': not a finite"
    ):
        load_csv_signal(bad, "carbon", 2023, fill="hold")


def test_a_file_of_another_year_says_which_years_it_covers():
    with pytest.raises(
        WattschedError, match=r"no price data in the year 2024 \(UTC\): the file covers 2023-01-01"
    ):
        load_csv_signal(STANDARDIZED, "price", 2024, fill="hold")


def _tiny_inputs(tmp_path: Path) -> dict[str, Path]:
    """Twelve training jobs on 2 nodes of 4 V100, and a Gavel throughput file with the services' models."""
    jobs = ["job_id,submit_time,duration,num_gpu"] + [f"j{i},{i * 1800},7200,{1 + i % 4}" for i in range(12)]
    (tmp_path / "jobs.csv").write_text("\n".join(jobs) + "\n")
    (tmp_path / "c.yaml").write_text(
        "name: small\nnode_groups:\n  - count: 2\n    gpus: 4\n    gpu_model: V100\n    cpu_milli: 32000\n"
        "    memory_mib: 262144\n"
    )
    models = ["ResNet-50 (batch size 128)", "Transformer (batch size 128)", "LM (batch size 80)",
              "ResNet-18 (batch size 256)"]  # fmt: skip
    gavel = tmp_path / "data" / "gavel-traces"
    gavel.mkdir(parents=True)
    (gavel / "simulation_throughputs.json").write_text(
        json.dumps({"v100": {f"('{m}', 1)": {"null": 1.0e4} for m in models}})
    )
    return {"jobs": tmp_path / "jobs.csv", "cluster": tmp_path / "c.yaml", "data": tmp_path / "data"}


def test_cedla_experiment_on_greendcc_prices_and_electricity_maps_carbon(tmp_path):
    """`experiment cedla --price-csv <GreenDCC prices of a region not shipped> --carbon-csv <Electricity Maps>`."""
    inputs = _tiny_inputs(tmp_path)
    price = standardized_year(tmp_path / "XX-NOWHERE_electricity_prices_2023.csv")
    carbon = em_year(tmp_path / "XX-NOWHERE_2023_hourly.csv")
    out = tmp_path / "out"
    res = runner.invoke(app, [
        "experiment", "cedla", "--price-csv", price, "--carbon-csv", carbon, "--workload", inputs["jobs"],
        "--cluster", inputs["cluster"], "--data-dir", inputs["data"], "--policies",
        "price-unaware-always-on,cedla", "--workers", "1", "--out", out, "--quiet",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    df = pd.read_csv(out / "results.csv")
    assert set(df["region"]) == {"own:XX-NOWHERE_electricity_prices_2023.csv"} and len(df) == 2
    assert (df["cost_usd"] > 0).all() and (df["co2_kg"] > 0).all()


def test_simulate_with_an_unrecognised_price_csv_is_one_line(tmp_path):
    bad = tmp_path / "prices.csv"
    bad.write_text("hour,eur\n0,1\n")
    res = runner.invoke(app, ["simulate", "--price-csv", str(bad), "--jobs", "5", "--quiet"])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}:1: header not recognised"), res.output


def test_the_shipped_caiso_standardized_file_agrees_with_the_processed_one():
    require_real_file("electricity-prices-greendcc", "standardized/US-CAL-CISO_electricity_prices_2023.csv")
    root = require_real_file(
        "electricity-prices-greendcc", "processed/US-CAL-CISO_electricity_prices_2023.csv"
    )
    std = root.parents[1] / "standardized" / root.name
    tz = "America/Los_Angeles"
    a = load_csv_signal(std, "price", 2023, tz, fill="hold")
    b = load_csv_signal(root, "price", 2023, tz)
    assert abs(a.values.mean() - b.values.mean()) < 1.0
    assert 10 <= int(daily_profile(a, "local").argmin()) <= 15  # solar-midday trough, as the processed series
