"""Experiments as one protocol (experiments/protocol.py): one module and its registration make an experiment with a
command, flags from its config, the executor, one common accounting window, the shared records schema and the
shared summary; `compare` and `report` read any of them."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from wattsched.cli.main import app
from wattsched.experiments.compare import METRICS, rows_of
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.idle_timeout_sweep import IdleTimeoutSweep, IdleTimeoutSweepConfig
from wattsched.experiments.parallel import Execution
from wattsched.experiments.protocol import (
    EXPERIMENTS,
    Cell,
    Experiment,
    Outcome,
    Section,
    experiment_names,
    run_experiment,
)

SMALL = {"max_jobs": 150, "timeouts_s": [300.0, 1800.0], "boot_time_s": 120.0}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    result = run_experiment(IdleTimeoutSweep(), IdleTimeoutSweepConfig(**SMALL), out, workers=1)
    return result


def test_the_sweep_writes_the_shared_records_summary_and_config(sweep):
    records = pd.read_csv(sweep.out / "records.csv")
    assert list(records["idle_timeout_s"]) == [math.inf, 300.0, 1800.0]  # the grid's order, baseline first
    assert set(records["experiment"]) == {"idle-timeout-sweep"}
    assert {m.key for m in METRICS} - {"grar"} <= set(
        records.columns
    )  # one name per metric, the comparison's
    # One common window: every run charged up to the same end, so none is charged less than its own energy.
    assert (records["energy_kwh"] >= records["own_window_kwh"] - 1e-9).all()
    assert (
        records.loc[1:, "energy_kwh"].lt(records.loc[0, "energy_kwh"]).all()
    )  # switching idle nodes off saves
    summary = (sweep.out / "summary.md").read_text()
    assert summary.startswith("# idle-timeout-sweep")
    assert "common window per experiment" in summary and "Least energy at a" in summary
    import yaml

    saved = yaml.safe_load((sweep.out / "config.yaml").read_text())
    assert saved == IdleTimeoutSweepConfig(**SMALL).model_dump(mode="json")


def test_compare_reads_a_protocol_experiment_without_a_table_of_its_own(sweep):
    rows = rows_of(sweep.out)
    assert [r["experiment"] for r in rows] == ["idle-timeout-sweep"] * 3
    assert rows[1]["run"].endswith("idle_timeout_s=300")
    records = pd.read_csv(sweep.out / "records.csv")
    assert rows[2]["energy_kwh"] == pytest.approx(records.loc[2, "energy_kwh"])


def test_report_takes_it_too(sweep, tmp_path):
    res = CliRunner().invoke(app, ["report", str(sweep.out), "--out", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "r.html").read_text()
    assert "idle_timeout_s=300" in text
    # the experiment's own figure, embedded as data (the page stays self-contained)
    assert '<figure id="plot-experiment-1-energy_vs_jct">' in text and "data:image/png;base64," in text


class _TwoPlacements(BaseModel):
    max_jobs: int = 60
    placements: list[str] = ["best-fit", "first-fit"]


class TwoPlacements(Experiment):
    """An experiment written in a test: one class and its registration, nothing else."""

    name = "test-two-placements"
    description = "two placement policies on the same small workload"
    config_model = _TwoPlacements

    def grid(self, cfg):
        return [
            Cell({"placement": p}, SimulationConfig(placement=p, max_jobs=cfg.max_jobs))
            for p in cfg.placements
        ]


def test_a_new_experiment_is_one_class_and_its_registration(tmp_path):
    if "test-two-placements" not in EXPERIMENTS:
        EXPERIMENTS.register("test-two-placements")(TwoPlacements)
    result = run_experiment(EXPERIMENTS.create("test-two-placements"), _TwoPlacements(), tmp_path, workers=1)
    assert list(result.records["placement"]) == ["best-fit", "first-fit"]
    assert [r["policy"] for r in rows_of(tmp_path)] == ["fifo+best-fit", "fifo+first-fit"]


def test_the_command_and_its_flags_come_from_the_config(tmp_path):
    assert "idle-timeout-sweep" in experiment_names()
    res = CliRunner().invoke(app, ["experiment", "idle-timeout-sweep", "--help"])
    assert "--timeouts-s" in res.output and "--boot-time-s" in res.output and "--fresh" in res.output
    res = CliRunner().invoke(
        app,
        ["experiment", "idle-timeout-sweep", "--timeouts-s", "600,abc", "--out", str(tmp_path), "--quiet"],
    )
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "--timeouts-s: expected numbers such as 60,300, got '600,abc'" in res.output  # any list of numbers
    res = CliRunner().invoke(app, ["experiment", "idle-timeout-sweep", "--max-jobs", "80", "--timeouts-s", "600",
                                   "--workers", "1", "--out", str(tmp_path), "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert list(pd.read_csv(tmp_path / "records.csv")["idle_timeout_s"]) == [math.inf, 600.0]


class Interrupted(RuntimeError):
    pass


class FlakySweep(IdleTimeoutSweep):
    """The sweep, whose file writing fails while `failing` is set: as if interrupted after its runs finished."""

    failing = True

    def tables(self, cfg, cells, outcomes, out):
        if FlakySweep.failing:
            raise Interrupted
        return super().tables(cfg, cells, outcomes, out)


def test_an_interrupted_grid_resumes_from_its_finished_cells(tmp_path):
    """The protocol's executor keeps finished cells until the files are written: a rerun after an interruption
    runs only the rest (the cell cache of experiments/cells.py)."""
    from wattsched.experiments.cells import cells_dir

    lines: list[str] = []
    cfg = IdleTimeoutSweepConfig(max_jobs=60, timeouts_s=[600.0])
    with pytest.raises(Interrupted):
        run_experiment(FlakySweep(), cfg, tmp_path, workers=1, execution=Execution(notify=lines.append))
    assert any(cells_dir(tmp_path).iterdir())
    FlakySweep.failing = False
    run_experiment(FlakySweep(), cfg, tmp_path, workers=1, execution=Execution(notify=lines.append))
    assert any(line.startswith("resumed 2 of 2 runs") for line in lines), lines
    assert not cells_dir(tmp_path).exists() or not any(cells_dir(tmp_path).iterdir())


class WithOwnColumns(IdleTimeoutSweep):
    """The sweep with a column of its own and one window per policy kind (to test the two hooks)."""

    def extra(self, result):
        return {"boots": int(result.summary.get("power_transitions", {}).get("boots", -1))}

    def window_group(self, keys):
        return math.isinf(keys["idle_timeout_s"])


def test_own_columns_follow_the_metrics_and_windows_follow_the_groups(tmp_path):
    cfg = IdleTimeoutSweepConfig(max_jobs=60, timeouts_s=[600.0])
    result = run_experiment(WithOwnColumns(), cfg, tmp_path, workers=1)
    columns = list(result.records.columns)
    assert columns[-1] == "boots" and columns.index("boots") > columns.index("restarts")
    assert "common window per group of compared runs" in result.window
    assert [r["run"].split()[-1] for r in rows_of(tmp_path)] == ["idle_timeout_s=inf", "idle_timeout_s=600"]
    assert "| boots |" in (tmp_path / "summary.md").read_text()


def test_an_experiment_without_matplotlib_writes_its_tables_and_logs_the_skip(tmp_path, monkeypatch, caplog):
    """matplotlib is the [plots] extra: without it an experiment finishes with its records and summary, no figures,
    and says why in one log line."""
    from wattsched.experiments import report_plots

    monkeypatch.setattr(report_plots, "plots_available", lambda: False)
    cfg = IdleTimeoutSweepConfig(max_jobs=60, timeouts_s=[600.0])
    result = run_experiment(IdleTimeoutSweep(), cfg, tmp_path, workers=1)
    assert (tmp_path / "records.csv").is_file() and (tmp_path / "summary.md").is_file()
    assert not list(tmp_path.glob("*.png")) and "![" not in (tmp_path / "summary.md").read_text()
    assert len(result.records) == 2
    assert report_plots.PLOTS_SKIPPED in caplog.text


class _Squares(BaseModel):
    sizes: list[int] = [2, 3]
    with_instances: bool = True


class Squares(Experiment):
    """An experiment with a simulator of its own: its cells carry a task, run_cell carries it out; one cell is a
    small instance that is not a run to compare (metrics None), kept for its own table and section."""

    name = "test-squares"
    description = "tasks of the experiment's own"
    config_model = _Squares

    def grid(self, cfg):
        cells = [Cell({"size": n}, task=n) for n in cfg.sizes]
        return [*cells, Cell({"size": 0}, task="instance")] if cfg.with_instances else cells

    def run_cell(self, cell):
        if cell.task == "instance":
            return Outcome(None, "offline", raw={"ratio": 1.25})
        n = cell.task
        return Outcome({"energy_kwh": float(n * n), "jct_mean_s": 10.0 * n}, f"square-{n}", ["a basis"],
                       {"side": n}, raw={"ratio": None})  # fmt: skip

    def tables(self, cfg, cells, outcomes, out):
        path = out / "ratios.csv"
        pd.DataFrame([o.raw for o in outcomes]).to_csv(path, index=False)
        return [path]

    def sections(self, cfg, records, outcomes):
        table = pd.DataFrame(
            {"instance": ["a"], "ratio": [o.raw["ratio"] for o in outcomes if o.metrics is None]}
        )
        return [Section("Small instances", ["Online against offline."], table)] if cfg.with_instances else []


def test_an_experiment_with_its_own_simulator_and_sections(tmp_path):
    from wattsched.core.errors import WattschedError

    result = run_experiment(Squares(), _Squares(), tmp_path, workers=1)
    records = pd.read_csv(tmp_path / "records.csv")
    assert list(records["size"]) == [2, 3] and list(records["policy"]) == ["square-2", "square-3"]
    assert list(records["energy_kwh"]) == [4.0, 9.0] and list(records["side"]) == [2, 3]
    assert [o.raw["ratio"] for o in result.outcomes] == [None, None, 1.25]  # the instance kept, not a record
    assert (tmp_path / "ratios.csv").is_file() and tmp_path / "ratios.csv" in result.files
    summary = (tmp_path / "summary.md").read_text()
    assert "## Small instances" in summary and "| a | 1.25 |" in summary and "- a basis" in summary
    assert "common window" not in summary  # no run had a power tail to charge
    rows = rows_of(tmp_path)
    assert [r["jct_mean_s"] for r in rows] == [20.0, 30.0] and rows[0]["run"].endswith("size=2")
    only_instances = tmp_path / "instances"
    run_experiment(Squares(), _Squares(sizes=[]), only_instances, workers=1)
    with pytest.raises(WattschedError, match="no runs to compare: the test-squares experiment recorded none"):
        rows_of(only_instances)
