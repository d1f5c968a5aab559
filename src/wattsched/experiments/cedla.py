"""`wattsched experiment cedla`: CE-DLA-reconstructed against price-unaware and DRS-less baselines, per region
(docs/cedla.md §6).

Five configurations of the same engine, on the Philly training trace plus the built-in inference services, with
deadlines at submit + slack x duration:

* ``price-unaware-always-on``: strict FIFO, best-fit, every node on;
* ``price-unaware-drs``: the same FIFO with idle-timeout dynamic right-sizing (no headroom);
* ``price-unaware-drs-forecast``: the same FIFO with the ``forecast`` power manager, the strongest DRS the project
  has (a buffer of nodes sized from recent and day-ago demand), as the price-unaware DRS baseline;
* ``price-aware-no-drs``: the ``cedla`` planner with every node on;
* ``cedla``: the planner with idle-timeout right-sizing (its deferrals and headroom drive the power manager).

Each runs per region on that region's day-ahead prices and carbon intensity of one year (or on a user's own
market), and the runs of one region are charged over one common accounting window. The saving is split into the
part that comes from shifting work to cheaper hours and the part from switched-off nodes.

Outputs in DIR: the protocol's ``records.csv``, ``summary.md`` and ``config.yaml``; ``results.csv`` (one row per
policy and region, the experiment's own columns); ``cost.png``, ``price_vs_power.png`` and ``nodes_on.png``. The
summary's parts and the figures are in ``cedla_tables.py``.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ..core.errors import UnknownNameError, WattschedError
from ..core.states import STATUS_DONE, STATUS_NAMES
from .config import SimulationConfig, same_setting
from .grid import check_policy_names, require_times, thinned, write_results
from .jobmodel import require_one_job_model
from .protocol import EXPERIMENTS, Cell, Experiment, Outcome, Section

REGIONS = ("US-CAL-CISO", "US-NY-NYIS", "US-MIDA-PJM", "DE-LU")
BASELINE = "price-unaware-always-on"
POLICIES: dict[str, dict[str, Any]] = {
    BASELINE: {"queue": "fifo", "placement": "best-fit", "power_manager": "always-on"},
    "price-unaware-drs": {"queue": "fifo", "placement": "best-fit", "power_manager": "idle-timeout"},
    # The strongest DRS the project has: the forecast buffer, with the run's forecast settings (the same fields,
    # at their defaults, that every run of the grid gets), beside the plain idle timeout above.
    "price-unaware-drs-forecast": {"queue": "fifo", "placement": "best-fit", "power_manager": "forecast"},
    "price-aware-no-drs": {"allocation": "cedla", "power_manager": "always-on"},
    "cedla": {"allocation": "cedla", "power_manager": "idle-timeout"},
}
DEFAULT_SLACK = 3.0  # deadline = submit + 3 x duration (reconstructed; ElasticFlow-style, docs/cedla.md §1.3)
WEEK_S = 7 * 86400.0
SERIES_POINTS = 4000


@dataclass(frozen=True)
class Signals:
    """Where prices and carbon come from: the region's series, or a user's own market (hourly CSVs), and the gap
    rules (docs/signals.md)."""

    price_csv: str | None = None
    carbon_csv: str | None = None
    signal_tz: str = "UTC"
    signal_fill: str | None = None
    signal_max_gap_hours: int = 6

    def own_market(self) -> str | None:
        """The region label of a user's own market, None for the built-in regions."""
        return None if self.price_csv is None else f"own:{Path(self.price_csv).name}"


