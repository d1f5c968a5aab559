"""HKBU-OnlinePD-reconstructed: online admission and scheduling of deadline jobs by a primal-dual algorithm with
exponential GPU-slot prices, and the offline optimum of the same integer program (docs/hkbu-online-pd.md).

Sources. The HKBU project description (RGC 12200418, "Energy-efficient Training of Multiple Deep Learning Models
on GPU Clusters") asks for resource allocation and task scheduling as an ILP solved online by a primal-dual
algorithm; no code or paper of it exists, so this is a reconstruction. Template: OASiS (Y. Bao, Y. Peng, C. Wu,
Z. Li, "Online Job Scheduling in Distributed Machine Learning Clusters", INFOCOM 2018): one primal variable per
(job, schedule), job surplus as the dual of "at most one schedule", resource prices raised exponentially with
utilisation. The price function and the allocation-payment argument follow N. Buchbinder and J. Naor, "The Design
of Competitive Online Algorithms via a Primal-Dual Approach" (FnT TCS 3(2-3), 2009) and Awerbuch, Azar, Plotkin
(FOCS 1993). Clock levels use the HKBU DVFS model (Wang et al., IEEE TPDS 2022) as ``energy.dvfs`` implements it.

The formulation (all of it is stated, with the proof of the bound, in docs/hkbu-online-pd.md):

* slots of ``slot_s`` seconds, GPU types k with capacity ``capacity[k, t]`` GPUs;
* job j: arrival a, work W (GPU-seconds at the default clock on a speed-1 GPU), deadline d, value per GPU-second
  of work beta; a schedule is (type k, GPUs g, clock v, start): it runs W tau_v / (g speed_k) seconds on g GPUs
  from its start (the arrival itself or a later slot boundary) and holds g GPUs in every slot it overlaps;
* net value w = u - E with u = beta W (1 - lam (T - a) / (d - a)) for completion T <= d, and E = energy x price;
* a schedule is offered only if w >= L x (GPU-slots it holds) and it spans at most ``max_span_slots`` slots,
  which makes w <= V x g with V = beta_max x speed_max x slot_s x max_span_slots;
* prices p = (L / 2 eta) (B^(y / C') - 1), B = 1 + 2 eta V / L, C' = C - g_max + 1 (y: GPUs allocated).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..core.errors import WattschedError
from ..energy.dvfs import SM_CLOCK_MODEL_MIN
from ..energy.hkbu import HKBU_DEFAULT, HkbuParams, sm_clock_curve

LABEL = "HKBU-OnlinePD-reconstructed"
_EPS = 1e-9


@dataclass(frozen=True)
class ClockLevels:
    """A small set of SM-clock levels: fraction of the maximum clock, run-time factor tau >= 1 and the scale of the
    GPU's dynamic power (busy minus idle), both from the HKBU model (``energy.dvfs.sm_clock_curve``)."""

    fraction: np.ndarray  # [V], ascending; the last one is 1.0 (the default clock)
    time_factor: np.ndarray  # [V] tau_v = t(f, 1) / t(1, 1)
    power_scale: np.ndarray  # [V]

    def __len__(self) -> int:
        return int(self.fraction.size)


def clock_levels(
    fractions: Sequence[float] = (0.7, 0.8, 0.9, 1.0), params: HkbuParams = HKBU_DEFAULT
) -> ClockLevels:
    f = np.unique(np.asarray(fractions, dtype=np.float64))
    if f.size == 0 or f[0] < SM_CLOCK_MODEL_MIN - _EPS or f[-1] > 1.0 + _EPS or f[-1] < 1.0 - _EPS:
        raise WattschedError(
            f"clock levels must lie in [{SM_CLOCK_MODEL_MIN}, 1] and include 1.0 (the default clock), got "
            f"{', '.join(f'{x:g}' for x in f)}"
        )
    speed, scale = sm_clock_curve(f, params)
    return ClockLevels(f, 1.0 / speed, scale)


