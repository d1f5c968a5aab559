"""Policies register themselves by name on import; importing this package loads every built-in policy."""

from . import fgd as _fgd  # noqa: F401  (registers fgd)
from . import placement as _placement  # noqa: F401  (registers placement baselines)
from . import pwr as _pwr  # noqa: F401  (registers pwr and the pwr_W1_fgd_W2 family)
from . import queue as _queue  # noqa: F401  (registers queue baselines)
from .base import PLACEMENT_POLICIES, QUEUE_POLICIES, PlacementPolicy, QueuePolicy

__all__ = ["PLACEMENT_POLICIES", "QUEUE_POLICIES", "PlacementPolicy", "QueuePolicy"]
