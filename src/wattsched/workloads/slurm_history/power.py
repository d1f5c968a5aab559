"""Per-GPU power over time, joined to a Slurm history's jobs (docs/whatif.md §2, "Power").

Formats read:

- Prometheus text exposition with timestamps, several scrapes concatenated: ``DCGM_FI_DEV_POWER_USAGE`` samples
  as dcgm-exporter and wattsched's node agent (``wattsched agent``, the same metric name and labels) write them,
  ``DCGM_FI_DEV_POWER_USAGE{gpu="0",Hostname="node1",...} 250.3 1700000000000`` (timestamp in ms; OpenMetrics
  seconds and ``promtool tsdb dump``'s ``{__name__="DCGM_FI_DEV_POWER_USAGE",...}`` lines too). The node is the
  ``Hostname`` label (else ``instance`` without its port); other metrics and comments are skipped.
- CSV with a header ``timestamp,node,gpu,power_w`` (timestamp in epoch seconds or ISO 8601, UTC when zoneless).

:func:`attach_power` fills ``recorded.measured_power_w``: sacct does not record which GPUs of a node a job held,
so every sample of every GPU of the job's nodes taken while it ran counts, and a GPU whose node ran several jobs
at that time is shared between them (each of those jobs sees the sample) — the mean is the node's mean GPU draw
while the job ran, an estimate that is exact for jobs that had their nodes to themselves.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ...core.errors import InputError
from ..reading import read_table, read_text_bytes
from ..validate import RowValidator
from . import SlurmHistory, SlurmNodes
from ._slurm_text import expand_nodelist

POWER_METRICS = ("DCGM_FI_DEV_POWER_USAGE",)  # dcgm-exporter's name, also exported by wattsched's agent
POWER_COLUMNS = ("timestamp_s", "node", "gpu", "power_w")

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)?(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)"
    r"(?:\s+(?P<ts>-?\d+(?:\.\d+)?))?\s*$"
)
# Prometheus text writes timestamps in ms, OpenMetrics (promtool tsdb dump-openmetrics) in s: a value above this
# (year 5138 in seconds, 1973 in ms) is taken as ms.
_MS_ABOVE = 1e11
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def read_power(path: str | Path, fmt: str = "auto"):
    """Power samples as a frame of ``timestamp_s`` (epoch s), ``node``, ``gpu`` (int), ``power_w``.

    ``fmt``: ``auto`` (CSV when the first line names the columns), ``prometheus`` or ``csv``.
    """
    path = Path(path)
    data = read_text_bytes(path, "a power file")
    if not data.strip():
        raise InputError(path, 1, None, "file is empty")
    if fmt == "auto":
        first = data.lstrip().split(b"\n", 1)[0].decode("utf-8").strip().lower()
        fmt = "csv" if first.replace(" ", "").startswith("timestamp,") else "prometheus"
    if fmt == "csv":
        return _read_csv(path, data)
    if fmt == "prometheus":
        return _read_prometheus(path, data)
    raise ValueError(f"fmt must be auto, prometheus or csv, got {fmt!r}")


def _read_prometheus(path: Path, data: bytes):
    import pandas as pd

    stamps, nodes, gpus, watts = [], [], [], []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        m = _SAMPLE.match(text)
        if not m:
            raise InputError(
                path, number, None, "not a Prometheus sample line (name{labels} value [timestamp])"
            )
        labels = dict(_LABEL.findall(m["labels"] or ""))
        name = m["name"] or labels.get("__name__", "")  # promtool tsdb dump: {__name__="...", ...}
        if not name:
            raise InputError(
                path, number, None, "not a Prometheus sample line (name{labels} value [timestamp])"
            )
        if name not in POWER_METRICS:
            continue
        node = labels.get("Hostname") or labels.get("instance", "").rsplit(":", 1)[0]
        if not node:
            raise InputError(path, number, "Hostname", "a power sample needs a Hostname (or instance) label")
        if "gpu" not in labels or not labels["gpu"].isdigit():
            raise InputError(
                path, number, "gpu", f"a power sample needs a numeric gpu label, got {labels.get('gpu')!r}"
            )
        if m["ts"] is None:
            raise InputError(
                path, number, "timestamp", "a sample without a timestamp cannot be placed in time"
            )
        try:
            value = float(m["value"])
        except ValueError:
            raise InputError(path, number, name, f"{m['value']!r} is not a number") from None
        stamp = float(m["ts"])
        stamps.append(stamp / 1000.0 if stamp > _MS_ABOVE else stamp)
        nodes.append(node)
        gpus.append(int(labels["gpu"]))
        watts.append(value)
    if not stamps:
        raise InputError(path, None, None, f"no {POWER_METRICS[0]} samples with timestamps")
    return pd.DataFrame({"timestamp_s": stamps, "node": nodes, "gpu": gpus, "power_w": watts})


def _read_csv(path: Path, data: bytes):
    import pandas as pd

    df, lines = read_table(path, data=data)
    df.columns = [c.lower() for c in df.columns]
    for col in ("timestamp", "node", "gpu", "power_w"):
        if col not in df.columns:
            raise InputError(path, 1, col, f"missing required column (found: {', '.join(df.columns)})")
    v = RowValidator(path, lines)
    raw_ts = df["timestamp"]
    numeric = pd.to_numeric(raw_ts, errors="coerce").to_numpy(dtype=np.float64)
    iso = v.timestamp(raw_ts.where(np.isnan(numeric), "1970-01-01"), "timestamp")
    ts = np.where(np.isnan(numeric), iso, numeric)
    gpu = v.number(df["gpu"], "gpu", integer=True)
    power = v.number(df["power_w"], "power_w")
    v.flag(power < 0, "power_w", "power must be non-negative, got {value}", power)
    v.flag(df["node"].str.strip().to_numpy() == "", "node", "missing value")
    v.finish(skip_invalid=False)
    return pd.DataFrame(
        {"timestamp_s": ts, "node": df["node"].str.strip().to_numpy(dtype=object), "gpu": gpu.astype(np.int64),
         "power_w": power}
    )  # fmt: skip


def attach_power(history: SlurmHistory, power_samples, nodes: SlurmNodes | None = None) -> SlurmHistory:
    """Fill ``history.recorded.measured_power_w`` (mean W per GPU over each job's run) from power samples.

    ``power_samples``: a frame from :func:`read_power`, or a path to read. ``nodes`` (optional) checks that the
    sampled nodes are cluster nodes and counts GPUs that sent no sample. Returns the same history, updated.
    """
    import pandas as pd

    if not isinstance(power_samples, pd.DataFrame):
        power_samples = read_power(power_samples)
    rec = history.recorded
    origin = pd.Timestamp(history.time_origin_utc).timestamp()
    samples = power_samples.sort_values("timestamp_s", kind="stable")
    t = samples["timestamp_s"].to_numpy(dtype=np.float64) - origin
    # Per node: sample times and cumulative power (prefix sums give each job's window sum in O(log n)).
    by_node: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for node, idx in samples.groupby("node", sort=False).indices.items():
        times = t[idx]
        csum = np.concatenate(([0.0], np.cumsum(samples["power_w"].to_numpy(dtype=np.float64)[idx])))
        by_node[str(node)] = (times, csum)
    measured = np.full(len(rec), np.nan)
    missing_nodes: set[str] = set()
    start = rec["start_s"].to_numpy(dtype=np.float64)
    end = rec["end_s"].to_numpy(dtype=np.float64)
    lists = rec["node_list"].to_numpy(dtype=object)
    for i in np.flatnonzero(np.isfinite(start) & np.isfinite(end)):  # one job at a time; O(log n) per node
        total = count = 0.0
        for node in expand_nodelist(str(lists[i])):
            entry = by_node.get(node)
            if entry is None:
                missing_nodes.add(node)
                continue
            times, csum = entry
            lo = np.searchsorted(times, start[i], side="left")
            hi = np.searchsorted(times, end[i], side="right")
            total += csum[hi] - csum[lo]
            count += hi - lo
        if count:
            measured[i] = total / count
    rec["measured_power_w"] = measured
    n = int(np.isfinite(measured).sum())
    history.notes.append(
        f"measured_power_w for {n} of {len(rec)} jobs: the mean of every GPU sample on the job's nodes during its run "
        "(sacct does not record GPU indices; jobs sharing a node share its samples)"
    )
    if nodes is not None:
        known = set(nodes.nodes["name"])
        stray = sorted(set(by_node) - known)
        if stray:
            history.notes.append(
                f"power samples from nodes not in the node list ignored for the check: {', '.join(stray[:5])}"
            )
    if missing_nodes:
        history.notes.append(
            f"{len(missing_nodes)} node(s) of jobs have no power samples: {', '.join(sorted(missing_nodes)[:5])}"
        )
    return history


__all__ = ["POWER_COLUMNS", "POWER_METRICS", "attach_power", "read_power"]
