"""What the scheduler uses to talk to the node agent (docs/agent.md).

``AgentClient(host, port)`` talks HTTP over TCP: reads only (metrics, GPU states, job windows), from anywhere the
agent is bound. ``AgentClient(socket_path=...)`` talks the same HTTP over the agent's Unix socket, the only way in
for changes, which the agent accepts from the users it allows (auth.py, docs/agent.md §3). Each call returns the
agent's JSON answer; an error answer (4xx/5xx), a refused connection or an unreachable agent raises
``AgentRequestError`` with the agent's message, e.g. the allowed range of a refused power limit.
"""

from __future__ import annotations

import errno
import http.client
import json
import socket
import urllib.error
import urllib.request
from typing import Any

from ..core.errors import WattschedError
from .auth import DEFAULT_SOCKET, SOCKET_ENV
from .server import DEFAULT_HOST, DEFAULT_PORT

__all__ = ["DEFAULT_SOCKET", "SOCKET_ENV", "AgentClient", "AgentRequestError"]


class AgentRequestError(WattschedError):
    """A request the agent refused (``status`` is its HTTP status) or could not be sent (``status`` None)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _error_message(raw: bytes, reason: str) -> str:
    try:
        return json.loads(raw)["error"]
    except (ValueError, KeyError, TypeError):
        return raw.decode(errors="replace").strip() or reason


class AgentClient:
    """The agent at ``http://host:port`` (reads), or on its Unix socket `socket_path` (reads and changes)."""

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        timeout_s: float = 10.0,
        socket_path: str | None = None,
    ):
        self.socket_path = socket_path
        self.base_url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        self.where = socket_path if socket_path else self.base_url
        self.timeout_s = timeout_s

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        if self.socket_path:
            return self._socket_request(method, path, data)
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            message = _error_message(exc.read(), str(exc.reason))
            raise AgentRequestError(f"agent at {self.base_url}: {message}", exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AgentRequestError(f"agent at {self.base_url} unreachable: {reason}") from None

    def _socket_request(self, method: str, path: str, data: bytes | None) -> bytes:
        where = self.socket_path
        connection = _UnixHTTPConnection(str(where), self.timeout_s)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        except PermissionError:
            raise AgentRequestError(
                f"agent at {where}: permission denied: only root and the users the agent allows may change GPU "
                "settings (docs/agent.md §3)",
                403,
            ) from None
        except FileNotFoundError:
            raise AgentRequestError(
                f"agent at {where} unreachable: no such socket (is `wattsched agent` running?)"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            reason = "connection refused" if getattr(exc, "errno", None) == errno.ECONNREFUSED else exc
            raise AgentRequestError(f"agent at {where} unreachable: {reason}") from None
        finally:
            connection.close()
        if response.status >= 400:
            message = _error_message(raw, response.reason)
            raise AgentRequestError(f"agent at {where}: {message}", response.status)
        return raw

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return json.loads(self._request(method, path, body))

    def state(self) -> dict[str, Any]:
        """``{"hostname": ..., "gpus": [{"index", "power_limit_w", "power_limit_range_w", ...}]}``."""
        return self._json("GET", "/gpus")

    def gpu_state(self, gpu: int) -> dict[str, Any]:
        return self._json("GET", f"/gpus/{gpu}")

    def set_power_limit(self, gpu: int, watts: float) -> dict[str, Any]:
        return self._json("POST", f"/gpus/{gpu}/power-limit", {"watts": watts})

    def lock_clocks(self, gpu: int, min_mhz: int, max_mhz: int) -> dict[str, Any]:
        return self._json("POST", f"/gpus/{gpu}/locked-clocks", {"min_mhz": min_mhz, "max_mhz": max_mhz})

    def reset_power_limit(self, gpu: int) -> dict[str, Any]:
        return self._json("DELETE", f"/gpus/{gpu}/power-limit")

    def reset_clocks(self, gpu: int) -> dict[str, Any]:
        return self._json("DELETE", f"/gpus/{gpu}/locked-clocks")

    def reset(self, gpu: int) -> dict[str, Any]:
        """Power limit back to its value before the agent changed it, and locked clocks reset."""
        return self._json("DELETE", f"/gpus/{gpu}")

    def job_started(self, job_id: str, gpus: list[int], name: str = "") -> dict[str, Any]:
        """Start measuring a job on `gpus` (the prolog's hook; docs/agent.md §5)."""
        return self._json("POST", f"/jobs/{job_id}/start", {"gpus": list(gpus), "name": name})

    def job_ended(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", f"/jobs/{job_id}/end", {})

    def windows(self, after: int = 0) -> dict[str, Any]:
        """``{"hostname", "last", "windows": [...]}``: the measurement windows closed after number `after`."""
        return self._json("GET", f"/windows?after={int(after)}")

    def metrics(self) -> str:
        """The Prometheus text of ``/metrics``."""
        return self._request("GET", "/metrics").decode()
