"""Ratio benchmarks measured within one invocation: what bench_rounds.py and bench_cedla_replay.py share.

Machines of the same kind differ up to 3x in speed and the benchmark machines are shared, so a target is a ratio
against a reference run measured in the same invocation. Every run is a child process of its own (its peak RSS is
its own), the cases alternate (drift in the machine's load hits each alike) and the best of N runs of each counts.
Each run reports its wall time and its CPU time (user + system of the child, the steadier of the two on a loaded
machine). With ``--baseline-src`` the same cases also run with another checkout (the commit before a change) in the
same alternation, and each case's run directory is compared file by file with that checkout's
(benchmarks/_identity.py).

A benchmark script defines its cases as :class:`~wattsched.experiments.config.SimulationConfig` fields and calls
:func:`main` with them.
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
from collections.abc import Mapping
from pathlib import Path

from _identity import OWN_SRC, differences, simulate


def run_case(fields: dict) -> dict:
    """One run in this process: load, model, simulate and write the run directory, as `simulate` does."""
    from wattsched.experiments.config import SimulationConfig
    from wattsched.experiments.run import run_simulation

    cfg = SimulationConfig.model_validate(fields)
    with tempfile.TemporaryDirectory() as out:
        c0, t0 = time.process_time(), time.perf_counter()
        result = run_simulation(cfg, out)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    summary = result.summary
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "jobs": summary["jobs_submitted"],
        "completed": summary["jobs_completed"],
        "preemptions": summary.get("preemptions", 0),
        "energy_kwh": summary.get("energy_kwh"),
    }


def flags(fields: Mapping[str, object]) -> list[str]:
    """The `wattsched simulate` flags of a case's config fields."""
    out: list[str] = []
    for key, value in fields.items():
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out


def _child(script: Path, name: str, src: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run(
        [sys.executable, str(script), "--child", name], capture_output=True, text=True, check=False, env=env
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "no output"
        raise SystemExit(f"{name} ({src}): failed: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(
    doc: str, script: str, cases: Mapping[str, dict], reference: str, max_ratio: Mapping[str, float]
) -> None:
    """Parse the common options, run (or, as a child, run one case) and exit 1 when a target is missed or a run
    directory differs from the baseline's."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each case; the best is reported")
    parser.add_argument(
        "--case", action="append", choices=sorted(cases), help="only these (and the reference)"
    )
    parser.add_argument(
        "--baseline-src", type=Path, default=None,
        help="another checkout's src directory: time it too, and compare every case's run directory with it",
    )  # fmt: skip
    parser.add_argument("--child", choices=sorted(cases), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_case(cases[args.child])))
        return
    names = [reference, *[n for n in cases if n != reference and (not args.case or n in args.case)]]
    trees = {"": OWN_SRC} | ({"@baseline": args.baseline_src} if args.baseline_src else {})
    print(f"machine: {platform.platform()}, {os.cpu_count()} cores, python {platform.python_version()}")
    best: dict[str, dict] = {}
    for rep in range(args.repeats):
        for name in names:  # alternate, so drift in machine load hits every case alike
            for tag, src in trees.items():
                res = _child(Path(script).resolve(), name, src)
                key = name + tag
                print(
                    f"  run {rep + 1}: {key:24s} wall {res['wall_s']:7.2f} s  cpu {res['cpu_s']:7.2f} s",
                    flush=True,
                )
                if key not in best or res["cpu_s"] < best[key]["cpu_s"]:
                    best[key] = res | {"wall_s": min(res["wall_s"], best.get(key, res)["wall_s"])}
    failed = False
    print(f"\nbest of {args.repeats} (ratios against {reference} of the same tree):")
    for tag in trees:
        ref = best[reference + tag]
        for name in names:
            res, limit = best[name + tag], max_ratio.get(name)
            cpu_ratio, wall_ratio = res["cpu_s"] / ref["cpu_s"], res["wall_s"] / ref["wall_s"]
            if name == reference:
                verdict = "reference"
            elif tag:
                verdict = "(before)"
            elif limit is None:
                verdict = "-"
            else:
                verdict = "met" if cpu_ratio <= limit else "MISSED"
            failed |= verdict == "MISSED"
            target = f"target <= {limit:g}x" if limit is not None and name != reference else ""
            print(
                f"{name + tag:24s} {res['jobs']:>7,} jobs  cpu {res['cpu_s']:7.2f} s ratio {cpu_ratio:6.3f}  "
                f"wall {res['wall_s']:7.2f} s ratio {wall_ratio:6.3f}  {target:14s} {verdict:9s} "
                f"peak RSS {res['peak_rss_mb']:6.0f} MB  preemptions {res['preemptions']:>6,}"
            )
    if args.baseline_src:
        print("\nrun directories against the baseline (summary.json without wall times, every other file byte "
              "for byte):")  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            for name in names[1:]:
                base, mine = Path(tmp) / name / "baseline", Path(tmp) / name / "this"
                simulate(args.baseline_src, flags(cases[name]), base)
                simulate(OWN_SRC, flags(cases[name]), mine)
                diff = differences(base, mine)
                files = ", ".join(sorted(p.name for p in mine.iterdir()))
                print(f"{name:24s} {'identical' if not diff else 'DIFFERENT: ' + ', '.join(diff)} ({files})")
                failed |= bool(diff)
    sys.exit(1 if failed else 0)
