"""Build the energy layer of a temporal run from its config: power model, node power control, ledger, signals."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..core.gpus import gpu_model
from ..energy.power_models import POWER_MODELS
from ..engine.ledger import EnergyLedger
from ..engine.power import NodePower
from ..policies.power import power_manager_from_config
from ..policies.settings import SettingRule
from .config import SimulationConfig


@dataclass
class EnergySetup:
    ledger: EnergyLedger
    power: NodePower
    setting_rule: SettingRule | None
    price: Any
    carbon: Any
    notes: list[str] = field(default_factory=list)

    def summary(self, allocated_gpu_seconds: float) -> dict[str, Any]:
        out = self.ledger.summary(allocated_gpu_seconds)
        out.update(self.power.summary())
        info: dict[str, Any] = {
            "power_model": self.ledger.model.name,
            "node_base_w": self.ledger.node_base_w,
            "pue": self.ledger.pue,
            "power_states": self.power.config.model_dump(),
            "gpu_held_w": self._held_draws(),
        }
        if self.setting_rule is not None:
            info["dvfs"] = self.setting_rule.describe()
        if self.price is not None:
            info["price"] = self.price.describe()
        if self.carbon is not None:
            info["carbon"] = self.carbon.describe()
        out["energy_model"] = info
        # The draw after the run's own end, to charge it over a common window when compared (experiments/window).
        out["tail_power"] = self.ledger.tail().to_dict()
        return out

    def _held_draws(self) -> dict[str, dict[str, Any]]:
        """Per GPU type of the cluster: the draw of a GPU held without computing, and where it comes from."""
        model = self.ledger.model
        out = {}
        for name in model.spec.gpu_models:
            g = gpu_model(name)
            if model.name == "binary":
                out[name] = {"w": g.max_w, "basis": "TDP: the PWR model charges any allocation at TDP"}
            elif name in model.measured_held_w:
                out[name] = {"w": model.measured_held_w[name], "basis": "measured: the run's profiles"}
            else:
                basis = "measured" if g.held_measured else "reconstructed: idle + 0.114 x (max - idle)"
                out[name] = {"w": g.held_draw_w, "basis": basis}
        return out

    def use_measured_held(self, profiles) -> None:
        """Take each GPU type's held draw from the run's profiles where they measured it (measured beats
        modelled); the binary model keeps charging TDP."""
        if profiles is None or self.ledger.model.name == "binary":
            return
        for gpu in profiles.gpus():
            held = profiles.held_w(gpu)
            if held is not None:
                self.ledger.model.measured_held_w[gpu] = held


def load_grid_signals(cfg: SimulationConfig, notes: list[str]) -> tuple[Any, Any]:
    """The run's price and carbon series as read and cleaned (None where not configured), not yet aligned: a
    caller that aligns them to several starts (a live service) reads the files once."""
    from ..energy.signals.catalog import price_catalog
    from ..energy.signals.clean import load_carbon, load_price
    from ..energy.signals.csv_files import load_csv_signal

    sig = cfg.signals
    fill: dict[str, Any] = {"max_gap_hours": sig.signal_max_gap_hours, "fill": sig.signal_fill}
    if sig.price_csv or sig.carbon_csv:  # the user's own market, CSV by CSV; a region fills in neither
        out: list[Any] = []
        for kind, path in (("price", sig.price_csv), ("carbon", sig.carbon_csv)):
            if path is None:
                notes.append(
                    f"no --{kind}-csv given: {'cost_usd' if kind == 'price' else 'co2_kg'} is not computed"
                )
                out.append(None)
                continue
            signal = load_csv_signal(path, kind, sig.year, sig.signal_tz, carbon=sig.carbon_kind, **fill)
            notes.extend(f"--{kind}-csv {Path(path).name}: {note}" for note in signal.report["notes"])
            out.append(signal)
        return out[0], out[1]
    if sig.region is None:
        notes.append("no --region given: cost_usd and co2_kg are not computed")
        return None, None
    price = None
    if sig.region in price_catalog():
        price = load_price(sig.region, sig.year, cfg.data_dir, to_usd=True, **fill)
    else:
        notes.append(f"no electricity price series for {sig.region}: cost_usd is not computed")
    carbon = load_carbon(sig.region, sig.year, cfg.data_dir, kind=sig.carbon_kind, **fill)
    return price, carbon


def align_grid_signals(
    cfg: SimulationConfig, loaded: tuple[Any, Any], trace_start: datetime | None
) -> tuple[Any, Any]:
    """:func:`load_grid_signals`' series aligned to `trace_start` by the run's rule."""
    from ..energy.signals.alignment import align

    sig = cfg.signals
    kw: dict[str, Any] = {"rule": sig.align, "grid_start": sig.grid_start, "wrap": sig.wrap}
    price, carbon = loaded
    return (
        None if price is None else align(price, trace_start, **kw),
        None if carbon is None else align(carbon, trace_start, **kw),
    )


def grid_signals(cfg: SimulationConfig, trace_start: datetime | None, notes: list[str]) -> tuple[Any, Any]:
    """The run's price and carbon series (None where not configured), aligned to `trace_start`."""
    return align_grid_signals(cfg, load_grid_signals(cfg, notes), trace_start)


def build_energy(cfg: SimulationConfig, trace_start: datetime | None) -> EnergySetup:
    e = cfg.energy
    model = POWER_MODELS.create(e.power_model)
    manager = power_manager_from_config(e.power_manager, e.power_states)
    notes: list[str] = []
    if manager.reconstructed:
        notes.append(f"power manager '{manager.name}' is a reconstruction: {manager.basis}")
    base = model.default_node_base_w if e.node_base_w is None else e.node_base_w
    power = NodePower(manager, e.power_states)
    setting_rule = None
    if e.power_model == "dvfs":
        setting_rule = SettingRule(e.governor, e.gpu_power_limit, e.gpu_sm_clock)
    price, carbon = grid_signals(cfg, trace_start, notes)
    ledger = EnergyLedger(
        model,
        node_base_w=base,
        pue=e.pue,
        controller=power,
        off_power_w=e.power_states.off_power_w,
        price=price,
        carbon=carbon,
    )
    return EnergySetup(ledger, power, setting_rule, price, carbon, notes)
