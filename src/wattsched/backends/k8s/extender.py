"""``wattsched serve k8s-extender``: a kube-scheduler HTTP extender backed by a wattsched placement policy
(docs/live-kubernetes.md §3; the protocol of k8s.io/kube-scheduler
``extender/v1/types.go``).

Verbs, all ``POST <prefix>/<verb>`` with ``Content-Type: application/json``:

* ``filter``: ``ExtenderArgs`` -> ``ExtenderFilterResult``. Nodes that can never host the pod (GPU model, too
  few GPUs, CPUs or memory even empty) go to ``FailedAndUnresolvableNodes``, nodes short of free capacity now to
  ``FailedNodes``; answered in the form asked (``NodeNames`` with ``nodeCacheCapable``, else ``Nodes``). A pod
  wattsched cannot read fails on every node with the reason.
* ``prioritize``: ``ExtenderArgs`` -> ``HostPriorityList``, scores 0..10 (``cluster.extender_scores``).
* ``bind``: ``ExtenderBindingArgs`` -> ``ExtenderBindingResult``: wattsched counts the pod on the node, then
  creates the ``v1.Binding`` itself (a configured bind verb must); a 409 Conflict comes back as the ``Error``.
* ``GET <prefix>/healthz``: 200 ``ok`` once the first lists are in.

Over TLS (``tls_cert``/``tls_key``) with ``tls_client_ca`` the server is mutual TLS: a client must present a
certificate signed by that CA (kube-scheduler's extender ``tlsConfig.certFile``/``keyFile``), else its handshake
fails and no verb, bind included, is reached.

A malformed request gets a 4xx with a message and changes nothing: not JSON (400), unknown or mistyped fields
(400), another content type (415), no length (411), a body over ``max_body_bytes`` (413), another path (404) or
method (405). ``curl -d``'s default form type is taken as JSON (the body must still be JSON). Field names are
matched without regard to case, as Go's decoder does; answers use the exact names.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .cluster import K8sCluster
from .informer import api_status
from .objects import PodError, pod_request
from .scheduler import bind
from .watcher import ClusterWatcher

log = logging.getLogger("wattsched.k8s")

DEFAULT_MAX_BODY_BYTES = (
    32 * 2**20
)  # ExtenderArgs with full Nodes (no nodeCacheCapable) on ~1,000 nodes: ~10 MB
VERBS = ("filter", "prioritize", "bind")
# kube-scheduler sends application/json; `curl -d @args.json` sends its default form type, taken too when the
# body is JSON (anything else: 415)
ACCEPTED_TYPES = ("application/json", "application/x-www-form-urlencoded")


SCORE_TAILS = [f"{score}}}".encode() for score in range(11)]


class EncodedJson(bytes):
    """An answer already encoded as JSON."""


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _fields(body: Any, allowed: tuple[str, ...], what: str) -> dict[str, Any]:
    """The body's fields by their exact names; unknown ones are a 400 (names compared without case)."""
    if not isinstance(body, dict):
        raise BadRequest(400, f"{what}: the body must be a JSON object, got {type(body).__name__}")
    by_lower = {name.lower(): name for name in allowed}
    out: dict[str, Any] = {}
    unknown = []
    for key, value in body.items():
        name = by_lower.get(str(key).lower())
        (unknown.append(str(key)) if name is None else out.__setitem__(name, value))
    if unknown:
        raise BadRequest(
            400, f"{what}: unknown field(s) {', '.join(sorted(unknown))} (expected {', '.join(allowed)})"
        )
    return out


def _node_names(args: Mapping[str, Any]) -> tuple[list[str], bool]:
    """The candidate node names, and whether they came as names (nodeCacheCapable) rather than full Nodes."""
    names, nodes = args.get("NodeNames"), args.get("Nodes")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest(400, "ExtenderArgs.NodeNames must be a list of node names")
        return names, True
    if nodes is None:
        return [], True
    items = nodes.get("items") if isinstance(nodes, dict) else None
    if not isinstance(items, list):
        raise BadRequest(400, "ExtenderArgs.Nodes must be a v1.NodeList with an 'items' list")
    out = []
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise BadRequest(400, "ExtenderArgs.Nodes.items: every node needs metadata.name")
        out.append(name)
    return out, False


