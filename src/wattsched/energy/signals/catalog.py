"""The grid-signal catalogue: the price and carbon datasets, their regions and time zones, units, column names and
attribution, and which region/year files the dataset registry holds (docs/signals.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from ...core.errors import UnknownNameError
from ...data import registry

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
