"""Decision latency of the live scheduler with 1,000 pending jobs, on the 3-node test cluster shape and on
the 1,213-node Alibaba v2023 shape, through the in-memory Slurm front end (JSON as Slurm 22.05 prints it).

A decision is the scheduler's pass (wattsched_decision_latency_seconds); reading the state (sinfo/squeue JSON parsed
into the mirror) and letting the started jobs go are timed apart. Targets: p99 under 50 ms (3 nodes) and 200 ms
(1,213 nodes). The Alibaba shape needs the alibaba-gpu-v2023 dataset (WATTSCHED_DATA or --data-dir); without it
that part is skipped.

    python benchmarks/bench_live_decision.py [--data-dir DIR] [--jobs 1000] [--decisions 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from wattsched.backends.driver import LiveDriver
from wattsched.backends.slurm.backend import SlurmBackend
from wattsched.backends.slurm.fake import FakeNode, FakeSlurm
from wattsched.backends.store import JobStore
from wattsched.core.errors import DataNotFoundError
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import build_scheduler

TARGETS_MS = {"3 nodes": 50.0, "alibaba-v2023": 200.0}


def measure(fake: FakeSlurm, queue: str, placement: str, jobs: int, decisions: int, seed: int = 0) -> dict:
    """Jobs that fill the cluster, and a queue topped up to `jobs` held jobs before every observation, so that every
    decision passes over about `jobs` pending jobs."""
    rng = np.random.default_rng(seed)
    per_node = max(n.gpus for n in fake.nodes.values())

    def submit_one() -> int:
        g = int(min(rng.choice([1, 1, 1, 2, 2, 4, 8]), per_node))
        fake.submit(g, duration_s=float(rng.uniform(5, 50)), model="")  # any GPU model, on one node
        return g

    capacity = sum(n.gpus for n in fake.nodes.values())
    demand = 0
    while demand < capacity:
        demand += submit_one()
    backend = SlurmBackend(runner=fake, retry_wait_s=0.0, clock=lambda: fake.now)
    cfg = SimulationConfig(queue=queue, placement=placement)
    driver = LiveDriver(backend, build_scheduler(cfg.scheduler_config(), None), JobStore(":memory:"))
    observe, applied, pending = [], [], []
    for _ in range(20 * decisions):  # bounded
        if len(pending) >= decisions:
            break
        fake.advance(fake.now + 1.0)
        held = sum(1 for j in fake.jobs.values() if j.state == "PENDING" and j.held)
        for _ in range(jobs - held):
            submit_one()
        t0 = time.perf_counter()
        result = driver.step()
        if result.decided:
            observe.append(time.perf_counter() - t0 - result.latency_s - result.apply_s)
            applied.append(result.apply_s)
            pending.append(driver.latencies_s[-1])
    lat = np.array(pending) * 1e3
    return {
        "pending": jobs,
        "decisions": int(lat.size),
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
        "max_ms": float(lat.max()),
        "observe_p50_ms": float(np.median(observe) * 1e3),
        "apply_p50_ms": float(np.median(applied) * 1e3),
    }


def alibaba_fake(data_dir: str | None) -> FakeSlurm | None:
    from wattsched.workloads.clusters import load_cluster

    try:
        spec = load_cluster("alibaba-v2023", data_dir)
    except DataNotFoundError as exc:
        print(f"alibaba-v2023 shape skipped: {exc}")
        return None
    gpu = np.flatnonzero(spec.gpu_count > 0)
    return FakeSlurm([
        FakeNode(f"node{i:04d}", int(spec.gpu_count[i]), spec.gpu_models[spec.gpu_model_code[i]].lower(),
                 int(spec.cpu_milli[i] // 1000), int(spec.memory_mib[i]))
        for i in gpu
    ])  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--decisions", type=int, default=200)
    args = p.parse_args()
    shapes = {"3 nodes": lambda: FakeSlurm.uniform(3), "alibaba-v2023": lambda: alibaba_fake(args.data_dir)}
    head = "| cluster | nodes | queue + placement | decisions | pending | p50 ms | p99 ms | max ms "
    print(head + "| target p99 | observe p50 ms | apply p50 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, build in shapes.items():
        for queue, placement in (("fifo", "best-fit"), ("fifo", "fgd"), ("arrival-greedy", "best-fit")):
            fake = build()
            if fake is None:
                break
            r = measure(fake, queue, placement, args.jobs, args.decisions)
            ok = "met" if r["p99_ms"] < TARGETS_MS[name] else "NOT met"
            print(f"| {name} | {len(fake.nodes)} | {queue} + {placement} | {r['decisions']} | {r['pending']} | "
                  f"{r['p50_ms']:.2f} | "
                  f"{r['p99_ms']:.2f} | {r['max_ms']:.2f} | < {TARGETS_MS[name]:g} ms: {ok} | "
                  f"{r['observe_p50_ms']:.1f} | {r['apply_p50_ms']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
