"""wattsched's Kubernetes backends against a real control plane (etcd + kube-apiserver + kube-scheduler 1.20.2,
``tests/k8s_fixtures.py``; docs/live-kubernetes.md §7): no fake API, no fixtures of the protocol.

* The extender: a real kube-scheduler calls ``filter``, ``prioritize`` and ``bind`` of a real ``serve
  k8s-extender`` (in-process, and once as the CLI subprocess) over mutual TLS; pods end up on the node wattsched
  chose, where kube-scheduler alone puts them elsewhere; ``FailedNodes`` and ``FailedAndUnresolvableNodes`` keep a
  pod Pending; a kube-scheduler without the client certificate binds nothing.
* The custom scheduler (``serve k8s-scheduler``): binds through the API server, pods listed at start and pods
  created later, a 409 Conflict from the real API server, a watch the server ends and one whose
  resourceVersion has expired (410 Gone, re-listed).

Each test starts from an empty cluster (no nodes, no pods) and its own kube-schedulers; ``k8s`` resets it after.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from tests.k8s_fixtures import Cert, ControlPlane, wait_for
from wattsched.backends.k8s.extender import Extender, ExtenderServer
from wattsched.backends.k8s.objects import GPU_MILLI_ANNOTATION, GPU_MODEL_KEY
from wattsched.backends.k8s.scheduler import CustomScheduler
from wattsched.backends.k8s.watcher import ClusterWatcher
from wattsched.policies.base import PLACEMENT_POLICIES

pytestmark = pytest.mark.k8s

NS = "default"
EXTENDER_PROFILE = "energy-aware-extender"
PREFIX = "/energy"


def stays_pending(k8s: ControlPlane, name: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert k8s.node_of(NS, name) == "", f"pod {name} was bound"
        time.sleep(0.25)


def event_messages(k8s: ControlPlane, name: str, reason: str) -> list[str]:
    return [e["message"] for e in k8s.events(NS, name) if e["reason"] == reason]


# ----- the extender -------------------------------------------------------------------------------------------
@dataclass
class Served:
    extender: Extender
    server: ExtenderServer
    url: str

    def calls(self) -> dict[str, int]:
        return dict(self.extender.calls)


@contextmanager
def serve_extender(k8s: ControlPlane, placement: str, mtls: bool = True) -> Iterator[Served]:
    """``serve k8s-extender`` in-process: list + watch through the real API server, HTTPS on 127.0.0.1 with a
    certificate of the test CA; with ``mtls`` a client certificate of that CA is required."""
    watcher = ClusterWatcher(k8s.core_v1(), PLACEMENT_POLICIES.create(placement), seed=42)
    stop = threading.Event()
    watcher.start(stop)
    serving = k8s.pki.server("extender")
    extender = Extender(watcher)
    server = ExtenderServer(extender, "127.0.0.1", 0, PREFIX, tls_cert=str(serving.cert),
                            tls_key=str(serving.key), tls_client_ca=str(k8s.pki.ca) if mtls else None)  # fmt: skip
    server.start()
    try:
        yield Served(extender, server, f"https://127.0.0.1:{server.port}{PREFIX}")
    finally:
        k8s.stop_schedulers()  # first: a kube-scheduler in the middle of an extender call takes long to stop
        stop.set()
        server.stop()


def test_kube_scheduler_binds_where_the_extender_chooses(k8s: ControlPlane) -> None:
    """best-fit packs: a 2-GPU pod goes to the node with 6 of 8 GPUs taken; kube-scheduler's own plugins (least
    allocated) spread it to the empty node. Over mutual TLS: kube-scheduler presents its client certificate."""
    k8s.create_node("gpu-a", gpus=8)
    k8s.create_node("gpu-b", gpus=8)
    k8s.create_pod("busy", gpus=6, cpu="16", memory="64Gi", node_name="gpu-a")  # placed by someone else
    with serve_extender(k8s, "best-fit") as served:
        k8s.start_scheduler(EXTENDER_PROFILE, extender_url=served.url, tls=k8s.pki.client("kube-scheduler"))
        k8s.start_scheduler("plain", score_plugins=True)  # kube-scheduler alone, its default plugins
        k8s.create_pod("alone", gpus=2, scheduler_name="plain")
        assert k8s.wait_bound(NS, "alone") == "gpu-b"
        k8s.delete_pod(NS, "alone")
        assert served.calls() == {"filter": 0, "prioritize": 0, "bind": 0}  # "plain" has no extender

        k8s.create_pod("packed", gpus=2, scheduler_name=EXTENDER_PROFILE)
        assert k8s.wait_bound(NS, "packed") == "gpu-a"
        calls = served.calls()
        assert calls["filter"] >= 1 and calls["prioritize"] >= 1 and calls["bind"] == 1, calls
        # the extender bound it (bindVerb): its mirror holds the pod on gpu-a, 8 of 8 GPUs taken
        cluster = served.extender.watcher.cluster
        assert cluster.state.free_gpus[cluster.index["gpu-a"]] == 0
        # a pod that asks for 8 now fits gpu-b only; a CPU-only pod is not sent to the extender
        k8s.create_pod("eight", gpus=8, scheduler_name=EXTENDER_PROFILE)
        assert k8s.wait_bound(NS, "eight") == "gpu-b"
        k8s.create_pod("cpu-only", gpus=0, scheduler_name=EXTENDER_PROFILE)
        assert k8s.wait_bound(NS, "cpu-only") in ("gpu-a", "gpu-b")
        assert served.calls()["bind"] == 2


def test_failed_nodes_keep_the_pod_pending_until_capacity_is_released(k8s: ControlPlane) -> None:
    """kube-scheduler counts only whole ``nvidia.com/gpu``; wattsched also counts GPU shares (gpu-milli). With
    a 600-milli share on each node's only GPU, kube-scheduler's own filters pass both nodes, wattsched's filter
    fails both (FailedNodes): the 1-GPU pod stays Pending, with wattsched's reason in kube-scheduler's event.
    Deleting one share frees that node: the pod is bound there. A pod asking for a GPU model no node has
    (FailedAndUnresolvableNodes) stays Pending."""
    for node in ("gpu-c", "gpu-d"):
        k8s.create_node(node, gpus=1)
        k8s.create_pod(f"share-{node}", gpus=0, node_name=node, annotations={GPU_MILLI_ANNOTATION: "600"})
    with serve_extender(k8s, "best-fit") as served:
        k8s.start_scheduler(EXTENDER_PROFILE, extender_url=served.url, tls=k8s.pki.client("kube-scheduler"))
        k8s.create_pod("whole", gpus=1, scheduler_name=EXTENDER_PROFILE)
        k8s.create_pod(
            "v100", gpus=1, scheduler_name=EXTENDER_PROFILE, annotations={GPU_MODEL_KEY: "V100M16"}
        )
        wait_for("FailedScheduling of both pods",
                 lambda: event_messages(k8s, "whole", "FailedScheduling")
                 and event_messages(k8s, "v100", "FailedScheduling"), 30)  # fmt: skip
        stays_pending(k8s, "whole", 2.0)
        assert k8s.node_of(NS, "v100") == ""
        whole = " ".join(event_messages(k8s, "whole", "FailedScheduling"))
        assert "0/2 nodes are available" in whole and "0 free GPUs, pod asks for 1" in whole, whole
        # 1.20's protocol has no FailedAndUnresolvableNodes (a later addition): it drops the nodes wattsched
        # left out of NodeNames without showing wattsched's reason ("GPU model A100 not in 'V100M16'")
        v100 = " ".join(event_messages(k8s, "v100", "FailedScheduling"))
        assert "0/2 nodes are available" in v100 and "GPU model" not in v100, v100
        assert served.calls()["bind"] == 0

        k8s.delete_pod(NS, "share-gpu-d")
        # kube-scheduler retries the pod the moment its informer sees the deletion. If that is before wattsched's
        # watch has it, the filter still fails the pod, and the next try comes with the next cluster event (or
        # 1.20's 60 s flush of unschedulable pods): then, once wattsched's mirror has the GPU free, an event (a
        # node label) has kube-scheduler try again. Either way the pod lands on gpu-d.
        watcher = served.extender.watcher

        def bound_or_seen_free() -> bool:
            if k8s.node_of(NS, "whole"):
                return True
            cluster = watcher.cluster  # a new mirror after any re-list
            return cluster.state.free_gpus[cluster.index["gpu-d"]] == 1

        wait_for("the pod bound, or wattsched to see gpu-d's GPU free", bound_or_seen_free, 15)
        if not k8s.node_of(NS, "whole"):
            k8s.api.patch_node("gpu-d", body={"metadata": {"labels": {"wattsched-test/nudge": "1"}}})
        assert k8s.wait_bound(NS, "whole") == "gpu-d"
        assert served.calls()["bind"] == 1
        stays_pending(k8s, "v100", 1.0)


def test_kube_scheduler_without_the_client_certificate_binds_nothing(k8s: ControlPlane) -> None:
    k8s.create_node("gpu-a", gpus=8)
    with serve_extender(k8s, "best-fit") as served:
        k8s.start_scheduler(EXTENDER_PROFILE, extender_url=served.url)  # trusts the CA, presents no cert
        k8s.create_pod("refused", gpus=1, scheduler_name=EXTENDER_PROFILE)
        messages = wait_for(
            "FailedScheduling", lambda: event_messages(k8s, "refused", "FailedScheduling"), 30
        )
        stays_pending(k8s, "refused", 2.0)
        assert served.calls() == {"filter": 0, "prioritize": 0, "bind": 0}
        assert "certificate required" in " ".join(messages), messages


def test_cli_extender_over_mtls_with_a_real_kube_scheduler(k8s: ControlPlane) -> None:
    """``wattsched serve k8s-extender --tls-cert --tls-key --tls-client-ca --kubeconfig`` as a process."""
    k8s.create_node("gpu-a", gpus=4)
    k8s.create_node("gpu-b", gpus=8)
    serving = k8s.pki.server("extender")
    port = _free_port()
    log = k8s.root / "cli-extender.log"
    tls = ["--tls-cert", str(serving.cert), "--tls-key", str(serving.key), "--tls-client-ca", str(k8s.pki.ca)]
    argv = [sys.executable, "-c", "from wattsched.cli.main import app; app()", "serve", "k8s-extender",
            "--placement", "best-fit", "--port", str(port), "--kubeconfig", str(k8s.kubeconfig), *tls]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for("the extender's banner", lambda: "mutual TLS" in log.read_text(), 60)
        client = k8s.pki.client("kube-scheduler")
        wait_for("healthz ok", lambda: _healthz(port, client, k8s) == 200, 30)
        k8s.start_scheduler(EXTENDER_PROFILE, extender_url=f"https://127.0.0.1:{port}{PREFIX}", tls=client)
        k8s.create_pod("small", gpus=4, scheduler_name=EXTENDER_PROFILE)
        assert k8s.wait_bound(NS, "small") == "gpu-a"  # best-fit: the 4-GPU node is filled exactly
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    assert "cluster: kubeconfig" in log.read_text()


def _free_port() -> int:
    from tests.k8s_fixtures import free_port

    return free_port()


def _healthz(port: int, client: Cert, k8s: ControlPlane) -> int:
    import http.client
    import ssl

    context = ssl.create_default_context(cafile=str(k8s.pki.ca))
    context.load_cert_chain(str(client.cert), str(client.key))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        conn.request("GET", f"{PREFIX}/healthz")
        return conn.getresponse().status
    finally:
        conn.close()


# ----- the custom scheduler -----------------------------------------------------------------------------------
@contextmanager
def running(scheduler: CustomScheduler) -> Iterator[threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), name="custom-scheduler", daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(timeout=10)


def custom(
    k8s: ControlPlane, placement: str = "best-fit", api: Any = None, watch_s: int = 300
) -> CustomScheduler:
    scheduler = CustomScheduler(api or k8s.core_v1(), PLACEMENT_POLICIES.create(placement), "energy-aware")
    for informer in (scheduler.node_informer, scheduler.pod_informer):
        informer.watch_timeout_s = watch_s
    return scheduler


def node_held(scheduler: CustomScheduler, name: str) -> str:
    """The node wattsched's mirror counts the pod on ("" if none)."""
    cluster = scheduler.cluster
    for pod, placement in list(cluster.held.values()):
        if pod.name == name:
            return str(cluster.spec.node_names[placement[0][0]])
    return ""