@dataclass(frozen=True)
class Formulation:
    """The resources, the price of energy and the schedule rules shared by the online algorithm and the ILP."""

    slot_s: float
    capacity: np.ndarray  # [K, T] GPUs of type k powered on in slot t
    idle_w: np.ndarray  # [K] draw of an idle GPU
    busy_w: np.ndarray  # [K] draw of a busy GPU at the default clock
    clocks: ClockLevels
    energy_usd_per_j: float | np.ndarray  # $ per joule: one price, or one per slot [T]
    density_floor: float  # L: least net value per GPU-slot of an offered schedule ($)
    value_per_gpu_max: float  # V: largest net value per GPU of any schedule ($), a priori
    max_span_slots: int  # longest schedule, in slots (what makes V a bound)
    max_gpus: np.ndarray  # [K] g_max: most GPUs one job may take of type k
    lateness_weight: float = 0.5  # lam: share of the value lost by finishing at the deadline

    def __post_init__(self) -> None:
        cap = np.asarray(self.capacity)
        if cap.ndim != 2 or cap.shape[1] == 0:
            raise WattschedError("capacity must be a [GPU types, slots] array with at least one slot")
        if not (self.slot_s > 0 and self.density_floor > 0 and self.value_per_gpu_max > 0):
            raise WattschedError("slot length, density floor L and value bound V must be positive")
        if self.value_per_gpu_max < self.density_floor:
            raise WattschedError(
                f"V = {self.value_per_gpu_max:g} must be at least L = {self.density_floor:g}"
            )
        if not 0.0 <= self.lateness_weight < 1.0:
            raise WattschedError(f"lateness weight must be in [0, 1), got {self.lateness_weight}")
        if np.any(np.asarray(self.energy_usd_per_j) < 0):
            raise WattschedError("energy prices must be >= 0 (the bounds assume w <= u)")
        g = np.asarray(self.max_gpus)
        if g.shape != (cap.shape[0],) or np.any(g < 1):
            raise WattschedError("max_gpus needs one count >= 1 per GPU type")
        if np.any(cap < g[:, None]):
            k, t = np.argwhere(cap < g[:, None])[0]
            raise WattschedError(
                f"GPU type {k}, slot {t}: capacity {cap[k, t]} is below the largest job ({g[k]} GPUs); the price "
                "rule needs C >= g_max"
            )

    @property
    def shape(self) -> tuple[int, int]:
        return self.capacity.shape  # type: ignore[return-value]

    def gpu_power_w(self) -> np.ndarray:
        """[K, V] draw of one busy GPU of each type at each clock level."""
        span = (self.busy_w - self.idle_w)[:, None]
        return self.idle_w[:, None] + span * self.clocks.power_scale[None, :]


@dataclass(frozen=True)
class PdJob:
    arrival_s: float
    work_gpu_s: float  # GPU-seconds at the default clock on a speed-1 GPU
    deadline_s: float
    value_per_gpu_s: float  # beta: $ per GPU-second of work done by the deadline
    gpu_counts: tuple[int, ...] = (1,)
    speed: np.ndarray | None = None  # [K] relative speed on each type; None: 1 everywhere
    power_w: np.ndarray | None = None  # [K, V] draw of one of its GPUs; None: the formulation's
    types: tuple[int, ...] | None = None  # GPU types it may use; None: all
    name: str = ""


@dataclass
class Schedules:
    """Every offered schedule of one job, as parallel arrays."""

    gpu_type: np.ndarray
    gpus: np.ndarray
    clock: np.ndarray
    first_slot: np.ndarray
    slots: np.ndarray  # slots held, from first_slot on
    start_s: np.ndarray
    end_s: np.ndarray
    utility: np.ndarray
    energy_cost: np.ndarray
    value: np.ndarray  # w = utility - energy_cost

    def __len__(self) -> int:
        return int(self.value.size)

    def take(self, idx) -> Schedules:
        return Schedules(**{k: v[idx] for k, v in self.__dict__.items()})


