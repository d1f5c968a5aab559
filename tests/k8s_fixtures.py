"""A real Kubernetes 1.20 control plane for the live Kubernetes tests (marker ``k8s``; docs/live-kubernetes.md §7).

etcd (Debian's ``etcd-server``) and kube-apiserver + kube-scheduler v1.20.2, built from Debian bookworm's source
package ``kubernetes`` by ``tools/build_k8s_control_plane.sh`` (``.ci/run`` runs it as root), started on free
local ports in a temporary directory. No kubelet and no controller-manager: nodes are API objects with
``nvidia.com/gpu`` in their capacity and allocatable, pods are never run, only bound.

The API (for the tests here and for later backend tests)::

    def test_something(k8s: ControlPlane):            # function-scoped: the session's control plane, reset after
        api = k8s.core_v1()                           # wattsched's client, via backends/k8s/connect.py
        k8s.create_node("gpu-a", gpus=8, model="A100")
        k8s.create_pod("p1", gpus=2, scheduler_name="energy-aware")
        sched = k8s.start_scheduler(extender_url="https://127.0.0.1:PORT/energy", tls=k8s.pki.client("ks"))
        k8s.wait_bound("default", "p1")               # -> the node name

Also: ``k8s.api_url``, ``k8s.kubeconfig`` (a file: server, CA and bearer token), ``k8s.token``, ``k8s.pki`` (a CA
and certificates it signs, made with the ``openssl`` CLI: ``pki.ca``, ``pki.server(name)``, ``pki.client(name)``),
``k8s.api`` (one shared client), ``pod()``, ``node_of()``, ``events()``, ``delete_pod()`` (grace period 0: no
kubelet ever confirms a deletion), ``compact_etcd()`` (older watch versions then get 410 Gone),
``stop_schedulers()``; ``reset()`` (after each test) stops the test's kube-schedulers and deletes every pod and
node. ``available()`` says whether a control plane can start here, ``ControlPlane(root).start()`` starts one
outside pytest.

How it is served (1.20 no longer serves an insecure port: ``--insecure-port`` may only be 0, gone in 1.24):
HTTPS on 127.0.0.1 with a serving certificate of the test CA, clients authenticated by a static bearer token
(``--token-auth-file``, user ``wattsched-test`` in ``system:masters``) under RBAC, so the tests go through the
same TLS and token path as a real kubeconfig. Flags a control plane without controller-manager needs:
``--disable-admission-plugins=ServiceAccount,TaintNodesByCondition`` (no token controller creates the default
ServiceAccount, and no node-lifecycle controller would ever lift the ``not-ready`` taint of a new node) and
``--endpoint-reconciler-type=none``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from wattsched.backends.k8s.objects import GPU_MODEL_KEY

K8S_CACHE = Path(os.environ.get("WATTSCHED_K8S_CACHE", "/var/cache/wattsched/k8s-1.20.2"))
BUILD = "sudo tools/build_k8s_control_plane.sh (or .ci/run; about 6 min on 2 cores, once)"
NAMESPACE = "default"
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
TOKEN_USER = "wattsched-test"


def binaries() -> dict[str, Path]:
    return {
        "etcd": Path(shutil.which("etcd") or "/usr/bin/etcd"),
        "kube-apiserver": K8S_CACHE / "bin" / "kube-apiserver",
        "kube-scheduler": K8S_CACHE / "bin" / "kube-scheduler",
    }


def available() -> tuple[bool, str]:
    """Whether a control plane can be started here, and if not the one reason why."""
    if os.environ.get("WATTSCHED_SKIP_K8S") == "1":
        return False, "live Kubernetes skipped: WATTSCHED_SKIP_K8S=1"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return False, "live Kubernetes needs root (the control plane is built into a system cache)"
    missing = [str(path) for path in binaries().values() if not os.access(path, os.X_OK)]
    if missing:
        return False, f"no Kubernetes 1.20 control plane built ({', '.join(missing)} missing): run {BUILD}"
    if shutil.which("openssl") is None:
        return False, "live Kubernetes needs the openssl CLI for its certificates"
    return True, ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ----- certificates (openssl CLI; EC P-256) ---------------------------------------------------------------------
@dataclass(frozen=True)
class Cert:
    cert: Path
    key: Path


class Pki:
    """A CA in ``root`` and certificates it signs: every leaf is valid for 127.0.0.1 and localhost, for serving
    and for client authentication (``Cert(cert, key)``; the CA's certificate is ``ca``)."""

    def __init__(self, root: Path, name: str = "wattsched-test-ca"):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.ca = root / f"{name}.pem"
        self.ca_key = root / f"{name}.key"
        self._leaves: dict[str, Cert] = {}
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", self.ca_key, "-out", self.ca, "-days", "2", "-subj", f"/CN={name}",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip

    def leaf(self, name: str, groups: tuple[str, ...] = ()) -> Cert:
        """The certificate ``name`` (CN ``name``, O = each group), made once."""
        if name in self._leaves:
            return self._leaves[name]
        cert, key, csr = (self.root / f"{name}{ext}" for ext in (".pem", ".key", ".csr"))
        ext = self.root / f"{name}.ext"
        ext.write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
        )
        subject = f"/CN={name}" + "".join(f"/O={g}" for g in groups)
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", key, "-out", csr, "-subj", subject)  # fmt: skip
        _openssl("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key, "-CAcreateserial",
                 "-out", cert, "-days", "2", "-extfile", ext)  # fmt: skip
        self._leaves[name] = Cert(cert, key)
        return self._leaves[name]

    server = leaf  # readability at call sites
    client = leaf


