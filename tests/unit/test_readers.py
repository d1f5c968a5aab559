"""Trace readers, row validation and the workload catalog.

Unit tests use the hand-written files in ``tests/fixtures``; ``realdata`` tests read the real datasets from
``WATTSCHED_DATA`` and skip when it is unset or lacks the file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require_real_file
from wattsched.core.errors import DataNotFoundError, InputError, UnknownNameError
from wattsched.core.jobs import INFERENCE, TRAINING, JobTable
from wattsched.core.settings import DEFAULT_SETTING
from wattsched.workloads.catalog import ALIBABA_LISTS, GAVEL_MSR_VCS, load_workload, workload_names
from wattsched.workloads.clusters import philly_cluster
from wattsched.workloads.generic_csv import read_generic_csv
from wattsched.workloads.traces import (
    read_alibaba_pods,
    read_gavel,
    read_hyperdrive,
    read_philly,
    read_tiresias,
)
from wattsched.workloads.validate import MAX_EXAMPLES, LoadedWorkload, check_against_cluster

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FAKE_DATA = FIXTURES / "data"
ALIBABA = FAKE_DATA / "alibaba-gpu-v2023" / "csv"
GAVEL = FAKE_DATA / "gavel-traces"

GENERIC_HEADER = "job_id,submit_time,duration,num_gpu,gpu_milli,cpu_milli,memory_mib,gpu_model,job_class"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def generic(tmp_path: Path, *rows: str, header: str = GENERIC_HEADER) -> Path:
    return write(tmp_path, "jobs.csv", "\n".join([header, *rows]) + "\n")


GOOD = "ok,0,10,1,1000,100,100,,training"


# -- readers on fixtures -------------------------------------------------------------------------------------


def test_philly_fixture():
    w = read_philly(FAKE_DATA / "philly-pollux" / "philly.csv")
    jobs = w.jobs
    assert isinstance(w, LoadedWorkload) and w.has_times and w.invalid_skipped == 0
    assert len(jobs) == 4  # the trailing blank line is not a job
    np.testing.assert_array_equal(
        jobs.submit_s, [30, 0, 5400, 300]
    )  # unsorted rows, re-based on the earliest
    np.testing.assert_array_equal(jobs.duration_s, [120, 60, 3600, 5.5])
    np.testing.assert_array_equal(jobs.num_gpu, [2, 1, 8, 4])
    np.testing.assert_array_equal(jobs.gpu_milli, [1000] * 4)
    np.testing.assert_array_equal(jobs.cpu_milli, jobs.num_gpu * 8000)
    np.testing.assert_array_equal(jobs.memory_mib, jobs.num_gpu * 65536)
    assert list(jobs.user) == ["vcA", "vcB", "vcA", "vcC"]
    np.testing.assert_array_equal(jobs.source_line, [2, 3, 4, 5])
    assert w.time_origin_utc == "2020-03-02T10:00:00+00:00"
    assert jobs.source == "philly"
    assert any("UTC" in n for n in jobs.notes)
    assert any("8000 milli-CPU" in n and "65536 MiB" in n for n in jobs.notes)


def test_alibaba_pods_fixture():
    w = read_alibaba_pods(ALIBABA / "openb_pod_list_default.csv", source="alibaba-v2023/default")
    jobs = w.jobs
    assert w.has_times and jobs.source == "alibaba-v2023/default"
    assert list(jobs.job_id) == ["pod-a", "pod-b", "pod-c", "pod-d", "pod-e"]
    np.testing.assert_array_equal(jobs.submit_s, [0, 100, 200, 300, 400])
    # deletion - scheduled; pod-e has no scheduled_time, so deletion - creation
    np.testing.assert_array_equal(jobs.duration_s, [750, 290, 1000, 50, 200])
    np.testing.assert_array_equal(jobs.num_gpu, [1, 1, 4, 0, 1])
    np.testing.assert_array_equal(jobs.gpu_milli, [1000, 250, 1000, 0, 500])
    np.testing.assert_array_equal(jobs.cpu_milli, [4000, 2000, 16000, 1000, 3000])
    assert list(jobs.gpu_spec) == ["", "T4", "V100M16|V100M32", "", ""]
    assert any("qos" in n and "pod_phase" in n for n in jobs.notes)


def test_alibaba_five_column_file_has_no_times():
    w = read_alibaba_pods(ALIBABA / "openb_pod_list_multigpu20.csv")
    assert not w.has_times
    assert np.isnan(w.jobs.submit_s).all() and np.isnan(w.jobs.duration_s).all()
    np.testing.assert_array_equal(w.jobs.num_gpu, [2, 0, 1])
    np.testing.assert_array_equal(w.jobs.gpu_milli, [1000, 0, 300])
    assert list(w.jobs.gpu_spec) == ["", "", ""]


def test_alibaba_missing_deletion_time_gives_nan_and_flag(tmp_path):
    text = (ALIBABA / "openb_pod_list_default.csv").read_text().replace(",450,400", ",,400")
    w = read_alibaba_pods(write(tmp_path, "pods.csv", text))
    assert not w.has_times
    assert np.isnan(w.jobs.duration_s[3]) and np.isfinite(w.jobs.submit_s[3])


def test_tiresias_fixture_with_crlf():
    w = read_tiresias(FAKE_DATA / "tiresias-traces" / "60_job.csv")
    jobs = w.jobs
    assert list(jobs.job_id) == ["0", "1", "2"]
    np.testing.assert_array_equal(jobs.submit_s, [0, 10, 25])
    np.testing.assert_array_equal(jobs.duration_s, [300, 1200, 90])
    np.testing.assert_array_equal(jobs.num_gpu, [1, 4, 2])
    assert list(jobs.model_name) == ["resnet50", "vgg16", "alexnet"]


def test_hyperdrive_fixture_with_leading_spaces():
    w = read_hyperdrive(FAKE_DATA / "tiresias-traces" / "philly_hyperdrive_workload.csv")
    jobs = w.jobs
    assert list(jobs.job_id) == ["job_7_b", "job_7_a", "job_9_a"]
    np.testing.assert_array_equal(jobs.submit_s, [10, 0, 3600])
    np.testing.assert_array_equal(jobs.duration_s, [500, 450, 1000])
    np.testing.assert_array_equal(jobs.num_gpu, [1, 1, 2])
    assert list(jobs.user) == ["7", "7", "9"]
    assert w.time_origin_utc == "2019-05-01T08:00:00+00:00"


def test_gavel_msr_fixture():
    w = read_gavel(GAVEL / "msr" / "seed=0" / "0e4a51.trace", GAVEL / "simulation_throughputs.json")
    jobs = w.jobs
    np.testing.assert_array_equal(jobs.submit_s, [0, 30, 45])
    np.testing.assert_array_equal(jobs.num_gpu, [1, 2, 8])
    # 1000 / 10; 600 / 3; scale 8 unmeasured: the perf tables' power law past the last measured step,
    # 16 -> 25 steps/s from 2 to 4 GPUs, so 25 x 25/16 = 39.0625 steps/s at 8 -> 4000 / 39.0625
    np.testing.assert_allclose(jobs.duration_s, [100, 200, 102.4])
    assert list(jobs.model_name) == ["alpha", "beta", "alpha"]  # the job type's family, normalised
    np.testing.assert_array_equal(jobs.source_line, [1, 2, 3])  # no header
    assert any("not raw Philly" in n for n in jobs.notes)
    assert any("1 job(s)" in n and "extrapolated" in n for n in jobs.notes)


def test_gavel_physical_fixture_and_worker_type():
    trace = GAVEL / "physical_cluster" / "small_test.trace"
    w = read_gavel(trace, GAVEL / "simulation_throughputs.json")
    np.testing.assert_array_equal(w.jobs.submit_s, [5, 0])
    np.testing.assert_allclose(w.jobs.duration_s, [300 / 2.0, 2000 / 16.0])
    np.testing.assert_array_equal(w.jobs.num_gpu, [1, 2])
    k80 = read_gavel(trace, GAVEL / "simulation_throughputs.json", worker_type="k80")
    np.testing.assert_allclose(k80.jobs.duration_s, [300 / 0.5, 2000 / (2.5 * 2)])  # k80 has scale 1 only


def test_gavel_iterations_batch_size_and_model_family(tmp_path):
    throughputs = GAVEL / "simulation_throughputs.json"
    # msr rows: Alpha (batch size 8) 1000 steps; Beta (batch size 4) 600 steps; Alpha (batch size 8) 4000 steps
    jobs = read_gavel(GAVEL / "msr" / "seed=0" / "0e4a51.trace", throughputs).jobs
    np.testing.assert_array_equal(jobs.iterations, [1000, 600, 4000])
    np.testing.assert_array_equal(jobs.batch_size, [8, 4, 8])
    assert list(jobs.model_name) == ["alpha", "beta", "alpha"]
    # physical_cluster rows (10 fields): Beta (batch size 4) 300 steps; Alpha (batch size 8) 2000 steps
    jobs = read_gavel(GAVEL / "physical_cluster" / "small_test.trace", throughputs).jobs
    np.testing.assert_array_equal(jobs.iterations, [300, 2000])
    np.testing.assert_array_equal(jobs.batch_size, [4, 8])
    assert list(jobs.model_name) == ["beta", "alpha"]
    # a type without "(batch size N)" has batch 0; a dashed family name is normalised as the catalog keys it
    a3c = read_gavel(write(tmp_path, "a3c.trace", "A3C\tcmd\t-n\t0\t90\t0\t1\n"), throughputs).jobs
    assert (list(a3c.model_name), a3c.batch_size.tolist(), a3c.iterations.tolist()) == (["a3c"], [0], [90.0])
    np.testing.assert_allclose(a3c.duration_s, [90 / 3.0])
    rates = write(tmp_path, "rates.json", '{"v100": {"(\'ResNet-50 (batch size 64)\', 1)": {"null": 4.0}}}')
    r50 = read_gavel(write(tmp_path, "r50.trace", "ResNet-50 (batch size 64)\tcmd\t-n\t0\t80\t0\t1\n"), rates)
    assert (list(r50.jobs.model_name), r50.jobs.batch_size.tolist()) == (["resnet50"], [64])


def test_gavel_jobs_use_the_measured_table_for_their_batch_size():
    from wattsched.core.cluster import ClusterSpec
    from wattsched.perf.model import PerformanceModel

    jobs = read_gavel(GAVEL / "msr" / "seed=0" / "0e4a51.trace", GAVEL / "simulation_throughputs.json").jobs
    spec = ClusterSpec.from_arrays(
        name="v", node_names=["a", "b"], cpu_milli=[64_000] * 2, memory_mib=[10**6] * 2, gpu_count=[8, 8],
        gpu_model_names=["V100", "V100"],
    )  # fmt: skip
    perf, _ = PerformanceModel.build(jobs, spec, data_dir=FAKE_DATA)
    assert perf.key[0].tolist() == ["Alpha (batch size 8)", "Beta (batch size 4)", "Alpha (batch size 8)"]
    assert perf.modelled.all()
    np.testing.assert_array_equal(perf.work, [1000, 600, 4000])  # work = the trace's steps, not re-derived
    np.testing.assert_array_equal(perf.batch, [8, 4, 8])
    # alone at the trace's scale factor, iterations / rate is the reader's duration, including the job whose
    # scale factor (8) has no measurement
    rates = [perf.solo_rate(j, 0, int(jobs.num_gpu[j]), 1, 1, DEFAULT_SETTING) for j in range(3)]
    np.testing.assert_allclose(np.array([1000, 600, 4000]) / rates, jobs.duration_s, rtol=1e-12)
    np.testing.assert_allclose(jobs.duration_s, [100, 200, 102.4])


def test_generic_csv_seconds():
    w = read_generic_csv(FIXTURES / "jobs_seconds.csv")
    jobs = w.jobs
    np.testing.assert_array_equal(jobs.submit_s, [0, 30, 60, 90])
    np.testing.assert_array_equal(jobs.gpu_milli, [1000, 500, 1000, 0])  # default 1000, 0 for CPU-only
    assert list(jobs.gpu_spec) == ["", "T4|A10", "A100", ""]
    np.testing.assert_array_equal(jobs.job_class, [TRAINING, INFERENCE, TRAINING, TRAINING])
    np.testing.assert_array_equal(jobs.deadline_s[1:3], [30 + 120, 60 + 86400])  # submit + seconds after it
    assert np.isnan(jobs.deadline_s[0])
    assert list(jobs.user) == ["alice", "bob", "alice", "carol"]
    assert w.time_origin_utc is None


def test_generic_csv_iso_timestamps():
    w = read_generic_csv(FIXTURES / "jobs_iso.csv")
    np.testing.assert_array_equal(w.jobs.submit_s, [600, 0, 3600])  # +01:00 converted to UTC
    assert w.time_origin_utc == "2024-01-01T00:00:00+00:00"
    np.testing.assert_array_equal(w.jobs.cpu_milli, [0, 0, 0])


def test_generic_csv_minimal_columns(tmp_path):
    jobs = read_generic_csv(
        generic(tmp_path, "x,5,1,2", "y,7,2,0", header="job_id,submit_time,duration,num_gpu")
    ).jobs
    np.testing.assert_array_equal(jobs.gpu_milli, [1000, 0])
    np.testing.assert_array_equal(jobs.submit_s, [0, 2])


# -- validation rules: exact file, line and field ------------------------------------------------------------


RULES = [
    # (bad row, field, message fragment)
    ("b,0,abc,1,1000,0,0,,", "duration", "cannot parse 'abc'"),
    ("b,0,-5,1,1000,0,0,,", "duration", "non-negative"),
    ("b,0,nan,1,1000,0,0,,", "duration", "nan"),
    ("b,-1,10,1,1000,0,0,,", "submit_time", ">= 0"),
    ("b,0,10,1.5,1000,0,0,,", "num_gpu", "not an integer"),
    ("b,0,10,two,1000,0,0,,", "num_gpu", "cannot parse"),
    ("b,0,10,-1,1000,0,0,,", "num_gpu", "non-negative"),
    ("b,0,10,1,0,0,0,,", "gpu_milli", "1..1000"),
    ("b,0,10,1,1001,0,0,,", "gpu_milli", "1..1000"),
    ("b,0,10,0,500,0,0,,", "gpu_milli", "must be 0"),
    ("b,0,10,2,500,0,0,,", "gpu_milli", "exactly one GPU"),
    ("b,0,10,1,1000,-1,0,,", "cpu_milli", "non-negative"),
    ("b,0,10,1,1000,0,-2,,", "memory_mib", "non-negative"),
    ("b,0,10,1,1000,0,0,V100M16|H900,", "gpu_model", "unknown GPU model 'H900'"),
    ("b,0,10,1,1000,0,0,,serving", "job_class", "unknown job_class 'serving'"),
    ("b,0,,1,1000,0,0,,", "duration", "missing value"),
    ("ok,0,10,1,1000,0,0,,", "job_id", "duplicate job_id 'ok'"),
]


@pytest.mark.parametrize(("row", "field", "fragment"), RULES)
def test_generic_rule_reports_file_line_field(tmp_path, row, field, fragment):
    path = generic(tmp_path, GOOD, GOOD.replace("ok", "ok2"), row, GOOD.replace("ok", "ok3"))
    with pytest.raises(InputError) as info:
        read_generic_csv(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 4, field)
    assert fragment in err.message
    assert str(err).startswith(f"{path}:4: field '{field}': ")


@pytest.mark.parametrize(("row", "field", "fragment"), RULES)
def test_generic_rule_skip_invalid(tmp_path, row, field, fragment):
    w = read_generic_csv(generic(tmp_path, GOOD, row, GOOD.replace("ok", "ok3")), skip_invalid=True)
    assert w.invalid_skipped == 1
    assert len(w.jobs) == 2
    assert len(w.invalid_examples) == 1
    assert w.invalid_examples[0].startswith(f"{tmp_path / 'jobs.csv'}:3: field '{field}': ")
    assert fragment in w.invalid_examples[0]
    assert any("1 invalid row(s) skipped" in n for n in w.jobs.notes)


def test_unparseable_timestamp(tmp_path):
    path = generic(
        tmp_path, "a,2024-01-01T00:00:00,1,1", "b,yesterday,1,1", header="job_id,submit_time,duration,num_gpu"
    )
    with pytest.raises(InputError) as info:
        read_generic_csv(path)
    assert (info.value.line, info.value.field) == (3, "submit_time")
    assert "ISO 8601" in info.value.message


def test_line_numbers_count_blank_lines(tmp_path):
    path = write(tmp_path, "jobs.csv", f"{GENERIC_HEADER}\n{GOOD}\n\n\nb,0,-1,1,1000,0,0,,\n")
    with pytest.raises(InputError) as info:
        read_generic_csv(path)
    assert (info.value.line, info.value.field) == (5, "duration")


def test_first_bad_row_by_line_wins(tmp_path):
    # line 3 breaks a later rule (job_class) than line 4 (duration): the earlier line is reported
    path = generic(tmp_path, GOOD, "b,0,10,1,1000,0,0,,serving", "c,0,-1,1,1000,0,0,,")
    with pytest.raises(InputError) as info:
        read_generic_csv(path)
    assert (info.value.line, info.value.field) == (3, "job_class")


def test_skip_invalid_counts_and_caps_examples(tmp_path):
    bad = [f"b{i},0,-{i + 1},1,1000,0,0,," for i in range(7)]
    path = generic(tmp_path, GOOD, *bad, GOOD.replace("ok", "ok2"))
    w = read_generic_csv(path, skip_invalid=True)
    assert w.invalid_skipped == 7
    assert len(w.invalid_examples) == MAX_EXAMPLES
    assert [e.split(":")[1] for e in w.invalid_examples] == ["3", "4", "5", "6", "7"]
    assert list(w.jobs.job_id) == ["ok", "ok2"]
    np.testing.assert_array_equal(w.jobs.source_line, [2, 10])


def test_missing_required_column(tmp_path):
    path = generic(tmp_path, "a,0,1", header="job_id,submit_time,duration")
    with pytest.raises(InputError) as info:
        read_generic_csv(path)
    assert (info.value.line, info.value.field) == (1, "num_gpu")


def test_unknown_column_is_an_error(tmp_path):
    path = generic(tmp_path, "a,0,1,1,5", header="job_id,submit_time,duration,num_gpu,gpu_mili")
    with pytest.raises(InputError) as info:
        read_generic_csv(path)
    assert (info.value.line, info.value.field) == (1, "gpu_mili")


def test_malformed_row_reports_line(tmp_path):
    path = generic(tmp_path, "a,0,1,1", "b,0,1,1,7,8", header="job_id,submit_time,duration,num_gpu")
    with pytest.raises(InputError) as info:
        read_generic_csv(path)
    assert info.value.line == 3


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_generic_csv(tmp_path / "nope.csv")
    with pytest.raises(InputError, match="empty"):
        read_generic_csv(write(tmp_path, "empty.csv", ""))


PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"
PHILLY_ROW = "2017-10-01 00:00:00,5,1,5,vc"


@pytest.mark.parametrize(
    ("rows", "line", "message"),
    [
        ([PHILLY_ROW + ",x", PHILLY_ROW], 2, "expected 5 fields, found 6"),  # first row: not an index column
        ([PHILLY_ROW, PHILLY_ROW + ",x"], 3, "expected 5 fields, found 6"),
        ([PHILLY_ROW, PHILLY_ROW + "," * 100_000], 3, "expected 5 fields, found 100005"),
        ([PHILLY_ROW, "2017-10-01 00:00:00,5,1", PHILLY_ROW], 3, "expected 5 fields, found 3"),
        ([PHILLY_ROW, "", "   ", ",,,", PHILLY_ROW], 5, "expected 5 fields, found 4"),  # ,,, is not blank
    ],
)
def test_rows_with_too_many_or_too_few_fields(tmp_path, rows, line, message):
    path = write(tmp_path, "philly.csv", "\n".join([PHILLY_HEADER, *rows]) + "\n")
    t0 = time.perf_counter()
    with pytest.raises(InputError) as info:
        read_philly(path)
    assert time.perf_counter() - t0 < 1.0
    assert (info.value.line, info.value.message) == (line, message)
    assert str(info.value) == f"{path}:{line}: {message}"


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_blank_lines_are_dropped_and_counted(tmp_path, newline):
    rows = [PHILLY_HEADER, "", PHILLY_ROW, " \t ", ",,,,", PHILLY_ROW, ""]
    path = tmp_path / "philly.csv"
    path.write_bytes(newline.join(rows).encode())
    np.testing.assert_array_equal(read_philly(path).jobs.source_line, [3, 6])


def test_quoted_fields_may_hold_separators_and_line_breaks(tmp_path):
    path = generic(
        tmp_path,
        'a,0,1,1,"resnet, ""big"""',
        'b,5,1,1,"two\nlines"',
        "c,9,1,1,plain",
        header="job_id,submit_time,duration,num_gpu,model_name",
    )
    jobs = read_generic_csv(path).jobs
    assert list(jobs.model_name) == ['resnet, "big"', "two\nlines", "plain"]
    np.testing.assert_array_equal(jobs.source_line, [2, 3, 5])  # each row's first line
    bad = generic(tmp_path, 'a,0,1,"1"', 'b,"0,1,1', "c,0,1,1", header="job_id,submit_time,duration,num_gpu")
    with pytest.raises(InputError) as info:
        read_generic_csv(bad)
    assert info.value.line == 3 and "closing '\"'" in info.value.message


