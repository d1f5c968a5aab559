"""The energy-budget arithmetic that ``powerflow`` and ``wattsched-green`` share (docs/powerflow.md, "Budget";
docs/green.md, "Energy budget").

A run's budget is ``energy_budget_kwh`` for the whole run (``BindContext.params``, or the policy's own setting),
kept against the energy metered so far (``view.energy_used_j``, so a budget needs ``meters-energy``), optionally
up to ``energy_budget_until_s``. Before any job starts, a budget below the run's floor (the least dynamic energy
of all the work plus the least static draw, as each policy models its own levers) is refused with the floor
named. Each policy decides what to do with what is left; this module only holds the numbers and the rules both
apply alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...core.errors import WattschedError
from ..contract import Capability, ClusterView

J_PER_KWH = 3.6e6
# The loop's multiplier on a forecast: measured / forecast energy so far, cumulative over the run, within these
# bounds (reconstructed, docs/powerflow.md).
MULTIPLIER_BOUNDS = (0.5, 3.0)
# Power managers that keep every node on: under them the static draw over the arrival span is part of the floor.
NODES_STAY_ON = frozenset({"always-on"})


class BudgetBelowFloorError(WattschedError):
    """The energy budget is below what the run must use whatever the policy does."""


def budget_j(energy_budget_kwh: float | None) -> float:
    """The budget in joules; inf without one."""
    return math.inf if energy_budget_kwh is None else float(energy_budget_kwh) * J_PER_KWH


def bound_budget(
    params: Mapping[str, Any], budget: float, until_s: float | None
) -> tuple[float, float | None]:
    """(budget J, window end s) once bound: the run's ``energy_budget_kwh`` and ``energy_budget_until_s``
    (``BindContext.params``) override the policy's own settings."""
    if params.get("energy_budget_kwh") is not None:
        budget = float(params["energy_budget_kwh"]) * J_PER_KWH
    if params.get("energy_budget_until_s") is not None:
        until_s = float(params["energy_budget_until_s"])
    return budget, until_s


def needs_meter(params: Mapping[str, Any], budget: float) -> frozenset[Capability]:
    """A budget is kept against the energy used so far: a meter, where one is given."""
    budgeted = params.get("energy_budget_kwh") is not None or math.isfinite(budget)
    return frozenset({Capability.METERS_ENERGY}) if budgeted else frozenset()


def left_j(budget: float, view: ClusterView) -> float:
    """Energy the run may still use (inf without a budget): the budget less the metered energy so far."""
    if math.isinf(budget):
        return math.inf
    return max(budget - (view.energy_used_j() or 0.0), 0.0)


def bounded_multiplier(actual_j: float, forecast_j: float, current: float) -> float:
    """actual / forecast within ``MULTIPLIER_BOUNDS``; `current` while nothing was forecast yet."""
    if forecast_j <= 0:
        return current
    return min(max(actual_j / forecast_j, MULTIPLIER_BOUNDS[0]), MULTIPLIER_BOUNDS[1])


def least_static_j(
    nodes_stay_on: bool,
    static_now_w: float,
    span_s: float,
    node_static_w: float,
    gpus_per_node: int,
    least_gpu_s: float,
) -> float:
    """The least static energy of the run: every node on, the static draw now over the shortest span the run can
    last; idle nodes off, a node's static draw per GPU over the work's least GPU-seconds."""
    if nodes_stay_on:
        return static_now_w * max(span_s, 0.0)
    return node_static_w / gpus_per_node * least_gpu_s


def refuse_below_floor(budget: float, dynamic_j: float, static_j: float) -> float:
    """The floor (kWh) of a run whose least dynamic and static energy are given; a finite `budget` below it is
    refused with the floor named."""
    floor_kwh = (dynamic_j + static_j) / J_PER_KWH
    budget_kwh = budget / J_PER_KWH
    if budget_kwh < floor_kwh:
        raise BudgetBelowFloorError(
            f"energy budget {budget_kwh:.3f} kWh is below this run's floor of {floor_kwh:.3f} kWh "
            f"(least dynamic energy of the work {dynamic_j / J_PER_KWH:.3f} kWh"
            + (f" + the least static draw {static_j / J_PER_KWH:.3f} kWh" if static_j else "")
            + "): give a larger --energy-budget-kwh"
        )
    return floor_kwh


def budget_kwh_or_none(budget: float) -> float | None:
    return None if math.isinf(budget) else budget / J_PER_KWH


def floor_or_none(floor_kwh: float | None) -> float | None:
    return None if floor_kwh is None or math.isnan(floor_kwh) else floor_kwh


def budget_binding(budget: float, rounds_bound: int) -> bool | None:
    """Whether the budget changed a decision (None without a budget)."""
    return None if math.isinf(budget) else rounds_bound > 0
