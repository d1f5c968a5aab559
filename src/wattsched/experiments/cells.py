"""Resumable grids: every finished cell (one task of an experiment's grid) is kept on disk until the experiment's
files are written, so that an interrupted grid, rerun with the same command and output directory, runs only the
cells it had not finished.

A cell is keyed by the task function's qualified name, a digest of its arguments and of the shared setup, the
wattsched version and a digest of the package's own source (its .py and .c files). The digest walks the objects
(dataclasses, mappings, sets, numpy arrays, frames) rather than pickling them, because a pickle of a set of strings
changes with the per-process hash seed. A changed input or a changed line of code gives a new key, so stale cells
are never used (an edited policy once came back with its old results when only the version was keyed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import pickle
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import __version__

CELLS_DIR = ".cells"  # inside an experiment's output directory


@functools.cache
def source_digest() -> str:
    """A digest of the installed package's source files (about 10 ms, once per process)."""
    return tree_digest(Path(__file__).resolve().parents[1])


def tree_digest(root: Path) -> str:
    """A digest of the .py and .c files under `root`: their paths and bytes."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".c") and p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def cells_dir(out: str | Path) -> Path:
    return Path(out) / CELLS_DIR


def _feed(h, obj: Any) -> None:
    """Feed a canonical encoding of `obj` into the hash `h` (type tags keep 1, 1.0, '1' and True apart)."""
    if obj is None or isinstance(obj, bool | int | float | complex | str | bytes):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
    elif isinstance(obj, np.generic):
        _feed(h, obj.item())
    elif isinstance(obj, np.ndarray):
        h.update(f"ndarray:{obj.dtype.str}:{obj.shape};".encode())
        if obj.dtype.hasobject:
            _feed(h, obj.tolist())
        else:
            h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, pd.DataFrame | pd.Series):
        h.update(f"{type(obj).__name__}:".encode())
        _feed(h, [str(d) for d in np.atleast_1d(obj.dtypes)])
        _feed(h, list(obj.columns) if isinstance(obj, pd.DataFrame) else obj.name)
        h.update(pd.util.hash_pandas_object(obj, index=True).to_numpy().tobytes())
    elif isinstance(obj, list | tuple):
        h.update(f"{type(obj).__name__}[{len(obj)}]".encode())
        for item in obj:
            _feed(h, item)
    elif isinstance(obj, dict):
        h.update(f"dict[{len(obj)}]".encode())
        for key_digest, key in sorted((digest(k), k) for k in obj):
            h.update(key_digest.encode())
            _feed(h, obj[key])
    elif isinstance(obj, set | frozenset):
        h.update(f"set[{len(obj)}]".encode())
        for item_digest in sorted(digest(item) for item in obj):
            h.update(item_digest.encode())
    elif isinstance(obj, Path):
        h.update(f"path:{obj};".encode())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(f"{type(obj).__module__}.{type(obj).__qualname__}(".encode())
        for f in dataclasses.fields(obj):
            h.update(f.name.encode())
            _feed(h, getattr(obj, f.name))
        h.update(b")")
    elif hasattr(obj, "model_dump"):  # a pydantic model
        h.update(f"{type(obj).__module__}.{type(obj).__qualname__}(".encode())
        _feed(h, obj.model_dump())
        h.update(b")")
    else:  # anything else as its pickle (stable for the plain objects experiments pass)
        h.update(f"{type(obj).__module__}.{type(obj).__qualname__}:".encode())
        h.update(pickle.dumps(obj, protocol=5))


def digest(obj: Any) -> str:
    """A hex digest of `obj`'s content, the same in every process and on every run."""
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()


class CellCache:
    """One pickle per finished cell under `root`, written atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        return self.root / f"{key}.pkl"

    def load(self, key: str) -> tuple[bool, Any]:
        """(found, result); an unreadable file counts as not found (the cell runs again)."""
        try:
            with open(self.path(key), "rb") as fh:
                return True, pickle.load(fh)
        except FileNotFoundError:
            return False, None
        except Exception:  # truncated by a full disk, or a class that changed since: run the cell again
            return False, None

    def store(self, key: str, result: Any) -> None:
        from ..core.atomic import write_with

        payload = pickle.dumps(result, protocol=5)
        write_with(self.path(key), lambda p: p.write_bytes(payload))

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class CachedExecutor:
    """Wraps a grid executor: a cell found in the cache comes back as an already completed future (its run is
    skipped); any other cell runs on the wrapped executor and is stored before its future completes, so a caller
    that stops at any point has every cell it saw finish on disk."""

    def __init__(self, inner, cache: CellCache, shared: Any, notify: Callable[[str], None] | None = None):
        self.inner = inner
        self.workers = inner.workers
        self.cache = cache
        self.notify = notify
        self.shared_digest = digest(shared)
        self.resumed = 0
        self.submitted = 0
        self._lock = threading.Lock()

    def key(self, fn: Callable, args: tuple) -> str:
        name = f"{fn.__module__}.{fn.__qualname__}"
        return digest((__version__, source_digest(), name, self.shared_digest, args))[:40]

    def submit(self, fn: Callable, *args: Any) -> Future:
        key = self.key(fn, args)
        with self._lock:
            self.submitted += 1
        found, result = self.cache.load(key)
        if found:
            with self._lock:
                self.resumed += 1
            done: Future = Future()
            done.set_result(result)
            return done
        outer: Future = Future()
        self.inner.submit(fn, *args).add_done_callback(lambda inner: self._finish(key, inner, outer))
        return outer

    def _finish(self, key: str, inner: Future, outer: Future) -> None:
        if inner.cancelled():
            outer.cancel()
            return
        exc = inner.exception()
        if exc is not None:
            outer.set_exception(exc)
            return
        result = inner.result()
        with contextlib.suppress(OSError):  # a full disk only costs the resume, never the run
            self.cache.store(key, result)
        outer.set_result(result)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        self.inner.shutdown(wait=wait, cancel_futures=cancel_futures)
        if self.resumed and self.notify:
            self.notify(f"resumed {self.resumed} of {self.submitted} runs from {self.cache.root}")
