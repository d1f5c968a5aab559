"""The run config's two forms (experiments/config.py): the nested one (canonical, written to config.resolved.yaml)
and the flat one of earlier config files and code. Every flat key maps to exactly one nested setting and back,
mixing the forms for one setting is an error naming it, a bad value in either form is located by file, line and
field, and `wattsched simulate` keeps one flag per leaf setting."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from wattsched.cli.main import app
from wattsched.cli.options import config_options
from wattsched.core.errors import InputError
from wattsched.experiments.config import (
    FLAT_KEYS,
    GROUPS,
    SimulationConfig,
    flat_settings,
    nest_settings,
    resolve_config,
)
from wattsched.experiments.jobmodel import resolved_job_model

# One valid non-default value per flat key (a new setting needs one here), with what it needs beside it.
SAMPLE: dict[str, Any] = {
    "workload": "philly",
    "columns": {"submit_time": "submission_time"},
    "max_jobs": 9,
    "deadline_slack": 1.5,
    "services": "default",
    "skip_invalid": True,
    "assign_models": "always",
    "inflate": 1.1,
    "shuffle": False,
    "synthetic": {"num_jobs": 33},
    "mode": "packing",
    "queue": "sjf",
    "placement": "first-fit",
    "allocation": "tiresias",
    "round_s": 120.0,
    "round_on_events": True,
    "energy_budget_kwh": 250.0,
    "energy_budget_until_s": 86400.0,
    "performance": "tables",
    "gpu_loads": "eaco-measured",
    "profiles": "a.csv",
    "sharing_model": "eaco",
    "sharing_noise": 0.1,
    "checkpoint_interval_s": 600.0,
    "restart_model": "fixed",
    "restart_delay_s": 45.0,
    "energy": False,
    "power_model": "dvfs",
    "power_manager": "idle-timeout",
    "node_base_w": 150.0,
    "pue": 1.2,
    "gpu_power_limit": 0.8,
    "gpu_sm_clock": 0.7,
    "governor": "energy-optimal",
    "power_states": {"boot_time_s": 100.0},
    "region": "US-CAL-CISO",
    "year": 2022,
    "price_csv": "prices.csv",
    "carbon_csv": "carbon.csv",
    "signal_tz": "Europe/Berlin",
    "align": "offset",
    "grid_start": datetime(2023, 3, 1),
    "wrap": "error",
    "carbon_kind": "lca",
    "signal_max_gap_hours": 3,
    "signal_fill": "hold",
}
NEEDS = {k: {"power_model": "dvfs"} for k in ("gpu_power_limit", "gpu_sm_clock", "governor")}
TOP_LEVEL = {"cluster": "n16g4", "gpu_type": "T4", "seed": 7, "data_dir": "/data", "check_invariants": True}


def _nested(key: str, value: Any) -> dict[str, Any]:
    group, name = FLAT_KEYS[key]
    return {group: {name: value}}


def _dump(cfg: SimulationConfig) -> dict[str, Any]:
    return json.loads(cfg.model_dump_json())


def test_every_group_field_has_exactly_one_flat_key():
    fields = [(g, f) for g, model in GROUPS.items() for f in model.model_fields]
    assert sorted(FLAT_KEYS.values()) == sorted(fields)  # one flat key per field, each field once
    assert not set(FLAT_KEYS) & (
        set(SimulationConfig.model_fields) - set(GROUPS)
    )  # no clash with a top-level one
    assert set(SAMPLE) == set(FLAT_KEYS)
    assert (FLAT_KEYS["workload"], FLAT_KEYS["energy"]) == (("workload", "name"), ("energy", "enabled"))


@pytest.mark.parametrize("key", sorted(FLAT_KEYS))
def test_a_flat_key_lands_on_its_one_nested_setting_and_back(key):
    extra = NEEDS.get(key, {})
    flat = SimulationConfig(**{key: SAMPLE[key]}, **extra)
    nested = SimulationConfig(**_nested(key, SAMPLE[key]), **{k: v for k, v in extra.items()})
    assert flat == nested
    group, name = FLAT_KEYS[key]
    value = getattr(getattr(flat, group), name)
    assert value != getattr(getattr(SimulationConfig(), group), name)  # the sample is not the default
    # only this setting (and what it needs) moved off its default
    base = flat_settings(_dump(SimulationConfig(**extra)))
    moved = {k for k, v in flat_settings(_dump(flat)).items() if v != base[k]}
    assert moved == {key} | ({"sharing_model"} if key == "profiles" else set())  # profiles: measured sharing
    # nested -> flat: the same key, the same value
    assert flat.flat()[key] == value
    again = SimulationConfig(**flat_settings(_dump(flat)))
    assert again == flat


def test_all_flat_keys_at_once_round_trip():
    flat = {k: v for k, v in SAMPLE.items() if k != "gpu_sm_clock"}  # it excludes gpu_power_limit
    cfg = SimulationConfig(**flat, **TOP_LEVEL)
    nested = nest_settings({**flat, **TOP_LEVEL})
    assert set(nested) == set(GROUPS) | set(TOP_LEVEL)
    assert SimulationConfig(**nested) == cfg
    out = cfg.flat()
    for key, value in flat.items():
        got = out[key]
        assert (got.model_dump(exclude_unset=True) if isinstance(got, BaseModel) else got) == value, key
    assert flat_settings(nested) == {**flat, **TOP_LEVEL}
    assert SimulationConfig(**flat_settings(_dump(cfg))) == cfg


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(set(SAMPLE) - {"gpu_sm_clock"})), st.booleans()))
def test_settings_may_be_given_in_either_form_side_by_side(forms):
    """Any split of settings between the flat and the nested form gives the same config."""
    chosen = {"power_model": "dvfs", **{k: SAMPLE[k] for k in forms}}  # dvfs: gpu_power_limit and governor
    forms = {"power_model": True, **forms}
    data: dict[str, Any] = {}
    for key, as_flat in forms.items():
        if not as_flat:
            group, name = FLAT_KEYS[key]
            data.setdefault(group, {})[name] = chosen[key]
    for key, as_flat in forms.items():
        if (
            as_flat and key in GROUPS and key in data
        ):  # `workload`/`energy` and their group: one key in a mapping
            data[key][FLAT_KEYS[key][1]] = chosen[key]
        elif as_flat:
            data[key] = chosen[key]
    want: dict[str, Any] = {}
    for key, value in chosen.items():
        group, name = FLAT_KEYS[key]
        want.setdefault(group, {})[name] = value
    assert SimulationConfig.model_validate(data) == SimulationConfig.model_validate(want)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"queue": "sjf", "scheduler": {"queue": "fifo"}}, "queue"),
        ({"synthetic": {"num_jobs": 3}, "workload": {"synthetic": {"arrival": "bursty"}}}, "synthetic"),
        ({"region": "DE-LU", "signals": {"region": "US-CAL-CISO"}}, "region"),
    ],
)
def test_one_setting_in_both_forms_is_an_error_naming_it(data, key):
    with pytest.raises(ValidationError, match=rf"{key} is given twice"):
        SimulationConfig.model_validate(data)


def test_the_two_flat_keys_named_like_their_group():
    assert SimulationConfig(workload="philly").workload.name == "philly"
    assert SimulationConfig(workload={"name": "philly", "max_jobs": 5}).workload.max_jobs == 5
    assert SimulationConfig(energy=False).energy.enabled is False
    assert SimulationConfig(energy={"enabled": False, "pue": 1.5}).energy.pue == 1.5
    assert SimulationConfig(workload="philly", max_jobs=5).workload.max_jobs == 5  # flat beside flat
    assert SimulationConfig(workload={"max_jobs": 5}, columns={"a": "b"}).workload.columns == {"a": "b"}


def test_model_copy_takes_flat_keys_too():
    base = SimulationConfig(profiles="p.csv")
    copy = base.model_copy(update={"queue": "sjf", "energy": False, "seed": 3})
    assert (copy.scheduler.queue, copy.energy.enabled, copy.seed) == ("sjf", False, 3)
    assert copy.perf == base.perf and base.scheduler.queue == "fifo"
    with pytest.raises(ValueError, match="'queu' is not a setting"):
        base.model_copy(update={"queu": "sjf"})


def test_validators_see_settings_in_either_form():
    with pytest.raises(ValidationError, match="need power_model: dvfs"):
        SimulationConfig(energy={"gpu_power_limit": 0.8})
    assert SimulationConfig(gpu_power_limit=0.8, energy={"power_model": "dvfs"}).energy.gpu_power_limit == 0.8
    assert SimulationConfig(perf={"profiles": "p.csv"}).perf.sharing_model == "measured"


# --- resolve_config: files in either form, and their errors --------------------------------------------------
def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text",
    [
        "queue: sjf\nround_s: 60\nworkload: philly\nenergy: false\nsynthetic:\n  num_jobs: 5\n",
        "scheduler:\n  queue: sjf\n  round_s: 60\nworkload:\n  name: philly\n  synthetic:\n    num_jobs: 5\n"
        "energy:\n  enabled: false\n",
        "queue: sjf\nscheduler:\n  round_s: 60\nworkload:\n  name: philly\n  synthetic:\n    num_jobs: 5\n"
        "energy: false\n",
    ],
    ids=["flat", "nested", "both"],
)
def test_config_files_in_either_form_resolve_alike(tmp_path, text):
    cfg = resolve_config(_file(tmp_path, text), {"scheduler": {"placement": "first-fit"}})
    assert (cfg.scheduler.queue, cfg.scheduler.round_s, cfg.scheduler.placement) == ("sjf", 60.0, "first-fit")
    assert (cfg.workload.name, cfg.workload.synthetic.num_jobs, cfg.energy.enabled) == ("philly", 5, False)


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ("seed: 1\nround_s: -5\n", 2, "round_s", "greater than 0"),
        ("seed: 1\nscheduler:\n  queue: fifo\n  round_s: -5\n", 4, "scheduler.round_s", "greater than 0"),
        (
            "seed: 1\npower_states:\n  boot_time_s: -1\n",
            3,
            "power_states.boot_time_s",
            "greater than or equal",
        ),
        ("energy:\n  power_states:\n    boot_time_s: -1\n", 3, "energy.power_states.boot_time_s", "greater"),
        ("queue: fifo\nplacment: best-fit\n", 2, "placment", "Extra inputs"),
        ("scheduler:\n  placment: best-fit\n", 2, "scheduler.placment", "Extra inputs"),
        ("seed: 1\nworkload: 5\n", 2, "workload", "valid string"),
        ("seed: 1\nworkload:\n  name: 5\n", 3, "workload.name", "valid string"),
        ("seed: 1\nenergy: maybe\n", 2, "energy", "valid boolean"),
        ("seed: 1\nenergy:\n  enabled: maybe\n", 3, "energy.enabled", "valid boolean"),
        ("scheduler: 5\n", 1, "scheduler", "valid dictionary"),
        ("seed: 1\nqueue: sjf\nscheduler:\n  queue: fifo\n", 2, "queue", "queue is given twice"),
    ],
)
def test_bad_values_are_located_in_either_form(tmp_path, text, line, field, message):
    path = _file(tmp_path, text)
    with pytest.raises(InputError) as info:
        resolve_config(path, {})
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field)
    assert message in err.message


def test_a_bad_flag_is_the_command_lines_even_over_a_file_setting(tmp_path):
    path = _file(tmp_path, "round_s: 60\n")
    with pytest.raises(InputError) as info:
        resolve_config(path, {"scheduler": {"round_s": -5}})
    assert (info.value.path, info.value.line, info.value.field) == ("command line", None, "round_s")


def test_a_groups_own_check_names_the_file_that_set_it(tmp_path):
    with pytest.raises(InputError, match=r"cfg\.yaml: .*need power_model: dvfs") as info:
        resolve_config(_file(tmp_path, "gpu_power_limit: 0.8\n"), {})
    assert info.value.field is None
    with pytest.raises(InputError, match=r"^command line: .*need power_model: dvfs"):
        resolve_config(None, {"energy": {"gpu_power_limit": 0.8}})


# --- run directories ---------------------------------------------------------------------------------------
def test_resolved_config_is_nested_and_reads_back(tmp_path):
    cfg = SimulationConfig(queue="sjf", region="DE-LU", power_states={"boot_time_s": 10.0})
    path = _file(tmp_path, yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    written = yaml.safe_load(path.read_text())
    assert set(written) == set(SimulationConfig.model_fields)
    assert written["scheduler"]["queue"] == "sjf" and written["signals"]["region"] == "DE-LU"
    assert resolve_config(path, {}) == cfg
    # a run directory of the flat form (written before the nested one) reads alike, and compares as the same job
    old = _file(tmp_path, yaml.safe_dump(flat_settings(cfg.model_dump(mode="json")), sort_keys=False))
    assert "queue" in yaml.safe_load(old.read_text())
    assert resolve_config(old, {}) == cfg
    assert resolved_job_model(yaml.safe_load(old.read_text())) == resolved_job_model(written)


# --- the flags -------------------------------------------------------------------------------------------------
# `wattsched simulate`'s config flags, as they were when the config was flat (they must not change).
SIMULATE_FLAGS = """
--align --allocation --arrival --assign-models --boot-time-s --burst-amplitude --burst-period-s --carbon-csv
--carbon-kind --check-invariants --checkpoint-interval-s --cluster --columns --cpu-milli-per-gpu
--cpu-only-cpu-milli --data-dir --deadline-slack --duration-max-s --duration-median-s --duration-min-s
--duration-sigma --energy --energy-budget-kwh --energy-budget-until-s --forecast-buffer-frac
--forecast-history-s --forecast-interval-s --forecast-season-s --governor --gpu-loads --gpu-power-limit
--gpu-sm-clock --gpu-type --grid-start --idle-timeout-s --inference-fraction --inflate --jobs --max-jobs
--mean-interarrival-s --memory-mib-per-gpu --mode --models --node-base-w --off-power-w --performance --placement
--power-manager --power-model --price-csv --profiles --pue --queue --region --restart-delay-s --restart-model
--round-on-events --round-s --seed --services --share-fraction --share-milli --sharing-model --sharing-noise
--shuffle --shutdown-time-s --signal-fill --signal-max-gap-hours --signal-tz --skip-invalid --workload --wrap
--year
""".split()  # noqa: SIM905 (a list of words reads better as lines of words)


def _leaf_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for name, info in model.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            out += _leaf_paths(info.annotation, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


def test_simulate_flags_are_the_leaf_settings_ones_unchanged_and_unique():
    options = config_options(SimulationConfig)
    flags = [o.flag for o in options]
    assert not [f for f, n in Counter(flags).items() if n > 1]  # no two settings share a flag
    leaves = {p for p in _leaf_paths(SimulationConfig) if p != ("workload", "synthetic", "gpu_count_mix")}
    assert {o.path for o in options} == leaves  # one flag per leaf setting (a mapping of ints is file only)
    assert sorted(flags) == sorted(SIMULATE_FLAGS)
    root: Any = typer.main.get_command(app)  # a group: it builds simulate when asked (cli/lazy.py)
    command = root.get_command(root.make_context("wattsched", [], resilient_parsing=True), "simulate")
    given = {o for p in command.params for o in p.opts} - {"--config", "--out", "--quiet"}
    assert given == set(SIMULATE_FLAGS)
    # the flat key of each group setting is its flag's name, but for the renamed synthetic job count
    by_path = {o.path: o.flag for o in options}
    for key, (group, name) in FLAT_KEYS.items():
        if (group, name) in by_path:
            assert by_path[(group, name)] == "--" + key.replace("_", "-"), key
