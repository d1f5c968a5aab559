"""Errors that the CLI turns into one readable line (never a traceback)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


class WattschedError(Exception):
    """Base class for errors a user can fix (bad input, unknown names, missing data)."""


class InputError(WattschedError):
    """A bad value in an input file, located by file, line and field."""

    def __init__(self, path: str | Path, line: int | None, field: str | None, message: str):
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        where = self.path if line is None else f"{self.path}:{line}"
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}")

    def __reduce__(self):
        # Pickled by the constructor's arguments: the error crosses to and from worker processes.
        return type(self), (self.path, self.line, self.field, self.message)


class UnknownNameError(WattschedError):
    """An unknown policy, cluster, workload or dataset name; lists the valid ones."""

    def __init__(self, kind: str, name: str, valid: Iterable[str]):
        self.kind = kind
        self.name = name
        self.valid = sorted(valid)
        plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
        super().__init__(f"unknown {kind} '{name}'; valid {plural}: {', '.join(self.valid)}")

    def __reduce__(self):
        return type(self), (self.kind, self.name, self.valid)


class DataNotFoundError(WattschedError):
    """A dataset file is not in the data directory or the download cache."""
