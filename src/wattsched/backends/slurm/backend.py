"""Slurm as a live backend: observe with ``sinfo --json`` and ``squeue --json``, act with ``scontrol``.

Facts this relies on (Debian slurm-wlm 22.05, OpenAPI data v0.0.38; docs/live-slurm.md §2.6):

* ``sinfo --json`` lists ``nodes`` with ``name``, ``state`` (idle, mixed, allocated, down, ...), ``state_flags``
  (``POWERED_DOWN``, ``POWERING_UP``, ``POWERING_DOWN``, ``DRAIN``, ``NOT_RESPONDING``, ...), ``cpus``,
  ``real_memory`` (MB) and ``gres`` (``gpu:a100:4``, possibly with a ``(S:0)`` socket suffix);
* ``squeue --json`` lists ``jobs`` with ``job_id``, ``name``, ``job_state``, ``state_reason`` (``JobHeldUser`` or
  ``JobHeldAdmin`` for a held job), ``nodes`` (the allocated host list, e.g. ``gpu[1-2]``), ``required_nodes``,
  ``node_count``, ``tres_per_node`` (``gres:gpu:a100:2``), ``cpus``, ``memory_per_node``, ``submit_time``
  (epoch s) and ``time_limit`` (minutes);
* a held job is started where wattsched places it by ``scontrol update jobid=N nodelist=...`` then
  ``scontrol release N``; ``scontrol requeuehold N`` puts a running job back, held (``COMPLETING`` with the hold
  reason while its run ends, then ``PENDING``, its ``eligible_time`` pushed about 121 s ahead, ``restart_cnt``
  counted); ``StartTime=now`` takes that back, once the job is ``PENDING``; ``NumNodes=K-K`` and
  ``TresPerNode=gres:gpu:TYPE:G`` change a held job's shape (the lower-case ``tres_per_node=`` is refused);
* nodes change power with ``scontrol update nodename=... state=power_up|power_down``; ``sinfo`` shows the
  request first (``POWER_DOWN``, ``POWER_UP``), then ``POWERING_DOWN``, ``POWERED_DOWN`` and back.

Every command is an argument list (never a shell string) and is retried; a failure or unreadable output raises
:class:`~..base.BackendError` naming the command and the tail of its stderr. An unreadable record inside readable
JSON is skipped and reported in ``Observation.warnings``.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from ...core.settings import GpuSetting
from ...policies.contract import Capability
from ..base import (
    JOB_FINISHED,
    JOB_RUNNING,
    JOB_STARTING,
    JOB_WAITING,
    NODE_OFF,
    NODE_ON,
    NODE_POWERING_DOWN,
    NODE_POWERING_UP,
    NODE_UNAVAILABLE,
    BackendError,
    JobObs,
    NodeObs,
    Observation,
    StartRequest,
)

log = logging.getLogger("wattsched.slurm")
_R = TypeVar("_R")  # what a record parser returns (`SlurmBackend._records`)

Runner = Callable[[Sequence[str]], str]  # argv -> stdout; raises BackendError

HELD_REASONS = {"JobHeldUser", "JobHeldAdmin"}
_FINISHED = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
             "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"}  # fmt: skip
_RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"}
_UNAVAILABLE_FLAGS = {"DRAIN", "DRAINED", "DRAINING", "NOT_RESPONDING", "FAIL", "MAINTENANCE", "RESERVED"}


def subprocess_runner(env: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> Runner:
    """Run a command with an argument list; stdout, or a BackendError with the command and stderr tail."""
    full_env = {**os.environ, **(env or {})}

    def run(argv: Sequence[str]) -> str:
        try:
            done = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=timeout_s, env=full_env, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendError(f"`{' '.join(argv)}` could not run: {exc}") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise BackendError(f"`{' '.join(argv)}` exited {done.returncode}: {' | '.join(tail)}")
        return done.stdout

    return run


def expand_hostlist(text: str) -> list[str]:
    """Slurm host list syntax: ``gpu[1-3,5],cpu01`` -> gpu1, gpu2, gpu3, gpu5, cpu01 (zero padding kept)."""
    return list(_expand_hostlist(text or ""))


# An observation repeats the same few thousand host lists: each is parsed once.
@functools.lru_cache(maxsize=65536)
def _expand_hostlist(text: str) -> tuple[str, ...]:
    out: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[\]]+)\[([^\]]+)\]|([^,\[\]]+)", text or ""):
        if plain:
            out.append(plain.strip())
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for k in range(int(lo), int(hi or lo) + 1):
                out.append(f"{prefix}{k:0{width}d}")
    return tuple(h for h in out if h)


@functools.lru_cache(maxsize=4096)  # a handful of distinct GRES strings across thousands of records
def parse_gres(text: str) -> tuple[str, int]:
    """(GPU type, count) of a gres/tres string such as ``gres:gpu:a100:2`` or ``gpu:4(S:0)``; ("", 0) without GPUs."""
    for item in (text or "").split(","):
        parts = re.sub(r"\(.*?\)", "", item).strip().removeprefix("gres:").removeprefix("gres/").split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) == 2 and parts[1].isdigit():
            return "", int(parts[1])
        if len(parts) >= 3 and parts[-1].isdigit():
            return parts[1], int(parts[-1])
        if len(parts) == 2:
            return parts[1], 1
        return "", 1
    return "", 0


def _number(value: Any, default: float) -> float:
    """A v0.0.38 number, or a later version's ``{"set", "infinite", "number"}`` object."""
    kind = value.__class__
    if kind is int or kind is float:  # the common case, first: thousands of records, several numbers each
        return float(value)
    if value is None:
        return default
    if kind is dict:
        if value.get("infinite"):
            return math.inf
        if not value.get("set", True):
            return default
        value = value.get("number", default)
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _state(value: Any) -> str:
    if isinstance(value, list):  # later versions give a list of flags
        return str(value[0]) if value else ""
    return str(value or "")


