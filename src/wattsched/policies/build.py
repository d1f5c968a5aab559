"""Build a run's scheduler from a few named settings: the one place that turns `--queue`/`--placement` or
`--allocation`/`--round-s` into a :class:`~.contract.Scheduler`, for the simulator, the experiments and the live
services (`wattsched serve ...`) alike.

:class:`SchedulerConfig` is the small typed config it takes; anything with the same attribute names (the
``scheduler`` group of the experiments' ``SimulationConfig``) can be passed instead (:class:`SchedulerSettings`),
so this layer needs nothing from ``experiments/``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.errors import WattschedError
from . import PLACEMENT_POLICIES, QUEUE_POLICIES
from .adapters import QueuePlacementScheduler, RoundScheduler
from .contract import ALLOCATION_POLICIES, Scheduler
from .settings import SettingRule

DEFAULT_ROUND_S = 300.0  # allocation round when neither the config nor the policy sets one


class SchedulerSettings(Protocol):
    """The settings :func:`build_scheduler` reads, by name (the ``scheduler`` group of
    ``experiments.config.SimulationConfig`` has them)."""

    @property
    def queue(self) -> str: ...
    @property
    def placement(self) -> str: ...
    @property
    def allocation(self) -> str | None: ...
    @property
    def round_s(self) -> float | None: ...
    @property
    def round_on_events(self) -> bool | None: ...
    @property
    def energy_budget_kwh(self) -> float | None: ...
    @property
    def energy_budget_until_s(self) -> float | None: ...


@dataclass(frozen=True)
class SchedulerConfig:
    """What a scheduler is built from: a queue + placement pair, or an allocation policy in rounds.

    ``round_s`` None: the policy's published interval, else :data:`DEFAULT_ROUND_S`. ``round_on_events`` None:
    the policy's own choice of deciding on arrivals and completions. ``params`` are run-level settings an
    allocation policy may read at bind time (``BindContext.params``: ``energy_budget_kwh``,
    ``energy_budget_until_s``, ``power_manager``); ``round_s`` is added to them.
    """

    queue: str = "fifo"
    placement: str = "best-fit"
    allocation: str | None = None
    round_s: float | None = None
    round_on_events: bool | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.round_s is not None and not (self.round_s > 0 and math.isfinite(self.round_s)):
            raise WattschedError(f"round_s must be a positive number of seconds, got {self.round_s}")

    @classmethod
    def of(cls, settings: SchedulerSettings, power_manager: str = "always-on") -> SchedulerConfig:
        """The scheduler part of a wider config (``SimulationConfig.scheduler``); `power_manager`: the run's power
        manager (an energy setting), which an allocation policy may plan around (``params``)."""
        params = {
            "energy_budget_kwh": settings.energy_budget_kwh,
            "energy_budget_until_s": settings.energy_budget_until_s,
            "power_manager": power_manager,
        }
        return cls(
            queue=settings.queue,
            placement=settings.placement,
            allocation=settings.allocation,
            round_s=settings.round_s,
            round_on_events=settings.round_on_events,
            params=params,
        )


def build_scheduler(
    config: SchedulerConfig | SchedulerSettings, setting_rule: SettingRule | None = None
) -> Scheduler:
    """The run's scheduler: an allocation policy in rounds (a :class:`RoundScheduler`), or a queue + placement
    pair (a :class:`QueuePlacementScheduler`). `setting_rule`: the run's DVFS setting rule, if any."""
    cfg = config if isinstance(config, SchedulerConfig) else SchedulerConfig.of(config)
    if cfg.allocation is not None:
        policy = ALLOCATION_POLICIES.create(cfg.allocation)
        round_s = cfg.round_s or policy.default_round_s or DEFAULT_ROUND_S
        params = {**cfg.params, "round_s": round_s}
        return RoundScheduler(policy, round_s, cfg.round_on_events, cfg.round_on_events, setting_rule, params)
    queue = QUEUE_POLICIES.create(cfg.queue)
    return QueuePlacementScheduler(queue, PLACEMENT_POLICIES.create(cfg.placement), setting_rule)
