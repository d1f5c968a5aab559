"""Cluster specification and mutable cluster state, both held as arrays over nodes (struct of arrays).

A policy scores every node with a few vector operations over these arrays; nothing here loops over nodes in Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .gpus import gpu_model

MILLI = 1000  # milli-GPU in one whole GPU


def pod_kind(num_gpus_here: int, milli: int) -> int:
    """Column of ``ClusterState.gpu_pod_kinds``: 0 for a shared-GPU pod, k for k whole GPUs on the node."""
    return 0 if milli < MILLI else num_gpus_here


@dataclass(frozen=True)
class ClusterSpec:
    """Static description of a cluster. GPU models are stored as codes into ``gpu_models``."""

    name: str
    node_names: np.ndarray  # object [N]
    cpu_milli: np.ndarray  # int64 [N]
    memory_mib: np.ndarray  # int64 [N]
    gpu_count: np.ndarray  # int64 [N]
    gpu_model_code: np.ndarray  # int64 [N], index into gpu_models; -1 for a node without GPUs
    switch_id: np.ndarray  # int64 [N]
    gpu_models: tuple[str, ...]
    notes: str = ""

    def __post_init__(self) -> None:
        n = len(self.node_names)
        for attr in ("cpu_milli", "memory_mib", "gpu_count", "gpu_model_code", "switch_id"):
            arr = getattr(self, attr)
            if arr.shape != (n,):
                raise ValueError(f"cluster '{self.name}': {attr} has shape {arr.shape}, expected ({n},)")
        for m in self.gpu_models:
            gpu_model(m)  # unknown models fail here, listing the catalog

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @property
    def max_gpus_per_node(self) -> int:
        return int(self.gpu_count.max()) if self.num_nodes else 0

    @property
    def total_gpus(self) -> int:
        return int(self.gpu_count.sum())

    def model_code(self, name: str) -> int:
        """Code of a GPU model in this cluster, or -1 when no node has it."""
        try:
            return self.gpu_models.index(name)
        except ValueError:
            return -1

    def with_gpu_model(self, model_name: str) -> ClusterSpec:
        """The same cluster with every GPU node's GPUs replaced by `model_name` (single-model clusters only)."""
        from dataclasses import replace

        from .errors import WattschedError

        name = gpu_model(model_name).name
        if len(self.gpu_models) > 1:
            raise WattschedError(
                f"cluster '{self.name}' has several GPU models ({', '.join(self.gpu_models)}): "
                "--gpu-type needs a cluster with one"
            )
        if not self.gpu_models:
            raise WattschedError(f"cluster '{self.name}' has no GPUs: --gpu-type does not apply")
        base = self.name.split("@")[0]
        notes = f"{self.notes}; GPU model set to {name} (--gpu-type)" if self.notes else f"GPU model {name}"
        return replace(self, name=f"{base}@{name}", gpu_models=(name,), notes=notes)

    def describe(self) -> dict[str, object]:
        per_model = {}
        for code, m in enumerate(self.gpu_models):
            sel = self.gpu_model_code == code
            per_model[m] = {"nodes": int(sel.sum()), "gpus": int(self.gpu_count[sel].sum())}
        return {
            "name": self.name,
            "nodes": self.num_nodes,
            "gpus": self.total_gpus,
            "cpu_milli": int(self.cpu_milli.sum()),
            "memory_mib": int(self.memory_mib.sum()),
            "gpu_models": per_model,
            "notes": self.notes,
        }

    @staticmethod
    def from_arrays(
        name: str,
        node_names,
        cpu_milli,
        memory_mib,
        gpu_count,
        gpu_model_names,
        switch_id=None,
        notes: str = "",
    ) -> ClusterSpec:
        """Build a spec from per-node lists; GPU model names are turned into codes in first-seen order."""
        names = np.asarray(gpu_model_names, dtype=object)
        gcount = np.asarray(gpu_count, dtype=np.int64)
        models: list[str] = []
        codes = np.full(len(names), -1, dtype=np.int64)
        for i, m in enumerate(names):
            if gcount[i] == 0 or m is None or m == "":
                continue
            if m not in models:
                models.append(m)
            codes[i] = models.index(m)
        n = len(names)
        return ClusterSpec(
            name=name,
            node_names=np.asarray(node_names, dtype=object),
            cpu_milli=np.asarray(cpu_milli, dtype=np.int64),
            memory_mib=np.asarray(memory_mib, dtype=np.int64),
            gpu_count=gcount,
            gpu_model_code=codes,
            switch_id=np.zeros(n, dtype=np.int64) if switch_id is None else np.asarray(switch_id, np.int64),
            gpu_models=tuple(models),
            notes=notes,
        )


