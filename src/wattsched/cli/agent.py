"""`wattsched agent`: the per-node GPU agent (docs/agent.md)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from .common import print_error, require_extra, user_errors

# = agent.auth.DEFAULT_SOCKET and SOCKET_ENV (not imported here, so that `wattsched --help` stays fast)
DEFAULT_SOCKET = "/run/wattsched/agent.sock"
SOCKET_ENV = "WATTSCHED_AGENT_SOCKET"


def agent_command(
    port: Annotated[
        int, typer.Option(help="TCP port for reads (metrics, states); 0 picks a free one")
    ] = 9400,
    nvml: Annotated[
        str, typer.Option(help="real: the GPUs through pynvml | fake: simulated GPUs, no GPU needed")
    ] = "real",
    host: Annotated[
        str, typer.Option(help="address to bind for reads; changes are never accepted over TCP")
    ] = "127.0.0.1",
    socket_path: Annotated[
        str,
        typer.Option(
            "--socket", envvar=SOCKET_ENV, help="Unix socket for changes (created 0660, owner:--socket-group)"
        ),
    ] = DEFAULT_SOCKET,
    allow_user: Annotated[
        list[str] | None,
        typer.Option(help="a user (name or uid) who may change GPU settings besides root; repeatable"),
    ] = None,
    allow_group: Annotated[
        list[str] | None,
        typer.Option(help="a group whose members may change GPU settings; repeatable"),
    ] = None,
    socket_group: Annotated[
        str | None,
        typer.Option(
            help="group of the socket file (default: the first --allow-group, else the first --allow-user's "
            "primary group, else the agent's own)"
        ),
    ] = None,
) -> None:
    """Per-node GPU agent: DCGM-named Prometheus metrics at /metrics and a JSON API for power limits and locked
    SM clocks. Reads are open over TCP; changes only over --socket, from root and the --allow-user/--allow-group
    callers (docs/agent.md §3). Restores every changed setting on exit, SIGTERM and SIGINT."""
    require_extra("prometheus_client", "agent")
    if nvml == "real":
        require_extra("pynvml", "agent")
    from ..agent.auth import WriteAccess, default_socket_group, resolve_group, socket_summary
    from ..agent.nvml import load_nvml
    from ..agent.server import AgentHttpServer, AgentSocketServer, GpuAgent, serve_until_stopped

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    users, groups = allow_user or [], allow_group or []
    with user_errors():
        access = WriteAccess.from_names(users, groups)
        if socket_group is not None:
            gid = resolve_group(socket_group, "--socket-group")
        else:
            gid = default_socket_group(users, groups)
        agent = GpuAgent(load_nvml(nvml))
        try:
            server = AgentHttpServer(agent, host, port, write_socket=socket_path)
            try:
                socket_server = AgentSocketServer(agent, socket_path, access, gid)
            except BaseException:
                server.server_close()
                raise
        except BaseException:
            agent.close()
            raise
    where = f"http://{host}:{server.port}"
    # plain print, flushed: a supervisor or a test waits for this line to know the port
    print(
        f"wattsched agent: {len(agent.devices)} GPU(s) via {nvml} NVML at {where} (/gpus, /metrics)",
        flush=True,
    )
    print(
        f"wattsched agent: changes only on {socket_server.path} ({socket_summary(socket_server.path)}) "
        f"from {access.describe()}",
        flush=True,
    )
    failures = serve_until_stopped(server, socket_server)
    if failures:
        for failure in failures:
            print_error(f"could not restore: {failure}")
        raise typer.Exit(1)
    print("wattsched agent: GPU settings restored, stopped", flush=True)


def agent_job_command(
    phase: Annotated[str, typer.Argument(help="start (from the job's prolog) or end (from its epilog)")],
    socket_path: Annotated[
        str, typer.Option("--socket", envvar=SOCKET_ENV, help="the local agent's Unix socket")
    ] = DEFAULT_SOCKET,
    port: Annotated[
        int | None, typer.Option(hidden=True, help="no longer used: changes go through --socket")
    ] = None,
    comment: Annotated[
        str | None,
        typer.Option(
            help="the job's comment (default: $SLURM_JOB_COMMENT, else scontrol show job $SLURM_JOB_ID)"
        ),
    ] = None,
) -> None:
    """Apply (start) or reset (end) the GPU setting wattsched chose for this job, on this node's GPUs, through the
    local agent, and have the agent measure the job's GPUs from start to end (for --record-profiles). Never
    fails the job: a problem is printed to stderr and the exit status is 0 (a failing Slurm prolog would drain
    the node). Run it as root or as a user the agent allows (--allow-user; docs/agent.md §3)."""
    import os
    import subprocess

    from ..agent.client import AgentClient
    from ..agent.jobs import apply_setting, decode_setting, job_gpus, measure_job, reset_gpus
    from ..core.errors import WattschedError
    from ..core.settings import DEFAULT_SETTING

    if phase not in ("start", "end"):
        raise typer.BadParameter(f"phase: start or end, got {phase!r}")
    job = os.environ.get("SLURM_JOB_ID", "?")
    # an old prolog's --port: carry on over the socket (a failing prolog drains the node)
    if port is not None:
        notice = f"--port is no longer used; changes go through --socket {socket_path}"
        typer.echo(f"warning: agent-job {phase} {job}: {notice}", err=True)
    try:
        gpus = job_gpus()
        client = AgentClient(socket_path=socket_path)
        try:  # the measurement first (its window starts with the job) and apart: its failure stops no setting
            measured = measure_job(client, phase, job, gpus, os.environ.get("SLURM_JOB_NAME", ""))
            if measured:
                print(f"wattsched agent-job {phase} {job}: {measured}", flush=True)
        except WattschedError as exc:
            print_error(f"agent-job {phase} {job}: measurement: {exc}")
        if phase == "end":
            lines = reset_gpus(client, gpus)
        else:
            if comment is None:  # Slurm 22.05 gives the prolog the comment as it stands at the job's start
                comment = os.environ.get("SLURM_JOB_COMMENT")
            if comment is None:
                shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True,
                                       timeout=30, check=False).stdout  # fmt: skip
                comment = next((t[len("Comment=") :] for t in shown.split() if t.startswith("Comment=")), "")
            setting = decode_setting(comment)
            lines = [] if setting == DEFAULT_SETTING else apply_setting(client, gpus, setting)
        for line in lines:
            print(f"wattsched agent-job {phase} {job}: {line}", flush=True)
    except (WattschedError, OSError, subprocess.SubprocessError) as exc:
        print_error(f"agent-job {phase} {job}: {exc}")