def test_gavel_rows_must_match_the_layout(tmp_path):
    good = (GAVEL / "msr" / "seed=0" / "0e4a51.trace").read_text().splitlines()
    throughputs = GAVEL / "simulation_throughputs.json"
    for rows, line, message in [
        ([good[0], good[1] + "\t" * 100_000], 2, "expected 7 fields separated by '\\t', found 100007"),
        ([good[0], "Alpha (batch size 8)\tcmd", good[2]], 2, "expected 7 fields separated by '\\t', found 2"),
    ]:
        path = write(tmp_path, "vc.trace", "\n".join(rows) + "\n")
        with pytest.raises(InputError) as info:
            read_gavel(path, throughputs)
        assert (info.value.line, info.value.message) == (line, message)
    path = write(tmp_path, "vc.trace", "\n".join(["", good[0], "  ", good[1], "\t\t", good[2]]) + "\n")
    np.testing.assert_array_equal(read_gavel(path, throughputs).jobs.source_line, [2, 4, 6])


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [
        (b"", 1, "file is empty"),
        (b"\n \n\t\n", 1, "file is empty"),
        (b"\njob_id,submit_time,duration,num_gpu\na,0,1,1\n", 1, "the header line is empty"),
        (b"job_id,submit_time,duration,num_gpu\na,0,1,1\nb,\xe9,1,1\n", 3, "not UTF-8 text"),
        (b"job_id,submit_time,duration,num_gpu\na,0,1,1\nb,0\x00,1,1\n", 3, "NUL byte"),
        ("job_id,submit_time\na,0\n".encode("utf-16"), 1, "not UTF-8 text"),
        (bytes(range(256)), 3, "not UTF-8 text"),  # \n and \r come before the first bad byte
    ],
)
def test_unreadable_files_give_one_line_errors(tmp_path, content, line, fragment):
    path = tmp_path / "jobs.csv"
    path.write_bytes(content)
    with pytest.raises(InputError) as info:
        read_generic_csv(path)
    assert info.value.line == line and fragment in info.value.message
    assert "\n" not in str(info.value)


