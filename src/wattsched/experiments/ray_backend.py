"""The ``ray`` grid backend: an experiment's cells as Ray tasks (``pip install 'wattsched[ray]'``).

The shared setup goes into the object store once, as a pickle, and each worker process unpickles it once (like the
process pool's initializer: every worker gets its own writable copy). Cells start in the order submitted, at most
`workers` at a time (default: the cluster's CPUs), so that the longest-first order of a grid holds on Ray too; a
dispatcher thread launches the next cell when one finishes. Every worker of the cluster needs wattsched installed
(a local cluster's workers run this interpreter).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import socket
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..core.errors import WattschedError
from .parallel import WORKER_ENV

INSTALL_HINT = "pip install 'wattsched[ray]'"
CONNECT_TIMEOUT_S = 5.0
CANCEL_WAIT_S = 30.0
AUTH_MODE_VARIABLE = "RAY_AUTH_MODE"


def import_ray():
    try:
        import ray
    except ImportError:
        raise WattschedError(f"--backend ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a ``host:port`` or ``ray://host:port`` address; None for ``auto`` and other forms Ray
    resolves itself."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_reachable(address: str) -> None:
    """A Ray driver waits for minutes on an address nobody answers at; a plain TCP connection tells at once."""
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise WattschedError(
            f"cannot reach the Ray cluster at {address}: {reason} (start one with `ray start --head`, or give "
            f"the address it prints)"
        ) from None


def check_ray(address: str | None) -> None:
    import_ray()
    if address is not None:
        check_reachable(address)


# -- in the worker ------------------------------------------------------------------------------------------
_SHARED: dict[str, Any] = {}  # object-store key -> the unpickled setup (the latest grid's only)


def run_cell(fn: Callable[..., Any], shared_box: list, *args: Any) -> Any:
    """One cell in a Ray worker. The setup's reference arrives in a list so that Ray does not resolve it per task;
    it is fetched and unpickled once per worker and grid."""
    import ray

    for name, value in WORKER_ENV.items():
        os.environ.setdefault(name, value)
    ref = shared_box[0]
    key = ref.hex()
    if key not in _SHARED:
        _SHARED.clear()
        _SHARED[key] = pickle.loads(ray.get(ref))
    return fn(_SHARED[key], *args)


# -- in the driver ------------------------------------------------------------------------------------------
class RayExecutor:
    """Cells as Ray tasks of one CPU each, at most `workers` in flight, started in submission order."""

    def __init__(self, shared: Any, workers: int | None, cells: int, address: str | None) -> None:
        ray = import_ray()
        self._ray = ray
        self._owns_connection = not ray.is_initialized()
        if self._owns_connection:
            self._connect(address)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if cpus < 1:
            self._disconnect()
            raise WattschedError("the Ray cluster has no CPUs to run on")
        self.workers = max(1, min(workers or cpus, max(cells, 1)))
        self._shared_box = [ray.put(pickle.dumps(shared, protocol=5))]
        self._remote = ray.remote(num_cpus=1)(run_cell)
        self._cond = threading.Condition()
        self._queue: deque[tuple[Future, Callable[..., Any], tuple]] = deque()
        self._running: dict[Future, Any] = {}  # future -> its ObjectRef
        self._in_flight = 0
        self._closing = False  # no more submissions; what is queued still starts unless cancelled
        self._closed = False  # the dispatcher stops
        self._dispatcher = threading.Thread(target=self._dispatch, name="wattsched-ray-dispatch", daemon=True)
        self._dispatcher.start()

    def _connect(self, address: str | None) -> None:
        ray = self._ray
        if address is not None:
            check_reachable(address)
        options: dict[str, Any] = {
            "logging_level": logging.ERROR,
            "log_to_driver": False,  # worker output would break into the progress bar
            "runtime_env": {"env_vars": dict(WORKER_ENV)},
        }
        if address is None:
            options["include_dashboard"] = False
        try:
            ray.init(address=address, **options)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            where = f"at {address}" if address else "(local)"
            hint = ""
            if address is not None and AUTH_MODE_VARIABLE not in os.environ:
                # Ray sends its token to an explicitly named cluster only when told to.
                hint = (
                    f"; a cluster started by `ray start` checks a token: set {AUTH_MODE_VARIABLE}=token (the "
                    "token is read from ~/.ray/auth_token or $RAY_AUTH_TOKEN)"
                )
            raise WattschedError(f"cannot connect to the Ray cluster {where}: {exc}{hint}") from None

    def _disconnect(self) -> None:
        if self._owns_connection:
            self._ray.shutdown()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        fut: Future = Future()
        with self._cond:
            if self._closing:
                raise RuntimeError("cannot submit to a shut-down executor")
            self._queue.append((fut, fn, args))
            self._cond.notify_all()
        return fut

    def _dispatch(self) -> None:
        # Ray calls happen in this thread, outside the lock the completion callbacks (Ray's threads) take.
        while True:
            with self._cond:
                while not self._closed and (not self._queue or self._in_flight >= self.workers):
                    self._cond.wait()
                if self._closed:
                    return
                fut, fn, args = self._queue.popleft()
                if not fut.set_running_or_notify_cancel():
                    continue
                self._in_flight += 1
            try:
                ref = self._remote.remote(fn, self._shared_box, *args)
            except BaseException as exc:  # e.g. an argument Ray cannot serialise
                self._release(fut)
                fut.set_exception(exc)
                continue
            with self._cond:
                self._running[fut] = ref
            ref.future().add_done_callback(lambda ray_fut, fut=fut: self._finished(fut, ray_fut))

    def _release(self, fut: Future) -> None:
        with self._cond:
            self._running.pop(fut, None)
            self._in_flight -= 1
            self._cond.notify_all()

    def _finished(self, fut: Future, ray_fut: Future) -> None:
        self._release(fut)
        try:
            fut.set_result(ray_fut.result())
        except BaseException as exc:
            cause = getattr(exc, "cause", None)  # a RayTaskError wraps the cell's own exception
            fut.set_exception(cause if isinstance(cause, BaseException) else exc)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        with self._cond:
            if self._closing:
                return
            self._closing = True
            cancelled = list(self._running.values()) if cancel_futures else []
            if cancel_futures:
                for fut, _, _ in self._queue:
                    fut.cancel()
                self._queue.clear()
            self._cond.notify_all()
        for ref in cancelled:
            with contextlib.suppress(Exception):
                self._ray.cancel(ref, force=True)  # an interrupted grid stops at once
        with self._cond:
            if wait:  # cancelled cells report back within moments; do not hang on one that never does
                self._cond.wait_for(
                    lambda: not self._queue and self._in_flight == 0,
                    timeout=CANCEL_WAIT_S if cancel_futures else None,
                )
            self._closed = True
            self._cond.notify_all()
        self._dispatcher.join()
        self._disconnect()
