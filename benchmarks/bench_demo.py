"""The demo's wall time (target: under 60 s on 2 cores after installation), as a person runs it.

Times `wattsched demo --quiet` end to end in a fresh process (interpreter start-up, imports, the six runs, the
comparison and the HTML report) and, in the same run as a reference, `wattsched simulate` of the demo's baseline
alone (the same workload and job model) in a fresh process. Prints both, their ratio, and whether the 60 s target
holds; exits non-zero if it does not. Needs no dataset.

    python benchmarks/bench_demo.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 60.0
CLI = [sys.executable, "-m", "wattsched.cli.main"]


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from wattsched.experiments.demo import BASELINE, RUNS_BY_NAME, DemoSetup, write_generated_signals

    work = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    env = {**os.environ, "COLUMNS": "120"}
    try:
        price, carbon = write_generated_signals(work / "signals")
        cfg = DemoSetup(str(work), 1000, 42, str(price), str(carbon)).config(RUNS_BY_NAME[BASELINE])
        config_file = work / "baseline.yaml"
        config_file.write_text(cfg.model_dump_json())  # JSON is YAML
        demo_s, single_s = [], []
        for i in range(args.repeats):
            demo_s.append(timed([*CLI, "demo", "--quiet", "--out", str(work / f"demo-{i}")], env))
            single_s.append(
                timed(
                    [
                        *CLI,
                        "simulate",
                        "--quiet",
                        "--config",
                        str(config_file),
                        "--out",
                        str(work / f"one-{i}"),
                    ],
                    env,
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best_demo, best_single = min(demo_s), min(single_s)
    print(f"machine: {os.cpu_count()} logical CPUs, Python {sys.version.split()[0]}")
    print(
        f"wattsched demo (6 runs, report): {', '.join(f'{t:.1f}' for t in demo_s)} s; best {best_demo:.1f} s"
    )
    print(
        f"reference, the baseline alone: {', '.join(f'{t:.1f}' for t in single_s)} s; best {best_single:.1f} s"
    )
    print(f"ratio demo / one run: {best_demo / best_single:.2f}")
    met = max(demo_s) < TARGET_S
    print(
        f"target: every demo under {TARGET_S:.0f} s: {'met' if met else 'NOT met'} (slowest {max(demo_s):.1f} s)"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
