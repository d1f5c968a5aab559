"""Policies register themselves by name on import; importing this package loads every built-in policy."""

from . import allocation as _allocation  # noqa: F401  (registers the allocation policies)
from . import buddy as _buddy  # noqa: F401  (registers buddy)
from . import fgd as _fgd  # noqa: F401  (registers fgd)
from . import placement as _placement  # noqa: F401  (registers placement baselines)
from . import planning as _planning  # noqa: F401  (registers consolidated placement)
from . import power as _power  # noqa: F401  (registers power managers)
from . import pwr as _pwr  # noqa: F401  (registers pwr and the pwr_W1_fgd_W2 family)
from . import queue as _queue  # noqa: F401  (registers queue baselines)
from .base import PLACEMENT_POLICIES, QUEUE_POLICIES, PlacementPolicy, QueuePolicy
from .contract import ALLOCATION_POLICIES, POWER_MANAGERS, AllocationPolicy

__all__ = [
    "ALLOCATION_POLICIES",
    "PLACEMENT_POLICIES",
    "POWER_MANAGERS",
    "QUEUE_POLICIES",
    "AllocationPolicy",
    "PlacementPolicy",
    "QueuePolicy",
]
