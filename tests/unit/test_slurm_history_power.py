"""read_power and attach_power: GPU power samples joined to a Slurm history's jobs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from wattsched.agent.server import DCGM_METRICS
from wattsched.core.errors import InputError
from wattsched.workloads.slurm_history.nodes import read_slurm_nodes
from wattsched.workloads.slurm_history.power import POWER_METRICS, attach_power, read_power
from wattsched.workloads.slurm_history.sacct import read_sacct

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm_history"


def test_agent_exports_the_metric_read():
    assert set(POWER_METRICS) <= {name for name, _, _ in DCGM_METRICS}


def test_prometheus_scrapes_concatenated():
    df = read_power(FIXTURES / "dcgm_power.prom")
    assert len(df) == 6  # the SM clock sample is skipped
    assert sorted(set(df["node"])) == ["gpu01", "gpu09"]
    first = df.iloc[0]
    assert (first.timestamp_s, first.node, first.gpu, first.power_w) == (1709287260.0, "gpu01", 0, 300.0)


def test_csv_matches_prometheus():
    csv = read_power(FIXTURES / "power.csv")
    prom = read_power(FIXTURES / "dcgm_power.prom")
    prom = prom.loc[prom["node"] == "gpu01"].reset_index(drop=True)
    assert csv["timestamp_s"].tolist() == prom["timestamp_s"].tolist()
    assert csv["power_w"].tolist() == prom["power_w"].tolist()


def test_attach_power_means_samples_of_the_jobs_nodes_during_its_run():
    history = read_sacct(FIXTURES / "sacct_2205.json")  # job 100 on gpu01 from 10:00:30 to 11:00:30 UTC
    nodes = read_slurm_nodes(FIXTURES / "scontrol_nodes.json", gpu_map={"tesla": "V100"})
    attach_power(history, read_power(FIXTURES / "dcgm_power.prom"), nodes)
    rec = history.recorded.set_index("job_id")
    assert rec.loc["100", "measured_power_w"] == pytest.approx(
        (300 + 200 + 320 + 180) / 4
    )  # not the 60 W later
    assert math.isnan(rec.loc["200_1", "measured_power_w"])  # gpu04 sent nothing
    assert math.isnan(rec.loc["500", "measured_power_w"])  # never ran
    notes = " ".join(history.notes)
    assert "measured_power_w for 1 of 4 jobs" in notes and "gpu09" in notes and "gpu04" in notes


def test_attach_power_reads_a_path():
    history = read_sacct(FIXTURES / "sacct_2205.json")
    attach_power(history, FIXTURES / "power.csv")
    assert history.recorded.set_index("job_id").loc["100", "measured_power_w"] == pytest.approx(250.0)


def test_bad_power_files(tmp_path):
    p = tmp_path / "p.prom"
    p.write_text('DCGM_FI_DEV_POWER_USAGE{gpu="0",Hostname="n1"} 250\n')
    with pytest.raises(InputError, match=r"p.prom:1: field 'timestamp': a sample without a timestamp"):
        read_power(p)
    p.write_text('DCGM_FI_DEV_POWER_USAGE{gpu="0"} 250 1\n')
    with pytest.raises(InputError, match=r"p.prom:1: field 'Hostname'"):
        read_power(p)
    p.write_text("this is not prometheus\n")
    with pytest.raises(InputError, match=r"p.prom:1: not a Prometheus sample line"):
        read_power(p)
    c = tmp_path / "p.csv"
    c.write_text("timestamp,node,gpu,power_w\n1,n1,0,100\n2,n1,0,lots\n")
    with pytest.raises(InputError, match=r"p.csv:3: field 'power_w': cannot parse 'lots' as a number"):
        read_power(c)
    c.write_text("timestamp,node,power_w\n1,n1,100\n")
    with pytest.raises(InputError, match=r"p.csv:1: field 'gpu': missing required column"):
        read_power(c)


def test_promtool_dump_lines_and_openmetrics_seconds(tmp_path):
    p = tmp_path / "dump.prom"
    p.write_text(
        '{__name__="DCGM_FI_DEV_POWER_USAGE", gpu="1", Hostname="n2"} 123.5 1709287260000\n'
        '{__name__="DCGM_FI_DEV_GPU_TEMP", gpu="1", Hostname="n2"} 50 1709287260000\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",instance="n3:9400"} 99 1709287260.5\n'
    )
    df = read_power(p)
    assert df["node"].tolist() == ["n2", "n3"] and df["gpu"].tolist() == [1, 0]
    assert df["timestamp_s"].tolist() == [1709287260.0, 1709287260.5]