_FIELDS = (
    "gpu_type",
    "gpus",
    "clock",
    "first_slot",
    "slots",
    "start_s",
    "end_s",
    "utility",
    "energy_cost",
    "value",
)


def _empty() -> Schedules:
    return Schedules(**{k: np.zeros(0, dtype=np.int64 if k in _FIELDS[:5] else np.float64) for k in _FIELDS})


def require_priceable(job: PdJob) -> None:
    """Stop with an error naming the job when a field is NaN, or a speed or draw is negative: the formulation
    cannot price it, and a NaN would otherwise drop every schedule silently or fail deep in the arithmetic. A job
    with no work or no finite window is priceable: it has no schedule and is rejected (docs/hkbu-online-pd.md §2)."""
    speed, power = job.speed, job.power_w
    if (
        not math.isnan(job.arrival_s + job.deadline_s + job.work_gpu_s + job.value_per_gpu_s)
        and (speed is None or bool((np.asarray(speed) >= 0).all()))  # NaN compares False
        and (power is None or bool((np.asarray(power) >= 0).all()))
    ):
        return  # the common case, once per arrival: no messages built
    scalars = {
        "arrival": job.arrival_s,
        "deadline": job.deadline_s,
        "work": job.work_gpu_s,
        "value": job.value_per_gpu_s,
    }
    bad = [f"{k} {v}" for k, v in scalars.items() if math.isnan(v)]
    for label, arr in (("speed", speed), ("GPU draw", power)):
        if arr is not None and not np.all(np.asarray(arr) >= 0):
            bad.append(f"{label} {np.asarray(arr).tolist()}")
    if bad:
        who = repr(job.name) if job.name else f"arriving at {job.arrival_s:g} s"
        raise WattschedError(f"{LABEL}: job {who} cannot be priced: {'; '.join(bad)}")


def enumerate_schedules(form: Formulation, job: PdJob) -> Schedules:
    """Every schedule the formulation offers `job`, ordered so that ties favour the default clock, then the
    earliest start (np.argmax keeps the first maximum)."""
    k_types, horizon = form.shape
    slot = form.slot_s
    a, d, work = float(job.arrival_s), float(job.deadline_s), float(job.work_gpu_s)
    if not (math.isfinite(a) and math.isfinite(d) and work > 0 and d > a):
        return _empty()
    t_arr = math.floor(a / slot + _EPS)
    if t_arr >= horizon:
        return _empty()
    power = form.gpu_power_w() if job.power_w is None else np.asarray(job.power_w, dtype=np.float64)
    speed = np.ones(k_types) if job.speed is None else np.asarray(job.speed, dtype=np.float64)
    price = form.energy_usd_per_j
    price_prefix, hi_slot = None, horizon
    if np.ndim(price):
        hi_slot = min(horizon, math.ceil(d / slot) + 1)
        price_prefix = np.concatenate([[0.0], np.cumsum(np.asarray(price)[t_arr:hi_slot])])
    # Every (clock, type, count) combination at once, default clock first.
    cv, ck, cg = _combos(len(form.clocks), tuple(range(k_types)) if job.types is None else tuple(job.types),
                         tuple(job.gpu_counts))  # fmt: skip
    run = work * form.clocks.time_factor[cv] / (cg * speed[ck])
    ok = (cg <= form.max_gpus[ck]) & (run <= d - a + _EPS)
    if not ok.all():
        if not ok.any():
            return _empty()
        cv, ck, cg, run = cv[ok], ck[ok], cg[ok], run[ok]
    # Per combination: the arrival itself, then every slot boundary up to the last start that meets d.
    per = 1 + np.maximum(np.floor((d - run) / slot + _EPS).astype(np.int64) - t_arr, 0)
    combo = np.repeat(np.arange(cv.size), per)
    offsets = np.cumsum(per) - per
    first = np.arange(combo.size) - offsets[combo] + t_arr
    start = first * slot
    start[offsets] = a
    run_c = run[combo]
    end = start + run_c
    end_slot = first + np.ceil(run / slot - _EPS).astype(np.int64)[combo]
    end_slot[offsets] = np.maximum(np.ceil((a + run) / slot - _EPS).astype(np.int64), t_arr + 1)
    n = end_slot - first
    g = cg[combo]
    full = job.value_per_gpu_s * work
    joules = g * power[ck[combo], cv[combo]] * run_c
    if price_prefix is None:
        cost = joules * float(price)
    else:
        inside = np.minimum(end_slot, hi_slot) - t_arr
        cost = joules * (price_prefix[inside] - price_prefix[first - t_arr]) / n
    value = full - (full * form.lateness_weight / (d - a)) * (end - a) - cost
    keep = (end_slot <= horizon) & (n <= form.max_span_slots) & (value >= form.density_floor * g * n)
    if not keep.all():
        if not keep.any():
            return _empty()
        idx = np.flatnonzero(keep)
        combo, first, n, start, end, cost, value, g = (
            combo[idx],
            first[idx],
            n[idx],
            start[idx],
            end[idx],
            cost[idx],
            value[idx],
            g[idx],
        )
    return Schedules(ck[combo], g, cv[combo], first, n, start, end, value + cost, cost, value)


