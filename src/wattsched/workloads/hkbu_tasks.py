"""Synthetic DVFS task sets for the HKBU list scheduler (docs/hkbu.md §1).

Wang, Mei, Liu, Leung, Li, Chu, IEEE TPDS 2022 (arXiv 2104.00486) schedule tasks whose time and power follow the
HKBU clock model (docs/dvfs.md §3): t(fc, fm) = t0 + D (δ/fc + (1 − δ)/fm), P = p0 + γ fm + cg Vc² fc. Their
simulator (`HKBU-HPML/GPU-DVFS-Job-Schedule`, `job_master.py` `job_generator.random_generate`; no licence, nothing
copied) draws a task set as follows, and so does this module:

* the set's utilisation U (0.2 to 1.6) sets its size: round(U × GPUs) tasks for a cluster of GPUs (2,048 upstream);
* each task's deadline is arrival + t*/u with its own u uniform in [0.3, 0.7];
* t* = (an integer 20..30) × (an integer 1..10) ticks; t0 = ceil(t* × uniform(0.06, 0.89)); δ uniform(0.07, 0.91);
* P* = (an integer 50..150) × 3 W offline, × 2 online; p0 = P* × uniform(0.20, 0.41), γ = P* × uniform(0.1, 0.2),
  cg = P* − p0 − γ (so the core clock carries 39 to 70 % of the power); the Vc grid is 0.5..1.25 for every task;
* offline sets arrive at tick 0; online sets have 0.4 × GPUs tasks at tick 0, then round(U × GPUs) tasks spread
  over ticks 1..1439 as Poisson counts whose total is exactly that number (upstream redraws until the sum matches;
  a multinomial draw is the same conditional distribution).

That is the task model `tpds-synthetic`. The task models `2070S` and `1080Ti` keep the same times, sizes, arrivals
and deadlines but take the clock model from the fits on the upstream measurements (docs/energy-models.md §5): δ and
p0 uniform between their 10th and 90th percentiles, t0/t*, γ and cg at their medians, the GPU's own Vc grid.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..core.errors import WattschedError
from ..energy.hkbu import HKBU_1080TI_MEDIAN, HKBU_2070S_MEDIAN, HkbuParams

# Fitted task models: the median model and the p10-p90 ranges of δ and p0 (docs/energy-models.md §5).
HKBU_GPUS: dict[str, tuple[HkbuParams, tuple[float, float], tuple[float, float]]] = {
    "2070S": (HKBU_2070S_MEDIAN, (0.00, 0.96), (50.0, 107.0)),
    "1080Ti": (HKBU_1080TI_MEDIAN, (0.00, 1.00), (55.0, 150.0)),
}
TPDS_SYNTHETIC = "tpds-synthetic"
TASK_MODELS = (*HKBU_GPUS, TPDS_SYNTHETIC)

UPSTREAM_GPUS = 2048  # the upstream simulator's cluster size
TASK_UTILISATION_RANGE = (0.3, 0.7)  # per-task u: deadline = arrival + t*/u
ONLINE_TICKS = 1440  # one day of one-minute ticks upstream
ONLINE_INITIAL_SHARE = 0.4  # tasks at tick 0 of an online set, per GPU
UTILISATIONS = tuple(round(0.2 * i, 1) for i in range(1, 9))  # 0.2 .. 1.6, the paper's sweep


@dataclass(frozen=True)
class DvfsTask:
    """One non-preemptive task: its arrival, deadline and clock model (times in ticks, model scaled to t*)."""

    name: str
    arrival_s: float
    deadline_s: float
    t_star_s: float
    model: HkbuParams  # normalised: t(1, 1) = t0 + D = 1; multiply times by t_star_s

    @property
    def window_s(self) -> float:
        return self.deadline_s - self.arrival_s


def _arrivals(rng: np.random.Generator, num_tasks: int, gpus: int, online: bool) -> np.ndarray:
    if not online:
        return np.zeros(num_tasks)
    initial = int(ONLINE_INITIAL_SHARE * gpus)
    per_tick = rng.multinomial(num_tasks, np.full(ONLINE_TICKS - 1, 1.0 / (ONLINE_TICKS - 1)))
    later = np.repeat(np.arange(1, ONLINE_TICKS), per_tick)
    return np.concatenate([np.zeros(initial), later]).astype(float)


def _fitted_models(rng, gpu: str, n: int) -> list[HkbuParams]:
    median, delta_range, p0_range = HKBU_GPUS[gpu]
    delta = rng.uniform(*delta_range, size=n)
    p0 = rng.uniform(*p0_range, size=n)
    return [
        replace(median, delta=float(d), p0=float(p), label=f"{gpu} fitted")
        for d, p in zip(delta, p0, strict=True)
    ]


def _tpds_models(rng, t_star: np.ndarray, online: bool) -> list[HkbuParams]:
    n = t_star.size
    t0 = np.ceil(t_star * rng.uniform(0.06, 0.89, size=n)) / t_star  # normalised: t0 + D = 1
    delta = rng.uniform(0.07, 0.91, size=n)
    p_star = rng.integers(50, 151, size=n) * (2.0 if online else 3.0)
    p0 = p_star * rng.uniform(0.20, 0.41, size=n)
    gamma = p_star * rng.uniform(0.1, 0.2, size=n)
    cg = p_star - p0 - gamma
    return [
        HkbuParams(float(a), float(1.0 - a), float(d), float(p), float(g), float(c), 16, TPDS_SYNTHETIC)
        for a, d, p, g, c in zip(t0, delta, p0, gamma, cg, strict=True)
    ]


def synthetic_task_set(
    utilisation: float,
    task_model: str = "2070S",
    gpus: int = UPSTREAM_GPUS,
    online: bool = False,
    seed: int = 0,
) -> list[DvfsTask]:
    """A task set of round(`utilisation` × `gpus`) tasks (plus 0.4 × `gpus` at tick 0 when `online`), drawn as the
    upstream simulator draws them, with the clock model of `task_model` (2070S, 1080Ti or tpds-synthetic)."""
    if task_model not in TASK_MODELS:
        raise WattschedError(
            f"unknown HKBU task model '{task_model}'; choose one of {', '.join(TASK_MODELS)}"
        )
    if not utilisation > 0:
        raise WattschedError(f"utilisation U must be positive, got {utilisation}")
    if gpus < 1:
        raise WattschedError(f"a task set needs a cluster of at least one GPU, got {gpus}")
    rng = np.random.default_rng(seed)
    num_tasks = round(utilisation * gpus)
    if num_tasks < 1:
        raise WattschedError(f"U = {utilisation} on {gpus} GPUs gives no task; raise --gpus or U")
    arrival = _arrivals(rng, num_tasks, gpus, online)
    n = arrival.size
    t_star = (rng.integers(20, 31, size=n) * rng.integers(1, 11, size=n)).astype(float)
    task_u = rng.uniform(*TASK_UTILISATION_RANGE, size=n)
    models = (
        _tpds_models(rng, t_star, online)
        if task_model == TPDS_SYNTHETIC
        else _fitted_models(rng, task_model, n)
    )
    return [
        DvfsTask(
            f"task-{i}",
            float(arrival[i]),
            float(arrival[i] + t_star[i] / task_u[i]),
            float(t_star[i]),
            models[i],
        )
        for i in range(n)
    ]