def test_custom_scheduler_binds_pods_listed_at_start_and_created_later(k8s: ControlPlane) -> None:
    k8s.create_node("n1", gpus=8)
    k8s.create_node("n2", gpus=8)
    k8s.create_pod("other", gpus=4, cpu="8", node_name="n1")  # another scheduler's pod
    k8s.create_pod("ignored", gpus=1)  # default-scheduler's (none runs): never ours
    k8s.create_pod("early", gpus=2, scheduler_name="energy-aware")
    scheduler = custom(k8s)
    with running(scheduler):
        assert k8s.wait_bound(NS, "early") == "n1"  # best-fit: n1 had 4 free
        k8s.create_pod("late", gpus=4, scheduler_name="energy-aware")
        assert k8s.wait_bound(NS, "late") == "n2"  # n1 has 2 free: n2 is the only fit
        k8s.create_pod("late-2", gpus=2, scheduler_name="energy-aware")
        assert k8s.wait_bound(NS, "late-2") == "n1"  # exactly fills n1
        k8s.create_pod("no-room", gpus=8, scheduler_name="energy-aware")
        wait_for("FailedScheduling", lambda: event_messages(k8s, "no-room", "FailedScheduling"), 15)
        assert k8s.node_of(NS, "no-room") == ""
        k8s.delete_pod(NS, "late")  # releases n2: the waiting pod is bound there
        assert k8s.wait_bound(NS, "no-room") == "n2"
        scheduler.events.flush()
        scheduled = event_messages(k8s, "late-2", "Scheduled")
        assert scheduled and "to n1" in scheduled[0], scheduled
    assert k8s.node_of(NS, "ignored") == ""
    assert scheduler.stats.bound == 4 and scheduler.stats.conflicts == 0


