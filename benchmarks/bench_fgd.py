"""Benchmark of the FGD/PWR reproduction on the Alibaba v2023 default trace.

(a) one FGD packing run at 1.3x inflation on one core (target <= 5 s wall), beside the same run in the Python pod
    loop (WATTSCHED_NATIVE=0; the compiled one is engine/packing_kernel.c), curves compared;
(b) the whole default grid, 11 policies x 10 seeds, on 2 worker processes (target <= 5 minutes).

Usage: WATTSCHED_DATA=DIR python benchmarks/bench_fgd.py [--skip-grid] [--workers 2] [--seeds 10]
"""

from __future__ import annotations

import os

# One thread per process: the numpy work here is many small arrays, threads only add contention.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

TARGET_ONE_RUN_S = 5.0
TARGET_GRID_S = 300.0


def machine() -> str:
    return (
        f"{platform.platform()} | {platform.processor() or platform.machine()} | "
        f"{os.cpu_count()} logical CPUs | Python {platform.python_version()}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-grid", action="store_true", help="only the single FGD run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()

    from wattsched.core.errors import WattschedError
    from wattsched.experiments.fgd_pwr import DEFAULT_POLICIES, FgdPwr, FgdPwrConfig, run_one, trace_inputs
    from wattsched.experiments.protocol import run_experiment

    print(f"machine: {machine()}")
    try:
        t0 = time.perf_counter()
        inputs = trace_inputs("default", args.data_dir)
        load_s = time.perf_counter() - t0
    except WattschedError as exc:
        print(f"error: {exc}\n(set WATTSCHED_DATA to the dataset directory)", file=sys.stderr)
        return 2
    print(f"load default trace + cluster: {load_s:.2f} s")

    # (a) one FGD run on one core: pin this process to a single CPU where the OS allows it.
    pinned = False
    if hasattr(os, "sched_setaffinity"):
        original = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(original)})
        pinned = True
    run_one(inputs, "fgd", 41)  # warm-up (imports, caches), different seed
    t0 = time.perf_counter()
    result = run_one(inputs, "fgd", 42)
    one_s = time.perf_counter() - t0
    # The same run in the Python pod loop (engine/packing.py without its compiled kernel), same invocation.
    os.environ["WATTSCHED_NATIVE"] = "0"
    try:
        t0 = time.perf_counter()
        python_result = run_one(inputs, "fgd", 42)
        python_s = time.perf_counter() - t0
    finally:
        os.environ.pop("WATTSCHED_NATIVE")
    if pinned:
        os.sched_setaffinity(0, original)
    ok = "OK" if one_s <= TARGET_ONE_RUN_S else "OVER TARGET"
    print(
        f"(a) one FGD run, default trace, 1.3x, seed 42, one core{' (pinned)' if pinned else ''}: "
        f"{one_s:.2f} s wall for {result.pods} pods ({result.placed} placed) "
        f"[target <= {TARGET_ONE_RUN_S:.0f} s: {ok}]"
    )
    same = all(
        np.array_equal(a[k], b[k], equal_nan=True)
        for a, b in ((result.curve, python_result.curve), (result.grid, python_result.grid))
        for k in a
    )
    print(
        f"    the Python pod loop (WATTSCHED_NATIVE=0): {python_s:.2f} s wall, {python_s / one_s:.1f}x the run "
        f"above; curves {'identical' if same else 'DIFFER'}"
    )
    if not same:
        return 1
    if args.skip_grid:
        return 0

    # (b) the whole grid, including writing curves, summary and plots.
    n = len(DEFAULT_POLICIES) * args.seeds
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        cfg = FgdPwrConfig(seeds=args.seeds, policies=list(DEFAULT_POLICIES))
        exp = run_experiment(FgdPwr(given=inputs), cfg, tmp, workers=args.workers)
        grid_s = time.perf_counter() - t0
    ok = "OK" if grid_s <= TARGET_GRID_S else "OVER TARGET"
    runs = [o.raw for o in exp.outcomes]
    print(
        f"(b) grid: {len(DEFAULT_POLICIES)} policies x {args.seeds} seeds = {n} runs on {exp.workers} "
        f"workers: {grid_s:.1f} s wall ({sum(r.wall_s for r in runs):.1f} s summed over runs) "
        f"[target <= {TARGET_GRID_S:.0f} s: {ok}]"
    )
    for p in DEFAULT_POLICIES:
        walls = [r.wall_s for r in runs if r.policy == p]
        print(f"    {p:18s} {sum(walls) / len(walls):.2f} s/run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
