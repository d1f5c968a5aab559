"""The kube-scheduler HTTP extender (``backends/k8s/extender.py``) served for real on 127.0.0.1 over the fake
API server: every verb with the protocol's JSON fixtures, filter reasons, 4xx answers to malformed requests,
fuzzing (never a 500, never a dropped connection, never a change to the mirror from a rejected request), a restart
of the extender, and TLS.

The cluster is the built-in ``default`` (16 nodes ``node-0000``..``node-0015``, 8 A100 each, 128 CPUs, 1 TiB).
FGD's target workload ("typical pods") comes from the pods pending at the first list, so the fake API starts with
a few pending pods of assorted shapes and FGD's scores are not all equal.
"""

from __future__ import annotations

import copy
import http.client
import json
import shutil
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wattsched.backends.k8s.extender import Extender, ExtenderServer
from wattsched.backends.k8s.fake import FakeCoreV1Api, make_pod
from wattsched.backends.k8s.objects import (
    GPU_COUNT_ANNOTATION,
    GPU_INDEX_ANNOTATION,
    GPU_MILLI_ANNOTATION,
    GPU_MODEL_KEY,
    pod_request,
)
from wattsched.backends.k8s.replay import nodes_of
from wattsched.backends.k8s.watcher import ClusterWatcher
from wattsched.policies.base import PLACEMENT_POLICIES
from wattsched.workloads.clusters import load_cluster

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "k8s"
PREFIX = "/energy"
NODE_NAMES = [f"node-{i:04d}" for i in range(16)]
FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
FIXTURE_POD = "ml/train-7"  # the pod of filter_args.json, prioritize_args.json and bind_args.json
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def fixture_json(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def typical_pods() -> list[dict[str, Any]]:
    """Pending pods of assorted shapes: FGD's target workload at the first list (none of them is ever bound)."""
    shapes = [(1, 1000), (1, 1000), (2, 1000), (4, 1000), (8, 1000), (1, 500), (1, 250), (0, 0)]
    return [
        make_pod(f"typical-{k}", gpus=g, gpu_milli=m or 1000, cpu_milli=4000 * max(g, 1), memory_mib=16384,
                 namespace="fgd")
        for k, (g, m) in enumerate(shapes)
    ]  # fmt: skip


def default_api() -> FakeCoreV1Api:
    return FakeCoreV1Api(nodes_of(load_cluster("default")), typical_pods())


# ----- a served extender ---------------------------------------------------------------------------------------
@dataclass
class Served:
    api: FakeCoreV1Api
    watcher: ClusterWatcher
    server: ExtenderServer

    @property
    def cluster(self):
        return self.watcher.cluster

    def connect(self, timeout: float = 10.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str | None = "application/json",
        conn: http.client.HTTPConnection | None = None,
    ) -> tuple[int, bytes, http.client.HTTPResponse]:
        own = conn is None
        conn = conn or self.connect()
        headers = {"Content-Type": content_type} if content_type else {}
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read(), resp
        finally:
            if own:
                conn.close()

    def post(self, verb: str, body: Any, **kw: Any) -> tuple[int, Any]:
        """POST a JSON value to a verb: the status and the decoded answer."""
        status, data, _ = self.request("POST", f"{PREFIX}/{verb}", json.dumps(body).encode(), **kw)
        return status, json.loads(data)

    def bind(self, pod: str, node: str) -> dict[str, Any]:
        namespace, name = pod.split("/")
        status, answer = self.post("bind", {"PodName": name, "PodNamespace": namespace, "Node": node})
        assert status == 200
        return answer


def serve(api: FakeCoreV1Api | None = None, sync: bool = True, **server_kw: Any) -> Served:
    api = api if api is not None else default_api()
    watcher = ClusterWatcher(api, PLACEMENT_POLICIES.create("fgd"), seed=42)
    if sync:
        watcher.sync()
    server = ExtenderServer(Extender(watcher), "127.0.0.1", 0, PREFIX, **server_kw)
    server.start()
    return Served(api, watcher, server)


def stop(s: Served) -> None:
    """Stop the server in the background: ``serve_forever`` notices a stop only at its next 0.5 s poll."""
    threading.Thread(target=s.server.stop, name="stop-extender", daemon=True).start()


@pytest.fixture
def served():
    s = serve()
    yield s
    stop(s)


@pytest.fixture(scope="module")
def shared():
    """One server for the tests that change nothing (or undo what they change)."""
    s = serve()
    yield s
    stop(s)


def snapshot(s: Served) -> tuple:
    """What no rejected request, filter or prioritize may change."""
    state = s.cluster.state
    return (
        state.gpu_left.copy(),
        state.cpu_left.copy(),
        state.mem_left.copy(),
        tuple(s.api.bindings),
        frozenset(s.cluster.held),
        frozenset(s.cluster.in_flight),
    )


def assert_unchanged(before: tuple, after: tuple) -> None:
    for a, b in zip(before[:3], after[:3], strict=True):
        np.testing.assert_array_equal(a, b)
    assert before[3:] == after[3:]


def pending(
    api: FakeCoreV1Api, name: str, gpus: int = 2, gpu_milli: int = 1000, namespace: str = "ml"
) -> str:
    """Add a pending pod (the extender binds only pods its watcher lists as pending); its key."""
    api.add_pod(make_pod(name, gpus=gpus, gpu_milli=gpu_milli, cpu_milli=8000, memory_mib=65536,
                         namespace=namespace, scheduler="energy-aware-extender"))  # fmt: skip
    return f"{namespace}/{name}"


def node_index(s: Served, name: str) -> int:
    return s.cluster.index[name]


def filter_args(pod: dict[str, Any], names: list[str] | None = None) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": None, "NodeNames": list(NODE_NAMES if names is None else names)}


def fixture_pod() -> dict[str, Any]:
    return fixture_json("filter_args.json")["Pod"]


# ----- 1. every verb with the fixtures ------------------------------------------------------------------------
def test_filter_node_names_form(shared):
    before = snapshot(shared)
    args = fixture_json("filter_args.json")
    status, answer = shared.post("filter", args)
    assert status == 200
    assert set(answer) == FILTER_KEYS  # the exact, capitalised Go field names
    assert answer["NodeNames"] == args["NodeNames"]  # an empty cluster: every node fits 2 A100
    assert answer["Nodes"] is None
    assert answer["FailedNodes"] == {} and answer["FailedAndUnresolvableNodes"] == {}
    assert answer["Error"] == ""
    assert_unchanged(before, snapshot(shared))


def test_filter_full_nodes_form_answers_with_node_objects(served):
    served.api.add_pod(
        make_pod("full", gpus=8, cpu_milli=1000, memory_mib=1024, namespace="ml", node="node-0005")
    )
    served.watcher.sync()
    node_list = {
        "kind": "NodeList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "42"},
        "items": [copy.deepcopy(served.api.nodes[n]) for n in NODE_NAMES],
    }
    status, answer = served.post("filter", {"Pod": fixture_pod(), "Nodes": node_list, "NodeNames": None})
    assert status == 200
    assert set(answer) == FILTER_KEYS
    assert answer["NodeNames"] is None
    assert answer["Nodes"]["metadata"] == node_list["metadata"]  # the list, less the nodes that failed
    assert answer["Nodes"]["items"] == [n for n in node_list["items"] if n["metadata"]["name"] != "node-0005"]
    assert answer["FailedNodes"] == {"node-0005": "0 free GPUs, pod asks for 2"}
    assert answer["FailedAndUnresolvableNodes"] == {}


@pytest.mark.parametrize("fixture", ["prioritize_args.json", "prioritize_share_args.json"])
def test_prioritize_top_node_is_the_policys_placement(shared, fixture):
    before = snapshot(shared)
    args = fixture_json(fixture)
    status, answer = shared.post("prioritize", args)
    assert status == 200
    assert [h["Host"] for h in answer] == args["NodeNames"]
    assert all(
        set(h) == {"Host", "Score"} and type(h["Score"]) is int and 0 <= h["Score"] <= 10 for h in answer
    )
    tens = [h["Host"] for h in answer if h["Score"] == 10]
    placement = shared.cluster.place(pod_request(args["Pod"]))
    assert tens == [str(shared.cluster.spec.node_names[placement[0][0]])]
    assert_unchanged(before, snapshot(shared))


def busy_pods(
    rng: np.random.Generator, count: int, gpu_left: np.ndarray | None = None
) -> list[dict[str, Any]]:
    """Pods already running on random nodes, whole GPUs or shares, that fit together on the default cluster (or
    on the GPUs left in `gpu_left`), each with the GPUs it holds in its gpu-index annotation."""
    free = {n: [1000] * 8 if gpu_left is None else gpu_left[i].tolist() for i, n in enumerate(NODE_NAMES)}
    out = []
    for k in range(count):
        node = NODE_NAMES[int(rng.integers(len(NODE_NAMES)))]
        row = free[node]
        if rng.random() < 0.3:  # a share of one GPU
            milli = int(rng.choice([100, 250, 500, 700]))
            gpu = next((g for g, left in enumerate(row) if left >= milli), None)
            if gpu is None:
                continue
            row[gpu] -= milli
            held = [gpu]
            out.append(make_pod(f"busy-{k}", gpus=1, gpu_milli=milli, cpu_milli=2000, memory_mib=8192,
                                namespace="busy", node=node))  # fmt: skip
        else:
            gpus = int(rng.integers(1, 5))
            whole = [g for g, left in enumerate(row) if left == 1000]
            if len(whole) < gpus:
                continue
            held = whole[:gpus]
            for g in held:
                row[g] = 0
            out.append(make_pod(f"busy-{k}", gpus=gpus, cpu_milli=4000 * gpus, memory_mib=32768 * gpus,
                                namespace="busy", node=node))  # fmt: skip
        out[-1]["metadata"]["annotations"][GPU_INDEX_ANNOTATION] = "-".join(map(str, held))
    return out


@pytest.mark.parametrize("fixture", ["prioritize_args.json", "prioritize_share_args.json"])
def test_prioritize_on_a_busy_cluster_then_bind_the_top_node(fixture):
    """All 16 names asked on a partly filled cluster: the 10 is the policy's node, and binding there takes the
    GPUs the policy would have taken."""
    api = default_api()
    for pod in busy_pods(np.random.default_rng(7), 40):
        api.add_pod(pod)
    args = fixture_json(fixture)
    api.add_pod(args["Pod"])
    s = serve(api)
    try:
        assert s.cluster.held, "the running pods are counted"
        args["NodeNames"] = NODE_NAMES
        status, answer = s.post("prioritize", args)
        assert status == 200 and [h["Host"] for h in answer] == NODE_NAMES
        scores = {h["Host"]: h["Score"] for h in answer}
        pod = pod_request(args["Pod"])
        expected = s.cluster.place(pod)
        top = str(s.cluster.spec.node_names[expected[0][0]])
        assert [n for n, v in scores.items() if v == 10] == [top]
        assert len(set(scores.values())) > 2, "FGD's scores on a busy cluster are not all equal"
        # nodes that cannot take the pod now score 0
        status, filtered = s.post("filter", args)
        for name in [*filtered["FailedNodes"], *filtered["FailedAndUnresolvableNodes"]]:
            assert scores[name] == 0
        meta = args["Pod"]["metadata"]
        assert s.bind(f"{meta['namespace']}/{meta['name']}", top) == {"Error": ""}
        assert s.cluster.held[pod.uid][1] == expected
    finally:
        stop(s)


def test_bind_creates_the_binding_and_takes_the_capacity(served):
    api, node = served.api, "node-0003"
    api.add_pod(fixture_pod())
    served.watcher.sync()
    n = node_index(served, node)
    assert served.cluster.state.free_gpus[n] == 8
    status, answer = served.post("bind", fixture_json("bind_args.json"))
    assert (status, answer) == (200, {"Error": ""})
    assert api.bindings == [(FIXTURE_POD, node)]
    assert api.pods[FIXTURE_POD]["spec"]["nodeName"] == node
    assert served.cluster.state.free_gpus[n] == 6
    # three more 2-GPU pods fill the node; it then fails the filter, with the reason, and only it
    keys = [pending(api, f"fill-{k}") for k in range(3)]
    served.watcher.sync()  # the extender binds only pods its watcher lists as pending
    for k, key in enumerate(keys):
        status, answer = served.post("filter", filter_args(fixture_pod(), [node]))
        assert answer["NodeNames"] == [node] and served.cluster.state.free_gpus[n] == 6 - 2 * k
        assert served.bind(key, node) == {"Error": ""}
    assert served.cluster.state.free_gpus[n] == 0
    status, answer = served.post("filter", filter_args(fixture_pod()))
    assert status == 200
    assert answer["FailedNodes"] == {node: "0 free GPUs, pod asks for 2"}
    assert answer["NodeNames"] == [x for x in NODE_NAMES if x != node]
    # a fifth 2-GPU bind onto the full node is refused and changes nothing
    key = pending(api, "one-too-many")
    served.watcher.sync()
    before = snapshot(served)
    assert "does not fit" in served.bind(key, node)["Error"]
    assert_unchanged(before, snapshot(served))
    # the informer's confirmations change nothing either
    served.watcher.sync()
    assert served.cluster.state.free_gpus[n] == 0 and not served.cluster.in_flight


def test_bind_twice_is_a_conflict_and_leaves_the_mirror_unchanged(served):
    """kube-scheduler may retry a bind the API server already took (before the watch reports it). The second
    answer is the 409 as an Error, and the capacity the first bind took stays taken (it was released: bug)."""
    served.api.add_pod(fixture_pod())
    served.watcher.sync()
    args = fixture_json("bind_args.json")
    assert served.post("bind", args) == (200, {"Error": ""})
    before = snapshot(served)
    status, answer = served.post("bind", args)
    assert status == 200 and "conflict" in answer["Error"]
    assert_unchanged(before, snapshot(served))
    assert served.api.bindings == [(FIXTURE_POD, "node-0003")]
    served.watcher.sync()  # the watch confirms the first bind; a third bind finds the pod no longer pending
    assert_unchanged((*before[:5], frozenset()), snapshot(served))
    status, answer = served.post("bind", args)
    assert status == 200 and "not pending" in answer["Error"]


def test_bind_conflict_from_the_api_releases_what_it_took(served):
    served.api.add_pod(fixture_pod())
    served.watcher.sync()
    served.api.conflicts.add(FIXTURE_POD)  # another binder won
    before = snapshot(served)
    status, answer = served.post("bind", fixture_json("bind_args.json"))
    assert status == 200 and "conflict" in answer["Error"]
    assert_unchanged(before, snapshot(served))
    assert served.api.bindings == []
    # the fake's conflict was for one binding: a retry goes through and takes the capacity
    assert served.post("bind", fixture_json("bind_args.json")) == (200, {"Error": ""})
    assert served.cluster.state.free_gpus[node_index(served, "node-0003")] == 6


def test_bind_errors(served):
    api = served.api
    before = snapshot(served)
    assert "not pending" in served.bind(FIXTURE_POD, "node-0003")["Error"]  # not listed yet
    key = pending(api, "x")
    served.watcher.sync()
    before = snapshot(served)
    assert "does not fit" in served.bind(key, "node-9999")["Error"]
    for body in ({"PodName": "x", "PodNamespace": "ml"}, {"PodName": 7, "PodNamespace": "ml", "Node": "node-0000"},
                 {"PodName": "x", "PodNamespace": "ml", "Node": "node-0000", "Pod": {}}):  # fmt: skip
        status, answer = served.post("bind", body)
        assert status == 400 and answer["Error"]
    assert_unchanged(before, snapshot(served))


def test_concurrent_binds_never_overcommit_a_node(served):
    """kube-scheduler binds in parallel goroutines: eight 2-GPU pods bound to one 8-GPU node at once, four fit."""
    keys = [pending(served.api, f"race-{k}") for k in range(8)]
    served.watcher.sync()
    barrier = threading.Barrier(len(keys))
    answers: list[dict[str, Any]] = []

    def bind(key: str) -> None:
        barrier.wait()
        answers.append(served.bind(key, "node-0007"))

    threads = [threading.Thread(target=bind, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(a["Error"] == "" for a in answers) == [False] * 4 + [True] * 4
    assert all("does not fit" in a["Error"] for a in answers if a["Error"])
    assert len(served.api.bindings) == 4
    n = node_index(served, "node-0007")
    assert served.cluster.state.free_gpus[n] == 0 and (served.cluster.state.gpu_left[n] == 0).all()


# ----- 2. filter reasons --------------------------------------------------------------------------------------
def test_filter_gpu_model_the_cluster_lacks(shared):
    pod = fixture_pod()
    pod["metadata"]["annotations"][GPU_MODEL_KEY] = "V100M16"
    status, answer = shared.post("filter", filter_args(pod))
    assert status == 200 and answer["NodeNames"] == [] and answer["FailedNodes"] == {}
    assert answer["FailedAndUnresolvableNodes"] == dict.fromkeys(
        NODE_NAMES, "GPU model A100 not in 'V100M16'"
    )


def test_filter_more_gpus_than_a_node_has(shared):
    pod = make_pod("big", gpus=9, namespace="ml")
    status, answer = shared.post("filter", filter_args(pod))
    assert status == 200 and answer["NodeNames"] == [] and answer["FailedNodes"] == {}
    assert answer["FailedAndUnresolvableNodes"] == dict.fromkeys(
        NODE_NAMES, "node has 8 GPUs, pod asks for 9"
    )


def test_filter_unknown_node_is_unresolvable(shared):
    status, answer = shared.post("filter", filter_args(fixture_pod(), ["node-0001", "gpu-elsewhere"]))
    assert status == 200 and answer["NodeNames"] == ["node-0001"]
    assert list(answer["FailedAndUnresolvableNodes"]) == ["gpu-elsewhere"]
    assert "unknown" in answer["FailedAndUnresolvableNodes"]["gpu-elsewhere"]


def _with_requests(**requests: Any) -> dict[str, Any]:
    pod = fixture_pod()
    pod["spec"]["containers"][0]["resources"] = {"requests": requests}
    return pod


def _with_annotations(**annotations: str) -> dict[str, Any]:
    pod = fixture_pod()
    pod["metadata"]["annotations"] = annotations
    return pod


MALFORMED_PODS = {
    "cpu words": (_with_requests(cpu="lots"), "cpu"),
    "fractional GPUs": (_with_requests(**{"nvidia.com/gpu": "1.5"}), "nvidia.com/gpu"),
    "negative memory": (_with_requests(memory="-1Gi"), "memory"),
    "cpu a list": (_with_requests(cpu=[1]), "cpu"),
    "milli over 1000": (_with_annotations(**{GPU_MILLI_ANNOTATION: "2000"}), GPU_MILLI_ANNOTATION),
    "share on two GPUs": (
        _with_annotations(**{GPU_MILLI_ANNOTATION: "500", GPU_COUNT_ANNOTATION: "2"}),
        GPU_MILLI_ANNOTATION,
    ),
    "unknown model": (_with_annotations(**{GPU_MODEL_KEY: "H900"}), GPU_MODEL_KEY),
    "no name": ({"metadata": {"namespace": "ml"}, "spec": {}}, "metadata.name"),
    "metadata a list": ({"metadata": ["train-7"]}, "metadata"),
    # once 500s (an OverflowError or int()'s 4,300-digit limit):
    "cpu an integer beyond floats": (_with_requests(cpu=10**400), "cpu"),
    "cpu beyond floats in milli": (_with_requests(cpu="1e307"), "cpu"),
    "memory summed beyond floats": (
        {
            "metadata": {"name": "m", "namespace": "ml"},
            "spec": {"containers": [{"resources": {"requests": {"memory": 1.5e308}}}] * 2},
        },
        "memory",
    ),
    "GPUs beyond floats": (_with_requests(**{"nvidia.com/gpu": 10**400}), "nvidia.com/gpu"),
    "milli of 5000 digits": (_with_annotations(**{GPU_MILLI_ANNOTATION: "1" * 5000}), GPU_MILLI_ANNOTATION),
}


@pytest.mark.parametrize("case", list(MALFORMED_PODS))
def test_malformed_pod_fails_every_node_with_the_field(shared, case):
    pod, field = MALFORMED_PODS[case]
    before = snapshot(shared)
    status, answer = shared.post("filter", filter_args(pod, NODE_NAMES[:4]))
    assert status == 200 and answer["Error"] == "" and answer["NodeNames"] == []
    failed = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert list(failed) == NODE_NAMES[:4]
    assert all(field in reason and reason.startswith("wattsched: ") for reason in failed.values()), failed
    status, answer = shared.post("prioritize", filter_args(pod, NODE_NAMES[:4]))
    assert status == 200 and answer == [{"Host": n, "Score": 0} for n in NODE_NAMES[:4]]
    assert_unchanged(before, snapshot(shared))


# ----- 3. 4xx, never 500 --------------------------------------------------------------------------------------
def raw_exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send bytes on a fresh socket; everything the server sends until it closes (or goes quiet)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except TimeoutError:
            pass
        return out


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


GOOD = json.dumps(filter_args(fixture_pod(), ["node-0000"])).encode()


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"{not json", 400, "not JSON"),
        (b"", 400, "not JSON"),
        (b"\xff\xfe", 400, "not JSON"),
        (b"[" * 100_000, 400, "not JSON"),  # too deep for the decoder
        (b"1" * 5000, 400, "not JSON"),  # an integer over int()'s 4,300-digit limit: once a 500
        (b"[1, 2]", 400, "JSON object"),
        (b"null", 400, "JSON object"),
        (b'{"Pod": {}, "Bogus": 1}', 400, "Bogus"),
        (b'{"Pod": {}, "NodeNames": "node-0000"}', 400, "NodeNames"),
        (b'{"Pod": {}, "NodeNames": ["node-0000", 3]}', 400, "NodeNames"),
        (b'{"Pod": {}, "Nodes": {"items": "node-0000"}}', 400, "Nodes"),
        (b'{"Pod": {}, "Nodes": [{"metadata": {"name": "node-0000"}}]}', 400, "Nodes"),
        (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', 400, "metadata.name"),
        (
            b'{"Pod": {}, "Nodes": {"items": [{"metadata": ["node-0000"]}]}}',
            400,
            "metadata.name",
        ),  # once a 500
    ],
)
def test_bad_bodies_are_400(shared, body, status, says):
    before = snapshot(shared)
    for verb in ("filter", "prioritize"):
        got, data, _ = shared.request("POST", f"{PREFIX}/{verb}", body)
        assert got == status and says in json.loads(data)["Error"]
    assert_unchanged(before, snapshot(shared))


def test_content_types(shared):
    got, data, _ = shared.request("POST", f"{PREFIX}/filter", GOOD, content_type="text/plain")
    assert got == 415 and "application/json" in json.loads(data)["Error"]
    got, _, _ = shared.request("POST", f"{PREFIX}/filter", GOOD, content_type=None)
    assert got == 415
    # curl -d's default type is taken (the body must still be JSON)
    got, data, _ = shared.request(
        "POST", f"{PREFIX}/filter", GOOD, content_type="application/x-www-form-urlencoded"
    )
    assert got == 200 and json.loads(data)["NodeNames"] == ["node-0000"]
    got, _, _ = shared.request(
        "POST", f"{PREFIX}/filter", b"a=1", content_type="application/x-www-form-urlencoded"
    )
    assert got == 400
    got, _, _ = shared.request(
        "POST", f"{PREFIX}/filter", GOOD, content_type="Application/JSON; charset=utf-8"
    )
    assert got == 200


def test_lengths(shared):
    head = f"POST {PREFIX}/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    # no Content-Length: 411, and the connection is closed (where the body ends is unknown)
    answer = raw_exchange(shared.server.port, head.encode() + b"\r\n" + GOOD)
    assert status_of(answer) == 411 and b"Connection: close" in answer and answer.count(b"HTTP/1.1") == 1
    answer = raw_exchange(shared.server.port, head.encode() + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert status_of(answer) == 411
    # a length that is no ASCII number ('²' passes str.isdigit()): once a 500
    answer = raw_exchange(shared.server.port, head.encode() + b"Content-Length: \xb2\r\n\r\n")
    assert status_of(answer) == 411
    # a length of 5,000 digits is over any limit (int() refuses it: once a 500)
    answer = raw_exchange(shared.server.port, head.encode() + b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n")
    assert status_of(answer) == 413


def test_body_over_the_limit_is_413_without_reading_it():
    s = serve(max_body_bytes=len(GOOD))
    try:
        head = f"POST {PREFIX}/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        # the body is never sent: a server that waited for it would time out here
        answer = raw_exchange(
            s.server.port, head.encode() + f"Content-Length: {len(GOOD) + 1}\r\n\r\n".encode(), timeout=5
        )
        assert (
            status_of(answer) == 413 and b"Connection: close" in answer and str(len(GOOD)).encode() in answer
        )
        got, data, _ = s.request("POST", f"{PREFIX}/filter", GOOD)  # a body of just the limit is read
        assert got == 200 and json.loads(data)["NodeNames"] == ["node-0000"]
    finally:
        stop(s)


def test_paths_and_methods(shared):
    for path in (f"{PREFIX}/preempt", "/filter", f"{PREFIX}/filter/x", "/"):
        got, data, _ = shared.request("POST", path, GOOD)
        assert got == 404 and "no such path" in json.loads(data)["Error"]
        got, _, _ = shared.request("GET", path, None, content_type=None)
        assert got == 404
    for verb in ("filter", "prioritize", "bind"):
        got, data, _ = shared.request("GET", f"{PREFIX}/{verb}", None, content_type=None)
        assert got == 405 and "POST" in json.loads(data)["Error"]
        for method in ("PUT", "DELETE", "PATCH"):
            got, _, _ = shared.request(method, f"{PREFIX}/{verb}", GOOD)
            assert got == 405
    got, data, _ = shared.request("GET", f"{PREFIX}/healthz", None, content_type=None)
    assert (got, data) == (200, b"ok\n")
    got, _, _ = shared.request("GET", f"{PREFIX}/healthz?verbose=1", None, content_type=None)
    assert got == 200
    got, _, _ = shared.request("POST", f"{PREFIX}/filter?x=1", GOOD)
    assert got == 200


def test_field_names_in_any_case(shared):
    pod = fixture_pod()
    for body in ({"pod": pod, "nodenames": ["node-0000", "node-0001"]},
                 {"POD": pod, "NODES": None, "NodeNAMES": ["node-0000", "node-0001"]}):  # fmt: skip
        status, answer = shared.post("filter", body)
        assert status == 200 and set(answer) == FILTER_KEYS  # answered with the exact names
        assert answer["NodeNames"] == ["node-0000", "node-0001"]
        status, answer = shared.post("prioritize", body)
        assert status == 200 and [h["Host"] for h in answer] == ["node-0000", "node-0001"]
    status, answer = shared.post("bind", {"podname": "nobody", "PODNAMESPACE": "ml", "node": "node-0000"})
    assert status == 200 and "not pending" in answer["Error"]


def test_errors_before_the_body_is_read_close_the_connection(shared):
    """A body left unread would be read as the next request on a kept-alive connection (it was: the second
    request below got a 400 'Bad request syntax' page)."""
    head = "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\nContent-Length: {n}\r\n\r\n"
    for path, ctype, status in (
        (f"{PREFIX}/filter", "text/plain", 415),
        (f"{PREFIX}/nope", "application/json", 404),
    ):
        first = head.format(path=path, ctype=ctype, n=len(GOOD)).encode() + GOOD
        second = head.format(path=f"{PREFIX}/filter", ctype="application/json", n=len(GOOD)).encode() + GOOD
        answer = raw_exchange(shared.server.port, first + second)
        assert status_of(answer) == status and b"Connection: close" in answer
        assert b"Bad request syntax" not in answer and answer.count(b"HTTP/1.1 ") == 1
    # answers to bodies read keep the connection open (kube-scheduler reuses it)
    conn = shared.connect()
    try:
        for body in (GOOD, b"{not json", GOOD):
            shared.request("POST", f"{PREFIX}/filter", body, conn=conn)
            assert conn.sock is not None
    finally:
        conn.close()


def test_not_ready_before_the_first_list():
    s = serve(api=default_api(), sync=False)
    try:
        got, data, _ = s.request("GET", f"{PREFIX}/healthz", None, content_type=None)
        assert (got, data) == (503, b"not ready\n")
        got, data, _ = s.request("POST", f"{PREFIX}/filter", GOOD)
        assert got == 503 and "not listed" in json.loads(data)["Error"]
    finally:
        stop(s)


# ----- 4. fuzzing ---------------------------------------------------------------------------------------------
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)


def cased(name: str) -> st.SearchStrategy[str]:
    return st.sampled_from([name, name.lower(), name.upper(), name.swapcase()])


quantities = (
    st.from_regex(
        r"[+-]?[0-9]{0,4}(\.[0-9]{0,3})?([eE][+-]?[0-9]{1,3})?(Ki|Mi|Gi|Ti|Ei|m|k|M|G|E)?", fullmatch=True
    )
    | st.sampled_from(["1", "500m", "2", "8", "9", "64Gi", "1e400", "1.5", "-1", "0"])
    | st.sampled_from(["1e307", 1e308, 10**400])  # beyond floats (in milli-CPU, or summed): once 500s
    | scalars
)
resource_lists = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods"]) | st.text(max_size=6), quantities, max_size=4
)
annotation_values = (
    st.sampled_from(
        ["250", "1000", "0", "1", "2", "65", "A100", "V100M16", "A100|T4", "NVIDIA-A100-SXM4-80GB", ""]
    )
    | st.just("1" * 5000)  # over int()'s digit limit: once a 500
    | st.text(max_size=8)
    | json_values
)
annotations = st.dictionaries(
    st.sampled_from([GPU_MILLI_ANNOTATION, GPU_COUNT_ANNOTATION, GPU_MODEL_KEY, "alibabacloud.com/gpu-index"])
    | st.text(max_size=8),
    annotation_values,
    max_size=3,
)


def optional(**fields: st.SearchStrategy) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


containers = optional(
    name=st.text(max_size=4),
    resources=optional(requests=resource_lists | json_values, limits=resource_lists | json_values)
    | json_values,
)
pods = (
    optional(
        metadata=optional(
            name=st.sampled_from(["p", "train-7"]) | json_values,
            namespace=st.sampled_from(["ml", ""]) | json_values,
            uid=json_values,
            annotations=annotations | json_values,
        )
        | json_values,
        spec=optional(
            containers=st.lists(containers | json_values, max_size=3) | json_values,
            nodeName=json_values,
            schedulerName=json_values,
        )
        | json_values,
        status=optional(phase=st.sampled_from(["Pending", "Running"]) | json_values) | json_values,
    )
    | st.builds(
        make_pod,
        name=st.sampled_from(["p", "q"]),
        gpus=st.integers(0, 10),
        gpu_milli=st.integers(1, 1000),
        cpu_milli=st.integers(0, 200_000),
        memory_mib=st.integers(0, 2_000_000),
        gpu_model=st.sampled_from(["", "A100", "V100M16", "A100|V100M32", "h900"]),
    )
    | json_values
)
node_names = st.lists(st.sampled_from(NODE_NAMES) | st.text(max_size=10), max_size=6)
node_lists = (
    optional(
        metadata=json_values,
        items=st.lists(
            optional(metadata=optional(name=st.sampled_from(NODE_NAMES) | json_values) | json_values)
            | json_values,
            max_size=4,
        )
        | json_values,
    )
    | json_values
)


@st.composite
def extender_args(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for name, values in (("Pod", pods), ("Nodes", node_lists), ("NodeNames", node_names | json_values)):
        if draw(st.booleans()):
            body[draw(cased(name))] = draw(values)
    if draw(st.integers(0, 7)) == 0:
        body[draw(st.text(max_size=6))] = draw(json_values)
    return body


@st.composite
def binding_args(draw: st.DrawFn) -> dict[str, Any]:
    fields = {
        "PodName": st.sampled_from(["fuzz-0", "fuzz-1", "train-7"]) | json_values,
        "PodNamespace": st.sampled_from(["ml", "default"]) | json_values,
        "PodUID": json_values,
        "Node": st.sampled_from([*NODE_NAMES[:3], "node-9999"]) | json_values,
    }
    body = {draw(cased(name)): draw(values) for name, values in fields.items() if draw(st.integers(0, 5)) > 0}
    if draw(st.integers(0, 7)) == 0:
        body[draw(st.text(max_size=6))] = draw(json_values)
    return body


@pytest.fixture(scope="module")
def fuzzed():
    """A server of its own: its fake holds two pending pods the fuzzer may bind (once each; again: 409)."""
    api = default_api()
    for k in range(2):
        pending(api, f"fuzz-{k}", gpus=1)
    s = serve(api)
    yield s
    stop(s)


def check_answer(verb: str, body: Any, status: int, answer: Any) -> None:
    """The shape of a 200 answer, for whatever it was asked."""
    assert status in (200, 400), (status, answer)
    if status == 400:
        assert isinstance(answer, dict) and answer["Error"]
        return
    if verb == "filter":
        assert set(answer) == FILTER_KEYS and answer["Error"] == ""
        assert (answer["Nodes"] is None) != (answer["NodeNames"] is None)
        failed = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
        assert all(isinstance(r, str) and r for r in failed.values())
        if answer["NodeNames"] is not None:
            passed = answer["NodeNames"]
        else:
            passed = [n["metadata"]["name"] for n in answer["Nodes"]["items"]]
        assert not set(passed) & set(failed)
    elif verb == "prioritize":
        assert isinstance(answer, list)
        assert all(type(h["Score"]) is int and 0 <= h["Score"] <= 10 for h in answer)
        assert sum(h["Score"] == 10 for h in answer) <= 1
        names = {k.lower(): v for k, v in body.items()}.get("nodenames")
        if isinstance(names, list):
            # the names asked, in order (a name asked twice, which kube-scheduler never does, may come once)
            assert list(dict.fromkeys(h["Host"] for h in answer)) == list(dict.fromkeys(names))
    else:
        assert set(answer) == {"Error"} and isinstance(answer["Error"], str)


def exchange_all(s: Served, raw: bytes, body: Any) -> None:
    """POST the bytes to every verb on one kept-alive connection: never a 500, never a dropped connection; the
    mirror changes only by a bind that says it bound."""
    conn = s.connect()
    try:
        for verb in ("filter", "prioritize", "bind"):
            before = snapshot(s)
            status, data, _ = s.request("POST", f"{PREFIX}/{verb}", raw, conn=conn)
            assert conn.sock is not None, f"{verb}: the server closed the connection"
            answer = json.loads(data)
            assert status != 500, answer
            if body is not None:
                check_answer(verb, body, status, answer)
            if verb == "bind" and status == 200 and answer["Error"] == "":
                assert len(s.api.bindings) == len(before[3]) + 1
            else:
                assert_unchanged(before, snapshot(s))
        status, data, _ = s.request("GET", f"{PREFIX}/healthz", None, content_type=None, conn=conn)
        assert (status, data) == (200, b"ok\n")
    finally:
        conn.close()


@FUZZ
@given(body=extender_args() | binding_args() | json_values)
def test_fuzz_json_bodies(fuzzed, body):
    exchange_all(fuzzed, json.dumps(body).encode(), body)


@FUZZ
@given(raw=st.binary(max_size=200) | st.builds(lambda b: b"{" + b, st.binary(max_size=50)))
def test_fuzz_bytes(fuzzed, raw):
    exchange_all(fuzzed, raw, None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(0, 60), share=st.booleans())
def test_prioritize_top_is_place_on_random_states(fuzzed, seed, count, share):
    """Pods start and end through the API (the watch folds them into the mirror); on each state the 10 goes to the
    node the policy places on, and once they are gone the mirror is as before."""
    api, watcher = fuzzed.api, fuzzed.watcher
    watcher.sync()  # binds the JSON fuzzer made are confirmed first
    start = snapshot(fuzzed)
    busy = busy_pods(np.random.default_rng(seed), count, fuzzed.cluster.state.gpu_left)
    for pod in busy:
        api.add_pod(pod)
    watcher.sync()
    try:
        assert len(fuzzed.cluster.held) == len(start[4]) + len(busy)  # every one counted, on its GPUs
        for pod in busy:
            uid, gpus = pod["metadata"]["uid"], pod["metadata"]["annotations"][GPU_INDEX_ANNOTATION]
            assert "-".join(map(str, fuzzed.cluster.held[uid][1][0][1])) == gpus
        pod = make_pod("probe", gpus=1, gpu_milli=300 if share else 1000, cpu_milli=8000, memory_mib=65536)
        status, answer = fuzzed.post("prioritize", filter_args(pod))
        assert status == 200
        placement = fuzzed.cluster.place(pod_request(pod))
        tens = [h["Host"] for h in answer if h["Score"] == 10]
        assert tens == ([str(fuzzed.cluster.spec.node_names[placement[0][0]])] if placement else [])
    finally:
        for pod in busy:
            api.delete_pod(f"busy/{pod['metadata']['name']}")
        watcher.sync()
    end = snapshot(fuzzed)
    assert_unchanged(start, end)


# ----- 5. restart ---------------------------------------------------------------------------------------------
def test_restart_rebuilds_the_same_free_capacity(served):
    api = served.api
    plan = [("a", 2, 1000, "node-0001"), ("b", 1, 1000, "node-0001"), ("c", 4, 1000, "node-0002"),
            ("d", 1, 500, "node-0002"), ("e", 1, 250, "node-0002"), ("f", 8, 1000, "node-0003"),
            ("g", 3, 1000, "node-0001"), ("h", 1, 700, "node-0004")]  # fmt: skip
    # added in another order than they are bound: a restart counts them in list order
    keys = {name: pending(api, name, gpus=g, gpu_milli=m) for name, g, m, _ in reversed(plan)}
    served.watcher.sync()
    for name, _, _, node in plan:
        assert served.bind(keys[name], node) == {"Error": ""}
    old = served.cluster.state
    # a restart straight after the binds (the old watcher never saw them confirmed), and after the watch did
    for confirmed in (False, True):
        if confirmed:
            served.watcher.sync()
        restarted = serve(api)
        try:
            new = restarted.cluster.state
            # The count of free capacity per node is the same; which GPU indices are taken may not be: the mirror
            # keeps the policy's choice of GPUs at each bind, and a restart makes that choice again for each pod
            # in the order the API lists them (a Binding names no GPUs; only a gpu-index annotation would).
            np.testing.assert_array_equal(np.sort(new.gpu_left, axis=1), np.sort(old.gpu_left, axis=1))
            np.testing.assert_array_equal(new.free_gpus, old.free_gpus)
            np.testing.assert_array_equal(new.cpu_left, old.cpu_left)
            np.testing.assert_array_equal(new.mem_left, old.mem_left)
            assert set(restarted.cluster.held) == set(served.cluster.held)
            assert not restarted.cluster.in_flight  # listed bound: nothing is waiting for a confirmation
            # and it answers as the old one does
            args = filter_args(make_pod("next", gpus=6, namespace="ml"))
            assert restarted.post("filter", args) == served.post("filter", args)
            args = filter_args(make_pod("share", gpus=1, gpu_milli=400, namespace="ml"))
            assert restarted.post("filter", args) == served.post("filter", args)
        finally:
            stop(restarted)


# ----- 6. TLS -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl CLI to make a certificate with")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_tls(certificate):
    cert, key = certificate
    s = serve(tls_cert=str(cert), tls_key=str(key))
    try:
        assert s.server.tls
        context = ssl.create_default_context(cafile=str(cert))
        conn = http.client.HTTPSConnection("127.0.0.1", s.server.port, context=context, timeout=10)
        try:
            args = fixture_json("prioritize_args.json")
            conn.request(
                "POST", f"{PREFIX}/prioritize", json.dumps(args), {"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            answer = json.loads(resp.read())
            assert resp.status == 200 and [h["Host"] for h in answer] == args["NodeNames"]
            assert [h["Score"] for h in answer].count(10) == 1
        finally:
            conn.close()
        # a client that does not trust the certificate gets no answer
        with pytest.raises(ssl.SSLCertVerificationError):
            untrusting = http.client.HTTPSConnection("127.0.0.1", s.server.port, timeout=10,
                                                     context=ssl.create_default_context())  # fmt: skip
            untrusting.request("GET", f"{PREFIX}/healthz")
    finally:
        stop(s)


def test_tls_idle_client_does_not_stall_the_server(certificate):
    """A connection that never starts its TLS handshake (a TCP probe, a plain-HTTP client that waits) must not
    hold up everyone else."""
    cert, key = certificate
    s = serve(tls_cert=str(cert), tls_key=str(key))
    idle = socket.create_connection(("127.0.0.1", s.server.port))
    try:
        context = ssl.create_default_context(cafile=str(cert))
        conn = http.client.HTTPSConnection("127.0.0.1", s.server.port, context=context, timeout=5)
        conn.request("GET", f"{PREFIX}/healthz")
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, b"ok\n")
        conn.close()
    finally:
        idle.close()
        stop(s)


# ----- 7. mutual TLS: the bind verb only for a client with a certificate of the CA ------------------------------
@pytest.fixture(scope="module")
def mtls(tmp_path_factory):
    """A CA with a server and a client certificate (tests/k8s_fixtures.Pki, openssl CLI), and a second CA's
    client certificate."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl CLI to make certificates with")
    from tests.k8s_fixtures import Pki

    where = tmp_path_factory.mktemp("mtls")
    pki, other = Pki(where / "ca"), Pki(where / "other", name="other-ca")
    return pki, pki.server("extender"), pki.client("kube-scheduler"), other.client("intruder")


def mtls_connection(s: Served, ca: Path, client=None) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return http.client.HTTPSConnection("127.0.0.1", s.server.port, context=context, timeout=10)


def mtls_post(conn: http.client.HTTPSConnection, verb: str, body: Any) -> tuple[int, Any]:
    conn.request("POST", f"{PREFIX}/{verb}", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def test_mtls_serves_a_client_with_a_certificate_of_the_ca(mtls):
    pki, server, client, _ = mtls
    api = default_api()
    key = pending(api, "mtls-pod")
    s = serve(api, tls_cert=str(server.cert), tls_key=str(server.key), tls_client_ca=str(pki.ca))
    try:
        assert s.server.tls and s.server.mtls
        s.watcher.sync()
        conn = mtls_connection(s, pki.ca, client)
        try:
            status, answer = mtls_post(conn, "prioritize", fixture_json("prioritize_args.json"))
            assert status == 200 and [h["Score"] for h in answer].count(10) == 1
            namespace, name = key.split("/")
            bind_args = {"PodName": name, "PodNamespace": namespace, "Node": "node-0005"}
            assert mtls_post(conn, "bind", bind_args) == (200, {"Error": ""})
        finally:
            conn.close()
        assert api.bindings == [(key, "node-0005")]
    finally:
        stop(s)


@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate"])
def test_mtls_refuses_a_client_without_a_certificate_of_the_ca(mtls, who):
    """The handshake fails (TLS 1.3: the client learns it at its first read), no verb runs, nothing is bound."""
    pki, server, _, intruder = mtls
    api = default_api()
    key = pending(api, "mtls-intruded")
    s = serve(api, tls_cert=str(server.cert), tls_key=str(server.key), tls_client_ca=str(pki.ca))
    try:
        s.watcher.sync()
        conn = mtls_connection(s, pki.ca, None if who == "no certificate" else intruder)
        namespace, name = key.split("/")
        with pytest.raises((ssl.SSLError, ConnectionError)):
            try:
                mtls_post(conn, "bind", {"PodName": name, "PodNamespace": namespace, "Node": "node-0005"})
            finally:
                conn.close()
        assert api.bindings == [] and not s.cluster.held
        # plain HTTP gets nothing either
        plain = http.client.HTTPConnection("127.0.0.1", s.server.port, timeout=10)
        with pytest.raises((ConnectionError, http.client.BadStatusLine)):
            plain.request("POST", f"{PREFIX}/bind", b"{}", {"Content-Type": "application/json"})
            plain.getresponse().read()
        plain.close()
        assert api.bindings == []
    finally:
        stop(s)


def test_mtls_needs_the_servers_certificate(mtls):
    pki = mtls[0]
    with pytest.raises(ValueError, match="needs the server's own certificate"):
        ExtenderServer(Extender(ClusterWatcher(default_api(), PLACEMENT_POLICIES.create("fgd"))), "127.0.0.1", 0,
                       PREFIX, tls_client_ca=str(pki.ca))  # fmt: skip
