"""Foundation benchmarks: wall time and peak memory of three simulate runs.

Each case runs in a fresh child process (so peak RSS is its own) through the same code path as
`wattsched simulate ... --out DIR`, including loading the trace and writing the run directory. The calibration loop
of bench_engine_speed.py is timed before and after the cases (best of three each time), and each wall time is also
given in calibration loops, comparable across machines (issue 28: 10^6 synthetic jobs in under 1 GB).

    python benchmarks/bench_foundation.py            # all cases; needs WATTSCHED_DATA for the real traces
    python benchmarks/bench_foundation.py --case philly
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

CASES = {
    "philly": {
        "target_s": 10.0,
        "config": {"workload": "philly", "cluster": "philly", "queue": "fifo", "placement": "best-fit"},
    },
    "synthetic-1m": {
        "target_s": 120.0,
        "target_rss_mb": 1024.0,
        "config": {"workload": "synthetic", "synthetic": {"num_jobs": 1_000_000}},
    },
    "alibaba-packing": {
        "target_s": 3.0,
        "config": {
            "workload": "alibaba-v2023/default",
            "cluster": "alibaba-v2023",
            "mode": "packing",
            "inflate": 1.3,
            "placement": "best-fit",
            "seed": 42,
        },
    },
}


def run_case(name: str) -> dict:
    from wattsched.experiments.config import SimulationConfig
    from wattsched.experiments.run import run_simulation

    cfg = SimulationConfig.model_validate(CASES[name]["config"])
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        result = run_simulation(cfg, out)
        wall = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {
        "case": name,
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(rss_mb, 1),
        "jobs": result.summary["jobs_submitted"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cases = args.case or list(CASES)
    if args.child:
        print(json.dumps(run_case(cases[0])))
        return
    print(f"machine: {platform.platform()}, {os.cpu_count()} cores, python {platform.python_version()}")
    calibrations = [_calibration()]
    print(f"calibration loop: {calibrations[0]:.3f} s (best of 3)")
    failed = False
    for name in cases:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", "--case", name], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            print(f"{name}: failed\n{proc.stderr.strip().splitlines()[-1] if proc.stderr else ''}")
            failed = True
            continue
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        spec = CASES[name]
        ok = res["wall_s"] <= spec["target_s"] and res["peak_rss_mb"] <= spec.get("target_rss_mb", 1e12)
        failed |= not ok
        limits = f"target <= {spec['target_s']} s" + (
            f", <= {spec['target_rss_mb']:.0f} MB" if "target_rss_mb" in spec else ""
        )
        print(
            f"{name:16s} {res['jobs']:>9,} jobs  wall {res['wall_s']:7.2f} s"
            f" ({res['wall_s'] / calibrations[0]:6.1f} calibration loops)  peak RSS {res['peak_rss_mb']:7.1f} MB"
            f"  ({limits}) {'OK' if ok else 'MISSED'}"
        )
    calibrations.append(_calibration())
    print(f"calibration loop after the cases: {calibrations[-1]:.3f} s (best of 3)")
    sys.exit(1 if failed else 0)


def _calibration() -> float:
    """bench_engine_speed.py's calibration loop, best of three."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_engine_speed import time_calibration

    return min(time_calibration() for _ in range(3))


if __name__ == "__main__":
    main()
