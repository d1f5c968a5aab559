"""HKBU-DVFS on the allocation contract: deadline-ordered starts with a per-job GPU setting chosen as the HKBU list
scheduler chooses clocks (Wang, Mei, Liu, Leung, Li, Chu, IEEE TPDS 2022; docs/hkbu.md §3).

The list scheduler itself (policies/hkbu_dvfs.py) works on the paper's task model. On a trace, `wattsched
simulate --allocation hkbu-dvfs` applies its rules to DL jobs through the engine's performance and DVFS models:

* waiting jobs are taken in EDF order (earliest deadline first; jobs without one last, by submission) or LPT
  (longest trace duration first), at their trace GPU count; a job that does not fit now waits while later ones
  that fit start (a GPU's FIFO list in the paper has no multi-GPU jobs to block it);
* the GPU rule picks the GPUs: SPT and FF take the first GPUs free (a GPU free now is the earliest-ending one), BF
  the best-fit node, WF the least-allocated one;
* the setting: among the knob's levels, the least GPU energy per unit of work whose finish (now + remaining work at
  that setting's speed) meets the deadline; none meets it: the fastest (the default);
* reconstructed for a cluster of fixed size: the list scheduler never lets a task wait (it switches a node on), so
  it never trades another task's deadline for a slower clock. Here, while a job waits for more GPUs than are free
  (on every node, powered or not: waiting for a boot does not count), new starts get
  the default setting and running jobs below it are retuned to it (a retune costs no restart), so that GPUs free
  as early as they can; otherwise a job keeps its setting to the end;
* DRS is the node power manager's: run with ``--power-manager idle-timeout``;
* inference service-hours (``job_class == INFERENCE``) are outside the rule (the paper schedules training tasks):
  they come first in the order and start at the default setting, whatever their deadline.

The knob is the GPU power limit for ``hkbu-dvfs`` (the response measured on DL training, docs/dvfs.md §2) and the
SM clock for ``hkbu-dvfs-sm`` (the HKBU clock model with the memory clock at its default, docs/dvfs.md §3, under
which lowering the core clock alone seldom saves energy).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ...core.cluster import MILLI
from ...core.gpus import gpu_model
from ...core.jobs import INFERENCE
from ...core.settings import DEFAULT_SETTING, GpuSetting
from ...energy.dvfs import dvfs_response, power_limit_range, sm_clock_range
from ..contract import (
    ALLOCATION_POLICIES,
    AllocationPolicy,
    BindContext,
    Capability,
    ClusterView,
    Decision,
    Target,
)
from ..placement import PLACEMENT_POLICIES
from ..planning import Plan, job_gpu_codes

# GPU rule -> the engine placement that realises it for jobs that start now.
RULE_PLACEMENT = {"spt": "first-fit", "ff": "first-fit", "bf": "best-fit", "wf": "least-allocated"}
KNOB_RANGE = {"power-limit": power_limit_range, "sm-clock": sm_clock_range}
KNOB_FIELD = {"power-limit": "power_limit_fraction", "sm-clock": "sm_clock_fraction"}


class _Levels:
    """A GPU type's knob levels: settings, speed and dynamic-power scale of each, fastest last."""

    def __init__(self, gpu: str, knob: str | None, count: int):
        self.settings = [DEFAULT_SETTING]
        if knob is not None:  # None: the same scheduler at default clocks only
            lo, hi = KNOB_RANGE[knob](gpu)
            fractions = np.linspace(lo, hi, count)[:-1]
            self.settings = [GpuSetting(**{KNOB_FIELD[knob]: float(f)}) for f in fractions] + self.settings
        response = np.array([dvfs_response(gpu, s) for s in self.settings])
        self.speed, self.scale = response[:, 0], response[:, 1]
        model = gpu_model(gpu)
        self.idle_w, self.dynamic_w = model.idle_w, model.max_w - model.idle_w


