"""Reading and cleaning an hourly price or carbon file into a :class:`GridSignal`: every timestamp to UTC, one
value per UTC hour of the region's local calendar year, duplicates averaged, non-existent local times dropped, short
gaps interpolated, each clean-up step reported (docs/signals.md). :func:`load_price` and :func:`load_carbon` load a
region's year from the dataset registry.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo

import numpy as np

from ...core.errors import InputError, UnknownNameError, WattschedError
from ...data import registry
from .catalog import (
    CARBON_ATTRIBUTION,
    CARBON_COLUMNS,
    CARBON_DATASET,
    CARBON_TIME_COLUMN,
    CARBON_UNIT,
    DEFAULT_MAX_GAP_HOURS,
    EUR_TO_USD,
    FILL_MODES,
    LOCAL_TIME_PRICE_REGIONS,
    PRICE_ATTRIBUTION,
    PRICE_COLUMNS,
    PRICE_DATASET,
    PRICE_TIME_COLUMN,
    REGION_TZ,
    TIME_FORMAT,
    VIA_GREENDCC,
    Fill,
    carbon_catalog,
    carbon_relpath,
    check_region_year,
    price_catalog,
    price_relpath,
)

if TYPE_CHECKING:
    import pandas as pd

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
    import pandas as pd

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
    import pandas as pd

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
    import pandas as pd

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
        import pandas as pd

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
