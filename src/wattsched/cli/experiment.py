"""`wattsched experiment ...`: reproduction experiments that run a grid of policies x seeds.

Still one file (~610 lines): the seven hand-written commands of the experiments written before the protocol;
each goes as its experiment moves onto ``experiments/protocol.py`` (whose commands are generated here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..experiments.config import SimulationConfig
from ..experiments.parallel import Execution
from .common import console, err_console, progress_bar, user_errors
from .options import config_options, parse_key_values

experiment_app = typer.Typer(
    help="Reproduction experiments (policy x seed grids) with tables and plots.", no_args_is_help=True
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
DataDirOption = Annotated[str | None, typer.Option(help="local dataset directory (else $WATTSCHED_DATA)")]
QuietOption = Annotated[bool, typer.Option("--quiet", help="no progress bar")]
PlotsOption = Annotated[
    bool, typer.Option("--plots/--no-plots", help=escape("write the figures (PNG; needs the [plots] extra)"))
]
# The column mapping of a CSV workload: the same option as `simulate --columns`, from the same config field.
_COLUMNS = next(o for o in config_options(SimulationConfig) if o.path == ("columns",))
ColumnsOption = Annotated[
    list[str] | None, typer.Option(_COLUMNS.flag, help=escape(_COLUMNS.help), metavar=_COLUMNS.metavar)
]
# Measured profiles: the same option as `simulate --profiles`, from the same config field.
_PROFILES = next(o for o in config_options(SimulationConfig) if o.path == ("profiles",))
ProfilesOption = Annotated[
    str | None, typer.Option(_PROFILES.flag, help=escape(_PROFILES.help), metavar=_PROFILES.metavar)
]


def _notice(line: str) -> None:
    err_console.print(escape(line), soft_wrap=True, highlight=False)  # above the progress bar, never wrapped


def grid_execution(backend: str, address: str | None, fresh: bool) -> Execution:
    """The --backend, --address and --fresh of an experiment, checked before anything is loaded or run."""
    execution = Execution(backend, address, fresh=fresh, notify=_notice)
    execution.check()
    return execution


def column_mapping(items: list[str] | None) -> dict[str, str]:
    return parse_key_values(items or [], _COLUMNS.flag, _COLUMNS.metavar)


def parse_numbers(text: str, kind: type, option: str, example: str) -> list:
    """A comma-separated option as numbers of `kind`; a bad item is a usage error naming the option."""
    from ..experiments.grid import parse_list

    try:
        return [kind(item) for item in parse_list(text)]
    except ValueError:
        raise typer.BadParameter(f"{option}: expected numbers such as {example}, got {text!r}") from None


@experiment_app.callback()
def _experiments() -> None:
    """Reproduction experiments (policy x seed grids) with tables and plots."""


# -- protocol experiments: one command each, generated from the experiment's config ---------------------------
def _protocol_command(name: str) -> None:
    import inspect

    from ..experiments.protocol import experiment as find_experiment
    from .options import command_with_config_options

    exp = find_experiment(name)

    def handler(overrides: dict, extra: dict) -> None:
        from pydantic import ValidationError

        from ..core.errors import WattschedError
        from ..experiments.protocol import run_experiment

        with user_errors():
            try:
                cfg = exp.config_model(**overrides)
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
    command = command_with_config_options(exp.config_model, extra, handler, exp.description)
    experiment_app.command(name)(command)


def _register_protocol_commands() -> None:
    from ..experiments.protocol import experiment_names

    for name in experiment_names():
        _protocol_command(name)


_register_protocol_commands()
