"""Named clusters, the Alibaba node lists, Tiresias/ElasticFlow ``nXgY`` specs and the YAML cluster schema.

``load_cluster(name_or_path)`` accepts:

- ``default``: the built-in 16 x 8 A100 cluster (no data needed);
- ``philly``: 160 nodes x 8 P100, defined without data (assumptions in its ``notes``);
- ``alibaba-v2023`` (1213 GPU nodes) and ``alibaba-v2023-all`` (1523 nodes incl. CPU-only), v2023 trace;
- ``nXgY`` or ``nXgY@MODEL`` from the spec CSVs shipped with the Tiresias and ElasticFlow artifacts;
- a path to a ``.yaml``/``.yml`` file in the cluster schema of ``docs/data-formats.md``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..core.cluster import ClusterSpec
from ..core.errors import InputError, UnknownNameError
from ..core.gpus import GPU_CATALOG, gpu_model
from ..data.registry import is_available, locate
from .reading import read_table, read_text_bytes, require_columns
from .synthetic import default_cluster
from .validate import RowValidator, check_non_negative, is_missing, one_line

ALIBABA_DATASET = "alibaba-gpu-v2023"
ALIBABA_NODE_FILES = {
    "alibaba-v2023": "csv/openb_node_list_gpu_node.csv",
    "alibaba-v2023-all": "csv/openb_node_list_all_node.csv",
}

# Spec files per dataset (upstream artifacts); a name in both is read from the first dataset listed.
SPEC_DATASETS: dict[str, tuple[str, ...]] = {
    "tiresias-traces": ("n1g4", "n32g4", "n160g8", "n256g8"),
    "elasticflow-throughputs": (
        "n1g1",
        "n1g2",
        "n1g4",
        "n1g8",
        "n2g2",
        "n4g8",
        "n8g8",
        "n16g4",
        "n16g8",
        "n32g4",
        "n32g8",
        "n48g8",
        "n64g8",
        "n128g8",
        "n160g8",
        "n256g8",
    ),
}
SPEC_DEFAULT_MODEL = "V100"
_SPEC_RE = re.compile(r"^(n\d+g\d+)(?:@(.+))?$")

PHILLY_NODES = 160
PHILLY_GPUS_PER_NODE = 8
PHILLY_CPU_MILLI = 64_000
PHILLY_MEMORY_MIB = 524_288
PHILLY_NODES_PER_SWITCH = 32
PHILLY_PEAK_GPUS = 1243  # peak concurrent GPU demand of philly.csv if every job started at submission

MAX_NODES = 1_000_000  # guards against a typo such as `count: 1000000000` exhausting memory


def spec_names() -> list[str]:
    seen: dict[str, None] = {}
    for names in SPEC_DATASETS.values():
        seen.update(dict.fromkeys(names))
    return list(seen)


def cluster_names() -> list[str]:
    """Valid names for ``load_cluster`` (``nXgY`` also takes ``@MODEL``; any ``*.yaml`` path works too)."""
    return ["default", "philly", *ALIBABA_NODE_FILES, *spec_names(), *EACO_CLUSTERS]


def load_cluster(name_or_path: str, data_dir: str | Path | None = None) -> ClusterSpec:
    name = str(name_or_path).strip()
    if name.lower().endswith((".yaml", ".yml")):
        return load_cluster_yaml(name)
    if name == "default":
        return default_cluster()
    if name == "philly":
        return philly_cluster()
    if name in EACO_CLUSTERS:
        return eaco_cluster(EACO_CLUSTERS[name])
    if name in ALIBABA_NODE_FILES:
        return read_alibaba_nodes(locate(ALIBABA_DATASET, ALIBABA_NODE_FILES[name], data_dir), name=name)
    m = _SPEC_RE.match(name)
    if m and m.group(1) in spec_names():
        return load_spec_cluster(m.group(1), gpu_model_name=m.group(2), data_dir=data_dir)
    if name and Path(name).is_dir():
        raise InputError(name, None, None, "is a directory, expected a cluster name or a cluster YAML file")
    raise UnknownNameError("cluster", name, [*cluster_names(), "nXgY@MODEL", "PATH.yaml"])


# -- EaCO's simulated clusters (docs/eaco.md §4) -------------------------------------------------------------
EACO_CLUSTERS = {"eaco-28": 28, "eaco-64": 64}
EACO_NODES_PER_SWITCH = 8  # not in the paper (reconstructed)


def eaco_cluster(nodes: int) -> ClusterSpec:
    """EaCO's testbed node (2x Xeon Gold 6240, 768 GB, 8x V100-SXM2-32GB) repeated `nodes` times."""
    notes = (
        f"EaCO simulated cluster: {nodes} nodes x 8 V100 (V100-SXM2 32 GB), 768 GB per node; CPU modelled as 2 "
        f"sockets (64 vCPUs of the power model's fallback CPU, for the 2x Xeon Gold 6240); "
        f"{EACO_NODES_PER_SWITCH} nodes per switch (reconstructed)"
    )
    return ClusterSpec.from_arrays(
        name=f"eaco-{nodes}",
        node_names=[f"eaco-{i:04d}" for i in range(nodes)],
        cpu_milli=np.full(nodes, 64_000),
        memory_mib=np.full(nodes, 768 * 1024),
        gpu_count=np.full(nodes, 8),
        gpu_model_names=["V100"] * nodes,
        switch_id=np.arange(nodes) // EACO_NODES_PER_SWITCH,
        notes=notes,
    )


