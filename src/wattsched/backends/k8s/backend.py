"""Kubernetes as a full-contract live backend: ``wattsched serve k8s-scheduler --queue/--placement |
--allocation … --power-manager …`` drives the same ``LiveDriver`` as Slurm (docs/live-kubernetes.md §5).

Pods whose ``spec.schedulerName`` is wattsched's are its jobs (one pod, one job, on one node). Each observation
lists nodes and pods (``list_node``, ``list_pod_for_all_namespaces``; at the loop's interval, as Slurm's
``squeue``); each action is an API call:

* start = annotate the pod with the GPUs the policy chose (``alibabacloud.com/gpu-index``), then bind it to its node
  (``v1.Binding``; a 409 Conflict means another binder won and the start fails);
* stop = evict with a checkpoint annotation: the pod is annotated ``wattsched.io/checkpoint-requested`` (the time),
  deleted with the configured grace period (the workload saves its state on SIGTERM), and a copy is created,
  unbound, carrying the job's identity (label ``wattsched.io/job``) and its requeue count
  (``wattsched.io/restarts``); the old pod, while it terminates, is the job's previous run winding down;
* reject = delete the pod;
* power = cordon (``spec.unschedulable``) plus the operator's node power hook (commands given like Slurm's
  SuspendProgram and ResumeProgram; ``{node}`` is the node's name); the node's annotation
  ``wattsched.io/power`` (``off`` / ``on``) records what wattsched did;
* a pod's GPU request cannot change once it is created, so resizing is not offered; nor are GPU settings (no node
  agent hook reads them from pods yet). A policy that needs either is refused at start.

A job's time limit is the pod's ``spec.activeDeadlineSeconds`` (the one duration a pod states); its deadline the
annotation ``wattsched.io/deadline`` (epoch seconds).
"""

from __future__ import annotations

import copy
import logging
import math
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from ...core.cluster import MILLI
from ...core.settings import GpuSetting
from ...policies.contract import Capability
from ..base import (
    JOB_FINISHED,
    JOB_RUNNING,
    JOB_STARTING,
    JOB_WAITING,
    NODE_OFF,
    NODE_ON,
    NODE_POWERING_UP,
    NODE_UNAVAILABLE,
    BackendError,
    JobObs,
    NodeObs,
    Observation,
    StartRequest,
)
from .informer import api_status, read_json
from .objects import GPU_INDEX_ANNOTATION, PodError, node_info, pod_request

log = logging.getLogger("wattsched.k8s")

JOB_LABEL = "wattsched.io/job"
RESTARTS_ANNOTATION = "wattsched.io/restarts"
CHECKPOINT_ANNOTATION = "wattsched.io/checkpoint-requested"
DEADLINE_ANNOTATION = "wattsched.io/deadline"
POWER_ANNOTATION = "wattsched.io/power"

Runner = Callable[[Sequence[str]], None]


