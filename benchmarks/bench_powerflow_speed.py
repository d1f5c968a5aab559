"""PowerFlow's and EaCO's speed on the green experiment's job model, before and after a change, with identical
outputs.

Issue 30 asks for the whole `wattsched experiment green` on a 3-month Philly window within 30 minutes on 2
cores; powerflow's run was most of it. Each case is one powerflow run as the experiment configures it
(``experiments.green.run_config``: Philly, US-CAL-CISO 2023, `tables` performance model, `dvfs` power model,
idle-timeout, services), on the first N training jobs, and with ``--baseline-src`` the same run with another
checkout (e.g. ``git -C ../main archive main | tar -x -C /tmp/pf-base``). Every run is a child process of its
own; the two trees alternate (drift in the machine's load hits both alike) and the best of N runs of each counts,
by CPU time (user + system of the child, the steadier on a shared machine) and by wall time. A fixed pure-Python
calibration loop (``bench_engine_speed.calibration_loop``) is timed between the runs, so that the figures can be
read across machines as calibration loops. The first run of each case and tree keeps its run directory, and the
two are compared file by file (``_identity.differences``: summary.json without its wall-time fields, every other
file byte for byte); a difference fails the benchmark (exit 1). With ``--baseline-src`` it also runs powerflow's own
experiment (``wattsched experiment powerflow`` on Pollux workload-1, both power managers, budgets: the budgeted
steps, cuts and the static multiplier) with both trees and compares every output file, less what times the runs
(``wall_s`` columns, the summary's wall-time lines and section).

``--policy eaco`` does the same for EaCO (its run grew with about the 1.45 power of the job count): the cases are
the green experiment's eaco runs, and the experiment compared is ``wattsched experiment eaco`` on a small
generated trace and the fixture Gavel throughputs (both cluster sizes, EaCO against FIFO).

    WATTSCHED_DATA=../shared/data python benchmarks/bench_powerflow_speed.py --baseline-src /tmp/pf-base/src \
        [--policy powerflow|eaco] [--case 3000] [--case 7033] [--case 3000-budget] [--repeats 2]
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
from pathlib import Path

from _identity import OWN_SRC, differences
from bench_engine_speed import time_calibration

# Case -> (training jobs, the run's energy budget in kWh or None). The budget case binds: powerflow alone uses
# 36,511 kWh on this window (the budgeted steps, cuts and multiplier run every round).
CASES: dict[str, tuple[int, float | None]] = {
    "3000": (3000, None),
    "7033": (7033, None),
    "3000-budget": (3000, 33_000.0),
    "30437": (30437, None),  # six weeks of Philly (eaco alone: ~20 min before issue 30's speed-up)
    "75196": (75196, None),  # three months: issue 30's window
}
POLICIES = ("powerflow", "eaco")
DEFAULT_CASES = {"powerflow": ["3000", "7033", "3000-budget"], "eaco": ["3000", "7033"]}


def run_case(name: str, out: Path, policy: str = "powerflow") -> dict:
    """One run of `policy` on the green experiment's job model, in this process, into `out`."""
    from wattsched.experiments.green import GreenConfig, run_config
    from wattsched.experiments.run import run_simulation

    jobs, budget = CASES[name]
    cfg = run_config(GreenConfig(max_jobs=jobs), {"allocation": policy})
    if budget is not None:  # after run_config, which sets the experiment's own budget field
        cfg = cfg.model_copy(update={"energy_budget_kwh": budget})
    c0, t0 = time.process_time(), time.perf_counter()
    result = run_simulation(cfg, str(out))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "completed": result.summary["jobs_completed"],
        "energy_kwh": result.summary.get("energy_kwh"),
    }


# powerflow's own experiment, small (the fixture tables of tests/unit/test_powerflow_experiment.py).
EXPERIMENT = ["experiment", "powerflow", "--workload", "pollux/workload-1", "--cluster", "n16g4", "--gpu-type",
              "T4", "--data-dir", str(OWN_SRC.parent / "tests" / "fixtures" / "perfdata"), "--seeds", "1",
              "--baselines", "fifo,optimus-greedy", "--budget-points", "3", "--workers", "1", "--quiet",
              "--no-plots"]  # fmt: skip
WALL_LINES = ("Ran ", "- **Wall time", "- whole experiment under")  # summary.md lines that time the runs
WALL_WORDS = (
    "summed over runs"  # eaco's summary.md: the line of the runs' summed seconds and the load average
)


def _without_wall_times(path: Path) -> str:
    """A file of the experiment's output as compared: CSVs without wall_s columns, summary.md without the lines
    and the section that time the runs (and eaco's line of the runs' summed seconds and the machine's load)."""
    if path.suffix == ".csv":
        import pandas as pd

        table = pd.read_csv(path)
        return table.drop(columns=[c for c in table.columns if c.startswith("wall")]).to_csv(index=False)
    if path.name == "summary.md":
        kept, skipping = [], False
        for line in path.read_text().splitlines():
            if line.startswith("## "):
                skipping = line.startswith("## Mean wall time")
            if not skipping and not line.startswith(WALL_LINES) and WALL_WORDS not in line:
                kept.append(line)
        return "\n".join(kept)
    return path.read_bytes().hex()


