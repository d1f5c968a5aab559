"""Seed-system experiments (PowerFlow, EaCO): wall time of each whole experiment, with a reference in the same run.

The targets are absolute: each experiment under 10 minutes on 2 cores. Machines of the same kind differ
up to 3x in speed, so the Philly replay (fifo + best-fit, the foundation case) is timed in the same invocation and
each experiment's time is also reported as a ratio to it; BENCHMARKS.md records both times and the ratio.

- ``powerflow``: `wattsched experiment powerflow --workload pollux/workload-6 --cluster n16g4 --gpu-type T4
  --seeds 3` (96 runs).
- ``eaco``: `wattsched experiment eaco --nodes 28,64 --seeds 3` (24 runs, first 500 jobs of gavel/msr/all).

    WATTSCHED_DATA=../shared/data python benchmarks/bench_experiments.py [--only eaco]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

TARGET_S = 600.0


def replay_s() -> float:
    from wattsched.experiments.config import SimulationConfig
    from wattsched.experiments.run import run_simulation

    cfg = SimulationConfig(workload="philly", cluster="philly", queue="fifo", placement="best-fit")
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        run_simulation(cfg, out)
        return time.perf_counter() - t0


def powerflow_s(out: str) -> float:
    from wattsched.experiments.powerflow import run_experiment

    t0 = time.perf_counter()
    run_experiment("pollux/workload-6", "n16g4", gpu_type="T4", seeds=3, out=out, plots=False)
    return time.perf_counter() - t0


def eaco_s(out: str) -> float:
    from wattsched.experiments.eaco import run_experiment

    t0 = time.perf_counter()
    run_experiment(nodes=(28, 64), seeds=3, out=out, plots=False)
    return time.perf_counter() - t0


CASES = {"powerflow": powerflow_s, "eaco": eaco_s}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=list(CASES), action="append")
    args = parser.parse_args()
    if not os.environ.get("WATTSCHED_DATA"):
        sys.exit("set WATTSCHED_DATA to the datasets directory (e.g. ../shared/data)")
    reference = replay_s()
    print(f"reference: Philly replay (fifo + best-fit) {reference:.1f} s")
    missed = False
    for name, fn in CASES.items():
        if args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory() as out:
            wall = fn(out)
        ok = wall <= TARGET_S
        missed |= not ok
        print(
            f"{name:10s} {wall:7.1f} s  ratio to replay {wall / reference:6.1f}x  target < {TARGET_S:.0f} s: "
            + ("met" if ok else "MISSED")
        )
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
