"""read_sacct: sacct --parsable2 and --json output into a SlurmHistory (docs/whatif.md §2)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattsched.core.errors import InputError, WattschedError
from wattsched.workloads.slurm_history import JOB_STATES, RECORDED_COLUMNS
from wattsched.workloads.slurm_history import sacct as sacct_module
from wattsched.workloads.slurm_history._slurm_text import format_duration, map_state, parse_duration
from wattsched.workloads.slurm_history.sacct import EXTRA_COLUMNS, read_sacct

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm_history"
HEADER = (
    "JobID|JobIDRaw|User|Account|Partition|Submit|Start|End|Elapsed|State|AllocTRES|ReqTRES|NodeList|NNodes|"
    "Timelimit|ConsumedEnergyRaw"
)


def _row(h, job_id):
    rows = h.recorded.loc[h.recorded["job_id"] == job_id]
    assert len(rows) == 1, f"{job_id}: {len(rows)} rows"
    return rows.iloc[0]


def test_parsable_folds_steps_arrays_het_and_requeues():
    h = read_sacct(FIXTURES / "sacct_mixed.psv")
    rec = h.recorded
    assert list(rec.columns) == [*RECORDED_COLUMNS, *EXTRA_COLUMNS]
    assert sorted(rec["job_id"]) == sorted(
        ["100", "101", "200_1", "200_2", "200_[3-5]", "300", "400", "500", "501"]
    )
    assert not rec["job_id"].str.contains(".", regex=False).any()  # steps never become jobs
    # time origin: the earliest submission (job 400's final record, 09:20:05)
    assert h.time_origin_utc == "2024-03-01T09:20:05+00:00"
    j100 = _row(h, "100")
    assert (j100.num_gpu, j100.num_nodes, j100.num_cpu, j100.gpu_type) == (4, 1, 8, "a100")
    assert j100.memory_mib == 64 * 1024
    assert j100.energy_j == 1_440_000  # the job line's own value, not the steps' sum
    assert j100.wait_s == 30 and j100.elapsed_s == 3600 and j100.timelimit_s == 7200
    j101 = _row(h, "101")
    assert j101.state == "CANCELLED"  # "CANCELLED by 1000"
    assert j101.energy_j == 1_800_000  # job line 0: steps summed (300000 + 1500000)
    assert j101.timelimit_s == 86400 and j101.node_list == "gpu[02-03]"
    het = _row(h, "300")
    assert het.num_gpu == 3 and het.num_nodes == 2 and het.node_list == "gpu05,cpu01"
    assert het.end_s - het.start_s == 32 * 60  # latest end of the components
    requeued = _row(h, "400")
    assert requeued.requeues == 1 and requeued.node_list == "gpu07" and requeued.state == "COMPLETED"
    assert requeued.energy_j == 720_000 and math.isnan(requeued.timelimit_s)
    pending = _row(h, "200_[3-5]")
    assert pending.state == "PENDING" and math.isnan(pending.start_s) and pending.node_list == ""
    never = _row(h, "500")
    assert math.isnan(never.start_s) and math.isnan(never.wait_s) and never.end_s == never.submit_s + 300
    running = _row(h, "501")
    assert running.state == "RUNNING" and math.isnan(running.end_s) and math.isnan(running.energy_j)
    assert h.state_counts == {"COMPLETED": 4, "FAILED": 1, "CANCELLED": 2, "RUNNING": 1, "PENDING": 1}
    assert set(h.state_counts) <= set(JOB_STATES)
    notes = " | ".join(h.notes)
    assert (
        "heterogeneous" in notes
        and "1 earlier run(s) of 1 requeued job(s)" in notes
        and "never started" in notes
    )
    assert h.source.endswith("sacct_mixed.psv")
    rec.loc[0, "energy_j"] = 1.0  # the frame is an ordinary, writable one (no read-only Arrow views)
    rec.loc[0, "user"] = "x"


def test_auto_detects_json_and_reads_slurm_22_05_shape():
    h = read_sacct(FIXTURES / "sacct_2205.json")
    rec = h.recorded
    assert sorted(rec["job_id"]) == ["100", "200_1", "300", "500"]
    j100 = _row(h, "100")
    assert (
        j100.energy_j
        == 1_450_000  # the allocation's energy TRES (the job's ConsumedEnergyRaw), not the steps' sum
        and j100.timelimit_s == 7200
        and j100.num_gpu == 4
        and j100.gpu_type == "a100"
    )
    assert j100.memory_mib == 65536 and j100.num_cpu == 8
    het = _row(h, "300")
    assert het.num_gpu == 3 and het.node_list == "gpu05,gpu06" and het.elapsed_s == 1920
    cancelled = _row(h, "500")
    assert cancelled.num_gpu == 2 and math.isnan(cancelled.start_s) and math.isnan(cancelled.timelimit_s)
    assert h.time_origin_utc == "2024-03-01T10:00:00+00:00"
    assert "22.05.8" in h.notes[0]


def test_reads_slurm_23_shape_with_set_number_objects_and_state_lists():
    h = read_sacct(FIXTURES / "sacct_2311.json", fmt="json")
    j700 = _row(h, "700")
    assert j700.timelimit_s == 240 * 60 and j700.energy_j == 3_600_000 and j700.num_gpu == 8
    assert j700.gpu_type == "h100" and j700.num_nodes == 2
    assert _row(h, "710_3").state == "TIMEOUT"
    pending = _row(h, "720")
    assert pending.state == "PENDING" and math.isnan(pending.timelimit_s) and math.isnan(pending.end_s)


def test_bad_timestamp_names_file_line_and_field():
    with pytest.raises(InputError) as err:
        read_sacct(FIXTURES / "sacct_bad_time.psv")
    assert str(err.value) == f"{FIXTURES / 'sacct_bad_time.psv'}:4: field 'Submit': 'xyz' is not a timestamp"


def test_missing_required_field_names_line_one():
    with pytest.raises(InputError) as err:
        read_sacct(FIXTURES / "sacct_missing_field.psv")
    assert err.value.line == 1 and err.value.field == "Submit"
    assert "missing required column" in str(err.value)


def test_missing_optional_fields_are_noted():
    h = read_sacct(FIXTURES / "sacct_minimal.psv")
    assert any("not in the file" in n and "ConsumedEnergyRaw" in n for n in h.notes)
    assert _row(h, "1").num_gpu == 2 and _row(h, "1").user == ""


def test_wrong_field_count():
    with pytest.raises(InputError) as err:
        read_sacct(FIXTURES / "sacct_field_count.psv")
    assert err.value.line == 3
    assert "expected 6 fields separated by '|', found 7" in str(err.value)


def test_bad_utf8_empty_and_no_jobs(tmp_path):
    bad = tmp_path / "bad.psv"
    bad.write_bytes((HEADER + "\n").encode() + b"1|1|\xff|a|gpu|x\n")
    with pytest.raises(InputError, match=r"bad.psv:2: not UTF-8"):
        read_sacct(bad)
    empty = tmp_path / "empty.psv"
    empty.write_text("")
    with pytest.raises(InputError, match=r"empty.psv:1: file is empty"):
        read_sacct(empty)
    header_only = tmp_path / "header.psv"
    header_only.write_text(HEADER + "\n")
    with pytest.raises(InputError, match="contains no jobs"):
        read_sacct(header_only)
    with pytest.raises(InputError, match="file not found"):
        read_sacct(tmp_path / "absent.psv")


def test_bad_values_in_other_fields(tmp_path):
    def one(line: str) -> str:
        p = tmp_path / "one.psv"
        p.write_text(HEADER + "\n" + line + "\n")
        with pytest.raises(InputError) as err:
            read_sacct(p)
        return str(err.value)

    base = (
        "1|1|a|p|gpu|2024-03-01T10:00:00|2024-03-01T10:00:00|2024-03-01T11:00:00|{el}|COMPLETED|{tres}|cpu=1|n1|"
        "{nn}|01:00:00|"
    )
    assert one(base.format(el="1h", tres="cpu=1", nn="1")).endswith(
        ":2: field 'Elapsed': '1h' is not a duration ([D-]HH:MM:SS, MM:SS or UNLIMITED)"
    )
    assert ":2: field 'NNodes': 'two' is not a non-negative number" in one(
        base.format(el="01:00:00", tres="cpu=1", nn="two")
    )
    assert ":2: field 'AllocTRES'" in one(base.format(el="01:00:00", tres="cpu 1", nn="1"))
    assert ":2: field 'JobID'" in one(
        base.replace("1|1|a", "|1|a").format(el="01:00:00", tres="cpu=1", nn="1")
    )


def test_duplicate_ids_requeued_runs_dropped_reused_ids_kept(tmp_path):
    p = tmp_path / "dup.psv"
    rows = [
        "JobID|Submit|Start|End|State|AllocTRES",
        "9|2024-03-01T10:00:00|2024-03-01T10:00:00|2024-03-01T10:10:00|PREEMPTED|gres/gpu=1",
        "9|2024-03-01T10:10:00|2024-03-01T10:11:00|2024-03-01T10:20:00|REQUEUED|gres/gpu=1",
        "9|2024-03-01T10:20:00|2024-03-01T10:21:00|2024-03-01T11:00:00|COMPLETED|gres/gpu=1",
        "5|2024-02-01T10:00:00|2024-02-01T10:00:00|2024-02-01T11:00:00|COMPLETED|gres/gpu=2",
        "5|2024-03-01T12:00:00|2024-03-01T12:00:00|2024-03-01T13:00:00|FAILED|gres/gpu=4",
    ]
    p.write_text("\n".join(rows) + "\n")
    h = read_sacct(p)
    assert sorted(h.recorded["job_id"]) == ["5", "5~5", "9"]
    assert _row(h, "9").requeues == 2 and _row(h, "9").state == "COMPLETED"
    assert _row(h, "5~5").num_gpu == 2 and _row(h, "5").num_gpu == 4
    notes = " | ".join(h.notes)
    assert "2 earlier run(s) of 1 requeued job(s)" in notes and "1 record(s) share their id" in notes


def test_time_zone_applies_to_wall_times():
    # 2024-03-31: clocks in Berlin go from 02:00 to 03:00; 01:30 CET = 00:30 UTC, 03:30 CEST = 01:30 UTC.
    utc = read_sacct(FIXTURES / "sacct_minimal.psv")
    berlin = read_sacct(FIXTURES / "sacct_minimal.psv", tz="Europe/Berlin")
    assert utc.time_origin_utc == "2024-03-31T01:30:00+00:00" and _row(utc, "1").wait_s == 7200
    assert berlin.time_origin_utc == "2024-03-31T00:30:00+00:00" and _row(berlin, "1").wait_s == 3600
    assert any("Europe/Berlin" in n for n in berlin.notes)
    with pytest.raises(WattschedError, match="unknown time zone 'Mars/Olympus'"):
        read_sacct(FIXTURES / "sacct_minimal.psv", tz="Mars/Olympus")


def test_energy_tres_when_consumed_energy_raw_is_absent(tmp_path):
    p = tmp_path / "e.psv"
    p.write_text(
        "JobID|Submit|Start|End|State|AllocTRES\n"
        "8|2024-03-01T10:00:00|2024-03-01T10:00:00|2024-03-01T11:00:00|COMPLETED|cpu=2,energy=7200,gres/gpu=1\n"
    )
    assert _row(read_sacct(p), "8").energy_j == 7200


def test_epoch_timestamps_and_parsable_with_trailing_bar(tmp_path):
    p = tmp_path / "p.psv"
    p.write_text(
        "JobID|Submit|Start|End|State|AllocTRES|\n7|1709287200|1709287260|Unknown|RUNNING|gres/gpu=1|\n"
    )
    h = read_sacct(p)
    assert h.time_origin_utc == "2024-03-01T10:00:00+00:00" and _row(h, "7").wait_s == 60


def _generated(path: Path, jobs: int) -> None:
    rng = np.random.default_rng(7)
    gpus = rng.integers(0, 9, jobs)
    run = rng.integers(1, 86400 * 2, jobs)
    lines = [HEADER]
    for i in range(jobs):
        d, rest = divmod(int(run[i]), 86400)
        el = (f"{d}-" if d else "") + f"{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
        jid = f"{1000 + i}_{i % 3}" if i % 10 == 0 else str(1000 + i)
        lines.append(
            f"{jid}|{1000 + i}|u{i % 5}|a|gpu|2024-01-01T00:00:00|2024-01-01T00:01:00|2024-01-05T00:00:00|{el}|"
            f"COMPLETED|cpu=1,gres/gpu={gpus[i]}|cpu=1|n{i % 50}|1|UNLIMITED|0"
        )
        lines.append(
            f"{jid}.batch|{1000 + i}.batch||a||2024-01-01T00:01:00|2024-01-01T00:01:00|2024-01-05T00:00:00|"
            f"{el}|COMPLETED|cpu=1||n{i % 50}|1||{i}"
        )
    path.write_text("\n".join(lines) + "\n")


def test_generated_100k_rows_in_small_blocks_equals_one_block(tmp_path, monkeypatch):
    path = tmp_path / "gen.psv"
    _generated(path, 50_000)  # 100,000 rows: jobs and their batch steps
    whole = read_sacct(path)
    monkeypatch.setattr(sacct_module, "BLOCK_BYTES", 64 * 1024)  # ~90 blocks; steps cross block edges
    seen = []
    blocks = read_sacct(path, progress=lambda done, total: seen.append((done, total)))
    assert len(seen) > 50 and seen[-1][0] == seen[-1][1] == path.stat().st_size
    assert len(whole.recorded) == 50_000
    np.testing.assert_array_equal(whole.recorded["num_gpu"], blocks.recorded["num_gpu"])
    assert whole.recorded.equals(blocks.recorded)
    rng = np.random.default_rng(7)
    np.testing.assert_array_equal(whole.recorded["num_gpu"], rng.integers(0, 9, 50_000))
    np.testing.assert_array_equal(whole.recorded["elapsed_s"], rng.integers(1, 86400 * 2, 50_000))
    energy = whole.recorded["energy_j"].to_numpy()
    assert (
        np.isnan(energy[0]) and energy[1] == 1 and energy[-1] == 49_999
    )  # the batch step's value (0 -> NaN)


@given(st.integers(min_value=0, max_value=400 * 86400))
def test_duration_round_trip(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.integers(0, 59), st.integers(0, 59))
def test_minutes_seconds_form(m, s):
    assert parse_duration(f"{m:02d}:{s:02d}") == m * 60 + s


@settings(max_examples=50)
@given(st.sampled_from(["UNLIMITED", "Partition_Limit", "", "unlimited"]))
def test_unlimited_words_are_nan(word):
    assert math.isnan(parse_duration(word))


def test_state_mapping():
    assert map_state("CANCELLED by 1000") == ("CANCELLED", True)
    assert map_state("OUT_OF_MEMORY") == ("OUT_OF_MEMORY", True)
    assert map_state("REQUEUE_HOLD") == ("REQUEUED", True)
    assert map_state("WEIRD") == ("OTHER", False)
    with pytest.raises(ValueError):
        parse_duration("abc")


def test_crlf_blank_lines_and_no_final_newline(tmp_path, monkeypatch):
    rows = [
        "JobID|Submit|Start|End|State|AllocTRES|ConsumedEnergyRaw",
        "1|2024-03-01T10:00:00|2024-03-01T10:00:00|2024-03-01T11:00:00|COMPLETED|gres/gpu=1|0",
        "",
        "1.batch|2024-03-01T10:00:00|2024-03-01T10:00:00|2024-03-01T11:00:00|COMPLETED||500",
        "   ",
        "2|2024-03-01T10:30:00|Unknown|Unknown|PENDING|gres/gpu=2|",
    ]
    p = tmp_path / "crlf.psv"
    p.write_bytes("\r\n".join(rows).encode())
    monkeypatch.setattr(sacct_module, "BLOCK_BYTES", 64)  # blocks shorter than a line
    h = read_sacct(p)
    assert h.recorded["job_id"].tolist() == ["1", "2"]
    assert _row(h, "1").energy_j == 500 and _row(h, "2").num_gpu == 2
    p.write_bytes("\r\n".join([*rows, "3|xyz|||COMPLETED||"]).encode())
    with pytest.raises(InputError, match=r"crlf.psv:7: field 'Submit': 'xyz' is not a timestamp"):
        read_sacct(p)


def test_json_errors_and_requeued_runs(tmp_path):
    def job(state, submit, limit=60):
        return (
            '{"job_id": 5, "state": {"current": ' + state + '}, "time": {"submission": ' + str(submit) + ", "
            '"start": '
            + str(submit + 10)
            + ', "end": '
            + str(submit + 70)
            + ', "elapsed": 60, "limit": '
            + json_value(limit)
            + '}, "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 2}]}}'
        )

    def json_value(v):
        return f'"{v}"' if isinstance(v, str) else str(v)

    p = tmp_path / "j.json"
    p.write_text(
        '{"jobs": [' + job('["REQUEUED"]', 1709287200) + ", " + job('["COMPLETED"]', 1709287300) + "]}"
    )
    h = read_sacct(p)
    assert h.recorded["job_id"].tolist() == ["5"] and h.recorded["requeues"].tolist() == [1]
    assert h.time_origin_utc == "2024-03-01T10:01:40+00:00"
    p.write_text('{"jobs": [' + job('"COMPLETED"', 1709287200, limit="abc") + "]}")
    with pytest.raises(
        InputError, match=r"j.json: field 'jobs\[0\].time.limit': 'abc' is not a number \(job 5\)"
    ):
        read_sacct(p)
    p.write_text('{"jobs": [\n{"job_id": 1,}\n]}')
    with pytest.raises(InputError, match=r"j.json:2: not valid JSON"):
        read_sacct(p)
    p.write_text('{"nodes": []}')
    with pytest.raises(InputError, match=r"expected sacct --json output"):
        read_sacct(p)
