"""The replay's inputs from a Slurm history: which jobs, their fields, the cluster (slurm_history/inputs.py)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tests.whatif_fixtures import fifo_history, two_partition_nodes
from wattsched.core.errors import InputError
from wattsched.workloads.catalog import load_workload
from wattsched.workloads.clusters import load_cluster
from wattsched.workloads.slurm_history import SlurmNodes, write_inputs
from wattsched.workloads.slurm_history.inputs import partition_gpu_models


def test_started_jobs_are_written_with_their_recorded_run_time(tmp_path):
    history, nodes = fifo_history(30), two_partition_nodes()
    jobs_csv, cluster_yaml = write_inputs(history, nodes, tmp_path)
    rows = pd.read_csv(jobs_csv, dtype={"job_id": str})
    assert len(rows) == 30  # the PENDING job and the one cancelled before it started are left out
    assert not set(rows["job_id"]) & {"pend1", "canc1"}
    rec = history.recorded.set_index("job_id").loc[rows["job_id"]]
    assert rows["duration"].tolist() == rec["elapsed_s"].tolist()
    assert rows["num_gpu"].tolist() == rec["num_gpu"].tolist()
    expected_model = rec["partition"].map({"a100": "A100", "v100": "V100"})
    assert rows["gpu_model"].tolist() == expected_model.tolist()
    assert any("2 job(s) never started" in n and "1 PENDING" in n for n in history.notes)

    loaded = load_workload(str(jobs_csv))
    # The calendar is kept: t = 0 is the first replayed submission, on the history's own dates.
    first = rec["submit_s"].min()
    origin = pd.Timestamp(history.time_origin_utc) + pd.Timedelta(seconds=float(first))
    assert pd.Timestamp(loaded.time_origin_utc) == origin
    assert loaded.jobs.submit_s.min() == 0.0

    spec = load_cluster(str(cluster_yaml))
    assert len(spec.node_names) == 5
    assert int(spec.gpu_count.sum()) == 2 * 4 + 2 * 2
    assert any("down or drained" in n for n in history.notes)


def test_running_job_replays_its_run_time_so_far_and_one_without_elapsed_is_left_out(tmp_path):
    history = fifo_history(6)
    rec = history.recorded
    rec.loc[0, ["state", "end_s"]] = ["RUNNING", math.nan]  # elapsed_s is its run time at the export
    rec.loc[1, ["state", "end_s", "elapsed_s"]] = ["RUNNING", math.nan, math.nan]
    jobs_csv, _ = write_inputs(history, two_partition_nodes(), tmp_path)
    rows = pd.read_csv(jobs_csv, dtype={"job_id": str}).set_index("job_id")
    assert rows.loc[rec.loc[0, "job_id"], "duration"] == rec.loc[0, "elapsed_s"]
    assert rec.loc[1, "job_id"] not in rows.index
    assert any("RUNNING" in n for n in history.notes)


def test_mixed_partition_allows_each_model_of_its_nodes():
    models = partition_gpu_models(two_partition_nodes())
    assert models == {"a100": "A100", "all": "A100|V100", "v100": "V100", "cpu": ""}


def test_identical_nodes_are_one_group(tmp_path):
    import yaml

    _, cluster_yaml = write_inputs(fifo_history(5), two_partition_nodes(), tmp_path)
    groups = yaml.safe_load(cluster_yaml.read_text())["node_groups"]
    assert [(g["count"], g["gpus"], g.get("gpu_model")) for g in groups] == [
        (2, 4, "A100"), (2, 2, "V100"), (1, 0, None),
    ]  # fmt: skip
    assert groups[0]["cpu_milli"] == 64_000


def test_gpu_node_without_a_model_is_one_line_error(tmp_path):
    nodes = two_partition_nodes()
    frame = nodes.nodes.copy()
    frame.loc[0, "gpu_model"] = ""
    with pytest.raises(InputError, match="node a01 has 4 GPU"):
        write_inputs(fifo_history(5), SlurmNodes(frame, nodes.partitions, source="n.json"), tmp_path)


def test_history_where_nothing_started_is_an_error(tmp_path):
    history = fifo_history(3)
    history.recorded["start_s"] = math.nan
    with pytest.raises(InputError, match="nothing to replay"):
        write_inputs(history, two_partition_nodes(), tmp_path)
