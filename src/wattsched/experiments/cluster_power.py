"""Static cluster power figures: idle and fully allocated, per component (a check against published numbers)."""

from __future__ import annotations

import numpy as np

from ..energy.power_models import POWER_MODELS
from ..workloads.clusters import load_cluster


def cluster_power_table(cluster: str, power_model: str, node_base_w: float | None, data_dir=None) -> dict:
    spec = load_cluster(cluster, data_dir)
    model = POWER_MODELS.create(power_model)
    model.bind(spec)
    nodes = np.arange(spec.num_nodes)
    base = (model.default_node_base_w if node_base_w is None else node_base_w) * spec.num_nodes
    idle_gpu = float((model.gpu_idle_w * model.gpu_count).sum())
    full_gpu = float((model.gpu_busy_w(np.ones(spec.num_nodes), nodes) * model.gpu_count).sum())
    idle_cpu = float(model.cpu_w(spec.cpu_milli, nodes).sum())
    full_cpu = float(model.cpu_w(np.zeros(spec.num_nodes, dtype=np.int64), nodes).sum())
    return {
        "idle": {"gpu": idle_gpu, "cpu": idle_cpu, "base": base, "total": idle_gpu + idle_cpu + base},
        "fully allocated": {
            "gpu": full_gpu,
            "cpu": full_cpu,
            "base": base,
            "total": full_gpu + full_cpu + base,
        },
    }
