"""GPU power-limit response fitted from the Zeus NSDI'23 traces (``zeus-power/summary_power_{gpu}.csv``; You et al.,
NSDI'23; docs/energy-models.md §4, docs/dvfs.md). Every (dataset, network, batch size, optimiser) configuration is
normalised to its own value at the GPU's maximum power limit; NCF/MovieLens is excluded (not GPU-bound). With
``p = PL / PLmax``::

    speed(p) = 1 - a * max(0, 1 - p/b)**2          relative throughput (1 / time_per_epoch)
    power(p) = 1 - k * max(0, 1 - p/q)             relative average power  (= min(1, c0 + c1*p))

Reading the traces, fitting the curves, and the stored fit (``dvfs_fit.json``, written by ``tools/fit_dvfs.py``).
What a power limit does to a job in a run is ``dvfs.py``'s.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..core.errors import InputError, WattschedError
from ..core.gpus import gpu_model
from ..data import registry

# ---------------------------------------------------------------------------------------------------------------
# Zeus power-limit curves
# ---------------------------------------------------------------------------------------------------------------

ZEUS_DATASET = "zeus-power"
ZEUS_GPUS = ("v100", "a40", "rtx6000", "p100")
GENERIC = "generic"
ZEUS_COLUMNS = (
    "dataset",
    "network",
    "batch_size",
    "optimizer",
    "power_limit",
    "time_per_epoch",
    "average_power",
)
EXCLUDED_WORKLOADS = (
    ("movielens-1m", "ncf"),
)  # not GPU-bound: 34-84 W at any limit (docs/energy-models.md §4)
FIT_FILE = "dvfs_fit.json"
FIT_SCHEMA = 1
SIGNIFICANT_DIGITS = 12  # stored floats are rounded so the JSON is byte-identical across platforms
OPTIMUM_DIVISIONS = 10_000  # the energy-optimal p search uses steps of 1e-4

# Catalog GPUs measured in the Zeus traces; every other catalog GPU uses the pooled "generic" fit.
ZEUS_CURVE_OF_GPU: dict[str, str] = {
    "V100": "v100",
    "V100M16": "v100",
    "V100M32": "v100",
    "V100-PCIE": "v100",
    "P100": "p100",
    "A40": "a40",
    "RTX6000": "rtx6000",
}


def zeus_file(gpu: str) -> str:
    return f"summary_power_{gpu}.csv"


@dataclass(frozen=True)
class PowerLimitCurve:
    """speed(p) and power(p) for p = PL/PLmax in [p_min, 1]."""

    a: float  # speed: depth of the quadratic drop
    b: float  # speed: knee (speed is 1 for p >= b)
    k: float  # power: drop from 1 at p = 0 on the linear branch (c0 = 1 - k)
    q: float  # power: knee (power is 1 for p >= q)
    p_min: float  # lowest fitted p; below it the curves are extrapolation and refused

    @property
    def c0(self) -> float:
        return 1.0 - self.k

    @property
    def c1(self) -> float:
        return self.k / self.q

    def speed(self, p: ArrayLike) -> np.ndarray:
        return 1.0 - self.a * np.maximum(0.0, 1.0 - np.asarray(p, dtype=np.float64) / self.b) ** 2

    def power(self, p: ArrayLike) -> np.ndarray:
        return 1.0 - self.k * np.maximum(0.0, 1.0 - np.asarray(p, dtype=np.float64) / self.q)

    def relative_energy(self, p: ArrayLike) -> np.ndarray:
        """Energy per unit of work relative to p = 1, with the measured (idle-inclusive) average power."""
        return self.power(p) / self.speed(p)

    def energy_optimal_p(self) -> float:
        grid = optimum_grid(self.p_min, 1.0)
        return float(grid[np.argmin(self.relative_energy(grid))])


def optimum_grid(lo: float, hi: float) -> np.ndarray:
    """lo, hi and the multiples of 1/OPTIMUM_DIVISIONS between them (integers first, so the grid is reproducible)."""
    first = math.ceil(lo * OPTIMUM_DIVISIONS - 1e-9)
    last = math.floor(hi * OPTIMUM_DIVISIONS + 1e-9)
    inner = np.arange(first, last + 1) / OPTIMUM_DIVISIONS
    return np.unique(np.concatenate([[lo], inner[(inner > lo) & (inner < hi)], [hi]]))


@dataclass(frozen=True)
class ZeusPoints:
    """Normalised points of one Zeus file (reference rows at p = 1 left out: they are 1 by construction)."""

    p: np.ndarray
    speed: np.ndarray
    power: np.ndarray
    config: np.ndarray  # configuration index of each point
    optimum_p: np.ndarray  # per configuration: measured p with the least energy per epoch
    power_limit_max_w: float
    rows: int
    rows_excluded: int  # excluded workloads
    configs_without_reference: int  # configurations lacking a row at the maximum limit (dropped)


def read_zeus_power(path: str | Path) -> ZeusPoints:
    """Read one ``summary_power_*.csv`` and normalise each configuration to its row at the maximum limit."""
    path = Path(path)
    groups: dict[tuple[str, str, str, str], list[tuple[float, float, float]]] = {}
    rows = excluded = 0
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in ZEUS_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(path, 1, None, f"missing column(s) {', '.join(missing)}")
        for row in reader:
            line = reader.line_num
            rows += 1
            if (row["dataset"], row["network"]) in EXCLUDED_WORKLOADS:
                excluded += 1
                continue
            values = []
            for field in ("power_limit", "time_per_epoch", "average_power"):
                try:
                    v = float(row[field])
                except (TypeError, ValueError):
                    raise InputError(path, line, field, f"not a number: {row[field]!r}") from None
                if not math.isfinite(v) or v <= 0:
                    raise InputError(path, line, field, f"must be a positive finite number, got {v!r}")
                values.append(v)
            key = (row["dataset"], row["network"], row["batch_size"], row["optimizer"])
            groups.setdefault(key, []).append((values[0], values[1], values[2]))
    if not groups:
        raise InputError(path, None, None, "no GPU-bound rows")
    pl_max = max(v[0] for g in groups.values() for v in g)
    p, s, w, cfg, optimum = [], [], [], [], []
    no_ref = 0
    for key in sorted(groups):
        limits = sorted(groups[key])
        if len({v[0] for v in limits}) != len(limits):
            raise InputError(path, None, "power_limit", f"duplicate power limit in configuration {key}")
        ref = limits[-1]
        if ref[0] != pl_max:
            no_ref += 1
            continue
        energy = [v[1] * v[2] for v in limits]  # time per epoch x average power
        optimum.append(limits[int(np.argmin(energy))][0] / pl_max)
        for pl, t, watts in limits[:-1]:
            p.append(pl / pl_max)
            s.append(ref[1] / t)
            w.append(watts / ref[2])
            cfg.append(len(optimum) - 1)
    if not p:
        raise InputError(path, None, None, "no configuration has points below the maximum power limit")
    return ZeusPoints(
        np.array(p),
        np.array(s),
        np.array(w),
        np.array(cfg),
        np.array(optimum),
        pl_max,
        rows,
        excluded,
        no_ref,
    )


def fit_knee(p: np.ndarray, y: np.ndarray, exponent: int, lo: float = 0.3) -> tuple[float, float]:
    """Least-squares fit of ``y = 1 - amp * max(0, 1 - p/knee)**exponent`` with amp >= 0, knee in [lo, 1].

    For a fixed knee the model is linear in amp (closed form); the knee is searched on a 1e-3 grid, then refined
    twice around the best value (1e-5, 1e-7). No randomness or iteration tolerance: a re-fit is bit-identical.
    """
    p = np.asarray(p, dtype=np.float64)
    r = 1.0 - np.asarray(y, dtype=np.float64)

    def profile(knees: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = np.maximum(0.0, 1.0 - p[None, :] / knees[:, None]) ** exponent
        sxx = np.einsum("ij,ij->i", x, x)
        amp = np.where(sxx > 0, np.einsum("ij,j->i", x, r) / np.where(sxx > 0, sxx, 1.0), 0.0)
        amp = np.maximum(amp, 0.0)
        resid = r[None, :] - amp[:, None] * x
        return amp, np.einsum("ij,ij->i", resid, resid)

    lo_i, hi_i = round(lo * 1000), 1000
    knees = np.arange(lo_i, hi_i + 1) / 1000.0
    amp, sse = profile(knees)
    best = int(np.argmin(sse))
    centre, step = knees[best], 1e-3
    for _ in range(2):
        fine = step / 100.0
        knees = centre + np.arange(-100, 101) * fine
        knees = knees[(knees >= lo - 1e-12) & (knees <= 1.0 + 1e-12)]
        knees = np.clip(knees, lo, 1.0)
        amp, sse = profile(knees)
        best = int(np.argmin(sse))
        centre, step = knees[best], fine
    return float(amp[best]), float(centre)


def _r2(y: np.ndarray, fitted: np.ndarray) -> float:
    sst = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum((y - fitted) ** 2)) / sst if sst > 0 else 1.0


def level_means(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each point replaced by the mean of y at its p: the least-squares best of ANY function of p alone."""
    _, inverse = np.unique(p, return_inverse=True)
    return (np.bincount(inverse, weights=y) / np.bincount(inverse))[inverse]


