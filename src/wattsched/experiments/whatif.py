"""`wattsched whatif` / `wattsched experiment whatif`: an operator's own Slurm history replayed under its own policy
and under the energy-aware policies of the repository (docs/whatif.md).

The history (``sacct`` output) and the nodes (``scontrol show nodes --json`` / ``sinfo --json``) are read by
``workloads/slurm_history`` and written as a generic job CSV and a cluster YAML (``write_inputs``); every cell of
the grid is one simulation of those two files, all on one job model (recorded run times, the DVFS-capable linear
power model, the same price and carbon signals, the same deadlines) and charged over one common accounting window.
The variants (:data:`VARIANTS`):

* ``baseline``: FIFO with EASY backfilling, best-fit, every node always on: Slurm's default scheduler
  (``sched/backfill``) as the engine has it;
* ``right-sizing``: the same, with idle nodes switched off after ``idle_timeout_s`` (``idle-timeout``);
* ``power-cap``: the same, with each job's GPUs at the energy-optimal power limit of their model (``governor:
  energy-optimal``, Zeus-fitted curves, docs/dvfs.md);
* ``power-cap-deadline`` (on request): HKBU-DVFS, EDF starts with each job at the least-energy power limit that
  meets its deadline (``allocation: hkbu-dvfs``);
* ``pwr-fgd``: the same queue with the PWR+FGD placement (``pwr_200_fgd_800``, docs/fgd-pwr.md);
* ``price-shift``: CE-DLA's price-aware plan over the day-ahead prices (``allocation: cedla``), every node on;
* ``co-location``: EaCO's energy-aware GPU sharing, only with measured profiles (``--profiles``).

The replay check (``whatif_tables.replay_check``) compares the baseline's start times, waiting and energy with
what the history recorded. Per-partition and per-group tables split each run's figures by the jobs' partitions and
users (or accounts).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ..core.errors import WattschedError
from .config import SimulationConfig, same_setting
from .jobmodel import require_one_job_model
from .protocol import EXPERIMENTS, Cell, Experiment, Outcome, Section

if TYPE_CHECKING:
    from ..workloads.slurm_history import SlurmHistory, SlurmNodes
    from .run import RunResult

BASELINE = "baseline"
PWR_FGD = "pwr_200_fgd_800"  # the published PWR+FGD weighting (docs/fgd-pwr.md §8)
DEFAULT_REGION = "US-CAL-CISO"
# Variant -> the scheduler and energy settings it changes (everything else is the shared job model).
VARIANTS: dict[str, dict[str, Any]] = {
    BASELINE: {"queue": "backfill", "placement": "best-fit", "power_manager": "always-on"},
    "right-sizing": {"queue": "backfill", "placement": "best-fit", "power_manager": "idle-timeout"},
    "power-cap": {
        "queue": "backfill", "placement": "best-fit", "power_manager": "always-on", "governor": "energy-optimal",
    },
    "power-cap-deadline": {"allocation": "hkbu-dvfs", "power_manager": "always-on"},
    "pwr-fgd": {"queue": "backfill", "placement": PWR_FGD, "power_manager": "always-on"},
    "price-shift": {"allocation": "cedla", "power_manager": "always-on"},
    "co-location": {"allocation": "eaco", "power_manager": "always-on"},
}  # fmt: skip
NEEDS_PROFILES = frozenset({"co-location"})
NOT_BY_DEFAULT = frozenset({"co-location", "power-cap-deadline"})
WHAT_EACH_IS: dict[str, str] = {
    BASELINE: "FIFO + EASY backfill, best-fit, always on (Slurm's default)",
    "right-sizing": "idle nodes off after the idle timeout, booted on demand",
    "power-cap": "each job's GPUs at their model's energy-optimal power limit",
    "power-cap-deadline": "HKBU-DVFS: EDF starts, each job at the least-energy power limit that meets its deadline",
    "pwr-fgd": f"PWR+FGD placement ({PWR_FGD})",
    "price-shift": "CE-DLA price-aware plan (deferrable work moved to cheap hours)",
    "co-location": "EaCO GPU co-location on measured profiles",
}


class WhatIfConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sacct: str = Field("", description="sacct output: --parsable2 with the documented fields, or --json")
    nodes: str = Field("", description="scontrol show nodes --json or sinfo --json output")
    sacct_format: Literal["auto", "parsable2", "json"] = Field("auto", description="format of --sacct")
    gpu_map: dict[str, str] = Field(
        default_factory=dict,
        description="a site's GPU type name (GRES) to a catalog model, repeatable: --gpu-map tesla=V100",
    )
    power: str | None = Field(
        None, description="per-GPU power over time (Prometheus text or CSV): measured per-job power"
    )
    variants: list[str] = Field(
        default_factory=lambda: [v for v in VARIANTS if v not in NOT_BY_DEFAULT],
        description="comma-separated: baseline, right-sizing, power-cap, power-cap-deadline, pwr-fgd, "
        "price-shift, co-location (co-location needs --profiles; baseline is always run) [default: all but "
        "power-cap-deadline and co-location]",
    )
    region: str | None = Field(
        None, description=f"grid region for prices and carbon [default: {DEFAULT_REGION} unless --price-csv]"
    )
    year: int = Field(2023, description="price and carbon year of --region (same weekday and hour)")
    price_csv: str | None = same_setting("price_csv")
    carbon_csv: str | None = same_setting("carbon_csv")
    tz: str = Field(
        "UTC", description="time zone of sacct's timestamps (it writes local time without a zone)"
    )
    signal_tz: str | None = Field(None, description="time zone of --price-csv / --carbon-csv [default: --tz]")
    idle_timeout_s: float = Field(
        1800.0, gt=0, description="right-sizing: idle time before a node is switched off"
    )
    boot_time_s: float = Field(300.0, ge=0, description="right-sizing: off -> on (boot delay)")
    deadline_slack: float = Field(
        3.0,
        ge=1.0,
        description="deadline = submit + slack x run time, for every job (what price-shift may defer)",
    )
    group_by: Literal["user", "account"] = Field("account", description="the group of the per-group table")
    profiles: str | None = same_setting("profiles")
    inputs_dir: str | None = Field(
        None,
        description="where the job CSV and cluster YAML are written [default: a folder under the temp dir]",
    )
    seed: int = Field(42, description="random seed")
    data_dir: str | None = same_setting("data_dir")


# -- the history, read once per process ------------------------------------------------------------------------
@dataclass
class Loaded:
    history: SlurmHistory
    nodes: SlurmNodes
    jobs_csv: Path
    cluster_yaml: Path


_LOADED: dict[tuple, Loaded] = {}
_GIVEN: dict[tuple[str, str], tuple[SlurmHistory, SlurmNodes]] = {}


def provide_history(sacct: str, nodes_file: str, history: SlurmHistory, nodes: SlurmNodes) -> None:
    """Use `history` and `nodes` for the config naming `sacct` and `nodes_file` instead of reading them (a caller
    that has read them already, and tests)."""
    _GIVEN[(str(sacct), str(nodes_file))] = (history, nodes)
    for key in [k for k in _LOADED if k[:2] == (str(sacct), str(nodes_file))]:
        del _LOADED[key]


def read_history(cfg: WhatIfConfig) -> tuple[SlurmHistory, SlurmNodes]:
    """The history and nodes the config names (read with the slurm_history readers)."""
    from ..workloads.slurm_history.nodes import read_slurm_nodes
    from ..workloads.slurm_history.power import attach_power
    from ..workloads.slurm_history.sacct import read_sacct

    if not cfg.sacct or not cfg.nodes:
        raise WattschedError("whatif needs --sacct FILE and --nodes FILE")
    history = read_sacct(cfg.sacct, cfg.sacct_format, tz=cfg.tz)
    nodes = read_slurm_nodes(cfg.nodes, gpu_map=cfg.gpu_map or None)
    if cfg.power:
        history = attach_power(history, cfg.power, nodes)
    return history, nodes


def load(cfg: WhatIfConfig) -> Loaded:
    """The history read and the replay's inputs written (once per process for one config)."""
    key = (
        cfg.sacct,
        cfg.nodes,
        cfg.sacct_format,
        cfg.tz,
        cfg.power,
        cfg.inputs_dir,
        tuple(sorted(cfg.gpu_map.items())),
    )
    found = _LOADED.get(key)
    if found is not None:
        return found
    from ..workloads.slurm_history import write_inputs

    history, nodes = _GIVEN.get((cfg.sacct, cfg.nodes)) or read_history(cfg)
    out = Path(cfg.inputs_dir) if cfg.inputs_dir else _default_inputs_dir(cfg)
    jobs_csv, cluster_yaml = write_inputs(history, nodes, out)
    found = _LOADED[key] = Loaded(history, nodes, jobs_csv.resolve(), cluster_yaml.resolve())
    return found


