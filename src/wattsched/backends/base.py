"""The live-backend contract: observe -> decide -> apply (docs/live-slurm.md §3).

A live backend is the cluster manager seen through two small surfaces:

* :meth:`ClusterBackend.observe` returns an :class:`Observation`: every node (GPUs, GPU model, CPUs, memory, power
  state) and every job wattsched manages (its request, state and, once started, its nodes);
* the apply methods carry out what the policy decided: start a held job on given nodes, requeue or cancel one,
  power nodes up or down, pass a GPU setting to the node agent.

:class:`~.live.LiveCluster` turns observations into the same ``ClusterView`` and ``Actions`` the simulator gives
the policies (``policies/contract.py``), so the queue, placement, allocation and power-manager objects run
unchanged. The simulator is the other implementation of that view: a policy cannot tell them apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..core.cluster import MILLI
from ..core.errors import WattschedError
from ..core.settings import GpuSetting
from ..policies.contract import Capability

# A live job's state, as wattsched needs it (the cluster manager's own names map onto these).
JOB_WAITING = "waiting"  # queued and held for wattsched to place
JOB_STARTING = "starting"  # released by wattsched, not yet running in the cluster manager
JOB_RUNNING = "running"
JOB_FINISHED = "finished"  # completed, failed, cancelled or timed out: it no longer holds resources

# A node's power state as observed.
NODE_ON, NODE_OFF, NODE_POWERING_UP, NODE_POWERING_DOWN, NODE_UNAVAILABLE = (
    "on",
    "off",
    "powering_up",
    "powering_down",
    "unavailable",  # down, drained or failed: no work goes there
)


class BackendError(WattschedError):
    """A cluster-manager call failed or returned something unreadable; the message names the command."""


@dataclass(frozen=True)
class NodeObs:
    name: str
    gpus: int
    gpu_model: str  # "" for a node without GPUs
    cpus: int
    memory_mib: int
    power: str  # NODE_*


@dataclass(frozen=True)
class JobObs:
    job_id: str  # the cluster manager's id
    name: str
    state: str  # JOB_*
    num_nodes: int  # nodes asked for (1 unless a gang)
    gpus_per_node: int
    gpu_model: str  # "" = any model
    cpus: int
    memory_mib: int
    submit_s: float  # epoch seconds
    time_limit_s: float  # the job's wall-time limit (inf when none): a duration estimate for policies
    nodes: tuple[str, ...] = ()  # where it runs (running or starting)
    held: bool = False  # waiting because held (ours to place) rather than for resources
    ending: bool = False  # held again (requeued) while its previous run still winds down on its old nodes
    restarts: int = 0  # how often the cluster manager requeued it
    gpu_milli: int = MILLI  # the share of each GPU it asks for (1000: whole GPUs)
    deadline_s: float = math.nan  # epoch seconds by which it should finish (NaN: none given)

    @property
    def num_gpu(self) -> int:
        return self.num_nodes * self.gpus_per_node


@dataclass(frozen=True)
class StartRequest:
    """Run a held job on exactly `nodes`. ``gpus_per_node`` set: change the job's shape first (a resize by an
    allocation policy) to so many GPUs on each of the nodes. ``gpu_index``: the policy's GPUs on each node (a
    backend that can pin them does; the count is what every backend honours); ``share_milli``: the share of each
    (below 1000 only where the backend shares GPUs)."""

    job_id: str
    nodes: tuple[str, ...]
    gpus_per_node: int | None = None
    gpu_type: str = ""  # the cluster manager's GPU type name for a resize ("" = any)
    gpu_index: tuple[tuple[int, ...], ...] = ()
    share_milli: int = MILLI


@dataclass(frozen=True)
class Observation:
    time_s: float  # epoch seconds when observed
    nodes: tuple[NodeObs, ...]
    jobs: tuple[JobObs, ...]
    warnings: tuple[str, ...] = field(default=())  # records skipped as unreadable (logged, never fatal)


class ClusterBackend(Protocol):
    """What a live backend does; every call may raise :class:`BackendError`.

    A new backend implements these members and declares what it can do (``capabilities``, with the reason for
    each it lacks in ``lacks``); the mirror, view, actions, validator, power managers and the driver
    (``live.py``, ``power.py``, ``driver.py``) are shared (docs/architecture.md, "Adding a live backend")."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What it can carry out (:class:`Capability`)."""

    @property
    def lacks(self) -> Mapping[Capability, str]:
        """Why it lacks a capability, for the one-line refusal."""

    @property
    def wakes_nodes_for_jobs(self) -> bool:
        """Whether the cluster manager wakes powered-down nodes itself for the jobs sent there (Slurm's resume
        program): such nodes stay placeable when no wattsched power manager drives node power."""

    def observe(self) -> Observation: ...

    def start_many(self, starts: Sequence[StartRequest]) -> dict[str, BackendError]:
        """Run each held job on exactly its nodes (resized first where asked); the jobs that could not be started,
        with why."""

    def requeue(self, job_id: str) -> None:
        """Preempt a running job back to the queue (held again, for wattsched to place)."""

    def cancel(self, job_id: str) -> None: ...

    def power_up(self, nodes: Sequence[str]) -> None: ...

    def power_down(self, nodes: Sequence[str]) -> None: ...

    def set_gpu_setting(self, job_id: str, nodes: Sequence[str], setting: GpuSetting) -> None:
        """Apply a job's clock or power limit on its nodes (through the node agent)."""
