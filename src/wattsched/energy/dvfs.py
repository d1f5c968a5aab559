"""GPU power-limit and SM-clock (DVFS) response: how fast a job runs and how much power it draws under a setting.

Two models (docs/dvfs.md has the equations, fitted values and limitations), each in a module of its own:

* **Power limits**: ``zeus.py``, curves fitted from the Zeus NSDI'23 traces (docs/energy-models.md §4), stored in
  ``dvfs_fit.json`` (written by ``tools/fit_dvfs.py``);
* **SM / memory clocks**: ``hkbu.py``, the HKBU analytic model (Wang et al., IEEE TPDS 2022; docs/energy-models.md
  §5).

This module is what a run uses of them: the allowed ranges of a catalog GPU, and one entry point,
:func:`dvfs_response`, which maps a catalog GPU and a :class:`~..core.settings.GpuSetting` (``core/settings.py``) to
``(speed, power_scale)``.
"""

from __future__ import annotations

from functools import cache, lru_cache

import numpy as np
from numpy.typing import ArrayLike

from ..core.errors import WattschedError
from ..core.gpus import GpuModel, gpu_model
from ..core.settings import GpuSetting
from .hkbu import HKBU_DEFAULT, HkbuParams, sm_clock_curve
from .zeus import optimum_grid, response_source, zeus_curve

# ---------------------------------------------------------------------------------------------------------------
# The simulator interface
# ---------------------------------------------------------------------------------------------------------------

SM_CLOCK_MODEL_MIN = 0.5  # Vc(fc) is only monotone for fc >= 0.5
_EPS = 1e-9


def power_limit_range(gpu: str) -> tuple[float, float]:
    """Allowed p = PL/PLmax: the catalog minimum limit and the fitted curve's range, whichever is tighter."""
    model = gpu_model(gpu)
    curve = zeus_curve(response_source(gpu))
    return max(model.power_limit_min_w / model.power_limit_max_w, curve.p_min), 1.0


def sm_clock_range(gpu: str) -> tuple[float, float]:
    model = gpu_model(gpu)
    return max(model.sm_clock_min_mhz / model.sm_clock_max_mhz, SM_CLOCK_MODEL_MIN), 1.0


def _check_range(
    gpu: str, what: str, values: np.ndarray, bounds: tuple[float, float], unit: str, full: float, why: str
) -> None:
    lo, hi = bounds
    bad = (values < lo - _EPS) | (values > hi + _EPS) | ~np.isfinite(values)
    if np.any(bad):
        v = float(values[np.argmax(bad)])
        raise WattschedError(
            f"{gpu}: {what} fraction {v:g} ({v * full:.0f} {unit}) is outside the allowed range "
            f"{lo:.4g}-{hi:g} ({lo * full:.0f}-{hi * full:.0f} {unit}; {why})"
        )


def _dynamic_scale(model: GpuModel, total_relative: np.ndarray) -> np.ndarray:
    """Relative total board power (what Zeus measures, idle included) -> multiplier on (P_busy - P_idle), so that
    a fully busy GPU draws exactly power(p) x max_w. Not capped at the limit: the curve is the Zeus job mix's
    mean, whose unconstrained draw is ~0.7 PLmax, and a cap at p x max_w would override it everywhere
    (docs/dvfs.md, limitations)."""
    scale = (total_relative * model.max_w - model.idle_w) / (model.max_w - model.idle_w)
    return np.clip(scale, 0.0, 1.0)


def power_limit_response(gpu: str, p: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised (speed, power_scale) of a catalog GPU at power-limit fractions p."""
    model = gpu_model(gpu)
    p = np.asarray(p, dtype=np.float64)
    lo, hi = power_limit_range(gpu)
    source = response_source(gpu)
    curve = zeus_curve(source)
    why = f"catalog minimum {model.power_limit_min_w:g} W, Zeus '{source}' curve fitted for p >= {curve.p_min:.4g}"
    _check_range(gpu, "power limit", np.atleast_1d(p), (lo, hi), "W", model.power_limit_max_w, why)
    p = np.clip(p, lo, hi)
    return np.minimum(curve.speed(p), 1.0), _dynamic_scale(model, curve.power(p))


def sm_clock_response(
    gpu: str, f: ArrayLike, params: HkbuParams = HKBU_DEFAULT
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised (speed, power_scale) of a catalog GPU at SM-clock fractions f (memory clock unchanged)."""
    model = gpu_model(gpu)
    f = np.asarray(f, dtype=np.float64)
    lo, hi = sm_clock_range(gpu)
    why = (
        f"catalog minimum {model.sm_clock_min_mhz:g} MHz, HKBU voltage model needs f >= {SM_CLOCK_MODEL_MIN}"
    )
    _check_range(gpu, "sm clock", np.atleast_1d(f), (lo, hi), "MHz", model.sm_clock_max_mhz, why)
    return sm_clock_curve(np.clip(f, lo, hi), params)


@lru_cache(maxsize=4096)
def dvfs_response(gpu_model_name: str, setting: GpuSetting) -> tuple[float, float]:
    """(speed, power_scale): job progress-rate multiplier in (0, 1] and the multiplier on the busy GPU's
    dynamic power (P_busy - P_idle) relative to running unconstrained."""
    if setting.power_limit_fraction is not None:
        s, w = power_limit_response(gpu_model_name, setting.power_limit_fraction)
    elif setting.sm_clock_fraction is not None:
        s, w = sm_clock_response(gpu_model_name, setting.sm_clock_fraction)
    else:
        gpu_model(gpu_model_name)  # unknown names still raise
        return 1.0, 1.0
    return float(s), float(w)


def relative_energy_per_work(gpu: str, p: ArrayLike) -> np.ndarray:
    """GPU energy per unit of work at power-limit fraction p relative to p = 1, idle power included."""
    model = gpu_model(gpu)
    speed, scale = power_limit_response(gpu, p)
    span = model.max_w - model.idle_w
    return (model.idle_w + span * scale) / speed / model.max_w


@cache
def energy_optimal_power_limit(gpu: str) -> float:
    """Power-limit fraction PL/PLmax (not watts) that minimises GPU energy per unit of work, on a 1e-4 grid."""
    lo, hi = power_limit_range(gpu)
    grid = optimum_grid(lo, hi)
    return float(grid[np.argmin(relative_energy_per_work(gpu, grid))])
