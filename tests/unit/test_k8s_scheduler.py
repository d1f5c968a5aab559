"""The custom Kubernetes scheduler and its informers on the in-memory CoreV1Api (no control plane can be installed
here, docs/live-kubernetes.md §5): the simulator's placements for the same pod sequence, 409 and 410 handling,
waiting pods, cordoned nodes, unreadable pods, restarts; and the pod and node mapping."""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import make_cluster, make_jobs
from wattsched.backends.k8s.fake import FakeCoreV1Api, make_node, make_pod
from wattsched.backends.k8s.objects import PodError, catalog_model, node_info, parse_quantity, pod_request
from wattsched.backends.k8s.replay import nodes_of, pods_of
from wattsched.backends.k8s.scheduler import CustomScheduler
from wattsched.backends.k8s.watcher import ClusterWatcher
from wattsched.engine.packing import run_packing
from wattsched.policies.base import PLACEMENT_POLICIES


def _scheduler(
    api: FakeCoreV1Api, policy: str = "fgd", workload=None, events: bool = False
) -> CustomScheduler:
    return CustomScheduler(
        api, PLACEMENT_POLICIES.create(policy), workload=workload, seed=42, post_events=events
    )


def _workload(n: int = 300, seed: int = 3):
    """Pods shaped like the Alibaba trace's: shares of one GPU, whole GPUs (1, 2, 4, 8), CPU-only, two models."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        kind = rng.choice(4, p=[0.35, 0.4, 0.15, 0.1])
        gpus, milli = [(1, int(rng.choice([100, 250, 500, 700]))), (int(rng.choice([1, 2, 4])), 1000),
                       (8, 1000), (0, 0)][kind]  # fmt: skip
        cpu, mem = int(rng.choice([2000, 4000, 8000])), int(rng.choice([4096, 16384]))
        spec = str(rng.choice(["", "V100M16", "A10"]))
        rows.append({"id": f"p{i}", "gpus": gpus, "milli": milli, "cpu": cpu, "mem": mem, "spec": spec})
    return make_jobs(rows)


@pytest.fixture
def small_cluster():
    shapes = (
        [(8, "V100M16", 96_000, 393_216)] * 6 + [(4, "A10", 64_000, 262_144)] * 4 + [(0, "", 32_000, 65_536)]
    )
    return make_cluster(shapes, name="k8s-test")


@pytest.mark.parametrize("policy", ["fgd", "best-fit", "pwr_200_fgd_800"])
def test_the_custom_scheduler_places_a_pod_sequence_exactly_as_packing_mode(small_cluster, policy):
    jobs = _workload()
    seeds = np.random.SeedSequence(42).spawn(3)
    sim = run_packing(jobs, small_cluster, PLACEMENT_POLICIES.create(policy), np.random.default_rng(seeds[0]),
                      np.random.default_rng(seeds[1]), inflate=1.2)  # fmt: skip
    api = FakeCoreV1Api(nodes_of(small_cluster))
    sched = _scheduler(api, policy, workload=jobs)
    sched.sync()
    for pod in pods_of(jobs, sim.order.tolist()):  # inflation repeats pods: each submission is its own pod
        api.add_pod(pod)
    sched.sync()
    assert sched.stats.bound == int(sim.placed.sum()) > 0
    names = small_cluster.node_names
    for k, placement in enumerate(sim.placements):
        got = sched.placements.get(f"uid-default-pod-{k:06d}")
        if placement is None:
            assert got is None, k
            continue
        assert got is not None, k
        node, live = got
        assert node == str(names[placement[0][0]]) and live[0][1] == placement[0][1], k
    assert [key for key, _ in api.bindings] == sorted(key for key, _ in api.bindings)  # in arrival order
    # each pod that was not placed is reported once; those that could fit an emptier cluster wait for capacity
    assert sched.stats.unschedulable == int((~sim.placed).sum())
    never = [u for u in sched.reported if u not in sched.waiting]
    assert all("even empty" in sched.reported[u] for u in never) and len(sched.waiting) > 0


def test_a_conflict_is_dropped_and_the_pod_counted_where_the_watch_says(small_cluster):
    api = FakeCoreV1Api(nodes_of(small_cluster))
    sched = _scheduler(api, "best-fit", workload=_workload(20))
    sched.sync()
    api.add_pod(make_pod("a", gpus=8, gpu_model="V100M16"))
    api.conflicts.add("default/a")  # another binder wins the race
    sched.sync()
    assert sched.stats.conflicts == 1 and sched.stats.bound == 0 and not sched.cluster.held
    # the other binder's result arrives through the watch: the mirror counts the pod on that node
    pod = api.pods["default/a"]
    pod["spec"]["nodeName"] = "n3"
    api._record("Pod", "MODIFIED", pod)
    sched.sync()
    node = sched.cluster.index["n3"]
    assert sched.cluster.state.free_gpus[node] == 0 and "uid-default-a" in sched.cluster.held


@pytest.mark.parametrize("as_status", [False, True])
def test_an_expired_watch_lists_again_and_loses_nothing(small_cluster, as_status):
    api = FakeCoreV1Api(nodes_of(small_cluster))
    sched = _scheduler(api, "best-fit", workload=_workload(20))
    sched.sync()
    api.add_pod(make_pod("before", gpus=2))
    sched.sync()
    api.compact()  # the server forgets its history: the next watch from an old version is 410 Gone
    api.gone_as_status = as_status
    api.add_pod(make_pod("after", gpus=4))
    api.compact()
    lists_before = sched.pod_informer.relists
    sched.sync()
    assert sched.pod_informer.relists == lists_before + 1
    assert {k for k, _ in api.bindings} == {"default/before", "default/after"}
    assert len(sched.cluster.held) == 2  # "before" counted again from the list, "after" placed once


def test_a_pod_that_fits_nowhere_waits_and_is_placed_when_capacity_is_released(small_cluster):
    api = FakeCoreV1Api(nodes_of(small_cluster))
    sched = _scheduler(api, "best-fit", workload=_workload(20), events=True)
    sched.sync()
    for i in range(6):
        api.add_pod(make_pod(f"big{i}", gpus=8, gpu_model="V100M16"))
    api.add_pod(make_pod("late", gpus=8, gpu_model="V100M16"))
    sched.sync()
    sched.sync()  # nothing new: reported once, not again
    assert "default/late" not in dict(api.bindings) and sched.stats.unschedulable == 1
    api.finish_pod("default/big2")
    sched.sync()
    assert dict(api.bindings)["default/late"] == dict(api.bindings)["default/big2"]
    sched.events.flush()
    reasons = [(e.involved_object.name, e.reason) for e in api.events]
    assert reasons.count(("late", "FailedScheduling")) == 1 and ("late", "Scheduled") in reasons
    failed = next(e for e in api.events if e.reason == "FailedScheduling")
    assert failed.type == "Warning" and "tried again when capacity is released" in failed.message


def test_cordoned_nodes_take_no_pods_until_uncordoned():
    api = FakeCoreV1Api([make_node("g1", 8, "A100", unschedulable=True), make_node("g2", 8, "A100")])
    sched = _scheduler(api, "best-fit")
    sched.sync()
    api.add_pod(make_pod("a", gpus=8))
    api.add_pod(make_pod("b", gpus=8))
    sched.sync()
    assert dict(api.bindings) == {"default/a": "g2"}
    api.add_node(make_node("g1", 8, "A100"))  # uncordoned: same shape, schedulable again
    sched.sync()
    assert dict(api.bindings)["default/b"] == "g1"


def test_unreadable_pods_are_reported_never_raised():
    api = FakeCoreV1Api([make_node("g1", 8, "A100")])
    sched = _scheduler(api, "best-fit", events=True)
    sched.sync()
    bad = make_pod("bad", gpus=1)
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    api.add_pod(bad)
    api.add_pod(make_pod("odd-model", gpus=1, gpu_model="TPUv5"))
    api.add_pod(make_pod("fine", gpus=1))
    sched.sync()
    sched.events.flush()
    assert dict(api.bindings) == {"default/fine": "g1"}
    messages = {e.involved_object.name: e.message for e in api.events if e.reason == "FailedScheduling"}
    assert "cpu" in messages["bad"] and "'lots' is not a quantity" in messages["bad"]
    assert "TPUv5" in messages["odd-model"]


def test_a_restarted_scheduler_rebuilds_its_state_from_the_api_server(small_cluster):
    jobs = _workload(60)
    api = FakeCoreV1Api(nodes_of(small_cluster))
    first = _scheduler(api, "fgd", workload=jobs)
    first.sync()
    for pod in pods_of(jobs, range(40)):
        api.add_pod(pod)
    first.sync()
    second = _scheduler(api, "fgd", workload=jobs)  # a new process: nothing but the API server
    second.sync()
    a, b = first.cluster.state, second.cluster.state
    assert np.array_equal(a.free_gpus, b.free_gpus) and np.array_equal(a.cpu_left, b.cpu_left)
    assert np.array_equal(np.sort(a.gpu_left, axis=1), np.sort(b.gpu_left, axis=1))
    for pod in pods_of(jobs, range(40, 60)):  # renamed: pods_of numbers from 0
        pod["metadata"]["name"] += "-new"
        pod["metadata"]["uid"] += "-new"
        api.add_pod(pod)
    second.sync()
    assert second.stats.bound + first.stats.bound == len(api.bindings)
    assert len({k for k, _ in api.bindings}) == len(api.bindings)  # nothing bound twice


def test_a_new_node_rebuilds_the_mirror_with_every_pod_counted():
    api = FakeCoreV1Api([make_node("g1", 4, "A100")])
    watcher = ClusterWatcher(api, PLACEMENT_POLICIES.create("best-fit"))
    watcher.sync()
    api.add_pod(make_pod("on-g1", gpus=3, node="g1"))
    watcher.sync()
    api.add_node(make_node("g2", 8, "A100"))
    watcher.sync()
    c = watcher.cluster
    assert c.spec.num_nodes == 2 and watcher.rebuilds == 2
    assert c.state.free_gpus[c.index["g1"]] == 1 and c.state.free_gpus[c.index["g2"]] == 8


class _IdleWatch:
    """A watch response over a socket that never sends anything, like a real API server's watch with no events
    (it holds the watch open until ``timeoutSeconds``, 300 s)."""

    def __init__(self):
        self.sock, self._peer = socket.socketpair()
        self.connection = SimpleNamespace(sock=self.sock)

    def stream(self, amt=None, decode_content=False):
        while chunk := self.sock.recv(4096):
            yield chunk

    def release_conn(self):
        pass


class _IdleApi:
    """Lists of nothing, and watches that stay open and idle (what the real API server revealed)."""

    def __init__(self):
        self.watches: list[_IdleWatch] = []

    def _call(self, watch=False, **_):
        if not watch:
            return SimpleNamespace(data=b'{"metadata": {"resourceVersion": "7"}, "items": []}')
        self.watches.append(_IdleWatch())
        return self.watches[-1]

    list_node = list_pod_for_all_namespaces = _call


def test_stop_ends_idle_watches_at_once():
    """A real API server keeps an idle watch open for minutes; stopping must not wait for it to end (it did:
    ``serve k8s-scheduler`` took 10 s to stop, and a stopped scheduler's threads went on watching, and placing)."""
    api = _IdleApi()
    scheduler = CustomScheduler(api, PLACEMENT_POLICIES.create("best-fit"), post_events=False)
    stop = threading.Event()
    runner = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    runner.start()
    deadline = time.monotonic() + 5
    while len(api.watches) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(api.watches) == 2  # nodes and pods, both blocked reading
    started = time.monotonic()
    stop.set()
    runner.join(5)
    assert not runner.is_alive() and time.monotonic() - started < 1.0
    assert not any(t.name in ("k8s-nodes", "k8s-pods") for t in threading.enumerate())


def test_a_closed_informer_watches_again_when_run_again():
    api = _IdleApi()
    watcher = ClusterWatcher(api, PLACEMENT_POLICIES.create("best-fit"))
    informer = watcher.pod_informer
    informer.list()
    for _ in range(2):  # run, stop (close), run again: the second run watches too
        stop = threading.Event()
        before = len(api.watches)
        thread = threading.Thread(target=informer.run, args=(stop,), daemon=True)
        thread.start()
        deadline = time.monotonic() + 5
        while len(api.watches) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(api.watches) == before + 1 and thread.is_alive()
        stop.set()
        informer.close()
        thread.join(2)
        assert not thread.is_alive()


# ----- the mapping --------------------------------------------------------------------------------------------------
def test_quantities():
    assert parse_quantity("500m", "cpu") == 0.5
    assert parse_quantity("2", "cpu") == 2.0
    assert parse_quantity("1.5Gi", "memory") == 1.5 * 2**30
    assert parse_quantity("1e3", "x") == 1000.0
    assert parse_quantity(4, "x") == 4.0
    for bad in ("lots", "-1", "1Qi", "", True, "nan"):
        with pytest.raises(PodError):
            parse_quantity(bad, "cpu")


def test_pods_map_to_requests_with_readable_errors():
    pod = pod_request(make_pod("p", gpus=2, cpu_milli=1500, memory_mib=3072, gpu_model="V100M16|v100m32"))
    assert (pod.num_gpu, pod.gpu_milli, pod.cpu_milli, pod.memory_mib, pod.gpu_spec) == (
        2, 1000, 1500, 3072, "V100M16|V100M32",
    )  # fmt: skip
    share = pod_request(make_pod("s", gpus=1, gpu_milli=250))
    assert (share.num_gpu, share.gpu_milli) == (1, 250)
    cpu_only = pod_request(make_pod("c", gpus=0))
    assert (cpu_only.num_gpu, cpu_only.gpu_milli) == (0, 0)
    limits_only = make_pod("l")
    limits_only["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}
    assert pod_request(limits_only).cpu_milli == 2000 and pod_request(limits_only).num_gpu == 1
    bad_share = make_pod("b", gpus=2, gpu_milli=500)
    with pytest.raises(PodError, match="must use one GPU"):
        pod_request(bad_share)
    for key, value in [("alibabacloud.com/gpu-milli", "2000"), ("alibabacloud.com/gpu-milli", "half")]:
        pod = make_pod("m", gpus=1, gpu_milli=500)
        pod["metadata"]["annotations"][key] = value
        with pytest.raises(PodError, match="gpu-milli"):
            pod_request(pod)
    with pytest.raises(PodError, match=r"metadata\.name"):
        pod_request({"metadata": {}})
    with pytest.raises(PodError, match="not an object"):
        pod_request(["not", "a", "pod"])


def test_nodes_map_with_gpu_models_from_labels():
    node = node_info(make_node("n", 8, "V100M32", cpu="95500m", memory="512Gi"))
    assert (node.gpus, node.gpu_model, node.cpu_milli, node.memory_mib, node.schedulable) == (
        8, "V100M32", 95_500, 524_288, True,
    )  # fmt: skip
    gfd = make_node("g", 4, labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    del gfd["metadata"]["labels"]["alibabacloud.com/gpu-card-model"]
    assert node_info(gfd).gpu_model == "A100"
    assert catalog_model("Tesla-V100-SXM2-16GB") == "V100" and catalog_model("TPUv5") is None
    not_ready = make_node("r", 4)
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert node_info(not_ready).schedulable is False


@pytest.mark.realdata
def test_the_custom_scheduler_reproduces_fgd_on_the_alibaba_default_trace():
    """The 8,152 pods of the Alibaba v2023 default trace as pod events, in packing mode's order (seed 42, no
    inflation): every pod the simulator places is bound to the same node and GPUs, the others wait."""
    from tests.conftest import require_real_file
    from wattsched.engine.packing import arrival_order
    from wattsched.experiments.fgd_pwr import trace_inputs

    require_real_file("alibaba-gpu-v2023", "csv/openb_pod_list_default.csv")
    inputs = trace_inputs("default")
    jobs, spec = inputs.jobs, inputs.cluster
    seeds = np.random.SeedSequence(42).spawn(3)
    order = arrival_order(jobs, spec, 0.0, True, np.random.default_rng(seeds[0]))
    sim = run_packing(jobs, spec, PLACEMENT_POLICIES.create("fgd"), np.random.default_rng(seeds[0]),
                      np.random.default_rng(seeds[1]), inflate=0.0)  # fmt: skip
    assert np.array_equal(sim.order, order) and sim.order.size == 8152
    api = FakeCoreV1Api(nodes_of(spec))
    sched = _scheduler(api, "fgd", workload=jobs)
    sched.sync()
    for pod in pods_of(jobs, order.tolist()):
        api.add_pod(pod)
    sched.sync()
    assert sched.stats.bound == int(sim.placed.sum())
    for k, placement in enumerate(sim.placements):
        got = sched.placements.get(f"uid-default-pod-{k:06d}")
        assert (got is None) == (placement is None), k
        if got is not None:
            assert got[0] == str(spec.node_names[placement[0][0]]) and got[1][0][1] == placement[0][1], k