def node_obs(raw: Mapping[str, Any]) -> NodeObs:
    flags = {str(f).upper() for f in raw.get("state_flags") or []}
    state = _state(raw.get("state")).upper()
    flags |= set(state.split("+")[1:])
    base = state.split("+")[0]
    # POWER_DOWN / POWER_UP: asked for (by scontrol or SuspendTime), not yet under way; no job goes there meanwhile.
    if "POWERED_DOWN" in flags:
        power = NODE_POWERING_UP if flags & {"POWERING_UP", "POWER_UP"} else NODE_OFF
    elif flags & {"POWERING_DOWN", "POWER_DOWN"}:
        power = NODE_POWERING_DOWN
    elif "POWERING_UP" in flags:
        power = NODE_POWERING_UP
    elif base in ("DOWN", "FUTURE", "UNKNOWN") or flags & _UNAVAILABLE_FLAGS:
        power = NODE_UNAVAILABLE
    else:
        power = NODE_ON
    model, gpus = parse_gres(str(raw.get("gres") or ""))
    return NodeObs(
        name=str(raw["name"]),
        gpus=gpus,
        gpu_model=model,
        cpus=int(_number(raw.get("cpus"), 0)),
        memory_mib=int(_number(raw.get("real_memory"), 0)),
        power=power,
    )


