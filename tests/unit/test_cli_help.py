"""Every command's --help: no pydantic placeholders, no help text lost to Rich markup, no tracker references."""

import re

import pytest
import typer
from rich.text import Text
from typer.testing import CliRunner

from wattsched.cli.main import app

runner = CliRunner()


def _commands():
    """(argv path, click command) for the app and every sub-command, depth first; a group's commands as it
    resolves them (a lazily built command is built, cli/lazy.py)."""
    out = []

    def walk(command, path, ctx):
        out.append((path, command))
        if hasattr(command, "list_commands"):
            for name in sorted(command.list_commands(ctx)):
                sub = command.get_command(ctx, name)
                walk(sub, [*path, name], sub.make_context(name, [], parent=ctx, resilient_parsing=True))

    root = typer.main.get_command(app)
    walk(root, [], root.make_context("wattsched", [], resilient_parsing=True))
    return out


COMMANDS = _commands()
IDS = [" ".join(path) or "wattsched" for path, _ in COMMANDS]


def test_the_walk_reaches_nested_commands():
    assert {"simulate", "experiment cedla", "signals show", "serve slurm"} <= set(IDS)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_help_has_no_placeholders_or_tracker_references(path, command):
    res = runner.invoke(app, [*path, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "PydanticUndefined" not in res.output
    assert not re.search(r"\bissue\s*#?\d+", res.output, re.IGNORECASE), res.output


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_no_help_text_is_eaten_as_markup(path, command):
    """Rich reads ``[word]`` as a style tag and drops it; every bracket meant as text must be escaped."""
    texts = {"(command)": command.help or ""}
    texts.update({p.name: getattr(p, "help", None) or "" for p in command.params})
    for name, text in texts.items():
        shown = Text.from_markup(text).plain
        assert shown == text.replace("\\[", "["), f"{' '.join(path)} {name}: {text!r} is shown as {shown!r}"


def test_the_ray_extra_is_shown_where_the_backend_option_is():
    experiments = [path for path, _ in COMMANDS if path[:1] == ["experiment"] and len(path) == 2]
    assert experiments
    for path in experiments:
        res = runner.invoke(app, [*path, "--help"], terminal_width=400)
        assert "wattsched[ray]" in res.output, (path, res.output)
