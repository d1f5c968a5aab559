"""`wattsched whatif --sacct FILE --nodes FILE --out DIR`: an operator's Slurm history replayed under its own
policy and the energy-aware ones, checked against what happened, into one HTML report (docs/whatif.md).

The grid is the ``whatif`` protocol experiment (experiments/whatif.py), so it runs on the process pool or Ray and
resumes like every experiment; this command adds reading the history (its notes and state counts printed first),
the replay check and one line per policy on the terminal, and ``OUT/report.html``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from .common import console, progress_bar, user_errors
from .experiment import AddressOption, BackendOption, FreshOption, QuietOption, WorkersOption, grid_execution

WHATIF_HELP = (
    "Replay your Slurm history (sacct) on your nodes under FIFO + EASY backfill and the energy-aware policies; "
    "check the replay against what happened; write the tables and OUT/report.html."
)
REPORT_FILE = "report.html"


def whatif_command(
    sacct: Annotated[
        Path, typer.Option("--sacct", help="sacct --parsable2 (documented fields) or --json output")
    ],
    nodes: Annotated[Path, typer.Option("--nodes", help="scontrol show nodes --json or sinfo --json output")],
    out: Annotated[Path, typer.Option("--out", help="output directory")],
    power: Annotated[
        Path | None, typer.Option("--power", help="per-GPU power over time (Prometheus text or CSV)")
    ] = None,
    price_csv: Annotated[
        Path | None, typer.Option("--price-csv", help="your market's hourly prices (time, price_usd_per_mwh)")
    ] = None,
    carbon_csv: Annotated[
        Path | None,
        typer.Option("--carbon-csv", help="with --price-csv: hourly carbon (time, carbon_g_per_kwh)"),
    ] = None,
    region: Annotated[
        str | None, typer.Option("--region", help="a shipped grid region instead \\[default: US-CAL-CISO]")
    ] = None,
    year: Annotated[int, typer.Option("--year", help="--region's price and carbon year")] = 2023,
    tz: Annotated[
        str, typer.Option("--tz", help="time zone of sacct's timestamps and of --price-csv")
    ] = "UTC",
    sacct_format: Annotated[str, typer.Option("--sacct-format", help="auto | parsable2 | json")] = "auto",
    gpu_map: Annotated[
        list[str] | None,
        typer.Option("--gpu-map", help="a site GPU type (GRES) to a catalog model, repeatable: tesla=V100"),
    ] = None,
    variants: Annotated[
        str | None,
        typer.Option(
            "--variants",
            help="comma-separated: baseline, right-sizing, power-cap, power-cap-deadline, pwr-fgd, price-shift, "
            "co-location \\[default: all but power-cap-deadline and co-location]",
        ),
    ] = None,
    profiles: Annotated[
        str | None, typer.Option("--profiles", help="measured GPU profile CSV(s): enables co-location")
    ] = None,
    idle_timeout_s: Annotated[
        float, typer.Option("--idle-timeout-s", help="right-sizing's idle timeout")
    ] = 1800.0,
    deadline_slack: Annotated[
        float, typer.Option("--deadline-slack", help="deadline = submit + slack x run time (price-shift)")
    ] = 3.0,
    group_by: Annotated[
        str, typer.Option("--group-by", help="the per-group table: user | account")
    ] = "account",
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="local dataset directory")] = None,
    workers: WorkersOption = None,
    backend: BackendOption = "process",
    address: AddressOption = None,
    fresh: FreshOption = False,
    quiet: QuietOption = False,
    report: Annotated[bool, typer.Option("--report/--no-report", help="write OUT/report.html")] = True,
) -> None:
    """(WHATIF_HELP, set below: one line, as the stand-in in cli/main.py lists it)"""
    from pydantic import ValidationError

    from ..core.errors import WattschedError
    from ..experiments.protocol import experiment, run_experiment
    from ..experiments.whatif import WhatIfConfig, load, provide_history, read_history
    from ..experiments.whatif_tables import (
        baseline_outcome,
        check_lines,
        history_lines,
        policy_lines,
        replay_check,
    )
    from .options import parse_key_values

    with user_errors():
        settings: dict[str, Any] = {
            "sacct": str(sacct), "nodes": str(nodes), "sacct_format": sacct_format, "tz": tz,
            "power": None if power is None else str(power), "region": region, "year": year,
            "price_csv": None if price_csv is None else str(price_csv),
            "carbon_csv": None if carbon_csv is None else str(carbon_csv),
            "idle_timeout_s": idle_timeout_s, "deadline_slack": deadline_slack, "group_by": group_by,
            "profiles": profiles, "inputs_dir": str(out / "inputs"),
            "data_dir": None if data_dir is None else str(data_dir),
        }  # fmt: skip
        settings["gpu_map"] = parse_key_values(gpu_map or [], "--gpu-map", "TYPE=MODEL")
        if variants is not None:
            settings["variants"] = [v.strip() for v in variants.split(",") if v.strip()]
        try:
            cfg = WhatIfConfig(**settings)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise WattschedError(f"--{field.replace('_', '-')}: {first['msg']}") from None
        execution = grid_execution(backend, address, fresh)
        history, slurm_nodes = read_history(cfg)
        provide_history(cfg.sacct, cfg.nodes, history, slurm_nodes)  # the grid takes them as read here
        load(cfg)  # the inputs written (their notes join the history's) before the grid runs on them
        for line in history_lines(history):
            console.print(escape(line), highlight=False, soft_wrap=True)
        for note in slurm_nodes.notes:
            console.print(escape(f"- {note}"), highlight=False, soft_wrap=True)
        exp = experiment("whatif")
        with progress_bar("whatif", enabled=not quiet) as progress:
            result = run_experiment(exp, cfg, out, workers, execution, progress)
        variant_names = [str(c) for c in result.records["variant"]]
        base = baseline_outcome(variant_names, result.outcomes)
        check: list[str] = []
        if base is not None:
            figures, _ = replay_check(history.recorded, base.raw)
            check = check_lines(figures)
        for line in [*check, *policy_lines(result.records)]:
            console.print(escape(line.replace("**", "")), highlight=False, soft_wrap=True)
        if result.window:
            console.print(escape(result.window), highlight=False, soft_wrap=True)
        files = [p.name for p in result.files]
        if report:
            from ..core.atomic import write_text
            from ..experiments.compare import comparison
            from ..experiments.report import build_report

            sections = exp.sections(cfg, result.records, result.outcomes)
            frame = comparison([out])
            text = build_report(
                [out], title=f"wattsched what-if: {sacct.name}", frame=frame, notes=check, sections=sections
            )
            write_text(out / REPORT_FILE, text)
            files.append(REPORT_FILE)
    console.print(
        f"whatif: {len(result.records)} runs in {result.wall_s:.1f} s on {result.workers} worker(s); "
        f"{', '.join(files)} in [bold]{escape(str(out))}[/]",
        highlight=False,
    )


whatif_command.__doc__ = WHATIF_HELP

__all__ = ["WHATIF_HELP", "whatif_command"]
