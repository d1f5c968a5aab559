"""GPU setting rules for queue + placement runs: the power limit or SM clock a job gets when it starts.

Allocation policies choose settings themselves (in their :class:`~.contract.Target`); a queue + placement pair
has no such say, so the run's rule picks one per job: the same static setting for every job, or the
energy-optimal power limit of the job's GPU model (``energy.dvfs``, docs/dvfs.md).
"""

from __future__ import annotations

from typing import Any

from ..core.settings import GpuSetting
from ..energy import dvfs


class SettingRule:
    """Maps a job's GPU model to its setting, and records each model's (speed, power scale) for the summary."""

    def __init__(
        self, governor: str = "static", power_limit: float | None = None, sm_clock: float | None = None
    ):
        self.governor = governor
        self.static = GpuSetting(power_limit_fraction=power_limit, sm_clock_fraction=sm_clock)
        self._cache: dict[str, GpuSetting] = {}
        self.responses: dict[str, tuple[float, float]] = {}

    def setting_for(self, gpu: str) -> GpuSetting:
        setting = self._cache.get(gpu)
        if setting is None:
            if self.governor == "energy-optimal":
                setting = GpuSetting(power_limit_fraction=dvfs.energy_optimal_power_limit(gpu))
            else:
                setting = self.static
            self._cache[gpu] = setting
            self.responses[gpu] = dvfs.dvfs_response(gpu, setting)
        return setting

    def describe(self) -> dict[str, Any]:
        return {"governor": self.governor, "responses": {g: list(v) for g, v in self.responses.items()}}