def job_obs(raw: Mapping[str, Any]) -> JobObs:
    state = _state(raw.get("job_state")).upper()
    reason = str(raw.get("state_reason") or "")
    held = state == "PENDING" and reason in HELD_REASONS
    # `scontrol requeuehold` shows COMPLETING + a hold reason while the old run winds down: held again already.
    ending = state == "COMPLETING" and reason in HELD_REASONS
    nodes: tuple[str, ...] = ()
    if ending:
        kind, held = JOB_WAITING, True
    elif state in _FINISHED:
        kind = JOB_FINISHED
    elif state in _RUNNING:
        kind = JOB_RUNNING
        nodes = tuple(expand_hostlist(str(raw.get("nodes") or "")))
    elif state == "PENDING":
        kind = JOB_WAITING if held else JOB_STARTING
        nodes = tuple(expand_hostlist(str(raw.get("required_nodes") or ""))) if not held else ()
    else:
        raise ValueError(f"unknown job_state {state!r}")
    model, per_node = parse_gres(str(raw.get("tres_per_node") or ""))
    num_nodes = max(int(_number(raw.get("node_count"), 1)), 1)
    limit_min = _number(raw.get("time_limit"), math.inf)
    return JobObs(
        job_id=str(raw["job_id"]),
        name=str(raw.get("name") or ""),
        state=kind,
        num_nodes=num_nodes,
        gpus_per_node=per_node,
        gpu_model=model,
        cpus=int(_number(raw.get("cpus"), 0)),
        memory_mib=int(_number(raw.get("memory_per_node"), 0)),
        submit_s=_number(raw.get("submit_time"), time.time()),
        time_limit_s=limit_min * 60.0,
        nodes=nodes,
        held=held,
        ending=ending,
        restarts=int(_number(raw.get("restart_cnt"), 0)),
        deadline_s=_deadline(raw.get("deadline")),
    )


def _deadline(value: Any) -> float:
    """``sbatch --deadline``: epoch seconds; 0 or absent (the default) is no deadline."""
    number = _number(value, 0.0)
    return number if number > 0 else math.nan


def eligible_time(raw: Mapping[str, Any]) -> float:
    """Epoch seconds from which a job may start (a requeue pushes this about 2 min ahead in Slurm 22.05)."""
    return _number(raw.get("eligible_time"), 0.0)


def pin_args(start: StartRequest, clear_begin: bool = False) -> list[str]:
    """``scontrol update`` pinning a held job to its nodes; a resize sets its node count and GPUs per node in the
    same call, and (``clear_begin``) a requeued job's begin time, pushed back by the requeue, is reset to now."""
    argv = ["scontrol", "update", f"jobid={start.job_id}"]
    if start.gpus_per_node is not None:
        gres = ":".join(
            ["gres", "gpu", *([start.gpu_type] if start.gpu_type else []), str(start.gpus_per_node)]
        )
        argv += [f"NumNodes={len(start.nodes)}-{len(start.nodes)}", f"TresPerNode={gres}"]
    argv.append(f"nodelist={','.join(start.nodes)}")
    if clear_begin:
        argv.append("StartTime=now")
    return argv


