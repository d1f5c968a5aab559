"""Traces read as meant: absolute and relative deadlines (`deadline_at` / `deadline`, ElasticFlow's `ddl`), a
warning for deadlines that leave most jobs less than their duration, and a trace without jobs is an error.

Fixture: ``tests/fixtures/jobs_elasticflow.csv``, three made-up jobs in the header of ElasticFlow's traces
(pkusys/ElasticFlow ``traces_for_ElasticFlow/philly_103959.csv``), first submission at 1,000 s."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from wattsched.cli.main import app
from wattsched.core.errors import InputError
from wattsched.workloads.catalog import load_workload

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ELASTICFLOW = FIXTURES / "jobs_elasticflow.csv"
runner = CliRunner()


def _csv(tmp_path: Path, text: str, name: str = "jobs.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_elasticflow_ddl_is_an_absolute_deadline():
    jobs = load_workload(str(ELASTICFLOW)).jobs
    np.testing.assert_array_equal(jobs.submit_s, [0, 500, 1000])  # re-based: the first submission is 0
    np.testing.assert_array_equal(jobs.deadline_s, [8000, 3000, 29000])  # ddl, on the same re-based clock
    assert any(n.startswith("ElasticFlow trace layout") for n in jobs.notes)
    assert list(jobs.model_name) == ["resnet50", "bert", "vgg16"]


def test_an_explicit_mapping_says_how_to_read_the_deadline():
    jobs = load_workload(str(ELASTICFLOW), columns={"deadline": "ddl"}).jobs  # seconds after submission
    np.testing.assert_array_equal(jobs.deadline_s, [9000, 4500, 31000])
    assert not any(n.startswith("ElasticFlow trace layout") for n in jobs.notes)


def test_a_column_named_deadline_can_be_read_as_absolute(tmp_path):
    path = _csv(tmp_path, "job_id,submit_time,duration,num_gpu,deadline\na,100,60,1,400\nb,200,60,1,300\n")
    relative = load_workload(str(path)).jobs
    absolute = load_workload(str(path), columns={"deadline_at": "deadline"}).jobs
    np.testing.assert_array_equal(relative.deadline_s, [400, 400])  # re-based submit (0, 100) + seconds after
    np.testing.assert_array_equal(absolute.deadline_s, [300, 200])  # 400 and 300, re-based by 100


def test_deadline_at_follows_timestamp_submit_times(tmp_path):
    path = _csv(
        tmp_path,
        "job_id,submit_time,duration,num_gpu,deadline_at\n"
        "a,2023-05-01T00:00:00Z,600,1,2023-05-01T02:00:00Z\nb,2023-05-01T00:30:00Z,600,1,\n",
    )
    jobs = load_workload(str(path)).jobs
    assert jobs.deadline_s[0] == 7200 and np.isnan(jobs.deadline_s[1])


def test_both_deadline_columns_or_a_deadline_before_submission_are_errors(tmp_path):
    both = _csv(tmp_path, "job_id,submit_time,duration,num_gpu,deadline,deadline_at\na,0,60,1,100,100\n")
    with pytest.raises(InputError, match=r"jobs.csv:1: give deadline .* or deadline_at .*, not both"):
        load_workload(str(both))
    early = _csv(tmp_path, "job_id,submit_time,duration,num_gpu,deadline_at\na,0,60,1,100\nb,500,60,1,400\n")
    with pytest.raises(InputError, match=r"jobs.csv:3: field 'deadline_at': deadline_at 400 is not after"):
        load_workload(str(early))


def test_relative_deadlines_shorter_than_most_durations_warn(tmp_path):
    """A relative deadline that leaves most jobs less time than their duration is almost surely an absolute time
    or another unit: the run says so on stderr and in summary.json, and still runs."""
    rows = "".join(f"j{i},{i * 100},3600,1,{600 + i}\n" for i in range(5))
    path = _csv(tmp_path, "job_id,submit_time,duration,num_gpu,deadline\n" + rows)
    out = tmp_path / "run"
    res = runner.invoke(app, ["simulate", "--workload", str(path), "--quiet", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "warning: jobs.csv: 5 of 5 jobs have a deadline (deadline, column 'deadline')" in res.output
    assert "--columns deadline_at=COLUMN" in res.output
    notes = json.loads((out / "summary.json").read_text())["notes"]
    assert any(n.startswith("warning: jobs.csv") for n in notes)


def test_deadlines_that_leave_room_do_not_warn(tmp_path):
    jobs = load_workload(str(ELASTICFLOW)).jobs
    assert not any(n.startswith("warning") for n in jobs.notes)


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        ("job_id,submit_time,duration,num_gpu\n", [], "no jobs: the file has a header but no data rows"),
        (
            "job_id,submit_time,duration,num_gpu\n\n  \n",
            [],
            "no jobs: the file has a header but no data rows",
        ),
        (
            "job_id,submit_time,duration,num_gpu\na,0,x,1\n",
            ["--skip-invalid"],
            "no valid job: all 1 row(s) are invalid and were skipped",
        ),
    ],
)
def test_a_trace_without_jobs_is_an_error(tmp_path, text, flags, message):
    path = _csv(tmp_path, text, "empty.csv")
    res = runner.invoke(
        app, ["simulate", "--workload", str(path), *flags, "--quiet", "--out", str(tmp_path / "r")]
    )
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [f"error: {path}: {message}"]
    assert not (tmp_path / "r" / "summary.json").exists()
