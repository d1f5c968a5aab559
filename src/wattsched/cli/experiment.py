"""`wattsched experiment ...`: reproduction experiments that run a grid of policies x seeds.

Still one file (~610 lines): the seven hand-written commands of the experiments written before the protocol;
each goes as its experiment moves onto ``experiments/protocol.py`` (whose commands are generated here).
"""

from __future__ import annotations

from collections import Counter
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


@experiment_app.command("powerflow")
def powerflow(
    workload: Annotated[str, typer.Option(help="workload name or CSV path, e.g. pollux/workload-6")],
    cluster: Annotated[str, typer.Option(help="cluster name or YAML path, e.g. n16g4")],
    gpu_type: Annotated[
        str | None, typer.Option(help="GPU model for every node of a single-model cluster (e.g. T4)")
    ] = None,
    seeds: Annotated[int, typer.Option(help="runs per setting, seeds 42, 43, ...")] = 3,
    baselines: Annotated[
        str, typer.Option(help="comma-separated: fifo (queue fifo + first-fit) and allocation policies")
    ] = "fifo,tiresias,gandiva,optimus-greedy",
    budget_points: Annotated[
        int, typer.Option(help="PowerFlow budgets from 60 % to 120 % of the largest baseline energy")
    ] = 7,
    caps: Annotated[
        str, typer.Option(help="comma-separated SM-clock caps (fractions of f_max) for the baselines")
    ] = "1.0,0.9,0.8,0.7,0.6",
    power_manager: Annotated[
        str,
        typer.Option(
            help="comma-separated power managers (always-on, idle-timeout, forecast): the whole grid runs once "
            "under each, every run of a grid under the same one; with several, DIR/<manager>/ and a headline "
            "per manager in DIR/summary.md"
        ),
    ] = "always-on,idle-timeout",
    out: Annotated[Path, typer.Option(help="output directory")] = Path("runs/powerflow"),
    profiles: ProfilesOption = None,
    columns: ColumnsOption = None,
    workers: WorkersOption = None,
    backend: BackendOption = "process",
    address: AddressOption = None,
    fresh: FreshOption = False,
    data_dir: DataDirOption = None,
    quiet: QuietOption = False,
) -> None:
    """PowerFlow-reconstructed vs baselines at equal energy, with budget and clock-cap sweeps."""
    from ..experiments.grid import parse_list
    from ..experiments.powerflow import (
        LABEL,
        check_power_managers,
        parse_caps,
        prepare,
        run_experiment,
        run_power_managers,
    )

    with user_errors():
        execution = grid_execution(backend, address, fresh)
        managers = check_power_managers(parse_list(power_manager))
        prep = prepare(
            workload,
            cluster,
            gpu_type,
            seeds,
            parse_list(baselines),
            budget_points,
            parse_caps(caps),
            managers[0],
            data_dir,
            column_mapping(columns),
            profiles,
        )
        with progress_bar(f"powerflow {workload}", enabled=not quiet) as progress:
            if len(managers) == 1:
                results = {
                    managers[0]: run_experiment(
                        workload,
                        cluster,
                        out=out,
                        workers=workers,
                        progress=progress,
                        prepared=prep,
                        execution=execution,
                    )
                }
            else:
                results = run_power_managers(
                    prep, managers, out=out, workers=workers, progress=progress, execution=execution
                ).per_manager
    for pm, result in results.items():
        s = result.summary
        console.print(
            f"power manager {pm}: {s['runs']} runs in {s['wall_s']:.1f} s on {s['workers']} worker(s); "
            f"{LABEL} is a reconstruction"
        )
        for b in s["baselines"]:
            r = s["per_baseline"][b]
            how = ", ".join(f"{n} {k}" for k, n in sorted(Counter(r["statuses"]).items()))
            console.print(
                f"  vs {b}: mean JCT ratio {r['ratio']:.2f} ± {r['ratio_std']:.2f} at the baseline's energy "
                f"({how}); PowerFlow's equal-energy run {r['budget_error_pct']:+.1f} % off that energy"
            )
        console.print(
            "  energies over the window of each seed's baselines and no-budget run, which PowerFlow's budgets "
            "cover (docs/powerflow.md); within: the run landed within ±2 %; unused: PowerFlow cannot use that "
            "much, its no-budget JCT; interpolated: on its budget sweep"
        )
        console.print(f"results.csv, sweep.csv, runs.csv, summary.md and plots in [bold]{result.out}[/]")
    if len(results) > 1:
        console.print(f"headline per power manager: [bold]{out / 'summary.md'}[/] and headline.csv")


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
