"""The one list of protocol experiments (``experiments/protocol.py``): importing a module registers it."""

from __future__ import annotations

from . import idle_timeout_sweep  # noqa: F401
