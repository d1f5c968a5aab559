"""`hkbu-online-pd`: HKBU-OnlinePD-reconstructed as an allocation policy (docs/hkbu-online-pd.md §5).

On each arrival the job gets the schedule (start slot, GPU type, clock) of greatest surplus under the current
GPU-slot prices of the online primal-dual algorithm (``policies.hkbu_online_pd``); it is admitted when the
surplus is positive, and the prices of the GPU-slots it holds rise exponentially with their use. Admitted jobs
start at their planned time (the arrival itself or a later slot boundary) on best-fit GPUs at the planned clock;
the others are rejected at once. The planned time is a GPU-count reservation per type and slot: when the nodes'
fragmentation leaves no place for a job at its planned time, it starts at the next decision that finds one
(counted as a late start).

Inference service-hours (``job_class == INFERENCE``) are outside the admission rule (the project schedules training
jobs): they are not priced and never rejected; each is due on arrival, placed ahead of the other jobs due, on any
GPU type, at the default setting.

Sources: the HKBU project description (RGC 12200418, no code or paper), OASiS (Bao et al., INFOCOM 2018) as the
template, Buchbinder and Naor (2009) for the price function, the HKBU DVFS model (Wang et al., TPDS 2022).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from typing import Any

import numpy as np

from ...core.cluster import MILLI
from ...core.errors import WattschedError
from ...core.gpus import gpu_model
from ...core.jobs import INFERENCE
from ...core.settings import DEFAULT_SETTING, GpuSetting
from ...core.states import STATUS_PENDING
from ...energy.dvfs import sm_clock_range
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
from ..hkbu_online_pd import LABEL, Formulation, OnlinePrimalDual, PdJob, clock_levels
from ..planning import Plan

# Reconstructed defaults (docs/hkbu-online-pd.md §5); every one is reported by parameters().
SLOT_S = 300.0
VALUE_USD_PER_GPU_H = 1.46  # what a user would pay for a P100-hour of work: a cloud on-demand list price
ENERGY_USD_PER_KWH = 0.10
DENSITY_RATIO = 100.0  # L = U / 100: a schedule earning less per GPU-slot is not offered
MAX_SPAN_DAYS = 64.0  # longest schedule (the longest Philly job is 53.6 days)
CLOCKS = (0.7, 0.8, 0.9, 1.0)


@ALLOCATION_POLICIES.register("hkbu-online-pd")
class HkbuOnlinePd(AllocationPolicy):
    name = "hkbu-online-pd"
    needs = frozenset({Capability.SETS_GPU_SETTINGS})
    learned_state = (
        "pd",
        "_arrived",
        "_due",
        "_planned",
        "_failed",
        "_wake_asked",
        "_ready",
    )  # kept when live jobs are added (contract.AllocationPolicy)
    description = (
        f"{LABEL}: online primal-dual admission with exponential GPU-slot prices; each arrival gets the "
        "(start, GPU type, clock) of greatest surplus or is rejected"
    )
    reconstructed = True
    basis = (
        "HKBU RGC 12200418 project description (online RATS ILP, primal-dual; no code or paper); template OASiS "
        "(Bao et al., INFOCOM 2018); price function after Buchbinder & Naor (2009); clocks from the HKBU DVFS "
        "model (Wang et al., TPDS 2022); docs/hkbu-online-pd.md"
    )
    default_round_s = 3600.0  # rounds only retry late starts: arrivals, completions and planned starts decide
    decide_on_arrival = True
    decide_on_completion = True
    needs_deadlines = True

    def __init__(
        self,
        slot_s: float = SLOT_S,
        eta: float = 1.0,
        value_usd_per_gpu_h: float = VALUE_USD_PER_GPU_H,
        energy_usd_per_kwh: float = ENERGY_USD_PER_KWH,
        lateness_weight: float = 0.5,
        density_ratio: float = DENSITY_RATIO,
        max_span_days: float = MAX_SPAN_DAYS,
        clock_fractions: tuple[float, ...] = CLOCKS,
    ) -> None:
        if not (
            slot_s > 0 and eta > 0 and value_usd_per_gpu_h > 0 and density_ratio >= 1 and max_span_days > 0
        ):
            raise WattschedError(
                "hkbu-online-pd: slot, eta, value, density ratio (>= 1) and span must be positive"
            )
        self.slot_s, self.eta = float(slot_s), float(eta)
        self.beta = value_usd_per_gpu_h / 3600.0
        self.energy_usd_per_kwh = float(energy_usd_per_kwh)
        self.lateness_weight = float(lateness_weight)
        self.density_ratio = float(density_ratio)
        self.max_span_slots = math.ceil(max_span_days * 86400.0 / self.slot_s) + 1  # +1: a partial first slot
        self.clocks = clock_levels(clock_fractions)
        self.settings = [
            DEFAULT_SETTING if f >= 1.0 else GpuSetting(sm_clock_fraction=float(f))
            for f in self.clocks.fraction
        ]
        self.placement = PLACEMENT_POLICIES.create("best-fit")
        self.late_starts = self.no_deadline = self.started_without_work = 0
        self.pd: OnlinePrimalDual | None = None

    # --- set-up -----------------------------------------------------------------------------------------------
    def bind(self, ctx: BindContext) -> None:
        spec, jobs = ctx.spec, ctx.jobs
        self.placement.bind(spec, ctx.rng, ctx.node_rank)
        self.jobs, self.spec, self.perf = jobs, spec, ctx.perf
        codes = np.asarray(spec.gpu_model_code)
        self.type_codes = np.unique(codes[codes >= 0])
        if not self.type_codes.size:
            raise WattschedError("hkbu-online-pd needs a cluster with GPUs")
        for code in self.type_codes.tolist():
            gpu = spec.gpu_models[code]
            low = sm_clock_range(gpu)[0]
            if self.clocks.fraction[0] < low - 1e-9:
                raise WattschedError(
                    f"hkbu-online-pd: clock level {self.clocks.fraction[0]:g} is below {gpu}'s lowest allowed SM "
                    f"clock fraction {low:.3g}"
                )
        self.type_nodes = [codes == c for c in self.type_codes.tolist()]
        capacity = np.array([int(spec.gpu_count[m].sum()) for m in self.type_nodes], dtype=np.int64)
        self.gpus_per_node = np.array([max(int(spec.gpu_count[m].max()), 1) for m in self.type_nodes])
        deadline = jobs.deadline_s[np.isfinite(jobs.deadline_s)]
        last = max(float(deadline.max()) if deadline.size else 0.0, float(jobs.submit_s.max(initial=0.0)))
        horizon = math.ceil(last / self.slot_s) + 2
        # g_max, known a priori: the largest request of the workload that fits the type at all (services are not
        # priced).
        self.is_service = jobs.job_class == INFERENCE
        biggest = int(jobs.num_gpu[~self.is_service].max(initial=1))
        max_gpus = np.maximum(np.minimum(biggest, capacity), 1)
        upper = self.beta * self.slot_s  # U: work is measured on each job's fastest type, so speed_max = 1
        self.form = Formulation(
            slot_s=self.slot_s,
            capacity=np.repeat(capacity[:, None], horizon, axis=1),
            idle_w=np.zeros(len(capacity)),  # every job passes its own draw (performance model) instead
            busy_w=np.zeros(len(capacity)),
            clocks=self.clocks,
            energy_usd_per_j=self.energy_usd_per_kwh / 3.6e6,
            density_floor=upper / self.density_ratio,
            value_per_gpu_max=upper * self.max_span_slots,
            max_span_slots=self.max_span_slots,
            max_gpus=max_gpus,
            lateness_weight=self.lateness_weight,
        )
        self.pd = OnlinePrimalDual(self.form, self.eta)
        models = [gpu_model(spec.gpu_models[c]) for c in self.type_codes.tolist()]
        self.idle_w = np.array([m.idle_w for m in models])
        self.span_w = np.array([m.max_w - m.idle_w for m in models])
        self.power_scale = np.array(
            [[self.perf.power_scale(c, s) for s in self.settings] for c in self.type_codes.tolist()]
        )
        self._by_submit = np.argsort(jobs.submit_s, kind="stable")
        self._submit_sorted = jobs.submit_s[self._by_submit]
        self._arrived = 0
        self._due: list[tuple[float, int]] = []  # (planned start, job)
        self._ready: list[int] = []  # due and not yet placed, in planned order
        self._planned: dict[int, tuple[int, GpuSetting, float]] = {}  # job -> (type index, setting, start)
        self._failed = False  # jobs due were left unplaced: retried once capacity changes (or more come due)
        self._wake_asked = -math.inf

    def parameters(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "label": LABEL,
            "slot_s": self.slot_s,
            "eta": self.eta,
            "value_usd_per_gpu_h": self.beta * 3600.0,
            "value_note": "utility u = value x GPU-hours of work x (1 - lateness_weight x (T - a)/(d - a)) for "
            "completion T by the deadline d (reconstructed: a cloud list price for a P100-hour)",
            "lateness_weight": self.lateness_weight,
            "energy_usd_per_kwh": self.energy_usd_per_kwh,
            "energy_note": "GPU energy of the schedule (performance model draw) at one flat price",
            "density_ratio_U_over_L": self.density_ratio,
            "max_span_slots": self.max_span_slots,
            "clock_fractions": [float(f) for f in self.clocks.fraction],
            "gpu_counts": "the trace GPU count",
            "placement": "best-fit at the planned start; a job that finds no place then starts at the next "
            "decision that finds one (late start)",
            "jobs_without_deadline": "rejected",
            "jobs_without_work": "GPU jobs of zero work (zero-duration trace rows) are not priced: they start at "
            "once on the first GPU type with room, like jobs without GPUs (counted: started_without_work)",
        }
        if self.pd is not None:
            out.update(
                {
                    "U_usd_per_gpu_slot": self.form.density_floor * self.density_ratio,
                    "L_usd_per_gpu_slot": self.form.density_floor,
                    "V_usd_per_gpu": self.form.value_per_gpu_max,
                    "max_gpus_per_job": [int(g) for g in self.form.max_gpus],
                    "capacity_gpus": [int(c) for c in self.form.capacity[:, 0]],
                    **{f"bound_{k}": v for k, v in self.pd.bound().items()},
                    "admitted": self.pd.admitted,
                    "rejected": self.pd.rejected,
                    "online_objective_usd": self.pd.objective,
                    "clock_choices": {
                        f"{f:g}": int(n)
                        for f, n in zip(self.clocks.fraction, self.pd.clock_counts, strict=True)
                    },
                    "late_starts": self.late_starts,
                    "rejected_without_deadline": self.no_deadline,
                    "started_without_work": self.started_without_work,
                }
            )
        return out

    # --- one arrival -----------------------------------------------------------------------------------------
    def _job(self, view: ClusterView, j: int, work: float) -> PdJob | None:
        jobs = self.jobs
        g = int(jobs.num_gpu[j])
        deadline = float(jobs.deadline_s[j])
        if not math.isfinite(deadline):
            self.no_deadline += 1
            return None
        run = np.full(len(self.type_codes), np.inf)
        load = np.zeros(len(self.type_codes))
        for k, code in enumerate(self.type_codes.tolist()):
            if g <= self.form.max_gpus[k]:
                nodes = -(-g // int(self.gpus_per_node[k]))
                rate = self.perf.solo_rate(j, code, g, nodes, 1, DEFAULT_SETTING)
                run[k] = work / rate if rate > 0 else np.inf
                load[k] = self.perf.gpu_load(j, code, DEFAULT_SETTING)
        fastest = float(run.min())
        if not math.isfinite(fastest):
            return None
        # perf.gpu_power_w at each clock: P_idle + (P_max - P_idle) min(1, load x power scale of the setting).
        power = self.idle_w[:, None] + self.span_w[:, None] * np.minimum(
            1.0, load[:, None] * self.power_scale
        )
        return PdJob(
            arrival_s=float(view.now),
            work_gpu_s=g * fastest,
            deadline_s=deadline,
            value_per_gpu_s=self.beta,
            gpu_counts=(g,),
            speed=np.where(np.isfinite(run), fastest / run, 0.0),
            power_w=power,
            name=str(jobs.job_id[j]),
        )

    def _type_with_room(self, gpus: int) -> int | None:
        """The first GPU type with at least `gpus` GPUs (type 0 for a job without GPUs), or None: where an unpriced
        job runs, since placement is restricted to the planned type's nodes."""
        fits = np.flatnonzero(self.form.capacity[:, 0] >= gpus)
        return int(fits[0]) if fits.size else None

    def _new_arrivals(self, view: ClusterView) -> list[int]:
        end = int(np.searchsorted(self._submit_sorted, view.now, side="right"))
        new = self._by_submit[self._arrived : end]
        self._arrived = end
        return new[view.status[new] == STATUS_PENDING].tolist()

    # --- the decision ------------------------------------------------------------------------------------------
    def allocate(self, view: ClusterView) -> Decision:
        online = self.pd
        assert online is not None  # made by bind
        reject: list[int] = []
        new = self._new_arrivals(view)
        work = view.remaining_work(np.asarray(new, dtype=np.int64)).tolist() if new else []
        for j, w in zip(new, work, strict=True):
            g = int(self.jobs.num_gpu[j])
            if self.is_service[j]:  # the job model's fixed demand: due now, at the default setting
                self._planned[j] = (-1, DEFAULT_SETTING, view.now)
                heapq.heappush(self._due, (view.now, j))
                continue
            if g == 0 or w <= 0:  # nothing to price (no GPUs or no work): runs at once
                k = self._type_with_room(g)
                if k is None:  # more GPUs than any one type has: it can never start
                    online.rejected += 1
                    reject.append(j)
                    continue
                self.started_without_work += int(g > 0)
                self._planned[j] = (k, DEFAULT_SETTING, view.now)
                heapq.heappush(self._due, (view.now, j))
                continue
            job = self._job(view, j, w)
            offer = online.arrive(job) if job is not None else None
            if offer is None or not offer.admitted:
                if offer is None:
                    online.rejected += 1
                reject.append(j)
                continue
            s = offer.schedule
            assert s is not None  # an admitted offer carries its schedule
            start = max(float(s.start_s[0]), view.now)
            self._planned[j] = (int(s.gpu_type[0]), self.settings[int(s.clock[0])], start)
            heapq.heappush(self._due, (start, j))
        fresh = False
        while self._due and self._due[0][0] <= view.now + 1e-6:
            self._ready.append(heapq.heappop(self._due)[1])
            fresh = True
        assign: dict[int, Target] = {}
        if self._ready and (fresh or not self._failed or view.changes.capacity):
            assign = self._place_ready(view)
            self._failed = bool(self._ready)
        wake = None
        if self._due and self._due[0][0] != self._wake_asked:
            wake = self._wake_asked = self._due[0][0]
        if not assign and not reject and wake is None:
            return Decision(keep_all=True)
        return Decision(keep_all=True, assign=assign, reject=reject, wake_at=wake)

    def _place_ready(self, view: ClusterView) -> dict[int, Target]:
        plan = Plan(view)
        left: list[int] = []
        single_type = len(self.type_codes) == 1
        for j in sorted(self._ready, key=lambda j: not self.is_service[j]):  # services first
            if view.status[j] != STATUS_PENDING:
                continue
            k, setting, start = self._planned[j]
            if single_type or k < 0:  # k < 0: a service, on any GPU type
                found = plan.place(j, self.placement, setting=setting)
            else:
                req = view.request(j)
                req = replace(req, node_mask=req.node_mask & self.type_nodes[k])
                found = self.placement.place(plan.state, req)
                if found is not None:
                    plan.take(j, Target(found, req.gpu_milli if req.gpu_milli > 0 else MILLI, setting))
            if found is None:
                left.append(j)
            elif view.now > start + 1.0:
                self.late_starts += 1
        self._ready = left
        return plan.assign
