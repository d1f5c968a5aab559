"""``sinfo --json``, ``scontrol show nodes --json`` or ``scontrol show nodes`` read into a :class:`SlurmNodes`
(docs/whatif.md §2.7).

Detected by shape: a ``nodes`` list of node records (``sinfo --json`` of Slurm 22.05, whose scontrol has no
``--json``; ``scontrol show nodes --json`` from 23.02), an ``sinfo`` list of node groups (``sinfo --json`` from
23.02), or scontrol's text (``NodeName=... Gres=... RealMemory=...``, any version).
GPU model and count come from each node's GRES (``gpu:a100:4(S:0-1)``, ``gpu:4``); Slurm's GPU type names map to
the GPU catalog case-insensitively (``a100`` -> A100, ``h100`` -> H100), or through ``gpu_map`` for site names
(``{"tesla": "V100"}``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ...core.errors import InputError
from ...core.gpus import GPU_CATALOG
from ..reading import _line_at, read_text_bytes
from ..validate import one_line
from . import SlurmNodes
from ._slurm_text import expand_nodelist

NODE_COLUMNS = ("name", "partitions", "gpu_model", "gpus", "cpus", "memory_mib", "state")

# Slurm type names that differ from the catalog's beyond case (the common gres.conf spellings).
_TYPE_ALIASES = {
    "a100_80gb": "A100", "a100-80gb": "A100", "a100-sxm4-80gb": "A100", "a100_pcie": "A100-PCIE",
    "a100-pcie": "A100-PCIE", "h100_pcie": "H100-PCIE", "h100-pcie": "H100-PCIE", "h100_sxm": "H100",
    "h100-sxm": "H100", "v100_pcie": "V100-PCIE", "v100-pcie": "V100-PCIE", "v100s": "V100", "v100_32gb": "V100",
    "v100_16gb": "V100M16", "tesla_v100": "V100", "tesla_t4": "T4", "rtx_6000": "RTX6000", "quadro_rtx_6000": "RTX6000",
}  # fmt: skip

_GRES_ITEM = re.compile(r"^gpu(?::(?P<type>[^:(]+))?(?::(?P<count>\d+))(?:\((?P<extra>[^)]*)\))?$")


def catalog_gpu_name(slurm_type: str, gpu_map: dict[str, str] | None = None) -> str | None:
    """The catalog name for a Slurm GPU type (case-insensitive, ``gpu_map`` first); None when unknown."""
    low = slurm_type.strip().lower()
    for mapping in (gpu_map or {}, _TYPE_ALIASES):
        for k, v in mapping.items():
            if k.lower() == low:
                return v
    by_lower = {name.lower(): name for name in GPU_CATALOG}
    return by_lower.get(low) or by_lower.get(low.replace("_", "-"))


def parse_gpu_gres(gres: str) -> list[tuple[str, int]]:
    """``[(type, count)]`` of the GPUs in a GRES string (``gpu:a100:4(S:0-1),gpu:v100:2,shard:8`` ->
    ``[("a100", 4), ("v100", 2)]``; an untyped ``gpu:4`` gives type ""). Other GRES are ignored."""
    out: list[tuple[str, int]] = []
    text = (gres or "").strip()
    if text in ("", "(null)", "N/A"):
        return out
    depth, start, items = 0, 0, []
    for i, ch in enumerate(text):  # commas inside "(S:0-1)" do not separate items
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    for item in items:
        item = item.strip()
        if not item.startswith("gpu"):
            continue
        m = _GRES_ITEM.match(item)
        if not m:
            if re.fullmatch(r"gpu(:[^:(]+)?", item):  # a count of 1 may be left out
                out.append((item.split(":", 1)[1] if ":" in item else "", 1))
                continue
            raise ValueError(f"{item!r} is not a GPU GRES (gpu:<type>:<count> or gpu:<count>)")
        out.append((m["type"] or "", int(m["count"])))
    return out


def read_slurm_nodes(path: str | Path, gpu_map: dict[str, str] | None = None) -> SlurmNodes:
    """Read ``scontrol show nodes --json`` or ``sinfo --json`` output."""
    import pandas as pd

    path = Path(path)
    notes: list[str] = []
    partitions: dict[str, list[str]] = {}
    text = _scontrol_text(path)
    doc = {} if text is not None else _load_json(path)
    if text is not None:
        records = _from_scontrol_text(path, text)
        notes.append("read as scontrol show nodes (text) output")
    elif isinstance(doc.get("sinfo"), list):
        records = _from_sinfo(path, doc["sinfo"])
        notes.append("read as sinfo --json output (node groups, Slurm 23.02+)")
    elif isinstance(doc.get("nodes"), list):
        records = [_from_node(path, i, n) for i, n in enumerate(doc["nodes"])]
        notes.append(
            "read as a JSON node list (sinfo --json of Slurm 22.05, scontrol show nodes --json of 23.02+)"
        )
        for p in doc.get("partitions") or []:
            if isinstance(p, dict) and p.get("name"):
                raw_nodes = p.get("nodes")
                if isinstance(raw_nodes, dict):
                    raw_nodes = raw_nodes.get("configured") or ""
                try:
                    partitions[str(p["name"])] = expand_nodelist(str(raw_nodes or ""))
                except ValueError as exc:
                    raise InputError(path, None, f"partitions.{p['name']}.nodes", str(exc)) from None
    else:
        raise InputError(
            path,
            1,
            "nodes",
            "expected scontrol show nodes --json or sinfo --json output (a 'nodes' or 'sinfo' list)",
        )
    if not records:
        raise InputError(path, None, "nodes", "contains no nodes")
    merged: dict[str, dict[str, Any]] = {}
    for rec in records:  # sinfo lists a node once per partition: merge
        old = merged.get(rec["name"])
        if old is None:
            merged[rec["name"]] = rec
        else:
            old["partitions"] = list(dict.fromkeys(old["partitions"] + rec["partitions"]))
    unknown: dict[str, str] = {}
    for rec in merged.values():
        models = []
        total = 0
        for gpu_type, count in rec.pop("gres_gpus"):
            total += count
            if not gpu_type:
                models.append("")
                continue
            name = catalog_gpu_name(gpu_type, gpu_map)
            if name is None:
                unknown.setdefault(gpu_type, rec["name"])
                continue
            models.append(name)
        typed = [m for m in models if m]
        if len(set(typed)) > 1:
            notes.append(
                f"node {rec['name']} has GPUs of several types ({', '.join(sorted(set(typed)))}): "
                f"recorded as {typed[0]}"
            )
        rec["gpu_model"] = typed[0] if typed else ""
        rec["gpus"] = total
        for part in rec["partitions"]:
            partitions.setdefault(part, [])
            if rec["name"] not in partitions[part]:
                partitions[part].append(rec["name"])
    if unknown:
        gpu_type, node = next(iter(unknown.items()))
        known = ", ".join(sorted(GPU_CATALOG))
        raise InputError(
            path, None, f"nodes.{node}.gres",
            f"unknown GPU type {gpu_type!r} on node {node} (known: {known}); map it to a "
            f"catalog model with --gpu-map {gpu_type}=MODEL (gpu_map in code)",
        )  # fmt: skip
    untyped = sorted(r["name"] for r in merged.values() if r["gpus"] and not r["gpu_model"])
    if untyped:
        notes.append(
            f"{len(untyped)} node(s) with untyped GPUs (gres gpu:N), model left empty: {', '.join(untyped[:5])}"
        )
    frame = pd.DataFrame(
        [
            {
                "name": r["name"],
                "partitions": ",".join(r["partitions"]),
                "gpu_model": r["gpu_model"],
                "gpus": int(r["gpus"]),
                "cpus": int(r["cpus"]),
                "memory_mib": int(r["memory_mib"]),
                "state": r["state"],
            }
            for r in merged.values()
        ],
        columns=list(NODE_COLUMNS),
    )
    return SlurmNodes(nodes=frame, partitions=partitions, notes=notes, source=str(path))


def _load_json(path: Path) -> dict:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, None, None, "file not found") from None
    except OSError as exc:
        raise InputError(path, None, None, f"cannot read the file: {one_line(exc.strerror or exc)}") from None
    if not raw.strip():
        raise InputError(path, 1, None, "file is empty")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(path, _line_at(raw, exc.start), None, f"not UTF-8 text: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, None, f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(doc, dict):
        raise InputError(path, 1, None, "expected a JSON object")
    return doc


def _state(value: Any, flags: Any = None) -> str:
    """``IDLE``, ``MIXED+DRAIN``: a string (22.05, with ``state_flags`` apart) or a list (23.02+)."""
    words = [str(v).upper() for v in value] if isinstance(value, list) else [str(value or "").upper()]
    words += [str(f).upper() for f in flags or [] if str(f).upper() not in words]
    return "+".join(w for w in words if w)


def _int(value: Any, where: str, path: Path) -> int:
    if isinstance(value, dict):  # 23.02+: {"set", "infinite", "number"}
        value = value.get("number") if value.get("set", True) else 0
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InputError(path, None, where, f"{value!r} is not a number")
    try:
        return int(float(value))
    except ValueError:
        raise InputError(path, None, where, f"{value!r} is not a number") from None


def _gres(path: Path, where: str, value: Any) -> list[tuple[str, int]]:
    try:
        return parse_gpu_gres(str(value or ""))
    except ValueError as exc:
        raise InputError(path, None, where, str(exc)) from None


def _from_node(path: Path, i: int, node: Any) -> dict[str, Any]:
    if not isinstance(node, dict) or not node.get("name"):
        raise InputError(path, None, f"nodes[{i}].name", "every node needs a name")
    name = str(node["name"])
    where = f"nodes.{name}"
    parts = node.get("partitions") or []
    if isinstance(parts, str):
        parts = [p for p in parts.split(",") if p]
    return {
        "name": name,
        "partitions": [str(p) for p in parts],
        "gres_gpus": _gres(path, f"{where}.gres", node.get("gres")),
        "cpus": _int(node.get("cpus"), f"{where}.cpus", path),
        "memory_mib": _int(node.get("real_memory"), f"{where}.real_memory", path),
        "state": _state(node.get("state"), node.get("state_flags")),
    }


def _scontrol_text(path: Path) -> str | None:
    """The file's text when it is ``scontrol show nodes`` output (not JSON), else None."""
    try:
        head = path.open("rb").read(4096)
    except OSError:
        return None  # _load_json says why
    if head.lstrip()[:1] in (b"{", b"[") or b"NodeName=" not in head:
        return None
    data = read_text_bytes(path, "scontrol or sinfo output")
    return data.decode("utf-8")


