"""`wattsched experiment green`: ``wattsched-green`` with every mechanism, with each one off in turn (ablation),
and every seed policy and baseline, on one trace and one market, under the honest-comparison rules
(docs/green.md).

* one job model (``experiments/jobmodel.py``): every run has the same workload, deadlines, services, cluster,
  performance model (tables), power model (``dvfs``, so that policies that set clocks and those that do not are
  costed alike: at the default setting it draws what ``linear`` does) and signals; only the policy differs;
* one power manager for every run (``--power-manager``, idle-timeout by default): a policy's right-sizing is what
  it asks of that manager (deferrals, headroom);
* one common accounting window (the protocol's ``charge``).

It then says, for each seed and baseline, whether ``wattsched-green`` dominates it on (energy, mean JCT) and on
(cost, mean JCT) (no worse on both, better on one) and by how much, with deadline misses and SLO-violating hours
beside, what each mechanism contributes (its ablation against the full policy), and plots energy and cost against
mean JCT with the Pareto front. The tables and the plot are in ``green_tables.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ..core.errors import UnknownNameError, WattschedError
from ..policies.allocation.green import (
    DEFAULT_KWH_PER_JOB_HOUR,
    DEFAULT_MAX_SLOWDOWN,
    DEFAULT_MAX_STRETCH,
    DEFAULT_SCALE_TOLERANCE,
    DEFAULT_USD_PER_JOB_HOUR,
    DEFAULT_USD_PER_TONNE_CO2,
    MECHANISMS,
    green_name,
)
from ..policies.allocation.green_colocate import DEFAULT_COLOCATION_BOUND
from .config import SimulationConfig, same_setting
from .grid import require_times
from .jobmodel import require_one_job_model
from .protocol import EXPERIMENTS, Cell, Experiment, Outcome, Section

GREEN = "wattsched-green"
# Each seed system and baseline at its documented settings (docs/baselines.md, docs/seed-systems.md): the
# policy keys of the run's config.
SEEDS: dict[str, dict[str, Any]] = {
    "pwr-fgd": {"queue": "fifo", "placement": "pwr_200_fgd_800"},
    "eaco": {"allocation": "eaco"},
    "powerflow": {"allocation": "powerflow"},
    "cedla": {"allocation": "cedla"},
    "hkbu-dvfs": {"allocation": "hkbu-dvfs"},
    "hkbu-online-pd": {"allocation": "hkbu-online-pd"},
}
BASELINES: dict[str, dict[str, Any]] = {
    "fifo": {"queue": "fifo", "placement": "best-fit"},
    "tiresias": {"allocation": "tiresias"},
    "zeus-pl": {"allocation": "zeus-pl"},
}
COMPARED = {**SEEDS, **BASELINES}


class GreenConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workload: str = Field("philly", description="training workload name or CSV path")
    cluster: str = Field("philly", description="cluster name or YAML path")
    region: str = Field("US-CAL-CISO", description="price and carbon region (ignored with --price-csv)")
    year: int = Field(2023, description="price and carbon year")
    max_jobs: int | None = Field(
        None, ge=0, description="keep the first N training jobs by submission (0: all)"
    )
    deadline_slack: float = Field(3.0, description="training deadline = submit + slack x duration")
    services: str | None = Field(
        "default", description="inference services: 'default' or a rates CSV (none: training jobs only)"
    )
    power_manager: str = Field("idle-timeout", description="the one power manager of every run")
    usd_per_job_hour: float = Field(
        DEFAULT_USD_PER_JOB_HOUR,
        ge=0,
        description="wattsched-green weight: dollars one job-hour of delay is worth",
    )
    max_slowdown: float = Field(
        DEFAULT_MAX_SLOWDOWN,
        ge=0,
        lt=1,
        description="wattsched-green weight: the most a slower clock stretches a job",
    )
    scale_tolerance: float = Field(
        DEFAULT_SCALE_TOLERANCE,
        ge=0,
        lt=1,
        description="wattsched-green weight: the most extra energy per unit of work a wider GPU count may cost",
    )
    max_stretch: float = Field(
        DEFAULT_MAX_STRETCH,
        ge=0,
        description="wattsched-green weight: the most a narrower GPU count (shrink) stretches a job's run, as a "
        "fraction of it",
    )
    kwh_per_job_hour: float = Field(
        DEFAULT_KWH_PER_JOB_HOUR,
        ge=0,
        description="wattsched-green weight: kWh one job-hour of delay is worth (shrink's trade of energy for JCT)",
    )
    colocation_bound: float = Field(
        DEFAULT_COLOCATION_BOUND,
        ge=0,
        description="wattsched-green weight: the most co-location (colocate) may stretch either job's run, as a "
        "fraction of it",
    )
    usd_per_tonne_co2: float = Field(
        DEFAULT_USD_PER_TONNE_CO2,
        ge=0,
        description="wattsched-green weight: dollars one tonne of CO2 is worth (price-shift values the carbon a "
        "later start saves at this price, beside the money)",
    )
    energy_budget_kwh: float | None = Field(
        None,
        gt=0,
        description="an energy budget of the whole run, given to every run alike (kept by the budget-aware "
        "policies: powerflow and wattsched-green)",
    )
    ablation: bool = Field(True, description="also run wattsched-green with each mechanism off in turn")
    compared: list[str] = Field(
        default_factory=lambda: list(COMPARED),
        description="comma-separated seeds and baselines: " + ", ".join(COMPARED),
    )
    profiles: str | None = same_setting("profiles")
    columns: dict[str, str] = same_setting("columns")
    price_csv: str | None = Field(
        None, description="your own market: hourly prices (time, price_usd_per_mwh)"
    )
    carbon_csv: str | None = Field(
        None, description="with --price-csv: hourly carbon (time, carbon_g_per_kwh)"
    )
    signal_tz: str = Field("UTC", description="time zone of --price-csv / --carbon-csv")
    signal_fill: Literal["hold", "interpolate"] | None = Field(None, description="fill long signal gaps")
    signal_max_gap_hours: int = Field(6, ge=0, description="longest signal gap interpolated")
    data_dir: str | None = same_setting("data_dir")


def green_variants(cfg: GreenConfig) -> dict[str, str]:
    """Label -> registered policy name of the wattsched-green runs: the full policy, then each mechanism off."""
    w, s, g = cfg.usd_per_job_hour, cfg.max_slowdown, cfg.scale_tolerance
    x, k, c = cfg.max_stretch, cfg.kwh_per_job_hour, cfg.usd_per_tonne_co2
    weights = {
        "usd_per_job_hour": None if w == DEFAULT_USD_PER_JOB_HOUR else w,
        "max_slowdown": None if s == DEFAULT_MAX_SLOWDOWN else s,
        "scale_tolerance": None if g == DEFAULT_SCALE_TOLERANCE else g,
        "max_stretch": None if x == DEFAULT_MAX_STRETCH else x,
        "kwh_per_job_hour": None if k == DEFAULT_KWH_PER_JOB_HOUR else k,
        "colocation_bound": None
        if cfg.colocation_bound == DEFAULT_COLOCATION_BOUND
        else cfg.colocation_bound,
        "usd_per_tonne_co2": None if c == DEFAULT_USD_PER_TONNE_CO2 else c,
    }
    out = {GREEN: green_name((), **weights)}
    if cfg.ablation:
        out.update({f"{GREEN} -{m}": green_name((m,), **weights) for m in MECHANISMS})
    return out


def run_config(cfg: GreenConfig, policy: dict[str, Any]) -> SimulationConfig:
    own = cfg.price_csv is not None
    return SimulationConfig(
        workload=cfg.workload,
        columns=dict(cfg.columns),
        cluster=cfg.cluster,
        region=None if own else cfg.region,
        year=cfg.year,
        price_csv=cfg.price_csv,
        carbon_csv=cfg.carbon_csv,
        signal_tz=cfg.signal_tz,
        signal_fill=cfg.signal_fill,
        signal_max_gap_hours=cfg.signal_max_gap_hours,
        deadline_slack=cfg.deadline_slack,
        services=None if cfg.services in (None, "", "none") else cfg.services,
        max_jobs=cfg.max_jobs or None,
        data_dir=cfg.data_dir,
        performance="tables",  # one job model for queue + placement and allocation policies alike
        assign_models="always",  # every run has the models the model-driven policies need
        profiles=cfg.profiles,
        power_model="dvfs",
        power_manager=cfg.power_manager,
        energy_budget_kwh=cfg.energy_budget_kwh,
        **policy,
    )


@EXPERIMENTS.register("green")
class Green(Experiment):
    name = "green"
    description = (
        "wattsched-green (every mechanism, and each one off in turn) against every seed policy and baseline on one "
        "trace and market: energy and cost against mean JCT, the Pareto front, and which seeds it dominates."
    )
    config_model = GreenConfig

    def grid(self, cfg: BaseModel) -> list[Cell]:
        from .run import load_inputs

        assert isinstance(cfg, GreenConfig)
        for name in cfg.compared:
            if name not in COMPARED:
                raise UnknownNameError("seed or baseline", name, list(COMPARED))
        if cfg.deadline_slack < 1:
            raise WattschedError(f"--deadline-slack must be at least 1, got {cfg.deadline_slack}")
        runs = {label: {"allocation": name} for label, name in green_variants(cfg).items()}
        runs.update({name: COMPARED[name] for name in dict.fromkeys(cfg.compared)})
        configs = {label: run_config(cfg, policy) for label, policy in runs.items()}
        require_one_job_model(configs, "experiment green")
        require_times(load_inputs(next(iter(configs.values()))), cfg.workload)
        kind = {
            label: "green" if label.startswith(GREEN) else ("seed" if label in SEEDS else "baseline")
            for label in runs
        }
        return [Cell({"variant": label, "kind": kind[label]}, c) for label, c in configs.items()]

    def start_order(self, cells: Sequence[Cell]) -> list[int]:
        slow = ("powerflow", "eaco")  # the slowest runs first keep the workers busy to the end
        return sorted(range(len(cells)), key=lambda i: cells[i].keys["variant"] not in slow)

    def run_cell(self, cell: Cell) -> Outcome:
        from ..core.states import STATUS_DONE, STATUS_NAMES
        from .compare import reconstruction_bases, summary_metrics
        from .run import run_simulation
        from .window import window_input

        assert cell.config is not None
        label = cell.keys["variant"]
        try:
            result = run_simulation(cell.config)
        except WattschedError as exc:  # name the run; a plain message pickles across processes
            raise WattschedError(f"{label}: {exc}") from None
        s, jobs = result.summary, result.jobs
        training = (jobs["status"] == STATUS_NAMES[STATUS_DONE]) & (jobs["job_class"] == "training")
        metrics = summary_metrics(s)
        # Mean JCT of the training jobs (services run by the hour: their "JCT" is their hour).
        metrics["jct_mean_s"] = float(jobs.loc[training, "jct_s"].mean())
        metrics["deadline_misses"] = float(s.get("deadline_misses", 0) or 0)
        metrics["slo_violation_hours"] = float(s.get("slo_violation_hours", 0) or 0)
        # Totals cover only the work a run completed: a policy that drops jobs is charged for less of it.
        metrics["training_jobs_completed"] = float(training.sum())
        knobs = {k: v for k, v in COMPARED.get(label, {}).items() if isinstance(v, str)}
        extra = {
            "node_boots": int(s.get("node_boots", 0) or 0),
            "wall_s": float(s.get("wall_time_s", 0.0) or 0.0),
        }
        return Outcome(metrics, label, reconstruction_bases(knobs), extra, window_input(s))

    def headline(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[str]:
        from .green_tables import headline_lines

        return headline_lines(records)

    def sections(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[Section]:
        from .green_tables import summary_sections

        return summary_sections(records)

    def tables(
        self, cfg: BaseModel, cells: Sequence[Cell], outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from .green_tables import write_tables

        return write_tables(out, cells, outcomes)

    def plots(
        self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from .green_tables import write_pareto_plot

        return [write_pareto_plot(out, records)]
