"""CE-DLA-reconstructed, the exact planner: one mixed-integer linear program over hourly slots (docs/cedla.md §3).

Given nodes (GPUs, draw when on, draw per busy GPU), hourly prices, training jobs (work in GPU-hours, the GPUs they
may use, arrival and deadline slots) and inference services (GPUs needed per slot from the M/M/c sizing), choose
per slot how many GPUs each job and service holds on each node and which nodes are on, at least electricity cost.
Solved with HiGHS through ``scipy.optimize.milp``.

Variables (all per slot t, per group g of identical nodes): ``x[j,g,t]`` integer GPUs of training job j on the
group's nodes; ``z[i,g,t]`` integer GPUs of service i; ``y[g,t]`` integer nodes on; ``s[g,t]`` nodes switched on
in slot t.

Objective: ``sum_t price_t * PUE * (sum_g (y P_on + s E_boot/dt) + sum_{j,g} x dP_j + sum_{i,g} z dP_i) * dt``.

Constraints: work ``sum_{n,t} x[j,n,t] * dt >= W_j`` inside the job's window; at most the job's GPUs per slot;
services ``sum_g z[i,g,t] >= D_i,t``; capacity ``sum_j x + sum_i z <= G y - (G - floor(G (1 - b))) s`` (a node
booting in a slot keeps only the whole GPUs of the rest of it, b = boot time / slot); start-ups
``s[g,t] >= y[g,t] - y[g,t-1]``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ...core.errors import WattschedError


class InfeasiblePlan(WattschedError):
    """The instance has no plan that meets every deadline and SLO."""


@dataclass(frozen=True)
class PlanInstance:
    """A planning problem in slots of `slot_h` hours. Arrays are indexed [node], [slot], [job], [service]."""

    gpus: np.ndarray  # [N] GPUs per node
    node_on_w: np.ndarray  # [N] draw of a powered-on node with every GPU idle (base + CPU + idle GPUs)
    boot_j: np.ndarray  # [N] energy of one switch-on
    boot_share: np.ndarray  # [N] share of a slot a switch-on takes (boot time / slot length)
    price: np.ndarray  # [T] $/kWh
    job_work_gpu_h: np.ndarray  # [J] work in GPU-hours at full speed
    job_max_gpus: np.ndarray  # [J] GPUs a job may hold at once
    job_first_slot: np.ndarray  # [J] first slot it may run in (arrival)
    job_deadline_slot: np.ndarray  # [J] slots before this one (exclusive end)
    job_busy_w: np.ndarray  # [J] draw above idle of one of its busy GPUs
    service_gpus: np.ndarray  # [I, T] GPUs each service needs per slot
    service_busy_w: np.ndarray  # [I] draw above idle of one serving GPU
    initially_on: np.ndarray  # [N] bool: on before slot 0
    slot_h: float = 1.0
    pue: float = 1.0
    job_names: tuple[str, ...] = ()
    service_names: tuple[str, ...] = ()

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return len(self.gpus), len(self.price), len(self.job_work_gpu_h), len(self.service_busy_w)

    def job_name(self, j: int) -> str:
        return self.job_names[j] if j < len(self.job_names) else f"job {j}"

    def check(self) -> None:
        """Infeasibility that needs no solver, named: a job that cannot finish in its window even on all the GPUs
        it may use, or a slot whose service demand exceeds the cluster."""
        _, slots, _, _ = self.shape
        total = float(self.gpus.sum())
        windows = np.maximum(np.minimum(self.job_deadline_slot, slots) - self.job_first_slot, 0)
        most = windows * np.minimum(self.job_max_gpus.astype(float), total) * self.slot_h
        for j in np.flatnonzero(self.job_work_gpu_h > most + 1e-9)[:1].tolist():
            raise InfeasiblePlan(
                f"{self.job_name(j)}: needs {self.job_work_gpu_h[j]:g} GPU-hours but its window of {windows[j]} "
                f"slot(s) allows at most {most[j]:g} (at most {self.job_max_gpus[j]:g} GPUs at once): the "
                "deadline is shorter than the job at full speed"
            )
        need = self.service_gpus.sum(axis=0) if self.service_gpus.size else np.zeros(slots)
        for t in np.flatnonzero(need > total):
            raise InfeasiblePlan(f"slot {t}: the services need {need[t]:g} GPUs, the cluster has {total:g}")


@dataclass
class Plan:
    job_gpus: np.ndarray  # [J, N, T]
    service_gpus: np.ndarray  # [I, N, T]
    node_on: np.ndarray  # [N, T] bool
    cost_usd: float
    energy_kwh: float
    status: str
    solve_s: float
    mip_gap: float


def plan_cost(inst: PlanInstance, job_gpus, service_gpus, node_on) -> tuple[float, float]:
    """(cost $, energy kWh) of a plan under the instance's prices: the objective, evaluated directly."""
    on = np.asarray(node_on, dtype=float)
    prev = np.concatenate([inst.initially_on.astype(float)[:, None], on[:, :-1]], axis=1)
    starts = np.maximum(on - prev, 0.0)
    watts = (on * inst.node_on_w[:, None]).sum(axis=0)  # [T]
    watts = watts + np.einsum("jnt,j->t", np.asarray(job_gpus, dtype=float), inst.job_busy_w)
    watts = watts + np.einsum("int,i->t", np.asarray(service_gpus, dtype=float), inst.service_busy_w)
    boot_kwh = (starts * inst.boot_j[:, None]).sum(axis=0) / 3.6e6
    kwh = inst.pue * (watts * inst.slot_h / 1000.0 + boot_kwh)
    return float((kwh * inst.price).sum()), float(kwh.sum())


