"""Synthetic DVFS task sets for the HKBU list scheduler (docs/hkbu.md §1).

Wang, Mei, Liu, Leung, Li, Chu, IEEE TPDS 2022 (arXiv 2104.00486) schedule tasks whose time and power follow the
HKBU clock model (docs/dvfs.md §3): t(fc, fm) = t0 + D (δ/fc + (1 − δ)/fm), P = p0 + γ fm + cg Vc² fc. A task has an
arrival, a time at the default clocks t*, and a deadline d = a + t*/U, where U (0.2 to 1.6) sets how tight the
deadlines are.

The task parameters are drawn from the ranges fitted on the upstream measurements (docs/energy-models.md §5):
δ and p0 uniformly between their 10th and 90th percentiles, t0/t*, γ and cg at their medians. Reconstructed (the
paper's own draws are not published): t* uniform in [10, 100] s, and online arrivals as a Poisson process whose rate
keeps `gpus` GPUs busy at default clocks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..core.errors import WattschedError
from ..energy.dvfs import HKBU_1080TI_MEDIAN, HKBU_2070S_MEDIAN, HkbuParams

# Per GPU: the median model and the p10-p90 ranges of δ and p0 (docs/energy-models.md §5).
HKBU_GPUS: dict[str, tuple[HkbuParams, tuple[float, float], tuple[float, float]]] = {
    "2070S": (HKBU_2070S_MEDIAN, (0.00, 0.96), (50.0, 107.0)),
    "1080Ti": (HKBU_1080TI_MEDIAN, (0.00, 1.00), (55.0, 150.0)),
}
T_STAR_RANGE_S = (10.0, 100.0)  # reconstructed


@dataclass(frozen=True)
class DvfsTask:
    """One non-preemptive task: its arrival, deadline and clock model (times in s, model scaled to t*)."""

    name: str
    arrival_s: float
    deadline_s: float
    t_star_s: float
    model: HkbuParams  # normalised: t(1, 1) = t0 + D = 1; multiply times by t_star_s

    @property
    def window_s(self) -> float:
        return self.deadline_s - self.arrival_s


def synthetic_task_set(
    num_tasks: int,
    utilisation: float,
    gpu: str = "2070S",
    seed: int = 0,
    online_gpus: int | None = None,
) -> list[DvfsTask]:
    """`num_tasks` tasks with deadlines at arrival + t*/U. Offline (all arrive at 0) unless `online_gpus` is given:
    then Poisson arrivals at the rate that keeps that many GPUs busy at default clocks."""
    if gpu not in HKBU_GPUS:
        raise WattschedError(f"unknown HKBU GPU '{gpu}'; choose one of {', '.join(HKBU_GPUS)}")
    if not utilisation > 0:
        raise WattschedError(f"utilisation U must be positive, got {utilisation}")
    if num_tasks < 1:
        raise WattschedError(f"a task set needs at least one task, got {num_tasks}")
    median, delta_range, p0_range = HKBU_GPUS[gpu]
    rng = np.random.default_rng(seed)
    t_star = rng.uniform(*T_STAR_RANGE_S, size=num_tasks)
    delta = rng.uniform(*delta_range, size=num_tasks)
    p0 = rng.uniform(*p0_range, size=num_tasks)
    if online_gpus is None:
        arrival = np.zeros(num_tasks)
    else:
        if online_gpus < 1:
            raise WattschedError(f"online_gpus must be at least 1, got {online_gpus}")
        mean_gap = float(np.mean(T_STAR_RANGE_S)) / online_gpus
        arrival = np.cumsum(rng.exponential(mean_gap, size=num_tasks)) - mean_gap
        arrival = np.maximum(arrival, 0.0)
    return [
        DvfsTask(
            name=f"task-{i}",
            arrival_s=float(arrival[i]),
            deadline_s=float(arrival[i] + t_star[i] / utilisation),
            t_star_s=float(t_star[i]),
            model=replace(median, delta=float(delta[i]), p0=float(p0[i]), label=f"{gpu} task model"),
        )
        for i in range(num_tasks)
    ]
