"""A job's GPU setting (power limit or SM clock), the type every layer passes around.

What a setting does to a job's speed and power is the energy layer's (``energy/dvfs.py`` :func:`dvfs_response`);
this module only says what a setting is, so that the policies, the engine, the backends and the node agent can
name one without importing the DVFS models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import WattschedError


@dataclass(frozen=True)
class GpuSetting:
    """A per-job GPU setting: exactly one field set, or neither (run unconstrained at the maximum)."""

    power_limit_fraction: float | None = None  # PL / PLmax (catalog power_limit_max_w)
    sm_clock_fraction: float | None = None  # f / f_max (catalog sm_clock_max_mhz)

    def __post_init__(self) -> None:
        if self.power_limit_fraction is not None and self.sm_clock_fraction is not None:
            raise WattschedError("GpuSetting: set a power limit or an SM clock, not both")
        for name in ("power_limit_fraction", "sm_clock_fraction"):
            v = getattr(self, name)
            if v is not None and not math.isfinite(v):
                raise WattschedError(f"GpuSetting: {name} must be finite, got {v!r}")


DEFAULT_SETTING = GpuSetting()
