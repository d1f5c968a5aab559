"""The job performance model the engine and policies query (docs/perf.md).

For every job it knows the amount of work (``work``: seconds at full speed for a job without a model, iterations
for a job with one) and answers, for a configuration (GPU type, GPU count, nodes and switches spanned, GPU
setting, co-runners):

* ``solo_rate``: progress per second running alone on its GPUs;
* ``shared_factor``: the slowdown from co-runners on shared GPUs (measured pairs, else time-slicing);
* ``gpu_load``: the utilisation it adds to each of its GPUs, times the setting's power scale (what the power
  models turn into watts);
* ``energy_per_iteration``: GPU energy per unit of work (what PowerFlow-, Zeus- and CE-DLA-style policies optimise).

A job without a model keeps the behaviour of a plain trace replay exactly: it runs at speed 1 (times the DVFS
speed of its setting) wherever it is placed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.cluster import ClusterSpec
from ..core.gpus import gpu_model
from ..core.jobs import JobTable
from ..energy.dvfs import DEFAULT_SETTING, GpuSetting, dvfs_response
from .restart import RestartModel


class PerformanceModel:
    def __init__(
        self,
        jobs: JobTable,
        spec: ClusterSpec,
        job_load: np.ndarray,
        restart: RestartModel | None = None,
    ):
        self.jobs = jobs
        self.spec = spec
        self.job_load = np.asarray(job_load, dtype=np.float64)  # per-GPU utilisation, trace share included
        self.restart = restart or RestartModel()
        n = len(jobs)
        self.modelled = np.zeros(n, dtype=bool)
        self.work = jobs.duration_s.astype(np.float64).copy()
        self.checkpoint_gb = np.zeros(n)
        self.notes: list[str] = []

    # --- rates ----------------------------------------------------------------------------------------------
    def speed(self, gpu_code: int, setting: GpuSetting) -> float:
        """DVFS speed factor of a setting on a GPU type (1 at the default setting)."""
        if setting is DEFAULT_SETTING or setting == DEFAULT_SETTING or gpu_code < 0:
            return 1.0
        return dvfs_response(self.spec.gpu_models[gpu_code], setting)[0]

    def power_scale(self, gpu_code: int, setting: GpuSetting) -> float:
        if setting is DEFAULT_SETTING or setting == DEFAULT_SETTING or gpu_code < 0:
            return 1.0
        return dvfs_response(self.spec.gpu_models[gpu_code], setting)[1]

    def solo_rate(
        self, job: int, gpu_code: int, num_gpus: int, nodes: int, switches: int, setting: GpuSetting
    ) -> float:
        """Work units per second with the job alone on its GPUs."""
        return self.speed(gpu_code, setting)

    def gpu_load(self, job: int, gpu_code: int, setting: GpuSetting) -> float:
        """Utilisation the job adds to each of its GPUs, times its setting's dynamic-power scale."""
        load = self.job_load[job]
        scale = self.power_scale(gpu_code, setting)
        return load if scale == 1.0 else load * scale

    def slicing_utilisation(self, job: int) -> float:
        """The job's solo GPU utilisation, which time-slicing divides among co-runners."""
        return float(self.job_load[job])

    def shared_factor(self, job: int, gpu_code: int, co_runners: Sequence[Sequence[int]]) -> float:
        """Speed relative to running alone, given the other jobs on each of its GPUs (synchronous training runs
        at the pace of its slowest GPU). Time-slicing: on a GPU whose jobs' utilisations sum to U > 1, each gets
        1/U of its solo speed."""
        factor = 1.0
        own = self.slicing_utilisation(job)
        for others in co_runners:
            if not others:
                continue
            total = own + sum(self.slicing_utilisation(k) for k in others)
            if total > 1.0:
                factor = min(factor, 1.0 / total)
        return factor

    def memory_gib(self, job: int) -> float:
        """GPU memory the job needs on each GPU (0 when unknown: a fractional pod's quota isolates it)."""
        return 0.0

    # --- energy ---------------------------------------------------------------------------------------------
    def gpu_power_w(self, job: int, gpu_code: int, setting: GpuSetting) -> float:
        """Draw of one of the job's GPUs running alone: P_idle + (P_max - P_idle) * min(1, load)."""
        model = gpu_model(self.spec.gpu_models[gpu_code])
        load = min(1.0, self.gpu_load(job, gpu_code, setting))
        return model.idle_w + (model.max_w - model.idle_w) * load

    def energy_per_unit(
        self, job: int, gpu_code: int, num_gpus: int, nodes: int, switches: int, setting: GpuSetting
    ) -> float:
        """GPU energy (J) per unit of work (an iteration, or a second of work for a job without a model)."""
        rate = self.solo_rate(job, gpu_code, num_gpus, nodes, switches, setting)
        return num_gpus * self.gpu_power_w(job, gpu_code, setting) / rate

    energy_per_iteration = energy_per_unit

    # --- restarts -------------------------------------------------------------------------------------------
    def restart_delay_s(self, job: int, num_gpus: int, same_gpus: bool) -> float:
        return self.restart.delay_s(num_gpus, same_gpus, float(self.checkpoint_gb[job]))

    def describe(self) -> dict[str, Any]:
        return {
            "jobs_with_model": int(self.modelled.sum()),
            "work_unit": "iterations for jobs with a model, seconds at full speed otherwise",
            **self.restart.describe(),
        }