def _default_inputs_dir(cfg: WhatIfConfig) -> Path:
    # Named by the inputs' paths, so that a rerun of one command writes to (and resumes from) the same files.
    digest = hashlib.sha256(f"{cfg.sacct}\0{cfg.nodes}\0{cfg.power}".encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"wattsched-whatif-{digest}"


# -- the experiment --------------------------------------------------------------------------------------------
def signal_settings(cfg: WhatIfConfig, time_origin_utc: str) -> dict[str, Any]:
    """Prices and carbon for every run: the operator's own market on the history's own dates (offset alignment), or
    a region's year by weekday and hour."""
    if cfg.price_csv or cfg.carbon_csv:
        if cfg.region:
            raise WattschedError("give --region or --price-csv/--carbon-csv, not both")
        return {
            "price_csv": cfg.price_csv, "carbon_csv": cfg.carbon_csv, "signal_tz": cfg.signal_tz or cfg.tz,
            "align": "offset", "grid_start": time_origin_utc.replace("Z", "+00:00"),
            # The file need only cover the history's dates: the rest of its year is held at the nearest hour.
            "year": int(time_origin_utc[:4]), "signal_fill": "hold", "signal_max_gap_hours": 6,
        }  # fmt: skip
    return {"region": cfg.region or DEFAULT_REGION, "year": cfg.year}


def check_variants(cfg: WhatIfConfig) -> list[str]:
    unknown = [v for v in cfg.variants if v not in VARIANTS]
    if unknown:
        raise WattschedError(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    if not cfg.profiles and any(v in NEEDS_PROFILES for v in cfg.variants):
        raise WattschedError(
            "--variants co-location needs measured profiles (--profiles): EaCO co-locates on them"
        )
    return [BASELINE, *(v for v in VARIANTS if v in cfg.variants and v != BASELINE)]


@EXPERIMENTS.register("whatif")
class WhatIf(Experiment):
    name = "whatif"
    description = (
        "An operator's Slurm history replayed under FIFO + EASY backfill (Slurm's default, the baseline) and "
        "under the energy-aware policies (right-sizing, per-job power capping, PWR+FGD, price shifting, "
        "co-location with measured profiles), on one job model and one common accounting window; the baseline is "
        "checked against what the history recorded."
    )
    config_model = WhatIfConfig

    def grid(self, cfg: BaseModel) -> list[Cell]:
        assert isinstance(cfg, WhatIfConfig)
        variants = check_variants(cfg)
        loaded = load(cfg)
        shared = {
            "workload": str(loaded.jobs_csv),
            "cluster": str(loaded.cluster_yaml),
            "performance": "trace",  # the recorded run times, for every variant alike
            "assign_models": "always" if cfg.profiles else "never",
            "profiles": cfg.profiles,
            "power_model": "dvfs",  # the linear model, which per-job power limits scale (power-cap)
            "deadline_slack": cfg.deadline_slack,
            "seed": cfg.seed,
            "data_dir": cfg.data_dir,
            "energy": True,
            "power_states": {"idle_timeout_s": cfg.idle_timeout_s, "boot_time_s": cfg.boot_time_s},
            **signal_settings(cfg, loaded.history.time_origin_utc),
        }
        cells = [Cell({"variant": v}, SimulationConfig(**shared, **VARIANTS[v])) for v in variants]
        require_one_job_model({c.keys["variant"]: c.config for c in cells}, "whatif")
        return cells

    def raw(self, result: RunResult) -> Any:
        from .whatif_tables import attribute_jobs

        return attribute_jobs(result.jobs, result.series)

    def tables(
        self, cfg: BaseModel, cells: Sequence[Cell], outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        from .whatif_tables import write_tables

        assert isinstance(cfg, WhatIfConfig)
        return write_tables(load(cfg).history, cfg.group_by, cells, outcomes, out)

    def headline(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[str]:
        from .whatif_tables import policy_lines

        return policy_lines(records)

    def sections(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[Section]:
        from .whatif_tables import whatif_sections

        assert isinstance(cfg, WhatIfConfig)
        loaded = load(cfg)
        variants = [str(v) for v in records["variant"]] if "variant" in records else []
        return whatif_sections(loaded.history, cfg.group_by, variants, records, outcomes)
