"""Fixed costs of a run: `wattsched --help`, and a small `wattsched simulate` up to its first event and to its end.

Each case runs in a fresh Python process (no module imported beforehand), this checkout and, with
`--baseline-src`, another one (e.g. the commit before this work) alternately, best of `--repeat` runs each:

    git archive 6ae152a | tar -x -C /tmp/base    # the checkout to compare against
    python benchmarks/bench_startup.py --baseline-src /tmp/base/src [--repeat 7] [--jobs 200]

Each is timed in wall-clock and in CPU seconds (the child's user + system time; less disturbed by other load on
the machine):

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
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

THIS_SRC = Path(__file__).resolve().parents[1] / "src"
# Targets (wall-clock): "well under a second" for both, as seconds on this checkout and, with --baseline-src, as
# the speed-up over the baseline (the commit before this work: help 0.66 s, first event 0.50 s on 2 cores).
TARGETS = {"help": (0.3, 3.0), "first event": (0.5, 1.5)}  # case -> (seconds at most, ratio at least)

# `wattsched ARGS` with the first progress call stamped: wall-clock time (comparable with the parent's) and the
# process's CPU time. The progress bar of cli/main.py is the one hook both checkouts share; --quiet keeps the
# terminal output out of it.
SIMULATE_CHILD = """
import contextlib, sys, time
import wattsched.cli.main as cli
stamp = []
@contextlib.contextmanager
def first_event_bar(label, enabled=True):
    def update(done, total):
        if not stamp:
            stamp.extend((time.time(), time.process_time()))
    yield update
cli.progress_bar = first_event_bar
sys.argv = ["wattsched", *sys.argv[1:]]
try:
    cli.app()
finally:
    wall, cpu = stamp or (float("nan"), float("nan"))
    sys.stderr.write(f"FIRST_EVENT {wall!r} {cpu!r}\\n")
"""
HELP_CHILD = "import sys; sys.argv[0] = 'wattsched'; from wattsched.cli.main import app; app()"


def child_env(src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(src), COLUMNS="100", TERM="dumb", NO_COLOR="1")
    return env


def _run(src: Path, code: str, *args: str) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds, the process) of `python -c code args` on `src`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], env=child_env(src), capture_output=True, text=True
    )
    wall = time.time() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"{src}: wattsched {' '.join(args)} failed:\n{proc.stderr}")
    return wall, cpu, proc


def run_help(src: Path) -> tuple[dict[str, tuple[float, float]], str]:
    wall, cpu, proc = _run(src, HELP_CHILD, "--help")
    return {"help": (wall, cpu)}, proc.stdout


def run_simulate(src: Path, jobs: int, out: Path) -> dict[str, tuple[float, float]]:
    """(wall, CPU) seconds to the first event and to exit."""
    started = time.time()
    wall, cpu, proc = _run(src, SIMULATE_CHILD, "simulate", "--jobs", str(jobs), "--out", str(out), "--quiet")
    stamp, stamp_cpu = (float(x) for x in proc.stderr.rsplit("FIRST_EVENT ", 1)[1].split()[:2])
    return {"first event": (stamp - started, stamp_cpu), "simulate total": (wall, cpu)}


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
    best: dict[str, dict[str, tuple[float, float]]] = {name: {} for name in checkouts}  # case -> (wall, CPU)
    helps: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        outs = {name: Path(tmp) / name for name in checkouts}
        for name, src in checkouts.items():  # untimed: writes the bytecode caches
            run_help(src)
            run_simulate(src, args.jobs, outs[name])
        for _ in range(args.repeat):
            for name, src in checkouts.items():  # alternately, so that both see the same machine load
                times, helps[name] = run_help(src)
                times.update(run_simulate(src, args.jobs, outs[name]))
                for case, (wall, cpu) in times.items():
                    old_wall, old_cpu = best[name].get(case, (float("inf"), float("inf")))
                    best[name][case] = (min(old_wall, wall), min(old_cpu, cpu))
        differ = same_run_dirs(outs["baseline"], outs["this"]) if "baseline" in checkouts else []
    cases = ("help", "first event", "simulate total")
    if "baseline" in checkouts:
        head = f"{'case':<16}{'baseline s':>12}{'this s':>9}{'ratio':>8}"
        print(f"{head}   {'baseline CPU s':>15}{'this CPU s':>12}{'ratio':>8}")
        for case in cases:
            (base, base_cpu), (this, this_cpu) = best["baseline"][case], best["this"][case]
            print(
                f"{case:<16}{base:>12.3f}{this:>9.3f}{base / this:>7.2f}x   "
                f"{base_cpu:>15.3f}{this_cpu:>12.3f}{base_cpu / this_cpu:>7.2f}x"
            )
        print(f"help text identical: {'yes' if helps['baseline'] == helps['this'] else 'NO'}")
        print(f"run directories identical: {'yes' if not differ else 'NO: ' + ', '.join(differ)}")
    else:
        for case in cases:
            wall, cpu = best["this"][case]
            print(f"{case:<16}{wall:>9.3f} s wall{cpu:>9.3f} s CPU")
    missed = []
    for case, (seconds, ratio) in TARGETS.items():
        this = best["this"][case][0]
        if this > seconds:
            missed.append(f"{case} {this:.3f} s > {seconds} s")
        if "baseline" in best and best["baseline"][case][0] / this < ratio:
            missed.append(f"{case} {best['baseline'][case][0] / this:.2f}x < {ratio}x")
    for line in missed:
        print(f"target missed: {line}")
    sys.exit(1 if missed or differ or ("baseline" in helps and helps["baseline"] != helps["this"]) else 0)


if __name__ == "__main__":
    main()
