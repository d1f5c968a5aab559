"""What the command line imports before it runs a command (cli/lazy.py): `wattsched --help` and the light
commands import no heavy library and no experiment; `simulate` and each experiment's command are built when they
run or show their own help, with the help text they had when they were built up front."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from wattsched.cli.main import app
from wattsched.experiments import catalog
from wattsched.experiments.protocol import EXPERIMENTS

SRC = Path(__file__).resolve().parents[2] / "src"
HEAVY = ("pandas", "pyarrow", "scipy", "matplotlib", "numba")

# Runs `wattsched ARGS` and prints the top-level packages it imported (whatever the exit status).
IMPORTED = """
import sys
sys.argv = ["wattsched", *sys.argv[1:]]
from wattsched.cli.main import app
try:
    app()
except SystemExit:
    pass
print(" ".join(sorted({name.split(".")[0] for name in sys.modules})))
"""


def imported_by(*args: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", IMPORTED, *args],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(SRC), "PATH": "", "COLUMNS": "100"},
    )
    return set(proc.stdout.splitlines()[-1].split())


def test_importing_the_cli_imports_no_heavy_library():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import wattsched.cli.main"],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(SRC), "PATH": ""},
    )
    modules = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert not heavy, heavy
    experiments = sorted(m for m in modules if re.fullmatch(r"wattsched\.experiments\.\w+", m))
    assert experiments == ["wattsched.experiments.catalog"], experiments


def test_help_imports_neither_heavy_libraries_nor_the_config_models():
    imported = imported_by("--help")
    assert not imported & {*HEAVY, "numpy", "pydantic"}, sorted(imported & {*HEAVY, "numpy", "pydantic"})


@pytest.mark.parametrize(
    "args",
    [["simulate", "--help"], ["workloads"], ["clusters"], ["signals", "--help"], ["serve", "--help"]],
    ids=" ".join,
)
def test_light_commands_import_no_heavy_library(args):
    imported = imported_by(*args)
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def _groups():
    """(group, its context) of the app and of `experiment`: the groups with lazily built commands."""
    root = typer.main.get_command(app)
    ctx = root.make_context("wattsched", [], resilient_parsing=True)
    experiment = root.get_command(ctx, "experiment")
    return [
        (root, ctx),
        (experiment, experiment.make_context("experiment", [], parent=ctx, resilient_parsing=True)),
    ]


def test_a_lazy_command_is_built_when_it_is_asked_for_and_once():
    root, ctx = _groups()[0]
    stand_in = root.commands["simulate"]
    assert not stand_in.params  # a stand-in until the group builds it
    built = root.get_command(ctx, "simulate")
    assert built is not stand_in and "--jobs" in {o for p in built.params for o in p.opts}
    assert root.get_command(ctx, "simulate") is built


def test_a_group_lists_a_stand_in_as_its_command():
    """What a group's --help shows of a command (help, short help, panel, hidden, deprecated) is the same for
    the stand-in as for the command built: a stand-in without a help text is built to be listed."""
    shown = ("help", "short_help", "hidden", "deprecated", "rich_help_panel")
    checked = 0
    for group, ctx in _groups():
        for name, stand_in in list(group.commands.items()):
            if getattr(stand_in.callback, "load_callback", None) is None:
                continue
            built = group.get_command(ctx, name)
            if stand_in.help is None:
                assert built.help, name
                continue
            assert [getattr(stand_in, a, None) for a in shown] == [getattr(built, a, None) for a in shown], (
                name
            )
            checked += 1
    assert checked  # simulate at least


def test_the_catalog_lists_every_registered_experiment_under_its_module():
    """Each module registers the name it is listed under, and no module registers one the catalog lacks."""
    here = Path(catalog.__file__).parent
    registered = {}
    for path in here.glob("*.py"):
        for name in re.findall(r'@EXPERIMENTS\.register\("([a-z0-9-]+)"\)', path.read_text(encoding="utf-8")):
            registered[name] = path.stem
    assert registered == catalog.EXPERIMENT_MODULES
    assert catalog.experiment_names() == sorted(registered)
    catalog.load_all()
    assert set(catalog.experiment_names()) <= set(
        EXPERIMENTS.names()
    )  # tests register experiments of their own


def test_an_unknown_experiment_lists_the_catalog():
    from wattsched.core.errors import UnknownNameError
    from wattsched.experiments.protocol import experiment

    with pytest.raises(UnknownNameError) as info:
        experiment("no-such-experiment")
    assert "powerflow" in str(info.value)
