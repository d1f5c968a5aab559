"""`wattsched experiment ...`: reproduction experiments that run a grid of policies x seeds.

One command per registered experiment (``experiments/protocol.py``), generated here from the experiment's config
(one flag per field, as ``simulate``'s are) plus the options every experiment shares. The names come from the
catalog, which imports nothing; a command is built, and its experiment's module imported, when it runs or its
help is shown (``cli/lazy.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from ..experiments.catalog import experiment_names
from .common import console, err_console, progress_bar, user_errors
from .lazy import LazyGroup, add_lazy_command

if TYPE_CHECKING:
    from ..experiments.parallel import Execution

experiment_app = typer.Typer(
    help="Reproduction experiments (policy x seed grids) with tables and plots.",
    no_args_is_help=True,
    cls=LazyGroup,
)


# Options every experiment takes.
WorkersOption = Annotated[
    int | None,
    typer.Option(
        help=escape(
            "worker processes; with --backend ray, the most runs at once [default: all cores; the Ray "
            "cluster's CPUs]"
        )
    ),
]
BackendOption = Annotated[
    str,
    typer.Option(
        help=escape(
            "where the runs go: process (worker processes on this machine) | ray (a Ray cluster; "
            "pip install 'wattsched[ray]')"
        )
    ),
]
AddressOption = Annotated[
    str | None,
    typer.Option(
        help=escape("--backend ray: the cluster's address, HOST:PORT of its head [default: a local Ray]")
    ),
]
FreshOption = Annotated[
    bool,
    typer.Option("--fresh", help="rerun every run, clearing those an interrupted run of this --out kept"),
]
QuietOption = Annotated[bool, typer.Option("--quiet", help="no progress bar")]
PlotsOption = Annotated[
    bool, typer.Option("--plots/--no-plots", help=escape("write the figures (PNG; needs the [plots] extra)"))
]


def _notice(line: str) -> None:
    err_console.print(escape(line), soft_wrap=True, highlight=False)  # above the progress bar, never wrapped


def grid_execution(backend: str, address: str | None, fresh: bool) -> Execution:
    """The --backend, --address and --fresh of an experiment, checked before anything is loaded or run."""
    from ..experiments.parallel import Execution

    execution = Execution(backend, address, fresh=fresh, notify=_notice)
    execution.check()
    return execution


@experiment_app.callback()
def _experiments() -> None:
    """Reproduction experiments (policy x seed grids) with tables and plots."""


# -- protocol experiments: one command each, generated from the experiment's config ---------------------------
def _protocol_command(name: str) -> Callable[..., None]:
    import inspect

    from ..experiments.protocol import experiment as find_experiment
    from .options import command_with_config_options, number_lists

    exp = find_experiment(name)

    def handler(overrides: dict, extra: dict) -> None:
        from pydantic import ValidationError

        from ..core.errors import WattschedError
        from ..experiments.protocol import run_experiment

        with user_errors():
            try:
                cfg = exp.config_model(**number_lists(exp.config_model, overrides))
            except ValidationError as exc:
                first = exc.errors()[0]
                field = ".".join(str(p) for p in first["loc"])
                raise WattschedError(f"--{field.replace('_', '-')}: {first['msg']}") from None
            execution = grid_execution(extra["backend"], extra["address"], extra["fresh"])
            with progress_bar(name, enabled=not extra["quiet"]) as progress:
                result = run_experiment(
                    exp, cfg, extra["out"], extra["workers"], execution, progress, plots=extra["plots"]
                )
        for line in exp.headline(cfg, result.records, result.outcomes):
            console.print(escape(line.replace("**", "")), highlight=False)
        console.print(
            f"{name}: {len(result.records)} runs in {result.wall_s:.1f} s on {result.workers} worker(s); "
            f"{', '.join(p.name for p in result.files)} in [bold]{escape(str(result.out))}[/]",
            highlight=False,
        )

    def option(param: str, annotation: object, default: object) -> inspect.Parameter:
        return inspect.Parameter(
            param, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
        )

    extra = [
        option("out", Annotated[Path, typer.Option(help="output directory")], Path(f"runs/{name}")),
        option("workers", WorkersOption, None),
        option("backend", BackendOption, "process"),
        option("address", AddressOption, None),
        option("fresh", FreshOption, False),
        option("quiet", QuietOption, False),
        option("plots", PlotsOption, True),
    ]
    return command_with_config_options(exp.config_model, extra, handler, exp.description)


def _register_protocol_commands() -> None:
    for name in experiment_names():
        add_lazy_command(experiment_app, name, functools.partial(_protocol_command, name))


_register_protocol_commands()
