"""The node agent: DCGM-named Prometheus metrics and a small JSON API for power limits and locked SM clocks.

Endpoints (docs/agent.md): ``GET /metrics``, ``GET /gpus``, ``GET /gpus/<i>``, ``POST /gpus/<i>/power-limit``
``{"watts": W}``, ``POST /gpus/<i>/locked-clocks`` ``{"min_mhz": a, "max_mhz": b}``, ``DELETE`` on either to
reset it, and ``DELETE /gpus/<i>`` to reset both; the job hooks ``POST /jobs/<id>/start`` ``{"gpus": [...]}``
and ``POST /jobs/<id>/end``, and ``GET /windows?after=N`` for their measurements (jobmeter.py). Reads are served
over TCP (127.0.0.1 by default) to anyone; changes (``POST``, ``DELETE``) only over the agent's Unix socket, to
the peers its ``WriteAccess`` allows by their kernel credentials (auth.py, docs/agent.md §3). Every setting it
changes is restored (the power limit to its value before the agent's first change, locked clocks reset) on
``close()``, which ``serve_until_stopped`` calls on normal exit, SIGTERM and SIGINT.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import socket
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

# GpuAgent and ChangedSettings live in control.py (the profiler shares them) and are still importable from here.
from .auth import DEFAULT_SOCKET, PeerCredentials, WriteAccess, bind_private_socket, peer_credentials
from .control import ChangedSettings, GpuAgent, StopRequested, stop_signals  # noqa: F401
from .nvml import AgentError, GpuDevice

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9400  # dcgm-exporter's port: run one or the other on a node, or pick another port
MAX_BODY_BYTES = 64 * 1024

# dcgm-exporter's names, help texts and units (etc/default-counters.csv and dcp-metrics-included.csv of
# NVIDIA/dcgm-exporter; POWER_MGMT_LIMIT and FB_TOTAL are DCGM fields outside its default set).
DCGM_METRICS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "mem_clock_mhz", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "temperature_c", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "power_w", "Power draw (in W)."),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "power_limit_w", "Power management limit (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_mj", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gpu_util_pct", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "mem_copy_util_pct", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "fb_free_mib", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "fb_used_mib", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_TOTAL", "fb_total_mib", "Framebuffer memory total (in MiB)."),
)
# dcgm-exporter declares the energy counter a Prometheus counter; prometheus_client would rename a counter
# family to <name>_total, so it is exposed untyped under the DCGM name (rate() works on it all the same).
_UNTYPED = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}
LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")

_GPU_PATH = re.compile(r"^/gpus/(\d+)(?:/(power-limit|locked-clocks))?/?$")
_JOB_PATH = re.compile(r"^/jobs/([A-Za-z0-9_.:-]+)/(start|end)/?$")


class DcgmCollector:
    """Prometheus collector: one family per DCGM name, one sample per GPU, read at scrape time."""

    def __init__(self, agent: GpuAgent):
        self.agent = agent

    def _labels(self, device: GpuDevice) -> dict[str, str]:
        return {
            "gpu": str(device.index),
            "UUID": device.uuid,
            "pci_bus_id": device.pci_bus_id,
            "device": device.device_node,
            "modelName": device.name,
            "Hostname": self.agent.hostname,
        }

    def collect(self) -> Iterator[Metric]:
        readings = list(self.agent.readings())
        for name, field, help_text in DCGM_METRICS:
            if name in _UNTYPED:
                family: Metric = Metric(name, help_text, "unknown")
            else:
                family = GaugeMetricFamily(name, help_text, labels=LABELS)
            for device, reading in readings:
                value = getattr(reading, field)
                if value is None:
                    continue
                family.add_sample(name, self._labels(device), value)
            yield family


def _after(query: str) -> int:
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key == "after":
            if not value.isdigit():
                raise AgentError(f"after= needs a window number, got {value!r}", 400)
            return int(value)
    return 0


def _number(body: dict[str, Any], key: str, kind: str) -> float:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise AgentError(f"{kind} request needs a number '{key}', got {json.dumps(value)}", 400)
    return value


def _whole_number(body: dict[str, Any], key: str, kind: str) -> int:
    value = _number(body, key, kind)
    if value != int(value):
        raise AgentError(f"{kind} request needs a whole number of MHz for '{key}', got {value}", 400)
    return int(value)


def _metrics_registry(agent: GpuAgent) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DcgmCollector(agent))
    return registry


class AgentHttpServer(ThreadingHTTPServer):
    """The agent over TCP: everything readable by anyone, every change refused (403) with the socket to use."""

    daemon_threads = True

    def __init__(
        self,
        agent: GpuAgent,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        write_socket: str | None = DEFAULT_SOCKET,
    ):
        self.agent = agent
        self.registry = _metrics_registry(agent)
        self.write_socket = write_socket
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), AgentRequestHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def authorise(self, handler: AgentRequestHandler, action: str) -> None:
        where = f" {self.write_socket}" if self.write_socket else ""
        logger.warning("refused %s from %s over TCP", action, handler.address_string())
        raise AgentError(
            f"{action} refused: GPU settings are changed only over the agent's Unix socket{where}, "
            "not over TCP (docs/agent.md §3)",
            403,
        )


class AgentSocketServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The agent on its Unix socket (mode 0660, owned by the agent's user and `group`): the same API, and changes
    from the peers `access` allows by their kernel credentials (``SO_PEERCRED``)."""

    daemon_threads = True

    def __init__(
        self,
        agent: GpuAgent,
        path: str = DEFAULT_SOCKET,
        access: WriteAccess | None = None,
        group: int | None = None,
    ):
        self.agent = agent
        self.registry = _metrics_registry(agent)
        self.access = WriteAccess.from_names() if access is None else access
        self.group = os.getegid() if group is None else group
        self.path = os.path.abspath(path)
        self._inode: int | None = None
        super().__init__(self.path, AgentSocketRequestHandler)

    def server_bind(self) -> None:
        bind_private_socket(self.socket, self.path, self.group)
        self._inode = os.stat(self.path).st_ino

    def server_close(self) -> None:
        super().server_close()
        if self._inode is not None:  # remove the socket file, unless another agent has replaced it since
            try:
                if os.stat(self.path).st_ino == self._inode:
                    os.unlink(self.path)
            except FileNotFoundError:
                pass
            self._inode = None

    def authorise(self, handler: AgentRequestHandler, action: str) -> None:
        if not isinstance(handler, AgentSocketRequestHandler):  # only socket connections carry credentials
            raise AgentError(f"{action} refused: no peer credentials", 403)
        try:
            self.access.check(handler.peer, action)
        except AgentError:
            logger.warning("refused %s from %s", action, handler.peer.describe())
            raise
        logger.info("%s by %s", action, handler.peer.describe())


