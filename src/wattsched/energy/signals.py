"""Hourly electricity price and grid carbon-intensity signals, and their alignment to trace time.

Loading (see docs/signals.md for the full rules):

* prices come from ``electricity-prices-greendcc/processed/`` only: ``standardized/`` shifts the US series by the
  UTC offset and smooths them;
* every timestamp becomes timezone-aware UTC; the series covers the region's *local* calendar year, one value per
  UTC hour, interval-start (the value of hour ``h`` holds for ``[h, h + 1 h)``);
* clean-up is explicit and reported in ``GridSignal.report``: duplicate hours are averaged, non-existent local times
  dropped, gaps of at most ``max_gap_hours`` interpolated; longer gaps are an error unless ``fill`` is given.

Alignment maps trace seconds τ (τ = 0 is the trace's first submission) onto grid time, and integrates the signal
exactly over trace intervals with a cumulative sum.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd

from ..core.errors import InputError, UnknownNameError, WattschedError
from ..data import registry

PRICE_DATASET = "electricity-prices-greendcc"
CARBON_DATASET = "carbon-intensity-greendcc"

REGION_TZ: dict[str, str] = {
    "US-CAL-CISO": "America/Los_Angeles",
    "US-MIDA-PJM": "America/New_York",
    "US-NY-NYIS": "America/New_York",
    "DE-LU": "Europe/Berlin",
    "GB": "Europe/London",
}

# Fixed EUR->USD rate, the one upstream green-dcc used for its standardized files (2025-03-27). Applied only when
# a caller asks for USD (GridSignal.to_usd / load_price(to_usd=True)); the loaded DE-LU series stays in EUR.
EUR_TO_USD = 1.07764

DEFAULT_MAX_GAP_HOURS = 6
HOUR_S = 3600.0

PRICE_ATTRIBUTION = {
    "US-CAL-CISO": "CAISO OASIS day-ahead LMP, hub TH_NP15_GEN-APND",
    "US-MIDA-PJM": "PJM Data Miner 2 real-time hourly LMP, zone DOM",
    "US-NY-NYIS": "NYISO day-ahead hourly LMP, zone CAPITL",
    "DE-LU": "ENTSO-E / EPEX SPOT day-ahead, bidding zone DE-LU",
}
VIA_GREENDCC = "via HewlettPackard/green-dcc (MIT); market data under the operator's terms"
CARBON_ATTRIBUTION = (
    "Carbon intensity: Electricity Maps (electricitymaps.com), via HewlettPackard/green-dcc; "
    "data under Electricity Maps' terms (attribution required)"
)

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
PRICE_TIME_COLUMN = "Datetime"
PRICE_COLUMNS = {"Price (USD/MWh)": "USD/MWh", "Price (EUR/MWh)": "EUR/MWh"}
CARBON_TIME_COLUMN = "Datetime (UTC)"
CARBON_COLUMNS = {
    "direct": "Carbon Intensity gCO₂eq/kWh (direct)",
    "lca": "Carbon Intensity gCO₂eq/kWh (LCA)",
}
CARBON_UNIT = "gCO2eq/kWh"

# Regions whose processed price timestamps are naive local wall-clock time rather than naive UTC.
LOCAL_TIME_PRICE_REGIONS = {"DE-LU"}

Fill = Literal["hold", "interpolate"]
FILL_MODES = ("hold", "interpolate")
ALIGN_RULES = ("weekday_hour", "offset")
WRAP_MODES = ("cycle_year", "error")


# --- catalogue ------------------------------------------------------------------------------------


def price_relpath(region: str, year: int) -> str:
    return f"processed/{region}_electricity_prices_{year}.csv"


def carbon_relpath(region: str, year: int) -> str:
    return f"{region}_{year}_hourly.csv"


def _registered(dataset_name: str, pattern: str) -> dict[str, list[int]]:
    """{region: sorted years} for the files of a dataset whose path matches `pattern` (groups region, year)."""
    out: dict[str, set[int]] = {}
    for f in registry.dataset(dataset_name).files:
        m = re.fullmatch(pattern, f.path)
        if m and m.group(1) in REGION_TZ:
            out.setdefault(m.group(1), set()).add(int(m.group(2)))
    return {r: sorted(ys) for r, ys in sorted(out.items())}


def price_catalog() -> dict[str, list[int]]:
    """Regions and years with a processed price file in the dataset registry."""
    return _registered(PRICE_DATASET, r"processed/(.+)_electricity_prices_(\d{4})\.csv")


def carbon_catalog() -> dict[str, list[int]]:
    """Regions and years with a carbon-intensity file in the dataset registry."""
    return _registered(CARBON_DATASET, r"(.+)_(\d{4})_hourly\.csv")


def check_region_year(kind: str, catalog: dict[str, list[int]], region: str, year: int) -> None:
    if region not in catalog:
        raise UnknownNameError(f"{kind} region", region, catalog)
    if int(year) not in catalog[region]:
        raise UnknownNameError(f"{region} {kind} year", str(year), [str(y) for y in catalog[region]])


def available_locally(data_dir: str | Path | None = None) -> dict[str, dict[str, list[int]]]:
    """{"price": {region: years}, "carbon": {region: years}} for the files present in the data roots."""
    out: dict[str, dict[str, list[int]]] = {"price": {}, "carbon": {}}
    for kind, catalog, dataset_name, relpath in (
        ("price", price_catalog(), PRICE_DATASET, price_relpath),
        ("carbon", carbon_catalog(), CARBON_DATASET, carbon_relpath),
    ):
        for region, years in catalog.items():
            present = [y for y in years if registry.is_available(dataset_name, relpath(region, y), data_dir)]
            if present:
                out[kind][region] = present
    return out


# --- reading --------------------------------------------------------------------------------------


@dataclass
class RawSeries:
    """Rows of one file, timestamps already resolved to UTC hours (int hours since the Unix epoch)."""

    path: str
    hours: np.ndarray  # int64
    values: np.ndarray  # float64
    lines: np.ndarray  # int64, 1-based line numbers in the file
    unit: str
    rows_read: int
    nonexistent_dropped: int = 0
    ambiguous_rows: int = 0
    ambiguous_single: int = 0


def _csv_rows(path: Path) -> tuple[list[str], list[int], list[list[str]]]:
    """(header, 1-based line numbers, rows) of a CSV, blank lines skipped; a file that is not CSV text raises."""
    lines: list[int] = []
    rows: list[list[str]] = []
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader, None)
            if header is None:
                raise InputError(path, 1, None, "empty file (no header)")
            for row in reader:
                if row and any(c.strip() for c in row):
                    lines.append(reader.line_num)
                    rows.append(row)
        except csv.Error as exc:
            raise InputError(path, reader.line_num, None, f"not a CSV file ({exc})") from None
    return [h.strip() for h in header], lines, rows


def _pick_columns(
    path: Path, header: list[str], lines: list[int], rows: list[list[str]], cols: dict[str, str], field: str
) -> dict[str, list[str]]:
    """The stripped cells of the columns `cols` (name -> header column) in every row; a row too short for them
    raises, naming `field`."""
    index = {name: header.index(col) for name, col in cols.items()}
    widest = max(index.values())
    for line, row in zip(lines, rows, strict=True):
        if len(row) <= widest:
            raise InputError(path, line, field, f"row has {len(row)} fields, header has {len(header)}")
    return {name: [row[i].strip() for row in rows] for name, i in index.items()}


def _read_columns(path: Path, time_col: str, value_cols: Sequence[str]) -> tuple[str, list, list, list]:
    """(value column used, line numbers, time strings, value strings) for one CSV; header problems raise."""
    header, lines, rows = _csv_rows(path)
    if time_col not in header:
        raise InputError(path, 1, time_col, f"missing column; header has: {', '.join(header)}")
    value_col = next((c for c in value_cols if c in header), None)
    if value_col is None:
        raise InputError(path, 1, " or ".join(value_cols), f"missing column; header has: {', '.join(header)}")
    picked = _pick_columns(path, header, lines, rows, {"time": time_col, "value": value_col}, value_col)
    return value_col, lines, picked["time"], picked["value"]


def _parse_rows(path: Path, time_col: str, value_col: str, lines: list, times: list, values: list):
    line_arr = np.asarray(lines, dtype=np.int64)
    ts = pd.to_datetime(pd.Series(times, dtype=object), format=TIME_FORMAT, errors="coerce")
    bad = np.flatnonzero(ts.isna().to_numpy())
    if bad.size:
        i = int(bad[0])
        raise InputError(
            path, int(line_arr[i]), time_col, f"bad timestamp {times[i]!r}; expected 'YYYY-MM-DD HH:MM:SS'"
        )
    return ts, _hourly_values(path, line_arr, ts, times, values, time_col, value_col), line_arr


def _hourly_values(
    path: Path, line_arr, ts: pd.Series, times: list, values: list, time_col: str, value_col: str
):
    """The values as floats, after checking every timestamp is on the hour and every value finite."""
    off_hour = np.flatnonzero(((ts.dt.minute != 0) | (ts.dt.second != 0)).to_numpy())
    if off_hour.size:
        i = int(off_hour[0])
        raise InputError(path, int(line_arr[i]), time_col, f"timestamp {times[i]!r} is not on the hour")
    vals = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(vals))
    if bad.size:
        i = int(bad[0])
        what = "empty value" if values[i] == "" else f"not a finite number: {values[i]!r}"
        raise InputError(path, int(line_arr[i]), value_col, what)
    return vals


def _epoch_hours(ts_utc: pd.Series) -> np.ndarray:
    return (ts_utc.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy().astype("datetime64[h]")).astype(
        np.int64
    )


def _naive_utc_hours(ts: pd.Series) -> np.ndarray:
    return ts.to_numpy().astype("datetime64[h]").astype(np.int64)


def read_series(path: str | Path, *, kind: str, tz: str, local_time: bool = False, carbon: str = "direct"):
    """Read one processed price file (``kind="price"``) or carbon file (``kind="carbon"``) into a RawSeries.

    ``local_time=True`` means the price timestamps are naive wall-clock time in ``tz`` (DE-LU): non-existent
    spring-forward times are dropped; an ambiguous fall-back time maps, in file order, to the summer-time hour
    first and the standard-time hour second (a third or later copy counts as a duplicate of the second).
    """
    path = Path(path)
    if kind == "price":
        time_col, value_cols = PRICE_TIME_COLUMN, list(PRICE_COLUMNS)
    elif kind == "carbon":
        if carbon not in CARBON_COLUMNS:
            raise UnknownNameError("carbon intensity kind", carbon, CARBON_COLUMNS)
        time_col, value_cols = CARBON_TIME_COLUMN, [CARBON_COLUMNS[carbon]]
    else:
        raise UnknownNameError("signal kind", kind, ("price", "carbon"))
    value_col, lines, times, values = _read_columns(path, time_col, value_cols)
    unit = PRICE_COLUMNS.get(value_col, CARBON_UNIT)
    ts, vals, line_arr = _parse_rows(path, time_col, value_col, lines, times, values)
    raw = RawSeries(str(path), np.empty(0, np.int64), vals, line_arr, unit, rows_read=len(vals))
    if not local_time:
        raw.hours = _naive_utc_hours(ts)
        return raw
    n = len(ts)
    # Localise twice (summer / standard reading of ambiguous times): they differ only on ambiguous rows, and
    # both give NaT only on non-existent rows.
    as_dst = ts.dt.tz_localize(tz, ambiguous=np.ones(n, dtype=bool), nonexistent="NaT")
    as_std = ts.dt.tz_localize(tz, ambiguous=np.zeros(n, dtype=bool), nonexistent="NaT")
    nonexistent = as_dst.isna().to_numpy()
    ambiguous = (~nonexistent) & (as_dst != as_std).to_numpy()
    occurrence = ts[ambiguous].groupby(ts[ambiguous]).cumcount().to_numpy()
    use_dst = np.zeros(n, dtype=bool)
    use_dst[np.flatnonzero(ambiguous)[occurrence == 0]] = True
    resolved = as_std.where(~pd.Series(use_dst, index=ts.index), as_dst)
    keep = ~nonexistent
    counts = ts[ambiguous].value_counts()
    raw.hours = _epoch_hours(resolved[keep])
    raw.values = vals[keep]
    raw.lines = line_arr[keep]
    raw.nonexistent_dropped = int(nonexistent.sum())
    raw.ambiguous_rows = int(ambiguous.sum())
    raw.ambiguous_single = int((counts == 1).sum())
    return raw


# --- cleaning -------------------------------------------------------------------------------------


def _hours_since_epoch(dt: datetime) -> int:
    return int((dt - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() // 3600)


def _hour_utc(h: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(hours=int(h))


def year_window(year: int, tz: str) -> tuple[datetime, datetime]:
    """[start, end) in UTC of the local calendar year `year` in time zone `tz`."""
    zone = ZoneInfo(tz)
    start = datetime(year, 1, 1, tzinfo=zone).astimezone(UTC)
    end = datetime(year + 1, 1, 1, tzinfo=zone).astimezone(UTC)
    return start, end


def _fmt_hour(h: int, tz: str) -> str:
    utc = _hour_utc(h)
    local = utc.astimezone(ZoneInfo(tz))
    return f"{utc:%Y-%m-%d %H:%M} UTC ({local:%Y-%m-%d %H:%M} {tz})"


def clean_hourly(
    primary: RawSeries,
    window: tuple[datetime, datetime],
    *,
    tz: str,
    max_gap_hours: int = DEFAULT_MAX_GAP_HOURS,
    fill: Fill | None = None,
    before: RawSeries | None = None,
    after: RawSeries | None = None,
    label: str = "",
) -> tuple[np.ndarray, dict[str, Any]]:
    """One value per UTC hour of `window`, and the clean-up report.

    `before` / `after` are the neighbouring years' files: only their rows earlier / later than every row of
    `primary` are used, to cover the window's edges with real data (reported as ``borrowed``).
    """
    if fill is not None and fill not in FILL_MODES:
        raise UnknownNameError("fill mode", str(fill), FILL_MODES)
    if max_gap_hours < 0:
        raise WattschedError(f"max_gap_hours must be >= 0, got {max_gap_hours}")
    w0, w1 = _hours_since_epoch(window[0]), _hours_since_epoch(window[1])
    if primary.hours.size == 0:
        raise WattschedError(f"{primary.path}: no data rows")
    parts_h, parts_v = [primary.hours], [primary.values]
    borrowed = []
    p_lo, p_hi = int(primary.hours.min()), int(primary.hours.max())
    for other, mask_fn in ((before, lambda h: h < p_lo), (after, lambda h: h > p_hi)):
        if other is None or other.hours.size == 0:
            continue
        take = mask_fn(other.hours)
        if take.any():
            parts_h.append(other.hours[take])
            parts_v.append(other.values[take])
            taken = np.unique(other.hours[take])
            in_window = int(((taken >= w0) & (taken < w1)).sum())
            if in_window:
                borrowed.append({"file": other.path, "hours": in_window})
    hours = np.concatenate(parts_h)
    values = np.concatenate(parts_v)
    uniq, inverse, counts = np.unique(hours, return_inverse=True, return_counts=True)
    means = np.bincount(inverse, weights=values) / counts

    lo, hi = min(w0, int(uniq[0])), max(w1, int(uniq[-1]) + 1)
    grid = np.full(hi - lo, np.nan)
    grid[uniq - lo] = means
    missing = np.isnan(grid)
    # Maximal runs of missing hours: [starts[i], ends[i]) in grid indices.
    edges = np.diff(np.concatenate(([0], missing.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    gaps, too_long = [], []
    interpolated = held = filled = 0
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        in_w0, in_w1 = max(s, w0 - lo), min(e, w1 - lo)
        if in_w0 >= in_w1:
            continue  # outside the window: irrelevant
        left, right = s > 0, e < len(grid)
        length = int(e - s)
        if not left and not right:
            raise WattschedError(f"{primary.path}: no data inside the window {label}")
        long_gap = length > max_gap_hours
        where = "start" if not left else ("end" if not right else "inside")
        if long_gap and fill is None:
            too_long.append((lo + s, lo + e, length, where))
            continue
        if left and right and (not long_gap or fill == "interpolate"):
            frac = np.arange(1, length + 1) / (length + 1)
            grid[s:e] = grid[s - 1] + frac * (grid[e] - grid[s - 1])
            method = "interpolate"
        else:
            # Hold: carry the last value forward; at the window start there is none, so carry the first back.
            grid[s:e] = grid[s - 1] if left else grid[e]
            method = "hold"
        n_in = int(in_w1 - in_w0)
        if long_gap:
            filled += n_in
        elif method == "interpolate":
            interpolated += n_in
        else:
            held += n_in
        gaps.append(
            {
                "first_missing_utc": _hour_utc(lo + s).isoformat(),
                "hours": length,
                "where": where,
                "method": method,
                "long": bool(long_gap),
            }
        )
    if too_long:
        described = "; ".join(
            f"{_fmt_hour(a, tz)} .. {_fmt_hour(b - 1, tz)} ({n} h"
            + (f", at the {w} of the window, no neighbouring-year data" if w != "inside" else "")
            + ")"
            for a, b, n, w in too_long[:5]
        )
        more = f" and {len(too_long) - 5} more" if len(too_long) > 5 else ""
        raise WattschedError(
            f"{primary.path}: {len(too_long)} gap(s) longer than max_gap_hours={max_gap_hours} in {label}: "
            f"missing {described}{more}; pass fill='interpolate' or fill='hold' (CLI: --signal-fill; "
            "`wattsched signals`: --fill) to fill them, or raise max_gap_hours"
        )
    out = grid[w0 - lo : w1 - lo].copy()
    dup_hours = int((counts > 1).sum())
    primary_uniq = np.unique(primary.hours)
    report = {
        "source_file": primary.path,
        "unit": primary.unit,
        "rows_read": primary.rows_read,
        "rows_outside_window": int(((primary_uniq < w0) | (primary_uniq >= w1)).sum()),
        "duplicate_hours": dup_hours,
        "duplicates_merged": int((counts - 1).sum()),
        "nonexistent_dropped": primary.nonexistent_dropped,
        "ambiguous_rows": primary.ambiguous_rows,
        "ambiguous_single": primary.ambiguous_single,
        "interpolated_hours": interpolated,
        "held_hours": held,
        "filled_hours": filled,
        "fill": fill,
        "max_gap_hours": max_gap_hours,
        "gaps": gaps,
        "borrowed": borrowed,
        "hours": int(w1 - w0),
    }
    return out, report


# --- signals --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class GridSignal:
    """A complete hourly series over one local calendar year: ``values[i]`` holds for UTC hour
    ``[start_utc + i h, start_utc + (i + 1) h)``."""

    name: str  # "price", "carbon_direct" or "carbon_lca"
    kind: str  # "price" or "carbon"
    unit: str  # "USD/MWh", "EUR/MWh" or "gCO2eq/kWh"
    region: str
    year: int
    tz: str
    start_utc: datetime
    values: np.ndarray
    report: dict[str, Any] = field(default_factory=dict)
    attribution: str = ""

    @property
    def hours(self) -> int:
        return len(self.values)

    @property
    def end_utc(self) -> datetime:
        return self.start_utc + timedelta(hours=self.hours)

    def times_utc(self) -> pd.DatetimeIndex:
        return pd.date_range(self.start_utc, periods=self.hours, freq="h")

    def to_usd(self, rate: float = EUR_TO_USD) -> GridSignal:
        """A USD copy of an EUR price (fixed `rate`, recorded in the report); USD prices come back as they are."""
        if self.unit == "USD/MWh":
            return self
        if self.unit != "EUR/MWh":
            raise WattschedError(f"{self.name} is in {self.unit}, not a price in EUR/MWh")
        report = {**self.report, "converted": f"EUR->USD at a fixed {rate} USD per EUR"}
        return replace(self, unit="USD/MWh", values=self.values * rate, report=report)


def _load(
    kind: str,
    region: str,
    year: int,
    data_dir: str | Path | None,
    *,
    carbon: str = "direct",
    max_gap_hours: int,
    fill: Fill | None,
) -> GridSignal:
    year = int(year)
    if kind == "price":
        catalog, dataset_name, relpath = price_catalog(), PRICE_DATASET, price_relpath
    else:
        catalog, dataset_name, relpath = carbon_catalog(), CARBON_DATASET, carbon_relpath
    check_region_year(kind, catalog, region, year)
    if kind == "carbon" and carbon not in CARBON_COLUMNS:
        raise UnknownNameError("carbon intensity kind", carbon, CARBON_COLUMNS)
    tz = REGION_TZ[region]
    local = kind == "price" and region in LOCAL_TIME_PRICE_REGIONS

    def read(y: int) -> RawSeries:
        path = registry.locate(dataset_name, relpath(region, y), data_dir)
        return read_series(path, kind=kind, tz=tz, local_time=local, carbon=carbon)

    def _has(y: int) -> bool:
        return y in catalog[region] and registry.is_available(dataset_name, relpath(region, y), data_dir)

    primary = read(year)
    window = year_window(year, tz)
    w0, w1 = _hours_since_epoch(window[0]), _hours_since_epoch(window[1])
    # Neighbouring years are read only when they could cover a missing edge of the window.
    before = after = None
    if primary.hours.size and primary.hours.min() > w0 and _has(year - 1):
        before = read(year - 1)
    if primary.hours.size and primary.hours.max() < w1 - 1 and _has(year + 1):
        after = read(year + 1)
    label = (
        f"the {region} {year} {kind} window ({window[0]:%Y-%m-%d %H:%M} .. {window[1]:%Y-%m-%d %H:%M} UTC)"
    )
    values, report = clean_hourly(
        primary,
        window,
        tz=tz,
        max_gap_hours=max_gap_hours,
        fill=fill,
        before=before,
        after=after,
        label=label,
    )
    report["dataset_file"] = f"{dataset_name}/{relpath(region, year)}"
    report["timestamps"] = f"naive {tz} local time" if local else ("naive UTC" if kind == "price" else "UTC")
    if kind == "price":
        name, unit = "price", primary.unit
        attribution = f"{PRICE_ATTRIBUTION.get(region, region)}, {VIA_GREENDCC}"
    else:
        name, unit, attribution = f"carbon_{carbon}", CARBON_UNIT, CARBON_ATTRIBUTION
    return GridSignal(name, kind, unit, region, year, tz, window[0], values, report, attribution)


def load_price(
    region: str,
    year: int,
    data_dir: str | Path | None = None,
    *,
    max_gap_hours: int = DEFAULT_MAX_GAP_HOURS,
    fill: Fill | None = None,
    to_usd: bool = False,
) -> GridSignal:
    """Hourly wholesale price over the local calendar year, from ``processed/`` (never ``standardized/``).

    The unit is the file's (USD/MWh, or EUR/MWh for DE-LU); ``to_usd=True`` converts EUR at ``EUR_TO_USD``.
    """
    signal = _load("price", region, year, data_dir, max_gap_hours=max_gap_hours, fill=fill)
    return signal.to_usd() if to_usd else signal


def load_carbon(
    region: str,
    year: int,
    data_dir: str | Path | None = None,
    kind: str = "direct",
    *,
    max_gap_hours: int = DEFAULT_MAX_GAP_HOURS,
    fill: Fill | None = None,
) -> GridSignal:
    """Hourly carbon intensity (gCO2eq/kWh, ``kind`` "direct" or "lca") over the local calendar year."""
    return _load("carbon", region, year, data_dir, carbon=kind, max_gap_hours=max_gap_hours, fill=fill)


def daily_profile(signal: GridSignal, clock: Literal["local", "utc"] = "local") -> np.ndarray:
    """Mean value by hour of day (24 entries) on the region's local clock or on UTC."""
    times = signal.times_utc()
    if clock == "local":
        times = times.tz_convert(signal.tz)
    elif clock != "utc":
        raise UnknownNameError("clock", clock, ("local", "utc"))
    hour = np.asarray(times.hour)
    return np.bincount(hour, weights=signal.values, minlength=24) / np.bincount(hour, minlength=24)