def fit_quality(p: np.ndarray, y: np.ndarray, fitted: np.ndarray) -> dict[str, float | int]:
    resid = y - fitted
    return {
        "n": int(y.size),
        "r2": _r2(y, fitted),
        "r2_best_function_of_p": _r2(y, level_means(p, y)),  # ceiling: the rest is spread between workloads
        "rmse": float(np.sqrt(np.mean(resid**2))),
        "max_abs_error": float(np.max(np.abs(resid))),
    }


def level_table(p: np.ndarray, speed: np.ndarray, power: np.ndarray, curve: PowerLimitCurve) -> list[dict]:
    """Measured mean and median per power-limit level next to the fitted curve."""
    out = []
    for level in np.unique(p):
        m = p == level
        s, w = speed[m], power[m]
        out.append(
            {
                "p": float(level),
                "n": int(m.sum()),
                "speed_mean": float(s.mean()),
                "speed_median": float(np.median(s)),
                "speed_fit": float(curve.speed(level)),
                "power_mean": float(w.mean()),
                "power_median": float(np.median(w)),
                "power_fit": float(curve.power(level)),
                "energy_median": float(np.median(w / s)),
                "energy_fit": float(curve.relative_energy(level)),
            }
        )
    return out


def fit_curve(p: np.ndarray, speed: np.ndarray, power: np.ndarray) -> PowerLimitCurve:
    a, b = fit_knee(p, speed, exponent=2)
    k, q = fit_knee(p, power, exponent=1)
    curve = PowerLimitCurve(a=a, b=b, k=min(k, 1.0), q=q, p_min=float(np.min(p)))
    if curve.speed(curve.p_min) <= 0:
        raise WattschedError(f"speed fit is not positive at p = {curve.p_min:.3f}: a = {a:.4g}, b = {b:.4g}")
    return curve


