"""Scaling tables (wattsched.perf.tables): every throughput rule against hand-computed values on tiny fixture
tables, the loaders' error handling, and the real ElasticFlow / Gavel files when WATTSCHED_DATA has them."""

from __future__ import annotations

import ast
import json
import math
import os
import statistics
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require_real_file
from wattsched.core.errors import DataNotFoundError, InputError, UnknownNameError
from wattsched.perf.tables import (
    ELASTICFLOW_GPUS,
    GAVEL_WORKERS,
    UNCONSOLIDATED_FACTOR,
    ScalingTable,
    elasticflow_tables,
    gavel_pairs,
    gavel_tables,
    parse_gavel_type,
)

DATA = Path(__file__).resolve().parent.parent / "fixtures" / "data"
ELASTICFLOW = DATA / "elasticflow-throughputs"
GAVEL_JSON = DATA / "gavel-traces" / "simulation_throughputs.json"
SQRT2 = math.sqrt(2.0)
ALPHA = "Alpha (batch size 8)"
BETA = "Beta (batch size 4)"


@pytest.fixture
def t4() -> ScalingTable:
    """toy.csv: batch 64 -> 10, 16, nan, 40 it/s on 1, 2, 4, 8 GPUs; batch 128 -> 6, 10, 18, 30."""
    return elasticflow_tables("T4", path=ELASTICFLOW / "throughputs_T4" / "toy.csv")["toy"]


@pytest.fixture
def a100() -> ScalingTable:
    """toy.csv: batch 256 -> only 2 GPUs measured (5 it/s; empty, nan and 0 cells elsewhere);
    batch 512 -> 3, 5, 8, 12, 16, 18, nan on 1..64 GPUs."""
    return elasticflow_tables("A100", path=ELASTICFLOW / "throughputs_A100" / "toy.csv")["toy"]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- ElasticFlow fixture tables ------------------------------------------------------------------------------