@lru_cache(maxsize=256)
def _combos(clocks: int, types: tuple[int, ...], counts: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """(clock, type, count) of every combination, default clock (the last level) first."""
    grid = np.meshgrid(np.arange(clocks - 1, -1, -1), np.asarray(types), np.asarray(counts), indexing="ij")
    out = tuple(x.reshape(-1).astype(np.int64) for x in grid)
    for x in out:
        x.flags.writeable = False
    return out


@dataclass(frozen=True)
class PriceRule:
    """p(y) = A (B^(y / C') - 1) with A = L / (2 eta), B = 1 + 2 eta V / L, C' = C - g_max + 1: zero when a
    resource is empty, V (every schedule priced out) once y reaches C'."""

    density_floor: float  # L
    value_per_gpu_max: float  # V
    eta: float

    @property
    def scale(self) -> float:
        return self.density_floor / (2.0 * self.eta)

    @property
    def base(self) -> float:
        return 1.0 + 2.0 * self.eta * self.value_per_gpu_max / self.density_floor

    def price(self, allocated: np.ndarray, effective_capacity: np.ndarray) -> np.ndarray:
        return self.scale * np.expm1(np.asarray(allocated) / effective_capacity * math.log(self.base))


def ratio_bound(rule: PriceRule, capacity_min: np.ndarray, max_gpus: np.ndarray) -> dict[str, float]:
    """The competitive ratio proven in docs/hkbu-online-pd.md §3 for this price rule, capacities and largest jobs:
    OPT <= alpha (1 + 1/(2 eta)) ONLINE with alpha = max(1, max_k (C_k / g_k) (B^(g_k / (C_k - g_k + 1)) - 1)).
    As g/C -> 0, alpha -> ln B, the textbook O(ln(V/L))."""
    cap = np.asarray(capacity_min, dtype=np.float64)
    g = np.asarray(max_gpus, dtype=np.float64)
    log_b = math.log(rule.base)
    alpha_k = cap / g * np.expm1(g / (cap - g + 1.0) * log_b)
    alpha = max(1.0, float(alpha_k.max()))
    return {
        "competitive_ratio_bound": alpha * (1.0 + 1.0 / (2.0 * rule.eta)),
        "alpha": alpha,
        "ln_B": log_b,
        "small_job_limit": max(1.0, log_b) * (1.0 + 1.0 / (2.0 * rule.eta)),
        "demand_fraction_max": float((g / cap).max()),
        "B": rule.base,
        "V_over_L": rule.value_per_gpu_max / rule.density_floor,
        "eta": rule.eta,
    }


@dataclass
class Offer:
    """The online decision on one arrival."""

    schedule: Schedules | None  # the chosen schedule (one row) when admitted
    surplus: float  # mu_j >= 0, the job's dual variable
    admitted: bool
    offered: int  # schedules the job had (-1: priced out before they were listed)


@dataclass
class OnlinePrimalDual:
    """The online algorithm: on each arrival pick the schedule of greatest surplus at the current prices, admit it
    when the surplus is positive, and raise the prices of the GPU-slots it holds."""

    form: Formulation
    eta: float = 1.0
    allocated: np.ndarray = field(init=False)
    prices: np.ndarray = field(init=False)
    objective: float = field(init=False, default=0.0)
    admitted: int = field(init=False, default=0)
    rejected: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if not self.eta > 0:
            raise WattschedError(f"eta must be positive, got {self.eta}")
        self.rule = PriceRule(self.form.density_floor, self.form.value_per_gpu_max, self.eta)
        self.allocated = np.zeros(self.form.shape, dtype=np.int64)
        self.prices = np.zeros(self.form.shape)
        self.effective = (self.form.capacity - self.form.max_gpus[:, None] + 1).astype(np.float64)
        self.clock_counts = np.zeros(len(self.form.clocks), dtype=np.int64)

    def bound(self) -> dict[str, float]:
        return ratio_bound(self.rule, self.form.capacity.min(axis=1), self.form.max_gpus)

    def surplus(self, sch: Schedules, prices: np.ndarray | None = None) -> np.ndarray:
        """w - sum of GPU-slot prices held, per schedule (vectorised over schedules; one prefix sum per type)."""
        prices = self.prices if prices is None else prices
        if not len(sch):
            return np.zeros(0)
        lo = int(sch.first_slot.min())
        hi = int((sch.first_slot + sch.slots).max())
        if prices.shape[0] == 1:  # one GPU type: no masks
            prefix = np.concatenate([[0.0], np.cumsum(prices[0, lo:hi])])
            f = sch.first_slot - lo
            return sch.value - sch.gpus * (prefix[f + sch.slots] - prefix[f])
        charge = np.empty(len(sch))
        for k in np.unique(sch.gpu_type).tolist():
            m = sch.gpu_type == k
            prefix = np.concatenate([[0.0], np.cumsum(prices[k, lo:hi])])
            f = sch.first_slot[m] - lo
            charge[m] = sch.gpus[m] * (prefix[f + sch.slots[m]] - prefix[f])
        return sch.value - charge

    def priced_out(self, job: PdJob) -> bool:
        """An exact shortcut: True when no schedule can have a positive surplus, because even the full utility
        beta W is below the cheapest GPU-slot price of the window times the fewest GPU-slots any schedule holds.
        False for a job without schedules by construction (no work, no finite window, speed 0 on every type):
        listing finds none."""
        speed = 1.0 if job.speed is None else float(np.max(job.speed))
        if not (
            job.work_gpu_s > 0
            and speed > 0
            and math.isfinite(job.arrival_s)
            and math.isfinite(job.deadline_s)
        ):
            return False
        slot = self.form.slot_s
        lo = math.floor(job.arrival_s / slot + _EPS)
        hi = min(math.ceil(job.deadline_s / slot), self.form.shape[1])
        if hi <= lo:
            return False
        types = range(self.form.shape[0]) if job.types is None else job.types
        cheapest = min(float(self.prices[k, lo:hi].min()) for k in types)
        fewest = max(math.ceil(job.work_gpu_s / (max(job.gpu_counts) * speed * slot) - _EPS), 1)
        return job.value_per_gpu_s * job.work_gpu_s <= min(job.gpu_counts) * fewest * cheapest

    def arrive(self, job: PdJob) -> Offer:
        require_priceable(job)
        if self.priced_out(job):
            self.rejected += 1
            return Offer(None, 0.0, False, -1)
        sch = enumerate_schedules(self.form, job)
        if not len(sch):
            self.rejected += 1
            return Offer(None, 0.0, False, 0)
        surplus = self.surplus(sch)
        best = int(np.argmax(surplus))
        mu = max(0.0, float(surplus[best]))
        if surplus[best] <= _EPS * max(1.0, abs(float(sch.value[best]))):
            self.rejected += 1
            return Offer(None, mu, False, len(sch))
        chosen = sch.take(slice(best, best + 1))
        self._hold(chosen)
        self.objective += float(chosen.value[0])
        self.admitted += 1
        self.clock_counts[int(chosen.clock[0])] += 1
        return Offer(chosen, mu, True, len(sch))

    def _hold(self, chosen: Schedules) -> None:
        k, g = int(chosen.gpu_type[0]), int(chosen.gpus[0])
        lo = int(chosen.first_slot[0])
        hi = lo + int(chosen.slots[0])
        row = self.allocated[k, lo:hi]
        row += g
        if np.any(row > self.form.capacity[k, lo:hi]):  # the prices exclude this (docs §3, lemma 1)
            raise WattschedError(f"internal: schedule over capacity on GPU type {k} in slots {lo}-{hi}")
        self.prices[k, lo:hi] = self.rule.price(row, self.effective[k, lo:hi])


def run_online(
    form: Formulation, jobs: Sequence[PdJob], eta: float = 1.0
) -> tuple[OnlinePrimalDual, list[Offer]]:
    """Feed `jobs` in the order given (their arrival order) to the online algorithm."""
    pd_ = OnlinePrimalDual(form, eta)
    return pd_, [pd_.arrive(j) for j in jobs]


@dataclass
class OfflineResult:
    objective: float
    chosen: list[int | None]  # per job: index into its schedules, or None
    status: str
    solve_s: float
    mip_gap: float
    variables: int


def solve_offline(
    form: Formulation, jobs: Sequence[PdJob], time_limit_s: float = 60.0, mip_rel_gap: float = 1e-9
) -> OfflineResult:
    """The offline optimum of the same ILP (all jobs known): max sum w x, at most one schedule per job, GPU-slot
    capacity per type, x binary. HiGHS through ``scipy.optimize.milp`` (as policies/allocation/cedla_milp.py)."""
    import time

    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    for job in jobs:
        require_priceable(job)
    per_job = [enumerate_schedules(form, j) for j in jobs]
    sizes = np.array([len(s) for s in per_job], dtype=np.int64)
    total = int(sizes.sum())
    if total == 0:
        return OfflineResult(0.0, [None] * len(jobs), "optimal", 0.0, 0.0, 0)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    value = np.concatenate([s.value for s in per_job])
    k_types, horizon = form.shape
    rows, cols, vals = [], [], []
    # One row per job (at most one schedule), then one per (type, slot) (capacity).
    for j, s in enumerate(per_job):
        n = len(s)
        rows.append(np.full(n, j))
        cols.append(np.arange(offsets[j], offsets[j] + n))
        vals.append(np.ones(n))
    for j, s in enumerate(per_job):
        for i in range(len(s)):
            k, lo, n = int(s.gpu_type[i]), int(s.first_slot[i]), int(s.slots[i])
            rows.append(len(jobs) + k * horizon + np.arange(lo, lo + n))
            cols.append(np.full(n, offsets[j] + i))
            vals.append(np.full(n, float(s.gpus[i])))
    a = coo_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(len(jobs) + k_types * horizon, total),
    ).tocsr()
    upper = np.concatenate([np.ones(len(jobs)), form.capacity.reshape(-1).astype(np.float64)])
    started = time.perf_counter()
    res = milp(
        -value,
        constraints=LinearConstraint(a, -np.inf, upper),
        integrality=np.ones(total),
        bounds=Bounds(0.0, 1.0),
        options={"time_limit": float(time_limit_s), "mip_rel_gap": float(mip_rel_gap), "disp": False},
    )
    solve_s = time.perf_counter() - started
    if res.x is None:
        raise WattschedError(f"the MILP solver stopped without a solution: {res.message}")
    x = np.round(res.x)
    chosen: list[int | None] = []
    for j in range(len(jobs)):
        hit = np.flatnonzero(x[offsets[j] : offsets[j + 1]] > 0.5)
        chosen.append(int(hit[0]) if hit.size else None)
    status = "optimal" if res.status == 0 else "time limit"
    gap = float(getattr(res, "mip_gap", 0.0) or 0.0)
    return OfflineResult(float(value @ x), chosen, status, solve_s, gap, total)