def test_directory_instead_of_a_file(tmp_path):
    for reader in (read_generic_csv, read_philly, read_alibaba_pods):
        with pytest.raises(InputError, match="is a directory, expected a CSV file"):
            reader(tmp_path)
    with pytest.raises(InputError, match="is a directory, expected a Gavel"):
        read_gavel(tmp_path, GAVEL / "simulation_throughputs.json")


def test_non_finite_and_huge_integers_are_flagged(tmp_path):
    for value, fragment in [("inf", "'inf' is not an integer"), ("1e30", "'1e30' is out of range")]:
        path = write(
            tmp_path, "philly.csv", f"{PHILLY_HEADER}\n{PHILLY_ROW}\n2017-10-01 00:00:00,5,{value},5,vc\n"
        )
        with pytest.raises(InputError) as info:
            read_philly(path)
        assert (info.value.line, info.value.field, info.value.message) == (3, "num_gpus", fragment)


def test_timestamp_outside_the_representable_range(tmp_path):
    header = "job_id,submit_time,duration,num_gpu"
    path = generic(tmp_path, "a,abc,1,1", "b,-1,1,1", header=header)  # 'abc' first: timestamps; -1: year -1
    with pytest.raises(InputError) as info:
        read_generic_csv(path)
    assert (info.value.line, info.value.field) == (2, "submit_time")
    w = read_generic_csv(path, skip_invalid=True)
    assert w.invalid_skipped == 2 and "'-1'" in w.invalid_examples[1]


