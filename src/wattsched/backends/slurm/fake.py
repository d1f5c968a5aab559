"""An in-memory Slurm front end: it answers ``sinfo --json`` and ``squeue --json`` in the shape Slurm 22.05 prints
(tests/fixtures/slurm holds recorded output) and carries out the ``scontrol`` and ``scancel`` calls the Slurm
backend makes. Jobs run for a set time on a clock the caller advances. For unit tests, the sim-to-live check and
the decision-latency benchmark on cluster shapes no test machine can start (docs/live-slurm.md §5); it is not a
scheduler: released jobs start where they were pinned, in release order, when their GPUs are free.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..base import BackendError
from .backend import expand_hostlist

REQUEUE_BEGIN_DELAY_S = (
    121.0  # what slurmctld 22.05 did to a job's eligible time on `scontrol requeuehold` here
)


@dataclass
class FakeNode:
    name: str
    gpus: int
    model: str = "a100"
    cpus: int = 8
    memory_mb: int = 16000
    used: int = 0
    powered: bool = True
    wake_at: float | None = None  # powering up until then


@dataclass
class FakeJob:
    job_id: int
    gpus_per_node: int
    num_nodes: int
    duration_s: float
    model: str = "a100"
    name: str = "job"
    held: bool = True
    time_limit_min: int | None = None
    submit_time: float = 0.0
    state: str = "PENDING"
    required: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    start_time: float | None = None
    released_at: float | None = None
    comment: str = ""
    restarts: int = 0
    begin_at: float = 0.0  # may start from then (a requeue pushes it back, as Slurm does)
    releases: int = 0  # how often it was let go: more than once without a requeue would be a double start
    done_s: float = 0.0  # work done by runs before a requeue (kept only where the fake keeps progress)
    deadline: float = 0.0  # sbatch --deadline (epoch s; 0: none)

    def run_start(self) -> float:
        """When its current run started (a running job always has a start time)."""
        assert self.start_time is not None, f"fake job {self.job_id} runs without a start time"
        return self.start_time


class FakeSlurm:
    def __init__(self, nodes: Sequence[FakeNode], now: float = 1_700_000_000.0, resume_s: float = 0.0):
        self.nodes = {n.name: n for n in nodes}
        self.now = float(now)
        self.resume_s = float(resume_s)
        self.jobs: dict[int, FakeJob] = {}
        self.next_id = 1
        self.calls: list[list[str]] = []
        self.fail: list[
            tuple[tuple[str, ...], str]
        ] = []  # (argv prefix, stderr): fail the next matching call
        self.garble: list[str] = []  # commands ("sinfo", "squeue") whose next output is cut short
        self.order: list[int] = []  # job ids in the order they started
        # A requeued job resumes from where it was stopped (a workload that checkpoints on SIGTERM) rather than
        # starting over (one that does not).
        self.keeps_progress = False
        # How fast a job runs (its run time is duration / speed): 1 unless a test models GPU settings.
        self.speed: Callable[[FakeJob], float] = lambda job: 1.0

    @staticmethod
    def uniform(
        count: int, gpus: int = 4, prefix: str = "gpu", model: str = "a100", **kw: float
    ) -> FakeSlurm:
        return FakeSlurm([FakeNode(f"{prefix}{i + 1}", gpus, model) for i in range(count)], **kw)

    def submit(self, gpus_per_node: int, num_nodes: int = 1, duration_s: float = 10.0, held: bool = True,
               time_limit_min: int | None = None, name: str = "job", model: str = "a100",
               deadline: float = 0.0) -> str:  # fmt: skip
        job = FakeJob(self.next_id, gpus_per_node, num_nodes, duration_s, model, name, held, time_limit_min,
                      self.now, deadline=deadline)  # fmt: skip
        self.jobs[job.job_id] = job
        self.next_id += 1
        return str(job.job_id)

    # ----- time ------------------------------------------------------------------------------------------------
    def advance(self, to: float) -> None:
        """Move the clock to `to`: finish jobs whose time is up, wake nodes, start released jobs that fit."""
        self.now = max(self.now, float(to))
        for job in self.jobs.values():
            if job.state == "RUNNING" and self.now >= job.run_start() + (
                job.duration_s - job.done_s
            ) / self.speed(job):
                job.state = "COMPLETED"
                for name in job.nodes:
                    self.nodes[name].used -= job.gpus_per_node
        for node in self.nodes.values():
            if node.wake_at is not None and self.now >= node.wake_at:
                node.powered, node.wake_at = True, None
        for job in sorted(self._released(), key=lambda j: (j.released_at, j.job_id)):
            if self.now < job.begin_at:
                continue
            targets = [self.nodes[n] for n in job.required]
            if any(not n.powered for n in targets):
                for n in targets:
                    if not n.powered and n.wake_at is None:
                        n.wake_at = self.now + self.resume_s
                continue
            if all(n.gpus - n.used >= job.gpus_per_node for n in targets):
                for n in targets:
                    n.used += job.gpus_per_node
                job.state, job.nodes, job.start_time = "RUNNING", list(job.required), self.now
                self.order.append(job.job_id)

    def _released(self) -> list[FakeJob]:
        return [j for j in self.jobs.values() if j.state == "PENDING" and not j.held and j.required]

    # ----- the command line --------------------------------------------------------------------------------------
    def __call__(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        self.calls.append(argv)
        for k, (prefix, stderr) in enumerate(self.fail):
            if tuple(argv[: len(prefix)]) == prefix:
                del self.fail[k]
                raise BackendError(f"`{' '.join(argv)}` exited 1: {stderr}")
        handler = {
            "sinfo": self._sinfo,
            "squeue": self._squeue,
            "scontrol": self._scontrol,
            "scancel": self._scancel,
        }
        if argv[0] not in handler:
            raise BackendError(f"`{' '.join(argv)}`: not a command the fake knows")
        out = handler[argv[0]](argv[1:])
        if argv[0] in self.garble:
            self.garble.remove(argv[0])
            return out[: len(out) // 2]
        return out

    def _sinfo(self, args: list[str]) -> str:
        nodes = []
        for n in self.nodes.values():
            flags = [] if n.powered else (["POWERED_DOWN", "POWERING_UP"] if n.wake_at else ["POWERED_DOWN"])
            state = "idle" if n.used == 0 else ("allocated" if n.used == n.gpus else "mixed")
            nodes.append({"name": n.name, "state": state, "state_flags": flags, "cpus": n.cpus,
                          "real_memory": n.memory_mb, "gres": f"gpu:{n.model}:{n.gpus}",
                          "gres_used": f"gpu:{n.model}:{n.used}(IDX:N/A)", "partitions": ["main"]})  # fmt: skip
        return json.dumps({"nodes": nodes})

    def _squeue(self, args: list[str]) -> str:
        jobs = []
        for j in self.jobs.values():
            reason = "JobHeldUser" if j.held and j.state == "PENDING" else "None"
            jobs.append({
                "job_id": j.job_id, "name": j.name, "job_state": j.state, "state_reason": reason,
                "nodes": ",".join(j.nodes), "required_nodes": ",".join(j.required), "node_count": j.num_nodes,
                "tres_per_node": f"gres:gpu:{j.model}:{j.gpus_per_node}", "cpus": j.num_nodes,
                "memory_per_node": None, "submit_time": int(j.submit_time), "time_limit": j.time_limit_min,
                "partition": "main", "gres_detail": [], "comment": j.comment,
                "restart_cnt": j.restarts, "eligible_time": int(max(j.begin_at, j.submit_time)),
                "deadline": int(j.deadline),
            })  # fmt: skip
        return json.dumps({"jobs": jobs})

    def _job(self, text: str) -> FakeJob:
        job = self.jobs.get(int(text))
        if job is None:
            raise BackendError(f"scontrol: Invalid job id specified: {text}")
        return job

    def _scontrol(self, args: list[str]) -> str:
        verb = args[0]
        if verb == "update" and args[1].startswith("jobid="):
            self._update_job(self._job(args[1].split("=", 1)[1]), args)
        elif verb == "update" and args[1].startswith("nodename="):
            names = expand_hostlist(args[1].split("=", 1)[1])
            for name in names:
                node = self.nodes[name]
                if args[2] == "state=power_up" and not node.powered:
                    node.wake_at = self.now + self.resume_s
                elif args[2] == "state=power_down" and node.used == 0:
                    node.powered, node.wake_at = False, None
        elif verb == "release":
            for text in args[1].split(","):
                job = self._job(text)
                if job.state == "PENDING" and job.held:
                    job.held, job.released_at = False, self.now
                    job.releases += 1
            self.advance(self.now)  # no scheduling delay: released jobs whose GPUs are free start now
        elif verb == "requeuehold":
            job = self._job(args[1])
            if job.state == "RUNNING":
                for n in job.nodes:
                    self.nodes[n].used -= job.gpus_per_node
                if self.keeps_progress:
                    job.done_s += (self.now - job.run_start()) * self.speed(job)
            job.state, job.held, job.nodes, job.required = "PENDING", True, [], []
            job.restarts += 1
            job.begin_at = self.now + REQUEUE_BEGIN_DELAY_S
        else:
            raise BackendError(f"`scontrol {' '.join(args)}`: not a call the fake knows")
        return ""

    def _update_job(self, job: FakeJob, args: list[str]) -> None:
        """``scontrol update jobid=N key=value...`` for the keys the backend sets, as 22.05 takes them."""
        fields = dict(a.split("=", 1) for a in args[2:])
        if "comment" in fields:
            job.comment = fields.pop("comment")
        if fields and job.state != "PENDING":
            raise BackendError(f"`scontrol {' '.join(args)}` exited 1: Job is no longer pending execution")
        if "NumNodes" in fields:
            job.num_nodes = int(fields.pop("NumNodes").split("-")[0])
        if "TresPerNode" in fields:
            job.gpus_per_node = int(fields.pop("TresPerNode").rsplit(":", 1)[1])
        if "nodelist" in fields:
            nodes = expand_hostlist(fields.pop("nodelist"))
            if any(n not in self.nodes for n in nodes) or len(nodes) != job.num_nodes:
                raise BackendError(f"`scontrol {' '.join(args)}` exited 1: Invalid node name specified")
            job.required = nodes
        if fields.pop("StartTime", None) == "now":
            job.begin_at = self.now
        if fields:
            raise BackendError(
                f"`scontrol {' '.join(args)}`: not a field the fake knows: {', '.join(fields)}"
            )

    def _scancel(self, args: list[str]) -> str:
        job = self._job(args[0])
        if job.state == "RUNNING":
            for n in job.nodes:
                self.nodes[n].used -= job.gpus_per_node
        job.state = "CANCELLED"
        return ""
