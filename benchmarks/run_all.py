"""Run every benchmark script in this directory, one after another (`make bench`).

Each script prints its own table and exits non-zero when a target is missed; this runner reports which did.
The real traces are needed: set WATTSCHED_DATA (e.g. ../shared/data).

    WATTSCHED_DATA=../shared/data python benchmarks/run_all.py [--only rounds]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    scripts = sorted(HERE.glob("bench_*.py"))
    names = [p.stem.removeprefix("bench_") for p in scripts]
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=names, action="append", help="run only these benchmarks")
    args = parser.parse_args()
    missed = []
    for name, script in zip(names, scripts, strict=True):
        if args.only and name not in args.only:
            continue
        print(f"== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)], check=False).returncode != 0:
            missed.append(script.name)
    if missed:
        print(f"targets missed or runs failed in: {', '.join(missed)}")
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
