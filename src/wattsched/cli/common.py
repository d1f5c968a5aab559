"""Shared CLI plumbing: one-line errors instead of tracebacks, and a rich progress bar."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..core.errors import WattschedError

console = Console()
err_console = Console(stderr=True)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn user-fixable errors into `error: ...` on stderr and exit code 2."""
    try:
        yield
    except WattschedError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        err_console.print(f"[bold red]error:[/] {exc.strerror or exc}: {exc.filename or ''}", highlight=False)
        raise typer.Exit(2) from None


@contextlib.contextmanager
def progress_bar(label: str, enabled: bool = True) -> Iterator[Callable[[int, int], None] | None]:
    if not enabled:
        yield None
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=not sys.stderr.isatty(),
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