# --- alignment ------------------------------------------------------------------------------------


def _as_utc(dt: datetime) -> datetime:
    # Naive datetimes are read as UTC, as the parameter names say.
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def first_matching(year: int, tz: str, weekday: int, clock: time) -> datetime:
    """First instant of local calendar year `year` in `tz` with local weekday `weekday` (Monday = 0) and
    wall-clock time `clock`, in UTC. Always within 1-7 January."""
    zone = ZoneInfo(tz)
    for day in range(1, 8):
        candidate = datetime.combine(datetime(year, 1, day).date(), clock, tzinfo=zone)
        if candidate.weekday() == weekday:
            return candidate.astimezone(UTC)
    raise AssertionError("unreachable: every weekday occurs in 1-7 January")


@dataclass(frozen=True, eq=False)
class AlignedSignal:
    """A GridSignal seen from trace time: τ seconds after the trace's first submission is grid instant
    ``anchor_utc + τ`` (elapsed seconds), wrapped per `wrap` past the end of the year."""

    signal: GridSignal
    anchor_utc: datetime
    rule: str
    wrap: str
    trace_start_utc: datetime | None
    trace_tz: str
    wrap_to_utc: datetime  # where `cycle_year` continues once grid time reaches signal.end_utc

    if TYPE_CHECKING:  # derived in __post_init__; at run time not dataclass fields
        _v: np.ndarray = field(init=False)
        _cum: np.ndarray = field(init=False)
        _a: float = field(init=False)
        _end: float = field(init=False)
        _w: float = field(init=False)

    def __post_init__(self) -> None:
        v = np.asarray(self.signal.values, dtype=np.float64)
        cum = np.concatenate(([0.0], np.cumsum(v * HOUR_S)))
        object.__setattr__(self, "_v", v)
        object.__setattr__(self, "_cum", cum)
        object.__setattr__(self, "_a", (self.anchor_utc - self.signal.start_utc).total_seconds())
        object.__setattr__(self, "_end", self.signal.hours * HOUR_S)
        object.__setattr__(self, "_w", (self.wrap_to_utc - self.signal.start_utc).total_seconds())

    # Seconds since signal.start_utc are called "grid seconds" below.
    @property
    def span_s(self) -> float:
        """Trace seconds that fit before the year ends (wrap="error" raises beyond this)."""
        return self._end - self._a

    @property
    def period_s(self) -> float:
        """Length of the repeated block [wrap_to_utc, end) for wrap="cycle_year"."""
        return self._end - self._w

    def _tau(self, tau: Any) -> np.ndarray:
        t = np.asarray(tau, dtype=np.float64)
        if not np.all(np.isfinite(t)):
            raise ValueError("trace times must be finite")
        if np.any(t < 0):
            raise ValueError(f"trace times must be >= 0 (τ = 0 is the first submission), got {t.min()}")
        return t

    def _past_end(self, t: np.ndarray, inclusive_end: bool) -> None:
        over = t > self.span_s if inclusive_end else t >= self.span_s
        if self.wrap == "error" and np.any(over):
            s = self.signal
            longest = float(t.max())
            raise WattschedError(
                f"trace time {longest:.0f} s ({longest / 86400:.2f} days) runs past the end of the {s.region} "
                f"{s.year} {s.name} series ({s.start_utc:%Y-%m-%d %H:%M} .. {s.end_utc:%Y-%m-%d %H:%M} UTC, "
                f"{s.hours} h); anchored at {self.anchor_utc:%Y-%m-%d %H:%M} UTC only {self.span_s:.0f} s "
                f"({self.span_s / 86400:.2f} days) of trace fit; use wrap='cycle_year' or a shorter trace"
            )

    def grid_seconds(self, tau: Any) -> np.ndarray:
        """Grid seconds (since signal.start_utc) of trace times τ, wrapped into [0, end)."""
        t = self._tau(tau)
        self._past_end(t, inclusive_end=False)
        g = self._a + t
        past = g >= self._end
        if np.any(past):
            g = np.where(past, self._w + np.mod(g - self._end, self.period_s), g)
        return g

    def grid_time_utc(self, tau: Any) -> pd.DatetimeIndex:
        g = np.atleast_1d(self.grid_seconds(tau))
        return pd.DatetimeIndex(pd.Timestamp(self.signal.start_utc) + pd.to_timedelta(g, unit="s"))

    def value_at(self, tau_seconds: Any) -> np.ndarray:
        """Signal value at trace times τ: hourly step, the interval-start value holds for the whole hour."""
        g = self.grid_seconds(tau_seconds)
        k = np.minimum((g // HOUR_S).astype(np.int64), len(self._v) - 1)
        return self._v[k]

    def _prefix(self, g: np.ndarray) -> np.ndarray:
        """∫ signal over grid seconds [0, g] for g in [0, end]."""
        k = np.minimum((g // HOUR_S).astype(np.int64), len(self._v) - 1)
        return self._cum[k] + self._v[k] * (g - k * HOUR_S)

    def _antiderivative(self, t: np.ndarray) -> np.ndarray:
        """∫ signal over trace seconds [0, t]."""
        g = self._a + t
        f_a = self._prefix(np.asarray(self._a))
        inside = np.minimum(g, self._end)
        out = self._prefix(inside) - f_a
        past = g > self._end
        if np.any(past):
            extra = np.where(past, g - self._end, 0.0)
            cycles = np.floor(extra / self.period_s)
            rest = extra - cycles * self.period_s
            f_w = self._prefix(np.asarray(self._w))
            block = self._cum[-1] - f_w
            out = out + np.where(past, cycles * block + self._prefix(self._w + rest) - f_w, 0.0)
        return out

    def integral(self, t0: Any, t1: Any) -> np.ndarray:
        """∫ signal dτ over trace seconds [t0, t1] (unit × seconds), exact for the hourly step function, O(1)
        per interval; arrays broadcast."""
        a, b = self._tau(t0), self._tau(t1)
        self._past_end(np.maximum(a, b), inclusive_end=True)
        return self._antiderivative(b) - self._antiderivative(a)

    def cost_usd(self, power_w: Any, t0: Any, t1: Any) -> np.ndarray:
        """USD for constant `power_w` watts over trace seconds [t0, t1]: P · ∫ price[USD/MWh] dτ / 3.6e9."""
        if self.signal.kind != "price":
            raise WattschedError(f"cost_usd needs a price signal, not {self.signal.name}")
        if self.signal.unit != "USD/MWh":
            raise WattschedError(
                f"{self.signal.region} price is in {self.signal.unit}; convert it with load_price(..., "
                f"to_usd=True) or signal.to_usd() (fixed {EUR_TO_USD} USD/EUR) before computing USD"
            )
        return np.asarray(power_w, dtype=np.float64) * self.integral(t0, t1) / 3.6e9

    def co2_kg(self, power_w: Any, t0: Any, t1: Any) -> np.ndarray:
        """kgCO2eq for constant `power_w` watts over [t0, t1]: P · ∫ CI[g/kWh] dτ / 3.6e6 g, / 1000 for kg."""
        if self.signal.kind != "carbon":
            raise WattschedError(f"co2_kg needs a carbon-intensity signal, not {self.signal.name}")
        return np.asarray(power_w, dtype=np.float64) * self.integral(t0, t1) / 3.6e9

    def describe(self) -> dict[str, Any]:
        """Everything needed to reproduce the mapping, for summary.json."""
        s = self.signal
        zone = ZoneInfo(s.tz)
        if self.trace_start_utc is None:
            assumption = "relative-time trace: τ = 0 is taken as Monday 00:00 local time (region time zone)"
        else:
            assumption = f"trace calendar start read in {self.trace_tz}"
        return {
            "signal": s.name,
            "kind": s.kind,
            "unit": s.unit,
            "region": s.region,
            "year": s.year,
            "tz": s.tz,
            "rule": self.rule,
            "wrap": self.wrap,
            "trace_start_utc": None if self.trace_start_utc is None else self.trace_start_utc.isoformat(),
            "trace_start_assumption": assumption,
            "anchor_utc": self.anchor_utc.isoformat(),
            "anchor_local": self.anchor_utc.astimezone(zone).isoformat(),
            "series_start_utc": s.start_utc.isoformat(),
            "series_end_utc": s.end_utc.isoformat(),
            "trace_span_before_wrap_s": self.span_s,
            "wrap_to_utc": self.wrap_to_utc.isoformat(),
            "wrap_to_local": self.wrap_to_utc.astimezone(zone).isoformat(),
            "wrap_period_s": self.period_s,
            "value_convention": "hourly step: the interval-start value holds for the whole hour",
            "report": s.report,
            "attribution": s.attribution,
        }


def align(
    signal: GridSignal,
    trace_start_utc: datetime | None = None,
    rule: str = "weekday_hour",
    grid_start: datetime | None = None,
    wrap: str = "cycle_year",
    *,
    trace_tz: str = "UTC",
    trace_length_s: float | None = None,
) -> AlignedSignal:
    """Map trace time onto `signal`'s year (docs/datasets.md §2.1).

    * ``weekday_hour``: the anchor is the first instant of the signal's local year whose local weekday and
      wall-clock time (hour, minute, second) equal the trace start's in `trace_tz` (default UTC); a trace without
      a calendar start (``trace_start_utc=None``) starts Monday 00:00 local time.
    * ``offset``: the anchor is `grid_start` (within the signal's year).
    * ``cycle_year``: when grid time reaches the year end E it continues at the first instant of the year with the
      same local weekday and wall-clock time as E, and repeats [that instant, E) as often as needed.
      ``error``: reading past E raises (at once if `trace_length_s` is given and does not fit).
    """
    if rule not in ALIGN_RULES:
        raise UnknownNameError("alignment rule", rule, ALIGN_RULES)
    if wrap not in WRAP_MODES:
        raise UnknownNameError("wrap mode", wrap, WRAP_MODES)
    start = None if trace_start_utc is None else _as_utc(trace_start_utc)
    if rule == "weekday_hour":
        if grid_start is not None:
            raise WattschedError("grid_start is only used with rule='offset'")
        if start is None:
            weekday, clock = 0, time(0, 0)
        else:
            local = start.astimezone(ZoneInfo(trace_tz))
            weekday, clock = local.weekday(), local.time().replace(tzinfo=None)
        anchor = first_matching(signal.year, signal.tz, weekday, clock)
    else:
        if grid_start is None:
            raise WattschedError("rule='offset' needs grid_start (a time inside the signal's year)")
        anchor = _as_utc(grid_start)
    if not signal.start_utc <= anchor < signal.end_utc:
        raise WattschedError(
            f"grid anchor {anchor.isoformat()} is outside the {signal.region} {signal.year} series "
            f"({signal.start_utc.isoformat()} .. {signal.end_utc.isoformat()})"
        )
    end_local = signal.end_utc.astimezone(ZoneInfo(signal.tz))
    wrap_to = first_matching(
        signal.year, signal.tz, end_local.weekday(), end_local.time().replace(tzinfo=None)
    )
    aligned = AlignedSignal(signal, anchor, rule, wrap, start, trace_tz, wrap_to)
    if trace_length_s is not None:
        aligned._past_end(np.asarray([float(trace_length_s)]), inclusive_end=True)
    return aligned


# --- a user's own market: hourly CSV -------------------------------------------------------------------
CSV_TIME_COLUMN = "time"
CSV_VALUE_COLUMNS = {"price": ("price_usd_per_mwh",), "carbon": ("carbon_g_per_kwh",)}
CSV_UNITS = {"price": "USD/MWh", "carbon": CARBON_UNIT}
# Regions whose green-dcc `standardized/` price files have a `Datetime (UTC)` late by the UTC offset (naive UTC
# localised as if local upstream, docs/datasets.md): their `Datetime (Local)` wall clock is the true UTC time.
STANDARDIZED_SHIFTED_REGIONS = ("US-CAL-CISO", "US-MIDA-PJM", "US-NY-NYIS")


@dataclass(frozen=True)
class CsvLayout:
    """One accepted layout of a ``--price-csv`` / ``--carbon-csv`` file, recognised by its header."""

    name: str
    kind: str  # "price" or "carbon"
    description: str


CSV_LAYOUTS = (
    CsvLayout("simple", "price", "time, price_usd_per_mwh (ISO 8601, UTC when no zone)"),
    CsvLayout(
        "greendcc-standardized",
        "price",
        "GreenDCC standardized: Datetime (UTC), Datetime (Local), Price (USD/MWh)",
    ),
    CsvLayout(
        "greendcc-processed",
        "price",
        "GreenDCC processed: Datetime (naive UTC), Price (USD/MWh) or Price (EUR/MWh)",
    ),
    CsvLayout("simple", "carbon", "time, carbon_g_per_kwh (ISO 8601, UTC when no zone)"),
    CsvLayout(
        "electricitymaps",
        "carbon",
        "Electricity Maps hourly: Datetime (UTC), ..., Carbon Intensity gCO₂eq/kWh (direct), "
        "Carbon Intensity gCO₂eq/kWh (LCA), ...",
    ),
)
_EM_DIRECT = ("Carbon Intensity gCO2eq/kWh (direct)",)
_EM_LCA = ("Carbon Intensity gCO2eq/kWh (LCA)", "Carbon Intensity gCO2eq/kWh (Life cycle)")


def _loose(column: str) -> str:
    """A header cell compared loosely: case, runs of spaces and a subscript ₂ do not matter."""
    return " ".join(column.replace("₂", "2").split()).casefold()


def _layout_columns(layout: CsvLayout, header: list[str], carbon: str) -> dict[str, str] | None:
    """{"time", "value"[, "local"]: the header's own column names} when `header` has `layout`, else None."""
    named = {_loose(h): h for h in header}

    def col(*names: str) -> str | None:
        return next((named[_loose(n)] for n in names if _loose(n) in named), None)

    if layout.name == "simple":
        cols = {"time": col(CSV_TIME_COLUMN), "value": col(*CSV_VALUE_COLUMNS[layout.kind])}
    elif layout.name == "greendcc-standardized":
        cols = {
            "time": col("Datetime (UTC)"),
            "local": col("Datetime (Local)"),
            "value": col("Price (USD/MWh)"),
        }
    elif layout.name == "greendcc-processed":
        cols = {"time": col(PRICE_TIME_COLUMN), "value": col(*PRICE_COLUMNS)}
    else:  # electricitymaps: recognised by its direct column, read in the kind asked for
        if col(*_EM_DIRECT) is None:
            return None
        cols = {"time": col(CARBON_TIME_COLUMN), "value": col(*(_EM_LCA if carbon == "lca" else _EM_DIRECT))}
    return cols if all(cols.values()) else None  # type: ignore[return-value]


def csv_layout(
    path: str | Path, header: list[str], kind: str, carbon: str = "direct"
) -> tuple[CsvLayout, dict]:
    """The layout of a signal CSV of `kind` from its header; any other header is an error listing the layouts."""
    for layout in (x for x in CSV_LAYOUTS if x.kind == kind):
        cols = _layout_columns(layout, header, carbon)
        if cols is not None:
            return layout, cols
    accepted = "; ".join(
        f"({i}) {x.description}" for i, x in enumerate((y for y in CSV_LAYOUTS if y.kind == kind), 1)
    )
    shown = ", ".join(header)
    shown = shown if len(shown) <= 100 else shown[:97] + "..."
    if (
        kind == "carbon"
        and carbon == "lca"
        and _layout_columns(CSV_LAYOUTS[-1], header, "direct") is not None
    ):
        problem = f"Electricity Maps header without an LCA column ({shown})"
    else:
        other = next(
            (x for x in CSV_LAYOUTS if x.kind != kind and _layout_columns(x, header, carbon) is not None),
            None,
        )
        problem = (
            f"a {other.kind} file ({other.name} layout), not a {kind} file"
            if other is not None
            else f"header not recognised ({shown})"
        )
    raise InputError(path, 1, None, f"{problem}; a --{kind}-csv file has one of these layouts: {accepted}")


def load_csv_signal(
    path: str | Path,
    kind: str,
    year: int,
    tz: str = "UTC",
    *,
    max_gap_hours: int = DEFAULT_MAX_GAP_HOURS,
    fill: Fill | None = None,
    carbon: str = "direct",
) -> GridSignal:
    """An hourly price or carbon-intensity series of the user's own market, over the local calendar `year` in
    `tz`, with the same gap rules as the shipped series (docs/signals.md §6a).

    The layout is recognised by the header (:data:`CSV_LAYOUTS`): the simple ``time, price_usd_per_mwh`` /
    ``time, carbon_g_per_kwh`` (``time`` ISO 8601 with a zone, UTC when it has none), GreenDCC standardized and
    processed price files, and Electricity Maps hourly files (`carbon` picks the direct or LCA column). Prices
    in EUR are converted to USD at ``EUR_TO_USD``."""
    if kind not in CSV_VALUE_COLUMNS:
        raise UnknownNameError("signal kind", kind, tuple(CSV_VALUE_COLUMNS))
    if carbon not in CARBON_COLUMNS:
        raise UnknownNameError("carbon intensity kind", carbon, CARBON_COLUMNS)
    try:
        ZoneInfo(tz)
    except (KeyError, ValueError):
        raise WattschedError(f"unknown time zone {tz!r} (an IANA name such as America/Los_Angeles)") from None
    path = Path(path)
    header, lines, rows = _csv_rows(path)
    layout, cols = csv_layout(path, header, kind, carbon)
    column = _pick_columns(path, header, lines, rows, cols, cols["value"])
    line_arr = np.asarray(lines, dtype=np.int64)
    notes: list[str] = []
    unit = CSV_UNITS[kind]
    region = next((r for r in REGION_TZ if path.name.startswith(f"{r}_")), None)

    def parse(name: str) -> pd.Series:
        ts = pd.to_datetime(
            pd.Series(column[name], dtype=object), utc=True, errors="coerce", format="ISO8601"
        )
        bad = np.flatnonzero(ts.isna().to_numpy())
        if bad.size:
            i = int(bad[0])
            raise InputError(
                path, int(line_arr[i]), cols[name], f"bad timestamp {column[name][i]!r}; expected ISO 8601"
            )
        return ts

    if layout.name == "greendcc-processed" and region in LOCAL_TIME_PRICE_REGIONS:
        # The shipped DE-LU file: naive local wall-clock time, read with the DST rules of the shipped series.
        raw = read_series(path, kind="price", tz=REGION_TZ[region], local_time=True)
        timestamps = f"naive {REGION_TZ[region]} local time ({region} file)"
    else:
        ts = parse("time")
        timestamps = "ISO 8601 with zone, else UTC"
        if layout.name == "greendcc-processed":
            timestamps = "naive UTC"
            unit = PRICE_COLUMNS[next(c for c in PRICE_COLUMNS if _loose(c) == _loose(cols["value"]))]
        elif layout.name == "electricitymaps":
            timestamps = "Datetime (UTC), hour start"
        elif layout.name == "greendcc-standardized":
            local = parse("local")
            off = np.flatnonzero((local != ts).to_numpy())
            if off.size:
                i = int(off[0])
                raise InputError(
                    path, int(line_arr[i]), cols["local"],
                    f"{column['local'][i]!r} is not the instant of {cols['time']} {column['time'][i]!r}",
                )  # fmt: skip
            timestamps = "Datetime (UTC)"
            notes.append("GreenDCC standardized prices are smoothed upstream (2-sample centred rolling mean)")
            if region in STANDARDIZED_SHIFTED_REGIONS:
                wall = [t[:19] for t in column["local"]]
                ts = pd.to_datetime(pd.Series(wall, dtype=object), format=TIME_FORMAT).dt.tz_localize("UTC")
                timestamps = "Datetime (Local) wall clock read as UTC"
                notes.append(
                    f"{region} standardized file: its Datetime (UTC) is late by the UTC offset upstream, so the "
                    "Datetime (Local) wall clock is read as UTC instead (docs/datasets.md)"
                )
        vals = _hourly_values(
            path, line_arr, ts, column["time"], column["value"], cols["time"], cols["value"]
        )
        raw = RawSeries(str(path), _epoch_hours(ts), vals, line_arr, unit, rows_read=len(vals))
    window = year_window(int(year), tz)
    w0, w1 = _hours_since_epoch(window[0]), _hours_since_epoch(window[1])
    if raw.hours.size and not ((raw.hours >= w0) & (raw.hours < w1)).any():
        first, last = _hour_utc(int(raw.hours.min())), _hour_utc(int(raw.hours.max()))
        raise WattschedError(
            f"{path}: no {kind} data in the year {year} ({tz}): the file covers {first:%Y-%m-%d %H:%M} .. "
            f"{last:%Y-%m-%d %H:%M} UTC; choose the year with --year"
        )
    label = f"{path.name} {kind} window for {year} in {tz}"
    cleaned, report = clean_hourly(raw, window, tz=tz, max_gap_hours=max_gap_hours, fill=fill, label=label)
    report["dataset_file"] = str(path)
    report["layout"] = layout.description
    report["timestamps"] = timestamps
    report["notes"] = notes
    if kind == "price":
        name, attribution = "price", f"user-supplied {path}"
    else:
        name = f"carbon_{carbon}" if layout.name == "electricitymaps" else "carbon_direct"
        attribution = f"user-supplied {path}" + (
            "; Electricity Maps data (electricitymaps.com), attribution required"
            if layout.name == "electricitymaps"
            else ""
        )
    signal = GridSignal(name, kind, raw.unit, f"csv:{path.name}", int(year), tz, window[0], cleaned, report,
                        attribution)  # fmt: skip
    if signal.unit == "EUR/MWh":
        signal = signal.to_usd()
        notes.append(signal.report["converted"])
    return signal
