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
    gpu: Annotated[
        str,
        typer.Option("--gpu", help=escape("GPU model (catalog name) [default: V100; with --profiles: H200]")),
    ] = "",
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs every job uses (the same GPUs)")] = 8,
    hours: Annotated[
        float | None,
        typer.Option(
            "--hours", min=0.001, help=escape("solo JCT of every job [default: EaCO Table 1, else its mean]")
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of tables")] = False,
    profiles: Annotated[
        str | None,
        typer.Option(
            "--profiles",
            metavar="FILE[,FILE]",
            help="measured profile CSV(s) (a path or <dataset>/<file>): predict from the jobs' measured "
            "profiles alone with the sharing model fitted to measurement (models as name or name:batch)",
        ),
    ] = None,
    data_dir: Annotated[str | None, typer.Option("--data-dir", help="local dataset directory")] = None,
) -> None:
    """Predicted power, speed and energy of a set of training jobs sharing GPUs, against each job alone.

    With --profiles: speeds, GPU power and energy saving of the set on one GPU, from profiles (docs/perf.md §9).

    Without: EaCO's quantities (Tables 1 and 3) under EaCO's own published fit (docs/eaco.md §2)."""
    names = [m.strip() for m in models.split(",") if m.strip()]
    if profiles:
        _colocate_measured(profiles, names, gpu or "H200", data_dir, as_json)
        return
    from ..perf.colocation import colocate

    gpu = gpu or "V100"
    with user_errors():
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


def _load(profiles: str, data_dir: str | None):
    from ..experiments.grid import parse_list
    from ..perf.profiles import load_profiles

    return load_profiles(parse_list(profiles), data_dir)


def _colocate_measured(
    profiles: str, names: list[str], gpu: str, data_dir: str | None, as_json: bool
) -> None:
    from ..perf.measured import colocate_measured

    with user_errors():
        out = colocate_measured(_load(profiles, data_dir), names, gpu)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    s = out["set"]
    table = Table(title=f"{' + '.join(out['models'])} time-slicing one {gpu} (sharing model: measured)")
    for col in ("job", "batch", "alone it/s", "alone W", "alone util", "speed", "it/s together"):
        table.add_column(col, justify="left" if col == "job" else "right")
    for name, job in out["jobs"].items():
        table.add_row(name, str(job["batch"]), f"{job['alone_it_per_s']:.2f}", f"{job['alone_power_w']:.0f}",
                      f"{job['alone_utilisation']:.0%}", f"{job['speed']:.3f}", f"{job['it_per_s']:.2f}")  # fmt: skip
    console.print(table)
    console.print(
        f"GPU power together {s['power_w']:.0f} W (held {s['held_w']:.0f} W, {s['held_w_source']}); energy "
        f"saving {s['energy_saving']:+.1%} against the same work done one job after another alone",
        highlight=False,
    )
    if "measured" in s:
        m = s["measured"]
        console.print(
            f"measured ({m['source']}): {m['power_w']:.0f} W, energy saving {m['energy_saving']:+.1%}",
            highlight=False,
        )
    for note in out["notes"]:
        console.print(f"note: {note}", highlight=False)


@perf_app.command("fit-sharing")
def fit_sharing_cmd(
    profiles: Annotated[
        str,
        typer.Option("--profiles", metavar="FILE[,FILE]", help="profile CSV(s) holding sets of two jobs"),
    ],
    data_dir: Annotated[str | None, typer.Option("--data-dir", help="local dataset directory")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of a table")] = False,
) -> None:
    """Fit the measured sharing model (switch overhead, switch power) to the profiles' sets of two, and show
    each set's error: the fit and the model wattsched ships (docs/perf.md §9.2)."""
    from ..perf.measured import MEASURED, check_rows, fit_sharing

    with user_errors():
        loaded = _load(profiles, data_dir)
        try:
            fitted, rows = fit_sharing(loaded)
        except ValueError as exc:
            from ..core.errors import WattschedError

            raise WattschedError(str(exc)) from None
        shipped = check_rows(loaded, MEASURED)
    if as_json:
        typer.echo(json.dumps({
            "fitted": fitted.describe(), "shipped": MEASURED.describe(),
            "rows": [_row_json(r) for r in rows], "shipped_rows": [_row_json(r) for r in shipped],
        }, indent=2))  # fmt: skip
        return
    table = Table(title=f"fit: o = {fitted.switch_overhead:.3f}, lambda = {fitted.switch_power:.3f} "
                        f"(shipped: {MEASURED.switch_overhead:.3f}, {MEASURED.switch_power:.3f})")  # fmt: skip
    for col in ("regime", "set", "speed (model / measured)", "speed error", "power W (model / measured)",
                "power error", "saving (model / measured)"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("regime", "set") else "right")
    for r in rows:
        table.add_row(
            r.regime, r.name,
            " ".join(f"{m:.3f}/{o:.3f}" for m, o in zip(r.speed_model, r.speed_measured, strict=True)),
            " ".join(f"{e:+.1%}" for e in r.speed_errors), f"{r.power_model_w:.0f}/{r.power_measured_w:.0f}",
            f"{r.power_error:+.1%}", f"{r.saving_model:+.1%}/{r.saving_measured:+.1%}",
        )  # fmt: skip
    console.print(table)


def _row_json(r) -> dict:
    return {
        "regime": r.regime, "set": r.name, "source": r.source, "speed_model": r.speed_model,
        "speed_measured": r.speed_measured, "speed_errors": r.speed_errors, "power_model_w": r.power_model_w,
        "power_measured_w": r.power_measured_w, "power_error": r.power_error, "saving_model": r.saving_model,
        "saving_measured": r.saving_measured,
    }  # fmt: skip