def _openssl(*args: Any) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


# ----- processes ------------------------------------------------------------------------------------------------
@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` s."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout)


def spawn(name: str, argv: list[str], log: Path, env: Mapping[str, str] | None = None) -> Process:
    out = log.open("ab")
    try:
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, env=dict(env) if env is not None else None)  # fmt: skip
    finally:
        out.close()
    return Process(name, popen, log)


def wait_for(what: str, check, timeout: float, proc: Process | None = None, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except Exception:
            value = None
        if value:
            return value
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}) before {what}:\n{proc.tail()}")
        if time.monotonic() > deadline:
            extra = f"\n{proc.name} log:\n{proc.tail()}" if proc is not None else ""
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}{extra}")
        time.sleep(interval)


# ----- the control plane -----------------------------------------------------------------------------------------
@dataclass
class Scheduler:
    """A kube-scheduler process: its profile's ``scheduler_name``, config file and log."""

    process: Process
    scheduler_name: str
    config: Path
    healthz_port: int

    def stop(self) -> None:
        self.process.stop()


@dataclass
class ControlPlane:
    root: Path
    pki: Pki = field(init=False)
    api_url: str = field(init=False, default="")
    etcd_url: str = field(init=False, default="")
    kubeconfig: Path = field(init=False)
    token: str = field(init=False, default_factory=lambda: secrets.token_hex(16))
    started_s: float = field(init=False, default=0.0)  # etcd + kube-apiserver, start to /readyz ok
    processes: list[Process] = field(init=False, default_factory=list)
    schedulers: list[Scheduler] = field(init=False, default_factory=list)
    _api: Any = field(init=False, default=None)
    _configs: int = field(init=False, default=0)

    # -- lifecycle --
    def start(self) -> ControlPlane:
        began = time.monotonic()
        self.pki = Pki(self.root / "pki")
        serving = self.pki.server("kube-apiserver")
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd_url = self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        etcd = spawn("etcd", [str(binaries()["etcd"]), "--name", "wattsched-test",
                              "--data-dir", str(self.root / "etcd"),
                              "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                              "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                              "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                              "--initial-cluster", f"wattsched-test=http://127.0.0.1:{peer_port}",
                              "--log-level", "warn"], self.root / "etcd.log")  # fmt: skip
        self.processes.append(etcd)
        tokens = self.root / "tokens.csv"
        tokens.write_text(f'{self.token},{TOKEN_USER},{TOKEN_USER},"system:masters"\n')
        tokens.chmod(0o600)
        sa_key = self.root / "pki" / "service-account.key"
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", sa_key)
        self.api_url = f"https://127.0.0.1:{api_port}"
        apiserver = spawn("kube-apiserver", [
            str(binaries()["kube-apiserver"]),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
            "--insecure-port=0",
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self.pki.ca}", f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={sa_key}", f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/24",
            # no controller-manager: no token controller makes the default ServiceAccount, no node-lifecycle
            # controller removes the not-ready taint TaintNodesByCondition puts on every new node
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none",
            # pods watched from etcd, not the watch cache: after compact_etcd() a watch from an older version
            # gets 410 Gone at once, as in a busy cluster (1.20's cache replays a quiet test cluster's history)
            "--watch-cache-sizes=pods#0",
            f"--cert-dir={self.root / 'apiserver-certs'}", "--profiling=false", "--v=1",
        ], self.root / "kube-apiserver.log")  # fmt: skip
        self.processes.append(apiserver)
        wait_for("kube-apiserver /readyz", lambda: self._get("/readyz") == "ok", 60, apiserver)
        self.started_s = time.monotonic() - began
        self.kubeconfig = self.root / "kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "wattsched-test",
            "clusters": [{"name": "wattsched-test",
                          "cluster": {"server": self.api_url, "certificate-authority": str(self.pki.ca)}}],
            "users": [{"name": TOKEN_USER, "user": {"token": self.token}}],
            "contexts": [{"name": "wattsched-test",
                          "context": {"cluster": "wattsched-test", "user": TOKEN_USER}}],
        }))  # fmt: skip
        self.kubeconfig.chmod(0o600)
        wait_for(
            f"namespace {NAMESPACE}", lambda: self._get(f"/api/v1/namespaces/{NAMESPACE}"), 30, apiserver
        )
        return self

    def stop(self) -> None:
        for sched in self.schedulers:
            sched.stop()
        for proc in reversed(self.processes):
            proc.stop()

    def _get(self, path: str) -> Any:
        """GET on the API with the token (urllib: no client needed); JSON decoded, or the text."""
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        req = urllib.request.Request(self.api_url + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=5, context=context) as resp:
            body = resp.read().decode()
        return json.loads(body) if body.startswith("{") else body

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (the API server does so every 5 min): a watch from
        an older resourceVersion then gets 410 Gone. The revision compacted to."""
        head = _post_json(f"{self.etcd_url}/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
        revision = int(head["header"]["revision"])
        _post_json(f"{self.etcd_url}/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    # -- clients --
    def core_v1(self) -> Any:
        """A ``kubernetes.client.CoreV1Api`` from wattsched's own ``connect(--kubeconfig ...)``."""
        from wattsched.backends.k8s.connect import connect

        api, _ = connect(str(self.kubeconfig), None)
        return api

    @property
    def api(self) -> Any:
        if self._api is None:
            self._api = self.core_v1()
        return self._api

    # -- objects --
    def create_node(self, name: str, gpus: int = 8, model: str = "A100", cpu: str = "64",
                    memory: str = "512Gi", labels: Mapping[str, str] | None = None,
                    ready: bool = True) -> dict[str, Any]:  # fmt: skip
        """A Node with ``nvidia.com/gpu`` = gpus in capacity and allocatable and the GPU model label wattsched
        reads (``alibabacloud.com/gpu-card-model``); Ready (no kubelet ever changes that)."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        resources = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
        body = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  **({GPU_MODEL_KEY: model} if gpus else {}), **(labels or {})}},
            "status": {"capacity": resources, "allocatable": resources, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "reason": "WattschedTest",
                 "message": "a node object without a kubelet", "lastHeartbeatTime": now,
                 "lastTransitionTime": now}]},
        }  # fmt: skip
        self.api.create_node(body=body)
        # Nodes keep the status given on create; set it again anyway in case a server version drops it.
        self.api.patch_node_status(name, body={"status": body["status"]})
        return body

    def create_pod(self, name: str, gpus: int = 1, scheduler_name: str = "default-scheduler",
                   namespace: str = NAMESPACE, cpu: str = "1", memory: str = "1Gi", node_name: str = "",
                   annotations: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
        """A pod of one container asking for ``gpus`` whole GPUs (``nvidia.com/gpu`` request = limit; 0: none)
        and cpu/memory; ``node_name`` binds it at creation (as if another scheduler had placed it)."""
        resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
        if gpus:
            resources["requests"]["nvidia.com/gpu"] = str(gpus)
            resources["limits"] = {"nvidia.com/gpu": str(gpus)}
        body = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
            "spec": {"schedulerName": scheduler_name, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.2",
                                     "resources": resources}],
                     **({"nodeName": node_name} if node_name else {})},
        }  # fmt: skip
        self.api.create_namespaced_pod(namespace, body=body)
        return body

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self._get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def node_of(self, namespace: str, name: str) -> str:
        return str(self.pod(namespace, name).get("spec", {}).get("nodeName") or "")

    def wait_bound(self, namespace: str, name: str, timeout: float = 30.0) -> str:
        """The node the pod is bound to, once it is."""
        return wait_for(f"pod {namespace}/{name} to be bound", lambda: self.node_of(namespace, name), timeout)

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The core/v1 and events.k8s.io/v1 events about a pod, as {reason, message, source} dicts."""
        out = []
        for item in self._get(f"/api/v1/namespaces/{namespace}/events").get("items", []):
            if (item.get("involvedObject") or {}).get("name") == name:
                source = (item.get("source") or {}).get("component") or item.get("reportingComponent") or ""
                out.append({"reason": item.get("reason"), "message": item.get("message"), "source": source})
        return out

    def delete_pod(self, namespace: str, name: str) -> None:
        """Deleted at once (grace period 0: no kubelet would ever confirm a graceful deletion)."""
        with contextlib.suppress(Exception):
            self.api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    def stop_schedulers(self) -> None:
        """Stop the kube-schedulers started since the last reset."""
        for sched in self.schedulers:
            sched.stop()
        self.schedulers.clear()

    def reset(self) -> None:
        """Stop the kube-schedulers started since the last reset; delete every pod and node."""
        self.stop_schedulers()
        for ns in self._get("/api/v1/namespaces").get("items", []):
            name = ns["metadata"]["name"]
            if name not in SYSTEM_NAMESPACES:
                self.api.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        for node in self._get("/api/v1/nodes").get("items", []):
            self.api.delete_node(node["metadata"]["name"])
        wait_for("every pod and node to be gone",
                 lambda: not self._get("/api/v1/pods")["items"] and not self._get("/api/v1/nodes")["items"],
                 30)  # fmt: skip

    # -- kube-scheduler --
    def start_scheduler(self, scheduler_name: str = "energy-aware-extender", extender_url: str | None = None,
                        tls: Cert | None = None, ca: Path | None = None, score_plugins: bool = False,
                        extender: Mapping[str, Any] | None = None, timeout: float = 30.0) -> Scheduler:  # fmt: skip
        """A kube-scheduler (config ``kubescheduler.config.k8s.io/v1beta1``) with one profile,
        ``scheduler_name``, and, with ``extender_url``, one extender calling ``filter``, ``prioritize`` and
        ``bind`` there (weight 5, ``nodeCacheCapable``, ``managedResources: [nvidia.com/gpu]``, not ignorable;
        ``extender`` overrides any key). An https URL turns ``enableHTTPS`` on; ``tls`` is the client
        certificate it presents (``tlsConfig.certFile``/``keyFile``) and ``ca`` the CA it checks the extender's
        certificate against (default: the test CA). ``score_plugins=False`` turns the in-tree score plugins off
        (as deploy/kubernetes/extender.yaml does), so the extender's scores alone choose. Returns once its
        healthz answers; stopped by :meth:`reset` or :meth:`stop`."""
        self._configs += 1
        index, port = self._configs, free_port()
        config: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1beta1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "leaderElection": {"leaderElect": False},
            # 1.20's insecure healthz and metrics (gone in 1.23), on loopback; with --config the config's
            # addresses count, not --port/--address
            "healthzBindAddress": f"127.0.0.1:{port}", "metricsBindAddress": f"127.0.0.1:{port}",
            "profiles": [{"schedulerName": scheduler_name,
                          **({} if score_plugins else {"plugins": {"score": {"disabled": [{"name": "*"}]}}})}],
        }  # fmt: skip
        if extender_url:
            entry: dict[str, Any] = {
                "urlPrefix": extender_url, "filterVerb": "filter", "prioritizeVerb": "prioritize",
                "bindVerb": "bind", "weight": 5, "nodeCacheCapable": True, "ignorable": False,
                "httpTimeout": "10s", "enableHTTPS": extender_url.startswith("https:"),
                "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
            }  # fmt: skip
            if entry["enableHTTPS"]:
                entry["tlsConfig"] = {"caFile": str(ca or self.pki.ca)}
                if tls is not None:
                    entry["tlsConfig"] |= {"certFile": str(tls.cert), "keyFile": str(tls.key)}
            entry.update(extender or {})
            config["extenders"] = [entry]
        path = self.root / f"kube-scheduler-{index}.yaml"
        path.write_text(yaml.safe_dump(config))
        proc = spawn(f"kube-scheduler {scheduler_name}", [
            str(binaries()["kube-scheduler"]), f"--config={path}",
            "--secure-port=0", "--v=2",
        ], self.root / f"kube-scheduler-{index}.log")  # fmt: skip
        sched = Scheduler(proc, scheduler_name, path, port)
        self.schedulers.append(sched)
        wait_for(f"{proc.name} healthz", lambda: _http_ok(f"http://127.0.0.1:{port}/healthz"), timeout, proc)
        return sched


def _post_json(url: str, body: Any) -> Any:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status == 200


@pytest.fixture(scope="session")
def k8s_control_plane() -> Iterator[ControlPlane]:
    """etcd + kube-apiserver 1.20.2 for the whole session (started once, about 6 s), stopped by PID at its end.
    Tests use :func:`k8s`, which resets it after each test."""
    ok, why = available()
    if not ok:
        pytest.skip(why)
    root = Path(tempfile.mkdtemp(prefix="wattsched-k8s-"))
    plane = ControlPlane(root)
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def k8s(k8s_control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """The session's control plane, with no pods, nodes or kube-schedulers left when the test ends."""
    try:
        yield k8s_control_plane
    finally:
        k8s_control_plane.reset()