@dataclass(frozen=True)
class Setup:
    workload: str
    cluster: str
    year: int
    deadline_slack: float
    services: str
    max_jobs: int | None
    data_dir: str | None
    signals: Signals = field(default_factory=Signals)
    columns: dict[str, str] = field(default_factory=dict)  # of a generic job CSV workload
    profiles: str | None = None  # measured profiles (docs/perf.md §9), the same for every run

    def config(self, policy: str, region: str) -> SimulationConfig:
        return SimulationConfig(
            workload=self.workload,
            columns=self.columns,
            cluster=self.cluster,
            region=None if self.signals.own_market() else region,
            year=self.year,
            **asdict(self.signals),
            deadline_slack=self.deadline_slack,
            services=self.services,
            max_jobs=self.max_jobs,
            data_dir=self.data_dir,
            performance="tables",  # one job model for queue + placement and allocation policies alike
            profiles=self.profiles,
            **POLICIES[policy],
        )


class CedlaConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    region: str | None = Field(
        None, description="one region (default: US-CAL-CISO, US-NY-NYIS, US-MIDA-PJM and DE-LU)"
    )
    year: int = Field(2023, description="price and carbon year")
    policies: list[str] = Field(
        default_factory=lambda: list(POLICIES),
        description="comma-separated: price-unaware-always-on, price-unaware-drs, price-unaware-drs-forecast, "
        "price-aware-no-drs, cedla",
    )
    workload: str = Field("philly", description="training workload name or CSV path")
    cluster: str = Field("philly", description="cluster name or YAML path")
    deadline_slack: float = Field(
        DEFAULT_SLACK, description="training deadline = submit + slack x duration (reconstructed)"
    )
    services: str = Field(
        "default", description="inference services: 'default' or a rates CSV (hour, <service>...)"
    )
    max_jobs: int | None = Field(
        None, ge=0, description="keep the first N training jobs by submission (0: all)"
    )
    # The same options as simulate's, from the same config fields.
    profiles: str | None = same_setting("profiles")
    columns: dict[str, str] = same_setting("columns")
    price_csv: str | None = Field(
        None,
        description="your own market instead of --region: hourly prices (time, price_usd_per_mwh; or a GreenDCC "
        "standardized or processed price file, recognised by header)",
    )
    carbon_csv: str | None = Field(
        None,
        description="with --price-csv: hourly carbon intensity (time, carbon_g_per_kwh; or an Electricity Maps "
        "hourly file)",
    )
    signal_tz: str = Field("UTC", description="time zone of --price-csv / --carbon-csv")
    signal_fill: Literal["hold", "interpolate"] | None = Field(
        None, description="fill signal gaps longer than --signal-max-gap-hours: hold | interpolate"
    )
    signal_max_gap_hours: int = Field(6, ge=0, description="longest signal gap interpolated")
    data_dir: str | None = same_setting("data_dir")


@dataclass
class RunRecord:
    policy: str
    region: str
    cost_usd: float
    energy_kwh: float
    co2_kg: float
    deadline_misses: int
    slo_violation_hours: int
    slo_violation_requests: float
    mean_jct_s: float
    usd_per_kwh: float
    gpu_allocation: float
    node_hours_off: float
    node_boots: int
    wall_s: float
    week_t: list[float] = field(default_factory=list, repr=False)
    week_power_kw: list[float] = field(default_factory=list, repr=False)
    week_price: list[float] = field(default_factory=list, repr=False)
    series_t: list[float] = field(default_factory=list, repr=False)
    series_nodes_on: list[float] = field(default_factory=list, repr=False)
    own_window_kwh: float = float("nan")  # up to the run's own last completion; energy_kwh: the common window
    window_input: dict = field(default_factory=dict, repr=False)
    jobs_submitted: int = field(default=0, repr=False)  # training jobs and service-hours, for the summary


# A run record's fields that are not results.csv columns.
HIDDEN = {
    "week_t",
    "week_power_kw",
    "week_price",
    "series_t",
    "series_nodes_on",
    "window_input",
    "jobs_submitted",
}


