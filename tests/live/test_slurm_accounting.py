"""The local test Slurm's accounting mode (slurmdbd on a private MariaDB) and what sacct records of a real workload.

The workload (tests/slurm_history_capture.py) runs once per module on its own accounting testbed, with a second
partition; about 75 s, 60 of them the time-limit job. The last test needs no Slurm: it checks the committed
captures (tests/fixtures/slurm_history/real/) against the workload record written with them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path

import pytest

from tests.slurm_history_capture import (
    SECOND_PARTITION,
    Capture,
    ExpectedRecord,
    Observation,
    check_capture,
    gpus_in_tres,
    parse_parsable,
    run_workload_and_capture,
)
from tests.slurm_testbed import CLUSTER, MARKER, LocalSlurm, _marked_pids

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "slurm_history" / "real"


@pytest.fixture(scope="module")
def accounting_slurm() -> Iterator[LocalSlurm]:
    if os.environ.get("WATTSCHED_SKIP_SLURM") == "1":
        pytest.skip("local Slurm skipped: WATTSCHED_SKIP_SLURM=1")
    ok, why = LocalSlurm.available(accounting=True)
    if not ok:
        pytest.skip(why)
    base = tempfile.mkdtemp(prefix="wattsched-slurm-")  # under /tmp: munged must enter it (not tmp_path)
    try:
        with LocalSlurm(
            base, suspend_time=None, accounting=True, extra_partitions={SECOND_PARTITION: "gpu3"}
        ) as slurm:
            yield slurm
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def history(accounting_slurm: LocalSlurm, tmp_path_factory: pytest.TempPathFactory) -> Capture:
    return run_workload_and_capture(accounting_slurm, tmp_path_factory.mktemp("slurm-history"))


def _job_rows(capture: Capture) -> dict[str, dict[str, str]]:
    return {
        r["JobID"]: r for r in parse_parsable(capture.files["sacct"].read_text()) if "." not in r["JobID"]
    }


@pytest.mark.slurm
@pytest.mark.slow
def test_sacct_has_every_job_with_its_state_gpus_and_squeue_times(history: Capture) -> None:
    assert check_capture(history) == []
    # The workload covered what it is for: every end state, queueing, two partitions, arrays, het jobs.
    rows = _job_rows(history)
    assert {r["State"].split()[0] for r in rows.values()} == {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
    assert {r["Partition"] for r in rows.values()} == {"main", SECOND_PARTITION}
    assert sorted(i.split("_")[1] for i in rows if "_" in i) == ["0", "1", "2"]
    assert sorted(i.split("+")[1] for i in rows if "+" in i) == ["0", "1"]
    assert sorted({gpus_in_tres(r["AllocTRES"]) for r in rows.values()}) == [0, 1, 2, 4, 8]
    waited = [o for o in history.observed.values() if "Resources" in o.pending_reasons and o.first_running]
    assert waited, "no job queued behind another for GPUs"
    failed = next(r for r in rows.values() if r["JobName"] == "fails")
    assert failed["ExitCode"] == "1:0"
    timed_out = next(r for r in rows.values() if r["JobName"] == "time-limit")
    assert timed_out["Timelimit"] == "00:01:00"
    assert timed_out["Elapsed"] >= "00:01:00"


@pytest.mark.slurm
@pytest.mark.slow
def test_steps_and_accounts(history: Capture) -> None:
    rows = parse_parsable(history.files["sacct"].read_text())
    gang = next(r for r in rows if r["JobName"] == "two-node-steps")
    steps = {r["JobID"].split(".", 1)[1]: r for r in rows if r["JobID"].startswith(gang["JobID"] + ".")}
    assert sorted(steps) == ["0", "1", "2", "batch"]
    assert gpus_in_tres(steps["1"]["AllocTRES"]) == 8 and steps["1"]["NodeList"] == gang["NodeList"]
    assert gpus_in_tres(steps["2"]["AllocTRES"]) == 4  # srun -N1: one node's GPUs
    jobs = [r for r in rows if "." not in r["JobID"]]
    assert {(r["User"], r["Account"]) for r in jobs} == {("root", "research")}


@pytest.mark.slurm
@pytest.mark.slow
def test_json_captures_parse(history: Capture) -> None:
    doc = json.loads(history.files["sacct_json"].read_text())
    assert doc["meta"]["Slurm"]["release"] in history.slurm_version
    assert {j["cluster"] for j in doc["jobs"]} == {CLUSTER}
    raw = {r["JobIDRaw"] for r in _job_rows(history).values()}
    assert {str(j["job_id"]) for j in doc["jobs"]} == raw
    nodes = json.loads(history.files["sinfo_json"].read_text())["nodes"]
    assert sorted(n["name"] for n in nodes) == ["gpu1", "gpu2", "gpu3"]
    assert {n["gres"] for n in nodes} == {"gpu:a100:4"}
    # 22.05's scontrol has no --json; the capture says so and keeps the text form.
    assert "scontrol_nodes_json" not in history.files
    assert any("--json" in command for command in history.errors)
    assert history.files["scontrol_nodes"].read_text().count("NodeName=") == 3


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize("key", ["sacct", "sacct_json"])
def test_whatif_imports_and_replays_the_real_history(history: Capture, key: str, tmp_path: Path) -> None:
    """Issue 29's check on this Slurm's own history: both sacct formats import to the submitted jobs, and
    `wattsched whatif` replays them with starts and start order within the bands of tests/whatif_fixtures.py."""
    from datetime import datetime, timedelta

    from typer.testing import CliRunner

    from tests.whatif_fixtures import check_import_matches, check_replay, hourly_signals
    from wattsched.cli.main import app
    from wattsched.workloads.slurm_history.sacct import read_sacct

    zone = _zone_name(history.utc_offset_s)  # sacct prints the host's local time without a zone
    expected = {k: dataclasses.asdict(v) for k, v in history.expected.items()}
    check_import_matches(read_sacct(history.files[key], tz=zone), expected)
    day = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")
    price, carbon = hourly_signals(tmp_path, start=day, hours=96)
    out = tmp_path / "whatif"
    args = ["whatif", "--sacct", str(history.files[key]), "--nodes", str(history.files["sinfo_json"]),
            "--out", str(out), "--price-csv", price, "--carbon-csv", carbon, "--tz", zone,
            "--variants", "baseline,right-sizing", "--workers", "1", "--quiet"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    figures = check_replay(out)
    assert figures["jobs_compared"] == len({r.sacct_id.split("+")[0] for r in history.expected.values()}) - 1
    assert (out / "report.html").exists()


def _zone_name(utc_offset_s: int) -> str:
    """An IANA zone with this fixed offset (Etc/GMT signs are inverted); UTC for 0."""
    hours, rest = divmod(-utc_offset_s, 3600)
    if rest:
        pytest.skip(f"host UTC offset {utc_offset_s} s is not whole hours")
    return "UTC" if hours == 0 else f"Etc/GMT{hours:+d}"


@pytest.mark.slurm
def test_accounting_testbed_stops_everything_and_removes_the_database() -> None:
    if os.environ.get("WATTSCHED_SKIP_SLURM") == "1":
        pytest.skip("local Slurm skipped: WATTSCHED_SKIP_SLURM=1")
    ok, why = LocalSlurm.available(accounting=True)
    if not ok:
        pytest.skip(why)
    base = tempfile.mkdtemp(prefix="wattsched-slurm-")
    try:
        slurm = LocalSlurm(base, nodes=1, suspend_time=None, accounting=True)
        with slurm:
            pids = {name: p.pid for name, p in slurm._procs.items()}
            assert {"mariadbd", "slurmdbd", "slurmctld", "munged"} <= set(pids)
            assert slurm.mysql_socket.is_socket()
            clusters = slurm.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"]).stdout.split()
            assert clusters == [CLUSTER]
            conf = slurm.base / "etc" / "slurmdbd.conf"
            assert conf.stat().st_mode & 0o777 == 0o600
            assert slurm.run(["sacct", "--allusers", "-n", "-X", "-o", "JobID"]).stdout.strip() == ""
        assert not slurm.mysql_dir.exists()
        assert not [p for p in pids.values() if os.path.exists(f"/proc/{p}")]
        assert _marked_pids(f"{MARKER}={slurm.base}".encode()) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_committed_real_captures_agree_with_their_workload_record() -> None:
    """The committed files (no Slurm needed): the same checks as on a live run, against workload.json."""
    record = json.loads((REAL / "workload.json").read_text())
    names = {
        "sacct": "sacct.psv",
        "sacct_duplicates": "sacct-duplicates.psv",
        "sacct_json": "sacct.json",
        "sinfo_json": "sinfo.json",
    }
    capture = Capture(
        files={key: REAL / name for key, name in names.items()},
        expected={i: ExpectedRecord(**r) for i, r in record["expected"].items()},
        observed={i: Observation(**o) for i, o in record["observed"].items()},
        raw_ids=record["raw_ids"],
        start_time=record["start_time"],
        errors=record["errors"],
        slurm_version=record["slurm_version"],
        utc_offset_s=record["utc_offset_s"],
    )
    assert check_capture(capture) == []
    assert len(capture.expected) >= 14
    readme = (REAL / "README.md").read_text()
    assert capture.slurm_version in readme and capture.start_time[:10] in readme