def boot_loss(inst: PlanInstance, node: int) -> int:
    """GPUs a node cannot use in the slot it boots in: it keeps only the whole GPUs of the rest of the slot."""
    g = int(inst.gpus[node])
    return g - math.floor(g * (1.0 - float(inst.boot_share[node])) + 1e-9)


def node_groups(inst: PlanInstance) -> list[list[int]]:
    """Nodes that differ in nothing the plan sees (GPUs, draws, boot, initial state), in index order."""
    if not len(inst.gpus):
        return []
    keys = np.stack([inst.gpus, inst.node_on_w, inst.boot_j, inst.boot_share, inst.initially_on], axis=1)
    keys = keys.astype(float)
    if np.isnan(keys).any():  # (np.unique's view of NaN rows)
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    else:  # the same groups from one sort of the rows (several times faster: this runs once per hourly plan)
        order = np.lexsort(keys.T[::-1])
        rows = keys[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (rows[1:] != rows[:-1]).any(axis=1)
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[order] = np.cumsum(new) - 1
        first = np.minimum.reduceat(order, np.flatnonzero(new))
    return [np.flatnonzero(inverse == k).tolist() for k in np.argsort(first)]  # by first node


def solve_milp(inst: PlanInstance, time_limit_s: float = 60.0, mip_rel_gap: float = 1e-4) -> Plan:
    """The least-cost plan (HiGHS; optimal within `mip_rel_gap`). Raises InfeasiblePlan, naming the job or slot
    where it can tell.

    Identical nodes are interchangeable slot by slot (a job's GPUs may sit on any nodes in a slot), and keeping the
    same nodes on minimises switch-ons, so the program is solved per group of identical nodes: how many nodes of
    the group are on (integer), and how many of its GPUs each job and service holds. This is the same optimum
    without the nodes' permutations; the plan is then laid out on the group's first nodes.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    inst.check()
    _, slots, jobs, services = inst.shape
    groups = node_groups(inst)
    ng = len(groups)
    first = [g[0] for g in groups]
    count = np.array([len(g) for g in groups], dtype=float)
    gpus = inst.gpus[first].astype(float)
    nx, nz, ny = jobs * ng * slots, services * ng * slots, ng * slots
    ox, oz, oy, os_ = 0, nx, nx + nz, nx + nz + ny
    size = nx + nz + 2 * ny

    def xi(j, g, t):
        return ox + (j * ng + g) * slots + t

    def zi(i, g, t):
        return oz + (i * ng + g) * slots + t

    def yi(g, t):
        return oy + g * slots + t

    def si(g, t):
        return os_ + g * slots + t

    dt = inst.slot_h
    per_w = inst.price * inst.pue / 1000.0 * dt  # $ per W held for one slot
    c = np.zeros(size)
    lo, hi = np.zeros(size), np.full(size, np.inf)
    for g in range(ng):
        for t in range(slots):
            c[yi(g, t)] = per_w[t] * inst.node_on_w[first[g]]
            c[si(g, t)] = inst.price[t] * inst.pue * inst.boot_j[first[g]] / 3.6e6
            hi[yi(g, t)] = count[g]
    for j in range(jobs):
        start, end = int(inst.job_first_slot[j]), int(min(inst.job_deadline_slot[j], slots))
        for g in range(ng):
            for t in range(slots):
                c[xi(j, g, t)] = per_w[t] * inst.job_busy_w[j]
                hi[xi(j, g, t)] = min(inst.job_max_gpus[j], gpus[g] * count[g]) if start <= t < end else 0.0
    for i in range(services):
        for g in range(ng):
            for t in range(slots):
                c[zi(i, g, t)] = per_w[t] * inst.service_busy_w[i]
    integrality = np.ones(size)  # switch-ons too: a booting node loses whole GPUs

    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    rlo: list[float] = []
    rhi: list[float] = []

    def row(entries, low, high):
        r = len(rlo)
        for col, val in entries:
            rows.append(r)
            cols.append(col)
            vals.append(val)
        rlo.append(low)
        rhi.append(high)

    for j in range(jobs):  # work by the deadline, and at most the job's GPUs at once
        row([(xi(j, g, t), dt) for g in range(ng) for t in range(slots)], inst.job_work_gpu_h[j], np.inf)
        for t in range(slots):
            row([(xi(j, g, t), 1.0) for g in range(ng)], 0.0, float(inst.job_max_gpus[j]))
    for i in range(services):  # SLO capacity every slot
        for t in range(slots):
            row([(zi(i, g, t), 1.0) for g in range(ng)], float(inst.service_gpus[i, t]), np.inf)
    for g in range(ng):
        # A node booting in a slot can use only the whole GPUs of the rest of it.
        lost = float(boot_loss(inst, first[g]))
        was_on = float(inst.initially_on[first[g]]) * count[g]
        for t in range(slots):  # GPUs of powered-on nodes, minus the booting nodes' share of the slot
            entries = [(xi(j, g, t), 1.0) for j in range(jobs)] + [
                (zi(i, g, t), 1.0) for i in range(services)
            ]
            entries += [(yi(g, t), -gpus[g]), (si(g, t), lost)]
            row(entries, -np.inf, 0.0)
            if t == 0:  # switch-ons: s >= on(t) - on(t-1)
                row([(si(g, 0), 1.0), (yi(g, 0), -1.0)], -was_on, np.inf)
            else:
                row([(si(g, t), 1.0), (yi(g, t), -1.0), (yi(g, t - 1), 1.0)], 0.0, np.inf)
    a = coo_array((vals, (rows, cols)), shape=(len(rlo), size)).tocsr()
    started = time.perf_counter()
    res = milp(
        c,
        constraints=LinearConstraint(a, rlo, rhi),
        integrality=integrality,
        bounds=Bounds(lo, hi),
        options={"time_limit": float(time_limit_s), "mip_rel_gap": float(mip_rel_gap), "disp": False},
    )
    solve_s = time.perf_counter() - started
    if res.x is None:
        if res.status == 2:
            raise InfeasiblePlan(f"no plan meets every deadline and SLO ({res.message})")
        raise WattschedError(f"the MILP solver stopped without a plan: {res.message}")
    v = np.round(res.x)
    job_gpus, service_gpus, node_on = lay_out(
        inst, groups, v[ox : ox + nx].reshape(jobs, ng, slots), v[oz : oz + nz].reshape(services, ng, slots),
        v[oy : oy + ny].reshape(ng, slots),
    )  # fmt: skip
    cost, kwh = plan_cost(inst, job_gpus, service_gpus, node_on)
    gap = float(getattr(res, "mip_gap", 0.0) or 0.0)
    status = "optimal" if res.status == 0 else "time limit"
    return Plan(job_gpus, service_gpus, node_on, cost, kwh, status, solve_s, gap)


def lay_out(inst: PlanInstance, groups, x, z, on_count):
    """Per-group counts onto nodes: a group's first `on` nodes are on (the ones on longest stay on); jobs, then
    services, fill their GPUs node by node (booting nodes last, with their usable share)."""
    n_nodes, slots, jobs, services = inst.shape
    job_gpus = np.zeros((jobs, n_nodes, slots))
    service_gpus = np.zeros((services, n_nodes, slots))
    node_on = np.zeros((n_nodes, slots), dtype=bool)
    for g, nodes in enumerate(groups):
        for t in range(slots):
            k = int(on_count[g, t])
            node_on[nodes[:k], t] = True
            free = [float(inst.gpus[n]) for n in nodes[:k]]
            prev = int(on_count[g, t - 1]) if t else (len(nodes) if inst.initially_on[nodes[0]] else 0)
            for idx in range(min(prev, k), k):  # switched on in this slot
                free[idx] -= boot_loss(inst, nodes[idx])
            for amounts, out in ((x[:, g, t], job_gpus), (z[:, g, t], service_gpus)):
                for who, need in enumerate(amounts):
                    idx = 0
                    while need > 0 and idx < k:
                        take = min(need, free[idx])
                        out[who, nodes[idx], t] += take
                        free[idx] -= take
                        need -= take
                        idx += 1
    return job_gpus, service_gpus, node_on


def random_instance(seed: int, nodes: int = 20, slots: int = 48, jobs: int = 50) -> PlanInstance:
    """A seeded synthetic instance (benchmarks and tests): nodes of 8 GPUs, a daily sine-shaped price with noise,
    jobs of 2-40 GPU-hours on 1-8 GPUs with windows of 12 slots or more, two services with a diurnal demand."""
    rng = np.random.default_rng(seed)
    hours = np.arange(slots)
    price = 0.10 + 0.06 * np.sin(2 * np.pi * (hours - 8) / 24) + rng.normal(0, 0.01, slots)
    gpus = rng.choice([1, 2, 4, 8], size=jobs, p=[0.4, 0.2, 0.2, 0.2])
    first = rng.integers(0, slots // 2, size=jobs)
    window = rng.integers(12, slots + 1, size=jobs)
    deadline = np.minimum(first + window, slots)
    span = deadline - first
    work = np.minimum(rng.uniform(2, 40, size=jobs), 0.6 * span * gpus).round(1)
    demand = np.round(4 + 3 * np.sin(2 * np.pi * (hours - 14) / 24)).astype(int)
    return PlanInstance(
        gpus=np.full(nodes, 8),
        node_on_w=np.full(nodes, 100 + 2 * 15 + 8 * 30.0),
        boot_j=np.full(nodes, 300.0 * 120),
        boot_share=np.full(nodes, 120 / 3600),
        price=np.maximum(price, 0.01),
        job_work_gpu_h=work,
        job_max_gpus=gpus,
        job_first_slot=first,
        job_deadline_slot=deadline,
        job_busy_w=rng.uniform(150, 250, size=jobs),
        service_gpus=np.vstack([demand, np.maximum(demand - 2, 0)]),
        service_busy_w=np.array([120.0, 180.0]),
        initially_on=np.zeros(nodes, dtype=bool),
    )
