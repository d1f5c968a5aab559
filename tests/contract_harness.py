"""The policy contract suite's harness: one scripted cluster history through the simulator and through each live
backend, every decision recorded where the policy makes it (docs/architecture.md, "The policy contract").

A policy is wrapped so that every action it takes, in decisions, in its timers and through its power manager,
goes to one log: (time, action, job name, nodes, GPUs, share, setting). The simulator runs the script with the
live mirror's own job model (a job's work = its time limit, progress at rate 1, no restart delay, stopped jobs keep
their progress), so that the logs of a policy that keeps the contract are equal on every backend. The live
backends are the in-memory fronts (``FakeSlurm``; ``FakeCoreV1Api`` with a small kubelet that runs bound pods);
time moves in whole seconds, and every scripted event falls on one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from wattsched.agent.jobs import decode_setting
from wattsched.backends.driver import LiveDriver
from wattsched.backends.k8s.backend import JOB_LABEL, K8sBackend
from wattsched.backends.k8s.fake import FakeCoreV1Api, make_node, make_pod
from wattsched.backends.slurm.backend import SlurmBackend
from wattsched.backends.slurm.fake import FakeSlurm
from wattsched.backends.store import JobStore
from wattsched.core.cluster import MILLI, ClusterSpec
from wattsched.core.jobs import JobTable
from wattsched.energy.utilisation import job_gpu_load
from wattsched.engine.power import NodePower, PowerStateConfig
from wattsched.engine.temporal import Simulator
from wattsched.perf.model import PerformanceModel
from wattsched.perf.restart import RestartModel
from wattsched.policies.contract import Actions, BindContext, Capability, ClusterView, PowerManager, Scheduler

T0 = 1_700_000_000.0
NODES, GPUS, CPUS, MEMORY_MIB = 3, 4, 8, 16000

# (name, submit s, GPUs, duration s): contention at the start, arrivals while jobs run, a lull, a late arrival.
SCRIPT: tuple[tuple[str, int, int, int], ...] = (
    ("j1", 0, 2, 120), ("j2", 0, 4, 240), ("j3", 0, 1, 60), ("j4", 0, 4, 180), ("j5", 0, 2, 120),
    ("j6", 5, 1, 360), ("j7", 40, 3, 120), ("j8", 100, 2, 60), ("j9", 130, 4, 120), ("j10", 900, 1, 60),
)  # fmt: skip
HORIZON_S = 1500
# The short script of the tests on real daemons (real Slurm, a real API server), in real seconds: six jobs at once
# on 3 x 4 GPUs, so some wait for others to end. No two events that a decision follows fall within 3 s of each
# other under the policies those tests run, so that real latency (a poll, plus the daemons') cannot reorder them.
SHORT_SCRIPT: tuple[tuple[str, int, int, int], ...] = (
    ("r1", 0, 2, 4), ("r2", 0, 4, 18), ("r3", 0, 1, 10), ("r4", 0, 4, 14), ("r5", 0, 3, 25), ("r6", 0, 2, 7),
)  # fmt: skip
DEADLINE_SLACK = 4  # deadline = submit + 4 x duration (for the policies that need deadlines)

RECORDED = ("start", "stop", "move", "retune", "reject", "defer", "power_on", "power_off")


@dataclass(frozen=True)
class Entry:
    time_s: float
    action: str
    job: str
    where: tuple = ()

    def __str__(self) -> str:
        return f"{self.time_s:g}s {self.action} {self.job} {self.where}"


class Log:
    def __init__(self, job_name: Callable[[ClusterView, int], str]):
        self.entries: list[Entry] = []
        self.job_name = job_name

    def add(self, view: ClusterView, action: str, job: int | None, where: tuple = ()) -> None:
        name = "" if job is None else self.job_name(view, job)
        self.entries.append(Entry(round(view.now, 6), action, name, where))


def _where(view: ClusterView, target: Any) -> tuple:
    names = view.spec.node_names
    return (
        tuple((str(names[n]), tuple(g)) for n, g, _, _ in target.placement),
        int(target.share_milli),
        str(target.setting),
    )


class RecordingActions:
    """The backend's actions, every one logged first."""

    def __init__(self, inner: Actions, view: ClusterView, log: Log):
        self.inner, self.view, self.log = inner, view, log

    def start(self, job: int, target: Any) -> None:
        self.log.add(self.view, "start", job, _where(self.view, target))
        self.inner.start(job, target)

    def stop(self, job: int, save: bool = False) -> None:
        self.log.add(self.view, "stop", job, (save,))
        self.inner.stop(job, save)

    def move(self, job: int, target: Any) -> None:
        self.move_many({job: target})

    def move_many(self, targets: Mapping[int, Any]) -> None:
        for job, target in targets.items():
            self.log.add(self.view, "move", job, _where(self.view, target))
        self.inner.move_many(targets)

    def retune(self, job: int, setting: Any) -> None:
        self.log.add(self.view, "retune", job, (str(setting),))
        self.inner.retune(job, setting)

    def reject(self, job: int) -> None:
        self.log.add(self.view, "reject", job)
        self.inner.reject(job)

    def defer(self, job: int, deferred: bool = True) -> None:
        if (job in set(self.view.deferred_jobs().tolist())) != deferred:
            self.log.add(self.view, "defer" if deferred else "undefer", job)
        self.inner.defer(job, deferred)

    def keep_free(self, gpus: float) -> None:
        self.inner.keep_free(gpus)

    def power_on(self, nodes: Iterable[int]) -> None:
        nodes = list(nodes)
        if nodes:  # an empty call changes nothing
            self.log.add(self.view, "power_on", None, tuple(str(self.view.spec.node_names[n]) for n in nodes))
        self.inner.power_on(nodes)

    def power_off(self, nodes: Iterable[int]) -> None:
        nodes = list(nodes)
        if nodes:
            self.log.add(
                self.view, "power_off", None, tuple(str(self.view.spec.node_names[n]) for n in nodes)
            )
        self.inner.power_off(nodes)

    def wake_at(self, time: float, callback: Callable[[ClusterView, Actions], None]) -> None:
        log = self.log
        self.inner.wake_at(time, lambda v, a: callback(v, RecordingActions(a, v, log)))

    def decide_after_events(self) -> None:
        self.inner.decide_after_events()


