"""End-to-end speed of the simulator against another checkout, measured in one invocation, outputs compared.

Each case is one ``wattsched simulate ... --out DIR`` command, timed from process start to exit in a child
process. The child runs this checkout's ``src`` and the baseline checkout's ``src`` (``--baseline-src``) in turn,
alternately, and the best of ``--repeats`` runs of each is reported, with the ratio baseline / this.

Cases (``--cases`` picks some):

- ``philly``: the Philly replay, ``--workload philly --cluster philly --queue fifo --placement best-fit`` (energy
  on, the default always-on power manager);
- ``tiresias``: ``--allocation tiresias --round-s 300`` on the same trace and cluster;
- ``fgd``: the FGD packing run on the Alibaba v2023 default trace, ``--mode packing --placement fgd --inflate 1.3
  --seed 42``.

Machines differ, and this one is shared, so each time is also given as "normalized seconds": the wall time divided
by the time of a fixed pure-Python calibration loop measured in the same invocation (the best of its runs between
the cases). The loop is :func:`calibration_loop`: 2,000,000 iterations of integer arithmetic, a dict update and a
list append on CPython, about 0.2 s on a 2020s x86 core; it measures the interpreter's speed on this machine now.

Before timing, each checkout runs a tiny simulation once (untimed), so that disk caches and any compiled kernels
are warm for both. The run directories of the first repeat of each case are compared file by file: every file
byte for byte, except ``summary.json``, compared without its wall-time fields.

    WATTSCHED_DATA=/path/to/data python benchmarks/bench_engine_speed.py --baseline-src /tmp/base/src \
        [--repeats 3] [--cases philly,tiresias,fgd]
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

CASES: dict[str, list[str]] = {
    "philly": ["--workload", "philly", "--cluster", "philly", "--queue", "fifo", "--placement", "best-fit"],
    "tiresias": [
        "--workload",
        "philly",
        "--cluster",
        "philly",
        "--allocation",
        "tiresias",
        "--round-s",
        "300",
    ],
    "fgd": [
        "--mode",
        "packing",
        "--workload",
        "alibaba-v2023/default",
        "--cluster",
        "alibaba-v2023",
        "--placement",
        "fgd",
        "--inflate",
        "1.3",
        "--seed",
        "42",
    ],
}
# A temporal and a packing run: each compiled kernel (the replay's and the packing loop's) is built before timing.
WARM_UPS = (
    ["--workload", "synthetic", "--jobs", "50"],
    [*CASES["fgd"], "--max-jobs", "300"],  # the fgd case on its first 300 pods: the compiled pod loop
)
THIS_SRC = Path(__file__).resolve().parents[1] / "src"


def calibration_loop() -> int:
    """The fixed pure-Python work that normalises wall times (see the module docstring)."""
    total = 0
    counts: dict[int, int] = {}
    items: list[int] = []
    for i in range(2_000_000):
        total += (i * i) % 7
        key = i & 255
        counts[key] = counts.get(key, 0) + 1
        if not i & 15:
            items.append(total)
    return total + len(items) + len(counts)


def time_calibration() -> float:
    t0 = time.perf_counter()
    calibration_loop()
    return time.perf_counter() - t0


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.platform()} | {model} | {os.cpu_count()} logical CPUs | Python {platform.python_version()}"


def run_child(src: Path, args: list[str], out: Path, data_dir: str | None) -> float:
    """Wall seconds of one ``wattsched simulate`` process, start to exit."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "wattsched", "simulate", *args, "--quiet", "--out", str(out)]
    if data_dir:
        cmd += ["--data-dir", data_dir]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:]) or "no output"
        raise SystemExit(f"{' '.join(args)} with {src} failed:\n{tail}")
    return wall


def _without_wall_times(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_wall_times(v) for k, v in value.items() if "wall" not in k}
    if isinstance(value, list):
        return [_without_wall_times(v) for v in value]
    return value


def differences(a: Path, b: Path) -> list[str]:
    """Files of two run directories that differ (summary.json compared without wall-time fields)."""
    names_a = sorted(p.name for p in a.iterdir())
    names_b = sorted(p.name for p in b.iterdir())
    if names_a != names_b:
        return [f"file lists differ: {names_a} vs {names_b}"]
    out = []
    for name in names_a:
        if name == "summary.json":
            ja = _without_wall_times(json.loads((a / name).read_text()))
            jb = _without_wall_times(json.loads((b / name).read_text()))
            same = json.dumps(ja, sort_keys=True) == json.dumps(jb, sort_keys=True)
        else:
            same = filecmp.cmp(a / name, b / name, shallow=False)
        if not same:
            out.append(name)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline-src", required=True, help="the other checkout's src directory")
    parser.add_argument("--src", default=str(THIS_SRC), help="this checkout's src directory (default: ours)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of each case and checkout; best reported"
    )
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--data-dir", default=None, help="dataset directory (else WATTSCHED_DATA)")
    args = parser.parse_args()
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    checkouts = {"baseline": Path(args.baseline_src).resolve(), "this": Path(args.src).resolve()}
    for label, src in checkouts.items():
        if not (src / "wattsched").is_dir():
            parser.error(f"{label}: {src} has no wattsched package")

    print(f"machine: {machine()}")
    print(f"baseline: {checkouts['baseline']}\nthis:     {checkouts['this']}")
    calibrations = [time_calibration()]
    failed = False
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp:
        root = Path(tmp)
        for label, src in checkouts.items():
            for i, warm_up in enumerate(WARM_UPS):
                run_child(src, warm_up, root / f"warm-{label}-{i}", args.data_dir)
        rows = []
        for case in cases:
            best = {label: float("inf") for label in checkouts}
            for rep in range(args.repeats):
                for label, src in checkouts.items():
                    out = root / f"{case}-{label}-{rep}"
                    best[label] = min(best[label], run_child(src, CASES[case], out, args.data_dir))
                calibrations.append(time_calibration())
            diff = differences(root / f"{case}-baseline-0", root / f"{case}-this-0")
            failed |= bool(diff)
            rows.append((case, best["baseline"], best["this"], diff))
            print(
                f"  {case}: baseline {best['baseline']:.2f} s, this {best['this']:.2f} s, "
                f"ratio {best['baseline'] / best['this']:.2f}x, outputs "
                f"{'identical' if not diff else 'DIFFER: ' + ', '.join(diff)}",
                flush=True,
            )
    calib = min(calibrations)
    print(f"\ncalibration loop: {calib:.3f} s (best of {len(calibrations)})")
    print(
        f"{'case':<10} {'baseline s':>10} {'this s':>8} {'ratio':>6} {'base norm':>10} {'this norm':>10}  outputs"
    )
    for case, base_s, this_s, diff in rows:
        print(
            f"{case:<10} {base_s:>10.2f} {this_s:>8.2f} {base_s / this_s:>5.2f}x {base_s / calib:>10.1f} "
            f"{this_s / calib:>10.1f}  {'identical' if not diff else 'DIFFER'}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
