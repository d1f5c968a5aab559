"""Commands built when they run, not when the command line starts.

``simulate`` and each ``experiment <name>`` have one flag per field of a pydantic config, so building them imports
the config's modules and, through them, the simulator (pandas, the policies). A group of :class:`LazyGroup`
holds a stand-in for such a command: a command without parameters, carrying the function that loads the real one.
The group builds the real command when it is run or its own help is asked; listing the group's commands (its
``--help``) shows the stand-in's help text and loads nothing, unless the stand-in has none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

Loader = Callable[[], Callable[..., Any]]


def add_lazy_command(app: typer.Typer, name: str, load: Loader, help: str | None = None) -> None:
    """Register `name` on `app` (whose group class is :class:`LazyGroup`) as a stand-in for the command whose
    typer callback `load()` returns, or for the click command or group it returns. `help` is the real command's
    help text, which the group's own help lists (None: listing the group loads the real command to show its
    help)."""

    def stand_in() -> None:  # pragma: no cover - the group replaces it before it could run
        raise RuntimeError(f"{name}: the stand-in of a lazily built command was run")

    stand_in.load_callback = load  # type: ignore[attr-defined]  # typer copies it onto the command's callback
    stand_in.pretty_exceptions_short = app.pretty_exceptions_short  # type: ignore[attr-defined]
    app.command(name, help=help)(stand_in)


class LazyGroup(TyperGroup):
    """A typer group that builds its stand-in commands (:func:`add_lazy_command`) on first use."""

    _listing = False

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True  # the commands panel: stand-ins with a help text are shown as they are
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        callback = getattr(command, "callback", None)
        load: Loader | None = getattr(callback, "load_callback", None)
        if command is None or load is None or (self._listing and command.help is not None):
            return command
        pretty_short = getattr(callback, "pretty_exceptions_short", True)
        loaded = load()
        if isinstance(
            loaded, TyperGroup | TyperCommand
        ):  # a whole group of commands (e.g. `serve`), built as it is
            loaded.name, real = cmd_name, loaded
            real.rich_help_panel = getattr(command, "rich_help_panel", None)  # listed where the stand-in was
        else:
            real = _build_command(cmd_name, loaded, self.rich_markup_mode, pretty_short)
        self.commands[cmd_name] = real
        return real


def _build_command(name: str, callback: Callable[..., Any], markup: Any, pretty_short: bool) -> Any:
    """The click command typer builds for `callback` registered as `name` (typer's public way: an app of one
    command becomes that command)."""
    one = typer.Typer(add_completion=False, rich_markup_mode=markup, pretty_exceptions_short=pretty_short)
    one.command(name)(callback)
    return typer.main.get_command(one)
