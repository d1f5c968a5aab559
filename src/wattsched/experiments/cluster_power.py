"""Static cluster power figures: idle and fully allocated, per component (a check against published numbers)."""

from __future__ import annotations

import numpy as np

from ..core.cluster import ClusterState
from ..energy.power_models import POWER_MODELS
from ..workloads.clusters import load_cluster


def cluster_power_table(cluster: str, power_model: str, node_base_w: float | None, data_dir=None) -> dict:
    spec = load_cluster(cluster, data_dir)
    model = POWER_MODELS.create(power_model)
    model.bind(spec)
    base = model.default_node_base_w if node_base_w is None else node_base_w
    idle = ClusterState(spec)
    full = ClusterState(spec)
    full.gpu_left[full.gpu_left > 0] = 0
    full.cpu_left[:] = 0
    full._refresh_all()
    full_load = [[1.0] * max(spec.max_gpus_per_node, 1) for _ in range(spec.num_nodes)]
    idle_load = [[0.0] * max(spec.max_gpus_per_node, 1) for _ in range(spec.num_nodes)]
    out = {}
    for name, state, load in (("idle", idle, idle_load), ("fully allocated", full, full_load)):
        watts = [model.node_watts(state, load, n) for n in range(spec.num_nodes)]
        gpu = float(np.sum([w.gpu_busy + w.gpu_idle for w in watts]))
        cpu = float(np.sum([w.cpu for w in watts]))
        base_total = base * spec.num_nodes
        out[name] = {"gpu": gpu, "cpu": cpu, "base": base_total, "total": gpu + cpu + base_total}
    return out