class RivalBindsFirst:
    """The scheduler's API, except that just before wattsched binds the pod named ``contested`` another binder
    binds it to ``rival_node`` through the same API server: wattsched's own bind then gets the real 409."""

    def __init__(self, api: Any, name: str, rival_node: str, bind: Callable[[str, str], None]):
        self._api, self._name, self._rival_node, self._bind = api, name, rival_node, bind
        self.rival_bound = False

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._api, attr)

    def create_namespaced_pod_binding(self, name: str, namespace: str, **kw: Any) -> Any:
        if name == self._name and not self.rival_bound:
            self._bind(namespace, name)
            self.rival_bound = True
        return self._api.create_namespaced_pod_binding(name, namespace, **kw)


def test_custom_scheduler_handles_a_real_409_conflict(k8s: ControlPlane) -> None:
    from kubernetes import client

    k8s.create_node("n1", gpus=8)
    k8s.create_node("n2", gpus=8)
    k8s.create_pod("warm", gpus=6, node_name="n1")
    api = k8s.core_v1()

    def rival(namespace: str, name: str) -> None:
        body = client.V1Binding(metadata=client.V1ObjectMeta(name=name, namespace=namespace),
                                target=client.V1ObjectReference(api_version="v1", kind="Node", name="n2"))  # fmt: skip
        api.create_namespaced_pod_binding(name, namespace, body=body, _preload_content=False)

    proxy = RivalBindsFirst(api, "contested", "n2", rival)
    scheduler = custom(k8s, api=proxy)
    with running(scheduler):
        wait_for("the first list", lambda: scheduler.cluster is not None, 15)
        k8s.create_pod("contested", gpus=2, scheduler_name="energy-aware")
        wait_for("the conflict", lambda: scheduler.stats.conflicts == 1, 15)
        assert proxy.rival_bound and k8s.node_of(NS, "contested") == "n2"  # wattsched wanted n1 (best-fit)
        # the watch brings the pod's real node: the mirror counts it on n2, nothing in flight
        wait_for("the pod counted on n2", lambda: node_held(scheduler, "contested") == "n2", 15)
        assert not scheduler.cluster.in_flight
        cluster = scheduler.cluster
        assert cluster.state.free_gpus[cluster.index["n1"]] == 2
        assert cluster.state.free_gpus[cluster.index["n2"]] == 6
        # and the next pod is placed on what is really free
        k8s.create_pod("after", gpus=2, scheduler_name="energy-aware")
        assert k8s.wait_bound(NS, "after") == "n1"
    assert scheduler.stats.bound == 1 and scheduler.stats.failed_binds == 0