class Extender:
    """The verbs, over a watcher's mirror; each returns the answer's JSON object (no I/O of its own but bind's)."""

    def __init__(self, watcher: ClusterWatcher):
        self.watcher = watcher
        self.calls = dict.fromkeys(VERBS, 0)
        self._host_fragments: dict[str, bytes] = {}

    def ready(self) -> bool:
        return self.watcher.cluster is not None

    def _cluster(self) -> K8sCluster:
        cluster = self.watcher.cluster
        if cluster is None:
            raise BadRequest(503, "wattsched has not listed the cluster's nodes yet")
        return cluster

    def filter(self, body: Any) -> dict[str, Any]:
        args = _fields(body, ("Pod", "Nodes", "NodeNames"), "ExtenderArgs")
        names, as_names = _node_names(args)
        cluster = self._cluster()
        try:
            pod = pod_request(args.get("Pod"))
        except PodError as exc:
            failed = dict.fromkeys(names, f"wattsched: {exc}")
            return _filter_answer([], {}, failed, as_names, args)
        result = cluster.filter(pod, names)
        return _filter_answer(result.passed, result.failed, result.unresolvable, as_names, args)

    def prioritize(self, body: Any) -> EncodedJson:
        args = _fields(body, ("Pod", "Nodes", "NodeNames"), "ExtenderArgs")
        names, _ = _node_names(args)
        cluster = self._cluster()
        try:
            pod = pod_request(args.get("Pod"))
        except PodError:  # filter has told why; scores are advice
            return self._priorities(names, [0] * len(names))
        return self._priorities(names, cluster.prioritize(pod, names).tolist())

    def _priorities(self, names: list[str], scores: list[int]) -> EncodedJson:
        """The ``HostPriorityList``, from each name's encoded fragment (a thousand small dicts through json.dumps
        cost more than the scoring)."""
        fragments = self._host_fragments
        if len(fragments) > 100_000:
            fragments.clear()
        parts = []
        for name, score in zip(names, scores, strict=True):
            head = fragments.get(name)
            if head is None:
                head = fragments[name] = b'{"Host": ' + json.dumps(name).encode() + b', "Score": '
            parts.append(head + SCORE_TAILS[score])
        return EncodedJson(b"[" + b", ".join(parts) + b"]")

    def bind(self, body: Any) -> dict[str, Any]:
        args = _fields(body, ("PodName", "PodNamespace", "PodUID", "Node"), "ExtenderBindingArgs")
        for name in ("PodName", "PodNamespace", "Node"):
            if not isinstance(args.get(name), str) or not args[name]:
                raise BadRequest(400, f"ExtenderBindingArgs.{name} must be a non-empty string")
        cluster = self._cluster()
        key = f"{args['PodNamespace']}/{args['PodName']}"
        with self.watcher.lock:
            pod = next((p for p in self.watcher.pending.values() if p.key == key), None)
        if pod is None:
            return {
                "Error": f"wattsched: pod {key} is not pending in its view of the cluster (not listed yet?)"
            }
        with cluster.lock:  # fit and count in one step: kube-scheduler binds several pods at once
            assumed = pod.uid not in cluster.held  # held: bound a moment ago (the API will say whether again)
            if assumed:
                placement = cluster.placement_on(pod, args["Node"])
                if placement is None:
                    return {"Error": f"wattsched: pod {key} does not fit on node {args['Node']} now"}
                cluster.assume(pod, placement)
        try:
            bind(self.watcher.api, pod, args["Node"])
        except Exception as exc:
            if assumed:  # never release what an earlier bind of the pod holds
                cluster.forget(pod.uid)
            status = api_status(exc)
            what = "conflict: the pod is already bound" if status == 409 else f"binding failed: {exc}"
            return {"Error": f"wattsched: {what}"}
        return {"Error": ""}


