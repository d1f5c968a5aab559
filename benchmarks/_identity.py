"""Byte-identity of run directories between two checkouts: what the speed benchmarks share.

A case is the `wattsched simulate` flags of one run. :func:`simulate` runs it with a given source tree (a child
process with that tree first on ``PYTHONPATH``) into a run directory; :func:`differences` compares two run
directories file by file: every file byte for byte, except ``summary.json``, compared without its wall-time fields.

    python benchmarks/_identity.py --baseline-src /tmp/base/src [--case NAME ...] [--keep DIR]

checks the cases of :data:`CASES` (all of them, or those named) and exits 1 if any run directory differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OWN_SRC = HERE.parent / "src"

_PHILLY = ["--workload", "philly", "--cluster", "philly"]
_POLLUX = ["--workload", "pollux/workload-6", "--cluster", "n16g4", "--gpu-type", "T4"]
_TIRESIAS_480 = ["--workload", "tiresias/480_job_trace", "--cluster", "n32g4"]
# The round-based policies on the benchmarks' cases and on smaller ones that preempt, pack and resize.
CASES: dict[str, list[str]] = {
    "tiresias-philly": [*_PHILLY, "--allocation", "tiresias", "--round-s", "300"],
    "cedla-philly-de-lu": [*_PHILLY, "--region", "DE-LU", "--year", "2023", "--deadline-slack", "3",
                           "--allocation", "cedla", "--services", "default", "--power-manager", "idle-timeout"],
    "optimus-greedy-pollux": [*_POLLUX, "--allocation", "optimus-greedy", "--round-s", "60"],
    "gandiva-pollux": [*_POLLUX, "--allocation", "gandiva"],
    "tiresias-pollux": [*_POLLUX, "--allocation", "tiresias", "--round-s", "60"],
    "tiresias-480": [*_TIRESIAS_480, "--allocation", "tiresias", "--round-s", "60"],
    "gandiva-480": [*_TIRESIAS_480, "--allocation", "gandiva"],
    "optimus-greedy-480": [*_TIRESIAS_480, "--allocation", "optimus-greedy"],
    "hkbu-dvfs-480": [*_TIRESIAS_480, "--allocation", "hkbu-dvfs", "--deadline-slack", "3"],
    "hkbu-dag-480": [*_TIRESIAS_480, "--allocation", "hkbu-dag", "--deadline-slack", "3"],
    "hkbu-online-pd-480": [*_TIRESIAS_480, "--allocation", "hkbu-online-pd", "--deadline-slack", "3"],
    "eaco-gavel": ["--workload", "gavel/msr/all", "--max-jobs", "200", "--cluster", "eaco-28", "--allocation",
                   "eaco", "--sharing-model", "eaco", "--power-manager", "idle-timeout"],
    "powerflow-pollux": [*_POLLUX, "--allocation", "powerflow"],
    "zeus-480": [*_TIRESIAS_480, "--allocation", "zeus-pl"],
    "gavel-fifo-480": [*_TIRESIAS_480, "--allocation", "gavel-fifo"],
    "tiresias-philly-contended": ["--workload", "philly", "--max-jobs", "3000", "--cluster", "n32g4",
                                  "--allocation", "tiresias", "--round-s", "300"],
    "gandiva-philly-20k": ["--workload", "philly", "--max-jobs", "20000", "--cluster", "philly",
                           "--allocation", "gandiva"],
    "cedla-philly-10k": ["--workload", "philly", "--max-jobs", "10000", "--cluster", "n32g8", "--region", "DE-LU",
                         "--year", "2023", "--deadline-slack", "3", "--allocation", "cedla", "--power-manager",
                         "idle-timeout"],
}  # fmt: skip
WALL_FIELDS = ("wall_time_s",)  # summary.json fields that time the run rather than describe it


def simulate(src: Path, args: list[str], out: Path) -> float:
    """Run `wattsched simulate ARGS --out OUT` with the package from `src`; wall seconds of the child."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "wattsched", "simulate", *args, "--quiet", "--out", str(out)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"simulate {' '.join(args)} with {src}: {proc.stderr.strip()[-2000:]}")
    return time.perf_counter() - t0


def _summary(path: Path) -> dict:
    summary = json.loads(path.read_text())

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in WALL_FIELDS}
        return value

    return strip(summary)


def differences(a: Path, b: Path) -> list[str]:
    """Files that differ between two run directories (summary.json without its wall-time fields)."""
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    out = []
    for name in names:
        fa, fb = a / name, b / name
        if not fa.exists() or not fb.exists():
            out.append(f"{name}: only in {'the first' if fa.exists() else 'the second'}")
        elif name == "summary.json":
            if _summary(fa) != _summary(fb):
                out.append(name)
        elif fa.read_bytes() != fb.read_bytes():
            out.append(name)
    return out


def check(baseline_src: Path, names: list[str], keep: Path | None = None) -> bool:
    """Run each case with both trees and compare; True when every run directory is identical."""
    same = True
    with tempfile.TemporaryDirectory() as tmp:
        root = keep or Path(tmp)
        for name in names:
            base, mine = root / name / "baseline", root / name / "this"
            t_base = simulate(baseline_src, CASES[name], base)
            t_mine = simulate(OWN_SRC, CASES[name], mine)
            diff = differences(base, mine)
            files = len(list(base.iterdir()))
            verdict = "identical" if not diff else f"DIFFERENT: {', '.join(diff)}"
            print(f"{name:24s} {files} files {verdict}  (baseline {t_base:6.1f} s, this {t_mine:6.1f} s)",
                  flush=True)  # fmt: skip
            same &= not diff
    return same


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline-src", type=Path, required=True, help="the other checkout's src directory")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="a case (default: all)")
    parser.add_argument("--keep", type=Path, default=None, help="write the run directories here")
    args = parser.parse_args()
    sys.exit(0 if check(args.baseline_src, args.case or list(CASES), args.keep) else 1)


if __name__ == "__main__":
    main()