@dataclass
class ClusterState:
    """Free resources per node and per GPU slot. Derived per-node arrays are kept in sync on every change."""

    spec: ClusterSpec
    gpu_left: np.ndarray = field(init=False)  # int64 [N, G] milli-GPU left; -1 marks a slot the node lacks
    cpu_left: np.ndarray = field(init=False)  # int64 [N]
    mem_left: np.ndarray = field(init=False)  # int64 [N]
    free_gpus: np.ndarray = field(init=False)  # int64 [N] fully free GPUs
    gpu_left_total: np.ndarray = field(init=False)  # int64 [N] sum of milli left over present GPUs
    max_gpu_left: np.ndarray = field(init=False)  # int64 [N] largest milli left on one GPU (-1: none)
    jobs_on_node: np.ndarray = field(init=False)  # int64 [N] number of resident jobs
    # Resident GPU jobs per node by kind: column 0 shared-GPU pods, column k pods holding k whole GPUs here.
    gpu_pod_kinds: np.ndarray = field(init=False)  # int64 [N, G+1]
    available: np.ndarray = field(init=False)  # bool [N]: node is on and may receive work
    allocated_milli: int = field(init=False, default=0)  # cluster-wide allocated milli-GPU
    nodes_busy: int = field(init=False, default=0)  # nodes hosting at least one job
    release_epoch: int = field(
        init=False, default=0
    )  # bumps whenever capacity is freed or nodes become available

    def __post_init__(self) -> None:
        spec = self.spec
        width = max(spec.max_gpus_per_node, 1)
        slots = np.arange(width)[None, :]
        self.gpu_left = np.where(slots < spec.gpu_count[:, None], MILLI, -1).astype(np.int64)
        self.cpu_left = spec.cpu_milli.copy()
        self.mem_left = spec.memory_mib.copy()
        self.jobs_on_node = np.zeros(spec.num_nodes, dtype=np.int64)
        self.gpu_pod_kinds = np.zeros((spec.num_nodes, width + 1), dtype=np.int64)
        self.available = np.ones(spec.num_nodes, dtype=bool)
        self._refresh_all()

    def copy(self) -> ClusterState:
        """An independent copy (for a policy to plan on)."""
        other = ClusterState.__new__(ClusterState)
        ndarray = np.ndarray
        other.__dict__.update({k: v.copy() if type(v) is ndarray else v for k, v in self.__dict__.items()})
        return other

    def _refresh_all(self) -> None:
        g = self.gpu_left
        self.free_gpus = (g == MILLI).sum(axis=1).astype(np.int64)
        self.gpu_left_total = np.where(g > 0, g, 0).sum(axis=1).astype(np.int64)
        self.max_gpu_left = g.max(axis=1).astype(np.int64)

    def _refresh_node(self, node: int) -> None:
        self._refresh_from(node, self.gpu_left[node].tolist())

    def _refresh_from(self, node: int, vals: list[int]) -> None:
        # Rows are short (<= 8-16 GPUs): plain Python on a list beats several numpy reductions here.
        self.free_gpus[node] = vals.count(MILLI)
        self.gpu_left_total[node] = sum([v for v in vals if v > 0])
        self.max_gpu_left[node] = max(vals)

    def allocate(self, node: int, gpus: tuple[int, ...], milli: int, cpu: int, mem: int) -> None:
        """Take `milli` on each GPU in `gpus` plus CPU and memory on `node`. Raises on over-allocation."""
        if self.cpu_left[node] < cpu or self.mem_left[node] < mem:
            raise RuntimeError(f"over-allocation of CPU/memory on node {node}")
        if gpus:
            row = self.gpu_left[node]
            vals = row.tolist()
            for g in gpus:
                if vals[g] < milli:
                    raise RuntimeError(f"over-allocation of GPU {g} on node {node}")
            for g in gpus:
                vals[g] -= milli
                row[g] = vals[g]
        self.cpu_left[node] -= cpu
        self.mem_left[node] -= mem
        jobs_on_node = self.jobs_on_node
        if jobs_on_node[node] == 0:
            self.nodes_busy += 1
        jobs_on_node[node] += 1
        self.allocated_milli += milli * len(gpus)
        if gpus:
            self.gpu_pod_kinds[node, pod_kind(len(gpus), milli)] += 1
            self._refresh_from(node, vals)

    def release(self, node: int, gpus: tuple[int, ...], milli: int, cpu: int, mem: int) -> None:
        if gpus:
            row = self.gpu_left[node]
            vals = row.tolist()
            for g in gpus:
                vals[g] += milli
                row[g] = vals[g]
        self.cpu_left[node] += cpu
        self.mem_left[node] += mem
        jobs_on_node = self.jobs_on_node
        jobs_on_node[node] -= 1
        if jobs_on_node[node] == 0:
            self.nodes_busy -= 1
        self.allocated_milli -= milli * len(gpus)
        self.release_epoch += 1
        if gpus:
            self.gpu_pod_kinds[node, pod_kind(len(gpus), milli)] -= 1
            self._refresh_from(node, vals)

    def set_available(self, nodes: np.ndarray, value: bool) -> None:
        """Mark nodes as able (or not) to receive work, e.g. when they power on or off."""
        self.available[nodes] = value
        if value:
            self.release_epoch += 1

    def check_invariants(self) -> None:
        """Raise if any resource is over- or under-allocated; used by tests after every event."""
        g = self.gpu_left
        present = np.arange(g.shape[1])[None, :] < self.spec.gpu_count[:, None]
        if ((g < 0) & present).any() or (g > MILLI).any() or ((g != -1) & ~present).any():
            raise AssertionError("GPU milli outside 0..1000")
        if (self.cpu_left < 0).any() or (self.cpu_left > self.spec.cpu_milli).any():
            raise AssertionError("CPU left outside 0..capacity")
        if (self.mem_left < 0).any() or (self.mem_left > self.spec.memory_mib).any():
            raise AssertionError("memory left outside 0..capacity")
        if (self.jobs_on_node < 0).any() or (self.gpu_pod_kinds < 0).any():
            raise AssertionError("negative job count on a node")
        if self.allocated_milli != int(self.spec.gpu_count.sum() * MILLI - self.gpu_left_total.sum()):
            raise AssertionError("allocated milli-GPU counter out of sync")
        if self.nodes_busy != int((self.jobs_on_node > 0).sum()):
            raise AssertionError("busy-node counter out of sync")
