"""List + watch of one Kubernetes resource, undecoded (docs/live-kubernetes.md §3.1).

The official client's list and watch calls are made with ``_preload_content=False``: a list's body is read as
JSON, and a watch's body as one JSON event per line, the way ``kubernetes.watch.Watch`` reads it, but without
turning every object into a model class (which costs far more than the scheduling itself). The watch resumes
from the last ``resourceVersion`` it saw; when the server answers 410 Gone (the version is too old, either as an
``ERROR`` event or as the call's status), the informer lists again and tells its owner to rebuild from the list.
A real API server holds a watch open until ``timeoutSeconds`` with nothing to send: :meth:`Informer.close` ends
the watch in progress from another thread (``ClusterWatcher.start`` calls it when told to stop).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

log = logging.getLogger("wattsched.k8s")

GONE = 410


class ResourceGone(Exception):
    """The watch's resourceVersion is too old: list again."""


def api_status(exc: BaseException) -> int | None:
    """The HTTP status of a client error (``kubernetes.client.ApiException`` or the fake's), else None."""
    status = getattr(exc, "status", None)
    return int(status) if isinstance(status, int) else None


def read_json(resp: Any) -> Any:
    data = resp.data if hasattr(resp, "data") else resp.read()
    try:
        return json.loads(data)
    finally:
        release = getattr(resp, "release_conn", None)
        if release is not None:
            release()


def iter_lines(resp: Any) -> Iterator[bytes]:
    """The lines of a streamed response body."""
    buffer = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        buffer += chunk.encode() if isinstance(chunk, str) else chunk
        *lines, buffer = buffer.split(b"\n")
        yield from (line for line in lines if line.strip())
    if buffer.strip():
        yield buffer


def _shutdown(resp: Any) -> None:
    """End a streamed response from another thread: shut its socket down (closing it would not wake a thread
    blocked reading it); a response without a socket (the in-memory API's) is closed."""
    conn = getattr(resp, "connection", None) or getattr(resp, "_connection", None)
    sock = getattr(conn, "sock", None)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        elif hasattr(resp, "close"):
            resp.close()
    except OSError:  # already closed
        pass


class Informer:
    """Calls ``on_list(items)`` after every (re-)list and ``on_event(type, object)`` for each watch event."""

    def __init__(
        self,
        kind: str,
        call: Callable[..., Any],
        on_list: Callable[[list[Mapping[str, Any]]], None],
        on_event: Callable[[str, Mapping[str, Any]], None],
        field_selector: str | None = None,
        watch_timeout_s: int = 300,
    ):
        self.kind = kind
        self.call = call
        self.on_list = on_list
        self.on_event = on_event
        self.field_selector = field_selector
        self.watch_timeout_s = watch_timeout_s
        self.resource_version = ""
        self.relists = 0
        self.closed = False
        self._resp: Any = None  # the watch being read

    def close(self) -> None:
        """End the watch in progress, from another thread; ``run`` then returns if its stop is set."""
        self.closed = True
        resp = self._resp
        if resp is not None:
            _shutdown(resp)

    def _kwargs(self) -> dict[str, Any]:
        return {"field_selector": self.field_selector} if self.field_selector else {}

    def list(self) -> None:
        doc = read_json(self.call(_preload_content=False, **self._kwargs()))
        self.resource_version = str((doc.get("metadata") or {}).get("resourceVersion") or "")
        self.relists += 1
        self.on_list(list(doc.get("items") or []))

    def watch_once(self) -> int:
        """Stream events from the last version until the server ends the watch; how many were handled. A 410
        re-lists (the owner rebuilds) and returns."""
        handled = 0
        try:
            resp = self.call(
                watch=True, resource_version=self.resource_version, timeout_seconds=self.watch_timeout_s,
                allow_watch_bookmarks=True, _preload_content=False, **self._kwargs(),
            )  # fmt: skip
            self._resp = resp
            if self.closed:  # closed while the call was being made
                _shutdown(resp)
            for line in iter_lines(resp):
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == GONE:
                        raise ResourceGone(obj.get("message", ""))
                    log.warning("%s watch error: %s", self.kind, obj.get("message", obj))
                    continue
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if version:
                    self.resource_version = str(version)
                if kind != "BOOKMARK":
                    self.on_event(kind, obj)
                    handled += 1
        except ResourceGone as exc:
            log.info(
                "%s watch: resourceVersion %s gone (%s): listing again", self.kind, self.resource_version, exc
            )
            self.list()
        except Exception as exc:  # the client raises ApiException(410) for an expired version on some servers
            if api_status(exc) != GONE:
                raise
            log.info("%s watch: 410 Gone: listing again", self.kind)
            self.list()
        finally:
            self._resp = None
        return handled

    def run(self, stop: threading.Event, retry_s: float = 2.0) -> None:
        """Watch until `stop` is set; errors are logged and the watch retried (a failed list is retried too)."""
        self.closed = False
        while not stop.is_set():
            try:
                if not self.resource_version:
                    self.list()
                started = time.monotonic()
                if self.watch_once() == 0 and time.monotonic() - started < 1.0:
                    stop.wait(1.0)  # a watch that ends at once with nothing (the in-memory API): no busy loop
            except Exception as exc:
                if stop.is_set():  # the watch was ended by close()
                    break
                log.warning("%s informer: %s; retrying in %.0f s", self.kind, exc, retry_s)
                self.resource_version = "" if api_status(exc) == GONE else self.resource_version
                stop.wait(retry_s)
