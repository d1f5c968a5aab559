"""Running an experiment's independent simulations: the grid executors and the one seam every experiment uses.

A grid is a set of cells, each ``fn(shared, *args)``: `shared` is the setup every cell needs (a trace, a cluster,
the experiment's settings), sent to each worker once; `args` are the cell's own (policy, seed, ...). Backends are
registered by name (``process``: worker processes on this machine, the default; ``ray``: a Ray cluster); each opens
an executor with the ``concurrent.futures`` interface (``submit(fn, *args)`` gives a Future, ``shutdown``) and a
``workers`` attribute (how many cells run at once). :func:`grid_executor` adds the cell cache that makes an
interrupted grid resumable (:mod:`.cells`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol, cast

from ..core.errors import WattschedError
from ..core.registry import Registry
from .cells import CachedExecutor, CellCache, cells_dir
from .grid import worker_count

ProgressFn = Callable[[int, int], None]  # (done, total): every experiment's progress callback
FIRST_SEED = 42  # the first of an experiment's seeds (the next ones count up from it)


class GridExecutor(Protocol):
    workers: int

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future: ...

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None: ...


class Backend(Protocol):
    @staticmethod
    def check(address: str | None) -> None:
        """Fail (WattschedError) before any work when the backend cannot run with these settings."""

    @staticmethod
    def open(shared: Any, workers: int | None, cells: int, address: str | None) -> GridExecutor:
        """An executor for a grid of `cells` cells; `workers` None means the backend's default width."""


GRID_BACKENDS: Registry[Backend] = Registry("backend")


def grid_backend(name: str) -> type[Backend]:
    """The backend registered as `name`: its class, never instantiated (the methods are static)."""
    return cast("type[Backend]", GRID_BACKENDS.factory(name))


@dataclass(frozen=True)
class Execution:
    """Where an experiment's grid runs and whether it resumes: `backend` a name of GRID_BACKENDS, `address` the Ray
    cluster's (None: a local one), `resume` keeps finished cells under ``OUT/.cells`` until the experiment's files
    are written, `fresh` clears them first, `notify` receives one-line notices (cells resumed)."""

    backend: str = "process"
    address: str | None = None
    resume: bool = True
    fresh: bool = False
    notify: Callable[[str], None] | None = None

    def check(self) -> None:
        grid_backend(self.backend).check(self.address)


# -- the process backend ------------------------------------------------------------------------------------
# Set in every worker process of every backend: one BLAS thread per process, the processes use the cores.
WORKER_ENV = {"OMP_NUM_THREADS": "1"}

_WORKER_SHARED: Any = None


def _init_process_worker(shared: Any) -> None:
    global _WORKER_SHARED
    _WORKER_SHARED = shared
    for name, value in WORKER_ENV.items():
        os.environ.setdefault(name, value)


def _call_with_shared(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(_WORKER_SHARED, *args)


class ProcessExecutor:
    """A process pool whose workers receive the shared setup once, in their initializer."""

    def __init__(self, shared: Any, workers: int) -> None:
        self.workers = workers
        self._pool = ProcessPoolExecutor(
            max_workers=workers, initializer=_init_process_worker, initargs=(shared,)
        )

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        return self._pool.submit(_call_with_shared, fn, *args)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        try:
            self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
        except BaseException:
            # A second Ctrl-C while waiting: the pool would never tell its workers to stop, and the interpreter
            # would wait for them at exit. (Python 3.14 has terminate_workers(); 3.11 only this attribute.)
            for process in list((getattr(self._pool, "_processes", None) or {}).values()):
                process.terminate()
            raise


class InlineExecutor:
    """The executor interface, run in this process (one worker: no pickling, easy to debug)."""

    workers = 1

    def __init__(self, shared: Any = None) -> None:
        self.shared = shared

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(self.shared, *args))
        except BaseException as exc:  # handed to the caller through the future
            fut.set_exception(exc)
        return fut

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


@GRID_BACKENDS.register("process")
class ProcessBackend:
    """Worker processes on this machine, one per core by default; one worker runs the cells in this process."""

    @staticmethod
    def check(address: str | None) -> None:
        if address is not None:
            raise WattschedError("--address is for --backend ray (the process backend runs on this machine)")

    @staticmethod
    def open(shared: Any, workers: int | None, cells: int, address: str | None) -> GridExecutor:
        ProcessBackend.check(address)
        width = worker_count(workers, cells)
        return ProcessExecutor(shared, width) if width > 1 else InlineExecutor(shared)


@GRID_BACKENDS.register("ray")
class RayBackend:
    """A Ray cluster: ``--address`` of a running one, else a local Ray started for the grid (``wattsched[ray]``)."""

    @staticmethod
    def check(address: str | None) -> None:
        from .ray_backend import check_ray

        check_ray(address)

    @staticmethod
    def open(shared: Any, workers: int | None, cells: int, address: str | None) -> GridExecutor:
        from .ray_backend import RayExecutor

        return RayExecutor(shared, workers, cells, address)


# -- the seam -----------------------------------------------------------------------------------------------
@contextlib.contextmanager
def grid_executor(
    shared: Any, workers: int | None, cells: int, out: str | Path | None, execution: Execution | None = None
) -> Iterator[GridExecutor]:
    """An executor for a grid of `cells` cells of an experiment writing into `out` (None: nowhere to keep finished
    cells, so no resume), shut down (pending cells cancelled) on exit."""
    execution = execution or Execution()
    backend = grid_backend(execution.backend)
    cache = CellCache(cells_dir(out)) if out is not None and execution.resume else None
    if cache is not None and execution.fresh:
        cache.clear()
    pool: GridExecutor = backend.open(shared, workers, cells, execution.address)
    if cache is not None:
        pool = CachedExecutor(pool, cache, shared, execution.notify)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def grid_done(out: str | Path) -> None:
    """The experiment's files are written: its cell cache has served its purpose."""
    CellCache(cells_dir(out)).clear()


class GridRun(NamedTuple):
    results: list  # in completion order
    workers: int  # cells that ran at once


def run_tasks(
    fn: Callable[..., Any],
    shared: Any,
    tasks: Sequence[tuple],
    workers: int | None,
    progress: ProgressFn | None = None,
    out: str | Path | None = None,
    execution: Execution | None = None,
) -> GridRun:
    """``fn(shared, *task)`` for every task, started in the order given as far as the workers allow (longest
    first keeps them busy to the end); results in completion order."""
    results: list = []
    if progress:
        progress(0, len(tasks))
    with grid_executor(shared, workers, len(tasks), out, execution) as pool:
        pending = {pool.submit(fn, *t) for t in tasks}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                results.append(fut.result())
                if progress:
                    progress(len(results), len(tasks))
    return GridRun(results, pool.workers)
