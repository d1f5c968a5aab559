"""`wattsched compare`: the comparison table of runs (experiments/compare.py) on run directories made by real short
`simulate` runs, a directory of runs, a real `hkbu-dag` experiment, and the outputs of every other experiment
(their shared run records, records.csv, beside their own tables). Values come from the summaries, changes are
against the baseline, `--csv` writes the same table, and a directory that holds no run is one error line naming it.

The directories under tests/fixtures/compare/ are real experiment outputs of this code (with --no-plots), made with
`wattsched experiment fgd-pwr --seeds 1 --policies best-fit,fgd`, `powerflow --workload pollux/workload-6
--cluster n16g4 --gpu-type T4 --seeds 1 --baselines fifo --budget-points 2 --caps 1.0 --power-manager always-on`,
`eaco --nodes 28 --seeds 1 --policies eaco,fifo --max-jobs 50`, `cedla --region US-CAL-CISO --max-jobs 200`,
`hkbu-dvfs --seeds 1 --utilisations 0.2 --gpus 64 --models 2070S --modes offline --trace-jobs 300 --trace-gpus
V100` and `hkbu-online-pd --instances 3 --order-searches 0 --max-jobs 300` (and `--no-philly`) on the shared data.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from wattsched.cli.main import app
from wattsched.core.errors import WattschedError
from wattsched.experiments.compare import DELTA_SUFFIX, MISSING, comparison, format_delta
from wattsched.experiments.hkbu_dag import HkbuDagConfig
from wattsched.experiments.protocol import EXPERIMENTS as PROTOCOL_EXPERIMENTS
from wattsched.experiments.protocol import run_experiment

runner = CliRunner()
EXPERIMENTS = Path(__file__).resolve().parent.parent / "fixtures" / "compare"


def simulate(out: Path, *args) -> Path:
    result = runner.invoke(
        app, ["simulate", "--quiet", "--jobs", "300", "--seed", "3", *map(str, args), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Run directories of real short runs: a baseline, node right-sizing, a reconstructed power manager, packing."""
    root = tmp_path_factory.mktemp("runs")
    return {
        "base": simulate(root / "base"),
        "idle": simulate(root / "idle", "--power-manager", "idle-timeout"),
        "forecast": simulate(root / "forecast", "--power-manager", "forecast"),
        "packing": simulate(root / "packing", "--mode", "packing"),
    }


def summary(path: Path) -> dict:
    return json.loads((path / "summary.json").read_text())


def compare(*args):
    return runner.invoke(app, ["compare", *map(str, args)])


def test_values_are_the_summaries(runs):
    frame = comparison([runs["base"], runs["idle"]])
    assert list(frame["run"]) == [str(runs["base"]), str(runs["idle"])]
    for row, path in zip(frame.to_dict("records"), (runs["base"], runs["idle"]), strict=True):
        s = summary(path)
        assert row["policy"] == ("fifo+best-fit" if path == runs["base"] else "fifo+best-fit, idle-timeout")
        assert row["jobs_completed"] == s["jobs_completed"] == 300
        assert row["energy_kwh"] == s["energy_kwh"]
        for name, kwh in s["energy_by_component_kwh"].items():
            assert row[f"energy_{name}_kwh"] == kwh
        assert (row["jct_mean_s"], row["jct_p95_s"]) == (s["jct_s"]["mean"], s["jct_s"]["p95"])
        assert row["queue_delay_mean_s"] == s["queue_delay_s"]["mean"]
        assert row["makespan_s"] == s["makespan_s"]
        assert row["gpu_allocation"] == s["gpu_allocation_mean"]
        assert row["restarts"] == s["restarts"] and row["slo_violation_hours"] == s["slo_violation_hours"]
    # no run has a price region: cost and carbon are not columns at all
    assert "cost_usd" not in frame and "co2_kg" not in frame


def test_changes_are_against_the_baseline(runs):
    base, idle = summary(runs["base"]), summary(runs["idle"])
    frame = comparison([runs["base"], runs["idle"]])
    assert list(frame["baseline"]) == [True, False]
    expected = (idle["energy_kwh"] - base["energy_kwh"]) / base["energy_kwh"] * 100
    assert frame["energy_kwh" + DELTA_SUFFIX].tolist() == pytest.approx([0.0, expected])
    assert expected < -10  # right-sizing switches idle nodes off
    # the other way round: --baseline names a run among them
    frame = comparison([runs["base"], runs["idle"]], baseline=runs["idle"])
    assert list(frame["baseline"]) == [False, True]
    back = (base["energy_kwh"] - idle["energy_kwh"]) / idle["energy_kwh"] * 100
    assert frame["energy_kwh" + DELTA_SUFFIX].tolist() == pytest.approx([back, 0.0])
    # a zero baseline: no change where the run is zero too, no number otherwise (queueing delay)
    assert base["queue_delay_s"]["mean"] == 0 < idle["queue_delay_s"]["mean"]
    delays = comparison([runs["base"], runs["idle"]])["queue_delay_mean_s" + DELTA_SUFFIX]
    assert delays[0] == 0 and math.isnan(delays[1])


