"""Shared vocabulary of a run: job status, the phase of a job holding GPUs, and node power states."""

from __future__ import annotations

# Job status (one per job, in the job table).
STATUS_FUTURE, STATUS_PENDING, STATUS_RUNNING, STATUS_DONE, STATUS_UNSCHEDULABLE, STATUS_DROPPED = range(6)
STATUS_NAMES = ("not_arrived", "pending", "running", "completed", "unschedulable", "dropped")

# What a job that holds GPUs is doing: making progress, or restoring a checkpoint (no progress, GPUs held).
PHASE_RUNNING, PHASE_RESTARTING, PHASE_RELEASED = 0, 1, 2
PHASE_NAMES = ("running", "restarting", "released")

# Node power states. Only ON nodes receive work.
ON, OFF, BOOTING, SHUTTING_DOWN = 0, 1, 2, 3
POWER_STATE_NAMES = ("on", "off", "booting", "shutting_down")
