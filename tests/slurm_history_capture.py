"""A scripted workload on the local test Slurm with accounting, and a capture of what Slurm recorded about it.

Test infrastructure (docs/live-slurm.md §2.8). On a running ``LocalSlurm(..., accounting=True)``,
:func:`run_workload_and_capture` submits a small but varied GPU workload (jobs of 1-8 fake GPUs that queue behind
each other, two partitions, an array, a heterogeneous job, a failure, a requeue, cancels while pending and while
running, a time-limit kill, a job of several ``srun`` steps), acts on it as it runs (cancel, requeue), watches it
with ``squeue``, waits until ``sacct`` has every job finished, and writes the accounting outputs to a directory.
It returns the paths written, what was submitted (each sacct record's expected state and GPU count) and what
``squeue`` saw, so a test can check the files against the run, and a replay test can import them.

The files committed under ``tests/fixtures/slurm_history/real/`` were made by it
(``python -m tests.slurm_history_capture DIR``; see that directory's README.md).
"""

from __future__ import annotations

import argparse
import calendar
import json
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from tests.slurm_testbed import LocalSlurm
from wattsched.core.errors import WattschedError

SECOND_PARTITION = (
    "long"  # the partition the workload sends one job to; the testbed needs it (extra_partitions)
)
SACCT_FORMAT = (
    "JobID,JobIDRaw,JobName,User,Account,Partition,Submit,Start,End,Elapsed,State,ExitCode,AllocTRES,ReqTRES,"
    "NodeList,NNodes,Timelimit,ConsumedEnergyRaw"
)
TIME_LIMIT_MINUTES = 1  # the time-limit job: Slurm's limits are whole minutes, and it checks them every 30 s
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
}


@dataclass(frozen=True)
class ExpectedRecord:
    """One job-level sacct record the workload must produce (steps are not listed)."""

    name: str  # the workload's label, also the job's --job-name (het components share it)
    sacct_id: str  # sacct's JobID: "12", "13_1" (array task), "15+0" (het component)
    state: str  # sacct's State, first word ("CANCELLED by 0" is "CANCELLED")
    gpus: int  # gres/gpu in AllocTRES; 0 for a job that never started (AllocTRES is empty)
    partition: str
    nodes: int  # NNodes once it ran
    requeued: bool = False  # an earlier run shows with --duplicates as state REQUEUED


@dataclass
class Observation:
    """What ``squeue`` showed of one job (by JobIDRaw), polled every ``interval`` s of the run."""

    states: list[str] = field(default_factory=list)  # distinct states in the order first seen
    first_running: float | None = None  # epoch seconds of the first poll that saw it RUNNING
    last_running: float | None = None
    pending_reasons: list[str] = field(default_factory=list)


@dataclass
class Capture:
    files: dict[str, Path]  # "sacct", "sacct_duplicates", "sacct_json", "sinfo_json", "scontrol_nodes", ...
    expected: dict[str, ExpectedRecord]  # by sacct JobID
    observed: dict[str, Observation]  # by JobIDRaw
    raw_ids: dict[str, str]  # sacct JobID -> JobIDRaw, as squeue printed them
    start_time: str  # the --starttime given to sacct (local time, second resolution)
    errors: dict[str, str]  # command -> its error, for captures this Slurm cannot make (e.g. scontrol --json)
    slurm_version: str
    utc_offset_s: int  # the capturing host's UTC offset: sacct prints local time without a zone


# ---- the workload --------------------------------------------------------------------------------------------


def _submit(slurm: LocalSlurm, *args: str) -> str:
    out = slurm.run(["sbatch", "--parsable", *args]).stdout.strip()
    return out.split(";")[0]


def _squeue(slurm: LocalSlurm) -> list[tuple[str, str, str, str]]:
    """(JobIDRaw, JobID, state, reason) of every job slurmctld still holds (finished ones for MinJobAge)."""
    out = slurm.run(["squeue", "-h", "-t", "all", "-o", "%A|%i|%T|%r"], timeout=15).stdout
    return [tuple(line.split("|", 3)) for line in out.splitlines() if line.count("|") == 3]  # type: ignore[misc]


def _sacct_rows(slurm: LocalSlurm, start_time: str, *extra: str) -> list[dict[str, str]]:
    out = slurm.run(
        [
            "sacct",
            "--allusers",
            "--parsable2",
            f"--starttime={start_time}",
            f"--format={SACCT_FORMAT}",
            *extra,
        ]
    ).stdout
    return parse_parsable(out)