def test_column_names_with_line_breaks_stay_on_one_line(tmp_path):
    path = generic(tmp_path, "a,0,1,1", header='job_id,"submit\ntime",duration,num_gpu')
    with pytest.raises(InputError) as info:
        read_generic_csv(path)
    assert str(info.value).splitlines() == [str(info.value)]


def test_alibaba_rules_use_trace_field_names(tmp_path):
    src = (ALIBABA / "openb_pod_list_default.csv").read_text().splitlines()
    cases = [
        (src[2].replace(",T4,", ",T4|X9,"), "gpu_spec"),
        (src[2].replace(",250,", ",2500,"), "gpu_milli"),
        (src[3].replace(",4,1000,", ",4,500,"), "gpu_milli"),
        (src[1].replace(",900,", ",120,"), "deletion_time"),  # deleted before it was scheduled
        (src[1].replace("4000,", "x,", 1), "cpu_milli"),
    ]
    for row, field in cases:
        assert row not in src  # the edit took effect; the bad row replaces file line 4
        lines = [*src[:3], row, *src[4:]]
        path = write(tmp_path, "pods.csv", "\n".join(lines) + "\n")
        with pytest.raises(InputError) as info:
            read_alibaba_pods(path)
        assert (info.value.line, info.value.field) == (4, field), row


