"""The CE-DLA experiment's rows: DRS without price awareness twice, the plain idle timeout and the forecast buffer,
each with the same power-manager settings as the `cedla` row."""

from __future__ import annotations

from wattsched.experiments.cedla import BASELINE, POLICIES, Setup
from wattsched.policies.power import POWER_MANAGERS

FIELDS = (
    "idle_timeout_s",
    "forecast_interval_s",
    "forecast_history_s",
    "forecast_season_s",
    "forecast_buffer_frac",
)


def _setup() -> Setup:
    return Setup("philly", "philly", 2023, 3.0, "default", 100, None)


def test_forecast_drs_row_sits_beside_the_idle_timeout_one():
    assert next(iter(POLICIES)) == BASELINE
    idle = _setup().config("price-unaware-drs", "US-CAL-CISO")
    forecast = _setup().config("price-unaware-drs-forecast", "US-CAL-CISO")
    for cfg, manager in ((idle, "idle-timeout"), (forecast, "forecast")):
        assert (cfg.scheduler.queue, cfg.scheduler.placement, cfg.energy.power_manager) == (
            "fifo",
            "best-fit",
            manager,
        )
    assert "forecast" in POWER_MANAGERS


def test_every_row_gets_the_same_power_manager_settings():
    rows = [_setup().config(p, "US-CAL-CISO") for p in POLICIES]
    for name in FIELDS:
        values = {_find(row, name) for row in rows}
        assert len(values) == 1, name
    cedla = _setup().config("cedla", "US-CAL-CISO")
    forecast = _setup().config("price-unaware-drs-forecast", "US-CAL-CISO")
    skip = {"scheduler.queue", "scheduler.placement", "scheduler.allocation", "energy.power_manager"}
    a, b = _flat(cedla.model_dump()), _flat(forecast.model_dump())
    assert {k for k in a if a[k] != b.get(k)} <= skip


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _find(cfg, name: str):
    flat = _flat(cfg.model_dump())
    hits = [v for k, v in flat.items() if k.split(".")[-1] == name]
    assert hits, name
    return hits[0]
