"""`wattsched` command line: simulate, demo, policies, workloads, clusters, data."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .agent import agent_command, agent_job_command
from .common import console, err_console, progress_bar, user_errors
from .compare import compare_command
from .data import data_app
from .experiment import experiment_app
from .lazy import LazyGroup, add_lazy_command
from .perf import perf_app
from .profile import profile_command
from .report import report_command
from .signals import signals_app

# The commands are built when they run (cli/lazy.py): `wattsched --help` and the light commands import neither
# the run config nor the simulator.
app = typer.Typer(
    name="wattsched",
    help="Energy-aware scheduling of deep-learning jobs on GPU clusters: simulate policies on real traces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)
app.add_typer(data_app, name="data", help="List, fetch and verify the public datasets.")
app.add_typer(
    signals_app, name="signals", help="Inspect hourly electricity prices and grid carbon intensity."
)
app.add_typer(perf_app, name="perf", help="Inspect the job performance model (e.g. GPU co-location).")
app.add_typer(experiment_app, name="experiment", help="Reproduction experiments (policy x seed grids).")


def _serve_group() -> Any:
    # The live services' run settings are generated from the run config: built only when `serve` is used.
    from .serve import serve_app

    return typer.main.get_group(serve_app)


# The same text as serve.py's SERVE_HELP (test_startup checks the two agree; importing it would load serve.py).
add_lazy_command(
    app, "serve", _serve_group, "Run the scheduler live on a cluster manager (Slurm, Kubernetes)."
)


def print_summary(summary: dict[str, Any], out: Path | None) -> None:
    table = Table(title="run summary", show_header=False)
    for key in (
        "jobs_submitted",
        "jobs_completed",
        "jobs_unschedulable",
        "jobs_dropped",
        "jobs_invalid_skipped",
    ):
        table.add_row(key, str(summary[key]))
    for key in ("jct_s", "queue_delay_s"):
        s = summary[key]
        if s["mean"] is not None:
            table.add_row(f"{key} mean / p50 / p99", f"{s['mean']:.1f} / {s['p50']:.1f} / {s['p99']:.1f}")
    keys: tuple[str, ...] = (
        "makespan_s",
        "gpu_allocation_mean",
        "gpu_allocation_final",
        "grar_final",
        "energy_kwh",
    )
    keys += ("avg_power_kw", "peak_power_kw", "cost_usd", "co2_kg", "node_hours_off", "wall_time_s")
    for key in keys:
        if summary.get(key) is not None:
            value = summary[key]
            table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    console.print(table)
    if out is not None:
        console.print(f"run directory: [bold]{out}[/]")


def _simulate(overrides: dict[str, Any], extra: dict[str, Any]) -> None:
    from ..experiments.config import resolve_config
    from ..experiments.run import run_simulation

    quiet = bool(extra["quiet"])
    out = extra["out"]
    with user_errors():
        cfg = resolve_config(extra["config"], overrides)
        with progress_bar(f"{cfg.scheduler.mode} {cfg.workload.name}", enabled=not quiet) as progress:
            result = run_simulation(cfg, out, progress)
    for note in getattr(result, "summary", {}).get("notes", []):
        if note.startswith("warning:"):  # e.g. deadlines that leave most jobs less than their duration
            err_console.print(Text(note), highlight=False, soft_wrap=True)
    if not quiet:
        print_summary(result.summary, out)


SIMULATE_HELP = (
    "Replay a workload on a cluster under a queue and a placement policy, or an allocation policy in rounds; "
    "write a run directory. Every setting of the config file is also a flag."
)


def simulate_command() -> Callable[..., None]:
    """The `simulate` command: the extra options and one flag per field of the run config."""
    from ..experiments.config import SimulationConfig
    from .options import command_with_config_options

    return command_with_config_options(
        SimulationConfig,
        [
            inspect.Parameter(
                "config",
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[
                    Path | None, typer.Option("--config", help="YAML config; flags override it")
                ],
            ),
            inspect.Parameter(
                "out",
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[Path | None, typer.Option(help="run directory to write")],
            ),
            inspect.Parameter(
                "quiet",
                inspect.Parameter.KEYWORD_ONLY,
                default=False,
                annotation=Annotated[bool, typer.Option("--quiet", help="no progress bar or summary table")],
            ),
        ],
        _simulate,
        SIMULATE_HELP,
    )


add_lazy_command(app, "simulate", simulate_command, SIMULATE_HELP)


def _whatif_command() -> Callable[..., None]:
    from .whatif import whatif_command

    return whatif_command


# The same text as whatif.py's WHATIF_HELP (importing it would load the command's module at start-up).
WHATIF_HELP = (
    "Replay your Slurm history (sacct) on your nodes under FIFO + EASY backfill and the energy-aware policies; "
    "check the replay against what happened; write the tables and OUT/report.html."
)
add_lazy_command(app, "whatif", _whatif_command, WHATIF_HELP)
app.command("compare")(compare_command)
app.command("report")(report_command)
app.command("agent")(agent_command)
app.command("agent-job")(agent_job_command)
app.command("profile")(profile_command)


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="directory for the run directories and report.html")] = Path(
        "runs/demo"
    ),
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="number of synthetic jobs")] = 1000,
    seed: Annotated[int, typer.Option(help="random seed of the workload and the runs")] = 42,
    workers: Annotated[int, typer.Option(min=1, help="runs at once (processes)")] = 2,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bar")] = False,
) -> None:
    """Built-in data only: the energy-aware policies (right-sizing, PWR+FGD, PowerFlow, EaCO, CE-DLA) beside an
    energy-blind baseline on a synthetic workload; prints the comparison and writes OUT/report.html."""
    from ..experiments.demo import DEMO_RUNS, run_demo
    from .compare import print_comparison

    with user_errors(), progress_bar(f"demo: {len(DEMO_RUNS)} runs", enabled=not quiet) as progress:
        result = run_demo(out, jobs, seed, workers, progress)
    for note in result.notes:
        console.print(Text(note))
    print_comparison(result.comparison, only=DEMO_COLUMNS, components=False)
    console.print(
        Text(f"report: {result.report} (one file, opens without network); table: {out}/comparison.csv")
    )


# The demo's terminal table: what each policy costs and what it saves (the report and comparison.csv hold all).
DEMO_COLUMNS = ("energy_kwh", "cost_usd", "co2_kg", "jct_mean_s", "jct_p95_s", "deadline_misses", "restarts")


@app.command()
def policies() -> None:
    """List the registered policies of every kind: queue, placement, allocation and power manager."""
    from ..policies import PLACEMENT_POLICIES, QUEUE_POLICIES
    from ..policies.contract import ALLOCATION_POLICIES, POWER_MANAGERS

    kinds = (
        ("queue policies (--queue)", QUEUE_POLICIES),
        ("placement policies (--placement)", PLACEMENT_POLICIES),
        ("allocation policies (--allocation)", ALLOCATION_POLICIES),
        ("power managers (--power-manager)", POWER_MANAGERS),
    )
    for title, registry in kinds:
        table = Table(title=title)
        table.add_column("name", style="bold")
        table.add_column("description")
        table.add_column("reconstructed")
        for name, factory in registry:
            cls: Any = factory  # a policy class: its description and reconstructed are class attributes
            table.add_row(name, cls.description, "yes" if cls.reconstructed else "")
        for pattern in registry.names(with_patterns=True)[len(registry.names()) :]:
            table.add_row(pattern, "parameterised family", "")
        console.print(table)


@app.command()
def workloads() -> None:
    """List named workloads (any CSV path in the generic job schema also works)."""
    from ..workloads.catalog import workload_names

    console.print("synthetic")
    for name in workload_names():
        console.print(name)


@app.command()
def clusters() -> None:
    """List named clusters (any YAML path in the cluster schema also works)."""
    from ..workloads.clusters import cluster_names

    for name in cluster_names():
        console.print(name)


@app.command()
def power(
    cluster: Annotated[str, typer.Option(help="cluster name or YAML path")] = "default",
    power_model: Annotated[str, typer.Option(help="binary | linear | dvfs")] = "binary",
    node_base_w: Annotated[
        float | None, typer.Option(help=escape("node base power W [default: per model]"))
    ] = None,
    data_dir: Annotated[str | None, typer.Option(help="local dataset directory")] = None,
) -> None:
    """Cluster power when idle and when every GPU and CPU is allocated, by component."""
    from ..experiments.cluster_power import cluster_power_table

    with user_errors():
        rows = cluster_power_table(cluster, power_model, node_base_w, data_dir)
    table = Table(title=f"{cluster} under the {power_model} power model (W)")
    for col in ("state", "GPU", "CPU", "node base", "total"):
        table.add_column(col, justify="left" if col == "state" else "right")
    for state, w in rows.items():
        table.add_row(state, *(f"{w[k]:,.0f}" for k in ("gpu", "cpu", "base", "total")))
    console.print(table)


def main() -> None:  # pragma: no cover - entry point
    app()


# `python -m wattsched.cli.main`: how the local test Slurm's job prolog runs it (no console script needed).
if __name__ == "__main__":
    main()