def test_philly_bad_rows(tmp_path):
    header = "timestamp,duration,num_gpus,gpu_time,cluster"
    for row, field in [
        ("2017-13-01 00:00:00,5,1,5,vc", "timestamp"),
        ("2017-10-01T00:00,5,1,5,vc", "timestamp"),
        ("2017-10-01 00:00:00,-5,1,5,vc", "duration"),
        ("2017-10-01 00:00:00,5,0.5,5,vc", "num_gpus"),
    ]:
        path = write(tmp_path, "philly.csv", f"{header}\n2017-10-01 00:00:00,5,1,5,vc\n{row}\n")
        with pytest.raises(InputError) as info:
            read_philly(path)
        assert (info.value.line, info.value.field) == (3, field), row


def test_hyperdrive_bad_row(tmp_path):
    header = "experiment-id,job-id,start-time,run-time,num-gpus"
    path = write(tmp_path, "hd.csv", f"{header}\n1, a, 2019-01-01 00:00:00, 5.0, one\n")
    with pytest.raises(InputError) as info:
        read_hyperdrive(path)
    assert (info.value.line, info.value.field) == (2, "num-gpus")


def test_gavel_unknown_job_type_and_bad_layout(tmp_path):
    good = (GAVEL / "msr" / "seed=0" / "0e4a51.trace").read_text().splitlines()
    bad = good[1].replace("Beta (batch size 4)", "Gamma (batch size 1)")
    path = write(tmp_path, "vc.trace", "\n".join([good[0], bad]) + "\n")
    with pytest.raises(InputError) as info:
        read_gavel(path, GAVEL / "simulation_throughputs.json")
    assert (info.value.line, info.value.field) == (2, "job_type")
    assert "Gamma" in info.value.message
    path = write(tmp_path, "odd.trace", "a\tb\tc\n")
    with pytest.raises(InputError, match="7 \\(msr\\) or 10"):
        read_gavel(path, GAVEL / "simulation_throughputs.json")
    with pytest.raises(InputError, match="no worker type"):
        read_gavel(
            GAVEL / "msr" / "seed=0" / "0e4a51.trace",
            GAVEL / "simulation_throughputs.json",
            worker_type="tpu",
        )


