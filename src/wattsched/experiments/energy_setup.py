"""Build the energy layer of a temporal run from its config: power model, power manager, governor, signals."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from ..core.jobs import JobTable
from ..energy.ledger import EnergyLedger
from ..energy.power_models import POWER_MODELS
from ..energy.power_states import POWER_MANAGERS, NodePowerController
from ..energy.utilisation import job_gpu_load
from ..engine.observers import Observer
from .config import SimulationConfig


class FrequencyGovernor(Observer):
    """Sets each job's power limit or SM clock when it starts (dvfs power model): the job runs at the model's
    speed factor and its GPUs draw the scaled dynamic power. Settings are static (one for every job) or the
    energy-optimal power limit of the job's GPU model."""

    def __init__(self, cfg: SimulationConfig, power_scale: np.ndarray):
        from ..energy import dvfs

        self.dvfs = dvfs
        self.cfg = cfg
        self.power_scale = power_scale
        self._cache: dict[str, tuple[float, float]] = {}

    def _response(self, gpu: str) -> tuple[float, float]:
        if gpu not in self._cache:
            d = self.dvfs
            if self.cfg.governor == "energy-optimal":
                setting = d.GpuSetting(power_limit_fraction=d.energy_optimal_power_limit(gpu))
            else:
                setting = d.GpuSetting(
                    power_limit_fraction=self.cfg.gpu_power_limit, sm_clock_fraction=self.cfg.gpu_sm_clock
                )
            self._cache[gpu] = d.dvfs_response(gpu, setting)
        return self._cache[gpu]

    def on_job_start(self, sim, job: int) -> None:
        placement = sim.placements[job]
        code = int(sim.spec.gpu_model_code[placement[0][0]])
        if code < 0 or not placement[0][1]:
            return  # CPU-only job: no GPU setting
        speed, scale = self._response(sim.spec.gpu_models[code])
        self.power_scale[job] = scale
        if speed != 1.0:
            sim.set_rate(job, speed)

    def describe(self) -> dict[str, Any]:
        return {"governor": self.cfg.governor, "responses": {g: list(v) for g, v in self._cache.items()}}


@dataclass
class EnergySetup:
    observers: list[Observer]
    ledger: EnergyLedger
    controller: NodePowerController
    governor: FrequencyGovernor | None
    price: Any
    carbon: Any
    notes: list[str] = field(default_factory=list)

    def summary(self, allocated_gpu_seconds: float) -> dict[str, Any]:
        out = self.ledger.summary(allocated_gpu_seconds)
        out.update(self.controller.summary())
        info: dict[str, Any] = {
            "power_model": self.ledger.model.name,
            "node_base_w": self.ledger.node_base_w,
            "pue": self.ledger.pue,
            "power_states": self.controller.config.model_dump(),
        }
        if self.governor is not None:
            info["dvfs"] = self.governor.describe()
        if self.price is not None:
            info["price"] = self.price.describe()
        if self.carbon is not None:
            info["carbon"] = self.carbon.describe()
        out["energy_model"] = info
        return out


def _signals(cfg: SimulationConfig, trace_start: datetime | None, notes: list[str]):
    if cfg.region is None:
        notes.append("no --region given: cost_usd and co2_kg are not computed")
        return None, None
    from ..energy import signals

    price = carbon = None
    kw = {"rule": cfg.align, "grid_start": cfg.grid_start, "wrap": cfg.wrap}
    fill = {"max_gap_hours": cfg.signal_max_gap_hours, "fill": cfg.signal_fill}
    if cfg.region in signals.price_catalog():
        price_signal = signals.load_price(cfg.region, cfg.year, cfg.data_dir, to_usd=True, **fill)
        price = signals.align(price_signal, trace_start, **kw)
    else:
        notes.append(f"no electricity price series for {cfg.region}: cost_usd is not computed")
    carbon_signal = signals.load_carbon(cfg.region, cfg.year, cfg.data_dir, kind=cfg.carbon_kind, **fill)
    carbon = signals.align(carbon_signal, trace_start, **kw)
    return price, carbon


def build_energy(cfg: SimulationConfig, jobs: JobTable, trace_start: datetime | None) -> EnergySetup:
    model = POWER_MODELS.create(cfg.power_model)
    manager = POWER_MANAGERS.create(cfg.power_manager)
    notes: list[str] = []
    if manager.reconstructed:
        notes.append(f"power manager '{manager.name}' is a reconstruction: {manager.basis}")
    base = model.default_node_base_w if cfg.node_base_w is None else cfg.node_base_w
    controller = NodePowerController(manager, cfg.power_states)
    power_scale = None
    governor = None
    if cfg.power_model == "dvfs":
        power_scale = np.ones(len(jobs))
        governor = FrequencyGovernor(cfg, power_scale)
    price, carbon = _signals(cfg, trace_start, notes)
    ledger = EnergyLedger(
        model,
        job_gpu_load(jobs),
        node_base_w=base,
        pue=cfg.pue,
        controller=controller,
        off_power_w=cfg.power_states.off_power_w,
        price=price,
        carbon=carbon,
        power_scale=power_scale,
    )
    observers: list[Observer] = [controller] + ([governor] if governor else []) + [ledger]
    return EnergySetup(observers, ledger, controller, governor, price, carbon, notes)
