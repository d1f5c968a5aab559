"""`wattsched signals ...`: inspect the hourly electricity price and carbon-intensity signals."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast
from zoneinfo import ZoneInfo

import typer
from rich.markup import escape
from rich.table import Table

from ..core.atomic import write_with
from ..core.errors import UnknownNameError
from ..data import registry
from ..energy.signals import catalog
from .common import console, extra_installed, missing_extra, user_errors

if TYPE_CHECKING:
    import numpy as np

    from ..energy.signals import clean

signals_app = typer.Typer(
    help="Inspect hourly electricity prices and grid carbon intensity.", no_args_is_help=True
)

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Local copy laid out as DIR/<dataset>/... (default: $WATTSCHED_DATA)."),
]
KINDS = ("price", "carbon", "both")


def _load_signals(
    region: str,
    year: int,
    kind: str,
    carbon_kind: str,
    data_dir: Path | None,
    fill: str | None,
    max_gap_hours: int,
    usd: bool,
) -> tuple[list[clean.GridSignal], list[str]]:
    """The requested signals, and notes about ones skipped because `both` asked for a series that does not exist."""
    from ..energy.signals import clean

    if kind not in KINDS:
        raise UnknownNameError("signal kind", kind, KINDS)
    if fill is not None and fill not in catalog.FILL_MODES:
        raise UnknownNameError("fill mode", fill, catalog.FILL_MODES)
    fill_mode = cast("catalog.Fill | None", fill)  # checked just above
    wanted = ["price", "carbon"] if kind == "both" else [kind]
    notes: list[str] = []
    catalogs = {"price": catalog.price_catalog(), "carbon": catalog.carbon_catalog()}
    if kind == "both":
        # With `both`, a missing region/year for one signal is a note, as long as the other exists.
        present = [k for k in wanted if year in catalogs[k].get(region, [])]
        if present:
            notes = [
                f"no {k} series for {region} {year}; showing {present[0]} only"
                for k in wanted
                if k not in present
            ]
        wanted = present or wanted  # neither exists: let the loader raise its error listing valid names
    out = []
    for k in wanted:
        if k == "price":
            out.append(
                clean.load_price(
                    region, year, data_dir, max_gap_hours=max_gap_hours, fill=fill_mode, to_usd=usd
                )
            )
        else:
            out.append(
                clean.load_carbon(
                    region, year, data_dir, carbon_kind, max_gap_hours=max_gap_hours, fill=fill_mode
                )
            )
    return out, notes


def _label(s: clean.GridSignal) -> str:
    return "price" if s.kind == "price" else f"carbon intensity ({s.name.removeprefix('carbon_')})"


def _report_rows(signals: list[clean.GridSignal]) -> list[tuple[str, list[str]]]:
    def borrowed(r: dict[str, Any]) -> str:
        return ", ".join(f"{b['hours']} h from {Path(b['file']).name}" for b in r["borrowed"]) or "0"

    def gaps(r: dict[str, Any]) -> str:
        return str(len(r["gaps"])) + (
            f" (longest {max(g['hours'] for g in r['gaps'])} h)" if r["gaps"] else ""
        )

    rows: list[tuple[str, Any]] = [
        ("timestamps", lambda r: r["timestamps"]),
        ("rows read", lambda r: str(r["rows_read"])),
        ("rows outside the local year", lambda r: str(r["rows_outside_window"])),
        ("duplicate rows merged (mean)", lambda r: str(r["duplicates_merged"])),
        ("non-existent local times dropped", lambda r: str(r["nonexistent_dropped"])),
        ("ambiguous local times (once / rows)", lambda r: f"{r['ambiguous_single']} / {r['ambiguous_rows']}"),
        ("hours borrowed from neighbouring year", borrowed),
        ("gaps", gaps),
        ("hours interpolated (gap <= max_gap_hours)", lambda r: str(r["interpolated_hours"])),
        ("hours held at the window edge", lambda r: str(r["held_hours"])),
        ("long-gap hours filled (--fill)", lambda r: f"{r['filled_hours']} ({r['fill'] or 'none'})"),
        ("hours in series", lambda r: str(r["hours"])),
    ]
    return [(name, [fn(s.report) for s in signals]) for name, fn in rows]


def _plot(signals: list[clean.GridSignal], profiles: list[np.ndarray], out: Path) -> Path:
    # Figure without pyplot: no global backend state, safe inside a library/CLI process.
    import numpy as np
    import pandas as pd
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    first = signals[0]
    fig = Figure(figsize=(12, 8), layout="constrained")
    engine = fig.get_layout_engine()
    assert isinstance(engine, ConstrainedLayoutEngine)
    engine.set(rect=(0, 0.045, 1, 0.955))  # room for the attribution footer
    top, bottom = fig.subplots(2, 1, height_ratios=[3, 2])
    colours = {"price": ("tab:blue", "navy"), "carbon": ("tab:green", "darkgreen")}
    local_times = first.times_utc().tz_convert(first.tz).tz_localize(None)
    hours = np.arange(24)
    top_axes, bottom_axes = [top], [bottom]
    if len(signals) == 2:
        top_axes.append(top.twinx())
        bottom_axes.append(bottom.twinx())
    notes = []
    for s, prof, ax_t, ax_b in zip(signals, profiles, top_axes, bottom_axes, strict=True):
        light, dark = colours[s.kind]
        daily = pd.Series(s.values, index=local_times).groupby(local_times.date).mean()
        ax_t.plot(local_times, s.values, color=light, lw=0.35, alpha=0.45, label=f"{_label(s)}, hourly")
        ax_t.plot(
            pd.to_datetime(daily.index),
            daily.to_numpy(),
            color=dark,
            lw=1.4,
            label=f"{_label(s)}, daily mean",
        )
        # One price spike can flatten the whole year; clip the axis (never the data) and say so on the plot.
        lo, hi = np.percentile(s.values, [0.05, 99.95])
        if s.values.max() > hi + 0.5 * (hi - lo) or s.values.min() < lo - 0.5 * (hi - lo):
            pad = 0.05 * (hi - lo)
            ax_t.set_ylim(lo - pad, hi + pad)
            notes.append(
                f"{_label(s)} axis clipped to 0.05-99.95th percentiles; "
                f"full range {s.values.min():.1f} .. {s.values.max():.1f} {s.unit}"
            )
        for g in (g for g in s.report["gaps"] if g["long"]):
            # Shade long gaps filled on request, so made-up stretches are visible on the plot.
            g0 = pd.Timestamp(g["first_missing_utc"]).tz_convert(first.tz).tz_localize(None)
            ax_t.axvspan(g0, g0 + pd.Timedelta(hours=g["hours"]), color="grey", alpha=0.3, lw=0)
        if any(g["long"] for g in s.report["gaps"]):
            notes.append(f"grey: {_label(s)} gaps filled by --fill {s.report['fill']}")
        ax_t.set_ylabel(f"{_label(s)} [{s.unit}]", color=dark)
        ax_b.plot(hours, prof, color=dark, marker="o", label=_label(s))
        ax_b.set_ylabel(f"mean {_label(s)} [{s.unit}]", color=dark)
    top.set_title(f"{first.region} {first.year}: hourly series, local time ({first.tz})")
    if notes:
        top.text(0.01, 0.98, "\n".join(notes), transform=top.transAxes, va="top", fontsize=8)
    bottom.set_title("average daily profile by local hour (each value holds from the start of its hour)")
    bottom.set_xlabel("local hour of day")
    bottom.set_xticks(hours)
    bottom.grid(alpha=0.3)
    top.grid(alpha=0.3)
    handles = [h for ax in top_axes for h in ax.get_legend_handles_labels()[0]]
    top.legend(handles, [h.get_label() for h in handles], loc="upper right", fontsize=8)
    fig.text(0.005, 0.004, "\n".join(dict.fromkeys(s.attribution for s in signals)), fontsize=7, alpha=0.85)
    return write_with(out, lambda p: fig.savefig(p, format="png", dpi=110))


@signals_app.command("show")
def show(
    region: Annotated[
        str, typer.Option("--region", help="Grid region, e.g. US-CAL-CISO (see `signals list`).")
    ],
    year: Annotated[int, typer.Option("--year", help="Calendar year (in the region's local time).")],
    kind: Annotated[str, typer.Option("--kind", help="price | carbon | both.")] = "both",
    carbon_kind: Annotated[
        str, typer.Option("--carbon-kind", help="direct | lca carbon intensity.")
    ] = "direct",
    data_dir: DataDirOption = None,
    out: Annotated[
        Path | None, typer.Option("--out", help=escape("PNG path [default: signals_<region>_<year>.png]."))
    ] = None,
    fill: Annotated[
        str | None, typer.Option("--fill", help="Fill gaps longer than --max-gap-hours: hold | interpolate.")
    ] = None,
    max_gap_hours: Annotated[
        int, typer.Option("--max-gap-hours", help="Longest gap interpolated without --fill.")
    ] = catalog.DEFAULT_MAX_GAP_HOURS,
    usd: Annotated[
        bool, typer.Option("--usd", help=f"Convert EUR prices at {catalog.EUR_TO_USD} USD/EUR.")
    ] = False,
) -> None:
    """Summary statistics, average daily shape by local hour, clean-up report and a PNG plot."""
    import numpy as np

    from ..energy.signals import clean

    with user_errors():
        signals, notes = _load_signals(region, year, kind, carbon_kind, data_dir, fill, max_gap_hours, usd)
        first = signals[0]
        end_local = first.end_utc.astimezone(ZoneInfo(first.tz))
        start_local = first.start_utc.astimezone(ZoneInfo(first.tz))
        console.print(
            f"[bold]{region} {year}[/]: local year {start_local:%Y-%m-%d %H:%M} .. {end_local:%Y-%m-%d %H:%M} "
            f"{first.tz} = {first.start_utc:%Y-%m-%d %H:%M} .. {first.end_utc:%Y-%m-%d %H:%M} UTC, "
            f"{first.hours} hourly values",
            highlight=False,
        )
        for note in notes:
            console.print(f"note: {note}", highlight=False)
        profiles = [clean.daily_profile(s, "local") for s in signals]

        stats = Table(title="hourly values")
        for col in ("signal", "unit", "min", "mean", "max", "daily-profile min (local hour)"):
            stats.add_column(col, justify="left" if col in ("signal", "unit") else "right")
        for s, prof in zip(signals, profiles, strict=True):
            v = s.values
            stats.add_row(
                _label(s),
                s.unit,
                f"{v.min():.2f}",
                f"{v.mean():.2f}",
                f"{v.max():.2f}",
                f"{int(np.argmin(prof)):02d}:00",
            )
        console.print(stats)

        shape = Table(title=f"average daily shape by local hour ({first.tz})")
        shape.add_column("local hour", justify="right")
        for s in signals:
            shape.add_column(escape(f"{_label(s)} [{s.unit}]"), justify="right")
        for h in range(24):
            shape.add_row(f"{h:02d}:00", *(f"{p[h]:.2f}" for p in profiles))
        console.print(shape)

        report = Table(title="clean-up report")
        report.add_column("")
        for s in signals:
            report.add_column(_label(s))
        for name, cells in _report_rows(signals):
            report.add_row(name, *cells)
        console.print(report)
        for s in signals:
            console.print(f"{s.name} file: {s.report['source_file']}", highlight=False, soft_wrap=True)
        for s in signals:
            for g in (g for g in s.report["gaps"] if g["long"]):
                console.print(
                    f"{s.name}: filled {g['hours']} h from {g['first_missing_utc']} by {g['method']}",
                    highlight=False,
                )
            if "converted" in s.report:
                console.print(f"{s.name}: {s.report['converted']}", highlight=False)
        for text in dict.fromkeys(s.attribution for s in signals):
            console.print(f"source: {text}", highlight=False)

        target = out if out is not None else Path(f"signals_{region}_{year}.png")
        if not extra_installed("matplotlib"):
            console.print(f"plot skipped: {missing_extra('matplotlib')}", highlight=False, soft_wrap=True)
            return
        _plot(signals, profiles, target)
        console.print(f"plot: {target}", highlight=False)


def _years(years: list[int]) -> str:
    return ", ".join(map(str, years)) or "-"


@signals_app.command("list")
def list_signals(data_dir: DataDirOption = None) -> None:
    """Regions and years whose price / carbon-intensity files are available locally."""
    with user_errors():
        local = catalog.available_locally(data_dir)
        table = Table(title="grid signals available locally")
        for col in ("region", "time zone", "price years", "carbon years"):
            table.add_column(col)
        for region, tz in catalog.REGION_TZ.items():
            price = local["price"].get(region, [])
            carbon = local["carbon"].get(region, [])
            table.add_row(region, tz, _years(price), _years(carbon))
        console.print(table)
        console.print(
            "searched: " + ", ".join(str(r) for r in registry.data_roots(data_dir)), highlight=False
        )
