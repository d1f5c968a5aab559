"""Import speed and memory of ``read_sacct`` on a generated sacct --parsable2 history (issue 29, item 4).

Writes a deterministic history of N jobs (default 1,000,000) with their steps (batch, extern and srun steps:
about 3 lines per job), array tasks, heterogeneous jobs, requeued duplicates and pending jobs into a temporary
directory, then imports it in a child process and reports wall time and the child's peak RSS, next to a
calibration loop timed in the same run (so figures from different machines can be compared by their ratio).

    PYTHONPATH=src python benchmarks/bench_sacct_import.py [--jobs 1000000]

Target: under 60 s for 10^6 jobs on 2 cores, with memory bounded by the jobs kept (not the file's size):
``--srun-steps 6`` writes the same jobs with six more steps each (a file three times as long), and the peak RSS
should stay about the same.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HEADER = (
    "JobID|JobIDRaw|User|Account|Partition|Submit|Start|End|Elapsed|State|AllocTRES|ReqTRES|NodeList|NNodes|"
    "Timelimit|ConsumedEnergyRaw"
)
STATES = np.array(["COMPLETED", "COMPLETED", "COMPLETED", "FAILED", "CANCELLED by 1000", "TIMEOUT"])


def _hms(seconds: int) -> str:
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def _stamp(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))


def generate(path: Path, jobs: int, seed: int = 29, srun_steps: int = 0) -> int:
    """Write the history; returns its line count. ``srun_steps`` adds that many ``<job>.<n>`` steps per job."""
    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000
    submit = t0 + np.sort(rng.integers(0, 90 * 86400, jobs))
    wait = rng.exponential(600, jobs).astype(int)
    run = np.maximum(1, rng.lognormal(7.5, 1.5, jobs).astype(int))
    gpus = rng.choice([0, 1, 2, 4, 8, 16], jobs, p=[0.1, 0.4, 0.2, 0.15, 0.1, 0.05])
    kind = rng.random(jobs)  # < 0.10 array task, < 0.11 het, < 0.12 requeued, < 0.13 pending
    state_idx = rng.integers(0, len(STATES), jobs)
    lines = 1
    next_raw = 10_000
    with path.open("w", encoding="utf-8", newline="\n") as f:
        f.write(HEADER + "\n")
        out: list[str] = []
        for i in range(jobs):
            g = int(gpus[i])
            nodes = max(1, g // 8) if g else 1
            cpu = max(1, g * 8)
            tres = (
                f"billing={cpu},cpu={cpu},gres/gpu:a100={g},gres/gpu={g},mem={cpu * 8}G,node={nodes}"
                if g
                else (f"billing={cpu},cpu={cpu},mem={cpu * 8}G,node={nodes}")
            )
            node_list = f"gpu[{i % 500:03d}-{i % 500 + nodes - 1:03d}]" if nodes > 1 else f"gpu{i % 500:03d}"
            sub, st = int(submit[i]), int(submit[i] + wait[i])
            en = st + int(run[i])
            raw = next_raw
            next_raw += 1
            k = kind[i]
            job_id = f"{raw - 1}_{i % 7}" if k < 0.10 else str(raw)
            user, acct = f"u{i % 97}", f"a{i % 13}"
            state = STATES[state_idx[i]]
            energy = str(int(run[i]) * 300 * max(g, 1))
            if 0.12 <= k < 0.13:
                out.append(
                    f"{raw}|{raw}|{user}|{acct}|gpu|{_stamp(sub)}|Unknown|Unknown|00:00:00|PENDING||{tres}|"
                    f"None assigned|{nodes}|1-00:00:00|"
                )
                lines += 1
                continue
            if 0.11 <= k < 0.12:  # requeued: an earlier run first
                out.append(
                    f"{job_id}|{raw}|{user}|{acct}|gpu|{_stamp(sub)}|{_stamp(st)}|{_stamp(st + 10)}|00:00:10|"
                    f"REQUEUED|{tres}|{tres}|{node_list}|{nodes}|1-00:00:00|0"
                )
                lines += 1
            if 0.10 <= k < 0.11:  # heterogeneous: two components
                for c in range(2):
                    out.append(
                        f"{raw}+{c}|{raw + c}|{user}|{acct}|gpu|{_stamp(sub)}|{_stamp(st)}|{_stamp(en)}|"
                        f"{_hms(en - st)}|{state}|{tres}|{tres}|{node_list}|{nodes}|1-00:00:00|0"
                    )
                    out.append(
                        f"{raw}+{c}.batch|{raw + c}.batch||{acct}||{_stamp(st)}|{_stamp(st)}|{_stamp(en)}|"
                        f"{_hms(en - st)}|{state}|{tres}||{node_list}|{nodes}||{energy}"
                    )
                next_raw += 1
                lines += 4
                continue
            out.append(
                f"{job_id}|{raw}|{user}|{acct}|gpu|{_stamp(sub)}|{_stamp(st)}|{_stamp(en)}|{_hms(en - st)}|"
                f"{state}|{tres}|{tres}|{node_list}|{nodes}|1-00:00:00|0"
            )
            out.append(
                f"{job_id}.batch|{raw}.batch||{acct}||{_stamp(st)}|{_stamp(st)}|{_stamp(en)}|{_hms(en - st)}|"
                f"{state}|{tres}||{node_list}|{nodes}||{energy}"
            )
            out.append(
                f"{job_id}.extern|{raw}.extern||{acct}||{_stamp(st)}|{_stamp(st)}|{_stamp(en)}|"
                f"{_hms(en - st)}|COMPLETED|{tres}||{node_list}|{nodes}||0"
            )
            for step in range(srun_steps):
                out.append(
                    f"{job_id}.{step}|{raw}.{step}||{acct}||{_stamp(st)}|{_stamp(st)}|{_stamp(en)}|"
                    f"{_hms(en - st)}|{state}|{tres}||{node_list}|{nodes}||{energy}"
                )
            lines += 3 + srun_steps
            if len(out) > 100_000:
                f.write("\n".join(out) + "\n")
                out.clear()
        if out:
            f.write("\n".join(out) + "\n")
    return lines


def _child(path: str) -> None:
    from wattsched.workloads.slurm_history.sacct import read_sacct

    t = time.perf_counter()
    history = read_sacct(path)
    wall = time.perf_counter() - t
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall_s": wall, "peak_rss_mib": peak_mib, "jobs": len(history.recorded)}))


def calibration_s() -> float:
    """A fixed pure-Python + numpy workload (best of 3), for comparing machines."""
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        total = 0
        for i in range(5_000_000):
            total += i % 7
        np.sort(np.random.default_rng(0).random(2_000_000))
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--srun-steps", type=int, default=0, help="extra srun steps per job (a longer file)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sacct.psv"
        t = time.perf_counter()
        lines = generate(path, args.jobs, srun_steps=args.srun_steps)
        gen_s = time.perf_counter() - t
        size_mib = path.stat().st_size / 2**20
        calib = calibration_s()
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[1] / "src")
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(path)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"history: {args.jobs} jobs, {lines} lines, {size_mib:.0f} MiB (generated in {gen_s:.1f} s)")
    print(
        f"import: {result['wall_s']:.2f} s wall, peak RSS {result['peak_rss_mib']:.0f} MiB, {result['jobs']} jobs"
    )
    print(
        f"calibration loop: {calib:.3f} s (best of 3); import / calibration = {result['wall_s'] / calib:.1f}"
    )


if __name__ == "__main__":
    main()