def test_elasticflow_toy_parsed(t4, a100):
    assert (t4.source, t4.gpu, t4.model) == ("elasticflow/T4", "T4", "toy")
    np.testing.assert_array_equal(t4.batch_sizes, [64.0, 128.0])
    np.testing.assert_array_equal(t4.counts, [1, 2, 4, 8])
    assert t4.counts.dtype == np.int64 and t4.batch_sizes.dtype == np.float64
    np.testing.assert_array_equal(t4.its, [[10, 16, np.nan, 40], [6, 10, 18, 30]])
    assert t4.its_unconsolidated is None
    # empty, "nan" and 0 cells are all "not measured"
    np.testing.assert_array_equal(a100.its[0], [np.nan, 5.0, np.nan, np.nan, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(a100.counts, [1, 2, 4, 8, 16, 32, 64])
    assert not t4.its.flags.writeable  # cached tables are immutable


def test_exact_cells(t4):
    assert t4.throughput(1) == 10.0
    assert t4.throughput(2) == 16.0
    assert t4.throughput(8) == 40.0
    assert t4.throughput(4, batch=128) == 18.0
    assert t4.throughput(8, batch=128.0) == 30.0


def test_batch_none_is_first_row(t4):
    for n in (0.5, 1, 3, 4, 8, 16):
        assert t4.throughput(n) == t4.throughput(n, batch=64)


def test_linear_interpolation_between_measured_counts(t4):
    # batch 64: 4 GPUs is NaN, so 2 (16 it/s) and 8 (40 it/s) bracket it
    assert t4.throughput(4) == pytest.approx(16 + (4 - 2) / (8 - 2) * (40 - 16))  # 24
    assert t4.throughput(4) == pytest.approx(24.0)
    assert t4.throughput(5) == pytest.approx(28.0)
    assert t4.throughput(1.5) == pytest.approx(13.0)
    # batch 128: 4 and 8 measured
    assert t4.throughput(6, batch=128) == pytest.approx(24.0)
    assert t4.throughput(3, batch=128) == pytest.approx(14.0)


def test_geometric_continuation_above_largest_count(t4, a100):
    # batch 64: last step 2 -> 8 GPUs is x2.5 over log2(4) = 2 doublings, r = sqrt(2.5) per doubling
    assert t4.throughput(16) == pytest.approx(40 * math.sqrt(2.5))
    assert t4.throughput(32) == pytest.approx(100.0)
    assert t4.throughput(12) == pytest.approx(40 * 2.5 ** (0.5 * math.log2(1.5)))
    # batch 128: last step 4 -> 8 GPUs is 18 -> 30, r = 30/18
    assert t4.throughput(16, batch=128) == pytest.approx(50.0)
    # A100 batch 512: 64 GPUs is nan, so the last step is 16 -> 32 (16 -> 18), r = 1.125
    assert a100.throughput(64, batch=512) == pytest.approx(20.25)
    assert a100.throughput(128, batch=512) == pytest.approx(22.78125)


def test_falling_tables_are_not_clamped():
    table = ScalingTable("test", "X", "falling", np.array([32.0]), np.array([1, 2]), np.array([[10.0, 8.0]]))
    assert table.throughput(4) == pytest.approx(6.4)  # r = 0.8 per doubling
    assert table.throughput(8) == pytest.approx(5.12)


def test_below_smallest_count_scales_linearly(t4, a100):
    assert t4.throughput(0.5) == pytest.approx(5.0)
    assert t4.throughput(0.25, batch=128) == pytest.approx(1.5)
    assert a100.throughput(1, batch=256) == pytest.approx(2.5)  # smallest measured count is 2


def test_single_measured_count_is_ideal_linear(a100):
    assert a100.measured_counts(256).tolist() == [2]
    assert a100.max_measured_count() == 2
    assert a100.throughput(8) == pytest.approx(20.0)
    assert a100.throughput(64, batch=256) == pytest.approx(160.0)
    assert a100.throughput(0.5) == pytest.approx(1.25)


def test_batch_between_rows_interpolates_samples_in_log2_batch(t4, a100):
    batch = 64 * SQRT2  # log2 midpoint of 64 and 128
    # n = 4: row 64 gives 24 it/s (1536 samples/s), row 128 gives 18 it/s (2304 samples/s) -> 1920 samples/s
    assert t4.throughput(4, batch=batch) == pytest.approx(1920 / batch)
    assert t4.throughput(4, batch=batch) == pytest.approx(15 * SQRT2)
    # n = 2 at batch 96: w = log2(1.5); samples 1024 (row 64) and 1280 (row 128)
    w = math.log2(1.5)
    assert t4.throughput(2, batch=96) == pytest.approx((1024 + w * (1280 - 1024)) / 96)
    # n = 16 at batch 96: extrapolated in each row first (40*sqrt(2.5) and 50 it/s)
    s_lo, s_hi = 40 * math.sqrt(2.5) * 64, 50 * 128
    assert t4.throughput(16, batch=96) == pytest.approx((s_lo + w * (s_hi - s_lo)) / 96)
    # A100, n = 8 between 256 (ideal linear from 2 GPUs: 20 it/s) and 512 (12 it/s)
    batch = 256 * SQRT2
    assert a100.throughput(8, batch=batch) == pytest.approx((20 * 256 + 0.5 * (12 * 512 - 20 * 256)) / batch)


def test_batch_outside_range_holds_samples_per_second(t4):
    assert t4.throughput(2, batch=32) == pytest.approx(16 * 64 / 32)  # 32
    assert t4.throughput(4, batch=16) == pytest.approx(24 * 64 / 16)  # interpolated cell, then held
    assert t4.throughput(8, batch=256) == pytest.approx(30 * 128 / 256)  # 15
    assert t4.throughput(16, batch=512) == pytest.approx(50 * 128 / 512)


def test_measured_counts(t4, a100):
    assert t4.measured_counts().tolist() == [1, 2, 8]
    assert t4.measured_counts(64).tolist() == [1, 2, 8]
    assert t4.measured_counts(128).tolist() == [1, 2, 4, 8]
    assert t4.measured_counts(96).tolist() == [1, 2, 8]  # measured in both bracketing rows
    assert t4.measured_counts(1000).tolist() == [1, 2, 4, 8]  # nearest row
    assert t4.measured_counts(8).tolist() == [1, 2, 8]
    assert t4.max_measured_count() == 8
    assert a100.measured_counts(512).tolist() == [1, 2, 4, 8, 16, 32]
    assert a100.max_measured_count(512) == 32
    assert a100.measured_counts(300).tolist() == [2]
    assert a100.max_measured_count(300) == 2


def test_unconsolidated_factor_without_unconsolidated_data(t4):
    assert t4.throughput(8, consolidated=False) == pytest.approx(40 * UNCONSOLIDATED_FACTOR)
    assert t4.throughput(4, batch=128, consolidated=False) == pytest.approx(18 * 0.739)
    assert t4.throughput(16, consolidated=False) == pytest.approx(40 * math.sqrt(2.5) * 0.739)
    # one GPU (or a share of one) cannot be spread over nodes
    assert t4.throughput(1, consolidated=False) == 10.0
    assert t4.throughput(0.5, consolidated=False) == pytest.approx(5.0)


@pytest.mark.parametrize("bad", [0, -1, -0.5, math.nan, math.inf, "x"])
def test_invalid_gpu_count_or_batch(t4, bad):
    with pytest.raises(ValueError):
        t4.throughput(bad)
    with pytest.raises(ValueError):
        t4.throughput(2, batch=bad)
    with pytest.raises(ValueError):
        t4.measured_counts(bad)


def test_table_constructor_validates():
    with pytest.raises(ValueError, match="shape"):
        ScalingTable("t", "X", "m", np.array([1.0]), np.array([1, 2]), np.array([[1.0]]))
    with pytest.raises(ValueError, match="ascending"):
        ScalingTable("t", "X", "m", np.array([2.0, 1.0]), np.array([1]), np.array([[1.0], [2.0]]))
    with pytest.raises(ValueError, match="positive"):
        ScalingTable("t", "X", "m", np.array([1.0]), np.array([1]), np.array([[-1.0]]))
    with pytest.raises(ValueError, match="at least one measured"):
        ScalingTable("t", "X", "m", np.array([1.0]), np.array([1, 2]), np.array([[np.nan, np.nan]]))


# -- ElasticFlow loader ---------------------------------------------------------------------------------------


def test_elasticflow_path_directory_and_unknown_gpu():
    tables = elasticflow_tables("T4", path=ELASTICFLOW / "throughputs_T4")
    assert list(tables) == ["toy"]
    assert tables["toy"].throughput(2) == 16.0
    with pytest.raises(UnknownNameError) as info:
        elasticflow_tables("V100", path=ELASTICFLOW / "throughputs_T4")
    assert "A100, T4" in str(info.value)
    assert ELASTICFLOW_GPUS == ("A100", "T4")


def test_elasticflow_registry_lookup_reports_missing_files(tmp_path, monkeypatch):
    monkeypatch.setenv("WATTSCHED_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DataNotFoundError, match=r"elasticflow-throughputs/throughputs_T4/bert\.csv"):
        elasticflow_tables("T4", data_dir=DATA)  # the fixtures hold only toy tables


def test_elasticflow_cache_follows_mtime(tmp_path):
    path = write(tmp_path, "m.csv", "global_batch_size,1,2\n32,1.0,2.0\n")
    assert elasticflow_tables("T4", path=path)["m"].throughput(2) == 2.0
    assert elasticflow_tables("T4", path=path)["m"] is elasticflow_tables("T4", path=path)["m"]
    path.write_text("global_batch_size,1,2\n32,1.0,3.0\n")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert elasticflow_tables("T4", path=path)["m"].throughput(2) == 3.0


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ("", 1, None, "empty header"),
        ("batch,1,2\n64,1,2\n", 1, "batch", "global_batch_size"),
        ("global_batch_size\n64\n", 1, None, "missing GPU-count header columns"),
        ("global_batch_size,1,x\n64,1,2\n", 1, "x", "positive integers"),
        ("global_batch_size,1,0\n64,1,2\n", 1, "0", "positive integers"),
        ("global_batch_size,1,1\n64,1,2\n", 1, "1", "repeated GPU-count column"),
        ("global_batch_size,1,2\n64,10,abc\n", 2, "2", "not a number"),
        ("global_batch_size,1,2\n64,10,-1\n", 2, "2", "must be positive"),
        ("global_batch_size,1,2\n64,10,inf\n", 2, "2", "must be positive"),
        ("global_batch_size,1,2\n64,1,2\n128,1,2\n64,3,4\n", 4, "global_batch_size", "repeated batch size"),
        ("global_batch_size,1,2\n64,1\n", 2, None, "expected 3 cells, got 2"),
        ("global_batch_size,1,2\n64,1,2,3\n", 2, None, "expected 3 cells, got 4"),
        ("global_batch_size,1,2\n0,1,2\n", 2, "global_batch_size", "positive number"),
        ("global_batch_size,1,2\nbig,1,2\n", 2, "global_batch_size", "not a number"),
        ("global_batch_size,1,2\n\n64,1,2\n128,nan,0\n", 4, None, "no measured throughput"),
        ("global_batch_size,1,2\n", None, None, "no data rows"),
    ],
)
def test_elasticflow_malformed(tmp_path, text, line, field, message):
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(InputError) as info:
        elasticflow_tables("T4", path=path)
    err = info.value
    assert (err.line, err.field) == (line, field)
    assert message in err.message
    assert Path(err.path).name == "bad.csv"
    assert "\n" not in str(err)


def test_elasticflow_missing_file_and_empty_directory(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        elasticflow_tables("T4", path=tmp_path / "none.csv")
    with pytest.raises(InputError, match=r"no \*\.csv"):
        elasticflow_tables("T4", path=tmp_path)


# -- Gavel ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job_type", "expected"),
    [
        ("ResNet-50 (batch size 64)", ("ResNet-50", 64)),
        ("Recommendation (batch size 8192)", ("Recommendation", 8192)),
        ("LM (batch size 5)", ("LM", 5)),
        ("A3C", ("A3C", 0)),
        ("CycleGAN", ("CycleGAN", 0)),
    ],
)
def test_parse_gavel_type(job_type, expected):
    assert parse_gavel_type(job_type) == expected


def test_gavel_tables_fixture():
    tables = gavel_tables("v100", path=GAVEL_JSON)
    assert sorted(tables) == ["A3C", ALPHA, BETA]
    alpha = tables[ALPHA]
    assert (alpha.source, alpha.gpu, alpha.model) == ("gavel/v100", "v100", ALPHA)
    np.testing.assert_array_equal(alpha.batch_sizes, [8.0])
    np.testing.assert_array_equal(alpha.counts, [1, 2, 4])
    np.testing.assert_array_equal(alpha.its, [[10.0, 16.0, 25.0]])
    np.testing.assert_array_equal(alpha.its_unconsolidated, [[10.0, 12.0, np.nan]])  # 0.0 = not measured
    np.testing.assert_array_equal(tables["A3C"].batch_sizes, [0.0])
    assert GAVEL_WORKERS == ("k80", "p100", "v100")
    # located through the registry from a data directory as well
    assert gavel_tables("v100", data_dir=DATA)[ALPHA].throughput(2) == 16.0


def test_gavel_consolidated_rules():
    alpha = gavel_tables("v100", path=GAVEL_JSON)[ALPHA]
    assert alpha.throughput(4) == 25.0
    assert alpha.throughput(3) == pytest.approx(20.5)
    assert alpha.throughput(8) == pytest.approx(25 * 25 / 16)  # 39.0625
    assert alpha.throughput(0.5) == pytest.approx(5.0)
    assert alpha.throughput(2, batch=8) == 16.0
    assert alpha.throughput(2, batch=16) == pytest.approx(16 * 8 / 16)  # samples/s held above the one row
    assert alpha.max_measured_count() == 4


def test_gavel_unconsolidated_matrix_with_fallback():
    tables = gavel_tables("v100", path=GAVEL_JSON)
    alpha = tables[ALPHA]
    assert alpha.throughput(2, consolidated=False) == 12.0
    assert alpha.throughput(4, consolidated=False) == 25.0  # unconsolidated 0.0 -> consolidated cell
    assert alpha.throughput(3, consolidated=False) == pytest.approx(18.5)
    assert alpha.throughput(8, consolidated=False) == pytest.approx(25 * 25 / 12)  # last step 12 -> 25
    assert alpha.measured_counts(consolidated=False).tolist() == [1, 2, 4]
    assert tables[BETA].throughput(4, consolidated=False) == pytest.approx(2.4 * 1.2)  # 2.88
    assert tables[BETA].throughput(4) == pytest.approx(4.5)


def test_gavel_without_unconsolidated_uses_factor():
    alpha = gavel_tables("k80", path=GAVEL_JSON)[ALPHA]
    assert alpha.its_unconsolidated is None
    assert alpha.throughput(4) == pytest.approx(10.0)  # one measured count: ideal linear
    assert alpha.throughput(4, consolidated=False) == pytest.approx(10.0 * UNCONSOLIDATED_FACTOR)
    assert alpha.throughput(1, consolidated=False) == 2.5


def test_gavel_type_without_batch():
    a3c = gavel_tables("v100", path=GAVEL_JSON)["A3C"]
    assert a3c.throughput(1) == 3.0
    assert a3c.throughput(2) == pytest.approx(6.0)
    with pytest.raises(ValueError, match="batch=None"):
        a3c.throughput(1, batch=32)


def test_gavel_pairs_fixture():
    assert gavel_pairs("v100", path=GAVEL_JSON) == {
        (ALPHA, BETA): (6.0, 2.0),
        ("A3C", BETA): (2.5, 1.5),  # [0.0, 0.0] and the scale-2 partner are left out
    }
    assert gavel_pairs("k80", path=GAVEL_JSON) == {}


def test_gavel_unknown_or_absent_worker():
    with pytest.raises(UnknownNameError, match="k80, p100, v100"):
        gavel_tables("tpu", path=GAVEL_JSON)
    with pytest.raises(InputError, match="no worker type 'p100'"):
        gavel_tables("p100", path=GAVEL_JSON)
    with pytest.raises(InputError, match="no worker type 'p100'"):
        gavel_pairs("p100", path=GAVEL_JSON)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"v100": {', "invalid JSON"),
        ("[1, 2]", "top level"),
        ('{"v100": [1]}', "object of job entries"),
        ('{"v100": {"A": {"null": 1.0}}}', "is not"),
        ('{"v100": {"(\'A\', 0)": {"null": 1.0}}}', "is not"),
        ('{"v100": {"(\'A\', 1)": {"x": 1.0}}}', "'null' key"),
        ('{"v100": {"(\'A\', 1)": {"null": -1.0}}}', "must be positive"),
        ('{"v100": {"(\'A\', 1)": {"null": "fast"}}}', "expected a number"),
        ('{"v100": {"(\'A\', 1)": {"null": 1.0, "(\'B\', 1)": [1.0]}}}', "expected [steps/s"),
        ('{"v100": {"(\'A\', 1)": {"null": 1.0, "(\'B\', 1)": [1.0, -2.0]}}}', "must be positive"),
        ('{"v100": {"(\'A\', 1)": {"null": 0.0}}}', "no measured throughput"),
    ],
)
def test_gavel_malformed(tmp_path, raw, message):
    path = write(tmp_path, "thr.json", raw)
    with pytest.raises(InputError) as info:
        gavel_tables("v100", path=path)
    assert message in info.value.message
    assert Path(info.value.path).name == "thr.json"
    assert "\n" not in str(info.value)


