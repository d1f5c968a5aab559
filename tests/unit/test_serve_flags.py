"""`wattsched serve ...`: the run-setting flags (policies, energy, signals, seed) are generated from the run config
as `simulate`'s are (cli/options.py with_setting_options): the same names, types, checks, error lines and help
(apart from a sentence on the live meaning and a command's own default); the older names still parse."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import click
import pytest
import typer
from typer.testing import CliRunner

from wattsched.cli import serve
from wattsched.cli.main import app
from wattsched.cli.options import config_options, setting_path
from wattsched.experiments.config import SimulationConfig

runner = CliRunner()

# The run settings of each serve command, by flat key; every other flag of it is the service's own.
_SIGNALS = ["region", "year", "price_csv", "carbon_csv", "signal_tz", "carbon_kind", "signal_max_gap_hours",
            "signal_fill"]  # fmt: skip
SETTINGS = {
    "slurm": [
        "queue",
        "placement",
        "allocation",
        "round_s",
        "power_states.idle_timeout_s",
        "checkpoint_interval_s",
        *_SIGNALS,
        "seed",
    ],
    "check": ["placement", "seed"],
    "k8s-extender": ["placement", "workload", "seed"],
    "k8s-scheduler": [
        "placement",
        "queue",
        "allocation",
        "round_s",
        "power_manager",
        "power_states.idle_timeout_s",
        *_SIGNALS,
        "workload",
        "seed",
    ],
}
# A command's own default where it differs from simulate's (None: none shown; unset unless given).
OWN_DEFAULTS = {
    ("k8s-extender", "placement"): "fgd",
    ("k8s-extender", "workload"): None,
    ("k8s-scheduler", "placement"): "fgd",
    ("k8s-scheduler", "queue"): None,
    ("k8s-scheduler", "power_manager"): None,
    ("k8s-scheduler", "workload"): None,
}
# Older serve names, kept as hidden aliases: (command, old flag, simulate's flag, value, setting path).
ALIASES = [
    ("slurm", "--checkpoint-interval", "--checkpoint-interval-s", "600", ("perf", "checkpoint_interval_s")),
    ("slurm", "--idle-timeout", "--idle-timeout-s", "300", ("energy", "power_states", "idle_timeout_s")),
    (
        "k8s-scheduler",
        "--idle-timeout",
        "--idle-timeout-s",
        "300",
        ("energy", "power_states", "idle_timeout_s"),
    ),
]
_DEFAULT = re.compile(r"\s*\[default: ([^\]]*)\]$")


def _command(*path: str) -> Any:
    command: Any = typer.main.get_command(app)
    for name in path:  # get_command: `serve` is built when first used (cli/lazy.py)
        command = command.get_command(click.Context(command), name)
    return command


def _params(*path: str) -> dict[str, Any]:
    return {p.name: p for p in _command(*path).params}


def _split_default(text: str) -> tuple[str, str | None]:
    text = text.replace("\\[", "[")  # help is escaped for rich
    match = _DEFAULT.search(text)
    return (text[: match.start()], match.group(1)) if match else (text, None)


def _get(cfg: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        cfg = getattr(cfg, key)
    return cfg


@pytest.mark.parametrize("name", list(SETTINGS))
def test_run_setting_flags_are_simulates(name):
    sim = _params("simulate")
    params = _params("serve", name)
    generated = {n: p for n, p in params.items() if n.startswith("opt_") and not p.hidden}
    expected = {"opt_" + "_".join(setting_path(SimulationConfig, key)): key for key in SETTINGS[name]}
    assert set(generated) == set(expected)
    for param_name, param in generated.items():
        twin = sim[param_name]  # simulate's option of the same setting
        assert (param.opts, param.secondary_opts) == (twin.opts, twin.secondary_opts), param_name
        assert param.type_descriptor.annotation == twin.type_descriptor.annotation, param_name
        assert param.metavar == twin.metavar, param_name
        text, default = _split_default(param.help)
        sim_text, sim_default = _split_default(twin.help)
        # the same help, or it with one sentence on the live meaning
        assert text == sim_text or text.startswith(sim_text + ". Live"), (name, param_name, text)
        key = expected[param_name]
        own = OWN_DEFAULTS.get((name, key), sim_default)
        assert default == own, (name, key)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_every_flag_of_a_setting_is_generated(name):
    """A serve flag named like one of simulate's settings is that setting's generated option, never one written
    by hand; the hidden aliases are no setting's flag."""
    setting_flags = {o.flag for o in config_options(SimulationConfig)}
    setting_flags |= {"--no-" + f[2:] for f in setting_flags}
    for param in _params("serve", name).values():
        flags = set(param.opts) | set(param.secondary_opts)
        if param.name.startswith("opt_") and param.hidden:
            assert not flags & setting_flags, param.name
        elif not param.name.startswith("opt_"):
            assert not flags & setting_flags, f"serve {name}: {flags & setting_flags} written by hand"


def _run_settings(name: str, args: list[str]) -> SimulationConfig:
    """The run settings the command would run with, parsed as typer parses them (nothing is started)."""
    command = _command("serve", name)
    ctx = command.make_context(name, list(args))
    function = getattr(serve, name.replace("-", "_"))
    return function.run_settings(ctx.params)


