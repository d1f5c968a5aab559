"""The live loop: observe -> decide -> apply, every `interval_s` seconds (docs/live-slurm.md §3).

The loop calls the scheduler at the same decision points the simulator does (``engine/temporal.py``): once at the
start, after jobs arrive (if the scheduler decides on arrivals), after capacity is released (completions, nodes
coming back) and when a policy asked for it (``wake_at`` timers, ``decide_after_events``). A failed or unreadable
observation is logged with its command and counted, and the loop goes on at the next tick; nothing is lost, since
the cluster manager keeps the queue and the job store records what wattsched let go.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.errors import WattschedError
from ..core.states import POWER_STATE_NAMES
from ..perf.restart import RestartModel
from ..policies.contract import InvalidDecision, PowerManager, Scheduler, TimeSeries
from .base import BackendError, ClusterBackend
from .live import LiveCluster, check_live_policies, live_origin
from .profile_recorder import ProfileRecorder
from .store import JobStore

log = logging.getLogger("wattsched.live")


class LiveMetrics:
    """Prometheus metrics of the live scheduler, in their own registry."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.queue = Gauge("wattsched_queue_length", "Jobs waiting for wattsched to place them", registry=r)
        self.running = Gauge("wattsched_running_jobs", "Jobs holding GPUs", registry=r)
        self.decisions = Counter("wattsched_decisions", "Scheduling decisions made", registry=r)
        self.latency = Histogram(
            "wattsched_decision_latency_seconds",
            "Time of one scheduling pass (the policy's decision; the cluster-manager calls that follow are in "
            "wattsched_apply_seconds)",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
            registry=r,
        )
        self.observe = Histogram(
            "wattsched_observe_seconds", "Time to read the cluster manager's state", registry=r
        )
        self.apply = Histogram(
            "wattsched_apply_seconds",
            "Time to let a pass's started jobs go in the cluster manager",
            registry=r,
        )
        self.errors = Counter("wattsched_backend_errors", "Cluster-manager calls that failed", registry=r)
        self.nodes = Gauge("wattsched_nodes", "Nodes by power state", ["power_state"], registry=r)
        self.power = Gauge(
            "wattsched_cluster_power_watts",
            "Cluster power as the policies see it: the node agents' measured GPU power where configured, else "
            "the linear model (powered nodes; GPUs of running jobs at full load, of starting ones at the held "
            "draw)",
            registry=r,
        )

    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        from prometheus_client import start_http_server

        start_http_server(port, addr=address, registry=self.registry)


@dataclass
class StepResult:
    observed: bool
    decided: bool = False
    latency_s: float = 0.0
    arrived: int = 0
    finished: int = 0
    started: int = 0
    apply_s: float = 0.0  # letting the started jobs go (cluster-manager calls), after the pass


