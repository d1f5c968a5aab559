"""`wattsched data ...`: list, download and verify the registered public datasets."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from ..core.errors import WattschedError
from ..data import registry

if TYPE_CHECKING:
    from ..data import fetch as fetch_mod  # the downloader (http, ssl): imported when a command downloads

data_app = typer.Typer(
    help="List, download and verify the public datasets wattsched uses.", no_args_is_help=True
)

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Local copy laid out as DIR/<dataset>/... (default: $WATTSCHED_DATA)."),
]


def _fail(exc: WattschedError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


def _availability(ds: registry.Dataset, data_dir: Path | None) -> str:
    present = sum(registry.is_available(ds.name, f.path, data_dir) for f in ds.files)
    if present == len(ds.files):
        return "yes"
    return "no" if present == 0 else f"partial ({present}/{len(ds.files)})"


@data_app.command("list")
def list_datasets(data_dir: DataDirOption = None) -> None:
    """Show the registered datasets and whether each is available locally (presence only, not checksums)."""
    try:
        all_datasets = registry.datasets()
    except WattschedError as exc:
        raise _fail(exc) from None
    table = Table(title="wattsched datasets")
    table.add_column("name", no_wrap=True)
    table.add_column("files", justify="right")
    table.add_column("size MB", justify="right")
    table.add_column("licence")
    table.add_column("local", no_wrap=True)
    for ds in all_datasets.values():
        size_mb = sum(f.size for f in ds.files) / 1e6
        table.add_row(ds.name, str(len(ds.files)), f"{size_mb:.1f}", ds.licence, _availability(ds, data_dir))
    Console().print(table)
    roots = ", ".join(str(r) for r in registry.data_roots(data_dir))
    typer.echo(f"searched: {roots}")


@data_app.command("fetch")
def fetch_dataset(
    name: Annotated[str, typer.Argument(help="Dataset name (see `wattsched data list`).")],
    dest: Annotated[
        Path | None,
        typer.Option("--dest", help="Download root (default: $WATTSCHED_CACHE or ~/.cache/wattsched)."),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="Mirror serving BASE/<dataset>/<path> (default: $WATTSCHED_MIRROR)."),
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Network timeout per request, seconds.")] = 60,
) -> None:
    """Download a dataset, verifying every file's sha256; files already present and valid are skipped."""
    from ..data import fetch as fetch_mod

    try:
        registry.dataset(name)  # fail on a bad name before drawing any progress display
    except WattschedError as exc:
        raise _fail(exc) from None
    console = Console(stderr=True)
    counts = {"skipped": 0, "done": 0}
    tasks: dict[str, TaskID] = {}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=console,
    ) as progress:

        def on_progress(event: fetch_mod.FileProgress) -> None:
            key = event.file.path
            if key not in tasks:
                tasks[key] = progress.add_task(key, total=event.file.size)
            progress.update(tasks[key], completed=event.bytes_done)
            if event.state in counts:
                counts[event.state] += 1
                if event.state == "skipped":
                    progress.update(tasks[key], description=f"{key} (already present)")

        try:
            paths = fetch_mod.fetch(name, dest=dest, base_url=base_url, progress=on_progress, timeout=timeout)
        except WattschedError as exc:
            progress.stop()
            raise _fail(exc) from None
    where = (Path(dest).expanduser() if dest is not None else registry.cache_dir()) / name
    typer.echo(
        f"{name}: {len(paths)} files in {where} "
        f"({counts['done']} downloaded, {counts['skipped']} already present)"
    )


@data_app.command("verify")
def verify_dataset(
    name: Annotated[str, typer.Argument(help="Dataset name (see `wattsched data list`).")],
    data_dir: DataDirOption = None,
) -> None:
    """Check the sha256 of every file of a local copy; exit 1 if any file is missing or differs."""
    from ..data import fetch as fetch_mod

    try:
        folder, problems = fetch_mod.verify(name, data_dir)
    except WattschedError as exc:
        raise _fail(exc) from None
    n_files = len(registry.dataset(name).files)
    if not problems:
        typer.echo(f"{name}: all {n_files} files in {folder} match the registry")
        return
    for problem in problems:
        typer.echo(f"{name}/{problem.path}: {problem.reason}", err=True)
    typer.echo(f"{name}: {len(problems)} of {n_files} files in {folder} are missing or differ", err=True)
    raise typer.Exit(1)
