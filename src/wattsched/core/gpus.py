"""GPU catalog: memory, idle and max power, SM-clock and power-limit ranges.

Values come from ``docs/energy-models.md`` §2 and the PWR constants (``docs/fgd-pwr.md`` §7.1; Lettich et al.,
CCGrid'25, Table II). Where the PWR code models a trace code as another GPU (Alibaba G2 -> A10, G3 -> A100) the
entry says so in ``modelled_as`` and copies that GPU's power figures. Minimum SM clocks are the lowest supported
application clocks (spec values, to re-check before publishing).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import UnknownNameError


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_gib: float
    idle_w: float
    max_w: float
    sm_clock_min_mhz: float
    sm_clock_max_mhz: float
    power_limit_min_w: float
    power_limit_max_w: float
    modelled_as: str | None = None
    source: str = ""
    # Draw with a job's CUDA context alive but nothing computing (clock held high): measured where known, else
    # None and `held_draw_w` reconstructs it (docs/energy.md, "GPU power states").
    held_w: float | None = None

    @property
    def held_draw_w(self) -> float:
        """The held-but-not-computing draw: measured, else the H200's measured held share of the dynamic range
        applied to this GPU's range (*reconstructed*)."""
        if self.held_w is not None:
            return self.held_w
        return self.idle_w + HELD_SHARE_OF_RANGE * (self.max_w - self.idle_w)

    @property
    def held_measured(self) -> bool:
        return self.held_w is not None


# H200 measured for this project (h200-colocation-probe, docs/perf.md §9): bare idle 78.1 W (no process, 345 MHz);
# with job contexts alive and nothing computing 163.3 W (gpu-bound run) and 135.2 W (input-bound run), mean 149.3 W.
H200_BARE_W = 78.1
H200_HELD_W = 149.3
H200_MAX_W = 700.0
HELD_SHARE_OF_RANGE = (H200_HELD_W - H200_BARE_W) / (H200_MAX_W - H200_BARE_W)  # 0.114
_MEASURED = "h200-colocation-probe (idle, held; measured) + datasheet (memory, limits)"

_PWR = "PWR constants (docs/fgd-pwr.md §7.1)"
_SPEC = "datasheet (docs/energy-models.md §2)"

GPU_CATALOG: dict[str, GpuModel] = {
    g.name: g
    for g in [
        GpuModel("V100M16", 16, 30, 300, 135, 1530, 150, 300, "V100", _PWR),
        GpuModel("V100M32", 32, 30, 300, 135, 1530, 150, 300, "V100", _PWR),
        GpuModel("V100", 32, 30, 300, 135, 1530, 150, 300, None, _PWR),
        GpuModel("V100-PCIE", 32, 30, 250, 135, 1380, 100, 250, None, _SPEC),
        GpuModel("P100", 16, 25, 250, 544, 1329, 125, 250, None, _PWR),
        GpuModel("T4", 16, 10, 70, 300, 1590, 60, 70, None, _PWR),
        GpuModel("A10", 24, 30, 150, 210, 1695, 100, 150, None, _PWR),
        GpuModel("G2", 24, 30, 150, 210, 1695, 100, 150, "A10", _PWR + "; Alibaba code G2 modelled as A10"),
        GpuModel("A100", 80, 50, 400, 210, 1410, 100, 400, None, _PWR),
        GpuModel("G3", 80, 50, 400, 210, 1410, 100, 400, "A100", _PWR + "; Alibaba code G3 modelled as A100"),
        GpuModel("A100-PCIE", 80, 40, 300, 210, 1410, 150, 300, None, _SPEC + " (idle reconstructed)"),
        GpuModel("H200", 141, H200_BARE_W, H200_MAX_W, 210, 1980, 200, 700, None, _MEASURED, H200_HELD_W),
        GpuModel("H100", 80, 75, 700, 210, 1980, 200, 700, None, _SPEC),
        GpuModel("H100-PCIE", 80, 55, 350, 210, 1755, 200, 350, None, _SPEC + " (idle reconstructed)"),
        GpuModel("A40", 48, 30, 300, 210, 1740, 100, 300, None, _SPEC + " (idle reconstructed)"),
        GpuModel("RTX6000", 24, 25, 260, 300, 1770, 100, 260, None, _SPEC),
    ]
}


def gpu_model(name: str) -> GpuModel:
    try:
        return GPU_CATALOG[name]
    except KeyError:
        raise UnknownNameError("GPU model", name, GPU_CATALOG) from None


def catalog_column(models: tuple[str, ...], attribute: str) -> np.ndarray:
    """One catalog attribute for each model code of a cluster, as a float array indexed by code."""
    return np.array([getattr(gpu_model(m), attribute) for m in models], dtype=np.float64)
