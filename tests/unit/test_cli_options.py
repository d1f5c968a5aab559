"""`wattsched simulate` flags generated from SimulationConfig (cli/options.py): every leaf setting has a flag,
every flag lands on its setting, and a bad allocation name is a one-line error."""

from __future__ import annotations

import json
import types
import typing
from datetime import datetime
from pathlib import Path
from typing import Literal

import pytest
import typer
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

import wattsched.experiments.run as run_module  # the CLI imports run_simulation from it when a run starts
from wattsched.cli.main import app
from wattsched.cli.options import config_options
from wattsched.experiments.config import FLAT_KEYS, SimulationConfig

runner = CliRunner()
PERFDATA = Path(__file__).resolve().parent.parent / "fixtures" / "perfdata"

# Settings that are mappings or lists: config file only (cli/options.py says so for every such field), except
# str -> str mappings, which are repeatable KEY=VALUE flags.
FILE_ONLY = {"workload.synthetic.gpu_count_mix"}
KEY_VALUE = {"workload.columns"}
LISTS = {"workload.synthetic.share_milli", "workload.synthetic.models"}  # one comma-separated flag each
# Settings whose flag is not --<field-name> (named in the field's metadata).
RENAMED = {
    "workload.synthetic.num_jobs": "--jobs",
    "workload.name": "--workload",
    "energy.enabled": "--energy",
}


def nested(path: str) -> str:
    """The nested path of a setting given by its flat key (``power_states.boot_time_s`` ->
    ``energy.power_states.boot_time_s``; a top-level setting as it is)."""
    head, _, rest = path.partition(".")
    if head not in FLAT_KEYS:
        return path
    return ".".join((*FLAT_KEYS[head], *([rest] if rest else [])))


