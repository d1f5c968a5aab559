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
