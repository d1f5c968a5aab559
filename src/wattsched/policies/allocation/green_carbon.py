"""Carbon in ``wattsched-green``'s objective (docs/green.md, "Carbon"): price-shift values a start hour by the
money its energy saves plus the carbon it saves times the operator's carbon price ``usd_per_tonne_co2``.

Both terms are linear in the run's energy, so they fold into one hourly figure: an effective price in $/MWh,
``price + carbon_g_per_kwh x usd_per_tonne_co2 / 1000`` (g/kWh is kg/MWh; a tonne is 1,000 kg). Price-shift's
rule (``saving - usd_per_job_hour x delay_h > 0``) then runs unchanged on it. With the weight 0 the prices are
used as they are (the carbon forecast is not even read), so runs without a carbon price are unchanged.
"""

from __future__ import annotations

import numpy as np

from ..contract import ClusterView

KG_PER_TONNE = 1000.0


def carbon_priced(
    view: ClusterView, prices: np.ndarray | None, usd_per_tonne_co2: float, hours: int
) -> tuple[np.ndarray | None, bool]:
    """(the hourly figure price-shift compares, whether a carbon forecast went into it). Without prices, the
    carbon term alone; without a carbon forecast (or at weight 0), the prices as they are."""
    if usd_per_tonne_co2 <= 0:
        return prices, False
    carbon = view.carbon_ahead_g_per_kwh(hours)
    if carbon is None:
        return prices, False
    carbon_usd_per_mwh = np.asarray(carbon, dtype=np.float64) * (usd_per_tonne_co2 / KG_PER_TONNE)
    if prices is None:
        return carbon_usd_per_mwh, True
    price = np.asarray(prices, dtype=np.float64)
    n = min(price.size, carbon_usd_per_mwh.size)
    return price[:n] + carbon_usd_per_mwh[:n], True
