"""Baseline queue policies: FIFO, shortest-job-first (oracle durations), EASY backfilling, and the list-scheduling
baselines of the HKBU comparisons (EDF or arrival order, every job that fits starts)."""

from __future__ import annotations

import numpy as np

from ..core.jobs import JobTable
from .base import QUEUE_POLICIES, PassContext, QueuePolicy


def start_in_order_until_blocked(ctx: PassContext) -> int | None:
    """Start jobs in priority order; return the first job that could not start (it blocks the rest)."""
    for job in ctx.pending():
        if not ctx.try_start(job):
            return job
    return None


@QUEUE_POLICIES.register("fifo")
class Fifo(QueuePolicy):
    """Submission order; the first job that cannot be placed blocks every job behind it."""

    name = "fifo"
    description = "first in, first out, strict (head-of-line blocking)"

    def priority(self, jobs: JobTable) -> np.ndarray:
        return jobs.submit_s

    def run_pass(self, ctx: PassContext) -> None:
        start_in_order_until_blocked(ctx)


@QUEUE_POLICIES.register("sjf")
class ShortestJobFirst(QueuePolicy):
    """Shortest (oracle) duration first, strict order: a job that cannot be placed blocks longer ones."""

    name = "sjf"
    description = "shortest job first using the trace's (oracle) durations, strict order"

    def priority(self, jobs: JobTable) -> np.ndarray:
        return jobs.duration_s

    def run_pass(self, ctx: PassContext) -> None:
        start_in_order_until_blocked(ctx)


@QUEUE_POLICIES.register("backfill")
class EasyBackfill(QueuePolicy):
    """FIFO with EASY backfilling (Lifka 1995) on oracle durations.

    The first blocked job gets a reservation at the *shadow time*, the earliest time at which, by the expected
    ends of running jobs, enough GPUs are free cluster-wide. A later job may start now if it fits and either ends
    by the shadow time or only uses GPUs beyond what the reservation needs ("extra" GPUs). The reservation counts
    GPUs cluster-wide, not per node or GPU model: a documented approximation for heterogeneous clusters.
    """

    name = "backfill"
    description = "FIFO + EASY backfilling with oracle durations (cluster-wide GPU reservation)"

    def priority(self, jobs: JobTable) -> np.ndarray:
        return jobs.submit_s

    def run_pass(self, ctx: PassContext) -> None:
        jobs = ctx.jobs
        pending = iter(ctx.pending())
        head = None
        for job in pending:
            if not ctx.try_start(job):
                head = job
                break
        if head is None:
            return
        need = float(jobs.num_gpu[head] * jobs.gpu_milli[head]) / 1000.0
        free_now = float(ctx.free_gpus_total())
        ends, gpus = ctx.running_release_profile()
        order = np.argsort(ends, kind="stable")
        available = free_now + np.cumsum(gpus[order])
        reached = np.flatnonzero(available >= need)
        if reached.size == 0:
            shadow, extra = np.inf, 0.0  # never enough by running jobs alone: backfill anything that fits
        else:
            shadow = float(ends[order][reached[0]])
            extra = float(available[reached[0]] - need)
        for job in pending:
            demand = float(jobs.num_gpu[job] * jobs.gpu_milli[job]) / 1000.0
            ends_in_time = ctx.now + float(jobs.duration_s[job]) <= shadow
            if (ends_in_time or demand <= extra) and ctx.try_start(job) and not ends_in_time:
                extra -= demand


def start_every_job_that_fits(ctx: PassContext) -> None:
    """List scheduling: every waiting job that fits starts, in priority order; none blocks another."""
    for job in ctx.pending():
        ctx.try_start(job)


@QUEUE_POLICIES.register("edf-greedy")
class EdfGreedy(QueuePolicy):
    """HKBU-DVFS-style EDF at default clocks: waiting jobs in order of deadline (no deadline last), each started
    as soon as it fits; a job that does not fit blocks nothing (list scheduling)."""

    name = "edf-greedy"
    description = "earliest deadline first, start every job that fits (HKBU baseline)"

    def priority(self, jobs: JobTable) -> np.ndarray:
        # Deadlines below 2^52 s keep their order after adding the submission time scaled far down.
        deadline = np.where(np.isnan(jobs.deadline_s), np.inf, jobs.deadline_s)
        return deadline + 1e-9 * (jobs.submit_s - jobs.submit_s.min(initial=0.0))

    def run_pass(self, ctx: PassContext) -> None:
        start_every_job_that_fits(ctx)


@QUEUE_POLICIES.register("arrival-greedy")
class ArrivalGreedy(QueuePolicy):
    """Greedy first-fit at default clocks: waiting jobs in arrival order, each started as soon as it fits."""

    name = "arrival-greedy"
    description = "arrival order, start every job that fits (HKBU baseline)"

    def priority(self, jobs: JobTable) -> np.ndarray:
        return jobs.submit_s

    def run_pass(self, ctx: PassContext) -> None:
        start_every_job_that_fits(ctx)