def run_hook(argv: Sequence[str]) -> None:
    """Run an operator's node power hook; a failure is a BackendError naming the command."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(f"`{' '.join(argv)}` could not run: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-2:]
        raise BackendError(f"`{' '.join(argv)}` exited {done.returncode}: {' | '.join(tail)}")


def _epoch(text: Any, default: float) -> float:
    if not text:
        return default
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


class K8sBackend:
    name = "kubernetes"
    lacks: ClassVar[Mapping[Capability, str]] = {
        Capability.RESIZES: "a pod's GPU request cannot change once the pod is created",
        Capability.SETS_GPU_SETTINGS: "no node agent applies GPU settings to pods yet",
        Capability.POWERS_NODES: "give the node power hook (--power-up-cmd and --power-down-cmd)",
    }
    wakes_nodes_for_jobs = False  # a cordoned, powered-off node takes no pod until wattsched powers it up

    def __init__(
        self,
        api: Any,
        scheduler_name: str = "energy-aware",
        power_up_cmd: str | None = None,
        power_down_cmd: str | None = None,
        eviction_grace_s: int = 30,
        clock: Callable[[], float] = time.time,
        hook_runner: Runner = run_hook,
    ):
        self.api = api
        self.scheduler_name = scheduler_name
        self.power_up_cmd = power_up_cmd
        self.power_down_cmd = power_down_cmd
        self.eviction_grace_s = int(eviction_grace_s)
        self.clock = clock
        self.hook_runner = hook_runner
        caps = {Capability.SHARES_GPUS, Capability.PREEMPTS}
        if power_up_cmd and power_down_cmd:
            caps.add(Capability.POWERS_NODES)
        self.capabilities = frozenset(caps)
        self._pods: dict[str, dict[str, Any]] = {}  # job id -> its live (not terminating) pod, last observed

    # ----- observe ------------------------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, _preload_content=False, **kw)
        except Exception as exc:
            status = api_status(exc)
            if status is None and not isinstance(exc, OSError):
                raise
            raise BackendError(f"{what} failed ({status or type(exc).__name__}): {exc}") from None

    def observe(self) -> Observation:
        now = self.clock()
        nodes_doc = read_json(self._call("list nodes", self.api.list_node))
        pods_doc = read_json(self._call("list pods", self.api.list_pod_for_all_namespaces))
        warnings: list[str] = []
        nodes = []
        for raw in nodes_doc.get("items") or []:
            try:
                nodes.append(self._node_obs(raw))
            except (PodError, ValueError, TypeError, AttributeError) as exc:
                warnings.append(f"node skipped: {exc}")
        by_job: dict[str, list[dict[str, Any]]] = {}
        for raw in pods_doc.get("items") or []:
            spec = raw.get("spec") or {}
            if spec.get("schedulerName") != self.scheduler_name:
                continue
            by_job.setdefault(self._job_id(raw), []).append(raw)
        jobs, self._pods = [], {}
        for job_id, pods in by_job.items():
            live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
            ending = len(live) < len(pods)
            pod = max(live or pods, key=lambda p: int(_annotations(p).get(RESTARTS_ANNOTATION, 0) or 0))
            try:
                jobs.append(self._job_obs(job_id, pod, ending, now))
            except (PodError, ValueError, TypeError, AttributeError) as exc:
                warnings.append(f"pod of job {job_id} skipped: {exc}")
                continue
            if live:
                self._pods[job_id] = pod
        return Observation(now, tuple(nodes), tuple(jobs), tuple(warnings))

    @staticmethod
    def _job_id(pod: Mapping[str, Any]) -> str:
        meta = pod.get("metadata") or {}
        # A label value holds no "/": namespace.name.
        return str(
            (meta.get("labels") or {}).get(JOB_LABEL) or f"{meta.get('namespace', 'default')}.{meta['name']}"
        )

    @staticmethod
    def _node_obs(raw: Mapping[str, Any]) -> NodeObs:
        info = node_info(raw)
        cordoned = bool((raw.get("spec") or {}).get("unschedulable"))
        powered = str(((raw.get("metadata") or {}).get("annotations") or {}).get(POWER_ANNOTATION, "on"))
        conditions = (raw.get("status") or {}).get("conditions") or []
        ready = all(str(c.get("status")) == "True" for c in conditions if c.get("type") == "Ready")
        if powered == "off":
            power = NODE_OFF
        elif cordoned:
            power = NODE_UNAVAILABLE  # cordoned by someone else: no work goes there
        else:
            power = NODE_ON if ready else NODE_POWERING_UP
        return NodeObs(info.name, info.gpus, info.gpu_model, math.ceil(info.cpu_milli / MILLI), info.memory_mib,
                       power)  # fmt: skip

    def _job_obs(self, job_id: str, pod: Mapping[str, Any], ending: bool, now: float) -> JobObs:
        req = pod_request(pod)
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        annotations = _annotations(pod)
        if ending and (not req.node_name or meta.get("deletionTimestamp")):
            state, held = JOB_WAITING, True  # requeued: the old pod still terminates
        elif req.phase in ("Succeeded", "Failed"):
            state, held = JOB_FINISHED, False
        elif req.node_name:
            state, held = (JOB_RUNNING if req.phase == "Running" else JOB_STARTING), False
        else:
            state, held = JOB_WAITING, True
        limit = spec.get("activeDeadlineSeconds")
        deadline = annotations.get(DEADLINE_ANNOTATION)
        return JobObs(
            job_id=job_id,
            name=str(meta.get("name") or ""),
            state=state,
            num_nodes=1,
            gpus_per_node=req.num_gpu,
            gpu_model=req.gpu_spec,
            cpus=math.ceil(req.cpu_milli / MILLI),
            memory_mib=req.memory_mib,
            submit_s=_epoch(meta.get("creationTimestamp"), now),
            time_limit_s=float(limit) if limit else math.inf,
            nodes=(req.node_name,) if req.node_name and state != JOB_WAITING else (),
            held=held,
            ending=ending,
            restarts=int(annotations.get(RESTARTS_ANNOTATION, 0) or 0),
            gpu_milli=req.gpu_milli if req.num_gpu else MILLI,
            deadline_s=float(deadline) if deadline else math.nan,
        )

    # ----- act ----------------------------------------------------------------------------------------------
    def _pod(self, job_id: str) -> dict[str, Any]:
        pod = self._pods.get(job_id)
        if pod is None:
            raise BackendError(f"job {job_id}: no pod of it is listed")
        return pod

    def start_many(self, starts: Sequence[StartRequest]) -> dict[str, BackendError]:
        from .scheduler import bind

        failed: dict[str, BackendError] = {}
        for start in starts:
            try:
                pod = self._pod(start.job_id)
                if start.gpus_per_node is not None:
                    raise BackendError(f"job {start.job_id}: pods cannot be resized")
                meta = pod["metadata"]
                index = ",".join(str(g) for g in (start.gpu_index[0] if start.gpu_index else ()))
                if index:
                    patch = {"metadata": {"annotations": {GPU_INDEX_ANNOTATION: index}}}
                    self._call(
                        "annotate pod", self.api.patch_namespaced_pod, meta["name"], meta["namespace"], patch
                    )
                try:
                    bind(self.api, pod_request(pod), start.nodes[0])
                except Exception as exc:  # the client's ApiException: 409 Conflict, 404, ...
                    if api_status(exc) is None and not isinstance(exc, OSError):
                        raise
                    raise BackendError(
                        f"bind of job {start.job_id} failed ({api_status(exc)}): {exc}"
                    ) from None
            except (BackendError, PodError) as exc:
                failed[start.job_id] = exc if isinstance(exc, BackendError) else BackendError(str(exc))
        return failed

    def requeue(self, job_id: str) -> None:
        """Evict with a checkpoint annotation, and queue a copy of the pod (unbound) in its place."""
        pod = self._pod(job_id)
        meta = pod["metadata"]
        name, namespace = meta["name"], meta.get("namespace", "default")
        stamp = {"metadata": {"annotations": {CHECKPOINT_ANNOTATION: f"{self.clock():.3f}"}}}
        self._call("annotate pod", self.api.patch_namespaced_pod, name, namespace, stamp)
        self._call("evict pod", self.api.delete_namespaced_pod, name, namespace,
                   grace_period_seconds=self.eviction_grace_s)  # fmt: skip
        restarts = int(_annotations(pod).get(RESTARTS_ANNOTATION, 0) or 0) + 1
        base = name.rsplit("-r", 1)[0] if RESTARTS_ANNOTATION in _annotations(pod) else name
        copy_meta = {
            "name": f"{base}-r{restarts}",
            "namespace": namespace,
            "labels": {**(meta.get("labels") or {}), JOB_LABEL: job_id},
            "annotations": {
                **{
                    k: v
                    for k, v in _annotations(pod).items()
                    if k not in (GPU_INDEX_ANNOTATION, CHECKPOINT_ANNOTATION)
                },
                RESTARTS_ANNOTATION: str(restarts),
            },
        }
        spec = copy.deepcopy(pod.get("spec") or {})
        spec.pop("nodeName", None)
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": copy_meta, "spec": spec}
        self._call("queue pod copy", self.api.create_namespaced_pod, namespace, body)

    def cancel(self, job_id: str) -> None:
        meta = self._pod(job_id)["metadata"]
        self._call("delete pod", self.api.delete_namespaced_pod, meta["name"], meta.get("namespace", "default"),
                   grace_period_seconds=0)  # fmt: skip

    def power_up(self, nodes: Sequence[str]) -> None:
        for node in nodes:
            self._hook(self.power_up_cmd, node)
            patch = {"spec": {"unschedulable": False}, "metadata": {"annotations": {POWER_ANNOTATION: "on"}}}
            self._call("uncordon node", self.api.patch_node, node, patch)

    def power_down(self, nodes: Sequence[str]) -> None:
        for node in nodes:
            patch = {"spec": {"unschedulable": True}, "metadata": {"annotations": {POWER_ANNOTATION: "off"}}}
            self._call("cordon node", self.api.patch_node, node, patch)
            self._hook(self.power_down_cmd, node)

    def _hook(self, command: str | None, node: str) -> None:
        if not command:
            raise BackendError("no node power hook configured (--power-up-cmd, --power-down-cmd)")
        self.hook_runner([part.replace("{node}", node) for part in shlex.split(command)])

    def set_gpu_setting(self, job_id: str, nodes: Sequence[str], setting: GpuSetting) -> None:
        raise BackendError(f"job {job_id}: {self.lacks[Capability.SETS_GPU_SETTINGS]}")


def _annotations(pod: Mapping[str, Any]) -> dict[str, Any]:
    return dict((pod.get("metadata") or {}).get("annotations") or {})