# -- cluster check -------------------------------------------------------------------------------------------


def _jobs(num_gpu, lines) -> JobTable:
    n = len(num_gpu)
    return JobTable.build(job_id=[f"j{i}" for i in range(n)], submit_s=np.zeros(n), duration_s=np.ones(n),
                          num_gpu=num_gpu, source_line=lines)  # fmt: skip


def test_check_against_cluster_error_and_skip():
    spec = philly_cluster()
    jobs = _jobs([8, 256, 1280, 2000], [2, 7, 9, 12])
    with pytest.raises(InputError) as info:
        check_against_cluster(jobs, spec, skip_invalid=False, path="trace.csv")
    err = info.value
    assert (err.path, err.line, err.field) == ("trace.csv", 12, "num_gpu")
    assert err.message == "requests 2000 GPUs; cluster 'philly' has 1280"
    kept, skipped, examples = check_against_cluster(jobs, spec, skip_invalid=True, path="trace.csv")
    assert skipped == 1 and len(kept) == 3
    assert examples == ["trace.csv:12: field 'num_gpu': requests 2000 GPUs; cluster 'philly' has 1280"]
    same, none, _ = check_against_cluster(kept, spec, skip_invalid=False, path="trace.csv")
    assert none == 0 and same is kept


# -- catalog -------------------------------------------------------------------------------------------------


