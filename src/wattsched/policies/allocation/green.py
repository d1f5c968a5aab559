"""``wattsched-green``: one energy-aware allocation policy that turns the seed systems' knobs together
(docs/green.md).

Every round (and on arrivals and completions) it decides, for the waiting jobs:

* **queue** (order): inference services first; then training jobs whose deadline cannot wait (earliest deadline
  first); then the rest by highest response ratio ``(waited + remaining) / remaining``, where `remaining` is the
  job's time left at its trace GPU count from the performance model (clairvoyant: it knows each job's work, as the
  trace gives it). Short jobs go first, and a long job's ratio grows while it waits, so none starves. Off: arrival
  order (FIFO). Either way a job that does not fit now lets later ones start (backfill), until the first job that
  has waited ``STRICT_AFTER_S`` blocks the queue behind it;
* **placement**: the PWR+FGD score (``policies/pwr.py``, ``pwr_200_fgd_800``: power increase and fragmentation
  growth of each candidate node). Off: best-fit;
* **clocks**: the GPU power limit of the least energy per unit of work (the job's GPU draw plus its share of the
  node's base draw, over its speed: ``energy/dvfs.py`` through ``perf/model.py``, as HKBU-DVFS and Zeus choose),
  among the limits at most ``max_slowdown`` slower than the default and that still meet the job's deadline, for
  jobs that start while no other job waits for GPUs; when jobs wait, starts get the default limit and running
  jobs below it are set back to it (HKBU-DVFS' rule). Off: the default setting;
* **right-sizing**: headroom for the demand forecast (the most GPUs that arrived within any boot window over the
  last day, counting only what cannot wait for a boot: services, jobs without a deadline, jobs with less than an
  hour of slack; ``Decision.keep_free_gpus``), so that the run's power manager switches off what is not needed and
  keeps what those arrivals need. Off: no headroom asked (the power manager alone);
* **shrink**: a training job asked for several GPUs starts on fewer (its count halved, down to one GPU) where
  that lowers its energy per unit of work (PowerFlow's GPU-count lever, on the same performance model), as long
  as its run stretches at most ``1 + max_stretch`` times and still meets its deadline. Off: the trace count (or
  wider, by ``gpus``);
* **price-shift**: a training job with a deadline waits for a cheaper hour of the day-ahead prices when the money
  its energy saves there is worth the delay: ``saving_usd - usd_per_job_hour x delay_h > 0`` at the best start
  hour that still meets its deadline (with ``DEADLINE_MARGIN_S``) (CE-DLA's price-aware timing, as a rule per job).
  Off: nothing waits on purpose. Without a price signal it has nothing to act on and idles (the run is not refused:
  the other mechanisms stand alone; ``rounds_with_prices`` in the summary says whether it saw prices).
* **colocate**: a training job that would wait for GPUs (or for a node to boot) shares the GPUs of a running
  training job where the performance model predicts the pair uses less energy than apart, neither run stretches
  beyond ``1 + colocation_bound`` and both deadlines hold; judged again after EaCO's observation window and undone
  where the observed speeds break that (``green_colocate.py``). Services never share. Off: the job waits.
* **regrow**: running training jobs are widened into spare GPUs (within ``scale_tolerance``, when the time saved
  outweighs the restarts) and give them back before waiting jobs wait (``green_regrow.py``). Off: GPU counts are
  fixed at the start.

The weights: ``usd_per_job_hour`` (how many dollars one hour of one job's delay is worth: the operator's cost
against mean JCT) and ``max_slowdown`` (the most a slower clock may stretch a job's run time), and
``usd_per_tonne_co2`` (carbon's price: price-shift counts the carbon a later start saves at it,
``green_carbon.py``). Deadlines and services are hard constraints: urgent jobs and services are never deferred nor
slowed. An energy budget (``energy_budget_kwh``) is kept as PowerFlow keeps it (``green_budget.py``).

Names: ``wattsched-green`` with every mechanism, ``wattsched-green-no-<mechanism>[-no-<mechanism>...]`` with
some off, and optional ``-w<usd_per_job_hour>``, ``-s<max_slowdown>``, ``-g<scale_tolerance>``,
``-x<max_stretch>``, ``-k<kwh_per_job_hour>``, ``-j<colocation_bound>`` and ``-c<usd_per_tonne_co2>`` (carbon's
price, for price-shift) suffixes for the weights, e.g.
``wattsched-green-no-clocks-w0.5``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from ...core.gpus import gpu_model
from ...core.jobs import TRAINING
from ...core.settings import DEFAULT_SETTING, GpuSetting
from ...energy.dvfs import power_limit_range
from ...energy.power_models import idle_node_draw_w
from ..base import PLACEMENT_POLICIES
from ..contract import (
    ALLOCATION_POLICIES,
    AllocationPolicy,
    BindContext,
    Capability,
    ClusterView,
    Decision,
    Target,
)
from ..planning import Consolidated, Plan, held_target, job_gpu_codes
from . import energy_budget
from .green_budget import GreenBudget
from .green_carbon import carbon_priced
from .green_colocate import DEFAULT_COLOCATION_BOUND, Colocation
from .green_regrow import Regrow

NAME = "wattsched-green"
MECHANISMS = (
    "queue",
    "placement",
    "gpus",
    "clocks",
    "right-sizing",
    "price-shift",
    "shrink",
    "colocate",
    "regrow",
)
SLOT_S = 3600.0  # day-ahead prices are hourly
HORIZON_H = 24  # hours of prices looked ahead
DEADLINE_MARGIN_S = 1800.0  # planned work ends this long before its deadline (a boot, a restart; as cedla)
# A job with less slack than this runs first (earliest deadline first) and is never deferred.
URGENT_SLACK_S = 3600.0
# A training job whose deadline leaves less than a boot and a round of slack takes whole GPUs across nodes when no
# single node has room for it (slower, but it does not wait for capacity to free or boot).
SPREAD_SLACK_S = 600.0
STRICT_AFTER_S = 4 * 3600.0  # a job waiting this long stops backfill behind it (no starvation of large jobs)
BURST_WINDOW_S = 600.0  # right-sizing: arrivals within a boot (300 s) and a round
BURST_HISTORY_S = 86400.0  # right-sizing: the forecast looks back one day
POWER_LIMIT_LEVELS = 6  # limits tried per GPU type, evenly from its lowest to the default
PLACEMENT_ON = "pwr_200_fgd_800"
PLACEMENT_OFF = "best-fit"
DEFAULT_USD_PER_JOB_HOUR = 0.2
DEFAULT_MAX_SLOWDOWN = 0.10
DEFAULT_SCALE_TOLERANCE = 0.7  # with regrow (docs/green.md section 4, regrow); 0.3 before it
DEFAULT_MAX_STRETCH = 2.0
DEFAULT_KWH_PER_JOB_HOUR = 0.35  # with regrow; 2.5 before it
DEFAULT_USD_PER_TONNE_CO2 = 0.0


class WattschedGreen(AllocationPolicy):
    name = NAME
    description = (
        "joint queue order, PWR+FGD placement, energy-optimal power limits, forecast right-sizing and price-aware "
        "timing under one objective (wattsched-green)"
    )
    decide_on_arrival = True
    decide_on_completion = True
    default_round_s = 300.0
    needs_models = True
    learned_state = ("_slowed", "regrow")

    def __init__(
        self,
        mechanisms: Iterable[str] = MECHANISMS,
        usd_per_job_hour: float = DEFAULT_USD_PER_JOB_HOUR,
        max_slowdown: float = DEFAULT_MAX_SLOWDOWN,
        scale_tolerance: float = DEFAULT_SCALE_TOLERANCE,
        max_stretch: float = DEFAULT_MAX_STRETCH,
        kwh_per_job_hour: float = DEFAULT_KWH_PER_JOB_HOUR,
        colocation_bound: float = DEFAULT_COLOCATION_BOUND,
        usd_per_tonne_co2: float = DEFAULT_USD_PER_TONNE_CO2,
    ) -> None:
        chosen = set(mechanisms)
        unknown = sorted(chosen - set(MECHANISMS))
        if unknown:
            raise ValueError(
                f"unknown wattsched-green mechanism(s) {unknown}; known: {', '.join(MECHANISMS)}"
            )
        if usd_per_job_hour < 0 or not math.isfinite(usd_per_job_hour):
            raise ValueError(f"usd_per_job_hour must be a finite number >= 0, got {usd_per_job_hour}")
        if not 0 <= max_slowdown < 1:
            raise ValueError(f"max_slowdown must lie in [0, 1), got {max_slowdown}")
        if not 0 <= scale_tolerance < 1:
            raise ValueError(f"scale_tolerance must lie in [0, 1), got {scale_tolerance}")
        if max_stretch < 0 or not math.isfinite(max_stretch):
            raise ValueError(f"max_stretch must be a finite number >= 0, got {max_stretch}")
        self.scale_tolerance = float(scale_tolerance)
        if kwh_per_job_hour < 0 or not math.isfinite(kwh_per_job_hour):
            raise ValueError(f"kwh_per_job_hour must be a finite number >= 0, got {kwh_per_job_hour}")
        self.max_stretch = float(max_stretch)
        self.kwh_per_job_hour = float(kwh_per_job_hour)
        if usd_per_tonne_co2 < 0 or not math.isfinite(usd_per_tonne_co2):
            raise ValueError(f"usd_per_tonne_co2 must be a finite number >= 0, got {usd_per_tonne_co2}")
        self.usd_per_tonne_co2 = float(usd_per_tonne_co2)
        self.carbon_rounds = 0  # rounds whose price-shift saw a carbon forecast (weight > 0 only)
        self.budget = GreenBudget()  # PowerFlow's budget when one is given (green_budget.py)
        self._shrink_weight = self.kwh_per_job_hour  # lower in a round the budget makes tight
        self.mechanisms = frozenset(chosen)
        self.usd_per_job_hour = float(usd_per_job_hour)
        self.max_slowdown = float(max_slowdown)
        self.placement = PLACEMENT_POLICIES.create(PLACEMENT_ON if "placement" in chosen else PLACEMENT_OFF)
        # A job wider than a node: whole nodes under one switch (Tiresias' rule), so it runs at its consolidated
        # speed (a gang across switches runs slower in the performance tables).
        self.gang_placement = Consolidated()
        self.deferrals = 0
        self.slowed_starts = 0
        self.widened_starts = 0
        self.spread_starts = 0
        self.shrunk_starts = 0
        self.priced_rounds = 0  # rounds that saw day-ahead prices (price-shift idles without them)
        self.colocation = Colocation(colocation_bound)  # green_colocate.py
        self.regrow = Regrow(self)  # resizing of running jobs (green_regrow.py)

    def on(self, mechanism: str) -> bool:
        return mechanism in self.mechanisms

    def required_capabilities(self, params) -> frozenset[Capability]:
        needs = set()
        if self.on("clocks"):
            needs.add(Capability.SETS_GPU_SETTINGS)
        if self.on("gpus") or self.on("shrink"):
            needs.add(Capability.RESIZES)
        if self.on("colocate"):  # a pair shares GPUs; an undo stops its guest
            needs.update((Capability.SHARES_GPUS, Capability.PREEMPTS))
        if self.on("regrow"):
            needs |= {Capability.RESIZES, Capability.PREEMPTS}  # a resize moves a running job
        return frozenset(needs) | energy_budget.needs_meter(params, self.budget.budget_j)

    def bind(self, ctx: BindContext) -> None:
        spec, jobs = ctx.spec, ctx.jobs
        self.placement.bind(spec, ctx.rng, ctx.node_rank)
        self.placement.prepare(jobs, spec)  # FGD scores against the workload's typical requests
        self.gang_placement.bind(spec, ctx.rng, ctx.node_rank)
        self.jobs, self.spec, self.perf = jobs, spec, ctx.perf
        self.codes = job_gpu_codes(ctx)
        self.gpus_per_node = max(int(spec.gpu_count.max()), 1) if spec.num_nodes else 1
        # A GPU's share of its node's base draw (CPU sockets, board): what a slower or later run also pays.
        node_idle = idle_node_draw_w(spec) if spec.num_nodes else np.zeros(1)
        code0 = int(max(spec.gpu_model_code[0], 0)) if spec.num_nodes else 0
        gpu_idle = float(gpu_model(spec.gpu_models[code0]).idle_w) if spec.num_nodes else 0.0
        self.base_share_w = max(float(np.mean(node_idle)) / self.gpus_per_node - gpu_idle, 0.0)
        self.service = jobs.job_class != TRAINING
        self.deadline = jobs.deadline_s
        self.gpus = np.maximum(jobs.num_gpu, 0).astype(np.int64)
        # Right-sizing's burst counts the training arrivals that cannot wait for a node to boot: jobs without a
        # deadline, and those whose deadline leaves less than `URGENT_SLACK_S` of slack (from the trace duration:
        # clairvoyant, as the queue order). Work with slack waits for a boot (300 s) instead.
        slack = jobs.deadline_s - DEADLINE_MARGIN_S - jobs.submit_s - jobs.duration_s
        cannot_wait = ~self.service & (np.isnan(jobs.deadline_s) | (slack < URGENT_SLACK_S))
        # Services' GPUs per hour are known ahead (a day-ahead forecast, as cedla plans them): the headroom keeps
        # the next hour's free beside this hour's (their growth alone left 775 late service-hours on Philly).
        hours = np.floor(jobs.submit_s[self.service] / SLOT_S).astype(np.int64)
        # A service wider than a node takes whole nodes (consolidated): its headroom is whole nodes.
        wide = self.gpus > self.gpus_per_node
        whole = np.where(wide, -(-self.gpus // self.gpus_per_node) * self.gpus_per_node, self.gpus)
        weights = (whole * jobs.gpu_milli / 1000.0)[self.service]
        self._service_gpus = np.bincount(hours, weights=weights) if hours.size else np.zeros(0)
        watched = np.flatnonzero(cannot_wait)
        by_submit = watched[np.argsort(jobs.submit_s[watched], kind="stable")]
        self._submit_sorted = jobs.submit_s[by_submit]
        self._gpus_cum = np.concatenate(
            [[0.0], np.cumsum(self.gpus[by_submit] * jobs.gpu_milli[by_submit] / 1000.0)]
        )
        self._seconds_per_work = np.full(len(jobs), np.nan)
        self._levels: dict[int, list[tuple[GpuSetting, float, float]]] = {}
        self._slowed: set[int] = set()  # running jobs below the default setting
        self.colocation.bind(
            ctx.perf, spec, jobs, self.codes, self.service, self.base_share_w, DEADLINE_MARGIN_S
        )
        self.budget.bind(ctx, self)
        self.regrow = Regrow(self)

    def parameters(self) -> dict[str, Any]:
        return {
            "mechanisms": [m for m in MECHANISMS if self.on(m)],
            "off": [m for m in MECHANISMS if not self.on(m)],
            "usd_per_job_hour": self.usd_per_job_hour,
            "max_slowdown": self.max_slowdown,
            "scale_tolerance": self.scale_tolerance,
            "max_stretch": self.max_stretch,
            "kwh_per_job_hour": self.kwh_per_job_hour,
            "queue_order": "services, urgent by deadline, then highest response ratio on known remaining time "
            "(clairvoyant)"
            if self.on("queue")
            else "arrival order",
            "placement": PLACEMENT_ON if self.on("placement") else PLACEMENT_OFF,
            "deferrals": self.deferrals,
            "slowed_starts": self.slowed_starts,
            "widened_starts": self.widened_starts,
            "spread_starts": self.spread_starts,
            "shrunk_starts": self.shrunk_starts,
            "rounds_with_prices": self.priced_rounds,
            **self.colocation.parameters(),
            "usd_per_tonne_co2": self.usd_per_tonne_co2,
            "rounds_with_carbon": self.carbon_rounds,
            **self.budget.parameters(),
            "regrown_jobs": len(self.regrow.regrown),
            "regrow_widenings": self.regrow.widenings,
            "returned_gpus": self.regrow.returned_gpus,
        }

    # --- one job's numbers ----------------------------------------------------------------------------------
    def _shape(self, job: int) -> tuple[int, int, int, int]:
        n = max(int(self.gpus[job]), 1)
        return int(self.codes[job]), n, -(-n // self.gpus_per_node), 1

    def _seconds_left(self, view: ClusterView, jobs: np.ndarray) -> np.ndarray:
        """Time left at the trace GPU count and the default setting (fixed seconds per unit of work)."""
        per = self._seconds_per_work[jobs]
        for k in np.flatnonzero(np.isnan(per)).tolist():
            j = int(jobs[k])
            code, n, nodes, switches = self._shape(j)
            rate = self.perf.solo_rate(j, code, n, nodes, switches, DEFAULT_SETTING) if code >= 0 else 1.0
            per[k] = self._seconds_per_work[j] = 1.0 / max(rate, 1e-12)
        return view.remaining_work(jobs) * per

    def _draw_w(self, job: int, setting: GpuSetting) -> float:
        code, n, _, _ = self._shape(job)
        if code < 0:
            return n * self.base_share_w
        return n * (self.perf.gpu_power_w(job, code, setting) + self.base_share_w)

    def _slack_s(self, job: int, now: float, seconds_left: float) -> float:
        d = self.deadline[job]
        return math.inf if math.isnan(d) else float(d) - DEADLINE_MARGIN_S - now - seconds_left

    # --- GPU counts -------------------------------------------------------------------------------------------
    def _wider(self, job: int, spare: float) -> int:
        """The most GPUs (the trace count times a power of two, within the job's measured scaling and `spare`)
        whose energy per unit of work is at most ``1 + scale_tolerance`` times that at the trace count: the
        job finishes sooner for (almost) the same energy. The trace count when none is."""
        code, n, _, _ = self._shape(job)
        if code < 0 or not self.perf.has_table(job, code):
            return n
        top = min(self.perf.max_gpus(job, code), n + int(spare))
        base = self._energy_per_work(job, code, n)
        best, count = n, 2 * n
        while count <= top:
            if self._energy_per_work(job, code, count) > base * (1.0 + self.scale_tolerance):
                break
            best, count = count, 2 * count
        return best

    def _energy_per_work(self, job: int, code: int, count: int) -> float:
        nodes = -(-count // self.gpus_per_node)
        rate = self.perf.solo_rate(job, code, count, nodes, 1, DEFAULT_SETTING)
        return (
            count * (self.perf.gpu_power_w(job, code, DEFAULT_SETTING) + self.base_share_w) / max(rate, 1e-12)
        )

    def _narrower(self, job: int, now: float, seconds_left: float) -> tuple[int, float]:
        """(GPUs, seconds left there): the count, among the trace count halved down to one GPU, of least
        ``energy + kwh_per_job_hour x run time`` for the job's remaining work (PowerFlow's GPU-count lever, read
        off the same performance model; with the weight 0, the least energy per unit of work) whose run is at
        most ``1 + max_stretch`` times the run at the trace count and still ends before the deadline (with its
        margin). The trace count when no narrower one scores lower."""
        code, n, _, _ = self._shape(job)
        if n < 2 or code < 0 or not self.perf.has_table(job, code):
            return n, seconds_left
        rate_n = self.perf.solo_rate(job, code, n, -(-n // self.gpus_per_node), 1, DEFAULT_SETTING)
        if rate_n <= 0:
            return n, seconds_left
        deadline = self.deadline[job]
        latest = math.inf if math.isnan(deadline) else float(deadline) - DEADLINE_MARGIN_S - now
        work = seconds_left * rate_n
        best, best_left = n, seconds_left
        best_score = self._shrink_score(work * self._energy_per_work(job, code, n), seconds_left)
        count = n // 2
        while count >= 1:
            rate = self.perf.solo_rate(job, code, count, -(-count // self.gpus_per_node), 1, DEFAULT_SETTING)
            left = seconds_left * rate_n / rate if rate > 0 else math.inf
            if left > seconds_left * (1.0 + self.max_stretch) + 1e-9 or left > latest:
                break  # fewer GPUs only run slower
            score = self._shrink_score(work * self._energy_per_work(job, code, count), left)
            if score < best_score * (1.0 - 1e-9):
                best, best_left, best_score = count, left, score
            count //= 2
        return best, best_left

    def _shrink_score(self, energy_j: float, seconds: float) -> float:
        """kWh of a run plus what its run time is worth (the JCT it adds), in kWh."""
        return energy_j / 3.6e6 + self._shrink_weight * seconds / 3600.0

    # --- clocks -----------------------------------------------------------------------------------------------
    def _limits(self, code: int) -> list[tuple[GpuSetting, float, float]]:
        """(setting, speed, power scale) of each power limit tried on a GPU type, lowest limit first."""
        levels = self._levels.get(code)
        if levels is None:
            lo, hi = power_limit_range(self.spec.gpu_models[code])
            settings = [
                GpuSetting(power_limit_fraction=float(f))
                for f in np.linspace(lo, hi, POWER_LIMIT_LEVELS)[:-1]
            ]
            levels = [(s, self.perf.speed(code, s), self.perf.power_scale(code, s)) for s in settings]
            levels.append((DEFAULT_SETTING, 1.0, 1.0))
            self._levels[code] = levels
        return levels

    def _clock(self, job: int, now: float, seconds_left: float, unbounded: bool = False) -> GpuSetting:
        """The least energy per unit of work within the slowdown bound (none if `unbounded`) and the deadline."""
        code = int(self.codes[job])
        if code < 0:
            return DEFAULT_SETTING
        best, best_energy = DEFAULT_SETTING, self._draw_w(job, DEFAULT_SETTING)  # J per second at speed 1
        slack = self._slack_s(job, now, seconds_left)
        for setting, _, _ in self._limits(code):
            speed = self.perf.setting_response(job, code, setting)[0]  # this job's, as the engine runs it
            bound = math.inf if unbounded else self.max_slowdown
            if setting is DEFAULT_SETTING or speed <= 0 or 1.0 / speed - 1.0 > bound + 1e-12:
                continue
            if seconds_left * (1.0 / speed - 1.0) > slack:
                continue
            energy = self._draw_w(job, setting) / speed
            if energy < best_energy - 1e-9:
                best, best_energy = setting, energy
        return best

    # --- price-shift ------------------------------------------------------------------------------------------
    def _best_start(self, view: ClusterView, job: int, seconds_left: float, prices: np.ndarray) -> float:
        """The start time (now, or a later hour's start) of the best value ``saving - weight x delay``; now
        when no later hour is worth it or the deadline cannot wait."""
        now = view.now
        slack = self._slack_s(job, now, seconds_left)
        if not math.isfinite(slack) or slack < SLOT_S:
            return now
        hour_start = math.floor(now / SLOT_S) * SLOT_S
        span = max(1, math.ceil(seconds_left / SLOT_S))
        latest = min(int(slack // SLOT_S), len(prices) - 1)
        if latest < 1:
            return now
        # Mean price over the hours a run starting at hour k covers (within the prices known).
        cum = np.concatenate([[0.0], np.cumsum(prices)])
        k = np.arange(latest + 1)
        end = np.minimum(k + span, len(prices))
        mean = (cum[end] - cum[k]) / np.maximum(end - k, 1)
        kwh = self._draw_w(job, DEFAULT_SETTING) * seconds_left / 3.6e6
        delay_h = np.maximum(hour_start + k * SLOT_S - now, 0.0) / 3600.0
        value = kwh * (mean[0] - mean) / 1000.0 - self.usd_per_job_hour * delay_h
        value[0] = 0.0
        best = int(np.argmax(value))
        return now if best == 0 or value[best] <= 0 else hour_start + best * SLOT_S

    # --- right-sizing -----------------------------------------------------------------------------------------
    def _forecast_gpus(self, now: float) -> float:
        """Headroom: the services' GPUs of the next hour, plus the most GPUs that arrived (of training jobs that
        cannot wait for a boot) within any `BURST_WINDOW_S` over the last `BURST_HISTORY_S`."""
        return self._next_hour_services(now) + self._burst_gpus(now)

    def _next_hour_services(self, now: float) -> float:
        """The services' GPUs of the next hour (whole nodes for a service wider than one)."""
        nxt = int(now // SLOT_S) + 1
        demand = self._service_gpus
        return float(demand[nxt]) if 0 <= nxt < demand.size else 0.0

    def _burst_gpus(self, now: float) -> float:
        """The most GPUs that arrived within any `BURST_WINDOW_S` over the last `BURST_HISTORY_S`."""
        lo = int(np.searchsorted(self._submit_sorted, now - BURST_HISTORY_S, side="left"))
        hi = int(np.searchsorted(self._submit_sorted, now, side="right"))
        if hi <= lo:
            return 0.0
        t = self._submit_sorted[lo:hi]
        ends = np.searchsorted(self._submit_sorted, t + BURST_WINDOW_S, side="right")
        ends = np.minimum(ends, hi)
        starts = np.arange(lo, hi)
        return float((self._gpus_cum[ends] - self._gpus_cum[starts]).max())

    def _forecast_expiry(self, now: float) -> float | None:
        """When the oldest arrival the forecast counts leaves its history window."""
        lo = int(np.searchsorted(self._submit_sorted, now - BURST_HISTORY_S, side="left"))
        if lo >= self._submit_sorted.size or self._submit_sorted[lo] > now:
            return None
        return float(self._submit_sorted[lo]) + BURST_HISTORY_S + 1.0

    # --- the round --------------------------------------------------------------------------------------------
    def allocate(self, view: ClusterView) -> Decision:
        now = view.now
        pending = view.pending_jobs()
        running = view.running_jobs()
        self._slowed.intersection_update(running.tolist())
        headroom = self._forecast_gpus(now) if self.on("right-sizing") else None
        # The forecast falls when its oldest arrival leaves the history: decide again then, so that headroom for
        # arrivals long past is given back (and idle nodes switch off) without waiting for the next event.
        expiry = self._forecast_expiry(now) if headroom else None
        self.budget.check_floor(view)
        tight = self.budget.tight(view)  # False without a budget
        self._shrink_weight = self.budget.shrink_weight(self.kwh_per_job_hour, tight)
        pairs_due = self.on("colocate") and self.colocation.needs_round(view)
        if pending.size == 0 and not pairs_due and not tight:
            if self.on("regrow"):
                plan = Plan(view)
                self.regrow.widen(view, plan, self._spare_gpus(plan, pending, set(), headroom))
                if plan.assign:
                    decision = plan.decision(running, wake_at=self._sooner(expiry, now))
                    decision.keep_free_gpus = headroom
                    return decision
            return Decision(keep_all=True, keep_free_gpus=headroom, wake_at=self._sooner(expiry, now))
        left = self._seconds_left(view, pending)
        order = self._order(view, pending, left)
        deferred_now = set(view.deferred_jobs().tolist())
        prices = None
        if self.on("price-shift"):
            prices = view.price_ahead_usd_per_mwh(HORIZON_H)
            self.priced_rounds += prices is not None
            prices, with_carbon = carbon_priced(view, prices, self.usd_per_tonne_co2, HORIZON_H)
            self.carbon_rounds += with_carbon
        plan = Plan(view)
        if pairs_due:
            self.colocation.begin_round(view, plan)  # partners that left, pairs judged after observation
        hosts: dict | None = None  # running jobs a waiting one may join (colocate), found when first needed
        unpaired: set[tuple] = set()
        defer: list[int] = []
        wake: float | None = None
        start_later: set[int] = set()
        left_of = dict(zip(pending.tolist(), left.tolist(), strict=True))
        if prices is not None and len(prices) > 1:
            for job in pending.tolist():
                if self.service[job]:
                    continue
                when = self._best_start(view, job, left_of[job], np.asarray(prices, dtype=np.float64))
                if when > now:
                    start_later.add(job)
                    wake = when if wake is None else min(wake, when)
        waiting_after: list[int] = []
        starts: list[int] = []
        blocked = False
        if self.on("regrow"):
            self.regrow.give_back(view, plan, [j for j in order if j not in start_later])
        spare = (
            self._spare_gpus(plan, pending, start_later, headroom) if self.on("gpus") and not tight else 0.0
        )
        for job in order:
            if job in start_later:
                continue
            if blocked and not self.service[job]:
                waiting_after.append(job)
                continue
            if self.on("shrink") and not self.service[job]:
                count, left_there = self._narrower(job, now, left_of[job])
                narrow = count < self.gpus[job]
                if narrow and plan.place(job, self._placement_for(count), num_gpu=count) is not None:
                    left_of[job] = left_there  # the clocks' slack is that of the narrower run
                    self.shrunk_starts += 1
                    starts.append(job)
                    continue
            if spare >= 1 and not self.service[job] and self._slack_s(job, now, left_of[job]) >= 0:
                count = self._wider(job, spare)
                if count > self.gpus[job]:
                    wide = plan.place(job, self._placement_for(count), num_gpu=count)
                    if wide is not None:
                        spare -= count - int(self.gpus[job])
                        self.widened_starts += 1
                        starts.append(job)
                        continue
            found = plan.place(job, self._placement_for(int(self.gpus[job])))
            if (
                found is None
                and self.gpus[job] > self.gpus_per_node
                and self._cannot_wait(job, now, left_of[job])
            ):
                # A service, or a job whose deadline cannot wait: without whole nodes free it takes GPUs wherever
                # they are (slower across nodes, but started).
                found = plan.place(job, self.placement)
            elif found is None and self._must_spread(job, now, left_of[job]):
                found = plan.place_across(job, self.placement)
                self.spread_starts += found is not None
            if found is None and self.on("colocate") and not self.service[job]:
                if hosts is None:
                    hosts = self.colocation.hosts(view, plan, self._slowed | set(self.regrow.start_count))
                if self.colocation.try_join(view, plan, job, left_of[job], hosts, unpaired):
                    continue  # it shares a running job's GPUs instead of waiting
            if found is None:
                waiting_after.append(job)
                if not self.service[job] and now - float(self.jobs.submit_s[job]) >= STRICT_AFTER_S:
                    blocked = True  # no backfill past a job that has waited long
                continue
            starts.append(job)
        # Clocks: slow only when no job waits for more GPUs than the whole cluster has free (waiting for a node to
        # boot does not count); else what runs slow goes back to the default.
        if self.on("clocks"):
            if tight or not self._contended(plan, waiting_after):
                for job in starts:
                    if self.service[job] or self._slack_s(job, now, left_of[job]) < 0:
                        continue
                    setting = self._clock(job, now, left_of[job], unbounded=tight)
                    if setting is not DEFAULT_SETTING:
                        target = plan.assign[job]
                        plan.assign[job] = Target(target.placement, target.share_milli, setting)
                        self._slowed.add(job)
                        self.slowed_starts += 1
                if tight:
                    self.budget.retune_running(view, plan, running, set(starts))
            elif self._slowed:
                for job in sorted(self._slowed):
                    target = held_target(view, job)
                    plan.release(job)
                    plan.take(job, Target(target.placement, target.share_milli, DEFAULT_SETTING))
                self._slowed.clear()
        if (
            self.on("regrow") and not waiting_after and not tight
        ):  # nothing waits: the spare beyond the headroom only
            nothing = np.zeros(0, dtype=np.int64)
            self.regrow.widen(view, plan, self._spare_gpus(plan, nothing, set(), headroom))
        defer = sorted(j for j in start_later if j not in deferred_now)
        self.deferrals += len(defer)
        undefer = sorted(j for j in deferred_now if j not in start_later)
        if expiry is not None:
            wake = expiry if wake is None else min(wake, expiry)
        wake = self._sooner(wake, now)
        decision = plan.decision(running, wake_at=wake, defer=defer, undefer=undefer)
        decision.keep_free_gpus = headroom
        return decision

    def _sooner(self, wake: float | None, now: float) -> float | None:
        """`wake`, or the next co-located pair's judgement if sooner (colocate)."""
        due = self.colocation.next_due(now) if self.colocation.due else None
        if due is None:
            return wake
        return due if wake is None else min(wake, due)

    def _cannot_wait(self, job: int, now: float, seconds_left: float) -> bool:
        """A service, or a training job whose deadline leaves less than `URGENT_SLACK_S` of slack."""
        return bool(self.service[job]) or self._slack_s(job, now, seconds_left) < URGENT_SLACK_S

    def _must_spread(self, job: int, now: float, seconds_left: float) -> bool:
        """A training job on several GPUs whose deadline cannot wait for a node to boot (SPREAD_SLACK_S)."""
        if self.service[job] or self.gpus[job] < 2 or math.isnan(self.deadline[job]):
            return False
        return float(self.deadline[job]) - now - seconds_left < SPREAD_SLACK_S

    def _contended(self, plan: Plan, waiting: list[int]) -> bool:
        """Whether the jobs left waiting ask for more GPUs than are free on every node, powered or not."""
        if not waiting:
            return False
        demand = float((self.gpus[waiting] * self.jobs.gpu_milli[waiting] / 1000.0).sum())
        return demand > float(plan.state.free_gpus.sum())

    def _placement_for(self, count: int):
        return self.gang_placement if count > self.gpus_per_node else self.placement

    def _spare_gpus(self, plan: Plan, pending: np.ndarray, later: set[int], headroom: float | None) -> float:
        """Free GPUs on powered nodes beyond what every waiting job (and the forecast headroom) asks for."""
        state = plan.state
        free = float(state.free_gpus[state.available].sum())
        asked = [j for j in pending.tolist() if j not in later]
        demand = float((self.gpus[asked] * self.jobs.gpu_milli[asked] / 1000.0).sum()) if asked else 0.0
        return free - demand - (headroom or 0.0)

    def _order(self, view: ClusterView, pending: np.ndarray, left: np.ndarray) -> list[int]:
        """Services, then urgent jobs by deadline, then the rest by response ratio (queue on) or arrival."""
        submit = self.jobs.submit_s[pending]
        if not self.on("queue"):
            return pending[np.lexsort((pending, submit, ~self.service[pending]))].tolist()
        now = view.now
        deadline = self.deadline[pending]
        slack = np.where(np.isnan(deadline), np.inf, deadline - DEADLINE_MARGIN_S - now - left)
        urgent = slack < URGENT_SLACK_S
        waited = np.maximum(now - submit, 0.0)
        ratio = (waited + left) / np.maximum(left, 1.0)
        group = np.where(self.service[pending], 0, np.where(urgent, 1, 2))
        key = np.where(urgent, np.nan_to_num(deadline, nan=np.inf), -ratio)
        return pending[np.lexsort((pending, submit, key, group))].tolist()


ALLOCATION_POLICIES.register(NAME)(WattschedGreen)

_SUFFIX = re.compile(r"-(w|s|g|x|k|j|c)(\d+(?:\.\d+)?)$")
_WEIGHT = {
    "w": "usd_per_job_hour",
    "s": "max_slowdown",
    "g": "scale_tolerance",
    "x": "max_stretch",
    "k": "kwh_per_job_hour",
    "j": "colocation_bound",
    "c": "usd_per_tonne_co2",
}


def parse_name(name: str) -> dict[str, Any] | None:
    """The settings a ``wattsched-green[-no-<mechanism>...][-w<usd>][-s<slowdown>]`` name stands for (None: not
    one of these names)."""
    if not name.startswith(NAME):
        return None
    rest = name[len(NAME) :]
    params: dict[str, Any] = {}
    while True:
        m = _SUFFIX.search(rest)
        if m is None:
            break
        key = _WEIGHT[m.group(1)]
        if key in params:
            return None
        params[key] = float(m.group(2))
        rest = rest[: m.start()]
    off: list[str] = []
    while rest:
        m = re.match(r"-no-(" + "|".join(re.escape(x) for x in MECHANISMS) + r")(?=-no-|$)", rest)
        if m is None:
            return None
        off.append(m.group(1))
        rest = rest[m.end() :]
    if len(set(off)) != len(off):
        return None
    params["mechanisms"] = tuple(x for x in MECHANISMS if x not in off)
    return params


def green_name(
    off: Iterable[str] = (),
    usd_per_job_hour: float | None = None,
    max_slowdown: float | None = None,
    scale_tolerance: float | None = None,
    max_stretch: float | None = None,
    kwh_per_job_hour: float | None = None,
    colocation_bound: float | None = None,
    usd_per_tonne_co2: float | None = None,
) -> str:
    """The registered name of the policy with `off` switched off and the weights given (None: the default; the
    inverse of :func:`parse_name`)."""
    name = NAME + "".join(f"-no-{m}" for m in MECHANISMS if m in set(off))
    weights = (
        ("w", usd_per_job_hour),
        ("s", max_slowdown),
        ("g", scale_tolerance),
        ("x", max_stretch),
        ("k", kwh_per_job_hour),
        ("j", colocation_bound),
        ("c", usd_per_tonne_co2),
    )
    for letter, value in weights:
        if value is not None:
            name += f"-{letter}{_decimal(value)}"
    return name


def _decimal(value: float) -> str:
    """A weight in plain decimal digits (never an exponent), as :func:`parse_name` reads it."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def _resolve(name: str):
    params = parse_name(name)
    if params is None or name == NAME:
        return None
    return lambda **kw: WattschedGreen(**{**params, **kw})


ALLOCATION_POLICIES.register_family(
    "wattsched-green[-no-<mechanism>...][-w<usd>][-s<slowdown>][-g<tolerance>][-x<stretch>][-k<kwh>][-c<usd/t>]",
    _resolve,
)
