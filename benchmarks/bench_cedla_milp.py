"""CE-DLA planners: the exact MILP at the size the exact planner is held to, and the greedy's cost gap to it.

1. Random instances of the limit solve to optimality (relative gap 1e-4) in 60 s.
2. On 20 random small instances (4 nodes of 8 GPUs, 24 slots, 8 jobs, 2 services) the greedy planner's cost is
   within 5 % of the MILP optimum; the worst case is reported.

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

from wattsched.policies.allocation.cedla_greedy import solve_greedy
from wattsched.policies.allocation.cedla_milp import random_instance, solve_milp

LIMIT_S = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=3, help="instances at the size limit")
    parser.add_argument("--small", type=int, default=20, help="small instances for the greedy's gap")
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
    gaps = []
    for seed in range(100, 100 + args.small):
        inst = random_instance(seed, nodes=4, slots=24, jobs=8)
        exact, greedy = solve_milp(inst), solve_greedy(inst)
        gaps.append(greedy.cost_usd / exact.cost_usd - 1.0)
    worst = int(np.argmax(gaps))
    ok = max(gaps) <= 0.05
    missed |= not ok
    print(
        f"greedy vs MILP on {len(gaps)} small instances: mean gap {100 * np.mean(gaps):.2f} %, worst "
        f"{100 * gaps[worst]:.2f} % (seed {100 + worst}); target within 5 %: " + ("met" if ok else "MISSED")
    )
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