def _filter_answer(
    passed: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    as_names: bool,
    args: Mapping[str, Any],
) -> dict[str, Any]:
    if as_names:
        nodes, names = None, passed
    else:
        keep = set(passed)
        items = [n for n in args["Nodes"]["items"] if n["metadata"]["name"] in keep]
        nodes, names = {**{k: v for k, v in args["Nodes"].items() if k != "items"}, "items": items}, None
    return {"Nodes": nodes, "NodeNames": names, "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable, "Error": ""}  # fmt: skip


def make_handler(extender: Extender, prefix: str, max_body_bytes: int) -> type[BaseHTTPRequestHandler]:
    prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
    routes: dict[str, Callable[[Any], Any]] = {f"{prefix}/{verb}": getattr(extender, verb) for verb in VERBS}
    health = f"{prefix}/healthz"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # kube-scheduler keeps its connection open
        # headers and body go out in two writes: with Nagle the body waits for the client's delayed ACK (~40 ms
        # per answer on a kept-alive connection)
        disable_nagle_algorithm = True
        timeout = 30  # seconds a client may take to send what its Content-Length promised
        server_version = "wattsched-extender"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), format % args)

        def handle(self) -> None:
            if isinstance(self.connection, ssl.SSLSocket):  # the handshake here, in this connection's thread
                try:
                    self.connection.do_handshake()
                except OSError as exc:  # ssl.SSLError, a timeout, a reset
                    log.debug("TLS handshake with %s failed: %s", self.address_string(), exc)
                    return
            super().handle()

        def parse_request(self) -> bool:
            self.body_read = False
            return super().parse_request()

        def _send(self, status: int, payload: Any) -> None:
            data = (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n"
            length = (self.headers.get("Content-Length") or "").strip()
            if not self.body_read and (self.headers.get("Transfer-Encoding") or length not in ("", "0")):
                self.close_connection = True  # a body left unread would be taken for the next request
            self.send_response(status)
            if self.close_connection:
                self.send_header("Connection", "close")
            text = isinstance(payload, bytes) and not isinstance(payload, EncodedJson)
            self.send_header("Content-Type", "text/plain" if text else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            self._send(status, {"Error": message})

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == health:
                self._send(200 if extender.ready() else 503, b"ok" if extender.ready() else b"not ready")
            elif path in routes:
                self._error(405, f"{path} takes POST")
            else:
                self._error(404, f"no such path {path}; the verbs are {', '.join(routes)}")

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            verb = routes.get(path)
            try:
                if verb is None:
                    raise BadRequest(404, f"no such path {path}; the verbs are {', '.join(routes)}")
                body = self._body()
                started = time.perf_counter()
                answer = verb(body)
                extender.calls[path.rsplit("/", 1)[1]] += 1
                log.debug("%s in %.2f ms", path, (time.perf_counter() - started) * 1e3)
            except BadRequest as exc:
                self._error(exc.status, str(exc))
                return
            except Exception as exc:  # a wattsched bug: say so (and log it) rather than drop the connection
                log.exception("%s failed", path)
                self._error(500, f"wattsched internal error: {type(exc).__name__}: {exc}")
                return
            self._send(200, answer)

        def _body(self) -> Any:
            ctype = self.headers.get("Content-Type", "")
            if ctype.split(";", 1)[0].strip().lower() not in ACCEPTED_TYPES:
                raise BadRequest(415, f"Content-Type must be application/json, got {ctype or 'none'!r}")
            if self.headers.get("Transfer-Encoding"):
                self.close_connection = True  # where the body ends is unknown
                raise BadRequest(411, "send a Content-Length, not a chunked body")
            length = (self.headers.get("Content-Length") or "").strip()
            if not re.fullmatch(r"[0-9]+", length):  # ASCII only: int() takes '²' and other digits too
                self.close_connection = True
                raise BadRequest(411, "Content-Length is required")
            if len(length) > 18 or int(length) > max_body_bytes:  # (int() refuses 4,301 digits and more)
                self.close_connection = True  # the body is left unread
                size = length if len(length) <= 18 else "over 10**18"
                raise BadRequest(413, f"body of {size} bytes is over the limit of {max_body_bytes}")
            raw = self.rfile.read(int(length))
            self.body_read = True
            try:
                return json.loads(raw)
            except (ValueError, RecursionError) as exc:  # ValueError: also an integer of over 4,300 digits
                raise BadRequest(400, f"body is not JSON: {exc}") from None

        def do_PUT(self) -> None:
            self._not_allowed()

        do_DELETE = do_PATCH = do_PUT

        def _not_allowed(self) -> None:
            self._error(405, "the extender's verbs take POST")

    return Handler


class ExtenderServer:
    """The HTTP server (threads; 127.0.0.1 unless told otherwise; TLS with a certificate and key; mutual TLS,
    a client certificate signed by ``tls_client_ca`` required, with that CA bundle too)."""

    def __init__(
        self,
        extender: Extender,
        host: str = "127.0.0.1",
        port: int = 8888,
        prefix: str = "/energy",
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_client_ca: str | None = None,
    ):
        if tls_client_ca and not tls_cert:
            raise ValueError("a client CA (mutual TLS) needs the server's own certificate and key")
        self.httpd = ThreadingHTTPServer((host, port), make_handler(extender, prefix, max_body_bytes))
        self.httpd.daemon_threads = True
        self.tls = bool(tls_cert)
        self.mtls = bool(tls_client_ca)
        if tls_cert:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(tls_cert, tls_key)
            if tls_client_ca:  # no certificate, or one the CA did not sign: the handshake fails in handle()
                context.load_verify_locations(cafile=tls_client_ca)
                context.verify_mode = ssl.CERT_REQUIRED
            # not in accept(): a client that never starts its handshake would hold up the whole server
            self.httpd.socket = context.wrap_socket(
                self.httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="k8s-extender", daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
