"""wattsched's own record of the live jobs it started, in a small sqlite file (docs/live-slurm.md §3).

A start is written (state ``starting``, with its placement) and committed *before* the cluster manager is asked to
run the job, and marked ``released`` after. After a restart of wattsched the record says which jobs it already
let go, so none is started twice; a job still held in the cluster manager with a ``starting`` record was never let
go, and may be started again. The cluster manager keeps its own queue across its restarts (Slurm's
StateSaveLocation), so no job is lost either way.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from ..core.errors import WattschedError
from ..core.placement import NodeShare, Placement

STATES = ("waiting", "starting", "released", "running", "requeued", "finished", "rejected")


class JobStore:
    def __init__(self, path: str | Path):
        self.path = str(path)
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None)  # autocommit: every write is durable
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, state TEXT NOT NULL, "
                "placement TEXT, starts INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL)"
            )
        except sqlite3.Error as exc:
            raise WattschedError(f"state database {self.path}: {exc}") from None

    def record_start(self, job_id: str, placement: Placement, state: str) -> None:
        """A start of `job_id` on `placement`, counted (``starts``) before the cluster manager is asked."""
        text = json.dumps([[n, list(g), c, m] for n, g, c, m in placement])
        self.db.execute(
            "INSERT INTO jobs (job_id, state, placement, starts, updated) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(job_id) DO UPDATE SET state = excluded.state, placement = excluded.placement, "
            "starts = starts + (excluded.state = 'starting'), updated = excluded.updated",
            (job_id, state, text, int(state == "starting"), time.time()),
        )

    def mark(self, job_id: str, state: str) -> None:
        if state not in STATES:
            raise ValueError(f"unknown job state {state!r}")
        self.db.execute(
            "INSERT INTO jobs (job_id, state, updated) VALUES (?, ?, ?) "
            "ON CONFLICT(job_id) DO UPDATE SET state = excluded.state, updated = excluded.updated",
            (job_id, state, time.time()),
        )

    def placement(self, job_id: str) -> Placement | None:
        row = self.db.execute("SELECT placement FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        if row is None or row[0] is None:
            return None
        return tuple(
            NodeShare(int(n), tuple(int(x) for x in g), int(c), int(m)) for n, g, c, m in json.loads(row[0])
        )

    def starts(self) -> dict[str, int]:
        """How many times each job was let go (a requeued job may be started again)."""
        return {str(j): int(n) for j, n in self.db.execute("SELECT job_id, starts FROM jobs")}

    def close(self) -> None:
        self.db.close()
