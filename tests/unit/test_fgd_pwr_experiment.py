"""The fgd-pwr experiment: the per-pod observer, the papers' reductions, a tiny end-to-end grid through the
experiment protocol (its own tables, records.csv as `compare` reads it, the summary), the CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.conftest import make_cluster, make_jobs, real_data_dir, require_real_file
from wattsched.cli.main import app
from wattsched.energy.binary import cluster_power_w
from wattsched.engine.packing import run_packing
from wattsched.experiments.compare import rows_of
from wattsched.experiments.fgd_pwr import (
    ARRIVED_PCT,
    CURVE_COLUMNS,
    DEFAULT_POLICIES,
    GRID,
    FgdPwr,
    FgdPwrConfig,
    FragPowerObserver,
    GridInputs,
    _bin_mean,
    reduce_series,
    run_one,
)
from wattsched.experiments.fgd_pwr_tables import summarise
from wattsched.experiments.protocol import EXPERIMENTS, run_experiment
from wattsched.policies import PLACEMENT_POLICIES
from wattsched.policies.fgd import FragModel, typical_pods

TINY = make_cluster(
    [(4, "V100M16", 32_000, 131_072)] * 3 + [(2, "T4", 16_000, 65_536)] * 2 + [(8, "G2", 96_000, 393_216)],
    name="tiny",
)  # 6 nodes, 24 GPUs


def tiny_jobs():
    rows = []
    for i in range(60):
        kind = i % 6
        if kind == 0:
            rows.append({"gpus": 0, "cpu": 2000})
        elif kind in (1, 2):
            rows.append({"gpus": 1, "milli": 300 + 100 * (i % 5), "cpu": 1000})
        elif kind == 3:
            rows.append({"gpus": 1, "milli": 1000, "cpu": 4000})
        elif kind == 4:
            rows.append({"gpus": 2, "milli": 1000, "cpu": 4000, "spec": "V100M16"})
        else:
            rows.append({"gpus": 1, "milli": 500, "cpu": 2000, "spec": "T4|G2"})
    return make_jobs(rows)


def test_observer_tracks_fragmentation_and_power_exactly():
    jobs = tiny_jobs()
    fm = FragModel(TINY, typical_pods(jobs))
    obs = FragPowerObserver(TINY, fm)
    policy = PLACEMENT_POLICIES.create("fgd")
    out = run_packing(jobs, TINY, policy, np.random.default_rng(1), np.random.default_rng(2), observers=[obs])
    last = out.series.frame().iloc[-1]
    # Rebuild the final state from the placements and recompute everything from scratch.
    from wattsched.core.cluster import ClusterState

    state = ClusterState(TINY)
    for j, p in zip(out.order.tolist(), out.placements, strict=True):
        for node, gpus, cpu, mem in p or ():
            state.allocate(node, gpus, int(jobs.gpu_milli[j]), cpu, mem)
    frag, idle = fm.cluster_frag(state)
    assert last["frag_milli"] == pytest.approx(frag, abs=1e-9)
    assert last["idle_milli"] == idle
    assert last["power_w"] == cluster_power_w(state)
    assert 0 < frag <= idle


def test_bin_mean_uses_neighbours_for_empty_bins():
    bins = np.array([0, 0, 2, 4, 5])
    values = np.array([1.0, 3.0, 5.0, 7.0, 9.0])
    got = _bin_mean(bins, values, 6)
    # bin 1 is empty -> rows of bins 0..2 (1, 3, 5); bin 3 is empty -> rows of bins 2..4 (5, 7)
    assert got.tolist() == [2.0, 3.0, 5.0, 6.0, 7.0, 9.0]
    assert np.isnan(_bin_mean(np.array([0]), np.array([1.0]), 4)[3])


def test_reduce_series_bins_and_grid():
    total_gpus = 10  # capacity 10,000 milli: 1 % = 100 milli
    series = pd.DataFrame(
        {
            "arrived_gpu_milli": [50.0, 150.0, 150.0, 10_000.0],
            "allocated_gpu_milli": [50.0, 150.0, 150.0, 9000.0],
            "frag_milli": [10.0, 20.0, 20.0, 500.0],
            "idle_milli": [9950.0, 9850.0, 9850.0, 1000.0],
            "power_w": [100.0, 200.0, 210.0, 1000.0],
        }
    )
    curve, grid = reduce_series(series, total_gpus)
    assert curve["arrived_pct"].tolist() == ARRIVED_PCT.tolist()
    # 50 milli -> round(0.5) = 0 (half to even); 150 -> round(1.5) = 2 (half to even)
    assert curve["alloc_pct"][0] == 0.5 and curve["alloc_pct"][2] == 1.5
    assert curve["alloc_pct"][100] == 90.0 and curve["grar"][100] == 0.9
    assert curve["power_w"][2] == 205.0  # both rows at 150 milli
    assert curve["frag_ratio_pct"][100] == 50.0
    assert np.isnan(curve["alloc_pct"][50])  # nothing within one bin of 50 %
    # Grid: repeated x keeps the first row (power 200, not 210); linear in between; clamped at both ends.
    assert grid["x"].size == GRID.size == 201
    i = int(np.argmin(np.abs(GRID - 0.015)))
    assert grid["power_w"][i] == pytest.approx(200.0)
    assert grid["power_w"][0] == 100.0 and grid["power_w"][-1] == 1000.0
    j = int(np.argmin(np.abs(GRID - 0.5)))
    assert grid["arrived_milli"][j] == pytest.approx(5000.0)


POLICIES = ["fgd", "pwr_200_fgd_800"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fgd-pwr")
    cfg = FgdPwrConfig(seeds=2, policies=POLICIES)
    return run_experiment(FgdPwr(GridInputs("tiny", tiny_jobs(), TINY)), cfg, out, workers=1)


def test_tiny_grid_end_to_end(tiny_run, tmp_path):
    out = tiny_run.out
    curves = pd.read_csv(out / "curves.csv")
    assert tuple(curves.columns) == CURVE_COLUMNS
    assert len(curves) == 2 * 2 * 131
    assert set(curves.policy) == {"fgd", "pwr_200_fgd_800"} and set(curves.seed) == {42, 43}
    assert list(dict.fromkeys(zip(curves.policy, curves.seed, strict=True))) == [
        (p, s) for p in POLICIES for s in (42, 43)
    ]  # sorted by policy (as given) and seed, whatever order the cells ran in
    for _, run in curves.groupby(["policy", "seed"]):
        assert run.arrived_pct.tolist() == list(range(131))
        alloc = run.alloc_pct.dropna()
        assert (alloc.diff().dropna() >= -1e-9).all() and alloc.max() <= 100
        assert (run.grar.dropna() <= 1 + 1e-12).all()
        assert (run.power_w.dropna() > 0).all()
    grid = pd.read_csv(out / "grid.csv")
    assert len(grid) == 2 * 2 * GRID.size
    text = (out / "summary.md").read_text()
    assert text.startswith("# fgd-pwr")
    assert "No published figures for this trace" in text and "pwr_200_fgd_800" in text
    assert "The acceptance targets refer to the default trace only." in text
    assert "**Most GPU capacity allocated once every pod has arrived: " in text
    pytest.importorskip("matplotlib", reason="the figures need the [plots] extra")
    for png in ("allocation.png", "frag_ratio.png", "power_savings.png", "power.png", "grar.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in text


def test_fgd_saves_nothing_against_itself(tiny_run):
    rows = summarise([o.raw for o in tiny_run.outcomes], POLICIES)
    assert rows["fgd"]["savings_band"] == 0.0 and rows["fgd"]["savings_1"] == 0.0
    assert set(rows) == set(POLICIES)


def test_a_process_pool_gives_the_same_files(tiny_run, tmp_path):
    """Per-run seeding: the same runs through a 2-process pool give the same tables byte for byte."""
    cfg = FgdPwrConfig(seeds=2, policies=POLICIES)
    run_experiment(FgdPwr(GridInputs("tiny", tiny_jobs(), TINY)), cfg, tmp_path, workers=2, plots=False)
    for name in ("curves.csv", "grid.csv"):
        assert (tmp_path / name).read_bytes() == (tiny_run.out / name).read_bytes(), name


def test_records_hold_what_compare_read_from_the_curves(tiny_run, tmp_path):
    """One record per run; `compare` reads GPU allocation and GRAR in the last arrived-% bin the run's curve
    reaches (on the tiny trace, before 130 %)."""
    records = pd.read_csv(tiny_run.out / "records.csv")
    assert list(records.columns[:6]) == ["experiment", "trace", "placement", "seed", "policy", "basis"]
    assert len(records) == 4 and set(records["experiment"]) == {"fgd-pwr"}
    assert (records["placed"] <= records["pods"]).all() and records["energy_kwh"].isna().all()
    curves = pd.read_csv(tiny_run.out / "curves.csv")
    last = curves.dropna(subset=["alloc_pct"]).groupby(["policy", "seed"]).tail(1)
    assert len(last) == 4 and (last["arrived_pct"] > 100).all()
    rows = {r["run"]: r for r in rows_of(tiny_run.out)}
    assert len(rows) == 4
    for row in last.itertuples():
        r = rows[f"{tiny_run.out} trace=tiny placement={row.policy} seed={row.seed}"]
        assert r["experiment"] == "fgd-pwr" and r["policy"] == row.policy and not r["reconstructed"]
        assert r["gpu_allocation"] == pytest.approx(row.alloc_pct / 100, rel=1e-5)
        assert r["grar"] == pytest.approx(row.grar, rel=1e-5)
    table = tmp_path / "table.csv"
    result = CliRunner().invoke(app, ["compare", str(tiny_run.out), "--csv", str(table)])
    assert result.exit_code == 0, result.output
    written = pd.read_csv(table)
    assert sorted(written["run"]) == sorted(rows) and list(written["experiment"].unique()) == ["fgd-pwr"]


def test_the_command_keeps_its_flags_and_defaults():
    assert isinstance(EXPERIMENTS.create("fgd-pwr"), FgdPwr)
    cfg = FgdPwrConfig()
    assert (cfg.trace, cfg.seeds, cfg.policies, cfg.inflate, cfg.data_dir) == (
        "default",
        10,
        list(DEFAULT_POLICIES),
        1.3,
        None,
    )
    assert all(f.description for f in FgdPwrConfig.model_fields.values())
    with pytest.raises(ValueError, match="extra"):
        FgdPwrConfig(nope=1)
    help_text = CliRunner().invoke(app, ["experiment", "fgd-pwr", "--help"], terminal_width=200).output
    for flag in (
        "--trace",
        "--seeds",
        "--policies",
        "--inflate",
        "--data-dir",
        "--out",
        "--workers",
        "--plots",
    ):
        assert flag in help_text, flag


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_cli_rejects_bad_values_in_one_line(tmp_path):
    def run(*args: str):
        return CliRunner().invoke(app, ["experiment", "fgd-pwr", "--out", str(tmp_path), "--quiet", *args])

    line = one_error_line(run("--policies", "fgd,nope"))
    assert "error: unknown placement policy 'nope'" in line and "pwr_<W1>_fgd_<W2>" in line
    line = one_error_line(run("--trace", "nope"))
    assert "error: unknown trace 'nope'" in line and "gpushare40" in line
    assert one_error_line(run("--seeds", "0")) == "error: --seeds must be at least 1, got 0"
    assert one_error_line(run("--policies", ",")) == "error: --policies: no placement policy given"
    assert not (tmp_path / "records.csv").exists()


@pytest.mark.realdata
def test_fgd_on_the_default_trace():
    from wattsched.experiments.fgd_pwr import trace_inputs

    require_real_file("alibaba-gpu-v2023", "csv/openb_pod_list_default.csv")
    run = run_one(trace_inputs("default", real_data_dir()), "fgd", 42)
    # Published mean over 10 seeds: 95.23 % at 100 % arrived, 95.39 % at 130 %.
    assert 94.0 <= run.curve["alloc_pct"][100] <= 96.5
    assert run.curve["alloc_pct"][130] >= run.curve["alloc_pct"][100]
    assert 0.94 <= run.grid["used_milli"][-1] / run.grid["arrived_milli"][-1] <= 0.96


@pytest.mark.realdata
def test_compare_reads_the_figures_of_the_old_curves_table(tmp_path):
    """On the default trace (the command that made tests/fixtures/compare/fgd-pwr), records.csv gives `compare`
    the GPU allocation and GRAR it read from curves.csv at 130 % arrived before records.csv existed."""
    require_real_file("alibaba-gpu-v2023", "csv/openb_pod_list_default.csv")
    args = ["experiment", "fgd-pwr", "--seeds", "1", "--policies", "best-fit,fgd", "--no-plots", "--quiet"]
    result = CliRunner().invoke(app, [*args, "--workers", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Most GPU capacity allocated once every pod has arrived: fgd" in result.output
    summary = (tmp_path / "summary.md").read_text()
    assert "- fgd: allocation at 100 % within 1.0 pp of 95.23: met" in summary  # the published figures beside
    assert "| fgd | 95.06 | 0 | 95.23 | -0.17 | yes | 95.24 | 0 | 95.39 | -0.15 |" in summary
    rows = {r["run"]: r for r in rows_of(tmp_path)}
    fgd = rows[f"{tmp_path} trace=default placement=fgd seed=42"]
    assert fgd["gpu_allocation"] == pytest.approx(0.9524, rel=1e-5)
    assert fgd["grar"] == pytest.approx(0.733891, rel=1e-5)
    last = pd.read_csv(tmp_path / "curves.csv").groupby(["policy", "seed"]).tail(1)
    assert set(last["arrived_pct"]) == {130}
    for row in last.itertuples():
        r = rows[f"{tmp_path} trace=default placement={row.policy} seed={row.seed}"]
        assert r["gpu_allocation"] == pytest.approx(row.alloc_pct * 0.01, rel=1e-5)
        assert r["grar"] == pytest.approx(row.grar, rel=1e-5)