def run_record(cfg: SimulationConfig, policy: str, region: str) -> RunRecord:
    from .run import run_simulation
    from .window import window_input

    started = time.perf_counter()
    try:
        result = run_simulation(cfg)
    except WattschedError as exc:  # name the run; a plain message pickles across processes
        raise WattschedError(f"{policy} in {region}: {exc}") from None
    s, jobs, series = result.summary, result.jobs, result.series
    training = (jobs["status"] == STATUS_NAMES[STATUS_DONE]) & (jobs["job_class"] == "training")
    t = series["time_s"].to_numpy(dtype=float)
    power = series["power_w"].to_numpy(dtype=float) / 1000.0
    price = series["price_usd_per_mwh"].to_numpy(dtype=float)
    on = series["nodes_on"].to_numpy(dtype=float) if "nodes_on" in series else np.full(t.size, np.nan)
    week = (t >= t[0]) & (t <= t[0] + WEEK_S) if t.size else np.zeros(0, dtype=bool)
    wk = np.flatnonzero(week)
    wk = wk[thinned(wk.size, SERIES_POINTS)]
    keep = thinned(t.size, SERIES_POINTS)
    energy = float(s["energy_kwh"])
    return RunRecord(
        policy=policy,
        region=region,
        cost_usd=float(s["cost_usd"]),
        energy_kwh=energy,
        co2_kg=float("nan") if s.get("co2_kg") is None else float(s["co2_kg"]),  # NaN: no carbon series
        deadline_misses=int(s.get("deadline_misses", 0)),
        slo_violation_hours=int(s.get("slo_violation_hours", 0)),
        slo_violation_requests=float(s.get("slo_violation_requests", 0.0)),
        mean_jct_s=float(jobs.loc[training, "jct_s"].mean()),
        usd_per_kwh=float(s["cost_usd"]) / energy if energy else float("nan"),
        gpu_allocation=float(s["gpu_allocation_mean"]),
        node_hours_off=float(s.get("node_hours_off", 0.0)),
        node_boots=int(s.get("node_boots", 0)),
        wall_s=time.perf_counter() - started,
        week_t=t[wk].tolist(),
        week_power_kw=power[wk].tolist(),
        window_input=window_input(s),
        week_price=price[wk].tolist(),
        series_t=t[keep].tolist(),
        series_nodes_on=on[keep].tolist(),
        jobs_submitted=int(s["jobs_submitted"]),
    )


def regions_of(cfg: CedlaConfig) -> list[str]:
    """The regions run, in order: the user's own market, the one `--region`, or all four."""
    own = signals_of(cfg).own_market()
    return [own] if own else list(dict.fromkeys([cfg.region] if cfg.region else REGIONS))


def check_regions(regions: Sequence[str], year: int) -> list[str]:
    """Every region must be one of the experiment's and have prices and carbon for `year` (errors list them)."""
    from ..energy.signals.catalog import carbon_catalog, check_region_year, price_catalog

    for r in regions:
        if r not in REGIONS:
            raise UnknownNameError("CE-DLA experiment region", r, list(REGIONS))
        check_region_year("price", price_catalog(), r, year)
        check_region_year("carbon", carbon_catalog(), r, year)
    return list(dict.fromkeys(regions))


def check_policies(names: Sequence[str]) -> list[str]:
    return check_policy_names(names, list(POLICIES), BASELINE, "every saving is measured against it")


def signals_of(cfg: CedlaConfig) -> Signals:
    return Signals(cfg.price_csv, cfg.carbon_csv, cfg.signal_tz, cfg.signal_fill, cfg.signal_max_gap_hours)


def setup_of(cfg: CedlaConfig) -> Setup:
    return Setup(
        cfg.workload, cfg.cluster, cfg.year, cfg.deadline_slack, cfg.services, cfg.max_jobs or None,
        cfg.data_dir, signals_of(cfg), dict(cfg.columns), cfg.profiles,
    )  # fmt: skip


def results_frame(records: Sequence[RunRecord], regions: Sequence[str]) -> pd.DataFrame:
    """One row per policy and region: regions in the order run, policies in the order of POLICIES."""
    order = {p: i for i, p in enumerate(POLICIES)}
    ordered = sorted(records, key=lambda r: (regions.index(r.region), order[r.policy]))
    return pd.DataFrame([{k: v for k, v in asdict(r).items() if k not in HIDDEN} for r in ordered])


