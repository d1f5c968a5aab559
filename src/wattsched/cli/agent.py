"""`wattsched agent`: the per-node GPU agent (docs/agent.md)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from .common import print_error, user_errors


def agent_command(
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one")] = 9400,
    nvml: Annotated[
        str, typer.Option(help="real: the GPUs through pynvml | fake: simulated GPUs, no GPU needed")
    ] = "real",
    host: Annotated[
        str, typer.Option(help="address to bind; changes are accepted from localhost only whatever it is")
    ] = "127.0.0.1",
) -> None:
    """Per-node GPU agent: DCGM-named Prometheus metrics at /metrics and a localhost JSON API for power
    limits and locked SM clocks; restores every changed setting on exit, SIGTERM and SIGINT."""
    from ..agent.nvml import load_nvml
    from ..agent.server import AgentHttpServer, GpuAgent, serve_until_stopped

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with user_errors():
        agent = GpuAgent(load_nvml(nvml))
        try:
            server = AgentHttpServer(agent, host, port)
        except BaseException:
            agent.close()
            raise
    where = f"http://{host}:{server.port}"
    # plain print, flushed: a supervisor or a test waits for this line to know the port
    print(
        f"wattsched agent: {len(agent.devices)} GPU(s) via {nvml} NVML at {where} (/gpus, /metrics)",
        flush=True,
    )
    failures = serve_until_stopped(server)
    if failures:
        for failure in failures:
            print_error(f"could not restore: {failure}")
        raise typer.Exit(1)
    print("wattsched agent: GPU settings restored, stopped", flush=True)
