"""Install footprint: a simulator-only install (`pip install .`, no extras) in a fresh venv, and what it can run.

Creates a fresh venv, installs the project into it without extras (from PyPI, as a user would: needs network;
a few minutes), checks that none of the optional libraries came along, then runs `wattsched --help`,
`wattsched simulate` (default workload) and `wattsched demo --out DEMO_OUT` there, and checks that the commands
needing an extra (`serve k8s-scheduler`, `serve slurm`, `agent`) say so in one line with exit code 2. Prints the
venv's size (`du -sh`) beside the full development venv's (`make`: requirements.lock, every extra and the dev
tools). If the demo stops for lack of matplotlib (its report's plots), it installs `.[plots]` and runs the demo
again, and reports that size too. Exits non-zero when a check fails.

    python benchmarks/install_footprint.py [--venv /tmp/wattsched-footprint] [--demo-out /tmp/demo]
                                           [--full-venv .venv] [--src .]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# import name -> distribution, of the optional dependencies (pyproject.toml [project.optional-dependencies])
OPTIONAL = {
    "kubernetes": "kubernetes",
    "pynvml": "nvidia-ml-py",
    "prometheus_client": "prometheus-client",
    "matplotlib": "matplotlib",
    "ray": "ray",
}
NEEDS_EXTRA = [  # a command, the extra its one-line error must name
    (["serve", "k8s-scheduler"], "k8s"),
    (["serve", "slurm"], "live"),
    (["agent", "--nvml", "fake"], "agent"),
]


def du(path: Path) -> tuple[str, int]:
    """(`du -sh`'s figure, bytes)."""
    human = subprocess.run(
        ["du", "-sh", str(path)], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    size = subprocess.run(
        ["du", "-sb", str(path)], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    return human, int(size)


def run(argv: list[str], cwd: Path, timeout: float = 900) -> tuple[int, str, str, float]:
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--src", type=Path, default=ROOT, help="the project to install (default: this checkout)"
    )
    parser.add_argument("--venv", type=Path, default=Path("/tmp/wattsched-footprint"))
    parser.add_argument("--demo-out", type=Path, default=Path("/tmp/demo"))
    parser.add_argument(
        "--full-venv", type=Path, default=ROOT / ".venv", help="the development venv to compare with (`make`)"
    )
    parser.add_argument("--python", default="python3", help="interpreter that creates the venv")
    args = parser.parse_args()
    venv, work = args.venv.resolve(), args.venv.resolve().parent
    failures: list[str] = []
    rows: list[tuple[str, str]] = []

    def check(ok: bool, what: str) -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
        if not ok:
            failures.append(what)

    shutil.rmtree(venv, ignore_errors=True)
    shutil.rmtree(args.demo_out, ignore_errors=True)
    subprocess.run([args.python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    # pip builds a local directory in place (build/, *.egg-info): install from a clean copy of the sources
    src = work / "wattsched-src"
    shutil.rmtree(src, ignore_errors=True)
    junk = (".git", ".venv", "runs", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis")
    shutil.copytree(args.src.resolve(), src, ignore=shutil.ignore_patterns(*junk))
    rc, _, err, install_s = run([*pip, "install", "--quiet", str(src)], work)
    check(rc == 0, f"pip install {args.src} (no extras): {install_s:.0f} s")
    if rc != 0:
        print(err[-3000:], file=sys.stderr)
        return 1
    # -I: the working directory is not on the path (a stray folder named like a library there would be found)
    found = run([str(venv / "bin" / "python"), "-I", "-c", "import importlib.util as u; print(*[m for m in "
                 f"{sorted(OPTIONAL)!r} if u.find_spec(m)])"], work)[1].split()  # fmt: skip
    check(not found, f"no optional library installed ({', '.join(found) or 'none found'})")
    bare = du(venv)
    rows.append(("fresh venv, `pip install .` (no extras)", bare[0]))

    cli = str(venv / "bin" / "wattsched")
    rc, out, err, _ = run([cli, "--help"], work)
    check(rc == 0 and "simulate" in out, "wattsched --help")
    rc, out, err, secs = run([cli, "simulate", "--quiet", "--out", str(work / "footprint-sim")], work)
    check(
        rc == 0 and (work / "footprint-sim" / "summary.json").is_file(), f"wattsched simulate: {secs:.1f} s"
    )
    for argv, extra in NEEDS_EXTRA:
        rc, out, err, _ = run([cli, *argv], work, timeout=120)
        line = err.strip()
        ok = rc == 2 and "\n" not in line and line.endswith(f"pip install 'wattsched[{extra}]'")
        check(ok and "Traceback" not in err, f"wattsched {' '.join(argv)}: exit {rc}, {line!r}")

    rc, out, err, secs = run([cli, "demo", "--quiet", "--out", str(args.demo_out)], work)
    demo_ok = rc == 0 and (args.demo_out / "report.html").is_file()
    plots_line = err.strip()
    if demo_ok:
        check(True, f"wattsched demo --out {args.demo_out}: {secs:.1f} s")
    else:
        needs_plots = (
            rc == 2 and plots_line.endswith("pip install 'wattsched[plots]'") and "\n" not in plots_line
        )
        # The report's plots import matplotlib (wattsched/experiments/report.py); until the report skips them
        # when it is missing, the demo stops with this one line. Then: the same with the [plots] extra.
        print(f"note wattsched demo without matplotlib: exit {rc}, {plots_line!r}")
        check(needs_plots, "wattsched demo: runs, or names the [plots] extra in one line")
        rc, _, err, install_s = run([*pip, "install", "--quiet", f"{src}[plots]"], work)
        check(rc == 0, f"pip install '.[plots]': {install_s:.0f} s")
        rows.append(("the same + `[plots]` (matplotlib)", du(venv)[0]))
        rc, out, err, secs = run([cli, "demo", "--quiet", "--out", str(args.demo_out)], work)
        check(
            rc == 0 and (args.demo_out / "report.html").is_file(),
            f"wattsched demo (with [plots]): {secs:.1f} s",
        )
    if args.full_venv.is_dir():
        rows.append((f"development venv `make` ({args.full_venv}: requirements.lock, all extras, dev)",
                     du(args.full_venv)[0]))  # fmt: skip

    print("\n| venv | du -sh |\n|---|---:|")
    for name, size in rows:
        print(f"| {name} | {size} |")
    if failures:
        print(f"\n{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