@dataclass
class LiveDriver:
    backend: ClusterBackend
    scheduler: Scheduler
    store: JobStore
    seed: int = 42
    power_manager: PowerManager | None = None  # wattsched's right-sizing instead of the cluster manager's
    allow_resize: bool = False
    gpu_type_map: dict[str, str] = field(default_factory=dict)
    metrics: LiveMetrics | None = None
    cluster: LiveCluster | None = None
    latencies_s: list[float] = field(default_factory=list)
    recorder: ProfileRecorder | None = None  # --record-profiles: the agents' job windows into a profile CSV
    # Aligned price and carbon series (seconds since the mirror's origin); built from the first observation's
    # time by `signals_for` when given, since the origin is known only then.
    signals_for: Callable[[float], tuple[TimeSeries | None, TimeSeries | None]] | None = None
    checkpoint_interval_s: float = 0.0
    agent_metrics_url: str | None = None  # the node agents' /metrics ({node}): measured power for the view
    restart_model: RestartModel | None = None  # restart delays the policies' view reports (None: the default)

    def __post_init__(self) -> None:
        # A policy that needs what this backend lacks is refused before anything is observed or started.
        signals = (None, None) if self.signals_for is None else self.signals_for(time.time())
        check_live_policies(self.backend, self.scheduler, self.power_manager, self.allow_resize, signals)

    def step(self) -> StepResult:
        """One observation and, if due, one decision."""
        t0 = time.perf_counter()
        try:
            obs = self.backend.observe()
        except BackendError as exc:
            log.warning("observation failed, retried at the next tick: %s", exc)
            if self.metrics:
                self.metrics.errors.inc()
            return StepResult(observed=False)
        if self.metrics:
            self.metrics.observe.observe(time.perf_counter() - t0)
        if self.recorder is not None:
            self.recorder.observe(obs)
            self._record_profiles()
        first = self.cluster is None
        if self.cluster is None:
            signals = (None, None) if self.signals_for is None else self.signals_for(live_origin(obs))
            self.cluster = LiveCluster(
                self.backend, self.scheduler, obs, self.store, seed=self.seed, gpu_type_map=self.gpu_type_map,
                power_manager=self.power_manager, allow_resize=self.allow_resize, signals=signals,
                checkpoint_interval_s=self.checkpoint_interval_s, agent_metrics_url=self.agent_metrics_url,
                restart_model=self.restart_model,
            )  # fmt: skip
        c = self.cluster
        changes = c.update(obs)
        if first:
            self.scheduler.on_start(c.view, c.actions)
            if c.power is not None:
                c.power.start()
        c.run_due_timers()
        c.flush()
        due = (
            first
            or (changes.arrived and self.scheduler.decide_on_arrival)
            or (changes.released and self.scheduler.decide_on_release)
            or c.decide_requested
        )
        result = StepResult(True, arrived=len(changes.arrived), finished=len(changes.finished))
        if due and c.view.queue_length + len(c.targets) == 0:
            c.decide_requested = False  # nothing to decide on: the next decision comes with the next event
        elif due:
            c.decide_requested = False
            t1 = time.perf_counter()
            try:
                c.decide()
            except (
                InvalidDecision
            ) as exc:  # a policy's mistake must not stop the service: what was done stands
                log.error("decision cut short: %s", exc)
                if self.metrics:
                    self.metrics.errors.inc()
            result.latency_s = time.perf_counter() - t1
            result.started = c.flush()
            result.apply_s = time.perf_counter() - t1 - result.latency_s
            result.decided = True
            self.latencies_s.append(result.latency_s)
            if self.metrics:
                self.metrics.decisions.inc()
                self.metrics.latency.observe(result.latency_s)
                self.metrics.apply.observe(result.apply_s)
        c.run_due_timers(power_manager=True)
        if c.power is not None:
            c.power.batch_end()
        c.meter.sample()  # energy to now at the power held since the last step; from now, the power after it
        if self.metrics:
            self._update_gauges(c, self.metrics)
        return result

    def _update_gauges(self, c: LiveCluster, m: LiveMetrics) -> None:
        m.queue.set(c.view.queue_length)
        m.running.set(len(c.targets))
        for code, name in enumerate(POWER_STATE_NAMES):
            m.nodes.labels(power_state=name).set(int((c.power_state == code).sum()))
        m.power.set(c.meter.power_w)

    def power_estimate_w(self) -> float:
        """Cluster power as the policies see it (``LiveMeter``: measured where the agents are read, else the
        linear model); 0 before the first observation."""
        return 0.0 if self.cluster is None else self.cluster.meter.power_w

    def run(self, interval_s: float, stop: threading.Event, max_steps: int | None = None) -> None:
        """Step every `interval_s` seconds until `stop` is set."""
        steps = 0
        while not stop.is_set() and (max_steps is None or steps < max_steps):
            started = time.monotonic()
            self.step()
            steps += 1
            stop.wait(max(0.0, interval_s - (time.monotonic() - started)))
        if self.recorder is not None:
            self._record_profiles(force=True)  # the windows the last jobs closed

    def _record_profiles(self, force: bool = False) -> None:
        recorder = self.recorder
        if recorder is None:
            return
        try:
            recorder.poll(force)
        except (OSError, WattschedError) as exc:  # the profile file: logged, the scheduler goes on
            log.error("--record-profiles: could not write %s: %s", recorder.path, exc)
