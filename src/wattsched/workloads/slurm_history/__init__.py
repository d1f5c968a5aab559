"""An operator's own Slurm history, read from the files Slurm itself writes (docs/whatif.md).

- ``sacct.py``: ``read_sacct(path, fmt="auto")`` reads ``sacct --parsable2`` (with the documented field list) or
  ``sacct --json`` output into a :class:`SlurmHistory`: job steps folded into their job, array and heterogeneous
  jobs handled, states mapped and counted.
- ``nodes.py``: ``read_slurm_nodes(path)`` reads ``scontrol show nodes --json`` or ``sinfo --json`` into a
  :class:`SlurmNodes`: nodes, partitions, GPU types and counts from GRES, CPUs and memory.
- ``power.py``: per-GPU power over time (Prometheus text exposition or CSV, DCGM exporter or wattsched agent
  metric names), joined to jobs through their nodes and GPU indices into measured per-job power.

The what-if (``experiments/whatif.py``, ``wattsched whatif``) uses only the two types below: the replay reads
``jobs_csv`` and ``cluster_yaml`` written by ``write_inputs``, and the replay check compares the baseline's run
against ``recorded``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# Canonical job states after mapping (sacct's State column, e.g. "CANCELLED by 1000" -> CANCELLED).
JOB_STATES = (
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "REQUEUED", "NODE_FAIL", "RUNNING", "PENDING",
    "OUT_OF_MEMORY", "DEADLINE", "BOOT_FAIL", "SUSPENDED", "OTHER",
)  # fmt: skip

# Columns of SlurmHistory.recorded, one row per job (steps folded), times in seconds on the replay's clock
# (0 = the earliest submission, which is SlurmHistory.time_origin_utc).
RECORDED_COLUMNS = (
    "job_id",  # str: the job's id as the replay's job table names it (JobIDRaw of the job, or array "123_4")
    "user",  # str
    "account",  # str ("" when not recorded)
    "partition",  # str
    "state",  # str: one of JOB_STATES
    "submit_s",  # float
    "start_s",  # float, NaN when the job never started
    "end_s",  # float, NaN when it has not ended
    "wait_s",  # float: start_s - submit_s
    "elapsed_s",  # float: run time as recorded (Elapsed)
    "timelimit_s",  # float, NaN when unlimited or not recorded
    "num_gpu",  # int: GPUs allocated (AllocTRES gres/gpu, else ReqTRES)
    "num_nodes",  # int
    "node_list",  # str: Slurm's NodeList as recorded ("gpu[01-02]")
    "energy_j",  # float: ConsumedEnergyRaw, NaN when no energy plugin recorded it
    "measured_power_w",  # float: mean power per GPU over the job's run from the power file, NaN without one
)


@dataclass
class SlurmHistory:
    """Jobs from sacct: what the replay runs, and what actually happened, on one clock."""

    recorded: pd.DataFrame  # RECORDED_COLUMNS, one row per job
    time_origin_utc: str  # ISO 8601 instant of t = 0
    state_counts: dict[str, int] = field(default_factory=dict)  # jobs per mapped state
    notes: list[str] = field(default_factory=list)  # every assumption made while reading, for the run's notes
    source: str = ""  # the file read


@dataclass
class SlurmNodes:
    """Nodes from scontrol/sinfo JSON."""

    nodes: (
        pd.DataFrame
    )  # name, partitions ("a,b"), gpu_model (catalog name or ""), gpus, cpus, memory_mib, state
    partitions: dict[str, list[str]] = field(default_factory=dict)  # partition -> node names
    notes: list[str] = field(default_factory=list)
    source: str = ""


def write_inputs(history: SlurmHistory, nodes: SlurmNodes, out_dir: Path) -> tuple[Path, Path]:
    """Write the replay's inputs: a generic job CSV (docs/data-formats.md §2) and a cluster YAML; returns
    ``(jobs_csv, cluster_yaml)``. Implemented in ``inputs.py``."""
    from .inputs import write_replay_inputs

    return write_replay_inputs(history, nodes, out_dir)
