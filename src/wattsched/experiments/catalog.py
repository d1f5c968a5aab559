"""The one list of protocol experiments (``experiments/protocol.py``): importing a module registers it."""

from __future__ import annotations

from . import (  # noqa: F401
    cedla,
    eaco,
    fgd_pwr,
    hkbu_dag,
    hkbu_dvfs,
    hkbu_online_pd,
    idle_timeout_sweep,
    powerflow,
)