def parse_parsable(text: str) -> list[dict[str, str]]:
    """Rows of ``sacct --parsable2`` output (a header line, then '|'-separated fields) as dicts."""
    lines = text.splitlines()
    if not lines:
        return []
    header = lines[0].split("|")
    return [dict(zip(header, line.split("|"), strict=True)) for line in lines[1:] if line]


def run_workload(
    slurm: LocalSlurm, *, include_timeout: bool = True, poll_interval: float = 0.5, timeout: float = 240.0
) -> tuple[dict[str, ExpectedRecord], dict[str, Observation], dict[str, str], str]:
    """Submit the workload, act on it, watch it until every job has ended. Returns (expected records by sacct
    JobID, squeue observations by JobIDRaw, sacct JobID -> JobIDRaw, the sacct start time)."""
    if not slurm.accounting:
        raise WattschedError("the history workload needs LocalSlurm(accounting=True)")
    slurm.wait_idle()
    second = SECOND_PARTITION if SECOND_PARTITION in slurm.extra_partitions else slurm.partition
    main = slurm.partition
    gpn = slurm.gpus_per_node
    # sacct's --starttime has second resolution and is inclusive; one second back covers a clock tick.
    start_time = datetime.fromtimestamp(time.time() - 1).strftime("%Y-%m-%dT%H:%M:%S")
    jobs: dict[str, str] = {}  # label -> sbatch's job id
    expected: list[
        tuple[str, str, str, int, str, int, bool]
    ] = []  # label, suffix, state, gpus, partition, N, rq

    def sub(label: str, *args: str) -> str:
        jobs[label] = _submit(slurm, f"--job-name={label}", *args)
        return jobs[label]

    # Started first so it surely runs: cancelled once squeue shows it running.
    sub("cancel-running", "--gres=gpu:1", "--mem=1G", "--wrap", "sleep 120")
    expected.append(("cancel-running", "", "CANCELLED", 1, main, 1, False))
    if include_timeout:
        sub("time-limit", f"--time={TIME_LIMIT_MINUTES}", "--gres=gpu:1", "--wrap", "sleep 600")
        expected.append(("time-limit", "", "TIMEOUT", 1, main, 1, False))
    # A gang over two whole nodes, with three srun steps.
    steps = "srun hostname; srun sleep 3; srun -N1 -n1 true"
    sub("two-node-steps", "-N2", "--ntasks-per-node=1", f"--gres=gpu:{gpn}", "--wrap", steps)
    expected.append(("two-node-steps", "", "COMPLETED", 2 * gpn, main, 2, False))
    # These queue behind the ones above (Resources) and start as GPUs free up.
    sub("full-node", f"--gres=gpu:{gpn}", "-c", "4", "--mem=8G", "--wrap", "sleep 5")
    expected.append(("full-node", "", "COMPLETED", gpn, main, 1, False))
    sub("half-node", f"--gres=gpu:{max(1, gpn // 2)}", "--wrap", "sleep 4")
    expected.append(("half-node", "", "COMPLETED", max(1, gpn // 2), main, 1, False))
    sub("other-partition", "-p", second, "--gres=gpu:2", "--wrap", "sleep 3")
    expected.append(("other-partition", "", "COMPLETED", 2, second, 1, False))
    sub("array", "--array=0-2", "--gres=gpu:1", "--wrap", "sleep 2")
    for task in range(3):
        expected.append(("array", f"_{task}", "COMPLETED", 1, main, 1, False))
    sub("fails", "--gres=gpu:1", "--wrap", "sleep 1; exit 1")
    expected.append(("fails", "", "FAILED", 1, main, 1, False))
    sub("requeued", "--gres=gpu:1", "--wrap", "sleep 4")
    expected.append(("requeued", "", "COMPLETED", 1, main, 1, True))
    # A heterogeneous job: two components, 1 and 2 GPUs, one batch script (sacct: N+0, N+1).
    het_script = slurm.jobs_dir / "het.sh"
    het_script.write_text("#!/bin/sh\nsrun -l hostname\nsleep 2\n")
    sub("het", "-n1", "--gres=gpu:1", ":", "-n1", "--gres=gpu:2", str(het_script))
    expected.append(("het", "+0", "COMPLETED", 1, main, 1, False))
    expected.append(("het", "+1", "COMPLETED", 2, main, 1, False))
    # Every GPU of the partition: it waits (Resources) behind all of the above and is cancelled while it does.
    # Not --hold: a held job is never eligible, and sacct leaves out jobs never eligible in the time window.
    sub("cancel-pending", f"-N{len(slurm.nodes)}", f"--gres=gpu:{gpn}", "--wrap", "sleep 1")
    pending_since = time.time()
    expected.append(("cancel-pending", "", "CANCELLED", 0, main, 0, False))

    observed: dict[str, Observation] = {}
    raw_ids: dict[str, str] = {}
    cancelled_running = requeue_released = cancelled_pending = False
    requeue_sent = 0.0
    deadline = time.monotonic() + timeout
    while True:
        now = time.time()
        rows = _squeue(slurm)
        for raw, job_id, state, reason in rows:
            raw_ids.setdefault(job_id, raw)
            seen = observed.setdefault(raw, Observation())
            if not seen.states or seen.states[-1] != state:
                seen.states.append(state)
            if state == "RUNNING":
                seen.first_running = seen.first_running or now
                seen.last_running = now
            if state == "PENDING" and reason not in seen.pending_reasons:
                seen.pending_reasons.append(reason)
        state_of = {job_id: state for _, job_id, state, _ in rows}
        if not cancelled_running and state_of.get(jobs["cancel-running"]) == "RUNNING":
            slurm.run(["scancel", jobs["cancel-running"]])
            cancelled_running = True
        # Left pending a few seconds first, so its Submit and End differ as in a real cancel.
        if (
            not cancelled_pending
            and state_of.get(jobs["cancel-pending"]) == "PENDING"
            and now > pending_since + 3
        ):
            slurm.run(["scancel", jobs["cancel-pending"]])
            cancelled_pending = True
        requeued = jobs["requeued"]
        running_since = observed.get(requeued, Observation()).first_running
        # Requeued mid-run (1.5 s in) and brought forward 1 s after it is back in the queue: requeued the instant it
        # started, and released at once, its second run failed at launch here once (0 s, exit 1).
        if (
            not requeue_sent
            and state_of.get(requeued) == "RUNNING"
            and running_since
            and now > running_since + 1.5
        ):
            slurm.run(["scontrol", "requeue", requeued])
            requeue_sent = now
        elif (
            requeue_sent
            and not requeue_released
            and state_of.get(requeued) == "PENDING"
            and now > requeue_sent + 1
        ):
            # A requeued job waits about 120 s (BeginTime); bring it forward (docs/live-slurm.md §2.6).
            slurm.run(["scontrol", "update", f"jobid={requeued}", "StartTime=now"])
            requeue_released = True
        done = all(state in TERMINAL for state in state_of.values()) and requeue_released
        if done and cancelled_running and cancelled_pending:
            break
        if time.monotonic() > deadline:
            slurm.cancel_all()
            raise WattschedError(
                f"history workload: not finished after {timeout:.0f} s: "
                f"{sorted((j, s) for j, s in state_of.items() if s not in TERMINAL)}"
            )
        time.sleep(poll_interval)

    records: dict[str, ExpectedRecord] = {}
    for label, suffix, state, gpus, partition, nodes, requeue in expected:
        sacct_id = jobs[label] + suffix
        records[sacct_id] = ExpectedRecord(label, sacct_id, state, gpus, partition, nodes, requeue)
    return records, observed, raw_ids, start_time


def wait_for_sacct(
    slurm: LocalSlurm, expected: dict[str, ExpectedRecord], start_time: str, timeout: float = 60.0
) -> list[dict[str, str]]:
    """Poll sacct until every expected record shows with its final state and an end time (slurmdbd is fed
    asynchronously by slurmctld's agent queue)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = {r["JobID"]: r for r in _sacct_rows(slurm, start_time)}
        missing = [
            i
            for i in expected
            if i not in rows
            or rows[i]["State"].split()[0] not in TERMINAL
            or (rows[i]["End"] in ("", "Unknown") and expected[i].gpus)
        ]
        if not missing:
            return list(rows.values())
        if time.monotonic() > deadline:
            raise WattschedError(
                f"sacct: after {timeout:.0f} s still no final record for {missing} "
                f"(have {sorted((i, r['State']) for i, r in rows.items() if '.' not in i)})"
            )
        time.sleep(1.0)


# ---- the capture ---------------------------------------------------------------------------------------------


def capture(slurm: LocalSlurm, out_dir: Path, start_time: str) -> tuple[dict[str, Path], dict[str, str]]:
    """Write the accounting and node outputs of this Slurm to ``out_dir``. Returns (files by key, errors by
    command for outputs this Slurm cannot produce)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    since = f"--starttime={start_time}"
    commands = {
        "sacct": ("sacct.psv", ["sacct", "--allusers", "--parsable2", since, f"--format={SACCT_FORMAT}"]),
        "sacct_duplicates": (
            "sacct-duplicates.psv",
            ["sacct", "--allusers", "--parsable2", "--duplicates", since, f"--format={SACCT_FORMAT}"],
        ),
        "sacct_json": ("sacct.json", ["sacct", "--allusers", "--json", since]),
        "sinfo_json": ("sinfo.json", ["sinfo", "--json"]),
        "scontrol_nodes_json": ("scontrol-show-nodes.json", ["scontrol", "show", "nodes", "--json"]),
        # 22.05's scontrol has no --json; its one-line-per-node text is the next best thing.
        "scontrol_nodes": ("scontrol-show-nodes.txt", ["scontrol", "-o", "show", "nodes"]),
        "scontrol_partitions": ("scontrol-show-partitions.txt", ["scontrol", "-o", "show", "partitions"]),
    }
    files: dict[str, Path] = {}
    errors: dict[str, str] = {}
    for key, (name, args) in commands.items():
        proc = slurm.run(args, check=False, timeout=60)
        if proc.returncode != 0 or not proc.stdout.strip():
            errors[shlex.join(args)] = f"exit {proc.returncode}: {proc.stderr.strip()}"
            continue
        path = out_dir / name
        path.write_text(proc.stdout)
        files[key] = path
    return files, errors


def run_workload_and_capture(
    slurm: LocalSlurm, out_dir: str | Path, *, include_timeout: bool = True, timeout: float = 240.0
) -> Capture:
    """Run the workload on ``slurm`` (accounting on, ideally with a ``long`` partition), wait for sacct, and
    write the captures plus ``workload.json`` (what was submitted and what squeue saw) to ``out_dir``."""
    out = Path(out_dir)
    expected, observed, raw_ids, start_time = run_workload(
        slurm, include_timeout=include_timeout, timeout=timeout
    )
    wait_for_sacct(slurm, expected, start_time)
    files, errors = capture(slurm, out, start_time)
    version = slurm.run(["sinfo", "--version"]).stdout.strip()
    utc_offset_s = time.localtime().tm_gmtoff
    workload = {
        "slurm_version": version,
        "utc_offset_s": utc_offset_s,
        "start_time": start_time,
        "expected": {i: asdict(r) for i, r in expected.items()},
        "raw_ids": raw_ids,
        "observed": {i: asdict(o) for i, o in observed.items()},
        "errors": errors,
    }
    files["workload"] = out / "workload.json"
    files["workload"].write_text(json.dumps(workload, indent=1) + "\n")
    return Capture(files, expected, observed, raw_ids, start_time, errors, version, utc_offset_s)


def _epoch(stamp: str, utc_offset_s: int) -> float | None:
    """sacct's local time stamp (2026-11-26T22:38:13) as epoch seconds; None for Unknown/None."""
    try:
        return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) - utc_offset_s
    except ValueError:
        return None


def gpus_in_tres(tres: str) -> int:
    """The untyped ``gres/gpu=N`` of a TRES string (sacct AllocTRES/ReqTRES); 0 when absent."""
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu":
            return int(value)
    return 0


def check_capture(result: Capture, start_slack: float = 5.0) -> list[str]:
    """Where the captured files disagree with what was submitted and what squeue saw; [] when they agree.

    Times: sacct stamps are whole seconds; a squeue poll taken at ``t`` that shows a job RUNNING means
    Start <= t + 2 (the poll's own latency) and End >= t - 1; the first poll that saw it comes at most
    ``start_slack`` s after its Start (poll interval plus the latency on a loaded 2-core host)."""
    problems: list[str] = []
    rows = parse_parsable(result.files["sacct"].read_text())
    jobs = {r["JobID"]: r for r in rows if "." not in r["JobID"]}
    if set(jobs) != set(result.expected):
        problems.append(
            f"sacct job records {sorted(jobs)} != submitted {sorted(result.expected)} "
            f"(missing {sorted(set(result.expected) - set(jobs))}, extra {sorted(set(jobs) - set(result.expected))})"
        )
    for sacct_id, want in result.expected.items():
        row = jobs.get(sacct_id)
        if row is None:
            continue
        where = f"{sacct_id} ({want.name})"
        state = row["State"].split()[0]
        if state != want.state:
            problems.append(f"{where}: state {row['State']!r}, expected {want.state}")
        gpus = gpus_in_tres(row["AllocTRES"])
        if gpus != want.gpus:
            problems.append(f"{where}: AllocTRES {row['AllocTRES']!r} has {gpus} GPUs, expected {want.gpus}")
        if row["Partition"] != want.partition:
            problems.append(f"{where}: partition {row['Partition']}, expected {want.partition}")
        if result.raw_ids.get(sacct_id, row["JobIDRaw"]) != row["JobIDRaw"]:
            problems.append(
                f"{where}: squeue's raw id {result.raw_ids[sacct_id]} != sacct's {row['JobIDRaw']}"
            )
        submit, start, end = (_epoch(row[k], result.utc_offset_s) for k in ("Submit", "Start", "End"))
        seen = result.observed.get(row["JobIDRaw"], Observation())
        if want.gpus == 0:  # never started
            if seen.first_running is not None:
                problems.append(f"{where}: squeue saw it running, sacct says it never started")
            if row["NodeList"] != "None assigned":
                problems.append(f"{where}: NodeList {row['NodeList']!r} for a job that never ran")
            continue
        if int(row["NNodes"]) != want.nodes:
            problems.append(f"{where}: NNodes {row['NNodes']}, expected {want.nodes}")
        if submit is None or start is None or end is None or not submit <= start <= end:
            problems.append(
                f"{where}: Submit {row['Submit']} Start {row['Start']} End {row['End']} out of order"
            )
            continue
        if seen.first_running is None or seen.last_running is None:
            continue  # too short for the poll to catch it running: nothing to compare
        # A requeued job's sacct record is its last run; squeue's first RUNNING poll belongs to the earlier one.
        first = seen.last_running if want.requeued else seen.first_running
        if not start <= first + 2:
            problems.append(
                f"{where}: squeue saw it running at {first:.1f}, before sacct's Start {row['Start']}"
            )
        if not want.requeued and first > start + start_slack:
            problems.append(f"{where}: squeue first saw it running {first - start:.1f} s after sacct's Start")
        if not end >= seen.last_running - 1:
            problems.append(f"{where}: squeue saw it running at {seen.last_running:.1f}, after sacct's End")
    duplicates = parse_parsable(result.files["sacct_duplicates"].read_text())
    for sacct_id, want in result.expected.items():
        runs = [r["State"].split()[0] for r in duplicates if r["JobID"] == sacct_id]
        wanted = ["REQUEUED", want.state] if want.requeued else [want.state]
        if runs != wanted:
            problems.append(f"{sacct_id} ({want.name}): sacct --duplicates shows {runs}, expected {wanted}")
    if "sacct_json" in result.files:
        doc = json.loads(result.files["sacct_json"].read_text())
        states: dict[str, list[str]] = {}
        for job in doc.get("jobs", []):
            states.setdefault(str(job["job_id"]), []).append(str(job["state"]["current"]))
        for sacct_id, want in result.expected.items():
            raw = jobs[sacct_id]["JobIDRaw"] if sacct_id in jobs else None
            if raw is not None and want.state not in states.get(raw, []):
                problems.append(
                    f"{sacct_id} ({want.name}): sacct --json has states {states.get(raw)} for job {raw}"
                )
    return problems


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.slurm_history_capture",
        description="Start an accounting test Slurm, run the history workload, write the captures to DIR.",
    )
    parser.add_argument("dir")
    parser.add_argument("--no-timeout-job", action="store_true", help="skip the time-limit job (60-90 s)")
    args = parser.parse_args(argv)
    ok, why = LocalSlurm.available(accounting=True)
    if not ok:
        print(f"error: {why}", file=sys.stderr)
        return 1
    base = tempfile.mkdtemp(prefix="wattsched-slurm-")  # under /tmp: munged must enter it (LocalSlurm)
    began = time.monotonic()
    try:
        with LocalSlurm(
            base, suspend_time=None, accounting=True, extra_partitions={SECOND_PARTITION: "gpu3"}
        ) as s:
            result = run_workload_and_capture(s, args.dir, include_timeout=not args.no_timeout_job)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    problems = check_capture(result)
    for problem in problems:
        print(f"mismatch: {problem}", file=sys.stderr)
    for key, path in result.files.items():
        print(f"{key}: {path} ({path.stat().st_size} bytes)")
    for command, error in result.errors.items():
        print(f"not captured: {command}: {error}")
    print(f"{result.slurm_version}; {len(result.expected)} job records; {time.monotonic() - began:.0f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(_main())
