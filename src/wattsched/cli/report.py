"""`wattsched report RUN_OR_EXPERIMENT_DIR... --out report.html`: one self-contained HTML file with the comparison
table, the recorded assumptions and the plots (experiments/report.py builds it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from ..core.atomic import write_text
from .common import console, user_errors
from .compare import BASELINE_OPTION, runs_argument


def report_command(
    runs: Annotated[list[Path], runs_argument("RUN_OR_EXPERIMENT_DIR")],
    out: Annotated[Path, typer.Option("--out", help="the HTML file to write")] = Path("report.html"),
    baseline: Annotated[str | None, BASELINE_OPTION] = None,
    title: Annotated[str, typer.Option(help="the report's title")] = "wattsched report",
) -> None:
    """Write one self-contained HTML report (no network needed to view it): the comparison table with changes
    against a baseline, the assumptions the runs recorded, and plots of power, price and carbon, node states,
    GPUs and queue, JCT distributions, energy against mean JCT and FGD/PWR curves, where the runs hold the data."""
    from ..experiments.compare import comparison
    from ..experiments.report import build_report
    from .compare import warn_job_models

    with user_errors():
        frame = comparison(runs, baseline)
        text = build_report(runs, baseline, title=title, frame=frame)
        write_text(out, text)
        warn_job_models(frame, note=False)
    size = len(text.encode("utf-8"))
    console.print(Text(f"report written to {out} ({size / 1e6:.2f} MB)"))