def _eaco_trace(path: Path, n: int = 60) -> Path:
    """A small Philly-like trace of the models the fixture Gavel throughputs hold (seeded: the same each time)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(30)
    pd.DataFrame(
        {
            "job_id": [f"j{i}" for i in range(n)],
            "submit_time": np.sort(rng.uniform(0, 4 * 3600, n)).round(1),
            "duration": rng.uniform(1800, 6 * 3600, n).round(1),
            "num_gpu": rng.choice([1, 2, 4, 8], size=n),
            "model_name": rng.choice(["A3C", "Alpha"], size=n),
        }
    ).to_csv(path, index=False)
    return path


def _eaco_experiment(tmp: Path) -> list[str]:
    """EaCO's own experiment, small: both cluster sizes, EaCO against FIFO, on a generated trace."""
    fixtures = OWN_SRC.parent / "tests" / "fixtures" / "data"
    trace = _eaco_trace(tmp / "eaco-jobs.csv")
    return ["experiment", "eaco", "--nodes", "28,64", "--seeds", "1", "--workload", str(trace), "--max-jobs",
            "0", "--policies", "eaco,fifo", "--workers", "1", "--data-dir", str(fixtures), "--quiet",
            "--no-plots"]  # fmt: skip


def experiment_differences(baseline_src: Path, tmp: Path, policy: str = "powerflow") -> list[str]:
    """Run the policy's own experiment with both trees; the output files that differ (less wall times)."""
    outs = []
    args = EXPERIMENT if policy == "powerflow" else _eaco_experiment(tmp)
    for tag, src in (("before", baseline_src), ("this", OWN_SRC)):
        out = tmp / f"experiment-{tag}"
        env = {**os.environ, "PYTHONPATH": str(src)}
        cmd = [sys.executable, "-m", "wattsched", *args, "--out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"experiment {policy} ({src}): {proc.stderr.strip()[-2000:]}")
        outs.append(out)
    names = sorted({str(p.relative_to(o)) for o in outs for p in o.rglob("*") if p.is_file()})
    return [n for n in names if not all((o / n).exists() for o in outs)
            or _without_wall_times(outs[0] / n) != _without_wall_times(outs[1] / n)]  # fmt: skip


def _child(name: str, src: Path, out: Path, policy: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        name,
        "--out",
        str(out),
        "--policy",
        policy,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "no output"
        raise SystemExit(f"{name} ({src}): failed: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=2, help="runs of each case and tree; the best counts")
    parser.add_argument("--policy", choices=POLICIES, default="powerflow", help="the policy timed")
    parser.add_argument(
        "--case", action="append", choices=sorted(CASES), help="only these (default: the policy's usual ones)"
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="another checkout's src: time it too and compare outputs",
    )
    parser.add_argument("--child", choices=sorted(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_case(args.child, args.out, args.policy)))
        return
    names = args.case or DEFAULT_CASES[args.policy]
    trees = {"this": OWN_SRC} | ({"before": args.baseline_src} if args.baseline_src else {})
    print(f"machine: {platform.platform()}, {os.cpu_count()} cores, python {platform.python_version()}")
    calibrations = [time_calibration()]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            best: dict[str, dict] = {}
            for rep in range(args.repeats):
                for tag, src in trees.items():  # alternate the trees
                    out = Path(tmp) / name / tag / str(rep)
                    res = _child(name, src, out, args.policy)
                    calibrations.append(time_calibration())
                    print(f"  {args.policy} {name:12s} run {rep + 1} {tag:6s} wall {res['wall_s']:8.2f} s  "
                          f"cpu {res['cpu_s']:8.2f} s", flush=True)  # fmt: skip
                    if tag not in best or res["cpu_s"] < best[tag]["cpu_s"]:
                        best[tag] = res | {"wall_s": min(res["wall_s"], best.get(tag, res)["wall_s"])}
            calib = min(calibrations)
            for tag, res in best.items():
                print(
                    f"{name:12s} {tag:6s} {res['completed']:>6,} jobs done  cpu {res['cpu_s']:8.2f} s  wall "
                    f"{res['wall_s']:8.2f} s ({res['wall_s'] / calib:7.1f} calibration loops)  peak RSS "
                    f"{res['peak_rss_mb']:6.0f} MB"
                )
            if "before" in best:
                this, before = best["this"], best["before"]
                diff = differences(Path(tmp) / name / "before" / "0", Path(tmp) / name / "this" / "0")
                print(
                    f"{name:12s} speed-up: cpu {before['cpu_s'] / this['cpu_s']:5.2f}x, wall "
                    f"{before['wall_s'] / this['wall_s']:5.2f}x; run directories "
                    + ("identical" if not diff else "DIFFERENT: " + ", ".join(diff)),
                    flush=True,
                )
                failed |= bool(diff)
        if args.baseline_src:
            diff = experiment_differences(args.baseline_src, Path(tmp), args.policy)
            what = {
                "powerflow": "pollux/workload-1, budgets, both power managers",
                "eaco": "28 and 64 nodes, fifo",
            }
            print(f"experiment {args.policy} ({what[args.policy]}): outputs "
                  + ("identical (less wall times)" if not diff else "DIFFERENT: " + ", ".join(diff)))  # fmt: skip
            failed |= bool(diff)
    print(f"calibration loop: {min(calibrations):.3f} s (best of {len(calibrations)})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
