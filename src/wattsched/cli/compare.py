"""`wattsched compare RUN_DIR...`: runs side by side in the terminal, each metric with its change against a
baseline run; `--csv` writes the same table (experiments/compare.py builds it, the HTML report reuses it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..core.atomic import write_with
from .common import console, err_console, user_errors

if TYPE_CHECKING:
    import pandas as pd


def runs_argument(metavar: str):
    """The run directories `compare` and `report` take."""
    return typer.Argument(
        help="run directories (simulate --out), experiment output directories or directories of runs",
        metavar=metavar,
        show_default=False,
    )


BASELINE_OPTION = typer.Option(
    help="the run every change is against: a run directory, a row's label or its short label (a run "
    "directory's name, e.g. fifo; an experiment row's keys or policy) (default: the first run)"
)


def compare_command(
    runs: Annotated[list[Path], runs_argument("RUN_DIR")],
    baseline: Annotated[str | None, BASELINE_OPTION] = None,
    csv: Annotated[
        Path | None,
        typer.Option(
            "--csv", help="also write the table as CSV: every metric, changes in *_delta_pct columns"
        ),
    ] = None,
) -> None:
    """Compare runs: energy (by component), cost, carbon, mean / p95 JCT, queueing delay, makespan, GPU allocation,
    deadline misses, SLO violations and restarts, where the runs record them, with the change against a baseline."""
    from ..experiments.compare import comparison

    with user_errors():
        frame = comparison(runs, baseline)
        if csv is not None:
            write_with(csv, lambda p: frame.to_csv(p, index=False, float_format="%.10g"))
    print_comparison(frame)
    if csv is not None:
        console.print(Text(f"table written to {csv}"))


def print_comparison(frame: pd.DataFrame, only: Sequence[str] | None = None, components: bool = True) -> None:
    """The comparison table on the terminal: `only` the metrics with these keys (default: every recorded one),
    then the energy components (unless `components` is False), then what the marks mean."""
    from ..experiments.compare import MISSING, column_definitions, is_component, shown_metrics

    base = frame.loc[frame["baseline"], "run"].iloc[0]
    metrics = [m for m in shown_metrics(frame) if only is None or m.key in only]
    # The energy components get a table of their own: one table of every column is too wide for a terminal.
    parts = [m for m in metrics if is_component(m.key)]
    main = [m for m in metrics if not is_component(m.key)]
    console.print(_fitting(frame, main, f"{len(frame)} run(s), changes against {base}"))
    if parts and components:
        total = [m for m in main if m.key == "energy_kwh"]
        console.print(_fitting(frame, total + parts, "energy by component (kWh)"))
    console.print(Text(f"{MISSING}: not recorded by the run, or no change against a baseline of 0"))
    for key, definition in column_definitions(frame, [m.key for m in main]):
        console.print(Text(f"{key}: {definition}"))
    for line in frame.attrs.get("window") or []:
        console.print(Text(f"window: {line}"))
    for basis in dict.fromkeys(frame.loc[frame["reconstructed"], "basis"]):
        console.print(Text(f"reconstructed: {basis}"))
    warn_job_models(frame)


def warn_job_models(frame: pd.DataFrame, note: bool = True) -> None:
    """When the runs differ in more than their policies: a warning on stderr and (`note`) a note under the table,
    each naming every differing setting and its values."""
    from ..experiments.compare import job_model_differences
    from ..experiments.jobmodel import summary_line

    diffs = job_model_differences(frame)
    if not diffs:
        return
    line = summary_line(diffs)
    err_console.print(Text(f"warning: {line}", style="bold yellow"), highlight=False, soft_wrap=True)
    if note:
        console.print(Text(f"NOT LIKE FOR LIKE: {line}", style="bold red"))


def _cell(value: str, delta: str | None) -> Text:
    """A value over its change against the baseline (none for the baseline itself)."""
    cell = Text(value)
    if delta is not None:
        cell.append("\n" + delta, style="dim")
    return cell


def _fitting(frame: pd.DataFrame, metrics: list, title: str) -> Table:
    """Runs as rows; on a terminal too narrow for that, runs as columns (fine for the few runs such a terminal
    shows well anyway)."""
    from ..experiments.compare import DELTA_SUFFIX, format_delta, format_value

    records = frame.to_dict("records")
    labels = [Text(r["run"]) + Text("\nbaseline" if r["baseline"] else "", style="bold") for r in records]
    policies = [
        Text(r["policy"]) + Text("\n(reconstructed)" if r["reconstructed"] else "", style="yellow")
        for r in records
    ]
    cells = [
        [
            _cell(format_value(m, r[m.key]), None if r["baseline"] else format_delta(r[m.key + DELTA_SUFFIX]))
            for m in metrics
        ]
        for r in records
    ]
    wide = Table(title=Text(title), show_lines=len(records) > 1)
    wide.add_column("run", overflow="fold", min_width=12)
    wide.add_column("policy", overflow="fold", min_width=8)
    for m in metrics:
        wide.add_column(m.header, justify="right")
    for label, policy, row in zip(labels, policies, cells, strict=True):
        wide.add_row(label, policy, *row)
    unbounded = console.options.update_width(10**6)  # measured against the console width, any table fits
    if Measurement.get(console, unbounded, wide).minimum <= console.width:
        return wide
    tall = Table(title=Text(title), show_lines=True)
    tall.add_column("run", overflow="fold")
    for label in labels:
        tall.add_column(label, justify="right", overflow="fold")
    tall.add_row("policy", *policies)
    for i, m in enumerate(metrics):
        tall.add_row(m.header, *(row[i] for row in cells))
    return tall