@pytest.mark.parametrize(
    ("name", "old", "new", "value", "path"), ALIASES, ids=[f"{a[0]} {a[1]}" for a in ALIASES]
)
def test_old_names_parse_to_the_same_setting(name, old, new, value, path):
    by_old = _run_settings(name, [old, value])
    by_new = _run_settings(name, [new, value])
    assert _get(by_old, path) == _get(by_new, path) == float(value)
    assert by_old == by_new
    assert _get(_run_settings(name, []), path) != float(value)  # not the default
    hidden = [p for p in _params("serve", name).values() if old in p.opts]
    assert len(hidden) == 1 and hidden[0].hidden  # accepted, not shown
    res = runner.invoke(app, ["serve", name, "--help"], terminal_width=200)
    assert new in res.output and not re.search(re.escape(old) + r"(?![\w-])", res.output)
    both = runner.invoke(app, ["serve", name, old, value, new, value])
    assert both.exit_code == 2 and "old name" in both.output


def test_a_commands_own_defaults_apply_and_given_values_win():
    cfg = _run_settings("k8s-scheduler", [])
    assert cfg.scheduler.placement == "fgd"
    assert (
        "queue" not in cfg.scheduler.model_fields_set and "power_manager" not in cfg.energy.model_fields_set
    )
    cfg = _run_settings("k8s-scheduler", ["--placement", "best-fit", "--queue", "sjf", "--power-manager",
                                          "forecast"])  # fmt: skip
    assert (cfg.scheduler.placement, cfg.scheduler.queue, cfg.energy.power_manager) == (
        "best-fit",
        "sjf",
        "forecast",
    )
    assert _run_settings("slurm", []).scheduler.placement == "best-fit"
    assert _run_settings("k8s-extender", ["--workload", "alibaba-v2023/default"]).workload.name == (
        "alibaba-v2023/default"
    )


# A bad value: simulate's one error line, word for word.
BAD = [
    ("slurm", ["--round-s", "-5"]),
    ("slurm", ["--checkpoint-interval-s", "-1"]),
    ("slurm", ["--checkpoint-interval", "-1"]),
    ("slurm", ["--idle-timeout-s", "0"]),
    ("slurm", ["--idle-timeout", "0"]),
    ("slurm", ["--carbon-kind", "nope"]),
    ("k8s-scheduler", ["--round-s", "0"]),
    ("k8s-scheduler", ["--idle-timeout", "-3"]),
    ("k8s-scheduler", ["--signal-max-gap-hours", "-1"]),
]


def _sim_args(args: list[str]) -> list[str]:
    renamed = {"--checkpoint-interval": "--checkpoint-interval-s", "--idle-timeout": "--idle-timeout-s"}
    return [renamed.get(a, a) for a in args]


@pytest.mark.parametrize(("name", "args"), BAD, ids=[f"{n} {' '.join(a)}" for n, a in BAD])
def test_bad_values_are_simulates_one_error_line(tmp_path, name, args):
    res = runner.invoke(app, ["serve", name, *args, "--max-steps", "0"])
    sim = runner.invoke(app, ["simulate", "--jobs", "5", *_sim_args(args), "--out", str(tmp_path / "r")])
    assert res.exit_code == sim.exit_code == 2, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: command line: field "), res.stderr
    assert lines == sim.stderr.splitlines()
    assert "Traceback" not in res.output


def test_a_bad_type_is_a_usage_error_naming_the_flag():
    for name in ("slurm", "k8s-scheduler"):
        res = runner.invoke(app, ["serve", name, "--year", "twenty"])
        assert res.exit_code == 2 and "--year" in res.output and "Traceback" not in res.output


def test_an_unknown_placement_is_simulates_error_line(tmp_path):
    res = runner.invoke(app, ["serve", "k8s-extender", "--offline", "default", "--placement", "nope"])
    sim = runner.invoke(app, ["simulate", "--jobs", "5", "--placement", "nope", "--out", str(tmp_path / "r")])
    assert res.exit_code == sim.exit_code == 2
    assert res.stderr.splitlines() == sim.stderr.splitlines()
    assert res.stderr.startswith("error: unknown placement policy 'nope'")


class _Driver:
    """LiveDriver's stand-in: records what serve slurm builds it with, runs nothing."""

    built: ClassVar[dict[str, Any]] = {}

    def __init__(self, backend, scheduler, store, **kwargs):
        type(self).built = {"backend": backend, "scheduler": scheduler, **kwargs}
        self.store = store

    def run(self, interval, stop, max_steps) -> None:
        pass


@pytest.mark.parametrize("names", ["new", "old"])
def test_serve_slurm_runs_with_the_settings(tmp_path, monkeypatch, names):
    import wattsched.backends.driver as driver

    monkeypatch.setattr(driver, "LiveDriver", _Driver)
    monkeypatch.setattr(serve.signal, "signal", lambda *_: None)  # the test process keeps its handlers
    interval, idle = ("--checkpoint-interval", "--idle-timeout") if names == "old" else (
        "--checkpoint-interval-s", "--idle-timeout-s")  # fmt: skip
    args = ["serve", "slurm", "--queue", "sjf", "--placement", "first-fit", "--power", "idle-timeout", idle, "300",
            interval, "600", "--seed", "7", "--metrics-port", "0", "--state-db", str(tmp_path / "db")]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    built = _Driver.built
    assert built["seed"] == 7 and built["checkpoint_interval_s"] == 600.0
    assert built["power_manager"].name == "idle-timeout" and built["power_manager"].timeout == 300.0
    assert built["backend"].wakes_nodes_for_jobs is False and built["signals_for"] is None
    assert "sjf" in built["scheduler"].name and "first-fit" in built["scheduler"].name
