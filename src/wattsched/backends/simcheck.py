"""Sim-to-live check: one scripted workload, run live and in the simulator, placed and started alike
(docs/live-slurm.md §5).

The live run goes through a :class:`~.driver.LiveDriver` (real Slurm, or the in-memory front end); the simulated
run replays the job table the live mirror built (the same requests, submission times, and the scripted durations)
through the simulator with the same scheduler settings and seed. :func:`compare` lines the two up job by job: the
nodes each job ran on, and the order in which jobs started.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..core.jobs import JobTable
from ..core.placement import Placement
from ..policies.build import SchedulerConfig, SchedulerSettings, build_scheduler
from .driver import LiveDriver

if TYPE_CHECKING:
    from ..engine.temporal import RunOutcome
    from .live import LiveCluster


@dataclass(frozen=True)
class ScriptedJob:
    gpus_per_node: int
    duration_s: float
    num_nodes: int = 1


def _live_cluster(driver: LiveDriver) -> LiveCluster:
    """The live run's mirror of the cluster (the driver builds it on its first observation)."""
    c = driver.cluster
    assert c is not None, "the live run has not observed its cluster yet"
    return c


def simulate_like(
    driver: LiveDriver, cfg: SchedulerConfig | SchedulerSettings, durations_s: dict[str, float]
) -> tuple[JobTable, RunOutcome]:
    """Simulate the live run's jobs (by their ids' scripted durations) on its cluster with its scheduler."""
    from ..engine.temporal import Simulator

    c = _live_cluster(driver)
    jobs = c.jobs
    duration = np.array([durations_s[str(j)] for j in jobs.job_id], dtype=np.float64)
    jobs = replace(jobs, duration_s=duration)
    seeds = np.random.SeedSequence(driver.seed).spawn(3)
    sim = Simulator(jobs, c.spec, build_scheduler(cfg, None), np.random.default_rng(seeds[1]))
    # The live requests, as the cluster manager runs them (a gang of N nodes x G GPUs, one-node jobs never split)
    sim.book = replace(c.book, jobs=jobs)
    outcome = sim.run()
    return jobs, outcome


def compare(
    driver: LiveDriver, cfg: SchedulerConfig | SchedulerSettings, durations_s: dict[str, float]
) -> pd.DataFrame:
    """One row per job: live and simulated nodes and start rank, and whether they agree."""
    c = _live_cluster(driver)
    jobs, outcome = simulate_like(driver, cfg, durations_s)
    names = c.spec.node_names
    sim_nodes = [
        "" if p is None else ",".join(sorted(str(names[n]) for n, *_ in p)) for p in outcome.placements
    ]
    live_nodes = [",".join(sorted(str(names[n]) for n, *_ in _placement(c, j))) for j in range(len(jobs))]
    live_rank = _rank(c.start_s)
    sim_rank = _rank(np.asarray(outcome.start_s, dtype=np.float64))
    frame = pd.DataFrame(
        {
            "job": [str(j) for j in jobs.job_id],
            "gpus": jobs.num_gpu,
            "live_nodes": live_nodes,
            "sim_nodes": sim_nodes,
            "live_start_rank": live_rank,
            "sim_start_rank": sim_rank,
        }
    )
    frame["same_nodes"] = frame.live_nodes == frame.sim_nodes
    frame["same_rank"] = frame.live_start_rank == frame.sim_start_rank
    return frame


def _placement(c: LiveCluster, job: int) -> Placement:
    """What the job holds, else what it held last (empty if it never ran)."""
    return c.targets[job].placement if job in c.targets else c.last_placement.get(job, ())


def _rank(start: np.ndarray) -> np.ndarray:
    """Start order, ties (one decision) by job index; -1 for a job that never started."""
    order = np.lexsort((np.arange(start.size), np.nan_to_num(start, nan=np.inf)))
    rank = np.full(start.size, -1, dtype=np.int64)
    started = ~np.isnan(start[order])
    rank[order[started]] = np.arange(int(started.sum()))
    return rank


# About a minute of jobs (GPUs per node, seconds, nodes) on 3 nodes of 4 GPUs. In the simulator no two of them
# complete less than 3 s apart, and a launch delay of up to 1.5 s on any job changes no placement
# (tests/unit/test_live_backend.py checks both): a live loop then sees completions one at a time, in the
# simulator's order, even when Slurm is slow to start a job. An earlier script had two completions at the same
# second, and which one a live loop saw first was a race.
DEFAULT_SCRIPT = [ScriptedJob(g, s, n) for g, s, n in [
    (2, 15.5, 1), (1, 30, 1), (4, 8, 1), (3, 42.5, 1), (2, 15, 1), (4, 9.5, 2),
    (1, 29, 1), (2, 16.5, 1), (3, 6, 1), (1, 12, 1), (2, 9, 1), (4, 13, 1),
]]  # fmt: skip


def sbatch_args(job: ScriptedJob, payload: str | None = None, gpu_type: str = "a100") -> list[str]:
    """``sbatch`` for a scripted job, held for wattsched to place; a ``sleep`` of its duration by default."""
    return ["sbatch", "--parsable", "--hold", f"-N{job.num_nodes}", f"--gres=gpu:{gpu_type}:{job.gpus_per_node}",
            "--time=5", "--wrap", payload or f"sleep {job.duration_s:g}"]  # fmt: skip


def report(table: pd.DataFrame, latencies_s: list[float], title: str) -> str:
    """Markdown: live and simulated placements and start order side by side, and the decision latency."""
    lat = np.array(latencies_s) * 1e3 if latencies_s else np.zeros(1)
    lines = [
        f"# Sim-to-live check: {title}",
        "",
        f"{len(table)} jobs; same nodes: {int(table.same_nodes.sum())}/{len(table)}; same start order: "
        f"{int(table.same_rank.sum())}/{len(table)}. Decision latency over {len(latencies_s)} decisions: p50 "
        f"{np.percentile(lat, 50):.2f} ms, p99 {np.percentile(lat, 99):.2f} ms, max {lat.max():.2f} ms.",
        "",
        "| job | GPUs | live nodes | simulated nodes | live start | simulated start | same |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        same = "yes" if r.same_nodes and r.same_rank else "**no**"
        lines.append(f"| {r.job} | {r.gpus} | {r.live_nodes} | {r.sim_nodes} | {r.live_start_rank} | "
                     f"{r.sim_start_rank} | {same} |")  # fmt: skip
    return "\n".join(lines) + "\n"