def test_gavel_invalid_json_has_line(tmp_path):
    path = write(tmp_path, "thr.json", '{\n  "v100": {\n    "x": \n}\n')
    with pytest.raises(InputError) as info:
        gavel_pairs("v100", path=path)
    assert info.value.line == 4


# -- real data (skipped without WATTSCHED_DATA) ----------------------------------------------------------------


@pytest.mark.realdata
def test_real_elasticflow_cells_and_interpolation():
    require_real_file("elasticflow-throughputs", "throughputs_A100/resnet50.csv")
    require_real_file("elasticflow-throughputs", "throughputs_T4/cifar10.csv")
    a100 = elasticflow_tables("A100")
    t4 = elasticflow_tables("T4")
    assert sorted(a100) == [
        "bert",
        "deepspeech2",
        "gpt2",
        "inception3",
        "resnet50",
        "resnet50_cifar10",
        "vgg16",
    ]
    assert sorted(t4) == ["bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"]
    assert a100["resnet50"].throughput(8, batch=256) == 10.378702644353233
    cifar = t4["cifar10"]
    four, eight = 2.53513302294422, 3.847153187748904  # batch 2048 row, 4 and 8 GPUs
    assert cifar.throughput(6) == pytest.approx(four + (6 - 4) / (8 - 4) * (eight - four), rel=1e-15)
    # upstream 0 cells (A100 resnet50_cifar10 on 16-64 GPUs) and the empty cell are "not measured"
    assert a100["resnet50_cifar10"].max_measured_count() == 8
    assert a100["deepspeech2"].measured_counts(32).tolist() == [1, 2, 4, 8, 16, 32]
    for table in [*a100.values(), *t4.values()]:
        for n in (0.5, 1, 3, 8, 48, 128):
            assert math.isfinite(table.throughput(n)) and table.throughput(n) > 0


