"""The one list of protocol experiments (``experiments/protocol.py``): each one's name and the module that
registers it. The names are read without importing any experiment (``wattsched --help``, ``wattsched simulate``);
:func:`load` imports the module of one."""

from __future__ import annotations

import importlib

# Experiment name -> its module under wattsched.experiments (importing the module registers the experiment).
EXPERIMENT_MODULES: dict[str, str] = {
    "cedla": "cedla",
    "eaco": "eaco",
    "fgd-pwr": "fgd_pwr",
    "green": "green",
    "hkbu-dag": "hkbu_dag",
    "hkbu-dvfs": "hkbu_dvfs",
    "hkbu-online-pd": "hkbu_online_pd",
    "idle-timeout-sweep": "idle_timeout_sweep",
    "powerflow": "powerflow",
    "whatif": "whatif",
}


def experiment_names() -> list[str]:
    """The protocol experiments' names, sorted (as the registry lists them)."""
    return sorted(EXPERIMENT_MODULES)


def load(name: str) -> None:
    """Import the module that registers the experiment `name` (one of :func:`experiment_names`)."""
    importlib.import_module(f"{__package__}.{EXPERIMENT_MODULES[name]}")


def load_all() -> None:
    for name in EXPERIMENT_MODULES:
        load(name)
