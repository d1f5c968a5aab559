"""Running an experiment's independent simulations over worker processes (one per core by default)."""

from __future__ import annotations

import os
from concurrent.futures import Future, ProcessPoolExecutor


def init_worker() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread per process: the processes use the cores


class InlineExecutor:
    """The executor interface, run in this process (one worker: no pickling, easy to debug)."""

    def submit(self, fn, *args) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # handed to the caller through the future
            fut.set_exception(exc)
        return fut

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def executor(workers: int):
    """A process pool of `workers`, or the inline executor for one."""
    if workers > 1:
        return ProcessPoolExecutor(max_workers=workers, initializer=init_worker)
    return InlineExecutor()


def run_tasks(fn, setup, tasks, workers: int, progress=None) -> list:
    """``fn(setup, *task)`` for every task over `workers` processes, results in completion order."""
    from concurrent.futures import FIRST_COMPLETED, wait

    results: list = []
    pool = executor(workers)
    if progress:
        progress(0, len(tasks))
    try:
        pending = {pool.submit(fn, setup, *t) for t in tasks}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                results.append(fut.result())
                if progress:
                    progress(len(results), len(tasks))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results
