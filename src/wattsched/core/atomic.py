"""Atomic file output: write to a temporary file in the same directory, then rename over the target."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path; on success it replaces `target`, on failure it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp creates 0600; give outputs the usual permissions
        os.replace(tmp_path, target)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def write_with(target: str | Path, writer: Callable[[Path], Any]) -> Path:
    """Call `writer(tmp_path)` and move the result into place atomically."""
    with atomic_path(target) as tmp:
        writer(tmp)
    return Path(target)


def write_text(target: str | Path, text: str) -> Path:
    return write_with(target, lambda p: p.write_text(text, encoding="utf-8"))


def write_json(target: str | Path, obj: Any) -> Path:
    return write_text(target, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n")


@contextlib.contextmanager
def atomic_open(target: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    with atomic_path(target) as tmp, open(tmp, mode) as fh:
        yield fh
