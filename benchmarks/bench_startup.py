"""Fixed costs of a run: `wattsched --help`, and a small `wattsched simulate` up to its first event and to its end.

Each case runs in a fresh Python process (no module imported beforehand), this checkout and, with
`--baseline-src`, another one (e.g. the commit before this work) alternately, best of `--repeat` runs each:

    git archive 6ae152a | tar -x -C /tmp/base    # the checkout to compare against
    python benchmarks/bench_startup.py --baseline-src /tmp/base/src [--repeat 7] [--jobs 200]

* help: `wattsched --help`, start to exit; the help text of both checkouts is compared too;
* simulate first event: `wattsched simulate --jobs N --out DIR --quiet` from the process start to the engine's
  first event (its first progress call: the first job's arrival);
* simulate total: the same run, start to exit (the run directory written); both checkouts' run directories are
  compared file by file (summary.json without its wall-time field).

Bytecode caching is on in the children (a first, untimed run of each checkout writes it), as for an installed
package. Without `--baseline-src` only this checkout is timed and its times checked against the targets.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

THIS_SRC = Path(__file__).resolve().parents[1] / "src"
# Absolute targets for this checkout (seconds); against the baseline the ratios are reported.
TARGET_HELP_S = 0.5
TARGET_FIRST_EVENT_S = 0.9

# `wattsched ARGS` with the first progress call stamped (wall-clock time, comparable with the parent's). The
# progress bar of cli/main.py is the one hook both checkouts share; --quiet keeps the terminal output out of it.
SIMULATE_CHILD = """
import contextlib, sys, time
import wattsched.cli.main as cli
stamp = []
@contextlib.contextmanager
def first_event_bar(label, enabled=True):
    def update(done, total):
        if not stamp:
            stamp.append(time.time())
    yield update
cli.progress_bar = first_event_bar
sys.argv = ["wattsched", *sys.argv[1:]]
try:
    cli.app()
finally:
    sys.stderr.write(f"FIRST_EVENT {stamp[0] if stamp else float('nan')!r}\\n")
"""
HELP_CHILD = "import sys; sys.argv[0] = 'wattsched'; from wattsched.cli.main import app; app()"


def child_env(src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(src), COLUMNS="100", TERM="dumb", NO_COLOR="1")
    return env


def run_help(src: Path) -> tuple[float, str]:
    started = time.time()
    proc = subprocess.run(
        [sys.executable, "-c", HELP_CHILD, "--help"], env=child_env(src), capture_output=True, text=True
    )
    wall = time.time() - started
    if proc.returncode != 0:
        raise SystemExit(f"{src}: wattsched --help failed:\n{proc.stderr}")
    return wall, proc.stdout


def run_simulate(src: Path, jobs: int, out: Path) -> tuple[float, float]:
    """(seconds to the first event, seconds to exit)."""
    args = ["simulate", "--jobs", str(jobs), "--out", str(out), "--quiet"]
    started = time.time()
    proc = subprocess.run(
        [sys.executable, "-c", SIMULATE_CHILD, *args], env=child_env(src), capture_output=True, text=True
    )
    wall = time.time() - started
    if proc.returncode != 0:
        raise SystemExit(f"{src}: wattsched simulate failed:\n{proc.stderr}")
    stamp = float(proc.stderr.rsplit("FIRST_EVENT ", 1)[1].split()[0])
    return stamp - started, wall


def same_run_dirs(a: Path, b: Path) -> list[str]:
    """The files that differ between two run directories (summary.json compared without wall_time_s)."""
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    differ = []
    for name in names:
        fa, fb = a / name, b / name
        if not (fa.exists() and fb.exists()):
            differ.append(f"{name} (in one only)")
        elif name == "summary.json":
            sa, sb = (json.loads(f.read_text()) for f in (fa, fb))
            sa.pop("wall_time_s", None), sb.pop("wall_time_s", None)
            if sa != sb:
                differ.append(name)
        elif not filecmp.cmp(fa, fb, shallow=False):
            differ.append(name)
    return differ


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--baseline-src", type=Path, help="the src/ folder of the checkout to compare against"
    )
    parser.add_argument("--repeat", type=int, default=7, help="runs of each case per checkout (best is kept)")
    parser.add_argument("--jobs", type=int, default=200, help="synthetic jobs of the simulate case")
    args = parser.parse_args()
    checkouts = {"this": THIS_SRC}
    if args.baseline_src is not None:
        checkouts = {"baseline": args.baseline_src.resolve(), "this": THIS_SRC}
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cores, python {platform.python_version()}; "
        f"best of {args.repeat}, fresh process each"
    )
    best: dict[str, dict[str, float]] = {name: {} for name in checkouts}
    helps: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        outs = {name: Path(tmp) / name for name in checkouts}
        for name, src in checkouts.items():  # untimed: writes the bytecode caches
            run_help(src)
            run_simulate(src, args.jobs, outs[name])
        for _ in range(args.repeat):
            for name, src in checkouts.items():  # alternately, so that both see the same machine load
                wall, helps[name] = run_help(src)
                first, total = run_simulate(src, args.jobs, outs[name])
                for case, value in (("help", wall), ("first event", first), ("simulate total", total)):
                    best[name][case] = min(best[name].get(case, float("inf")), value)
        differ = same_run_dirs(outs["baseline"], outs["this"]) if "baseline" in checkouts else []
    cases = ("help", "first event", "simulate total")
    if "baseline" in checkouts:
        print(f"{'case':<18}{'baseline s':>12}{'this s':>10}{'ratio':>8}")
        for case in cases:
            base, this = best["baseline"][case], best["this"][case]
            print(f"{case:<18}{base:>12.3f}{this:>10.3f}{base / this:>7.2f}x")
        print(f"help text identical: {'yes' if helps['baseline'] == helps['this'] else 'NO'}")
        print(f"run directories identical: {'yes' if not differ else 'NO: ' + ', '.join(differ)}")
    else:
        for case in cases:
            print(f"{case:<18}{best['this'][case]:>10.3f} s")
    missed = [
        f"{case} {best['this'][case]:.3f} s > {target} s"
        for case, target in (("help", TARGET_HELP_S), ("first event", TARGET_FIRST_EVENT_S))
        if best["this"][case] > target
    ]
    for line in missed:
        print(f"target missed: {line}")
    sys.exit(1 if missed or differ or ("baseline" in helps and helps["baseline"] != helps["this"]) else 0)


if __name__ == "__main__":
    main()