# -- philly --------------------------------------------------------------------------------------------------


def philly_cluster() -> ClusterSpec:
    n = PHILLY_NODES
    notes = (
        f"assumed Philly-like cluster: {n} nodes x {PHILLY_GPUS_PER_NODE} GPUs = "
        f"{n * PHILLY_GPUS_PER_NODE:,} GPUs in {n // PHILLY_NODES_PER_SWITCH} switches of "
        f"{PHILLY_NODES_PER_SWITCH} nodes; {n} is the smallest number of 8-GPU nodes, in whole switches, "
        f"covering the trace's peak concurrent GPU demand ({PHILLY_PEAK_GPUS:,} GPUs, computed from "
        "philly-pollux/philly.csv as if every job started at submission; 156 nodes without the whole-switch "
        "rounding); "
        "Pascal-generation GPUs modelled as P100; CPU and memory per node assumed "
        f"({PHILLY_CPU_MILLI} milli-CPU, {PHILLY_MEMORY_MIB} MiB); {PHILLY_NODES_PER_SWITCH} nodes per switch"
    )
    return ClusterSpec.from_arrays(
        name="philly",
        node_names=[f"philly-{i:04d}" for i in range(n)],
        cpu_milli=np.full(n, PHILLY_CPU_MILLI),
        memory_mib=np.full(n, PHILLY_MEMORY_MIB),
        gpu_count=np.full(n, PHILLY_GPUS_PER_NODE),
        gpu_model_names=["P100"] * n,
        switch_id=np.arange(n) // PHILLY_NODES_PER_SWITCH,
        notes=notes,
    )


# -- Alibaba node lists --------------------------------------------------------------------------------------