# ---------------------------------------------------------------------------------------------------------------
# Small instances (tests and the experiment): random ones, and ones built to stress the bound
# ---------------------------------------------------------------------------------------------------------------

SMALL_SLOT_S = 3600.0
SMALL_VALUE_MAX = 2.0 / 3600.0  # beta_max: $2 per GPU-hour of work (reconstructed scale)
SMALL_SPEEDS = (1.0, 1.5)  # two GPU types, the second 1.5x faster
SMALL_IDLE_W = (30.0, 40.0)
SMALL_BUSY_W = (250.0, 300.0)
# The family every small instance belongs to: the bound depends only on these (docs/hkbu-online-pd.md §4).
SMALL_UPPER = SMALL_VALUE_MAX * max(SMALL_SPEEDS) * SMALL_SLOT_S  # U: most value one GPU-slot can hold
SMALL_DENSITY_RATIO = 8.0  # L = U / 8
SMALL_MAX_SPAN = 5  # slots; V = U x 5
SMALL_MAX_GPUS = 2  # g_max
SMALL_CAPACITY = (8, 10)  # C_k(t) range; C_min = 8


def small_formulation(
    capacity: np.ndarray, energy_usd_per_kwh: float | np.ndarray, lateness_weight: float = 0.5
) -> Formulation:
    """A formulation of the small-instance family, on hourly slots: U = beta_max x speed_max x slot is the most
    value a GPU-slot can hold, L = U / 8, V = 5 U, g_max = 2, capacity at least 8 GPUs per type and slot."""
    capacity = np.asarray(capacity, dtype=np.int64)
    if capacity.min() < SMALL_CAPACITY[0]:
        raise WattschedError(f"small instances have at least {SMALL_CAPACITY[0]} GPUs per type and slot")
    k = capacity.shape[0]
    price = np.asarray(energy_usd_per_kwh, dtype=np.float64) / 3.6e6
    return Formulation(
        slot_s=SMALL_SLOT_S,
        capacity=capacity,
        idle_w=np.asarray(SMALL_IDLE_W[:k]),
        busy_w=np.asarray(SMALL_BUSY_W[:k]),
        clocks=clock_levels(),
        energy_usd_per_j=float(price) if price.ndim == 0 else price,
        density_floor=SMALL_UPPER / SMALL_DENSITY_RATIO,
        value_per_gpu_max=SMALL_UPPER * SMALL_MAX_SPAN,
        max_span_slots=SMALL_MAX_SPAN,
        max_gpus=np.full(k, SMALL_MAX_GPUS),
        lateness_weight=lateness_weight,
    )


