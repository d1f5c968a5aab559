"""CE-DLA exact planner (issue 10): random instances of the issue's size limit solve to optimality in 60 s.

Instances: 20 nodes of 8 GPUs, 48 hourly slots (two days of a sine-shaped price with seeded noise), 50 training
jobs (work 2-40 GPU-hours, 1-8 GPUs, windows of 12-48 slots from a seeded arrival), 2 inference services with a
diurnal GPU demand. Reports build + solve time per seed and whether HiGHS proved optimality. No trace data needed.

    python benchmarks/bench_cedla_milp.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from wattsched.policies.allocation.cedla_milp import PlanInstance, solve_milp

LIMIT_S = 60.0


def random_instance(seed: int, nodes: int = 20, slots: int = 48, jobs: int = 50) -> PlanInstance:
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    missed = False
    for seed in range(args.seeds):
        inst = random_instance(seed)
        t0 = time.perf_counter()
        plan = solve_milp(inst, time_limit_s=LIMIT_S)
        wall = time.perf_counter() - t0
        ok = plan.status == "optimal" and wall <= LIMIT_S
        missed |= not ok
        print(
            f"seed {seed}: {plan.status}, {wall:5.1f} s (solver {plan.solve_s:.1f} s), cost ${plan.cost_usd:.2f}, "
            f"{plan.energy_kwh:.1f} kWh, node-hours on {int(plan.node_on.sum())} of {plan.node_on.size}: "
            + ("met" if ok else "MISSED")
        )
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
