"""Policies register themselves by name on import; importing this package loads every built-in policy."""

from . import placement as _placement  # noqa: F401  (registers placement baselines)
from . import queue as _queue  # noqa: F401  (registers queue baselines)
from .base import PLACEMENT_POLICIES, QUEUE_POLICIES, PlacementPolicy, QueuePolicy

__all__ = ["PLACEMENT_POLICIES", "QUEUE_POLICIES", "PlacementPolicy", "QueuePolicy"]