def _round(x: float) -> float:
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}")


def _rounded(obj: Any) -> Any:
    if isinstance(obj, float):
        return _round(obj)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


def _fit_entry(points: list[ZeusPoints], inputs: list[dict[str, Any]]) -> dict[str, Any]:
    p = np.concatenate([z.p for z in points])
    s = np.concatenate([z.speed for z in points])
    w = np.concatenate([z.power for z in points])
    optimum = np.concatenate([z.optimum_p for z in points])
    curve = fit_curve(p, s, w)
    entry = {
        "inputs": inputs,
        "configurations": int(optimum.size),
        "p_min": curve.p_min,
        "p_max": 1.0,
        "speed": {"a": curve.a, "b": curve.b, **fit_quality(p, s, curve.speed(p))},
        "power": {
            "k": curve.k,
            "q": curve.q,
            "c0": curve.c0,
            "c1": curve.c1,
            **fit_quality(p, w, curve.power(p)),
        },
        "energy_optimal_p_fit": curve.energy_optimal_p(),
        "energy_optimal_p_measured_median": float(np.median(optimum)),
    }
    if len(points) == 1:  # pooled levels mix GPUs with different maximum limits; a table would mislead
        entry["levels"] = level_table(p, s, w, curve)
    return entry


def fit_zeus_curves(data_dir: str | Path | None = None) -> dict[str, Any]:
    """Fit every Zeus GPU and the pooled generic curve; returns the ``dvfs_fit.json`` document."""
    per_gpu: dict[str, ZeusPoints] = {}
    inputs: dict[str, dict[str, Any]] = {}
    for gpu in ZEUS_GPUS:
        path = registry.locate(ZEUS_DATASET, zeus_file(gpu), data_dir)
        z = read_zeus_power(path)
        per_gpu[gpu] = z
        inputs[gpu] = {
            "file": f"{ZEUS_DATASET}/{zeus_file(gpu)}",
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "rows": z.rows,
            "rows_excluded_workloads": z.rows_excluded,
            "configurations_without_reference": z.configs_without_reference,
            "power_limit_max_w": z.power_limit_max_w,
        }
    fits = {gpu: _fit_entry([per_gpu[gpu]], [inputs[gpu]]) for gpu in ZEUS_GPUS}
    fits[GENERIC] = _fit_entry([per_gpu[g] for g in ZEUS_GPUS], [inputs[g] for g in ZEUS_GPUS])
    doc = {
        "schema": FIT_SCHEMA,
        "description": "Power-limit response curves fitted to the Zeus NSDI'23 traces (see docs/dvfs.md)",
        "source": "ml-energy/zeus examples/research_reproducibility/zeus_nsdi23/trace (Apache-2.0); "
        "You et al., NSDI'23",
        "generated_by": "python tools/fit_dvfs.py",
        "model": {
            "p": "power limit / maximum power limit of the GPU",
            "speed": "1 - a * max(0, 1 - p/b)^2",
            "power": "1 - k * max(0, 1 - p/q) = min(1, c0 + c1*p)",
            "normalisation": "each (dataset, network, batch_size, optimizer) divided by its own row at the "
            "maximum limit; speed = 1/time_per_epoch, power = average_power; reference rows not fitted",
            "excluded": [f"{d}/{n}" for d, n in EXCLUDED_WORKLOADS],
            "generic": "all four GPUs pooled, each normalised to its own maximum limit",
        },
        "fits": fits,
    }
    return _rounded(doc)