class HkbuDvfsAllocation(AllocationPolicy):
    name = "hkbu-dvfs"
    knob: ClassVar[str | None] = "power-limit"
    description = "EDF starts, per-job least-energy GPU power limit that meets the deadline (HKBU-DVFS rules)"
    reconstructed = True
    basis = (
        "HKBU-DVFS list scheduling (Wang et al., TPDS 2022): EDF order, SPT GPU rule, least-energy setting "
        "within the deadline; mapped onto multi-GPU DL jobs through the engine's DVFS model (docs/hkbu.md §3)"
    )
    decide_on_arrival = True
    decide_on_completion = True
    needs_deadlines = True

    def __init__(self, order: str = "edf", rule: str = "spt", levels: int = 11) -> None:
        if order not in ("edf", "lpt"):
            raise ValueError(f"order must be edf or lpt, got {order!r}")
        if rule not in RULE_PLACEMENT:
            raise ValueError(f"rule must be one of {', '.join(RULE_PLACEMENT)}, got {rule!r}")
        if levels < 2:
            raise ValueError(f"levels must be at least 2, got {levels}")
        self.order, self.rule, self.level_count = order, rule, int(levels)
        self.chosen: dict[int, float] = {}  # job -> chosen speed factor
        self.met_at_start = 0
        self.late_at_start = 0
        self.speedups = 0  # running jobs retuned to default clocks because others waited

    def bind(self, ctx: BindContext) -> None:
        self.placement = PLACEMENT_POLICIES.create(RULE_PLACEMENT[self.rule])
        self.placement.bind(ctx.spec, ctx.rng, ctx.node_rank)
        self.perf = ctx.perf
        self.spec = ctx.spec
        self.jobs = ctx.jobs
        self.codes = job_gpu_codes(ctx)
        self.levels = {
            code: _Levels(name, self.knob, self.level_count) for code, name in enumerate(ctx.spec.gpu_models)
        }
        deadline = np.where(np.isnan(ctx.jobs.deadline_s), np.inf, ctx.jobs.deadline_s)
        key = deadline if self.order == "edf" else -ctx.jobs.duration_s
        self.is_service = ctx.jobs.job_class == INFERENCE
        self.rank = np.lexsort((ctx.jobs.submit_s, key, ~self.is_service))  # job ids in the policy's order
        self.position = np.empty_like(self.rank)
        self.position[self.rank] = np.arange(self.rank.size)
        self.deadline = deadline

    def parameters(self) -> dict[str, Any]:
        speeds = np.array(list(self.chosen.values())) if self.chosen else np.zeros(0)
        return {
            "order": self.order,
            "gpu_rule": self.rule,
            "placement": RULE_PLACEMENT[self.rule],
            "knob": self.knob,
            "levels": self.level_count,
            "jobs_started": len(self.chosen),
            "jobs_below_default_speed": int((speeds < 1.0 - 1e-12).sum()),
            "mean_chosen_speed": float(speeds.mean()) if speeds.size else None,
            "started_able_to_meet_deadline": self.met_at_start,
            "started_unable_to_meet_deadline": self.late_at_start,
            "retuned_to_default_while_jobs_waited": self.speedups,
            "bounded_cluster_rule": "reconstructed: settings below default only while no job waits for GPUs "
            "(the list scheduler switches a node on instead of letting a task wait)",
            "drs": "the node power manager's (--power-manager idle-timeout)",
        }

    def _setting(self, view: ClusterView, job: int, target: Target) -> GpuSetting:
        """The least-energy level whose finish meets the deadline; the fastest when none does."""
        code = int(self.spec.gpu_model_code[target.placement[0][0]])
        levels = self.levels[code]
        n = target.num_gpus
        nodes = len(target.placement)
        switches = len({int(self.spec.switch_id[node]) for node, *_ in target.placement})
        rate = self.perf.solo_rate(job, code, n, nodes, switches, DEFAULT_SETTING) * levels.speed
        finish = view.now + float(view.remaining_work(np.array([job]))[0]) / rate
        load = float(self.perf.job_load[job])
        energy = (levels.idle_w + levels.dynamic_w * np.minimum(1.0, load * levels.scale)) / rate
        feasible = finish <= self.deadline[job]
        if feasible.any():
            self.met_at_start += 1
            best = int(np.argmin(np.where(feasible, energy, np.inf)))
        else:
            self.late_at_start += 1
            best = int(np.argmax(levels.speed))
        self.chosen[job] = float(levels.speed[best])
        return levels.settings[best]

    def allocate(self, view: ClusterView) -> Decision:
        pending = view.pending_jobs()
        if pending.size == 0:
            return Decision(keep_all=True)  # nothing to start: nothing to slow down or speed up
        plan = Plan(view)
        started: list[int] = []
        unplaced: list[int] = []
        for job in pending[np.argsort(self.position[pending], kind="stable")].tolist():
            (started if plan.place(job, self.placement) is not None else unplaced).append(job)
        # Capacity binds when a waiting job needs more GPUs than are free on all nodes, off ones included (a job
        # that waits only for a node to boot is not held up by slower clocks).
        free_gpus = int((plan.state.gpu_left == MILLI).sum())
        waiting = bool(unplaced) and int(self.jobs.num_gpu[unplaced].max()) > free_gpus
        if waiting:  # everyone at full speed, so that GPUs free as early as they can
            self._full_speed(view, plan)
        for job in started:
            target = plan.assign[job]
            if self.is_service[job]:  # the job model's fixed demand: always the default setting
                self.chosen[job] = 1.0
                continue
            setting = DEFAULT_SETTING if waiting else self._setting(view, job, target)
            if waiting:
                self.chosen[job] = 1.0
            if setting != DEFAULT_SETTING:
                plan.assign[job] = Target(target.placement, target.share_milli, setting)
        return plan.decision()

    def _full_speed(self, view: ClusterView, plan: Plan) -> None:
        """Retune running jobs below default clocks back to the default (no restart: a retune has no delay)."""
        for job in view.running_jobs().tolist():
            target = view.target(job)
            if target is not None and target.setting != DEFAULT_SETTING:
                plan.assign[job] = Target(target.placement, target.share_milli, DEFAULT_SETTING)
                self.speedups += 1


@ALLOCATION_POLICIES.register("hkbu-dvfs")
class HkbuDvfsPowerLimit(HkbuDvfsAllocation):
    needs = frozenset({Capability.SETS_GPU_SETTINGS})


@ALLOCATION_POLICIES.register("hkbu-dvfs-sm")
class HkbuDvfsSmClock(HkbuDvfsAllocation):
    name = "hkbu-dvfs-sm"
    needs = frozenset({Capability.SETS_GPU_SETTINGS})
    knob = "sm-clock"
    description = "EDF starts, per-job least-energy SM clock that meets the deadline (HKBU-DVFS rules)"


@ALLOCATION_POLICIES.register("hkbu-dvfs-default-clocks")
class HkbuDvfsDefaultClocks(HkbuDvfsAllocation):
    """The baseline the DVFS saving is measured against: the same order and GPU rule, every job at default clocks."""

    name = "hkbu-dvfs-default-clocks"
    knob = None
    description = "EDF starts at default clocks (HKBU-DVFS with DVFS off)"