def test_a_baseline_beside_the_runs_is_added_first(runs):
    frame = comparison([runs["idle"]], baseline=runs["base"])
    assert list(frame["run"]) == [str(runs["base"]), str(runs["idle"])]
    assert list(frame["baseline"]) == [True, False]


def test_reconstructed_policies_are_marked_with_their_basis(runs):
    frame = comparison([runs["base"], runs["forecast"]]).set_index("policy")
    assert not frame.loc["fifo+best-fit", "reconstructed"]
    assert frame.loc["fifo+best-fit, forecast", "reconstructed"]
    assert frame.loc["fifo+best-fit, forecast", "basis"].startswith("forecast: Helios CES")


def test_missing_values_are_em_dashes_not_errors(runs, tmp_path):
    frame = comparison([runs["base"], runs["packing"]])
    packing = frame.iloc[1]
    assert math.isnan(packing["jct_mean_s"]) and math.isnan(packing["energy_kwh"])
    assert packing["gpu_allocation"] == summary(runs["packing"])["gpu_allocation_final"]
    assert packing["grar"] == summary(runs["packing"])["grar_final"]
    # a summary with hardly anything in it, and values of the wrong type
    sparse = tmp_path / "sparse"
    sparse.mkdir()
    (sparse / "config.resolved.yaml").write_text("workload: synthetic\n")
    (sparse / "summary.json").write_text('{"jobs_completed": 5, "jct_s": "n/a", "energy_kwh": null}')
    result = compare(runs["base"], runs["packing"], sparse)
    assert result.exit_code == 0, result.output
    assert MISSING in result.output and "Traceback" not in result.output
    assert format_delta(float("nan")) == MISSING


def test_a_directory_of_runs_gives_each_run(runs, tmp_path):
    parent = tmp_path / "demo"
    simulate(parent / "b_best-fit")
    simulate(parent / "a_random", "--placement", "random")
    (parent / "notes").mkdir()  # not a run: skipped
    frame = comparison([parent])
    assert list(frame["run"]) == [str(parent / "a_random"), str(parent / "b_best-fit")]
    assert list(frame["policy"]) == ["fifo+random", "fifo+best-fit"]


def test_an_experiment_directory_lists_its_runs(tmp_path):
    out = tmp_path / "dag"
    cfg = HkbuDagConfig(placements=["ssf"], picks=["lwf", "bp"], seeds=1, jobs=20)
    run_experiment(PROTOCOL_EXPERIMENTS.create("hkbu-dag"), cfg, out, workers=1, plots=False)
    records = pd.read_csv(out / "records.csv")
    keys = ["placement", "gpu_pick", "comm", "seed"]
    results = records[keys].merge(
        pd.read_csv(out / "results.csv"), on=keys, how="left"
    )  # in the records' order
    frame = comparison([out])
    assert len(frame) == len(records) == len(results) == 6  # 2 picks x 3 comm modes
    assert set(frame["experiment"]) == {"hkbu-dag"} and frame["reconstructed"].all()
    assert frame["basis"].str.startswith("hkbu-dag: HKBU-HPML/dl-scheduling").all()
    labels = [
        f"{out} placement=ssf gpu_pick={r.gpu_pick} comm={r.comm} seed=42" for r in results.itertuples()
    ]
    assert list(frame["run"]) == labels
    assert list(frame["policy"]) == [f"ssf+{r.gpu_pick} {r.comm}" for r in results.itertuples()]
    np.testing.assert_allclose(frame["energy_kwh"], results["energy_kj"] / 3600, rtol=1e-5)
    np.testing.assert_allclose(frame["jct_mean_s"], results["mean_jct_ms"] / 1000, rtol=1e-5)
    np.testing.assert_allclose(frame["makespan_s"], results["makespan_ms"] / 1000, rtol=1e-5)
    np.testing.assert_allclose(frame["queue_delay_mean_s"], results["mean_queue_ms"] / 1000, atol=1e-6)


