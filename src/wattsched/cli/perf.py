"""`wattsched perf ...`: look at the job performance model's predictions."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from .common import console, user_errors

perf_app = typer.Typer(help="Inspect the job performance model.", no_args_is_help=True)


@perf_app.command("colocate")
def colocate_cmd(
    models: Annotated[
        str,
        typer.Option("--models", help="comma-separated model names sharing the GPUs, e.g. alexnet,resnet50"),
    ],
    gpu: Annotated[str, typer.Option("--gpu", help="GPU model (catalog name)")] = "V100",
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs every job uses (the same GPUs)")] = 8,
    hours: Annotated[
        float | None,
        typer.Option(
            "--hours", min=0.001, help=escape("solo JCT of every job [default: EaCO Table 1, else its mean]")
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of tables")] = False,
) -> None:
    """Predicted average power, energy and JCT of a set of training jobs sharing the same GPUs, against each
    job alone (the quantities of EaCO's Tables 1 and 3), under the sharing model fitted to EaCO's measurements."""
    from ..perf.colocation import colocate

    with user_errors():
        names = [m.strip() for m in models.split(",") if m.strip()]
        out = colocate(names, gpu, gpus, hours)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    table = Table(title=f"{' + '.join(out['models'])} on {gpus} x {gpu}")
    for col in ("run", "avg power (W)", "energy (kWh)", "avg JCT (h)"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for name, row in out["alone"].items():
        table.add_row(f"{name} alone", f"{row['avg_power_w']:,.0f}", f"{row['energy_kwh']:.2f}",
                      f"{row['avg_jct_h']:.2f}")  # fmt: skip
    s = out["set"]
    table.add_row("all alone (sum / mean)", "", f"{out['alone_total_energy_kwh']:.2f}",
                  f"{sum(r['avg_jct_h'] for r in out['alone'].values()) / len(out['alone']):.2f}")  # fmt: skip
    table.add_row("[bold]sharing the GPUs", f"{s['avg_power_w']:,.0f}", f"{s['energy_kwh']:.2f}",
                  f"{s['avg_jct_h']:.2f}")  # fmt: skip
    console.print(table)
    console.print(
        f"energy {-out['energy_saving']:+.1%} against running them one at a time alone; "
        f"average JCT {out['jct_increase']:+.1%}; summed GPU memory {out['memory_gib']:g} GiB",
        highlight=False,
    )
    for note in out["notes"]:
        console.print(f"note: {note}", highlight=False)