def small_family_bound(eta: float = 1.0) -> dict[str, float]:
    """The proven ratio for every instance of the small family (any capacity >= C_min, g <= g_max, same L, V)."""
    rule = PriceRule(SMALL_UPPER / SMALL_DENSITY_RATIO, SMALL_UPPER * SMALL_MAX_SPAN, eta)
    return ratio_bound(rule, np.array([SMALL_CAPACITY[0]]), np.array([SMALL_MAX_GPUS]))


def random_instance(seed: int, jobs: int = 14, slots: int = 10) -> tuple[Formulation, list[PdJob]]:
    """Seeded small instance: two GPU types whose capacity is drawn per slot in 8-10 (powered-on GPUs vary),
    hourly time-of-use energy prices, jobs of 0.5-4 GPU-hours on 1 or 2 GPUs with deadlines 1.2-3x their one-GPU
    run time, value 0.25-1 x beta_max per GPU-second."""
    rng = np.random.default_rng(seed)
    types = len(SMALL_SPEEDS)
    cap = rng.integers(SMALL_CAPACITY[0], SMALL_CAPACITY[1] + 1, size=(types, slots))
    hours = np.arange(slots)
    price = (
        0.8 + 0.6 * np.sin(2 * np.pi * (hours - 8) / 24) + rng.uniform(0, 0.4, slots)
    )  # $/kWh, exaggerated
    form = small_formulation(cap, price)
    out = []
    for j in range(jobs):
        arrival = float(rng.uniform(0, 0.6 * slots)) * SMALL_SLOT_S
        work = float(rng.uniform(0.5, 4.0)) * SMALL_SLOT_S
        deadline = min(arrival + work * float(rng.uniform(1.2, 3.0)), slots * SMALL_SLOT_S)
        beta = SMALL_VALUE_MAX * float(rng.uniform(0.25, 1.0))
        out.append(PdJob(arrival, work, deadline, beta, (1, 2), speed=np.asarray(SMALL_SPEEDS), name=f"j{j}"))
    out.sort(key=lambda job: job.arrival_s)
    return form, out


