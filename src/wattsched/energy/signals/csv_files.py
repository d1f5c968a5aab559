"""A user's own market: an hourly ``--price-csv`` / ``--carbon-csv`` file in one of the accepted layouts, recognised
by its header, read and cleaned like the catalogue's files (docs/signals.md §6a).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import numpy as np

from ...core.errors import InputError, UnknownNameError, WattschedError
from .catalog import (
    CARBON_COLUMNS,
    CARBON_TIME_COLUMN,
    CARBON_UNIT,
    DEFAULT_MAX_GAP_HOURS,
    LOCAL_TIME_PRICE_REGIONS,
    PRICE_COLUMNS,
    PRICE_TIME_COLUMN,
    REGION_TZ,
    TIME_FORMAT,
    Fill,
)
from .clean import (
    GridSignal,
    RawSeries,
    _csv_rows,
    _epoch_hours,
    _hour_utc,
    _hourly_values,
    _hours_since_epoch,
    _pick_columns,
    clean_hourly,
    read_series,
    year_window,
)

if TYPE_CHECKING:
    import pandas as pd

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
    import pandas as pd

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