@pytest.mark.realdata
def test_real_gavel_tables_and_pairs():
    require_real_file("gavel-traces", "simulation_throughputs.json")
    v100 = gavel_tables("v100")
    assert len(v100) == 26
    resnet = v100["ResNet-50 (batch size 64)"]
    assert resnet.throughput(4) == 9.451949566394442
    assert resnet.throughput(4, consolidated=False) == 11.136430014818272
    assert parse_gavel_type(resnet.model) == ("ResNet-50", 64)
    np.testing.assert_array_equal(resnet.batch_sizes, [64.0])
    pairs = gavel_pairs("v100")
    assert len(pairs) == 636 and all(a > 0 and b > 0 for a, b in pairs.values())
    k80 = gavel_tables("k80")
    assert k80["ResNet-50 (batch size 128)"].measured_counts().tolist() == [1]  # upstream 0.0 at scale > 1
    for worker in GAVEL_WORKERS:
        assert len(gavel_tables(worker)) == 26


@pytest.mark.realdata
def test_real_unconsolidated_factor_recomputed():
    path = require_real_file("gavel-traces", "simulation_throughputs.json")
    raw = json.loads(path.read_text())
    ratios = []
    for worker in GAVEL_WORKERS:
        consolidated, spread = raw[worker], raw[f"{worker}_unconsolidated"]
        for key, entry in consolidated.items():
            _, scale = ast.literal_eval(key)
            alone, alone_spread = entry.get("null"), spread.get(key, {}).get("null")
            if scale > 1 and alone and alone_spread and alone > 0 and alone_spread > 0:
                ratios.append(alone_spread / alone)
    assert len(ratios) == 165
    assert round(statistics.median(ratios), 3) == UNCONSOLIDATED_FACTOR
    assert (round(min(ratios), 3), round(max(ratios), 3)) == (0.105, 1.355)