def _scalar(annotation):
    """The non-None member of an optional annotation; None for a union of several types."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else None
    return annotation


def leaves(model: type[BaseModel], prefix: str = "") -> dict[str, object]:
    """Dotted path -> annotation of every leaf field, nested models walked."""
    out: dict[str, object] = {}
    for name, info in model.model_fields.items():
        annotation = _scalar(info.annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out.update(leaves(annotation, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = annotation
    return out


def simulate_params() -> dict[str, object]:
    root = typer.main.get_command(app)
    command = root.get_command(root.make_context("wattsched", [], resilient_parsing=True), "simulate")
    return {opt: p for p in command.params for opt in [*p.opts, *p.secondary_opts]}


def expected_flag(path: str) -> str:
    return RENAMED.get(path, "--" + path.rsplit(".", 1)[-1].replace("_", "-"))


def test_every_leaf_setting_has_a_flag_or_is_file_only():
    all_leaves = leaves(SimulationConfig)
    assert {
        "energy.power_states.boot_time_s",
        "workload.synthetic.num_jobs",
        "scheduler.round_s",
        "gpu_type",
    } <= set(all_leaves)
    params = simulate_params()
    file_only = set()
    for path, annotation in all_leaves.items():
        origin = typing.get_origin(annotation)
        if annotation == dict[str, str]:
            assert path in KEY_VALUE and expected_flag(path) in params, path
            continue
        if origin is list and typing.get_args(annotation)[0] in (str, int, float):
            assert path in LISTS and expected_flag(path) in params, path
            continue
        if origin in (dict, list) or annotation in (dict, list):
            file_only.add(path)
            continue
        assert annotation in (str, int, float, bool, datetime) or origin is Literal, (path, annotation)
        flag = expected_flag(path)
        assert flag in params, f"config field {path} has no flag {flag}"
        if annotation is bool:
            assert "--no-" + flag[2:] in params[flag].secondary_opts, path
    assert file_only == FILE_ONLY
    # the generated options are exactly the scalar leaves, with their dotted paths
    generated = {".".join(o.path): o.flag for o in config_options(SimulationConfig)}
    assert generated == {p: expected_flag(p) for p in all_leaves if p not in FILE_ONLY}


# One non-default value per flag, by the setting's flat key (nested() gives its path); bool flags are given as
# --x / --no-x. Two invocations: gpu_power_limit and gpu_sm_clock exclude each other.
VALUES = {
    "workload": ("wl.csv", "wl.csv"),
    "columns": (
        "submit_time=submission_time, num_gpu=gpus",
        {"submit_time": "submission_time", "num_gpu": "gpus"},
    ),
    "cluster": ("n16g4", "n16g4"),
    "gpu_type": ("T4", "T4"),
    "mode": ("packing", "packing"),
    "queue": ("sjf", "sjf"),
    "placement": ("first-fit", "first-fit"),
    "allocation": ("tiresias", "tiresias"),
    "round_s": ("120", 120.0),
    "round_on_events": (None, True),
    "energy_budget_kwh": ("250", 250.0),
    "energy_budget_until_s": ("86400", 86400.0),
    "checkpoint_interval_s": ("600", 600.0),
    "restart_model": ("fixed", "fixed"),
    "sharing_model": ("eaco", "eaco"),
    "profiles": ("a.csv,b.csv", "a.csv,b.csv"),
    "gpu_loads": ("eaco-measured", "eaco-measured"),
    "sharing_noise": ("0.1", 0.1),
    "deadline_slack": ("1.5", 1.5),
    "services": ("default", "default"),
    "signal_tz": ("Europe/Berlin", "Europe/Berlin"),
    "restart_delay_s": ("45", 45.0),
    "performance": ("tables", "tables"),
    "assign_models": ("always", "always"),
    "seed": ("7", 7),
    "inflate": ("1.1", 1.1),
    "shuffle": (None, False),
    "max_jobs": ("9", 9),
    "skip_invalid": (None, True),
    "data_dir": ("/data", "/data"),
    "check_invariants": (None, True),
    "synthetic.num_jobs": ("33", 33),
    "synthetic.arrival": ("bursty", "bursty"),
    "synthetic.mean_interarrival_s": ("60", 60.0),
    "synthetic.burst_amplitude": ("0.5", 0.5),
    "synthetic.burst_period_s": ("3600", 3600.0),
    "synthetic.share_fraction": ("0.1", 0.1),
    "synthetic.duration_median_s": ("900", 900.0),
    "synthetic.duration_sigma": ("1", 1.0),
    "synthetic.duration_min_s": ("30", 30.0),
    "synthetic.duration_max_s": ("86400", 86400.0),
    "synthetic.inference_fraction": ("0.4", 0.4),
    "synthetic.cpu_milli_per_gpu": ("4000", 4000),
    "synthetic.share_milli": ("100,500", [100, 500]),
    "synthetic.models": ("resnet50,bert", ["resnet50", "bert"]),
    "synthetic.memory_mib_per_gpu": ("1024", 1024),
    "synthetic.cpu_only_cpu_milli": ("2000", 2000),
    "energy": (None, False),
    "power_model": ("dvfs", "dvfs"),
    "power_manager": ("idle-timeout", "idle-timeout"),
    "node_base_w": ("150", 150.0),
    "pue": ("1.2", 1.2),
    "power_states.boot_time_s": ("100", 100.0),
    "power_states.shutdown_time_s": ("30", 30.0),
    "power_states.off_power_w": ("5", 5.0),
    "power_states.idle_timeout_s": ("300", 300.0),
    "power_states.forecast_interval_s": ("900", 900.0),
    "power_states.forecast_history_s": ("7200", 7200.0),
    "power_states.forecast_season_s": ("43200", 43200.0),
    "power_states.forecast_buffer_frac": ("0.3", 0.3),
    "region": ("US-CAL-CISO", "US-CAL-CISO"),
    "year": ("2022", 2022),
    "price_csv": ("prices.csv", "prices.csv"),
    "carbon_csv": ("carbon.csv", "carbon.csv"),
    "align": ("offset", "offset"),
    "grid_start": ("2023-03-01T00:00:00", datetime(2023, 3, 1)),
    "wrap": ("error", "error"),
    "carbon_kind": ("lca", "lca"),
    "signal_max_gap_hours": ("3", 3),
    "signal_fill": ("hold", "hold"),
    "governor": ("energy-optimal", "energy-optimal"),
}
EXCLUSIVE = {"gpu_power_limit": ("0.8", 0.8), "gpu_sm_clock": ("0.7", 0.7)}


def _args(values: dict[str, tuple]) -> list[str]:
    args = []
    for path, (text, expected) in values.items():
        flag = expected_flag(nested(path))
        if text is None:  # a boolean switch
            args.append(flag if expected else "--no-" + flag[2:])
        else:
            args += [flag, text]
    return args


def _get(cfg: SimulationConfig, path: str):
    value = cfg
    for part in nested(path).split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("exclusive", list(EXCLUSIVE))
def test_every_flag_value_reaches_its_setting(monkeypatch, exclusive):
    covered = {nested(p) for p in [*VALUES, *EXCLUSIVE]} | FILE_ONLY
    assert covered == set(leaves(SimulationConfig))  # a new setting needs a value here
    seen = {}
    monkeypatch.setattr(run_module, "run_simulation", lambda cfg, out, progress: seen.setdefault("cfg", cfg))
    values = {**VALUES, exclusive: EXCLUSIVE[exclusive]}
    result = runner.invoke(app, ["simulate", "--quiet", *_args(values)])
    assert result.exit_code == 0, result.output
    cfg = seen["cfg"]
    for path, (_, expected) in values.items():
        assert _get(cfg, path) == expected, path
        assert _get(cfg, path) != _get(SimulationConfig(), path), f"{path}: value equals the default"
    other = next(k for k in EXCLUSIVE if k != exclusive)
    assert _get(cfg, other) is None


@pytest.mark.parametrize(
    "text",
    [
        "round_s: 90\npower_states:\n  boot_time_s: 50\n  shutdown_time_s: 20\nshuffle: false\n",  # flat
        "scheduler:\n  round_s: 90\nenergy:\n  power_states:\n    boot_time_s: 50\n    shutdown_time_s: 20\n"
        "workload:\n  shuffle: false\n",  # nested
    ],
    ids=["flat", "nested"],
)
def test_flags_override_the_config_file_and_unset_flags_leave_it(monkeypatch, tmp_path, text):
    seen = {}
    monkeypatch.setattr(run_module, "run_simulation", lambda cfg, out, progress: seen.setdefault("cfg", cfg))
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["simulate", "--config", str(path), "--boot-time-s", "75", "--quiet"])
    assert result.exit_code == 0, result.output
    cfg = seen["cfg"]
    assert cfg.scheduler.round_s == 90.0 and cfg.workload.shuffle is False
    states = cfg.energy.power_states
    assert (states.boot_time_s, states.shutdown_time_s) == (75.0, 20.0)


def test_flags_reach_the_resolved_config_of_a_run(tmp_path):
    out = tmp_path / "run"
    args = ["simulate", "--jobs", "12", "--allocation", "tiresias", "--round-s", "120", "--gpu-type", "T4"]
    args += [
        "--data-dir",
        str(PERFDATA),
        "--boot-time-s",
        "100",
        "--no-shuffle",
        "--out",
        str(out),
        "--quiet",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())  # the nested form
    assert resolved["scheduler"]["round_s"] == 120.0 and resolved["gpu_type"] == "T4"
    assert (
        resolved["scheduler"]["allocation"] == "tiresias"
        and resolved["workload"]["synthetic"]["num_jobs"] == 12
    )
    assert (
        resolved["energy"]["power_states"]["boot_time_s"] == 100.0
        and resolved["workload"]["shuffle"] is False
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policies"]["allocation"]["name"] == "tiresias" and summary["policies"]["round_s"] == 120.0
    assert summary["jobs_submitted"] == 12


def test_unknown_allocation_is_one_error_line(tmp_path):
    result = runner.invoke(
        app, ["simulate", "--jobs", "5", "--allocation", "nope", "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown allocation policy 'nope'"), result.stderr
    for name in ("gandiva", "optimus-greedy", "tiresias", "zeus-pl"):
        assert name in lines[0]
    assert not (tmp_path / "r" / "summary.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "nope"], "error: command line: field 'mode': Input should be 'temporal' or 'packing'"),
        (["--round-s", "-5"], "error: command line: field 'round_s': Input should be greater than 0"),
        (
            ["--boot-time-s", "-1"],
            "error: command line: field 'power_states.boot_time_s': Input should be greater",
        ),
        (["--gpu-power-limit", "0.8"], "gpu_power_limit, gpu_sm_clock and governor need power_model: dvfs"),
        (["--gpu-type", "X9"], "error: unknown GPU model 'X9'; valid GPU models: A10"),
    ],
)
def test_bad_flag_values_are_one_error_line(tmp_path, args, message):
    result = runner.invoke(app, ["simulate", "--jobs", "5", *args, "--out", str(tmp_path / "r")])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr


def test_profiles_choose_the_measured_sharing_model_unless_one_is_named():
    assert SimulationConfig(profiles="p.csv").perf.sharing_model == "measured"
    assert SimulationConfig(profiles="p.csv", sharing_model="slicing").perf.sharing_model == "slicing"
    assert SimulationConfig(perf={"profiles": "p.csv"}).perf.sharing_model == "measured"
    assert (
        SimulationConfig(profiles="p.csv", perf={"sharing_model": "slicing"}).perf.sharing_model == "slicing"
    )
    assert SimulationConfig().perf.sharing_model == "slicing"
