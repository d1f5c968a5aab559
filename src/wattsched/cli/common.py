"""Shared CLI plumbing: one-line errors instead of tracebacks, and a rich progress bar."""

from __future__ import annotations

import contextlib
import importlib.util
import re
from collections.abc import Callable, Iterator
from pathlib import Path, PurePath

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from ..core.errors import UnknownNameError, WattschedError

console = Console()
err_console = Console(stderr=True)

_LINE_BREAKS = re.compile(r"\s*[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]\s*")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_EXPECTED_FILE = {"workload": "a CSV file", "cluster": "a cluster YAML file"}

# The optional dependencies (pyproject.toml [project.optional-dependencies]): module -> (what it is, the extra
# that installs it). `pip install wattsched` alone is the simulator; the commands that need one of these import
# it when they run, and say which extra to install when it is missing (require_extra, user_errors).
OPTIONAL_MODULES: dict[str, tuple[str, str]] = {
    "kubernetes": ("the kubernetes client", "k8s"),
    "prometheus_client": ("prometheus-client", "live"),
    "pynvml": ("NVML bindings (nvidia-ml-py)", "agent"),
    "matplotlib": ("matplotlib", "plots"),
    "ray": ("Ray", "ray"),
}


def one_line(message: str) -> str:
    """``message`` as one printable line: line breaks become spaces, other control characters are escaped."""
    text = _LINE_BREAKS.sub(" ", str(message).strip())
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def print_error(message: str) -> None:
    """``error: <message>`` on stderr as exactly one line, whatever the message and the terminal width."""
    text = Text.assemble(("error:", "bold red"), " ", one_line(message))  # Text: no markup, no emoji codes
    err_console.print(text, highlight=False, soft_wrap=True)


def _describe(exc: WattschedError) -> str:
    if isinstance(exc, UnknownNameError) and exc.kind in _EXPECTED_FILE:
        with contextlib.suppress(OSError, ValueError):
            if Path(exc.name).is_dir():  # a path that is not a file: say so rather than list every name
                return f"{exc.name}: is a directory, expected {_EXPECTED_FILE[exc.kind]}"
    return str(exc)


def _describe_os_error(exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    return f"{reason}: {exc.filename}" if exc.filename else reason


def _describe_decode_error(exc: UnicodeDecodeError) -> str:
    """Name the file being read when a frame of the traceback holds it (``Path.read_text`` does)."""
    path = None
    tb = exc.__traceback__
    while tb is not None:
        for name in ("self", "path"):
            value = tb.tb_frame.f_locals.get(name)
            if isinstance(value, PurePath):
                path = value
        tb = tb.tb_next
    where = f"{path}: " if path is not None else "an input file is "
    return f"{where}not UTF-8 text: {exc}"


def _command_path() -> str:
    """``wattsched serve k8s-scheduler`` while a command runs; "this command" outside one."""
    for name in ("typer._click.globals", "click.globals"):  # typer's own click (newer typer), else click's
        try:
            ctx = importlib.import_module(name).get_current_context(silent=True)
        except (ImportError, AttributeError):
            continue
        if ctx is not None:
            return str(ctx.command_path)
    return "this command"


def missing_extra(module: str, command: str | None = None, extra: str | None = None) -> str:
    """``wattsched serve k8s-scheduler needs the kubernetes client: pip install 'wattsched[k8s]'``."""
    what, default_extra = OPTIONAL_MODULES[module]
    return f"{command or _command_path()} needs {what}: pip install 'wattsched[{extra or default_extra}]'"


def require_extra(module: str, extra: str | None = None) -> None:
    """Exit 2 with one line naming the extra when the optional `module` is not installed (before anything
    starts: no server half up, no traceback)."""
    if not extra_installed(module):
        print_error(missing_extra(module, extra=extra))
        raise typer.Exit(2)


def extra_installed(module: str) -> bool:
    """Whether the optional `module` can be imported (found on the path; nothing is imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a module left half-imported
        return False


def _optional_module(exc: ModuleNotFoundError) -> str | None:
    root = (exc.name or "").split(".")[0]
    return root if root in OPTIONAL_MODULES else None


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn user-fixable errors into one `error: ...` line on stderr and exit code 2 (a missing optional
    dependency included: the line names the extra that installs it)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        module = _optional_module(exc)
        if module is None:
            raise
        print_error(missing_extra(module))
        raise typer.Exit(2) from None
    except WattschedError as exc:
        print_error(_describe(exc))
        raise typer.Exit(2) from None
    except OSError as exc:
        print_error(_describe_os_error(exc))
        raise typer.Exit(2) from None
    except UnicodeDecodeError as exc:  # e.g. a binary file given as a YAML config
        print_error(_describe_decode_error(exc))
        raise typer.Exit(2) from None


@contextlib.contextmanager
def progress_bar(label: str, enabled: bool = True) -> Iterator[Callable[[int, int], None] | None]:
    """A live progress bar on a terminal; nothing at all when stderr is a file or a pipe."""
    if not enabled:
        yield None
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        disable=not err_console.is_terminal,
    ) as bar:
        task = bar.add_task(escape(label), total=None)  # a path may hold '[...]'

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        try:
            yield update
        except BaseException:
            bar.live.transient = True  # erase the bar so that an error message stands alone
            raise
