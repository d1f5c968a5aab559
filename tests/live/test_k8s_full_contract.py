"""The full-contract Kubernetes backend (backends/k8s/backend.py) against a real API server (tests/k8s_fixtures.py):
the same decisions as the simulator on a short script, a preemption as an eviction with a checkpoint annotation
and an unbound copy, node power as a cordon plus the operator's hook, and a refusal for what Kubernetes cannot do.

There is no kubelet: the test plays it, marking bound pods Running and, once their time is up, Succeeded.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.contract_harness import SHORT_SCRIPT, Log, RecordingScheduler, first_difference, run_simulator
from tests.k8s_fixtures import ControlPlane
from wattsched.backends.driver import LiveDriver
from wattsched.backends.k8s.backend import (
    CHECKPOINT_ANNOTATION,
    JOB_LABEL,
    POWER_ANNOTATION,
    RESTARTS_ANNOTATION,
    K8sBackend,
)
from wattsched.backends.k8s.informer import read_json
from wattsched.backends.store import JobStore
from wattsched.core.states import STATUS_PENDING
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import build_scheduler
from wattsched.policies.contract import MissingCapability, Target

pytestmark = pytest.mark.k8s

SCHEDULER = "energy-aware"
TOLERANCE_S = 2.5


def _nodes(k8s: ControlPlane) -> None:
    for i in range(3):
        k8s.create_node(f"gpu{i + 1}", gpus=4, model="A100", cpu="8", memory="16000Mi")


def _pods(api: Any) -> list[dict[str, Any]]:
    return list(read_json(api.list_pod_for_all_namespaces(_preload_content=False)).get("items") or [])


class Kubelet:
    """Bound pods run (status Running); a pod whose time is up succeeds."""

    def __init__(self, api: Any, durations: dict[str, float]):
        self.api, self.durations = api, durations
        self.started: dict[str, float] = {}

    def tick(self) -> None:
        now = time.monotonic()
        for pod in _pods(self.api):
            meta, phase = pod["metadata"], (pod.get("status") or {}).get("phase")
            name, ns = meta["name"], meta["namespace"]
            if (pod.get("spec") or {}).get("nodeName") and phase == "Pending":
                self.api.patch_namespaced_pod_status(name, ns, {"status": {"phase": "Running"}})
                self.started[name] = now
            elif phase == "Running" and now - self.started.get(name, now) >= self.durations.get(name, 1e9):
                self.api.patch_namespaced_pod_status(name, ns, {"status": {"phase": "Succeeded"}})


@pytest.mark.parametrize(
    "policy",
    [{"queue": "fifo", "placement": "best-fit"}, {"allocation": "tiresias"}],
    ids=["fifo+best-fit", "tiresias"],
)
def test_the_full_contract_on_a_real_api_server_decides_as_the_simulator(k8s, tmp_path, policy):
    _nodes(k8s)
    api = k8s.core_v1()
    names: dict[str, str] = {}
    log = Log(lambda view, j: names.get(str(view.jobs.job_id[j]), str(view.jobs.job_id[j])))
    for name, _, gpus, duration in SHORT_SCRIPT:
        k8s.create_pod(name, gpus=gpus, scheduler_name=SCHEDULER, cpu="1", memory="0")
        api.patch_namespaced_pod(name, "default", {"spec": {"activeDeadlineSeconds": 60 * duration}})
        names[f"default.{name}"] = name
    kubelet = Kubelet(api, {name: float(d) for name, _, _, d in SHORT_SCRIPT})
    backend = K8sBackend(api, SCHEDULER, eviction_grace_s=0)
    driver = LiveDriver(
        backend, RecordingScheduler(build_scheduler(SimulationConfig(**policy).scheduler_config(), None), log),
        JobStore(tmp_path / "k8s.sqlite"),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        kubelet.tick()
        driver.step()
        kubelet.tick()
        if all((p.get("status") or {}).get("phase") == "Succeeded" for p in _pods(api)):
            break
        time.sleep(0.1)
    sim = run_simulator(
        build_scheduler(SimulationConfig(**policy).scheduler_config(), None), None, script=SHORT_SCRIPT
    )
    assert len(log.entries) == len(SHORT_SCRIPT)
    diff = first_difference(sim, log.entries, TOLERANCE_S)
    assert diff is None, diff


def test_a_stop_evicts_with_a_checkpoint_annotation_and_queues_an_unbound_copy(k8s, tmp_path):
    _nodes(k8s)
    api = k8s.core_v1()
    k8s.create_pod("train", gpus=2, scheduler_name=SCHEDULER)
    backend = K8sBackend(api, SCHEDULER, eviction_grace_s=0)
    driver = LiveDriver(
        backend, build_scheduler(SimulationConfig(queue="fifo", placement="best-fit").scheduler, None),
        JobStore(tmp_path / "k8s.sqlite"),
    )  # fmt: skip
    driver.step()
    node = k8s.wait_bound("default", "train")
    c = driver.cluster
    job = c.index["default.train"]
    driver.cluster.actions.stop(job)
    pods = {p["metadata"]["name"]: p for p in _pods(api)}
    assert "train" not in pods  # evicted (grace period 0 here: gone at once)
    copy = pods["train-r1"]
    assert copy["metadata"]["labels"][JOB_LABEL] == "default.train"
    assert copy["metadata"]["annotations"][RESTARTS_ANNOTATION] == "1"
    assert CHECKPOINT_ANNOTATION not in copy["metadata"]["annotations"]
    assert not (copy.get("spec") or {}).get("nodeName")  # unbound: the job waits again
    driver.step()  # the copy is seen: the same job, waiting again (not a new one)
    assert c.index["default.train"] == job and len(c.ids) == 1 and c.status[job] == STATUS_PENDING
    placement = c.last_placement[job]
    c.actions.start(job, Target(placement))  # as a policy's next decision would
    assert c.flush() == 1
    assert k8s.wait_bound("default", "train-r1") == node


def test_node_power_is_a_cordon_and_the_operators_hook(k8s, tmp_path):
    _nodes(k8s)
    api = k8s.core_v1()
    calls: list[list[str]] = []
    backend = K8sBackend(api, SCHEDULER, power_up_cmd="power-on {node}", power_down_cmd="power-off {node}",
                         hook_runner=calls.append)  # fmt: skip
    backend.power_down(["gpu2"])
    node = read_json(api.read_node("gpu2", _preload_content=False))
    assert (
        node["spec"]["unschedulable"] is True and node["metadata"]["annotations"][POWER_ANNOTATION] == "off"
    )
    assert calls == [["power-off", "gpu2"]]
    assert {n.name: n.power for n in backend.observe().nodes}["gpu2"] == "off"
    backend.power_up(["gpu2"])
    node = read_json(api.read_node("gpu2", _preload_content=False))
    assert not node["spec"].get("unschedulable") and node["metadata"]["annotations"][POWER_ANNOTATION] == "on"
    assert calls[-1] == ["power-on", "gpu2"]


def test_what_kubernetes_cannot_do_is_refused_at_start(k8s, tmp_path):
    backend = K8sBackend(k8s.core_v1(), SCHEDULER)
    with pytest.raises(MissingCapability, match=r"resizing jobs .* a pod's GPU request cannot change"):
        LiveDriver(
            backend,
            build_scheduler(SimulationConfig(allocation="optimus-greedy").scheduler, None),
            JobStore(":memory:"),
        )
