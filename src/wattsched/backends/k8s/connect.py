"""Where the Kubernetes backends get their API from (docs/live-kubernetes.md §1).

In order: ``--offline CLUSTER`` (an in-memory API server holding a wattsched cluster's nodes, or the nodes of a
``v1.NodeList`` JSON file: for trying the extender without a cluster; bindings go nowhere); the in-cluster
configuration of a pod's ServiceAccount; ``--kubeconfig`` or ``~/.kube/config``. With none of these, the
extender serves offline on the built-in ``default`` cluster and says so.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ...core.errors import WattschedError

log = logging.getLogger("wattsched.k8s")


def offline_api(cluster: str, data_dir: str | None = None) -> tuple[Any, str]:
    from .fake import FakeCoreV1Api
    from .replay import nodes_of

    if cluster.lower().endswith(".json"):
        path = Path(cluster)
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise WattschedError(f"{path}: not a readable v1.NodeList JSON file ({exc})") from None
        items = doc.get("items") if isinstance(doc, dict) else None
        if not isinstance(items, list) or not items:
            raise WattschedError(f"{path}: expected a v1.NodeList with a non-empty 'items' list")
        nodes = [n for n in items if isinstance(n, dict) and n.get("kind", "Node") == "Node"]
        pods = [p for p in items if isinstance(p, dict) and p.get("kind") == "Pod"]
        return FakeCoreV1Api(nodes, pods), f"OFFLINE: the {len(nodes)} nodes of {path}"
    from ...workloads.clusters import load_cluster

    spec = load_cluster(cluster, data_dir)
    return FakeCoreV1Api(
        nodes_of(spec)
    ), f"OFFLINE: the {spec.num_nodes} nodes of wattsched's cluster '{cluster}'"


def connect(kubeconfig: str | None, offline: str | None, data_dir: str | None = None) -> tuple[Any, str]:
    """(a CoreV1Api, a line saying what it is)."""
    if offline:
        return offline_api(offline, data_dir)
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if kubeconfig is None:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]  # the client ships no annotations
            return client.CoreV1Api(), "in-cluster ServiceAccount"
        except ConfigException:
            pass
    try:
        config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]  # (no annotations)
        return client.CoreV1Api(), f"kubeconfig {kubeconfig or '~/.kube/config'}"
    except (ConfigException, OSError, TypeError) as exc:
        if kubeconfig is not None:
            raise WattschedError(f"--kubeconfig {kubeconfig}: {exc}") from None
    api, what = offline_api("default")
    return api, (f"{what} (no in-cluster configuration and no ~/.kube/config: give --kubeconfig, or --offline "
                 "CLUSTER to choose the nodes)")  # fmt: skip