# (directory, per-run table, rows, {row label suffix: {column: value}}, reconstructed policies)
EXPERIMENT_CASES = [
    ("fgd-pwr", "curves.csv", 2, {"trace=default placement=fgd seed=42": {"gpu_allocation": 0.9524, "grar": 0.733891}},
     set()),
    ("powerflow", "runs.csv", 4, {
        "power_manager=always-on kind=equal baseline=fifo seed=42": {
            "energy_kwh": 116.187, "jct_mean_s": 6433.55, "restarts": 540}}, {"powerflow"}),
    ("eaco", "results.csv", 2, {"nodes=28 variant=fifo seed=42": {"energy_kwh": 3929.78, "jct_mean_s": 1.41936e06}},
     {"eaco"}),
    ("cedla", "results.csv", 5, {"variant=cedla region=US-CAL-CISO": {"cost_usd": 3013.30, "co2_kg": 7438.30}},
     {"price-aware-no-drs", "cedla", "price-unaware-drs-forecast"}),
    ("hkbu-dvfs", "results.csv", 16 + 4, {
        "gpu=V100 power_manager=idle-timeout variant=dvfs": {"energy_kwh": 28988.3, "deadline_misses": 1},
        "model=2070S mode=offline utilisation=0.2 seed=42 algorithm=edf+bf dvfs=False drs=False": {
            "energy_kwh": 744854 / 3.6e6},
    }, {"hkbu-dvfs", "hkbu-dvfs-default-clocks"}),
    ("hkbu-online-pd", "philly.csv", 3, {"replay=hkbu-online-pd": {"energy_kwh": 110820, "deadline_misses": 14}},
     {"hkbu-online-pd"}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "table", "count", "values", "reconstructed"), EXPERIMENT_CASES)
def test_every_experiments_runs(name, table, count, values, reconstructed):
    path = EXPERIMENTS / name
    assert (path / "records.csv").is_file() and (path / table).is_file()  # the shared records beside its own
    frame = comparison([path]).set_index("run")
    assert len(frame) == count and frame.index.is_unique
    assert set(frame["experiment"]) == {name}
    for suffix, expected in values.items():
        row = frame.loc[f"{path} {suffix}"]
        for column, value in expected.items():
            assert row[column] == pytest.approx(value, rel=1e-5), (suffix, column)
    assert set(frame.loc[frame["reconstructed"], "policy"]) == reconstructed


def test_compare_prints_the_table_and_writes_the_csv(runs, tmp_path):
    out = tmp_path / "table.csv"
    result = compare(runs["base"], runs["idle"], runs["forecast"], "--csv", out)
    assert result.exit_code == 0, result.output
    frame = comparison([runs["base"], runs["idle"], runs["forecast"]])
    written = pd.read_csv(out)
    assert list(written.columns) == list(frame.columns)
    np.testing.assert_allclose(written["energy_kwh"], frame["energy_kwh"], rtol=1e-9)
    np.testing.assert_allclose(
        written["energy_kwh" + DELTA_SUFFIX], frame["energy_kwh" + DELTA_SUFFIX], rtol=1e-9
    )
    assert list(written["baseline"]) == [True, False, False]
    assert not list(tmp_path.glob(".table.csv.*"))  # written through a temporary file, then renamed
    text = " ".join(result.output.split())
    assert "changes against" in text and "energy by component (kWh)" in text
    assert format_delta(frame["energy_kwh" + DELTA_SUFFIX].iloc[1]) in text
    assert "(reconstructed)" in text and "reconstructed: forecast: Helios CES" in text
    assert f"table written to {out}" in text


def not_a_run(kind: str, d: Path) -> Path:
    """A path that holds no run, of one kind."""
    files = {
        "file": {"f.txt": "x"},
        "no-config": {"summary.json": "{}"},
        "bad-json": {"summary.json": "{oops", "config.resolved.yaml": ""},
    }
    if kind == "missing":
        return d / "nope"
    if kind == "no-runs":
        return EXPERIMENTS / "hkbu-online-pd-no-philly"
    for name, text in files.get(kind, {}).items():
        (d / name).write_text(text)
    return d / "f.txt" if kind == "file" else d


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("missing", "{d}: no such directory"),
        ("file", "{d}: is a file; expected a run directory or an experiment's output directory"),
        ("empty", "{d}: not a run directory (summary.json and config.resolved.yaml), nor the output"),
        ("no-config", "{d}: not a complete run directory"),
        ("bad-json", "{d}/summary.json: cannot read the run summary"),
        ("no-runs", "{d}: no runs to compare: the hkbu-online-pd experiment recorded none"),
    ],
)
def test_a_directory_that_is_not_a_run_is_one_error_line(runs, tmp_path, kind, message):
    target = not_a_run(kind, tmp_path)
    result = compare(runs["base"], target, "--csv", tmp_path / "out.csv")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    expected = message.format(d=target)
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "out.csv").exists()


def test_a_bad_baseline_is_one_error_line(runs):
    result = compare(runs["base"], "--baseline", "zzz")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: --baseline zzz: matches none of the runs compared and is not a run directory; labels: base"
    )


def test_a_run_given_twice_is_an_error(runs):
    with pytest.raises(WattschedError, match="is given twice"):
        comparison([runs["base"], runs["base"]])
    with pytest.raises(WattschedError, match="holds 4 runs; give the label of one of them"):
        comparison([EXPERIMENTS / "powerflow"], baseline=EXPERIMENTS / "powerflow")