def test_custom_scheduler_survives_watch_ends_and_an_expired_resource_version(k8s: ControlPlane) -> None:
    """The server ends each watch after 1 s (``timeoutSeconds``): the informer resumes from its resourceVersion
    without listing again, and pods created after the restarts are bound. Then the scheduler stops (at once,
    though its watches were open); a pod is created while nobody watches and etcd's history is compacted, as
    the API server does every 5 min: the informer resumes from a resourceVersion the server no longer has, gets
    the real 410 (an ``ERROR`` event, "too old"), lists again and binds the pod. (Pods are watched from etcd,
    not the watch cache, in this control plane: ``--watch-cache-sizes=pods#0``.)"""
    k8s.create_node("n1", gpus=8)
    scheduler = custom(k8s, watch_s=1)
    with running(scheduler) as stop:
        k8s.create_pod("first", gpus=1, scheduler_name="energy-aware")
        assert k8s.wait_bound(NS, "first") == "n1"
        time.sleep(2.5)  # at least two watches ended by the server and resumed
        k8s.create_pod("after-restarts", gpus=1, scheduler_name="energy-aware")
        assert k8s.wait_bound(NS, "after-restarts") == "n1"
        assert scheduler.pod_informer.relists == 1  # resumed, never re-listed
        scheduler.pod_informer.watch_timeout_s = 300  # the stop below must not wait for a watch to end
        time.sleep(0.5)
        stopped = time.monotonic()
        stop.set()
    assert time.monotonic() - stopped < 2.0
    old_version = scheduler.pod_informer.resource_version
    k8s.create_pod("in-the-gap", gpus=1, scheduler_name="energy-aware")
    assert k8s.compact_etcd() > int(old_version)
    relists = scheduler.pod_informer.relists
    stop = threading.Event()
    informers = (scheduler.node_informer, scheduler.pod_informer)
    threads = [threading.Thread(target=i.run, args=(stop,), daemon=True) for i in informers]
    for t in threads:  # the watches resume where they were (what start() does after its lists)
        t.start()
    try:
        assert k8s.wait_bound(NS, "in-the-gap") == "n1"
        assert scheduler.pod_informer.relists == relists + 1
        held = sorted(p.name for p, _ in scheduler.cluster.held.values())
        assert held == ["after-restarts", "first", "in-the-gap"]
    finally:
        stop.set()
        for informer in informers:
            informer.close()
        for t in threads:
            t.join(timeout=5)