_KEY_VALUE = re.compile(r"(?:^|\s)([A-Za-z_]+)=(\S*)")


def _from_scontrol_text(path: Path, text: str) -> list[dict[str, Any]]:
    """Records of ``scontrol show nodes`` (several lines per node, or one with ``-o``)."""
    out = []
    starts = [m.start() for m in re.finditer(r"(?m)^NodeName=", text)]
    if not starts:
        raise InputError(path, 1, "NodeName", "expected scontrol show nodes output (NodeName=...)")
    for k, start in enumerate(starts):
        block = text[start : starts[k + 1] if k + 1 < len(starts) else len(text)]
        line = text.count("\n", 0, start) + 1
        fields = dict(_KEY_VALUE.findall(block))
        name = fields.get("NodeName", "")
        where = f"nodes.{name}"
        try:
            gpus = parse_gpu_gres(fields.get("Gres", ""))
        except ValueError as exc:
            raise InputError(path, line, f"{where}.Gres", str(exc)) from None
        numbers = {}
        for key in ("CPUTot", "RealMemory"):
            value = fields.get(key, "0")
            if not value.isdigit():
                raise InputError(path, line, f"{where}.{key}", f"{value!r} is not a number")
            numbers[key] = int(value)
        parts = fields.get("Partitions", "")
        out.append(
            {
                "name": name,
                "partitions": [p for p in parts.split(",") if p and p != "(null)"],
                "gres_gpus": gpus,
                "cpus": numbers["CPUTot"],
                "memory_mib": numbers["RealMemory"],
                "state": fields.get("State", "").upper(),
            }
        )
    return out


def _from_sinfo(path: Path, groups: list) -> list[dict[str, Any]]:
    out = []
    for i, group in enumerate(groups):
        where = f"sinfo[{i}]"
        if not isinstance(group, dict):
            raise InputError(path, None, where, "expected an object")
        names = (group.get("nodes") or {}).get("nodes") or []
        partition = (group.get("partition") or {}).get("name") or ""
        gres = (group.get("gres") or {}).get("total") or ""
        cpus = (group.get("cpus") or {}).get("maximum") or (group.get("cpus") or {}).get("total") or 0
        memory = (group.get("memory") or {}).get("maximum") or 0
        state = _state((group.get("node") or {}).get("state"))
        gpus = _gres(path, f"{where}.gres.total", gres)
        for name in names:
            out.append(
                {
                    "name": str(name),
                    "partitions": [str(partition)] if partition else [],
                    "gres_gpus": list(gpus),
                    "cpus": _int(cpus, f"{where}.cpus", path),
                    "memory_mib": _int(memory, f"{where}.memory", path),
                    "state": state,
                }
            )
    return out


__all__ = ["NODE_COLUMNS", "catalog_gpu_name", "parse_gpu_gres", "read_slurm_nodes"]
