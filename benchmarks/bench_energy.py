"""Energy benchmark: cost of energy accounting plus the idle-timeout power manager on the Philly replay.

Runs the foundation case (fifo + best-fit, no energy accounting) and the same replay with the linear power model,
idle-timeout power manager and CAISO 2023 price and carbon signals, alternating, and reports the best of N runs
of each and the overhead (target: at most +30 %). Like bench_foundation.py, each timing covers loading the trace,
simulating and writing the run directory.

    WATTSCHED_DATA=../shared/data python benchmarks/bench_energy.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

BASE = {"workload": "philly", "cluster": "philly", "queue": "fifo", "placement": "best-fit"}
VARIANTS = {
    "foundation (no energy)": {**BASE, "energy": False},
    "energy + idle-timeout + CAISO": {
        **BASE,
        "power_model": "linear",
        "power_manager": "idle-timeout",
        "region": "US-CAL-CISO",
        "year": 2023,
    },
}
TARGET_OVERHEAD = 0.30


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from wattsched.experiments.config import SimulationConfig
    from wattsched.experiments.run import run_simulation

    print(f"machine: {platform.platform()}, {os.cpu_count()} cores, python {platform.python_version()}")
    best = dict.fromkeys(VARIANTS, float("inf"))
    for _ in range(args.repeats):
        for name, cfg in VARIANTS.items():
            with tempfile.TemporaryDirectory() as out:
                t0 = time.perf_counter()
                summary = run_simulation(SimulationConfig.model_validate(cfg), out).summary
                best[name] = min(best[name], time.perf_counter() - t0)
            if "energy_kwh" in summary:
                energy = summary["energy_kwh"]
    for name, wall in best.items():
        print(f"{name:32s} best of {args.repeats}: {wall:6.2f} s")
    base, energy_run = best.values()
    overhead = energy_run / base - 1.0
    ok = overhead <= TARGET_OVERHEAD
    print(f"overhead: {overhead:+.1%} (target <= +{TARGET_OVERHEAD:.0%}) {'OK' if ok else 'MISSED'}")
    print(f"energy of the idle-timeout run: {energy:,.0f} kWh")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