class RecordingScheduler(Scheduler):
    """A scheduler whose every action is logged; everything else is the wrapped one's."""

    def __init__(self, inner: Scheduler, log: Log):
        self.inner, self.log = inner, log
        self.name = inner.name
        self.decide_on_arrival = inner.decide_on_arrival
        self.decide_on_release = inner.decide_on_release

    def bind(self, ctx: BindContext) -> None:
        self.inner.bind(ctx)

    def on_jobs_added(self, ctx: BindContext, view: ClusterView, actions: Actions) -> None:
        self.inner.on_jobs_added(ctx, view, RecordingActions(actions, view, self.log))

    def required_capabilities(self) -> frozenset[Capability]:
        return self.inner.required_capabilities()

    def admit(self, jobs: JobTable, job: int) -> bool:
        return self.inner.admit(jobs, job)

    def check_inputs(self, jobs: JobTable, workload: str) -> None:
        self.inner.check_inputs(jobs, workload)

    def priority(self, jobs: JobTable) -> np.ndarray:
        return self.inner.priority(jobs)

    def on_start(self, view: ClusterView, actions: Actions) -> None:
        self.inner.on_start(view, RecordingActions(actions, view, self.log))

    def waiting_until(self) -> float:
        return self.inner.waiting_until()

    def decide(self, view: ClusterView, actions: Actions) -> None:
        self.inner.decide(view, RecordingActions(actions, view, self.log))

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