class AgentRequestHandler(BaseHTTPRequestHandler):
    server: AgentHttpServer | AgentSocketServer
    server_version = "wattsched-agent"

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        self._body: bytes | None = None
        try:
            # read the body always, even for a refusal: closing on a caller still sending would give it EPIPE
            self._body = self._read_body()
            if method == "GET" and self.path.split("?", 1)[0] == "/metrics":
                self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
                return
            status, payload = self._route(method)
        except AgentError as exc:
            status, payload = exc.status, {"error": str(exc)}
        except Exception as exc:  # never a traceback to the caller; the log has it
            logger.exception("%s %s failed", method, self.path)
            status, payload = 500, {"error": f"internal error: {type(exc).__name__}: {exc}"}
        self._send(status, (json.dumps(payload) + "\n").encode(), "application/json")

    def _route(self, method: str) -> tuple[int, dict[str, Any]]:
        agent = self.server.agent
        path, _, query = self.path.partition("?")
        if path in ("/windows", "/windows/"):
            if method != "GET":
                raise AgentError(f"{method} {path} is not allowed; use GET", 405)
            return 200, agent.jobs.windows(_after(query))
        job = _JOB_PATH.match(path)
        if job is not None:
            if method != "POST":
                raise AgentError(f"{method} {path} is not allowed; use POST", 405)
            self.server.authorise(self, f"{method} {path}")
            if job.group(2) == "end":
                return 200, agent.jobs.end(job.group(1))
            body = self._json_body()
            gpus = body.get("gpus")
            if not isinstance(gpus, list) or not all(
                isinstance(g, int) and not isinstance(g, bool) for g in gpus
            ):
                raise AgentError(
                    f"job start request needs 'gpus': a list of GPU indices, got {json.dumps(gpus)}", 400
                )
            return 200, agent.jobs.begin(job.group(1), gpus, str(body.get("name") or ""))
        if path in ("/gpus", "/gpus/"):
            if method != "GET":
                raise AgentError(f"{method} {path} is not allowed; use GET", 405)
            return 200, agent.state()
        match = _GPU_PATH.match(path)
        if match is None:
            raise AgentError(f"no such endpoint: {method} {path} (see /gpus and /metrics)", 404)
        index, setting = int(match.group(1)), match.group(2)
        if method == "GET":
            if setting is not None:
                raise AgentError(f"GET {path} is not allowed; GET /gpus/{index} shows the settings", 405)
            return 200, agent.gpu_state(index)
        self.server.authorise(self, f"{method} {path}")
        if method == "DELETE":
            if setting == "power-limit":
                return 200, agent.reset_power_limit(index)
            if setting == "locked-clocks":
                return 200, agent.reset_clocks(index)
            return 200, agent.reset(index)
        if setting is None:
            raise AgentError(f"POST {path} is not allowed; POST to {path}/power-limit or /locked-clocks", 405)
        body = self._json_body()
        if setting == "power-limit":
            return 200, agent.set_power_limit(index, _number(body, "watts", "power-limit"))
        min_mhz = _whole_number(body, "min_mhz", "locked-clocks")
        max_mhz = _whole_number(body, "max_mhz", "locked-clocks")
        return 200, agent.lock_clocks(index, min_mhz, max_mhz)

    def _read_body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise AgentError("bad Content-Length header", 400) from None
        if length > MAX_BODY_BYTES:
            raise AgentError(f"request body over {MAX_BODY_BYTES} bytes", 413)
        return self.rfile.read(length) if length > 0 else b""

    def _json_body(self) -> dict[str, Any]:
        try:
            body = json.loads(self._body or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise AgentError(f"request body is not JSON: {exc}", 400) from None
        if not isinstance(body, dict):
            raise AgentError("request body must be a JSON object", 400)
        return body

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class AgentSocketRequestHandler(AgentRequestHandler):
    """A connection on the Unix socket: the peer's credentials are read once, as it connects."""

    server: AgentSocketServer
    peer: PeerCredentials

    def setup(self) -> None:
        super().setup()
        self.peer = peer_credentials(self.request)

    def address_string(self) -> str:
        return self.peer.describe()


def serve_until_stopped(server: AgentHttpServer, *others: AgentSocketServer) -> list[str]:
    """Serve `server` (in this thread) and `others` (in threads) until SIGTERM, SIGINT or an error; then close them
    all and restore the GPU settings. Returns what failed to restore."""
    threads = [
        threading.Thread(target=other.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        for other in others
    ]
    with stop_signals() as hold_signals:
        try:
            for thread in threads:
                thread.start()
            server.serve_forever(poll_interval=0.2)
        except StopRequested as stop:
            logger.info("%s received: restoring GPU settings", stop)
        finally:
            hold_signals()
            try:
                for other, thread in zip(others, threads, strict=True):
                    if thread.is_alive():
                        other.shutdown()
                    other.server_close()
                server.server_close()
            finally:
                failures = server.agent.close()
    return failures