@EXPERIMENTS.register("cedla")
class Cedla(Experiment):
    name = "cedla"
    description = (
        "CE-DLA-reconstructed vs price-unaware FIFO (always on, or with DRS) and the planner without DRS, per "
        "region."
    )
    config_model = CedlaConfig

    def grid(self, cfg: BaseModel) -> list[Cell]:
        from .run import load_inputs

        assert isinstance(cfg, CedlaConfig)
        names = check_policies(cfg.policies)
        regs = regions_of(cfg) if signals_of(cfg).own_market() else check_regions(regions_of(cfg), cfg.year)
        if cfg.deadline_slack < 1:
            raise WattschedError(f"--deadline-slack must be at least 1, got {cfg.deadline_slack}")
        setup = setup_of(cfg)
        inputs = load_inputs(setup.config(names[0], regs[0]))  # fail early on missing data
        for r in regs:  # the policies of one region are compared: one job model
            require_one_job_model({p: setup.config(p, r) for p in names}, f"cedla in {r}")
        require_times(inputs, cfg.workload)
        tasks = [(p, r) for r in regs for p in names]
        tasks.sort(
            key=lambda t: t[0] not in ("cedla", "price-aware-no-drs")
        )  # slowest first keeps workers busy
        # `variant` names the run's row of POLICIES (its policy label too): the label of a records row is its keys.
        return [Cell({"variant": p, "region": r}, setup.config(p, r)) for p, r in tasks]

    def window_group(self, keys: dict[str, Any]) -> Hashable:
        return keys["region"]

    def run_cell(self, cell: Cell) -> Outcome:
        from .compare import reconstruction_bases

        assert cell.config is not None
        r = run_record(cell.config, cell.keys["variant"], cell.keys["region"])
        metrics = {
            "energy_kwh": r.energy_kwh, "own_window_kwh": float("nan"), "cost_usd": r.cost_usd, "co2_kg": r.co2_kg,
            "jct_mean_s": r.mean_jct_s, "gpu_allocation": r.gpu_allocation,
            "deadline_misses": float(r.deadline_misses), "slo_violation_hours": float(r.slo_violation_hours),
        }  # fmt: skip
        extra = {
            "node_hours_off": float(f"{r.node_hours_off:.6g}"),
            "node_boots": r.node_boots,
        }  # as in the CSV
        return Outcome(metrics, r.policy, reconstruction_bases(POLICIES[r.policy]), extra, r.window_input, r)

    def charge(self, cells: Sequence[Cell], outcomes: Sequence[Outcome]) -> str:
        """The common window of each region's runs, charged on the run records themselves (results.csv is
        written from them); the price paid per kWh follows the charged cost and energy."""
        line = self.charge_records(cells, [o.raw for o in outcomes], "region")
        for o in outcomes:
            r = o.raw
            r.usd_per_kwh = r.cost_usd / r.energy_kwh if r.energy_kwh else float("nan")
            assert o.metrics is not None
            o.metrics.update(
                energy_kwh=r.energy_kwh, own_window_kwh=r.own_window_kwh, cost_usd=r.cost_usd, co2_kg=r.co2_kg
            )
        return line

    def tables(
        self, cfg: BaseModel, cells: Sequence[Cell], outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        assert isinstance(cfg, CedlaConfig)
        write_results(out, results_frame([o.raw for o in outcomes], regions_of(cfg)))
        return [out / "results.csv"]

    def headline(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[str]:
        from .cedla_tables import headline_lines

        return headline_lines(records)

    def sections(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[Section]:
        from .cedla_tables import summary_sections

        assert isinstance(cfg, CedlaConfig)
        return summary_sections(cfg, records, [o.raw for o in outcomes])

    def plots(
        self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from .cedla_tables import write_plots

        assert isinstance(cfg, CedlaConfig)
        return write_plots(out, [o.raw for o in outcomes], regions_of(cfg))
