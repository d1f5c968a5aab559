"""Named clusters, nXgY specs, Alibaba node lists and the YAML cluster schema."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from wattsched.core.errors import DataNotFoundError, InputError, UnknownNameError
from wattsched.workloads.catalog import load_workload
from wattsched.workloads.clusters import (
    PHILLY_PEAK_GPUS,
    cluster_names,
    load_cluster,
    peak_concurrent_gpus,
    philly_cluster,
    spec_names,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FAKE_DATA = FIXTURES / "data"

GROUP = "  - count: 2\n    gpus: 4\n    gpu_model: T4\n    cpu_milli: 32000\n    memory_mib: 131072\n"
GROUP_NO_MODEL = GROUP.replace("    gpu_model: T4\n", "")


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- built-in clusters ---------------------------------------------------------------------------------------


def test_default_cluster():
    spec = load_cluster("default")
    assert (spec.num_nodes, spec.total_gpus, spec.gpu_models) == (16, 128, ("A100",))


def test_philly_cluster_needs_no_data(monkeypatch, tmp_path):
    monkeypatch.delenv("WATTSCHED_DATA", raising=False)
    monkeypatch.setenv("WATTSCHED_CACHE", str(tmp_path))
    spec = load_cluster("philly")
    assert spec is not None and spec.name == "philly"
    assert (spec.num_nodes, spec.total_gpus, spec.gpu_models) == (160, 1280, ("P100",))
    assert set(spec.gpu_count) == {8}
    assert set(spec.cpu_milli) == {64_000} and set(spec.memory_mib) == {524_288}
    np.testing.assert_array_equal(np.bincount(spec.switch_id), [32] * 5)
    for fragment in ("1,243", "smallest number of 8-GPU nodes, in whole switches", "P100", "assumed"):
        assert fragment in spec.notes
    assert philly_cluster().total_gpus == spec.total_gpus


def test_peak_concurrent_gpus_ends_before_starts():
    submit = np.array([0.0, 10.0, 10.0, 5.0])
    duration = np.array([10.0, 5.0, 1.0, 100.0])
    num = np.array([4, 2, 1, 2])
    # at t=10 job 0 (4 GPUs) ends as jobs 1 and 2 start: the peak stays 6 (t=5), not 4 + 2 + 2 + 1 = 9
    assert peak_concurrent_gpus(submit, duration, num) == 6
    assert peak_concurrent_gpus(np.array([]), np.array([]), np.array([], dtype=np.int64)) == 0


# -- nXgY specs ----------------------------------------------------------------------------------------------


def test_spec_from_tiresias_folder_with_default_model():
    spec = load_cluster("n32g4", data_dir=FAKE_DATA)
    assert spec.name == "n32g4"
    assert (spec.num_nodes, spec.total_gpus, spec.gpu_models) == (32, 128, ("V100",))
    assert set(spec.cpu_milli) == {32_000}  # 32 cores
    assert set(spec.memory_mib) == {128 * 1024}  # 128 GB
    np.testing.assert_array_equal(np.bincount(spec.switch_id), [16, 16])
    assert "V100 assumed" in spec.notes


def test_spec_from_elasticflow_folder_with_model():
    spec = load_cluster("n8g8@T4", data_dir=FAKE_DATA)
    assert spec.name == "n8g8@T4"
    assert (spec.num_nodes, spec.total_gpus, spec.gpu_models) == (8, 64, ("T4",))
    assert "assumed" not in spec.notes


def test_spec_layout_differing_from_name_follows_file(tmp_path):
    folder = tmp_path / "elasticflow-throughputs" / "cluster_specs"
    folder.mkdir(parents=True)
    (folder / "n1g2.csv").write_text(
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,2,1,8,16\n"
    )
    spec = load_cluster("n1g2", data_dir=tmp_path)
    assert (spec.num_nodes, spec.total_gpus) == (2, 2)
    assert "differs from its name" in spec.notes


def test_spec_errors(tmp_path, monkeypatch):
    with pytest.raises(UnknownNameError) as info:
        load_cluster("n8g8@H900", data_dir=FAKE_DATA)
    assert info.value.kind == "GPU model"
    with pytest.raises(UnknownNameError) as info:
        load_cluster("n3g3", data_dir=FAKE_DATA)
    assert info.value.kind == "cluster" and "n32g4" in info.value.valid
    monkeypatch.delenv("WATTSCHED_DATA", raising=False)
    monkeypatch.setenv("WATTSCHED_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DataNotFoundError, match=r"tiresias-traces/cluster_specs/n160g8\.csv"):
        load_cluster("n160g8", data_dir=tmp_path)
    folder = tmp_path / "tiresias-traces" / "cluster_specs"
    folder.mkdir(parents=True)
    (folder / "n1g4.csv").write_text(
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,1,x,8,16\n"
    )
    with pytest.raises(InputError) as err:
        load_cluster("n1g4", data_dir=tmp_path)
    assert (err.value.line, err.value.field) == (2, "num_gpu_p_node")


# -- Alibaba node lists --------------------------------------------------------------------------------------


def test_alibaba_node_lists_from_fixture():
    gpu = load_cluster("alibaba-v2023", data_dir=FAKE_DATA)
    assert (gpu.num_nodes, gpu.total_gpus) == (3, 14)
    assert set(gpu.gpu_models) == {"T4", "G2", "V100M32"}
    everything = load_cluster("alibaba-v2023-all", data_dir=FAKE_DATA)
    assert everything.num_nodes == 4 and everything.gpu_model_code[0] == -1


def test_alibaba_node_list_bad_model(tmp_path):
    folder = tmp_path / "alibaba-gpu-v2023" / "csv"
    folder.mkdir(parents=True)
    (folder / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\na,1,1,2,T4\nb,1,1,2,Z1\n"
    )
    with pytest.raises(InputError) as info:
        load_cluster("alibaba-v2023", data_dir=tmp_path)
    assert (info.value.line, info.value.field) == (3, "model")


def test_unknown_cluster_name_lists_valid_names():
    with pytest.raises(UnknownNameError) as info:
        load_cluster("pilly")
    for name in ("default", "philly", "alibaba-v2023", "alibaba-v2023-all", "n32g4", "n160g8"):
        assert name in info.value.valid
    assert set(cluster_names()) >= set(spec_names())


# -- YAML ----------------------------------------------------------------------------------------------------


def test_yaml_cluster_fixture():
    spec = load_cluster(str(FIXTURES / "cluster_small.yaml"))
    assert spec.name == "lab" and spec.notes == "hand-written test cluster"
    assert (spec.num_nodes, spec.total_gpus, spec.gpu_models) == (6, 32, ("A100",))
    np.testing.assert_array_equal(spec.switch_id, [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(spec.gpu_model_code, [0, 0, 0, 0, -1, -1])
    assert list(spec.node_names[:2]) == ["gpu-0000", "gpu-0001"]


@pytest.mark.parametrize(
    ("text", "line", "field", "fragment"),
    [
        (f"name: x\nnode_groups:\n{GROUP}    colour: red\n", 8, "node_groups[0].colour", "Extra inputs"),
        (
            f"name: x\nnode_groups:\n{GROUP.replace('T4', 'T5')}",
            5,
            "node_groups[0].gpu_model",
            "unknown GPU model",
        ),
        (
            f"name: x\nnode_groups:\n{GROUP.replace('count: 2', 'count: -1')}",
            3,
            "node_groups[0].count",
            "greater",
        ),
        (
            f"name: x\nnode_groups:\n{GROUP}{GROUP_NO_MODEL}",
            8,
            "node_groups[1]",
            "gpu_model is required",
        ),
        (
            f"name: x\nnode_groups:\n{GROUP.replace('32000', 'lots')}",
            6,
            "node_groups[0].cpu_milli",
            "integer",
        ),
        ("name: x\n", 1, "node_groups", "Field required"),
        ("name: x\nnode_groups: []\n", 2, "node_groups", "at least 1"),
        (f"name: x\nsize: 3\nnode_groups:\n{GROUP}", 2, "size", "Extra inputs"),
    ],
)
def test_yaml_cluster_errors_name_file_line_field(tmp_path, text, line, field, fragment):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_cluster(str(path))
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field)
    assert fragment in err.message


def test_yaml_syntax_and_shape_errors(tmp_path):
    with pytest.raises(InputError) as info:
        load_cluster(str(write(tmp_path, "name: x\nnode_groups: [\n  {count: 1\n")))
    assert info.value.line is not None and "invalid YAML" in info.value.message
    with pytest.raises(InputError, match="mapping"):
        load_cluster(str(write(tmp_path, "- 1\n- 2\n", "list.yml")))
    with pytest.raises(InputError, match="file not found"):
        load_cluster(str(tmp_path / "missing.yaml"))
    dup = f"name: x\nnode_groups:\n{GROUP}    name_prefix: a\n{GROUP}    name_prefix: a\n"
    with pytest.raises(InputError, match="collide"):
        load_cluster(str(write(tmp_path, dup)))


# -- real data -----------------------------------------------------------------------------------------------


def real_root(dataset: str, relpath: str) -> str:
    root = os.environ.get("WATTSCHED_DATA")
    if not root:
        pytest.skip("WATTSCHED_DATA is not set (point it at a local copy of the datasets)")
    if not (Path(root) / dataset / relpath).is_file():
        pytest.skip(f"{dataset}/{relpath} not found under WATTSCHED_DATA={root}")
    return root


@pytest.mark.realdata
def test_real_alibaba_gpu_node_cluster():
    root = real_root("alibaba-gpu-v2023", "csv/openb_node_list_gpu_node.csv")
    spec = load_cluster("alibaba-v2023", data_dir=root)
    assert (spec.num_nodes, spec.total_gpus) == (1213, 6212)
    assert int(spec.cpu_milli.sum()) == 107_018_000
    assert set(spec.gpu_models) == {"G2", "G3", "T4", "P100", "V100M16", "V100M32", "A10"}
    assert spec.describe()["gpu_models"]["G2"] == {"nodes": 549, "gpus": 4392}


@pytest.mark.realdata
def test_real_alibaba_all_node_cluster():
    root = real_root("alibaba-gpu-v2023", "csv/openb_node_list_all_node.csv")
    spec = load_cluster("alibaba-v2023-all", data_dir=root)
    assert spec.num_nodes == 1523 and spec.total_gpus == 6212
    assert int((spec.gpu_count == 0).sum()) == 310


@pytest.mark.realdata
def test_real_philly_peak_fits_philly_cluster():
    root = real_root("philly-pollux", "philly.csv")
    jobs = load_workload("philly", data_dir=root).jobs
    peak = peak_concurrent_gpus(jobs.submit_s, jobs.duration_s, jobs.num_gpu)
    assert 1152 < peak <= 1280  # 4.5 switches of 32 x 8 GPUs are too few, 5 suffice
    assert peak == PHILLY_PEAK_GPUS
    per_switch = 32 * 8
    assert load_cluster("philly").total_gpus == -(-peak // per_switch) * per_switch


@pytest.mark.realdata
@pytest.mark.parametrize("name", spec_names())
def test_real_spec_clusters_load(name):
    root = os.environ.get("WATTSCHED_DATA")
    if not root:
        pytest.skip("WATTSCHED_DATA is not set (point it at a local copy of the datasets)")
    if not any(
        (Path(root) / d / "cluster_specs" / f"{name}.csv").is_file()
        for d in ("tiresias-traces", "elasticflow-throughputs")
    ):
        pytest.skip(f"cluster_specs/{name}.csv not found under WATTSCHED_DATA={root}")  # fmt: skip
    spec = load_cluster(name, data_dir=root)
    assert spec.total_gpus > 0 and spec.gpu_models == ("V100",)
    if name != "n1g2":  # upstream n1g2.csv describes 2 nodes x 1 GPU
        nodes, gpus = (int(x) for x in name[1:].split("g"))
        assert (spec.num_nodes, spec.total_gpus) == (nodes, nodes * gpus)
