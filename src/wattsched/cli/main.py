"""`wattsched` command line: simulate, demo, policies, workloads, clusters, data."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ..experiments.config import resolve_config
from ..experiments.run import run_simulation
from ..policies import PLACEMENT_POLICIES, QUEUE_POLICIES
from .common import console, progress_bar, user_errors
from .data import data_app
from .experiment import experiment_app
from .signals import signals_app

app = typer.Typer(
    name="wattsched",
    help="Energy-aware scheduling of deep-learning jobs on GPU clusters: simulate policies on real traces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(data_app, name="data", help="List, fetch and verify the public datasets.")
app.add_typer(
    signals_app, name="signals", help="Inspect hourly electricity prices and grid carbon intensity."
)
app.add_typer(experiment_app, name="experiment", help="Reproduction experiments (policy x seed grids).")


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
    keys = ("makespan_s", "gpu_allocation_mean", "gpu_allocation_final", "grar_final", "energy_kwh")
    keys += ("avg_power_kw", "peak_power_kw", "cost_usd", "co2_kg", "node_hours_off", "wall_time_s")
    for key in keys:
        if summary.get(key) is not None:
            value = summary[key]
            table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    console.print(table)
    if out is not None:
        console.print(f"run directory: [bold]{out}[/]")


@app.command()
def simulate(
    workload: Annotated[
        str | None, typer.Option(help="workload name or CSV path [default: synthetic]")
    ] = None,
    cluster: Annotated[str | None, typer.Option(help="cluster name or YAML path [default: default]")] = None,
    mode: Annotated[str | None, typer.Option(help="temporal | packing [default: temporal]")] = None,
    queue: Annotated[str | None, typer.Option(help="queue policy [default: fifo]")] = None,
    placement: Annotated[str | None, typer.Option(help="placement policy [default: best-fit]")] = None,
    seed: Annotated[int | None, typer.Option(help="random seed [default: 42]")] = None,
    inflate: Annotated[
        float | None, typer.Option(help="packing: multiple of GPU capacity [default: 1.3]")
    ] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", help="synthetic workload: number of jobs")] = None,
    arrival: Annotated[str | None, typer.Option(help="synthetic workload: poisson | bursty")] = None,
    max_jobs: Annotated[int | None, typer.Option(help="keep the first N jobs by submission time")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="YAML config; flags override it")] = None,
    data_dir: Annotated[
        str | None, typer.Option(help="local dataset directory (else $WATTSCHED_DATA)")
    ] = None,
    skip_invalid: Annotated[bool, typer.Option("--skip-invalid", help="skip malformed rows")] = False,
    check_invariants: Annotated[
        bool, typer.Option("--check-invariants", help="check after every event")
    ] = False,
    out: Annotated[Path | None, typer.Option(help="run directory to write")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bar or summary table")] = False,
    power_model: Annotated[str | None, typer.Option(help="binary | linear | dvfs [default: linear]")] = None,
    power_manager: Annotated[
        str | None, typer.Option(help="always-on | idle-timeout | forecast [default: always-on]")
    ] = None,
    region: Annotated[
        str | None, typer.Option(help="grid region for price and carbon, e.g. US-CAL-CISO")
    ] = None,
    year: Annotated[int | None, typer.Option(help="grid signal year [default: 2023]")] = None,
    pue: Annotated[float | None, typer.Option(help="power usage effectiveness [default: 1.0]")] = None,
    node_base_w: Annotated[float | None, typer.Option(help="node base power W [default: per model]")] = None,
    idle_timeout_s: Annotated[float | None, typer.Option(help="idle-timeout: seconds [default: 600]")] = None,
    boot_time_s: Annotated[float | None, typer.Option(help="node boot time s [default: 300]")] = None,
    gpu_power_limit: Annotated[float | None, typer.Option(help="dvfs: power limit, fraction of max")] = None,
    gpu_sm_clock: Annotated[float | None, typer.Option(help="dvfs: SM clock, fraction of max")] = None,
    governor: Annotated[str | None, typer.Option(help="dvfs: static | energy-optimal")] = None,
    signal_fill: Annotated[
        str | None,
        typer.Option(help="fill long gaps in price/carbon series: hold | interpolate [default: error]"),
    ] = None,
    no_energy: Annotated[bool, typer.Option("--no-energy", help="skip energy accounting")] = False,
) -> None:
    """Replay a workload on a cluster under a queue and a placement policy; write a run directory."""
    synthetic = {k: v for k, v in {"num_jobs": jobs, "arrival": arrival}.items() if v is not None}
    power_states = {
        k: v
        for k, v in {"idle_timeout_s": idle_timeout_s, "boot_time_s": boot_time_s}.items()
        if v is not None
    }
    overrides = {
        "workload": workload,
        "cluster": cluster,
        "mode": mode,
        "queue": queue,
        "placement": placement,
        "seed": seed,
        "inflate": inflate,
        "max_jobs": max_jobs,
        "data_dir": data_dir,
        "skip_invalid": True if skip_invalid else None,
        "check_invariants": True if check_invariants else None,
        "synthetic": synthetic or None,
        "power_model": power_model,
        "power_manager": power_manager,
        "region": region,
        "year": year,
        "pue": pue,
        "node_base_w": node_base_w,
        "power_states": power_states or None,
        "gpu_power_limit": gpu_power_limit,
        "gpu_sm_clock": gpu_sm_clock,
        "governor": governor,
        "signal_fill": signal_fill,
        "energy": False if no_energy else None,
    }
    with user_errors():
        cfg = resolve_config(config, overrides)
        with progress_bar(f"{cfg.mode} {cfg.workload}", enabled=not quiet) as progress:
            result = run_simulation(cfg, out, progress)
    if not quiet:
        print_summary(result.summary, out)


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="directory for the three run directories")] = Path("runs/demo"),
    jobs: Annotated[int, typer.Option("--jobs", help="number of synthetic jobs")] = 2000,
    seed: Annotated[int, typer.Option(help="random seed")] = 42,
) -> None:
    """Built-in defaults, no data needed: a synthetic workload on the default cluster under three policies."""
    from ..experiments.demo import run_demo

    with user_errors():
        run_demo(out, jobs, seed, console)


@app.command()
def policies() -> None:
    """List the registered queue and placement policies."""
    for title, registry in (("queue policies", QUEUE_POLICIES), ("placement policies", PLACEMENT_POLICIES)):
        table = Table(title=title)
        table.add_column("name", style="bold")
        table.add_column("description")
        table.add_column("reconstructed")
        for name, factory in registry:
            table.add_row(name, factory.description, "yes" if factory.reconstructed else "")
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
    node_base_w: Annotated[float | None, typer.Option(help="node base power W [default: per model]")] = None,
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
