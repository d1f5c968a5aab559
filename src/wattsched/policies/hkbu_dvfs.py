"""HKBU-DVFS: deadline-aware list scheduling with per-task DVFS and dynamic right-sizing (docs/hkbu.md §2).

Reimplemented from the description of Wang, Mei, Liu, Leung, Li, Chu, IEEE TPDS 2022 (arXiv 2104.00486) and the
facts of its simulator (`HKBU-HPML/GPU-DVFS-Job-Schedule`, `job_master.py`, `job.py`, `cluster.py`; no licence,
nothing copied):

* tasks are non-preemptive and each GPU runs its own FIFO list; tasks are taken by arrival, then in EDF (earliest
  deadline) or LPT (longest t̂ first) order;
* with DVFS, tasks arriving at tick 0 whose energy-optimal time fits their window ("deadline-prior") each get a GPU
  of their own on nodes switched on for them, as upstream does; the rest are list-scheduled;
* a GPU rule picks the GPU: SPT (earliest end; feasible when the slack holds t̂, or with DVFS t_θ), BF (the feasible
  GPU with the highest load), WF (the lowest load), FF (the first feasible) or BIN (online: WF at tick 0, then FF);
  for BF, WF, FF and BIN a GPU is feasible when the task fits there at t̂. A GPU's load is upstream's: the largest
  ratio, over its tasks, of its accumulated (ceiled) busy time to that task's deadline. If no GPU is feasible, a
  new node is switched on and its GPU 0 taken;
* with DVFS the task runs at its energy-optimal clocks when the slack allows (slack ≥ t̂), else at the least-energy
  clocks that fit the slack (``theta_adjust``, never below t_θ = max(θ t̂, t_min)); without DVFS at the default
  clocks;
* energy is the tasks' run energy Σ t·p, plus 85 W per powered GPU that is idle, plus 200 J per node switch-on;
  with DRS a node goes off after `drs_idle_ticks` idle ticks and is switched on again for its next task; without
  DRS every node switched on stays on to the makespan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import WattschedError
from ..energy.hkbu import HkbuSetting, energy_optimal_setting, minimum_time, theta_adjust
from ..workloads.hkbu_tasks import DvfsTask

IDLE_GPU_W = 85.0  # flat idle draw per powered GPU in the HKBU simulator
TURN_ON_J = 200.0  # energy of one node switch-on in the HKBU simulator
_EPS = 1e-9


@dataclass(frozen=True)
class ListConfig:
    order: str = "edf"  # edf | lpt
    gpu_rule: str = "spt"  # spt | bf | wf | ff | bin
    dvfs: bool = True
    drs: bool = True
    drs_idle_ticks: int = 5  # the simulator's default; its online experiments use 2
    tick_s: float = 1.0  # reconstructed: one tick of the upstream loop is one second here
    gpus_per_node: int = 16
    theta: float = (
        0.0  # t_θ = max(θ t̂, t_min); upstream scripts pass 1.0, which never θ-adjusts; 0: any clocks
    )
    dedicate_at_zero: bool = True  # upstream: with DVFS, fitting tasks at tick 0 get a GPU of their own
    idle_gpu_w: float = IDLE_GPU_W
    turn_on_j: float = TURN_ON_J

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise WattschedError(f"unknown job order '{self.order}'; choose one of {', '.join(ORDERS)}")
        if self.gpu_rule not in GPU_RULES:
            raise WattschedError(f"unknown GPU rule '{self.gpu_rule}'; choose one of {', '.join(GPU_RULES)}")
        if self.gpus_per_node < 1 or self.drs_idle_ticks < 0 or not self.tick_s > 0:
            raise WattschedError("gpus_per_node must be >= 1, drs_idle_ticks >= 0 and tick_s > 0")


@dataclass(frozen=True)
class Placed:
    task: DvfsTask
    node: int
    gpu: int
    start_s: float
    end_s: float
    power_w: float
    fc: float
    fm: float

    @property
    def energy_j(self) -> float:
        return (self.end_s - self.start_s) * self.power_w

    @property
    def met(self) -> bool:
        return self.end_s <= self.task.deadline_s + _EPS * max(1.0, self.task.deadline_s)


@dataclass
class ScheduleResult:
    config: ListConfig
    placed: list[Placed]
    nodes: int  # nodes ever switched on
    turn_ons: int
    run_j: float
    idle_j: float
    turn_on_energy_j: float
    makespan_s: float
    node_on_s: list[float] = field(default_factory=list)

    @property
    def energy_j(self) -> float:
        return self.run_j + self.idle_j + self.turn_on_energy_j

    @property
    def deadline_misses(self) -> int:
        return sum(not p.met for p in self.placed)

    @property
    def deadline_met_fraction(self) -> float:
        return 1.0 - self.deadline_misses / len(self.placed) if self.placed else 1.0


@dataclass(frozen=True)
class _Timing:
    """A task's clocks and times under the run's DVFS switch, in seconds."""

    t_hat: float  # at the preferred clocks (energy-optimal with DVFS, default without)
    t_floor: float  # the fastest it may be squeezed to (t_θ with DVFS, t* without)
    optimal: HkbuSetting | None = None  # the energy-optimal setting (with DVFS), solved once per task


def _timing(task: DvfsTask, cfg: ListConfig) -> _Timing:
    if not cfg.dvfs:
        return _Timing(task.t_star_s, task.t_star_s)
    optimal = energy_optimal_setting(task.model)
    t_hat = optimal.time * task.t_star_s
    t_min = minimum_time(task.model) * task.t_star_s
    return _Timing(t_hat, max(cfg.theta * t_hat, t_min), optimal)


def _clocks(
    task: DvfsTask, cfg: ListConfig, timing: _Timing, slack: float
) -> tuple[float, float, float, float]:
    """(time s, power W, fc, fm) for a task that starts with `slack` seconds to its deadline."""
    m = task.model
    if not cfg.dvfs:
        return task.t_star_s, m.p_star, 1.0, 1.0
    assert timing.optimal is not None  # `_timing` solves it whenever DVFS is on
    s = timing.optimal if slack >= timing.t_hat - _EPS else theta_adjust(slack / task.t_star_s, m)
    return s.time * task.t_star_s, s.power, s.fc, s.fm


# GPU rules: (end times, loads, feasible mask, the task's arrival) of every powered GPU -> index, or -1 for none.
GpuRule = Callable[[np.ndarray, np.ndarray, np.ndarray, float], int]


def _spt(ends: np.ndarray, loads: np.ndarray, feasible: np.ndarray, arrival: float) -> int:
    g = int(np.argmin(ends))  # the earliest end; a later one cannot be feasible if this one is not
    return g if feasible[g] else -1


def _best_fit(ends: np.ndarray, loads: np.ndarray, feasible: np.ndarray, arrival: float) -> int:
    idx = np.flatnonzero(feasible)
    return int(idx[np.argmax(loads[idx])]) if idx.size else -1


def _worst_fit(ends: np.ndarray, loads: np.ndarray, feasible: np.ndarray, arrival: float) -> int:
    idx = np.flatnonzero(feasible)
    return int(idx[np.argmin(loads[idx])]) if idx.size else -1


def _first_fit(ends: np.ndarray, loads: np.ndarray, feasible: np.ndarray, arrival: float) -> int:
    idx = np.flatnonzero(feasible)
    return int(idx[0]) if idx.size else -1


def _bin(ends: np.ndarray, loads: np.ndarray, feasible: np.ndarray, arrival: float) -> int:
    return (_worst_fit if arrival <= 0.0 else _first_fit)(ends, loads, feasible, arrival)


GPU_RULES: dict[str, GpuRule] = {
    "spt": _spt,
    "bf": _best_fit,
    "wf": _worst_fit,
    "ff": _first_fit,
    "bin": _bin,
}
ORDERS: dict[str, Callable[[DvfsTask, _Timing], float]] = {
    "edf": lambda task, timing: task.deadline_s,
    "lpt": lambda task, timing: -timing.t_hat,
}
# The paper's combinations (seed-systems §4.1): offline and online, each with DVFS and DRS on and off.
OFFLINE_ALGORITHMS = ("edf+spt", "edf+bf", "edf+wf", "lpt+ff")
ONLINE_ALGORITHMS = ("edf+spt", "edf+bin")


class _Gpus:
    """End time, accumulated busy time and load of every GPU of the nodes switched on so far."""

    def __init__(self, capacity: int, gpus_per_node: int):
        self.gpn = gpus_per_node
        self.ends = np.zeros(capacity)
        self.busy = np.zeros(capacity)
        self.loads = np.zeros(capacity)
        self.node_on_at: list[float] = []

    @property
    def powered(self) -> int:
        return len(self.node_on_at) * self.gpn

    def switch_on(self, at: float) -> int:
        """Switch a node on; its GPU 0."""
        self.node_on_at.append(at)
        return self.powered - self.gpn

    def take(self, g: int, task: DvfsTask, begin: float, run_s: float) -> None:
        self.ends[g] = begin + run_s
        self.busy[g] += math.ceil(run_s - _EPS)  # upstream accumulates whole ticks
        self.loads[g] = max(self.loads[g], self.busy[g] / task.deadline_s) if task.deadline_s > 0 else np.inf


def _feasible(cfg: ListConfig, gpus: _Gpus, task: DvfsTask, timing: _Timing) -> np.ndarray:
    slack = task.deadline_s - np.maximum(gpus.ends[: gpus.powered], task.arrival_s)
    # SPT may θ-adjust into a tight slack; the other rules fit the task at t̂ (upstream)
    need = timing.t_floor if cfg.gpu_rule == "spt" else timing.t_hat
    return slack >= need - _EPS * max(1.0, need)


def list_schedule(tasks: Sequence[DvfsTask], cfg: ListConfig | None = None) -> ScheduleResult:
    """Schedule every task (by arrival, then the job order) and account the energy."""
    cfg = cfg or ListConfig()
    if not tasks:
        raise WattschedError("no tasks to schedule")
    timings = [_timing(t, cfg) for t in tasks]
    rank = ORDERS[cfg.order]
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i].arrival_s, rank(tasks[i], timings[i]), i))
    gpus = _Gpus(len(tasks) * cfg.gpus_per_node, cfg.gpus_per_node)  # room for one new node per task
    placed: list[Placed] = []

    def run(i: int, g: int) -> None:
        task = tasks[i]
        begin = max(float(gpus.ends[g]), task.arrival_s)
        run_s, power_w, fc, fm = _clocks(task, cfg, timings[i], task.deadline_s - begin)
        gpus.take(g, task, begin, run_s)
        placed.append(
            Placed(task, g // cfg.gpus_per_node, g % cfg.gpus_per_node, begin, begin + run_s, power_w, fc, fm)
        )

    if cfg.dvfs and cfg.dedicate_at_zero:
        fitting = [
            i for i in order if tasks[i].arrival_s <= 0.0 and timings[i].t_hat <= tasks[i].window_s + _EPS
        ]
        first = 0
        for k, i in enumerate(fitting):  # GPU k of the fitting tasks: a new node every gpus_per_node tasks
            first = gpus.switch_on(0.0) if k % cfg.gpus_per_node == 0 else first
            run(i, first + k % cfg.gpus_per_node)
        dedicated = set(fitting)
        order = [i for i in order if i not in dedicated]
    rule = GPU_RULES[cfg.gpu_rule]
    for i in order:
        task = tasks[i]
        g = -1
        if gpus.powered:
            feasible = _feasible(cfg, gpus, task, timings[i])
            g = rule(gpus.ends[: gpus.powered], gpus.loads[: gpus.powered], feasible, task.arrival_s)
        if g < 0:  # nothing meets the deadline: switch a node on
            g = gpus.switch_on(task.arrival_s)
        run(i, g)
    return _account(cfg, placed, gpus.node_on_at)


def _account(cfg: ListConfig, placed: list[Placed], node_on_at: list[float]) -> ScheduleResult:
    """Idle energy of powered GPUs and switch-ons; with DRS a node is off after `drs_idle_ticks` idle ticks."""
    makespan = max(p.end_s for p in placed)
    gpn = cfg.gpus_per_node
    hold = cfg.drs_idle_ticks * cfg.tick_s
    by_node: list[list[tuple[float, float]]] = [[] for _ in node_on_at]
    busy = np.zeros(len(node_on_at))
    for p in placed:
        by_node[p.node].append((p.start_s, p.end_s))
        busy[p.node] += p.end_s - p.start_s
    on_s, turn_ons = [], 0
    for node, spans in enumerate(by_node):
        spans.sort()
        if not cfg.drs:
            on_s.append(makespan - node_on_at[node])
            turn_ons += 1
            continue
        total, turn_ons = 0.0, turn_ons + 1
        on_from, busy_until = node_on_at[node], node_on_at[node]
        for start, end in spans:
            if start - busy_until > hold + _EPS:  # idle long enough to go off; back on for this task
                total += busy_until + hold - on_from
                on_from, turn_ons = start, turn_ons + 1
            busy_until = max(busy_until, end)
        total += busy_until + hold - on_from
        on_s.append(total)
    idle_j = float(sum(on * gpn for on in on_s) - busy.sum()) * cfg.idle_gpu_w
    return ScheduleResult(
        config=cfg,
        placed=placed,
        nodes=len(node_on_at),
        turn_ons=turn_ons,
        run_j=float(sum(p.energy_j for p in placed)),
        idle_j=idle_j,
        turn_on_energy_j=turn_ons * cfg.turn_on_j,
        makespan_s=makespan,
        node_on_s=on_s,
    )
