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


def agent_job_command(
    phase: Annotated[str, typer.Argument(help="start (from the job's prolog) or end (from its epilog)")],
    port: Annotated[int, typer.Option(help="the local agent's port")] = 9400,
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
    the node)."""
    import os
    import subprocess

    from ..agent.client import AgentClient
    from ..agent.jobs import apply_setting, decode_setting, job_gpus, measure_job, reset_gpus
    from ..core.errors import WattschedError
    from ..energy.dvfs import DEFAULT_SETTING

    if phase not in ("start", "end"):
        raise typer.BadParameter(f"phase: start or end, got {phase!r}")
    job = os.environ.get("SLURM_JOB_ID", "?")
    try:
        gpus = job_gpus()
        client = AgentClient("127.0.0.1", port)
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