def read_alibaba_nodes(path: str | Path, name: str = "alibaba-v2023") -> ClusterSpec:
    """``openb_node_list_*.csv``: sn, cpu_milli, memory_mib, gpu, model (model empty for CPU-only nodes)."""
    path = Path(path)
    df, lines = read_table(path)
    require_columns(df, path, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    v = RowValidator(path, lines)
    v.flag(is_missing(df["sn"]), "sn", "missing value")
    cpu = v.number(df["cpu_milli"], "cpu_milli", integer=True)
    mem = v.number(df["memory_mib"], "memory_mib", integer=True)
    gpus = v.number(df["gpu"], "gpu", integer=True)
    for arr, col in ((cpu, "cpu_milli"), (mem, "memory_mib"), (gpus, "gpu")):
        check_non_negative(v, arr, col)
    model = df["model"].astype(str).str.strip().to_numpy(dtype=object)
    v.flag((gpus > 0) & (model == ""), "model", "a node with GPUs needs a GPU model")
    v.flag((model != "") & ~np.isin(model, list(GPU_CATALOG)), "model",
           "unknown GPU model {value!r} (known: " + ", ".join(sorted(GPU_CATALOG)) + ")", model)  # fmt: skip
    v.finish(skip_invalid=False)
    return ClusterSpec.from_arrays(
        name=name,
        node_names=df["sn"].astype(str).str.strip().to_numpy(dtype=object),
        cpu_milli=cpu.astype(np.int64),
        memory_mib=mem.astype(np.int64),
        gpu_count=gpus.astype(np.int64),
        gpu_model_names=model,
        notes=f"Alibaba GPU v2023 node list {path.name}; GPU model codes as in the trace; "
        "no switch layout in the trace (all nodes on switch 0)",
    )


# -- nXgY spec CSVs ------------------------------------------------------------------------------------------


def load_spec_cluster(
    spec: str, gpu_model_name: str | None = None, data_dir: str | Path | None = None
) -> ClusterSpec:
    """A Tiresias/ElasticFlow spec ``nXgY`` (memory in GB, CPUs in cores); GPU model V100 unless given."""
    datasets = [d for d, names in SPEC_DATASETS.items() if spec in names]
    if not datasets:
        raise UnknownNameError("cluster", spec, spec_names())
    rel = f"cluster_specs/{spec}.csv"
    found = [d for d in datasets if is_available(d, rel, data_dir)]
    path = locate(found[0] if found else datasets[0], rel, data_dir)
    model = gpu_model(gpu_model_name).name if gpu_model_name else SPEC_DEFAULT_MODEL
    return read_spec_csv(path, name=spec if not gpu_model_name else f"{spec}@{model}", gpu_model_name=model,
                         model_assumed=not gpu_model_name)  # fmt: skip


def read_spec_csv(
    path: str | Path, name: str, gpu_model_name: str = SPEC_DEFAULT_MODEL, model_assumed: bool = True
) -> ClusterSpec:
    """num_switch, num_node_p_switch, num_gpu_p_node, num_cpu_p_node, mem_p_node (one row)."""
    path = Path(path)
    df, lines = read_table(path)
    cols = ("num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node")
    require_columns(df, path, cols)
    if len(df) != 1:
        raise InputError(path, None, None, f"expected exactly one data row, found {len(df)}")
    v = RowValidator(path, lines)
    vals = {c: v.number(df[c], c, integer=True) for c in cols}
    for c in cols:
        v.flag(vals[c] < (1 if c in cols[:2] else 0), c, "out of range: {value}", vals[c])
    v.finish(skip_invalid=False)
    switches, per_switch, gpus, cores, mem_gb = (int(vals[c][0]) for c in cols)
    n = switches * per_switch
    _check_size(path, n)
    notes = [
        f"spec {path.parent.parent.name}/{path.parent.name}/{path.name}: {switches} switch(es) x "
        f"{per_switch} nodes, {gpus} GPUs, {cores} CPU cores, {mem_gb} GB per node (GB read as GiB)"
    ]
    if model_assumed:
        notes.append(f"GPU model not in the spec file: {gpu_model_name} assumed")
    m = re.match(r"^n(\d+)g(\d+)", name)
    if m and (int(m.group(1)), int(m.group(2))) != (n, gpus):
        notes.append(
            f"the file's layout ({n} nodes x {gpus} GPUs) differs from its name; the file is followed"
        )
    return ClusterSpec.from_arrays(
        name=name,
        node_names=[f"{name.split('@')[0]}-{i:04d}" for i in range(n)],
        cpu_milli=np.full(n, cores * 1000),
        memory_mib=np.full(n, mem_gb * 1024),
        gpu_count=np.full(n, gpus),
        gpu_model_names=[gpu_model_name] * n,
        switch_id=np.arange(n) // per_switch,
        notes="; ".join(notes),
    )


# -- YAML schema ---------------------------------------------------------------------------------------------


class NodeGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(ge=1, description="number of identical nodes")
    gpus: int = Field(ge=0, description="GPUs per node")
    gpu_model: str | None = Field(None, description="GPU catalog name; required when gpus > 0")
    cpu_milli: int = Field(ge=0, description="milli-CPU per node (1000 = one core)")
    memory_mib: int = Field(ge=0, description="memory per node in MiB")
    nodes_per_switch: int | None = Field(None, ge=1, description="default: the whole group on one switch")
    name_prefix: str | None = Field(None, description="node names are <prefix>-<index>")

    @field_validator("gpu_model")
    @classmethod
    def _known_model(cls, v: str | None) -> str | None:
        if v is not None and v not in GPU_CATALOG:
            raise ValueError(f"unknown GPU model {v!r} (known: {', '.join(sorted(GPU_CATALOG))})")
        return v

    @model_validator(mode="after")
    def _model_when_gpus(self) -> NodeGroup:
        if self.gpus > 0 and not self.gpu_model:
            raise ValueError("gpu_model is required when gpus > 0")
        return self


class ClusterFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    notes: str = ""
    node_groups: list[NodeGroup] = Field(min_length=1)


def load_cluster_yaml(path: str | Path) -> ClusterSpec:
    path = Path(path)
    text = read_text_bytes(path, "a cluster YAML file").decode("utf-8")
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
        problem = one_line(", ".join(p for p in parts if p) or str(exc))
        raise InputError(path, line, None, f"invalid YAML: {problem}") from None
    except RecursionError:
        raise InputError(path, None, None, "invalid YAML: nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError(path, 1, None, "expected a mapping with keys name, node_groups")
    try:
        cfg = ClusterFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        field = one_line(_loc_text(loc)) or None
        raise InputError(path, _yaml_line(root, loc), field, one_line(err["msg"])) from None
    return _cluster_from_config(cfg, path)


def _check_size(path: Path, nodes: int) -> None:
    if nodes > MAX_NODES:
        raise InputError(path, None, None, f"{nodes:,} nodes is more than the {MAX_NODES:,} supported")


def _cluster_from_config(cfg: ClusterFile, path: Path) -> ClusterSpec:
    _check_size(path, sum(g.count for g in cfg.node_groups))
    names, cpu, mem, gpus, models, switch = [], [], [], [], [], []
    next_switch = 0
    for gi, g in enumerate(cfg.node_groups):
        prefix = g.name_prefix or f"{cfg.name}-g{gi}"
        per_switch = g.nodes_per_switch or g.count
        idx = np.arange(g.count)
        names += [f"{prefix}-{i:04d}" for i in idx]
        cpu.append(np.full(g.count, g.cpu_milli))
        mem.append(np.full(g.count, g.memory_mib))
        gpus.append(np.full(g.count, g.gpus))
        models += [g.gpu_model if g.gpus > 0 else ""] * g.count
        switch.append(next_switch + idx // per_switch)  # each group starts on a fresh switch
        next_switch += -(-g.count // per_switch)
    if len(set(names)) != len(names):
        raise InputError(
            path, None, "node_groups", "node names collide; give groups distinct name_prefix values"
        )
    notes = cfg.notes or f"cluster from {path.name}"
    return ClusterSpec.from_arrays(
        name=cfg.name,
        node_names=names,
        cpu_milli=np.concatenate(cpu),
        memory_mib=np.concatenate(mem),
        gpu_count=np.concatenate(gpus),
        gpu_model_names=models,
        switch_id=np.concatenate(switch),
        notes=notes,
    )


def _loc_text(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _yaml_line(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest YAML node along a pydantic error location."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        child = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == str(part):
                    child = value
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            child = node.value[part]
        if child is None:
            break
        node, line = child, child.start_mark.line + 1
    return line


def peak_concurrent_gpus(submit_s: np.ndarray, duration_s: np.ndarray, num_gpu: np.ndarray) -> int:
    """Most GPUs in use at once if every job started at submission (ends count before starts on ties)."""
    t = np.concatenate([submit_s, submit_s + duration_s])
    delta = np.concatenate([num_gpu, -num_gpu]).astype(np.int64)
    order = np.lexsort((delta, t))
    return int(np.cumsum(delta[order]).max(initial=0))


__all__ = [
    "ClusterFile",
    "NodeGroup",
    "cluster_names",
    "load_cluster",
    "load_cluster_yaml",
    "load_spec_cluster",
    "peak_concurrent_gpus",
    "philly_cluster",
    "read_alibaba_nodes",
    "read_spec_csv",
]
