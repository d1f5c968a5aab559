"""The HKBU analytic SM/memory-clock model (Wang et al., IEEE TPDS 2022; code ``HKBU-HPML/GPU-DVFS-Job-Schedule``,
reimplemented from the formulas in docs/energy-models.md §5; docs/dvfs.md)::

    t(fc, fm) = t0 + D * (delta/fc + (1 - delta)/fm)
    P(fc, fm) = p0 + gamma*fm + cg * Vc(fc)**2 * fc,      Vc(fc) = 2*(fc - 0.5)**2 + 0.5

Task parameters, the energy-optimal and deadline-bound settings (the HKBU schedulers' ``theta_adjust``), and the
relative speed and power of an SM-clock fraction. What a clock setting does to a job in a run is ``dvfs.py``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

# ---------------------------------------------------------------------------------------------------------------
# HKBU SM/memory clock model
# ---------------------------------------------------------------------------------------------------------------

FM_MIN, FM_MAX = 0.5, 1.2  # memory-clock clip of the closed-form optimum (normalised to base)
VC_MIN, VC_STEP = 0.5, 0.05  # the Vc search grid: Vc = 0.5 + 0.05 i


@dataclass(frozen=True)
class HkbuParams:
    """HKBU time/power model of one task; times in units of t* = t(1, 1) when t0 + D = 1, powers in W."""

    t0: float
    D: float
    delta: float  # share of the clock-dependent time that scales with the core clock
    p0: float  # clock-independent power
    gamma: float  # memory-clock power coefficient
    cg: float  # core-clock power coefficient
    vc_steps: int = 16  # Vc grid size (2070S: 13, Vc <= 1.1; 1080Ti: 16, Vc <= 1.25)
    label: str = ""

    @property
    def t_star(self) -> float:
        return self.t0 + self.D

    @property
    def p_star(self) -> float:
        return self.p0 + self.gamma + self.cg

    @property
    def vc_grid(self) -> np.ndarray:
        return (VC_MIN + VC_STEP * np.arange(self.vc_steps)).round(12)  # 1.2, not 1.2000000000000002


# Median of HKBU kernel fits (docs/energy-models.md §5): CUDA kernels, not DNN training, measured on consumer GPUs.
HKBU_2070S_MEDIAN = HkbuParams(
    t0=0.065,
    D=0.935,
    delta=0.69,
    p0=74.0,
    gamma=50.0,
    cg=10.3,
    vc_steps=13,
    label="median of HKBU kernel fits, GTX 2070S (kernels, not DNNs)",
)
HKBU_1080TI_MEDIAN = HkbuParams(
    t0=0.067,
    D=0.933,
    delta=0.62,
    p0=100.0,
    gamma=82.0,
    cg=12.1,
    vc_steps=16,
    label="median of HKBU kernel fits, GTX 1080Ti (kernels, not DNNs)",
)
HKBU_DEFAULT = HKBU_2070S_MEDIAN


def core_voltage(fc: ArrayLike) -> np.ndarray:
    """Vc(fc) = 2 (fc - 0.5)^2 + 0.5 (normalised core voltage; the model is used on the branch fc >= 0.5)."""
    fc = np.asarray(fc, dtype=np.float64)
    return 2.0 * (fc - 0.5) ** 2 + 0.5


def core_clock_for_voltage(vc: ArrayLike) -> np.ndarray:
    """Inverse of core_voltage on fc >= 0.5."""
    vc = np.asarray(vc, dtype=np.float64)
    return np.sqrt((vc - 0.5) / 2.0) + 0.5


def hkbu_time(params: HkbuParams, fc: ArrayLike, fm: ArrayLike) -> np.ndarray:
    fc, fm = np.asarray(fc, dtype=np.float64), np.asarray(fm, dtype=np.float64)
    return params.t0 + params.D * (params.delta / fc + (1.0 - params.delta) / fm)


def hkbu_power(params: HkbuParams, fc: ArrayLike, fm: ArrayLike) -> np.ndarray:
    fc, fm = np.asarray(fc, dtype=np.float64), np.asarray(fm, dtype=np.float64)
    return params.p0 + params.gamma * fm + params.cg * core_voltage(fc) ** 2 * fc


def hkbu_energy(params: HkbuParams, fc: ArrayLike, fm: ArrayLike) -> np.ndarray:
    return hkbu_power(params, fc, fm) * hkbu_time(params, fc, fm)


def optimal_memory_clock(params: HkbuParams, vc: ArrayLike) -> np.ndarray:
    """Energy-optimal memory clock for core voltage Vc (core clock fc(Vc)), clipped to [0.5, 1.2].

    E(fm) = (A + gamma fm)(B + C/fm) with A = p0 + cg Vc^2 fc, B = t0 + D delta/fc, C = D (1 - delta) is convex
    in fm > 0; dE/dfm = gamma B - A C / fm^2 = 0 gives fm* = sqrt(A C / (gamma B)), so clipping is exact.
    """
    vc = np.asarray(vc, dtype=np.float64)
    fc = core_clock_for_voltage(vc)
    a = params.p0 + params.cg * vc**2 * fc
    b = params.t0 + params.D * params.delta / fc
    c = params.D * (1.0 - params.delta)
    with np.errstate(divide="ignore", over="ignore"):  # B = 0 (t0 = 0, delta = 0): E falls with fm, fm* = inf
        fm = np.sqrt(a * c / (params.gamma * b)) if params.gamma > 0 else np.full_like(vc, np.inf)
    return np.clip(fm, FM_MIN, FM_MAX)


@dataclass(frozen=True)
class HkbuSetting:
    vc: float
    fc: float
    fm: float
    time: float
    power: float
    energy: float


def _setting(params: HkbuParams, vc: float, fm: float) -> HkbuSetting:
    fc = float(core_clock_for_voltage(vc))
    t = float(hkbu_time(params, fc, fm))
    p = float(hkbu_power(params, fc, fm))
    return HkbuSetting(float(vc), fc, float(fm), t, p, t * p)


def minimum_time(params: HkbuParams) -> float:
    """Fastest setting of the grid: top Vc, fm = 1.2."""
    return float(hkbu_time(params, core_clock_for_voltage(params.vc_grid[-1]), FM_MAX))


def energy_optimal_setting(params: HkbuParams = HKBU_DEFAULT) -> HkbuSetting:
    """Minimum-energy (Vc, fm*) over the Vc grid, with fm* from the closed form."""
    return theta_adjust(math.inf, params)


def theta_adjust(time_bound: float, params: HkbuParams = HKBU_DEFAULT) -> HkbuSetting:
    """Minimum-energy setting with t <= time_bound over the Vc grid.

    A bound below the fastest grid setting is raised to it (t_theta = max(theta t_hat, t_min), docs/energy-models.md
    §5). For each Vc, time falls with fm and E is convex in fm: if fm* meets the bound it is the answer, else the
    least fm that does, fm_need = D (1 - delta) / (bound - t0 - D delta / fc), if fm = 1.2 meets the bound.
    """
    bound = max(float(time_bound), minimum_time(params))
    tol = 1e-12 * bound  # bound == t_min must stay feasible despite rounding
    vc = params.vc_grid
    fc = core_clock_for_voltage(vc)
    fm_opt = optimal_memory_clock(params, vc)
    ok_opt = hkbu_time(params, fc, fm_opt) <= bound + tol
    ok_max = hkbu_time(params, fc, FM_MAX) <= bound + tol
    slack = bound - params.t0 - params.D * params.delta / fc
    need = params.D * (1.0 - params.delta)
    with np.errstate(divide="ignore", invalid="ignore"):
        fm_need = np.where(slack > 0, need / np.where(slack > 0, slack, 1.0), np.inf)
    fm = np.where(ok_opt, fm_opt, np.clip(fm_need, fm_opt, FM_MAX))
    feasible = ok_opt | ok_max
    if not feasible.any():  # cannot happen for bound >= t_min, kept as a guard
        return _setting(params, float(vc[-1]), FM_MAX)
    energy = np.where(feasible, hkbu_energy(params, fc, fm), np.inf)
    best = int(np.argmin(energy))
    return _setting(params, float(vc[best]), float(fm[best]))


def sm_clock_curve(f: ArrayLike, params: HkbuParams = HKBU_DEFAULT) -> tuple[np.ndarray, np.ndarray]:
    """(speed, dynamic power scale) at core clock fraction f with the memory clock left at 1.

    speed = t(1, 1) / t(f, 1); the dynamic (clock-dependent) HKBU power is gamma fm + cg Vc^2 fc, so the scale
    is (gamma + cg Vc(f)^2 f) / (gamma + cg). Both are 1 at f = 1.
    """
    f = np.asarray(f, dtype=np.float64)
    speed = params.t_star / hkbu_time(params, f, 1.0)
    scale = (params.gamma + params.cg * core_voltage(f) ** 2 * f) / (params.gamma + params.cg)
    return speed, scale