def fit_differences(new: Any, old: Any, tol: float = 1e-9, where: str = "") -> list[str]:
    """Differences between two fit documents: numbers beyond `tol` (absolute), anything else unequal."""
    if isinstance(new, Mapping) and isinstance(old, Mapping):
        out = [f"{where}/{k}: only in one document" for k in sorted(set(new) ^ set(old))]
        for k in new:
            if k in old:
                out += fit_differences(new[k], old[k], tol, f"{where}/{k}")
        return out
    if isinstance(new, list) and isinstance(old, list):
        if len(new) != len(old):
            return [f"{where}: {len(new)} items vs {len(old)}"]
        return [
            d
            for i, (x, y) in enumerate(zip(new, old, strict=True))
            for d in fit_differences(x, y, tol, f"{where}[{i}]")
        ]
    numbers = (int, float)
    if isinstance(new, numbers) and isinstance(old, numbers) and not isinstance(new, bool):
        return [] if abs(new - old) <= tol else [f"{where}: {new!r} vs {old!r}"]
    return [] if new == old else [f"{where}: {new!r} vs {old!r}"]


def format_fit_table(doc: Mapping[str, Any]) -> str:
    """The fit-quality table (markdown) of a fit document."""
    head = (
        "| curve | n | p range | speed a | speed b | speed R² | speed RMSE | speed max err | power c0 | power c1 "
        "| power knee q | power R² | power RMSE | power max err | E-opt p (fit) | E-opt p (measured median) |"
    )
    lines = [head, "|" + "---|" * 16]
    for name, f in doc["fits"].items():
        s, w = f["speed"], f["power"]
        lines.append(
            f"| {name} | {s['n']} | {f['p_min']:.3f}-{f['p_max']:.2f} | {s['a']:.4f} | {s['b']:.4f} | "
            f"{s['r2']:.3f} | {s['rmse']:.4f} | {s['max_abs_error']:.3f} | {w['c0']:.4f} | {w['c1']:.4f} | "
            f"{w['q']:.4f} | {w['r2']:.3f} | {w['rmse']:.4f} | {w['max_abs_error']:.3f} | "
            f"{f['energy_optimal_p_fit']:.3f} | {f['energy_optimal_p_measured_median']:.3f} |"
        )
    return "\n".join(lines)


def fit_json_text(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


@cache
def stored_fit() -> dict[str, Any]:
    """The committed ``dvfs_fit.json`` (package data)."""
    return json.loads(resources.files("wattsched.energy").joinpath(FIT_FILE).read_text(encoding="utf-8"))


def curve_from_fit(entry: Mapping[str, Any]) -> PowerLimitCurve:
    return PowerLimitCurve(
        a=entry["speed"]["a"],
        b=entry["speed"]["b"],
        k=entry["power"]["k"],
        q=entry["power"]["q"],
        p_min=entry["p_min"],
    )


@cache
def zeus_curve(name: str) -> PowerLimitCurve:
    """The stored curve 'v100', 'a40', 'rtx6000', 'p100' or 'generic'."""
    fits = stored_fit()["fits"]
    if name not in fits:
        raise WattschedError(f"no power-limit curve '{name}'; known: {', '.join(fits)}")
    return curve_from_fit(fits[name])


def response_source(gpu: str) -> str:
    """Which fitted Zeus curve a catalog GPU uses: its own measurements, or the pooled 'generic' fit."""
    gpu_model(gpu)  # unknown names raise UnknownNameError
    return ZEUS_CURVE_OF_GPU.get(gpu, GENERIC)