def test_catalog_loads_every_fixture_trace():
    for name in [
        "philly", "alibaba-v2023/default", "alibaba-v2023/multigpu20", "tiresias/60_job",
        "tiresias/hyperdrive", "gavel/msr/0e4a51", "gavel/physical/small_test",
    ]:  # fmt: skip
        w = load_workload(name, data_dir=FAKE_DATA)
        assert w.jobs.source == name and len(w.jobs) > 0
    assert load_workload("gavel/msr/0e4a51", data_dir=FAKE_DATA).jobs.user[0] == "0e4a51"


def test_catalog_generic_path():
    w = load_workload(str(FIXTURES / "jobs_seconds.csv"))
    assert len(w.jobs) == 4 and w.path.endswith("jobs_seconds.csv")


def test_catalog_names_and_unknown_name():
    names = workload_names()
    for n in ["philly", "alibaba-v2023/default", "alibaba-v2023/gpushare40", "alibaba-v2023/multigpu50",
              "tiresias/60_job", "tiresias/480_job_trace", "tiresias/hyperdrive", "gavel/msr/6214e9",
              "gavel/physical/small_test"]:  # fmt: skip
        assert n in names
    assert len([n for n in names if n.startswith("alibaba-v2023/")]) == 24
    with pytest.raises(UnknownNameError) as info:
        load_workload("alibaba-v2023/cpu999")
    assert "alibaba-v2023/cpu037" in str(info.value) and "alibaba-v2023/gpuspec33" in str(info.value)


