"""The node agent in tests: in this process on a free port and a Unix socket (running_agent), or as a
`wattsched agent --nvml fake` process (start_agent_process). Shared by tests/integration (the agent's HTTP API, its
processes and socket permissions, the job hooks) and the live-profile tests."""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from wattsched.agent import fake_nvml
from wattsched.agent.auth import WriteAccess
from wattsched.agent.client import AgentClient
from wattsched.agent.fake_nvml import FakeNvml
from wattsched.agent.server import AgentHttpServer, AgentSocketServer, GpuAgent


@contextlib.contextmanager
def running_agent(
    nvml: FakeNvml, host: str = "127.0.0.1", access: WriteAccess | None = None
) -> Iterator[tuple[AgentClient, GpuAgent]]:
    """The agent on a free TCP port and on a Unix socket in a fresh directory (0755, as /run/wattsched). The client
    talks over the socket (``client.socket_path``); ``client.base_url`` is the TCP address (reads only)."""
    agent = GpuAgent(nvml, hostname="node7")
    directory = tempfile.mkdtemp(prefix="wattsched-agent-")
    os.chmod(directory, 0o755)
    path = os.path.join(directory, "agent.sock")
    servers = [AgentHttpServer(agent, host, 0, write_socket=path)]
    servers.append(AgentSocketServer(agent, path, access))
    for server in servers:
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield AgentClient("127.0.0.1", servers[0].port, socket_path=path), agent
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
        agent.close()
        os.rmdir(directory)  # the socket server removed its socket


def start_agent_process(state_file: Path, *options: str) -> tuple[subprocess.Popen[str], int, str]:
    """`wattsched agent --nvml fake --port 0` with its socket beside `state_file` (unless `options` name one); the
    process, its TCP port and its second line (the socket, its mode and who may change)."""
    env = {**os.environ, fake_nvml.STATE_FILE_ENV: str(state_file), fake_nvml.GPU_COUNT_ENV: "2"}
    command = [sys.executable, "-c", "from wattsched.cli.main import app; app()", "agent", "--nvml", "fake"]
    if "--socket" not in options:
        options = ("--socket", str(state_file.parent / "agent.sock"), *options)
    process = subprocess.Popen(
        [*command, "--port", "0", *options],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=15):
            process.kill()
            pytest.fail("the agent did not start within 15 s")
    line = process.stdout.readline()
    assert "via fake NVML at http://127.0.0.1:" in line, line + process.stderr.read()
    return process, int(line.split("http://127.0.0.1:", 1)[1].split(" ", 1)[0]), process.stdout.readline()
