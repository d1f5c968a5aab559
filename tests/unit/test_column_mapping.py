"""A generic job CSV with other column names loads as it is through a column mapping (`--columns FIELD=COLUMN`):
the same job table as the file with wattsched's names, clear errors naming the file and the field, and the
mapping reaches every command that reads a workload CSV (simulate and the experiments that take a workload)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from wattsched.cli.main import app
from wattsched.core.errors import InputError, WattschedError
from wattsched.core.jobs import JobTable
from wattsched.experiments import cedla, eaco, hkbu_dvfs, powerflow
from wattsched.workloads.catalog import load_workload
from wattsched.workloads.generic_csv import read_generic_csv

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
STANDARD = FIXTURES / "jobs_seconds.csv"
# The same jobs as STANDARD, with the arrival named as in Microsoft's ITP traces, `num_gpus`, other column order
# and two columns wattsched has no field for (vc, status).
OTHER = FIXTURES / "jobs_other_names.csv"
MAPPING = {"submit_time": "submission_time", "num_gpu": "num_gpus"}
MAPPING_FLAG = "submit_time=submission_time,num_gpu=num_gpus"


def assert_same_jobs(a: JobTable, b: JobTable) -> None:
    for f in dataclasses.fields(JobTable):
        if f.name not in ("source", "notes"):
            np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)


def test_mapped_columns_give_the_same_job_table():
    standard = read_generic_csv(STANDARD).jobs
    mapped = read_generic_csv(OTHER, columns=MAPPING).jobs
    assert_same_jobs(mapped, standard)
    assert "columns mapped: submission_time -> submit_time, num_gpus -> num_gpu" in mapped.notes
    assert "columns not used: vc, status" in mapped.notes  # a foreign trace's own columns are dropped, noted
    assert_same_jobs(load_workload(str(OTHER), columns=MAPPING).jobs, standard)


def test_a_mapped_field_wins_over_the_column_of_its_name(tmp_path):
    path = tmp_path / "both.csv"
    path.write_text("job_id,submit_time,start_time,duration,num_gpu\na,5,100,10,1\nb,9,130,10,1\n")
    jobs = read_generic_csv(path, columns={"submit_time": "start_time"}).jobs
    np.testing.assert_array_equal(jobs.submit_s, [0, 30])
    assert "columns not used: submit_time" in jobs.notes


def test_without_a_mapping_other_names_are_an_error_that_says_how_to_map():
    with pytest.raises(
        InputError, match=r"field 'submit_time': missing required column .*--columns FIELD=COLUMN"
    ):
        read_generic_csv(OTHER)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (
            {"submit": "submission_time"},
            r"jobs_other_names.csv: column mapping submit=submission_time: 'submit' is not a field of the generic "
            r"job CSV \(fields: job_id, submit_time, duration, num_gpu, ",
        ),
        (
            {**MAPPING, "duration": "runtime"},
            r"jobs_other_names.csv:1: column mapping duration=runtime: the file has no column 'runtime' "
            r"\(its columns: vc, job_id, submission_time, num_gpus, duration, status, ",
        ),
        (
            {**MAPPING, "deadline": "submission_time"},
            r"'submit_time' and 'deadline' are both mapped to column 'submission_time'; a column feeds one field",
        ),
        (
            {**MAPPING, "user": "job_id"},
            r"column 'job_id' would feed both 'job_id' \(by its name\) and 'user'",
        ),
    ],
)
def test_bad_mappings_name_the_file_and_the_problem(columns, message):
    with pytest.raises(InputError, match=message):
        read_generic_csv(OTHER, columns=columns)


def test_row_errors_name_the_files_column(tmp_path):
    path = tmp_path / "bad.csv"
    shutil.copy(OTHER, path)
    path.write_text(path.read_text().replace("vc1,j4,190,0,", "vc1,j4,190,-2,"))
    with pytest.raises(InputError, match=r"bad.csv:5: field 'num_gpus': "):
        read_generic_csv(path, columns=MAPPING)


def test_a_named_trace_refuses_a_mapping():
    with pytest.raises(
        WattschedError, match="--columns maps the columns of a generic job CSV; workload 'philly'"
    ):
        load_workload("philly", columns=MAPPING)


# -- through the CLI ------------------------------------------------------------------------------------------


def simulate(*args):
    return runner.invoke(app, ["simulate", "--quiet", *map(str, args)])


def test_simulate_with_columns_writes_the_same_jobs_as_the_standard_names(tmp_path):
    a, b = tmp_path / "standard", tmp_path / "mapped"
    assert simulate("--workload", STANDARD, "--out", a).exit_code == 0
    result = simulate("--workload", OTHER, "--columns", "submit_time=submission_time", "--columns",
                      "num_gpu=num_gpus", "--out", b)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (a / "jobs.csv").read_bytes() == (b / "jobs.csv").read_bytes()
    assert (
        "  columns:\n    submit_time: submission_time\n    num_gpu: num_gpus\n"
        in (b / "config.resolved.yaml").read_text()
    )


def test_flags_are_merged_over_the_config_files_mapping(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"workload: {OTHER}\ncolumns:\n  submit_time: submission_time\n  num_gpu: wrong\n")
    out = tmp_path / "run"
    result = simulate("--config", cfg, "--columns", "num_gpu=num_gpus", "--out", out)
    assert result.exit_code == 0, result.output
    assert "num_gpu: num_gpus" in (out / "config.resolved.yaml").read_text()


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["submit_time"], "expected FIELD=COLUMN, got 'submit_time'"),
        (["submit_time=, num_gpu=num_gpus"], "expected FIELD=COLUMN, got 'submit_time='"),
        (["submit_time=a", "submit_time=b"], "submit_time is given twice"),
    ],
)
def test_malformed_items_are_usage_errors(items, message):
    args = [a for item in items for a in ("--columns", item)]
    result = simulate("--workload", OTHER, *args)
    assert result.exit_code == 2
    assert "Invalid value for '--columns'" in result.output and message in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("workload", "columns", "message"),
    [
        (OTHER, "submit=submission_time", "'submit' is not a field of the generic job CSV"),
        (OTHER, "submit_time=arrival", "the file has no column 'arrival' (its columns: vc, job_id, "),
        (OTHER, "submit_time=submission_time,deadline=submission_time", "are both mapped to column"),
        ("synthetic", MAPPING_FLAG, "workload 'synthetic' is not one"),
    ],
)
def test_mapping_errors_are_one_line(tmp_path, workload, columns, message):
    result = simulate("--workload", workload, "--columns", columns, "--out", tmp_path / "r")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert not (tmp_path / "r").exists()


# -- experiments that take a workload -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        lambda: powerflow.Setup("w.csv", "n16g4", columns=MAPPING).config("fifo", 42),
        lambda: eaco.Setup("w.csv", columns=MAPPING).config("eaco", 28, 42),
        lambda: cedla.Setup("w.csv", "philly", 2023, 3.0, "default", None, None, columns=MAPPING).config(
            "cedla", "US-CAL-CISO"
        ),
        lambda: hkbu_dvfs.TraceSetup("w.csv", columns=MAPPING).config("V100", "dvfs", "always-on"),
    ],
    ids=["powerflow", "eaco", "cedla", "hkbu-dvfs"],
)
def test_every_experiment_run_config_carries_the_mapping(config):
    assert config().workload.columns == MAPPING


@pytest.mark.parametrize(
    "args",
    [
        ["eaco", "--workload", OTHER],
        ["powerflow", "--workload", OTHER, "--cluster", "n16g4", "--data-dir", FIXTURES / "perfdata"],
    ],
    ids=["eaco", "powerflow"],
)
def test_experiment_columns_reach_the_reader(tmp_path, args):
    result = runner.invoke(
        app,
        [
            "experiment",
            *map(str, args),
            "--columns",
            "submit_time=arrival",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 2
    assert "column mapping submit_time=arrival: the file has no column 'arrival'" in result.stderr