def test_catalog_missing_data_raises_data_not_found(tmp_path, monkeypatch):
    monkeypatch.delenv("WATTSCHED_DATA", raising=False)
    monkeypatch.setenv("WATTSCHED_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DataNotFoundError, match=r"philly-pollux/philly\.csv"):
        load_workload("philly", data_dir=tmp_path)


# -- real data -----------------------------------------------------------------------------------------------


def real_file(dataset: str, relpath: str) -> str:
    """The WATTSCHED_DATA root when it holds the file; otherwise skip with the reason."""
    root = os.environ.get("WATTSCHED_DATA")
    if not root:
        pytest.skip("WATTSCHED_DATA is not set (point it at a local copy of the datasets)")
    if not (Path(root) / dataset / relpath).is_file():
        pytest.skip(f"{dataset}/{relpath} not found under WATTSCHED_DATA={root}")
    return root


@pytest.mark.realdata
def test_real_philly_counts_and_speed():
    root = real_file("philly-pollux", "philly.csv")
    load_workload("philly", data_dir=root)  # warm caches (imports, file system)
    t0 = time.perf_counter()
    w = load_workload("philly", data_dir=root)
    elapsed = time.perf_counter() - t0
    jobs = w.jobs
    assert len(jobs) == 82_247 and w.invalid_skipped == 0
    counts = dict(zip(*np.unique(jobs.num_gpu, return_counts=True), strict=True))
    assert counts == {1: 76_627, 2: 1_818, 4: 1_870, 8: 1_643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3}
    assert jobs.submit_s.min() == 0 and w.time_origin_utc == "2017-09-04T10:30:41+00:00"
    assert len(set(jobs.user)) == 15
    assert elapsed < 1.0, f"loading philly.csv took {elapsed:.2f} s"


@pytest.mark.realdata
def test_real_alibaba_default_counts():
    root = real_file("alibaba-gpu-v2023", "csv/openb_pod_list_default.csv")
    w = load_workload("alibaba-v2023/default", data_dir=root)
    jobs = w.jobs
    assert len(jobs) == 8_152 and w.has_times
    assert int((jobs.num_gpu == 0).sum()) == 1_088
    assert int((jobs.num_gpu > 1).sum()) == 75
    assert int(((jobs.num_gpu == 1) & (jobs.gpu_milli < 1000)).sum()) == 3_078
    assert round(float((jobs.num_gpu * jobs.gpu_milli).sum()) / 1000, 1) == 6086.8


@pytest.mark.realdata
@pytest.mark.parametrize("lst", ALIBABA_LISTS)
def test_real_alibaba_every_pod_list_loads(lst):
    root = real_file("alibaba-gpu-v2023", f"csv/openb_pod_list_{lst}.csv")
    w = load_workload(f"alibaba-v2023/{lst}", data_dir=root)
    assert len(w.jobs) >= 7_064 and w.invalid_skipped == 0
    assert w.has_times == (not lst.startswith("multigpu"))


@pytest.mark.realdata
def test_real_tiresias_traces():
    root = real_file("tiresias-traces", "60_job.csv")
    w = load_workload("tiresias/60_job", data_dir=root)
    assert len(w.jobs) == 60
    assert dict(zip(*np.unique(w.jobs.num_gpu, return_counts=True), strict=True)) == {
        1: 30,
        2: 10,
        4: 10,
        8: 10,
    }
    assert len(load_workload("tiresias/480_job_trace", data_dir=root).jobs) == 480
    assert len(load_workload("tiresias/hyperdrive", data_dir=root).jobs) == 4_697


@pytest.mark.realdata
def test_real_gavel_msr_total():
    root = real_file("gavel-traces", "simulation_throughputs.json")
    total = 0
    for vc in GAVEL_MSR_VCS:
        w = load_workload(f"gavel/msr/{vc}", data_dir=root)
        assert (
            w.invalid_skipped == 0 and np.isfinite(w.jobs.duration_s).all() and (w.jobs.duration_s > 0).all()
        )
        total += len(w.jobs)
    assert total == 15_264


def test_philly_virtual_cluster_workload_keeps_only_that_vcs_jobs():
    root = require_real_file("philly-pollux", "philly.csv").parent.parent
    loaded = load_workload("philly/vc-103959", data_dir=root)
    assert len(loaded.jobs) == 1934  # ElasticFlow's VC (docs/seed-systems.md §2)
    assert set(np.asarray(loaded.jobs.user, dtype=str)) == {"103959"}
    assert "virtual cluster 103959" in loaded.jobs.notes[-1]
    # GPU-only: the whole-trace CPU/memory assumption would strand GPUs on the 8-GPU specs this VC runs on
    assert (loaded.jobs.cpu_milli == 0).all() and (loaded.jobs.memory_mib == 0).all()
    assert any("GPUs only are scheduled" in n for n in loaded.jobs.notes)
    full = load_workload("philly", data_dir=root)
    assert (full.jobs.memory_mib == full.jobs.num_gpu * 65536).all()
