"""Pollux workloads (workloads/pollux.py, catalog names ``pollux/workload-N``) and ElasticFlow ``nXgY`` clusters
with ``--gpu-type``.

``tests/fixtures/perfdata`` is a data directory in the registry layout: a hand-written
``philly-pollux/workloads/workload-1.csv`` in the Pollux columns, hand-written T4 tables (values in
tests/unit/test_perf_model.py) and ``elasticflow-throughputs/cluster_specs/n16g4.csv`` (1 switch x 16 nodes,
4 GPUs, 64 cores, 256 GB per node, the layout the name says).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.conftest import require_real_file
from wattsched.cli.main import app
from wattsched.core.errors import InputError
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import load_inputs
from wattsched.workloads.catalog import load_workload, workload_names
from wattsched.workloads.pollux import POLLUX_APPLICATIONS, read_pollux_workload

PERFDATA = Path(__file__).resolve().parent.parent / "fixtures" / "perfdata"
WORKLOAD = PERFDATA / "philly-pollux" / "workloads" / "workload-1.csv"

# name -> (iterations = epochs x training samples / global batch, it/s at its GPU count and batch on the T4 table)
EXPECTED = {
    "cifar10-0": (100 * 50_000 / 128, 18.0),  # 2 GPUs, batch 128: a measured cell
    "ncf-1": (10 * 4_970_845 / 1024, 50.0),  # 1 GPU
    "bert-2": (2 * 87_599 / 12, 6.0),  # 4 GPUs
    "imagenet-3": (90 * 1_281_167 / 256, 7 + (3 - 2) / (4 - 2) * (12 - 7)),  # 3 GPUs: interpolated, 9.5
    "yolov3-4": (50 * 16_551 / 64, 3.0 * 32 / 64),  # batch 64 above the table's only row (32): samples/s held
    "deepspeech2-5": (80 * 20_376 / 64, 9.0),  # 2 GPUs
}


def test_pollux_fixture_iterations_and_durations_by_hand():
    loaded = read_pollux_workload(WORKLOAD, data_dir=PERFDATA)
    jobs = loaded.jobs
    assert jobs.job_id.tolist() == list(EXPECTED)
    assert jobs.submit_s.tolist() == [0.0, 60.0, 125.0, 300.0, 420.0, 500.0]
    assert jobs.num_gpu.tolist() == [2, 1, 4, 3, 1, 2] and jobs.gpu_milli.tolist() == [1000] * 6
    assert jobs.batch_size.tolist() == [128, 1024, 12, 256, 64, 64]
    assert jobs.model_name.tolist() == ["cifar10", "ncf", "bert", "imagenet", "yolov3", "deepspeech2"]
    for j, (iterations, rate) in enumerate(EXPECTED.values()):
        assert jobs.iterations[j] == pytest.approx(iterations, rel=1e-12)
        assert jobs.duration_s[j] == pytest.approx(iterations / rate, rel=1e-12)
    assert jobs.iterations[0] == 39_062.5 and jobs.iterations[5] == 25_470.0
    assert loaded.has_times and loaded.invalid_skipped == 0
    assert any("epochs x training samples / global batch" in n for n in jobs.notes)
    assert POLLUX_APPLICATIONS["imagenet"].samples == 1_281_167


def test_pollux_catalog_names_and_lookup():
    names = workload_names()
    for k in range(1, 9):
        assert f"pollux/workload-{k}" in names and f"pollux-2.0/workload-{k}" in names
    loaded = load_workload("pollux/workload-1", data_dir=PERFDATA)
    assert loaded.jobs.source == "pollux/workload-1" and len(loaded.jobs) == 6
    np.testing.assert_allclose(loaded.jobs.iterations, [it for it, _ in EXPECTED.values()])


def test_pollux_unknown_application_names_the_line(tmp_path):
    text = WORKLOAD.read_text().splitlines()
    text[3] = text[3].replace(",bert,", ",gpt3,")  # line 4
    path = tmp_path / "workload.csv"
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(InputError, match=r"workload\.csv:4: field 'application'.*unknown application 'gpt3'"):
        read_pollux_workload(path, data_dir=PERFDATA)
    loaded = read_pollux_workload(path, skip_invalid=True, data_dir=PERFDATA)
    assert loaded.invalid_skipped == 1 and "bert-2" not in loaded.jobs.job_id.tolist()


def test_real_pollux_workload_6():
    require_real_file("philly-pollux", "workloads/workload-6.csv")
    require_real_file("elasticflow-throughputs", "throughputs_T4/cifar10.csv")
    loaded = load_workload("pollux/workload-6")
    jobs = loaded.jobs
    assert len(jobs) == 160 and loaded.invalid_skipped == 0
    assert set(jobs.model_name.tolist()) <= set(POLLUX_APPLICATIONS)
    # first row: cifar10-0, t = 53 s (re-based to 0), 6 replicas, batch 2048. T4 cifar10 at batch 2048 measures
    # 2.53513302294422 it/s on 4 GPUs and 3.847153187748904 on 8: 6 GPUs interpolate to their mean.
    assert (jobs.job_id[0], jobs.num_gpu[0], jobs.batch_size[0], jobs.submit_s[0]) == (
        "cifar10-0",
        6,
        2048,
        0.0,
    )
    assert jobs.iterations[0] == pytest.approx(100 * 50_000 / 2048)  # 2441.40625
    rate = (2.53513302294422 + 3.847153187748904) / 2
    assert jobs.duration_s[0] == pytest.approx(2441.40625 / rate)  # 765.06 s
    assert jobs.submit_s[1] == 101.0  # 154 - 53
    assert np.all(np.isfinite(jobs.duration_s)) and np.all(jobs.duration_s > 0)


# -- nXgY clusters with a GPU type ---------------------------------------------------------------------------


def test_spec_cluster_with_gpu_type_resolves_to_16_nodes_of_4_t4():
    cfg = SimulationConfig(
        workload="pollux/workload-1", cluster="n16g4", gpu_type="T4", data_dir=str(PERFDATA), max_jobs=2
    )
    inputs = load_inputs(cfg)
    spec = inputs.cluster
    assert spec.name == "n16g4@T4" and spec.gpu_models == ("T4",)
    assert spec.num_nodes == 16 and spec.gpu_count.tolist() == [4] * 16
    assert spec.cpu_milli.tolist() == [64_000] * 16 and set(spec.switch_id.tolist()) == {0}
    assert len(inputs.jobs) == 2


def test_simulate_pollux_on_n16g4_t4(tmp_path):
    out = tmp_path / "run"
    args = ["simulate", "--workload", "pollux/workload-1", "--cluster", "n16g4", "--gpu-type", "T4"]
    args += ["--data-dir", str(PERFDATA), "--allocation", "optimus-greedy", "--out", str(out), "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cluster"]["name"] == "n16g4@T4"
    assert summary["jobs_completed"] == 6
    assert summary["performance_model"]["tables"] == {"T4": "elasticflow/T4"}
    assert summary["performance_model"]["jobs_with_table"] == 6
    jobs = pd.read_csv(out / "jobs.csv")
    assert jobs["work"].tolist() == pytest.approx([it for it, _ in EXPECTED.values()])
    assert not jobs["model_assigned"].any()
    assert 0 < summary["gpu_allocation_mean"] <= 1
