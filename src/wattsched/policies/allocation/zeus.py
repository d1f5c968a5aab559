"""Zeus power-limit optimiser as a per-job baseline (You et al., NSDI'23; ``ml-energy/zeus``
``zeus/optimizer/power_limit.py``, docs/seed-systems.md §6), on the allocation contract.

Jobs start in submission order (strict FIFO) at their trace GPU count, first-fit, at the maximum power limit.
Each job then profiles just in time, as Zeus does during training: from the maximum limit down to the minimum in
25 W steps, 10 warm-up and 40 measured iterations per limit; the profiled iterations are real training progress
and their time and energy are charged at that limit. Then the job runs to the end at the limit that minimises
Zeus' cost ``eta * E + (1 - eta) * MaxPL * world_size * T`` per iteration (eta = 0.5), with E and T from the
performance model at each profiled limit (noise-free measurements). Allocation is fixed: no preemption, no
resizing.

Inference service-hours (``job_class == INFERENCE``) are outside Zeus' rule (the paper tunes training jobs): each
starts as soon as it fits, ahead of the FIFO queue, on its asked GPUs at the default setting, and is not profiled.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.gpus import gpu_model
from ...core.jobs import INFERENCE
from ...core.settings import GpuSetting
from ...core.states import STATUS_DONE
from ...energy.dvfs import power_limit_range
from ..contract import (
    ALLOCATION_POLICIES,
    AllocationPolicy,
    BindContext,
    Capability,
    ClusterView,
    Decision,
    Target,
)
from ..placement import FirstFit
from ..planning import Plan, held_target, job_gpu_codes


@ALLOCATION_POLICIES.register("zeus-pl")
class ZeusPowerLimit(AllocationPolicy):
    name = "zeus-pl"
    needs = frozenset({Capability.SETS_GPU_SETTINGS})
    description = "per-job power limit minimising Zeus cost 0.5*E + 0.5*MaxPL*T, profiled just in time (Zeus)"
    needs_models = True
    decide_on_arrival = True
    decide_on_completion = True

    def __init__(
        self, eta: float = 0.5, pl_step_w: float = 25.0, warmup_steps: int = 10, profile_steps: int = 40
    ) -> None:
        if not 0 <= eta <= 1:
            raise ValueError(f"eta must lie in [0, 1], got {eta}")
        self.eta = float(eta)
        self.step_w = float(pl_step_w)
        self.iterations_per_limit = int(warmup_steps) + int(profile_steps)
        self.placement = FirstFit()
        self.profiles: dict[int, list[float]] = {}  # job -> limits (W) still to profile, highest first
        self.step_end: dict[int, float] = {}
        self.chosen: dict[int, float] = {}

    def bind(self, ctx: BindContext) -> None:
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        self.perf = ctx.perf
        self.spec = ctx.spec
        self.submit = ctx.jobs.submit_s
        self.codes = job_gpu_codes(ctx)
        self.is_service = ctx.jobs.job_class == INFERENCE

    def parameters(self) -> dict[str, Any]:
        values = np.array(list(self.chosen.values())) if self.chosen else np.zeros(0)
        return {
            "eta": self.eta,
            "pl_step_w": self.step_w,
            "iterations_per_limit": self.iterations_per_limit,
            "jobs_tuned": len(self.chosen),
            "mean_chosen_limit_w": float(values.mean()) if values.size else None,
        }

    def _limits(self, code: int) -> list[float]:
        name = self.spec.gpu_models[code]
        model = gpu_model(name)
        lo, _ = power_limit_range(name)
        floor = lo * model.power_limit_max_w
        limits, w = [], model.power_limit_max_w
        while w >= floor - 1e-9:
            limits.append(w)
            w -= self.step_w
        return limits

    def _setting(self, code: int, watts: float) -> GpuSetting:
        return GpuSetting(
            power_limit_fraction=watts / gpu_model(self.spec.gpu_models[code]).power_limit_max_w
        )

    def _shape(self, target: Target) -> tuple[int, int, int]:
        placement = target.placement
        return target.num_gpus, len(placement), len({int(self.spec.switch_id[n]) for n, *_ in placement})

    def _cost(self, job: int, code: int, target: Target, watts: float) -> float:
        n, nodes, switches = self._shape(target)
        setting = self._setting(code, watts)
        rate = self.perf.solo_rate(job, code, n, nodes, switches, setting)
        energy = self.perf.energy_per_unit(job, code, n, nodes, switches, setting)
        max_pl = gpu_model(self.spec.gpu_models[code]).power_limit_max_w
        return self.eta * energy + (1.0 - self.eta) * max_pl * n / rate

    def _next_step(self, view: ClusterView, job: int, target: Target, watts: float) -> float:
        code = int(self.codes[job])
        n, nodes, switches = self._shape(target)
        rate = self.perf.solo_rate(job, code, n, nodes, switches, self._setting(code, watts))
        return view.now + self.iterations_per_limit / rate

    def allocate(self, view: ClusterView) -> Decision:
        plan = Plan(view)
        running = view.running_jobs()
        for job in running.tolist():
            if job not in self.profiles or view.now < self.step_end[job] - 1e-9:
                continue
            target = held_target(view, job)
            code = int(self.codes[job])
            self.profiles[job].pop(0)
            if self.profiles[job]:
                watts = self.profiles[job][0]
                self.step_end[job] = self._next_step(view, job, target, watts)
            else:  # profiling done: the limit with the least Zeus cost
                del self.profiles[job], self.step_end[job]
                limits = self._limits(code)
                watts = min(limits, key=lambda w: self._cost(job, code, target, w))
                self.chosen[job] = watts
            plan.release(job)
            plan.take(job, Target(target.placement, target.share_milli, self._setting(code, watts)))
        pending = view.pending_jobs()
        pending = pending[np.argsort(self.submit[pending], kind="stable")]
        services = self.is_service[pending]
        for job in pending[services].tolist():  # the job model's fixed demand: default setting, no queue
            plan.place(job, self.placement)
        for job in pending[~services].tolist():
            code = int(self.codes[job])
            if code < 0:
                found = plan.place(job, self.placement)
            else:
                limits = self._limits(code)
                found = plan.place(job, self.placement, setting=self._setting(code, limits[0]))
                if found is not None:
                    self.profiles[job] = limits
                    self.step_end[job] = self._next_step(view, job, plan.assign[job], limits[0])
            if found is None:
                break  # strict FIFO
        for job in [j for j in self.profiles if view.status[j] == STATUS_DONE]:  # finished while profiling
            del self.profiles[job], self.step_end[job]
        wake = min(self.step_end.values()) if self.step_end else None
        return plan.decision(running, wake_at=wake)