class SlurmBackend:
    """A Slurm partition (or the whole cluster) as a ``ClusterBackend``."""

    name = "slurm"
    # Slurm requeues (scontrol requeuehold), resizes held jobs (NumNodes, TresPerNode), powers nodes
    # (state=power_up/power_down) and passes GPU settings to the node agent through the job's comment.
    capabilities = frozenset(
        {Capability.PREEMPTS, Capability.RESIZES, Capability.POWERS_NODES, Capability.SETS_GPU_SETTINGS}
    )
    lacks: ClassVar[Mapping[Capability, str]] = {
        Capability.SHARES_GPUS: "Slurm's gres/gpu gives each job whole GPUs"
    }

    def __init__(
        self,
        runner: Runner | None = None,
        partition: str | None = None,
        retries: int = 3,
        retry_wait_s: float = 0.5,
        clock: Callable[[], float] = time.time,
        wakes_nodes_for_jobs: bool = True,
    ):
        # Slurm's own power saving (SuspendTime, ResumeProgram) wakes powered-down nodes for the jobs sent there.
        self.wakes_nodes_for_jobs = wakes_nodes_for_jobs
        self._eligible: dict[str, tuple[int, float]] = {}  # job -> (requeues, eligible time) last observed
        self.runner = runner or subprocess_runner()
        self.partition = partition
        self.retries = max(int(retries), 1)
        self.retry_wait_s = float(retry_wait_s)
        self.clock = clock
        self.calls = 0  # commands run (metrics)
        self.failures = 0  # commands that failed after every retry

    def _run(self, argv: Sequence[str]) -> str:
        last: BackendError | None = None
        for attempt in range(self.retries):
            self.calls += 1
            try:
                return self.runner(argv)
            except BackendError as exc:
                last = exc
                log.warning("attempt %d of %d: %s", attempt + 1, self.retries, exc)
                if attempt + 1 < self.retries:
                    time.sleep(self.retry_wait_s * (attempt + 1))
        self.failures += 1
        assert last is not None
        raise last

    def _json(self, argv: Sequence[str], key: str) -> list[Mapping[str, Any]]:
        out = self._run(argv)
        try:
            doc = json.loads(out)
            records = doc[key]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            head = out.strip().replace("\n", " ")[:120]
            raise BackendError(f"`{' '.join(argv)}` printed unreadable JSON ({exc}): {head!r}") from None
        if not isinstance(records, list):
            raise BackendError(f"`{' '.join(argv)}`: '{key}' is not a list")
        return records

    def observe(self) -> Observation:
        part = ["--partition", self.partition] if self.partition else []
        now = self.clock()
        warnings: list[str] = []
        nodes = self._records(self._json(["sinfo", "--json", *part], "nodes"), node_obs, "sinfo", warnings)
        # A node in several partitions is listed once per partition.
        nodes = list({n.name: n for n in nodes}.values())
        raw_jobs = self._json(["squeue", "--json", *part], "jobs")
        jobs = self._records(raw_jobs, job_obs, "squeue", warnings)
        self._eligible = {
            str(r["job_id"]): (int(_number(r.get("restart_cnt"), 0)), eligible_time(r))
            for r in raw_jobs
            if isinstance(r, dict) and "job_id" in r
        }
        return Observation(now, tuple(nodes), tuple(jobs), tuple(warnings))

    def _clear_begin(self, job_id: str) -> bool:
        """A requeue pushed the job's begin time back: it starts now."""
        restarts, eligible = self._eligible.get(job_id, (0, 0.0))
        return restarts > 0 and eligible > self.clock()

    @staticmethod
    def _records(raw: list[Any], parse: Callable[[Any], _R], what: str, warnings: list[str]) -> list[_R]:
        out: list[_R] = []
        for r in raw:
            try:
                out.append(parse(r))
            except (KeyError, ValueError, TypeError, AttributeError) as exc:
                ident = r.get("job_id", r.get("name", "?")) if isinstance(r, dict) else "?"
                msg = f"{what} --json: record {ident} skipped ({type(exc).__name__}: {exc})"
                log.warning(msg)
                warnings.append(msg)
        return out

    def start_many(self, starts: Sequence[StartRequest]) -> dict[str, BackendError]:
        """Pin each job to its nodes (with its new shape, for a resize), then release them all with one
        ``scontrol release`` (per job if that fails)."""
        failed: dict[str, BackendError] = {}
        pinned = []
        for start in starts:
            try:
                self._run(pin_args(start, self._clear_begin(start.job_id)))
                pinned.append(start.job_id)
            except BackendError as exc:
                failed[start.job_id] = exc
        if not pinned:
            return failed
        try:
            self._run(["scontrol", "release", ",".join(pinned)])
        except BackendError:
            for job_id in pinned:  # find the one(s) Slurm refuses
                try:
                    self._run(["scontrol", "release", job_id])
                except BackendError as exc:
                    failed[job_id] = exc
        return failed

    def requeue(self, job_id: str) -> None:
        self._run(["scontrol", "requeuehold", job_id])

    def cancel(self, job_id: str) -> None:
        self._run(["scancel", job_id])

    def power_up(self, nodes: Sequence[str]) -> None:
        self._run(["scontrol", "update", f"nodename={','.join(nodes)}", "state=power_up"])

    def power_down(self, nodes: Sequence[str]) -> None:
        self._run(["scontrol", "update", f"nodename={','.join(nodes)}", "state=power_down"])

    def set_gpu_setting(self, job_id: str, nodes: Sequence[str], setting: GpuSetting) -> None:
        """Write the setting into the job's comment, where its prolog (``wattsched agent-job start``) reads it and
        the node agent applies it (docs/agent.md §7): Slurm stores --gpu-freq but does not apply it without its
        NVML plugin."""
        from ...agent.jobs import encode_setting

        self._run(["scontrol", "update", f"jobid={job_id}", f"comment={encode_setting(setting)}"])