def ladder_instance(batches: int, per_batch: int = 8, capacity: int = 8) -> tuple[Formulation, list[PdJob]]:
    """The classic adversary of online admission: every job needs one fast GPU for exactly the one slot there is,
    all arrive together, and batches of `per_batch` jobs come in order of rising value, from L to U per GPU-slot
    in equal ratios. The online algorithm spends capacity on early, cheap batches; the optimum keeps it for the
    last one."""
    form = small_formulation(np.array([[capacity]]), 0.0, lateness_weight=0.0)
    form = Formulation(**{**form.__dict__, "idle_w": form.idle_w[:1] * 0, "busy_w": form.busy_w[:1] * 0})
    ratio = SMALL_DENSITY_RATIO ** (1.0 / max(batches - 1, 1))
    fast = max(SMALL_SPEEDS)
    jobs = []
    for b in range(batches):
        beta = SMALL_VALUE_MAX / ratio ** (batches - 1 - b)
        for i in range(per_batch):
            jobs.append(
                PdJob(
                    0.0,
                    SMALL_SLOT_S * fast,
                    SMALL_SLOT_S,
                    beta,
                    (1,),
                    speed=np.array([fast]),
                    name=f"b{b}-{i}",
                )
            )
    return form, jobs


def simultaneous(jobs: Sequence[PdJob], at: float = 0.0) -> list[PdJob]:
    """The same jobs all arriving at `at` with their windows kept (deadline - arrival): any processing order is then
    a valid arrival order, which is what an adversary chooses."""
    from dataclasses import replace

    return [replace(j, arrival_s=at, deadline_s=at + (j.deadline_s - j.arrival_s)) for j in jobs]


def worst_order(
    form: Formulation, jobs: Sequence[PdJob], rng: np.random.Generator, steps: int = 200, eta: float = 1.0
) -> tuple[list[PdJob], float]:
    """Adversarial arrival order by local search: start from rising best density, swap pairs, keep a swap when the
    online objective does not rise. Returns the order found and its online objective."""

    def best_density(job: PdJob) -> float:
        s = enumerate_schedules(form, job)
        return float((s.value / (s.gpus * s.slots)).max()) if len(s) else 0.0

    order = sorted(jobs, key=best_density)
    best = run_online(form, order, eta)[0].objective
    n = len(order)
    for _ in range(steps if n > 1 else 0):
        i, j = rng.choice(n, size=2, replace=False)
        trial = list(order)
        trial[i], trial[j] = trial[j], trial[i]
        obj = run_online(form, trial, eta)[0].objective
        if obj <= best:
            order, best = trial, obj
    return order, best
