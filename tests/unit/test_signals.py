"""Electricity price / carbon-intensity signals: loading, clean-up, alignment, exact integrals, CLI.

Hand-written CSVs in ``tests/fixtures/signals`` cover the file formats and edge cases; full-year files are
synthesised in ``tmp_path`` (made-up values, real column layout); ``realdata`` tests read ``WATTSCHED_DATA``.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.conftest import real_data_dir, require_real_file
from wattsched.cli.signals import signals_app
from wattsched.core.errors import InputError, UnknownNameError, WattschedError
from wattsched.energy.signals import catalog, clean
from wattsched.energy.signals.alignment import align
from wattsched.energy.signals.clean import GridSignal, clean_hourly, daily_profile, read_series

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "signals"
LA, BERLIN = "America/Los_Angeles", "Europe/Berlin"
CI_HEADER = (
    "Datetime (UTC),Country,Zone Name,Zone Id,Carbon Intensity gCO₂eq/kWh (direct),"
    "Carbon Intensity gCO₂eq/kWh (LCA),Low Carbon Percentage,Renewable Percentage,Data Source,"
    "Data Estimated,Data Estimation Method"
)


@pytest.fixture(autouse=True)
def _no_download_cache(tmp_path_factory, monkeypatch):
    # Keep a developer's ~/.cache/wattsched out of the lookup, so fixture data dirs are the only source.
    monkeypatch.setenv("WATTSCHED_CACHE", str(tmp_path_factory.mktemp("empty-cache")))


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- synthetic full-year files (made-up values, real layouts) ---------------------------------------


def local_noon_trough(times_utc: pd.DatetimeIndex, tz: str) -> np.ndarray:
    """50 + 30·cos(2π·local_hour/24): highest at local midnight, lowest at local noon."""
    hour = np.asarray(times_utc.tz_convert(tz).hour)
    return 50.0 + 30.0 * np.cos(2 * np.pi * hour / 24)


def write_us_price(root: Path, region: str, year: int, drop_hours=(), duplicate_hours=()) -> Path:
    """CAISO-style processed file: naive UTC, local year plus the previous local day."""
    tz = catalog.REGION_TZ[region]
    start = pd.Timestamp(datetime(year, 1, 1), tz=tz) - pd.Timedelta(days=1)
    end = pd.Timestamp(datetime(year + 1, 1, 1), tz=tz)
    times = pd.date_range(start.tz_convert("UTC"), end.tz_convert("UTC"), freq="h", inclusive="left")
    values = local_noon_trough(times, tz)
    rows = []
    for t, v in zip(times, values, strict=True):
        naive = t.tz_localize(None)
        if naive in drop_hours:
            continue
        rows.append(f"{naive:%Y-%m-%d %H:%M:%S},{v:.4f}")
        if naive in duplicate_hours:
            rows.append(f"{naive:%Y-%m-%d %H:%M:%S},{v + 10:.4f}")
    path = root / catalog.PRICE_DATASET / catalog.price_relpath(region, year)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("Datetime,Price (USD/MWh)\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def write_de_lu_price(root: Path, year: int) -> Path:
    """DE-LU-style processed file with correct DST: naive Berlin wall clock, fall-back 02:00 twice."""
    local = pd.date_range(
        pd.Timestamp(datetime(year, 1, 1), tz=BERLIN),
        pd.Timestamp(datetime(year + 1, 1, 1), tz=BERLIN),
        freq="h",
        inclusive="left",
    )
    values = np.arange(len(local), dtype=float) % 97
    rows = [f"{t.tz_localize(None):%Y-%m-%d %H:%M:%S},{v:.2f}" for t, v in zip(local, values, strict=True)]
    path = root / catalog.PRICE_DATASET / catalog.price_relpath("DE-LU", year)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("Datetime,Price (EUR/MWh)\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def write_carbon(root: Path, region: str, year: int) -> Path:
    """Electricity-Maps-style file: UTC calendar year, complete; CI lowest at local noon."""
    times = pd.date_range(utc(year, 1, 1), utc(year + 1, 1, 1), freq="h", inclusive="left")
    direct = 200.0 + 80.0 * np.cos(
        2 * np.pi * np.asarray(times.tz_convert(catalog.REGION_TZ[region]).hour) / 24
    )
    rows = [
        f"{t:%Y-%m-%d %H:%M:%S},X,X,X,{d:.2f},{d * 1.3:.2f},50,40,example.org,false,"
        for t, d in zip(times, direct, strict=True)
    ]
    path = root / catalog.CARBON_DATASET / catalog.carbon_relpath(region, year)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CI_HEADER + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def constant_signal(value: float, kind: str = "price", year: int = 2023, tz: str = LA) -> GridSignal:
    start, end = clean.year_window(year, tz)
    n = int((end - start).total_seconds() // 3600)
    unit = "USD/MWh" if kind == "price" else catalog.CARBON_UNIT
    name = "price" if kind == "price" else "carbon_direct"
    return GridSignal(name, kind, unit, "US-CAL-CISO", year, tz, start, np.full(n, float(value)))


def random_signal(seed: int, year: int = 2023, tz: str = LA) -> GridSignal:
    start, end = clean.year_window(year, tz)
    n = int((end - start).total_seconds() // 3600)
    values = np.random.default_rng(seed).uniform(-20, 300, n)
    return GridSignal("price", "price", "USD/MWh", "US-CAL-CISO", year, tz, start, values)


# --- reading and clean-up (hand-written fixtures) -----------------------------------------------------


def test_short_gap_is_interpolated_and_reported():
    raw = read_series(FIX / "us_price_short_gap.csv", kind="price", tz=LA)
    values, report = clean_hourly(raw, (utc(2023, 6, 1), utc(2023, 6, 1, 9)), tz=LA)
    # 02:00 = 14, 06:00 = 30: three missing hours on the straight line between them.
    np.testing.assert_allclose(values, [10, 12, 14, 18, 22, 26, 30, 31.5, -4.25])
    assert report["interpolated_hours"] == 3
    assert report["gaps"] == [
        {
            "first_missing_utc": "2023-06-01T03:00:00+00:00",
            "hours": 3,
            "where": "inside",
            "method": "interpolate",
            "long": False,
        }
    ]
    assert report["rows_read"] == 6 and report["filled_hours"] == 0


def test_gap_longer_than_limit_names_file_and_range():
    raw = read_series(FIX / "us_price_long_gap.csv", kind="price", tz=LA)
    with pytest.raises(WattschedError) as err:
        clean_hourly(raw, (utc(2023, 6, 1), utc(2023, 6, 1, 11)), tz=LA, label="the test window")
    msg = str(err.value)
    assert "us_price_long_gap.csv" in msg
    assert "2023-06-01 02:00 UTC" in msg and "2023-06-01 08:00 UTC" in msg and "(7 h" in msg
    assert "fill=" in msg


@pytest.mark.parametrize(
    ("fill", "expected"), [("hold", [12.0] * 7), ("interpolate", list(12 + 2.25 * np.arange(1, 8)))]
)
def test_long_gap_filled_only_when_asked(fill, expected):
    raw = read_series(FIX / "us_price_long_gap.csv", kind="price", tz=LA)
    values, report = clean_hourly(raw, (utc(2023, 6, 1), utc(2023, 6, 1, 11)), tz=LA, fill=fill)
    np.testing.assert_allclose(values[2:9], expected)
    assert report["filled_hours"] == 7 and report["interpolated_hours"] == 0
    assert report["gaps"][0]["long"] is True and report["gaps"][0]["method"] == fill


def test_raising_max_gap_hours_interpolates_the_same_gap():
    raw = read_series(FIX / "us_price_long_gap.csv", kind="price", tz=LA)
    _, report = clean_hourly(raw, (utc(2023, 6, 1), utc(2023, 6, 1, 11)), tz=LA, max_gap_hours=7)
    assert report["interpolated_hours"] == 7 and report["filled_hours"] == 0


def test_duplicate_hour_is_averaged_and_counted():
    raw = read_series(FIX / "us_price_duplicate.csv", kind="price", tz=LA)
    values, report = clean_hourly(raw, (utc(2023, 6, 1), utc(2023, 6, 1, 4)), tz=LA)
    np.testing.assert_allclose(values, [20, 40, 25, 26])
    assert report["duplicates_merged"] == 1 and report["duplicate_hours"] == 1


def test_malformed_value_names_file_line_and_field():
    with pytest.raises(InputError) as err:
        read_series(FIX / "us_price_bad_value.csv", kind="price", tz=LA)
    assert err.value.line == 5 and err.value.field == "Price (USD/MWh)"
    assert err.value.path.endswith("us_price_bad_value.csv") and "'n/a'" in err.value.message


def test_malformed_timestamp_names_line():
    with pytest.raises(InputError) as err:
        read_series(FIX / "us_price_bad_time.csv", kind="price", tz=LA)
    assert err.value.line == 4 and err.value.field == "Datetime"


def test_missing_column_is_an_input_error(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("Time,Price (USD/MWh)\n2023-01-01 00:00:00,1\n")
    with pytest.raises(InputError, match="missing column") as err:
        read_series(bad, kind="price", tz=LA)
    assert err.value.line == 1


def test_de_lu_spring_forward_drops_nonexistent_hour():
    raw = read_series(FIX / "de_lu_spring_forward.csv", kind="price", tz=BERLIN, local_time=True)
    assert raw.nonexistent_dropped == 1 and raw.unit == "EUR/MWh"
    # Local 00:00 CET = 23:00 UTC the day before; 03:00 CEST = 01:00 UTC follows 01:00 CET = 00:00 UTC.
    window = (utc(2023, 3, 25, 23), utc(2023, 3, 26, 4))
    values, report = clean_hourly(raw, window, tz=BERLIN)
    np.testing.assert_allclose(values, [80, 70, 65, 60, 55])
    assert report["nonexistent_dropped"] == 1 and report["gaps"] == []


def test_de_lu_fall_back_twice_gives_summer_then_winter_hour():
    raw = read_series(FIX / "de_lu_fall_back_twice.csv", kind="price", tz=BERLIN, local_time=True)
    assert raw.ambiguous_rows == 2 and raw.ambiguous_single == 0
    # 00:00 CEST = 22:00 UTC; 02:00 CEST = 00:00 UTC (42), 02:00 CET = 01:00 UTC (43), 04:00 CET = 03:00 UTC.
    values, report = clean_hourly(raw, (utc(2021, 10, 30, 22), utc(2021, 10, 31, 4)), tz=BERLIN)
    np.testing.assert_allclose(values, [40, 41, 42, 43, 44, 45])
    assert report["duplicates_merged"] == 0 and report["interpolated_hours"] == 0


def test_de_lu_fall_back_once_is_summer_hour_and_winter_hour_interpolated():
    raw = read_series(FIX / "de_lu_fall_back_once.csv", kind="price", tz=BERLIN, local_time=True)
    assert raw.ambiguous_single == 1
    values, report = clean_hourly(raw, (utc(2022, 10, 29, 22), utc(2022, 10, 30, 4)), tz=BERLIN)
    # 02:00 CEST (00:00 UTC) = 80, 02:00 CET (01:00 UTC) missing -> halfway to 03:00 CET = 60.
    np.testing.assert_allclose(values, [100, 90, 80, 70, 60, 50])
    assert report["interpolated_hours"] == 1 and report["ambiguous_single"] == 1


def test_carbon_columns_direct_and_lca():
    direct = read_series(FIX / "carbon_small.csv", kind="carbon", tz="UTC", carbon="direct")
    lca = read_series(FIX / "carbon_small.csv", kind="carbon", tz="UTC", carbon="lca")
    np.testing.assert_allclose(direct.values, [200.5, 190, 180, 170])
    np.testing.assert_allclose(lca.values, [250, 240, 231, 222])
    assert direct.unit == catalog.CARBON_UNIT
    with pytest.raises(UnknownNameError, match="direct, lca"):
        read_series(FIX / "carbon_small.csv", kind="carbon", tz="UTC", carbon="total")


# --- catalogue errors -------------------------------------------------------------------------------


def test_unknown_region_lists_valid_regions():
    with pytest.raises(UnknownNameError) as err:
        clean.load_price("US-TEX-ERCO", 2023)
    assert err.value.valid == ["DE-LU", "US-CAL-CISO", "US-MIDA-PJM", "US-NY-NYIS"]
    with pytest.raises(UnknownNameError) as err:
        clean.load_price("GB", 2023)  # GB has carbon intensity only
    assert "GB" not in err.value.valid
    with pytest.raises(UnknownNameError) as err:
        clean.load_carbon("XX", 2023)
    assert "GB" in err.value.valid


def test_unknown_year_lists_valid_years_for_region():
    with pytest.raises(UnknownNameError) as err:
        clean.load_carbon("US-CAL-CISO", 2020)
    assert err.value.valid == ["2021", "2022", "2023", "2024"]
    assert "US-CAL-CISO carbon year" in str(err.value)
    with pytest.raises(UnknownNameError) as err:
        clean.load_price("DE-LU", 2019)
    assert err.value.valid == ["2020", "2021", "2022", "2023", "2024"]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(WattschedError, match=r"US-CAL-CISO_electricity_prices_2023\.csv"):
        clean.load_price("US-CAL-CISO", 2023, data_dir=tmp_path)


# --- full-year loaders (synthetic files) ------------------------------------------------------------


def test_load_price_window_is_local_calendar_year(tmp_path):
    write_us_price(tmp_path, "US-CAL-CISO", 2023)
    s = clean.load_price("US-CAL-CISO", 2023, data_dir=tmp_path)
    assert s.start_utc == utc(2023, 1, 1, 8) and s.end_utc == utc(2024, 1, 1, 8)
    assert s.hours == 8760 and s.unit == "USD/MWh" and s.tz == LA
    assert s.report["rows_read"] == 8784 and s.report["rows_outside_window"] == 24
    assert s.start_utc.astimezone(ZoneInfo(LA)).hour == 0
    assert int(np.argmin(daily_profile(s, "local"))) == 12
    assert "CAISO" in s.attribution


def test_load_price_gap_and_duplicate_reported(tmp_path):
    gap = [pd.Timestamp(2023, 5, 1, h) for h in (10, 11, 12)]
    dup = [pd.Timestamp(2023, 7, 4, 9)]
    write_us_price(tmp_path, "US-CAL-CISO", 2023, drop_hours=gap, duplicate_hours=dup)
    s = clean.load_price("US-CAL-CISO", 2023, data_dir=tmp_path)
    assert s.report["interpolated_hours"] == 3 and s.report["duplicates_merged"] == 1
    assert np.all(np.isfinite(s.values)) and s.hours == 8760
    i = int((utc(2023, 7, 4, 9) - s.start_utc).total_seconds() // 3600)
    expected = local_noon_trough(pd.DatetimeIndex([utc(2023, 7, 4, 9)]), LA)[0] + 5  # mean of v and v + 10
    assert s.values[i] == pytest.approx(expected, abs=1e-3)


def test_load_price_long_gap_error_names_file_and_local_range(tmp_path):
    gap = [pd.Timestamp(2023, 5, 1, 0) + pd.Timedelta(hours=h) for h in range(10)]
    path = write_us_price(tmp_path, "US-CAL-CISO", 2023, drop_hours=gap)
    with pytest.raises(WattschedError) as err:
        clean.load_price("US-CAL-CISO", 2023, data_dir=tmp_path)
    msg = str(err.value)
    assert str(path) in msg and "2023-05-01 00:00 UTC" in msg and "2023-05-01 09:00 UTC" in msg
    assert "2023-04-30 17:00 America/Los_Angeles" in msg
    filled = clean.load_price("US-CAL-CISO", 2023, data_dir=tmp_path, fill="interpolate")
    assert filled.report["filled_hours"] == 10


def test_load_de_lu_price_keeps_euro_and_resolves_dst(tmp_path):
    write_de_lu_price(tmp_path, 2023)
    s = clean.load_price("DE-LU", 2023, data_dir=tmp_path)
    assert s.unit == "EUR/MWh" and s.start_utc == utc(2022, 12, 31, 23) and s.hours == 8760
    assert s.report["ambiguous_rows"] == 2 and s.report["nonexistent_dropped"] == 0
    assert s.report["gaps"] == [] and s.report["duplicates_merged"] == 0
    # Hour i of the file is value i % 97 and the file lists every real hour once, in order.
    np.testing.assert_allclose(s.values, np.arange(8760) % 97)
    usd = clean.load_price("DE-LU", 2023, data_dir=tmp_path, to_usd=True)
    assert usd.unit == "USD/MWh" and "1.07764" in usd.report["converted"]
    np.testing.assert_allclose(usd.values, s.values * catalog.EUR_TO_USD)


def test_load_carbon_borrows_window_edge_from_next_year(tmp_path):
    write_carbon(tmp_path, "US-CAL-CISO", 2023)
    # The CI file is the UTC year; the local year runs 8 h into 2024 UTC: an 8 h edge gap (> 6 h) without 2024.
    with pytest.raises(WattschedError, match="at the end of the window"):
        clean.load_carbon("US-CAL-CISO", 2023, data_dir=tmp_path)
    held = clean.load_carbon("US-CAL-CISO", 2023, data_dir=tmp_path, fill="hold")
    assert held.report["filled_hours"] == 8 and held.values[-1] == held.values[-9]
    write_carbon(tmp_path, "US-CAL-CISO", 2024)
    s = clean.load_carbon("US-CAL-CISO", 2023, data_dir=tmp_path)
    assert [b["hours"] for b in s.report["borrowed"]] == [8] and s.report["filled_hours"] == 0
    assert s.report["rows_outside_window"] == 8 and s.hours == 8760 and s.unit == catalog.CARBON_UNIT
    assert "Electricity Maps" in s.attribution
    lca = clean.load_carbon("US-CAL-CISO", 2023, data_dir=tmp_path, kind="lca")
    np.testing.assert_allclose(lca.values, s.values * 1.3, atol=0.01)


def test_standardized_style_shift_would_fail_the_midday_check(tmp_path):
    # The standardized/ bug localises naive-UTC times as local: every instant becomes 8 h (7 h in DST) late.
    path = write_us_price(tmp_path, "US-CAL-CISO", 2023)
    raw = read_series(path, kind="price", tz=LA)
    window = clean.year_window(2023, LA)
    good, _ = clean_hourly(raw, window, tz=LA)
    shifted_hours = pd.DatetimeIndex(raw.hours.astype("datetime64[h]")).tz_localize(
        LA, ambiguous="NaT", nonexistent="NaT"
    )
    keep = ~shifted_hours.isna()
    raw.hours = np.asarray(shifted_hours[keep].tz_convert(None).to_numpy().astype("datetime64[h]"), np.int64)
    raw.values = raw.values[keep]
    bad, _ = clean_hourly(raw, window, tz=LA, fill="interpolate")
    start = window[0]
    ok = daily_profile(GridSignal("price", "price", "USD/MWh", "US-CAL-CISO", 2023, LA, start, good))
    wrong = daily_profile(GridSignal("price", "price", "USD/MWh", "US-CAL-CISO", 2023, LA, start, bad))
    assert 10 <= int(np.argmin(ok)) <= 15
    assert not 10 <= int(np.argmin(wrong)) <= 15


# --- alignment ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trace_start", "year", "tz", "expected_local"),
    [
        # Philly-like start, Tuesday 14:30 UTC -> first Tuesday of 2023 (3 Jan) 14:30 Pacific.
        (utc(2017, 10, 3, 14, 30), 2023, LA, datetime(2023, 1, 3, 14, 30)),
        # Sunday 23:00 UTC; 1 Jan 2023 is a Sunday, so the anchor is on day one.
        (utc(2018, 4, 22, 23), 2023, BERLIN, datetime(2023, 1, 1, 23)),
        # Saturday 00:00 UTC -> 6 Jan 2024 (1 Jan 2024 is a Monday).
        (utc(2020, 5, 2, 0), 2024, "Europe/London", datetime(2024, 1, 6, 0)),
        # No calendar: Monday 00:00 local -> 2 Jan 2023.
        (None, 2023, LA, datetime(2023, 1, 2, 0)),
    ],
)
def test_weekday_hour_anchor(trace_start, year, tz, expected_local):
    s = constant_signal(1.0, year=year, tz=tz)
    a = align(s, trace_start)
    local = a.anchor_utc.astimezone(ZoneInfo(tz))
    assert local.replace(tzinfo=None) == expected_local
    if trace_start is not None:
        assert (local.weekday(), local.hour, local.minute) == (
            trace_start.weekday(),
            trace_start.hour,
            trace_start.minute,
        )
    d = a.describe()
    assert d["anchor_local"] == local.isoformat() and d["rule"] == "weekday_hour"
    assert d["anchor_utc"].endswith("+00:00")


def test_trace_timezone_is_applied_before_matching():
    s = constant_signal(1.0)
    # 2017-10-03 02:00 UTC is Monday 22:00 in New York.
    a = align(s, utc(2017, 10, 3, 2), trace_tz="America/New_York")
    local = a.anchor_utc.astimezone(ZoneInfo(LA))
    assert (local.weekday(), local.hour) == (0, 22)


def test_offset_rule_and_errors():
    s = random_signal(1)
    a = align(s, None, rule="offset", grid_start=utc(2023, 6, 1, 12, 30))
    i = int((utc(2023, 6, 1, 12) - s.start_utc).total_seconds() // 3600)
    assert a.value_at(np.array([0.0, 1799.0, 1800.0]))[0] == s.values[i]
    assert a.value_at(np.array([1800.0]))[0] == s.values[i + 1]  # the next hour starts at 13:00
    with pytest.raises(WattschedError, match="needs grid_start"):
        align(s, None, rule="offset")
    with pytest.raises(WattschedError, match="outside"):
        align(s, None, rule="offset", grid_start=utc(2022, 6, 1))
    with pytest.raises(UnknownNameError, match="weekday_hour"):
        align(s, None, rule="nearest")
    with pytest.raises(UnknownNameError, match="cycle_year"):
        align(s, None, wrap="clamp")


def test_value_at_is_an_hourly_step():
    s = random_signal(2)
    a = align(s, utc(2017, 1, 2, 0))  # Monday 00:00 -> 2 Jan 2023 00:00 local = hour 24 of the series
    tau = np.array([0, 1, 3599.999, 3600, 7199, 7200])
    np.testing.assert_array_equal(a.value_at(tau), s.values[[24, 24, 24, 25, 25, 26]])


def test_cycle_year_continues_at_same_weekday_and_hour():
    s = random_signal(3)
    a = align(s, None)  # anchor Monday 2 Jan 2023 00:00 local
    # The year ends at Monday 1 Jan 2024 00:00 local; the first Monday 00:00 of 2023 is 2 Jan.
    assert a.wrap_to_utc == utc(2023, 1, 2, 8)
    assert a.period_s == 364 * 86400
    span = a.span_s
    assert span == (utc(2024, 1, 1, 8) - utc(2023, 1, 2, 8)).total_seconds()
    tau = span + np.array([0, 3600, 5 * 3600 + 10, a.period_s + 7200])
    w = 24  # hour index of the wrap target
    np.testing.assert_array_equal(a.value_at(tau), s.values[[w, w + 1, w + 5, w + 2]])
    # The instant just past the year end (Monday 00:00 local) maps to a Monday 00:00 local of 2023.
    wrapped = a.grid_time_utc(tau).tz_convert(LA)
    assert [(t.weekday(), t.hour) for t in wrapped] == [(0, 0), (0, 1), (0, 5), (0, 2)]
    d = a.describe()
    assert d["wrap_to_local"].startswith("2023-01-02T00:00:00-08:00") and d["wrap"] == "cycle_year"


def test_error_wrap_names_trace_length_and_span():
    s = random_signal(4)
    a = align(s, None, wrap="error")
    assert a.integral(0.0, a.span_s) == pytest.approx(np.sum(s.values[24:]) * 3600)
    with pytest.raises(WattschedError) as err:
        a.value_at(np.array([0.0, a.span_s + 1]))
    msg = str(err.value)
    assert "runs past the end" in msg and "2023-01-01 08:00 .. 2024-01-01 08:00 UTC" in msg
    assert f"{a.span_s + 1:.0f} s" in msg
    with pytest.raises(WattschedError, match="runs past the end"):
        align(s, None, wrap="error", trace_length_s=400 * 86400)
    with pytest.raises(ValueError, match=">= 0"):
        a.value_at(np.array([-1.0]))


def _brute_integral(s: GridSignal, a, t0: float, t1: float) -> float:
    """Walk [t0, t1] piece by piece, splitting at grid hour boundaries and at the wrap point."""
    start = (a.anchor_utc - s.start_utc).total_seconds()
    end = s.hours * 3600.0
    w = (a.wrap_to_utc - s.start_utc).total_seconds()

    def grid(t: float) -> float:
        g = start + t
        return g if g < end else w + math.fmod(g - end, end - w)

    total, t = 0.0, t0
    while t < t1:
        g = grid(t)
        hour = int(g // 3600)
        step = min((hour + 1) * 3600.0 - g, t1 - t)
        total += s.values[hour] * step
        t += step
    return total


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 3),
    anchor_minute=st.integers(0, 59),
    t0=st.floats(0, 900 * 86400, allow_nan=False),
    length=st.floats(0, 3 * 86400, allow_nan=False),
)
def test_integral_matches_brute_force(seed, anchor_minute, t0, length):
    s = random_signal(seed)
    a = align(s, utc(2019, 3, 5, 7, anchor_minute, 13))
    t1 = t0 + length
    expected = _brute_integral(s, a, t0, t1)
    got = float(a.integral(t0, t1))
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-3)


def test_integral_is_vectorised():
    s = random_signal(5)
    a = align(s, None)
    # Inside the first year, across the first wrap, across the second wrap, and two full cycles later.
    second_wrap = a.span_s + a.period_s
    far = a.span_s + 2 * a.period_s + 5000.0
    t0 = np.array([0.0, 100.0, a.span_s - 7000.0, second_wrap - 5000.0, far])
    t1 = np.array([3600.0, 9000.0, a.span_s + 9000.0, second_wrap + 5000.0, far + 86400.0])
    got = a.integral(t0, t1)
    assert got.shape == (5,)
    for i in range(5):
        assert got[i] == pytest.approx(_brute_integral(s, a, t0[i], t1[i]), rel=1e-9)


def test_constant_price_cost_is_price_times_energy():
    a = align(constant_signal(50.0), None)
    power = np.array([1000.0, 250.0, 0.0])
    t0 = np.array([0.0, 1234.5, 10.0])
    t1 = np.array([7200.0, 1234.5 + 86400 * 3, 20.0])
    energy_mwh = power * (t1 - t0) / 3.6e9
    np.testing.assert_allclose(a.cost_usd(power, t0, t1), 50.0 * energy_mwh, rtol=1e-12)
    assert a.cost_usd(1000.0, 0.0, 3600.0) == pytest.approx(0.05, rel=1e-12)  # 1 kWh at 50 USD/MWh


def test_constant_carbon_co2_is_ci_times_energy():
    a = align(constant_signal(400.0, kind="carbon"), None)
    # 2 kW for 1.5 h = 3 kWh at 400 g/kWh = 1.2 kg.
    assert a.co2_kg(2000.0, 100.0, 100.0 + 5400.0) == pytest.approx(1.2, rel=1e-12)
    with pytest.raises(WattschedError, match="price signal"):
        a.cost_usd(1.0, 0.0, 1.0)


def test_cost_needs_usd(tmp_path):
    eur = GridSignal("price", "price", "EUR/MWh", "DE-LU", 2023, BERLIN, utc(2022, 12, 31, 23), np.ones(8760))
    with pytest.raises(WattschedError, match="EUR/MWh"):
        align(eur, None).cost_usd(1.0, 0.0, 10.0)
    usd = align(eur.to_usd(), None)
    assert usd.cost_usd(1e6, 0.0, 3600.0) == pytest.approx(catalog.EUR_TO_USD)
    with pytest.raises(WattschedError, match="carbon-intensity"):
        usd.co2_kg(1.0, 0.0, 1.0)


def test_describe_records_assumptions_and_attribution(tmp_path):
    write_carbon(tmp_path, "US-CAL-CISO", 2023)
    write_carbon(tmp_path, "US-CAL-CISO", 2024)
    d = align(clean.load_carbon("US-CAL-CISO", 2023, data_dir=tmp_path), None).describe()
    assert "Monday 00:00 local" in d["trace_start_assumption"]
    assert "Electricity Maps" in d["attribution"] and d["report"]["borrowed"][0]["hours"] == 8
    assert d["anchor_local"] == "2023-01-02T00:00:00-08:00" and d["anchor_utc"] == "2023-01-02T08:00:00+00:00"


# --- CLI ------------------------------------------------------------------------------------------


def test_cli_show_prints_tables_and_writes_png(tmp_path):
    data = tmp_path / "data"
    write_us_price(data, "US-CAL-CISO", 2023)
    write_carbon(data, "US-CAL-CISO", 2023)
    write_carbon(data, "US-CAL-CISO", 2024)
    out = tmp_path / "plots" / "s.png"
    result = CliRunner().invoke(
        signals_app,
        ["show", "--region", "US-CAL-CISO", "--year", "2023", "--data-dir", str(data), "--out", str(out)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = result.output
    assert "USD/MWh" in text and "gCO2eq/kWh" in text and "12:00" in text
    assert sum(f"{h:02d}:00 │" in text for h in range(24)) == 24
    assert "borrowed" in text and "Electricity Maps" in text


def test_cli_show_error_is_one_line_exit_2(tmp_path):
    result = CliRunner().invoke(signals_app, ["show", "--region", "MARS", "--year", "2023"])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "US-CAL-CISO" in lines[0]
    result = CliRunner().invoke(
        signals_app, ["show", "--region", "US-CAL-CISO", "--year", "2023", "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 2 and "not found" in result.output


def test_cli_list_shows_local_years(tmp_path):
    write_carbon(tmp_path, "GB", 2022)
    result = CliRunner().invoke(signals_app, ["list", "--data-dir", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    gb = next(ln for ln in result.output.splitlines() if " GB " in ln)
    assert "2022" in gb and "2023" not in gb


# --- real data ------------------------------------------------------------------------------------


@pytest.mark.realdata
def test_real_caiso_2023_price_trough_at_local_midday_and_mean():
    require_real_file(catalog.PRICE_DATASET, catalog.price_relpath("US-CAL-CISO", 2023))
    s = clean.load_price("US-CAL-CISO", 2023, data_dir=real_data_dir())
    assert s.hours == 8760 and s.report["gaps"] == []
    assert 10 <= int(np.argmin(daily_profile(s, "local"))) <= 15
    assert s.values.mean() == pytest.approx(62, abs=2)  # datasets.md §1.9


@pytest.mark.realdata
def test_real_caiso_2023_carbon_minimum_near_20_utc():
    require_real_file(catalog.CARBON_DATASET, catalog.carbon_relpath("US-CAL-CISO", 2023))
    s = clean.load_carbon("US-CAL-CISO", 2023, data_dir=real_data_dir())
    assert 19 <= int(np.argmin(daily_profile(s, "utc"))) <= 21
    assert s.values.mean() == pytest.approx(194, abs=15)


@pytest.mark.realdata
def test_real_de_lu_2023_price_dst_reported():
    require_real_file(catalog.PRICE_DATASET, catalog.price_relpath("DE-LU", 2023))
    s = clean.load_price("DE-LU", 2023, data_dir=real_data_dir())
    assert s.unit == "EUR/MWh" and s.hours == 8760
    assert s.report["nonexistent_dropped"] == 1 and s.report["interpolated_hours"] == 1
    assert s.values.mean() == pytest.approx(95, abs=3)


# --- a user's own market (--price-csv, --carbon-csv) ----------------------------------------------------------
def _market_csv(path, kind: str, hours: int = 24 * 366, skip: tuple[int, ...] = (), zone: str = "-08:00"):
    from datetime import datetime as _dt
    from datetime import timedelta as _td

    column = "price_usd_per_mwh" if kind == "price" else "carbon_g_per_kwh"
    start = _dt(2023, 1, 1)
    rows = [f"time,{column}"]
    for h in range(hours):
        if h in skip:
            continue
        stamp = (start + _td(hours=h)).strftime("%Y-%m-%dT%H:00:00") + zone
        rows.append(f"{stamp},{50 + (h % 24)}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_csv_market_covers_its_local_year_and_fills_short_gaps(tmp_path):
    from wattsched.energy.signals.csv_files import load_csv_signal

    path = _market_csv(tmp_path / "p.csv", "price", skip=(100, 101))
    sig = load_csv_signal(path, "price", 2023, "America/Los_Angeles")
    assert sig.hours == 8760 and sig.unit == "USD/MWh" and sig.region == "csv:p.csv"
    # local midnight is UTC 08:00; the first hour's value is 50 (hour 0 of the local day)
    assert sig.start_utc.hour == 8 and sig.values[0] == 50
    assert sig.report["interpolated_hours"] == 2  # the two missing hours, by the shipped series' gap rule
    assert sig.report["gaps"][0]["first_missing_utc"] == "2023-01-05T12:00:00+00:00"  # hour 100 at -08:00


def test_csv_market_errors_name_file_line_and_column(tmp_path):
    from wattsched.core.errors import InputError
    from wattsched.energy.signals.csv_files import load_csv_signal

    bad = tmp_path / "bad.csv"
    bad.write_text("time,price_usd_per_mwh\n2023-01-01T00:00:00Z,40\n2023-01-01T01:30:00Z,41\n")
    with pytest.raises(InputError, match=r"bad.csv:3: field 'time': timestamp .* is not on the hour"):
        load_csv_signal(bad, "price", 2023)
    bad.write_text("time,price_usd_per_mwh\n2023-01-01T00:00:00Z,abc\n")
    with pytest.raises(InputError, match=r"bad.csv:2: field 'price_usd_per_mwh': not a finite number"):
        load_csv_signal(bad, "price", 2023)
    bad.write_text("when,price\n")
    with pytest.raises(InputError, match=r"bad\.csv:1: header not recognised"):
        load_csv_signal(bad, "price", 2023)


def test_simulate_with_a_price_csv_computes_cost(tmp_path):
    from wattsched.experiments.config import SimulationConfig
    from wattsched.experiments.run import run_simulation

    path = _market_csv(tmp_path / "p.csv", "price", zone="Z")
    cfg = SimulationConfig(workload="synthetic", price_csv=str(path), year=2023, max_jobs=50)
    summary = run_simulation(cfg, None).summary
    assert summary["cost_usd"] is not None and summary["cost_usd"] > 0
    assert summary["co2_kg"] is None  # no carbon CSV and no region


def test_policies_see_the_prices_ahead(tmp_path, monkeypatch):
    """view.price_ahead_usd_per_mwh(h): the next h hourly prices, the first being the price now."""
    from wattsched.experiments.config import SimulationConfig
    from wattsched.experiments.run import run_simulation
    from wattsched.policies.allocation.tiresias import Tiresias

    seen = []
    original = Tiresias.allocate

    def recording(self, view):
        if not seen:
            seen.append((view.now, view.price_usd_per_mwh(), view.price_ahead_usd_per_mwh(30)))
        return original(self, view)

    monkeypatch.setattr(Tiresias, "allocate", recording)
    path = _market_csv(tmp_path / "p.csv", "price", zone="Z")  # price = 50 + UTC hour of day
    cfg = SimulationConfig(
        workload="synthetic", price_csv=str(path), year=2023, max_jobs=20, allocation="tiresias",
        performance="trace",  # trace durations: no throughput tables (a dataset) needed
    )  # fmt: skip
    run_simulation(cfg, None)
    now, price_now, ahead = seen[0]
    assert len(ahead) == 30 and ahead[0] == price_now
    # trace time 0 is Monday 00:00 UTC (no calendar start): hour k of the trace costs 50 + (hour of day)
    hour0 = int(now // 3600)
    assert ahead.tolist() == [50.0 + (hour0 + k) % 24 for k in range(30)]
