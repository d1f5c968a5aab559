"""read_slurm_nodes: scontrol show nodes --json / sinfo --json into a SlurmNodes; Slurm node lists."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wattsched.core.errors import InputError
from wattsched.workloads.slurm_history._slurm_text import compress_nodelist, expand_nodelist, memory_mib
from wattsched.workloads.slurm_history.nodes import (
    NODE_COLUMNS,
    catalog_gpu_name,
    parse_gpu_gres,
    read_slurm_nodes,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm_history"


def test_scontrol_nodes_with_gpu_map():
    n = read_slurm_nodes(FIXTURES / "scontrol_nodes.json", gpu_map={"tesla": "V100"})
    df = n.nodes.set_index("name")
    assert list(n.nodes.columns) == list(NODE_COLUMNS)
    assert df.loc["gpu01", "gpu_model"] == "A100" and df.loc["gpu01", "gpus"] == 4
    assert df.loc["gpu02", "gpu_model"] == "A100"  # "A100" in any case
    assert df.loc["old01", "gpu_model"] == "V100" and df.loc["old01", "gpus"] == 8  # shard:16 is not a GPU
    assert df.loc["cpu01", "gpus"] == 0 and df.loc["cpu01", "gpu_model"] == ""
    assert df.loc["gpu01", "cpus"] == 64 and df.loc["gpu01", "memory_mib"] == 512000
    assert df.loc["gpu01", "state"] == "IDLE" and df.loc["gpu01", "partitions"] == "gpu,all"
    assert n.partitions == {"gpu": ["gpu01", "gpu02"], "all": ["gpu01", "gpu02", "cpu01"], "legacy": ["old01"],
                            "cpu": ["cpu01"]}  # fmt: skip
    assert "scontrol" in n.notes[0]


def test_unknown_gpu_type_names_node_and_type():
    with pytest.raises(InputError) as err:
        read_slurm_nodes(FIXTURES / "scontrol_nodes.json")
    assert err.value.field == "nodes.old01.gres"
    assert "unknown GPU type 'tesla' on node old01" in str(err.value) and "gpu_map" in str(err.value)


def test_sinfo_23_groups_merged_per_node():
    n = read_slurm_nodes(FIXTURES / "sinfo_2311.json")
    df = n.nodes.set_index("name")
    assert sorted(df.index) == ["h01", "h02", "v01"]
    assert df.loc["h01", "partitions"] == "gpu,all" and df.loc["h01", "gpu_model"] == "H100"
    assert (
        df.loc["h02", "gpus"] == 8 and df.loc["h02", "cpus"] == 96 and df.loc["h02", "memory_mib"] == 1024000
    )
    assert df.loc["v01", "state"] == "MIXED+DRAIN" and df.loc["v01", "gpu_model"] == "V100"
    assert n.partitions["all"] == ["h01", "h02", "v01"]


def test_bad_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"nodes": [ {"name": "a", "gres": "gpu:a100:x"} ]}')
    with pytest.raises(InputError, match=r"field 'nodes.a.gres': 'gpu:a100:x' is not a GPU GRES"):
        read_slurm_nodes(p)
    p.write_text('{"nodes": [\n{"name": "a",}\n]}')
    with pytest.raises(InputError, match=r"x.json:2: not valid JSON"):
        read_slurm_nodes(p)
    p.write_text('{"jobs": []}')
    with pytest.raises(InputError, match="expected scontrol show nodes --json or sinfo --json"):
        read_slurm_nodes(p)


def test_gres_and_catalog_names():
    assert parse_gpu_gres("gpu:a100:4(S:0-1),gpu:v100:2,shard:8") == [("a100", 4), ("v100", 2)]
    assert parse_gpu_gres("gpu:4") == [("", 4)]
    assert parse_gpu_gres("gpu:a100:4(S:0,1)") == [("a100", 4)]
    assert parse_gpu_gres("(null)") == []
    assert catalog_gpu_name("h100") == "H100" and catalog_gpu_name("V100") == "V100"
    assert catalog_gpu_name("a100_pcie") == "A100-PCIE" and catalog_gpu_name("mi250") is None
    assert catalog_gpu_name("MI250", {"mi250": "A100"}) == "A100"


def test_nodelist_expansion():
    assert expand_nodelist("gpu[01-03,05]") == ["gpu01", "gpu02", "gpu03", "gpu05"]
    assert expand_nodelist("gpu[01-02],cpu1") == ["gpu01", "gpu02", "cpu1"]
    assert expand_nodelist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_nodelist("None assigned") == []
    with pytest.raises(ValueError):
        expand_nodelist("gpu[01-03")
    with pytest.raises(ValueError):
        expand_nodelist("gpu[3-1]")
    assert compress_nodelist(["gpu01", "gpu02", "gpu03", "gpu05", "cpu1"]) == "cpu1,gpu[01-03,05]"


names = st.lists(
    st.tuples(
        st.sampled_from(["gpu", "node", "a1b", "x-"]), st.integers(0, 300), st.sampled_from([1, 2, 3])
    ).map(lambda t: f"{t[0]}{t[1]:0{t[2]}d}")
    | st.sampled_from(["login", "head-a"]),
    min_size=1,
    max_size=40,
)


@given(names)
def test_nodelist_round_trip(node_names):
    assert sorted(expand_nodelist(compress_nodelist(node_names))) == sorted(set(node_names))


def test_memory_units():
    assert memory_mib("64G") == 65536 and memory_mib("512M") == 512 and memory_mib("1T") == 1024**2
    assert memory_mib("2048K") == 2 and memory_mib("100") == 100
    with pytest.raises(ValueError):
        memory_mib("lots")


def test_real_slurm_22_05_sinfo_json_and_scontrol_text():
    # Captured from the local test Slurm (tests/slurm_testbed.py, Debian's Slurm 22.05.8): 22.05's scontrol has
    # no --json, its sinfo --json lists node records.
    from_json = read_slurm_nodes(FIXTURES / "sinfo_2205_testbed.json")
    from_text = read_slurm_nodes(FIXTURES / "scontrol_show_nodes_2205_testbed.txt")
    for n in (from_json, from_text):
        df = n.nodes.set_index("name")
        assert sorted(df.index) == ["gpu1", "gpu2"]
        assert (df["gpu_model"] == "A100").all() and (df["gpus"] == 4).all()
        assert (df["cpus"] == 8).all() and (df["memory_mib"] == 16000).all() and (df["state"] == "IDLE").all()
        assert n.partitions == {"main": ["gpu1", "gpu2"]}
    assert "text" in from_text.notes[0]


def test_state_flags_and_text_errors(tmp_path):
    p = tmp_path / "n.json"
    p.write_text('{"nodes": [{"name": "a", "state": "mixed", "state_flags": ["DRAIN"], "gres": "gpu:2"}]}')
    n = read_slurm_nodes(p)
    assert n.nodes["state"].tolist() == ["MIXED+DRAIN"] and n.nodes["gpus"].tolist() == [2]
    t = tmp_path / "n.txt"
    t.write_text("NodeName=a CPUTot=8 RealMemory=100 Gres=gpu:a100:2 State=IDLE Partitions=p\n"
                 "NodeName=b CPUTot=x RealMemory=100 Gres=(null) State=IDLE\n")  # fmt: skip
    with pytest.raises(InputError, match=r"n.txt:2: field 'nodes.b.CPUTot': 'x' is not a number"):
        read_slurm_nodes(t)