class RecordingPowerManager(PowerManager):
    def __init__(self, inner: PowerManager, log: Log):
        self.inner, self.log = inner, log
        self.name = inner.name
        self.needs = inner.needs

    def _a(self, view: ClusterView, actions: Actions) -> RecordingActions:
        return RecordingActions(actions, view, self.log)

    def on_start(self, view: ClusterView, actions: Actions) -> None:
        self.inner.on_start(view, self._a(view, actions))

    def on_node_idle(self, view: ClusterView, actions: Actions, node: int) -> None:
        self.inner.on_node_idle(view, self._a(view, actions), node)

    def on_job_start(self, view: ClusterView, actions: Actions, job: int) -> None:
        self.inner.on_job_start(view, self._a(view, actions), job)

    def on_blocked(self, view: ClusterView, actions: Actions) -> None:
        self.inner.on_blocked(view, self._a(view, actions))

    def on_headroom_short(self, view: ClusterView, actions: Actions) -> None:
        self.inner.on_headroom_short(view, self._a(view, actions))


class StepPrice:
    """A price series on the mirror's clock (seconds since its origin): cheap for the first 10 minutes, dear for
    the next 20, cheap again; in USD/MWh."""

    def value_at(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        return np.where((t >= 600) & (t < 1800), 180.0, 40.0)


NO_RESTART = RestartModel("fixed", fixed_s=0.0)
POWER_STATES = PowerStateConfig(boot_time_s=0.0, shutdown_time_s=0.0, idle_timeout_s=120.0)


def script_jobs(script: tuple[tuple[str, int, int, int], ...] = SCRIPT) -> JobTable:
    names, submit, gpus, duration = zip(*script, strict=True)
    return JobTable.build(
        job_id=list(names), submit_s=list(submit), duration_s=list(duration), num_gpu=list(gpus),
        cpu_milli=[1000] * len(names), memory_mib=[0] * len(names), gpu_spec=["A100"] * len(names),
        deadline_s=[s + DEADLINE_SLACK * d for s, d in zip(submit, duration, strict=True)],
    )  # fmt: skip


def script_spec() -> ClusterSpec:
    return ClusterSpec.from_arrays(
        "contract", [f"gpu{i + 1}" for i in range(NODES)], [CPUS * MILLI] * NODES, [MEMORY_MIB] * NODES,
        [GPUS] * NODES, ["A100"] * NODES,
    )  # fmt: skip


def run_simulator(
    scheduler: Scheduler,
    manager: PowerManager | None,
    price: Any = None,
    script: tuple[tuple[str, int, int, int], ...] = SCRIPT,
) -> list[Entry]:
    log = Log(lambda view, j: str(view.jobs.job_id[j]))
    jobs = script_jobs(script)
    spec = script_spec()
    perf = PerformanceModel(jobs, spec, job_gpu_load(jobs), restart=NO_RESTART)
    rng = np.random.default_rng(np.random.SeedSequence(42).spawn(3)[1])
    power = NodePower(RecordingPowerManager(manager, log), POWER_STATES) if manager is not None else None
    Simulator(
        jobs, spec, RecordingScheduler(scheduler, log), rng, perf=perf, power=power, signals=(price, None)
    ).run()
    return log.entries


class Kubelet:
    """Runs the fake API's bound pods: Running when bound, Succeeded once their work is done. Work advances at
    the simulator's rate: 1 alone, the sharing model's factor next to co-runners on the same GPUs (from the
    pods' GPU-index annotations); a requeued job (its copy) resumes where its checkpoint left it."""

    def __init__(self, api: FakeCoreV1Api, durations: Mapping[str, int]):
        self.api, self.durations = api, durations
        self.done: dict[str, float] = {}  # job -> seconds of work done
        jobs, spec = script_jobs(), script_spec()
        self.perf = PerformanceModel(jobs, spec, job_gpu_load(jobs), restart=NO_RESTART)
        self.index = {str(name): k for k, name in enumerate(jobs.job_id)}
        self.code = int(spec.gpu_model_code[0])
        self.last: float | None = None

    @staticmethod
    def _name(pod: Mapping[str, Any]) -> str:
        job = pod["metadata"].get("labels", {}).get(JOB_LABEL) or pod["metadata"]["name"]
        return str(job).split(".")[-1]

    def tick(self, now: float) -> None:
        running = [p for p in self.api.pods.values() if p["status"].get("phase") == "Running"]
        if self.last is not None and now > self.last:
            gpus = {
                id(p): {(p["spec"]["nodeName"], g) for g in _gpu_index(p)} for p in running
            }  # fmt: skip
            for pod in running:
                name = self._name(pod)
                others = [[self.index[self._name(q)] for q in running if q is not pod and gpu in gpus[id(q)]]
                          for gpu in sorted(gpus[id(pod)])]  # fmt: skip
                rate = 1.0
                if any(others):
                    rate = self.perf.shared_factor(self.index[name], self.code, others)
                self.done[name] = self.done.get(name, 0.0) + (now - self.last) * rate
        self.last = now
        for pod in running:
            name = self._name(pod)
            if self.done.get(name, 0.0) >= self.durations[name] - 1e-9:
                pod["status"]["phase"] = "Succeeded"
                self.api._record("Pod", "MODIFIED", pod)
        for pod in self.api.pods.values():
            if pod["spec"].get("nodeName") and pod["status"].get("phase") == "Pending":
                pod["status"]["phase"] = "Running"
                self.api._record("Pod", "MODIFIED", pod)


def _gpu_index(pod: Mapping[str, Any]) -> list[int]:
    text = str((pod["metadata"].get("annotations") or {}).get("alibabacloud.com/gpu-index") or "")
    return [int(g) for g in text.split(",") if g]


def run_live(
    backend_kind: str,
    scheduler: Scheduler,
    manager: PowerManager | None,
    tmp_path: Any,
    price: Any = None,
    allow_resize: bool = False,
) -> list[Entry]:
    """The script through a live backend's in-memory front end; raises what the driver raises at start."""
    names: dict[str, str] = {}
    log = Log(lambda view, j: names.get(str(view.jobs.job_id[j]), str(view.jobs.job_id[j])))
    durations = {name: duration for name, _, _, duration in SCRIPT}
    now = [T0]
    if backend_kind == "slurm":
        fake = FakeSlurm.uniform(NODES, GPUS)
        fake.keeps_progress = True
        for node in fake.nodes.values():
            node.cpus, node.memory_mb = CPUS, MEMORY_MIB
        # A job runs at the model's rate for its shape and GPU setting (the node agent applies the setting from
        # the comment), as the simulator's job model has it.
        jobs, spec = script_jobs(), script_spec()
        perf = PerformanceModel(jobs, spec, job_gpu_load(jobs))
        index = {str(name): k for k, name in enumerate(jobs.job_id)}
        fake.speed = lambda job: perf.solo_rate(
            index[job.name], int(spec.gpu_model_code[0]), job.gpus_per_node * job.num_nodes, job.num_nodes, 1,
            decode_setting(job.comment or None),
        )  # fmt: skip
        backend: Any = SlurmBackend(runner=fake, clock=lambda: fake.now, wakes_nodes_for_jobs=False)

        def submit(name: str, gpus: int, duration: int) -> None:
            deadline = fake.now + DEADLINE_SLACK * duration
            names[
                fake.submit(gpus, 1, duration, time_limit_min=duration // 60, name=name, deadline=deadline)
            ] = name

        def advance(t: float) -> None:
            fake.advance(t)
    else:
        api = FakeCoreV1Api(nodes=[make_node(f"gpu{i + 1}", GPUS, cpu=str(CPUS), memory=f"{MEMORY_MIB}Mi")
                                   for i in range(NODES)])  # fmt: skip
        api.clock = lambda: now[0]
        kubelet = Kubelet(api, durations)
        backend = K8sBackend(api, power_up_cmd="true {node}", power_down_cmd="true {node}", eviction_grace_s=0,
                             clock=lambda: now[0], hook_runner=lambda argv: None)  # fmt: skip

        def submit(name: str, gpus: int, duration: int) -> None:
            pod = make_pod(name, gpus=gpus, cpu_milli=1000, memory_mib=0)
            pod["metadata"]["creationTimestamp"] = api.now_text()
            pod["spec"]["activeDeadlineSeconds"] = duration
            pod["metadata"]["annotations"]["wattsched.io/deadline"] = str(now[0] + DEADLINE_SLACK * duration)
            api.add_pod(pod)
            names[f"default.{name}"] = name

        def advance(t: float) -> None:
            kubelet.tick(t)

    driver = LiveDriver(
        backend,
        RecordingScheduler(scheduler, log),
        JobStore(tmp_path / f"{backend_kind}.sqlite"),
        power_manager=RecordingPowerManager(manager, log) if manager is not None else None,
        allow_resize=allow_resize,
        signals_for=(lambda origin: (price, None)) if price is not None else None,
        restart_model=NO_RESTART,
    )
    pending = sorted(SCRIPT, key=lambda s: s[1])
    for second in range(HORIZON_S + 1):
        now[0] = T0 + second
        if backend_kind == "slurm":
            fake.now = now[0]
        while pending and pending[0][1] <= second:
            name, _, gpus, duration = pending.pop(0)
            submit(name, gpus, duration)
        advance(now[0])
        driver.step()
        if backend_kind != "slurm":
            advance(now[0])  # bound this second: running now, as a released Slurm job starts at once
    return log.entries


def first_difference(a: list[Entry], b: list[Entry], tolerance_s: float = 0.0) -> str | None:
    """Where two logs part (None when equal): actions, jobs, nodes, GPUs, shares and settings exactly, times within
    `tolerance_s`."""
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if (x.action, x.job, x.where) != (y.action, y.job, y.where) or not math.isclose(
            x.time_s, y.time_s, abs_tol=tolerance_s
        ):
            return f"entry {k}: simulator {x} | live {y}"
    if len(a) != len(b):
        longer = a if len(a) > len(b) else b
        who = "simulator" if longer is a else "live"
        return f"{who} has {abs(len(a) - len(b))} more: {longer[min(len(a), len(b))]}"
    return None


def run_real_slurm(
    slurm: Any,
    scheduler: Scheduler,
    script: tuple[tuple[str, int, int, int], ...],
    tmp_path: Any,
    timeout_s: float = 120.0,
) -> list[Entry]:
    """The script on a real local Slurm (tests/slurm_fixtures.py): every job submitted held at once, a ``sleep``
    of its duration, placed by the wrapped scheduler; the log in seconds since the mirror's origin."""
    import time

    from wattsched.backends.slurm.backend import subprocess_runner

    names: dict[str, str] = {}
    log = Log(lambda view, j: names.get(str(view.jobs.job_id[j]), str(view.jobs.job_id[j])))
    submitted = []
    # Time limits (whole minutes in Slurm) in the order of the durations: the one duration a live job states, so
    # that a policy ordering by it (sjf) orders as the simulator does by the true durations.
    rank = {name: k + 1 for k, (name, *_rest) in enumerate(sorted(script, key=lambda s: s[3]))}
    for name, _, gpus, duration in script:
        out = slurm.run(["sbatch", "--parsable", "--hold", "-N1", f"--gres=gpu:a100:{gpus}", f"--time={rank[name]}",
                         f"--job-name={name}", "--wrap", f"sleep {duration}"]).stdout  # fmt: skip
        job_id = out.strip().split(";")[0]
        names[job_id] = name
        submitted.append(job_id)
    backend = SlurmBackend(
        runner=subprocess_runner(env=slurm.env), retry_wait_s=0.2, wakes_nodes_for_jobs=False
    )
    driver = LiveDriver(backend, RecordingScheduler(scheduler, log), JobStore(tmp_path / "real.sqlite"))
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            driver.step()
            c = driver.cluster
            if c is not None and all(job in c.index and c.status[c.index[job]] >= 3 for job in submitted):
                break  # STATUS_DONE and beyond
            time.sleep(0.1)
    finally:
        slurm.run(["scancel", *submitted], check=False)
    return log.entries
