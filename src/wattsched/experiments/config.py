"""Typed run configuration. YAML files and CLI flags both end up here; unknown keys are errors."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..core.errors import InputError
from ..engine.power import PowerStateConfig
from ..workloads.reading import read_text_bytes
from ..workloads.synthetic import SyntheticConfig
from ..workloads.validate import one_line


def cli(flag: str | None = None, hidden: bool = False, metavar: str | None = None) -> dict[str, Any]:
    """Field metadata for the generated CLI: a flag name other than ``--<field-name>``, or no flag at all, and
    the placeholder of its value in the help."""
    return {"cli": flag, "cli_hidden": hidden, "cli_metavar": metavar}


class SimulationConfig(BaseModel):
    """Every setting of a run. The `wattsched simulate` flags are generated from these fields (cli/options.py):
    a field is a flag named after it (``round_s`` -> ``--round-s``), nested fields by their own name."""

    model_config = ConfigDict(extra="forbid")

    workload: str = Field("synthetic", description="workload name (see `wattsched workloads`) or CSV path")
    columns: dict[str, str] = Field(
        default_factory=dict,
        description="generic job CSV with other column names: read wattsched's field FIELD from the file's "
        "column COLUMN, e.g. submit_time=submission_time (repeat the flag, or separate items with commas); a "
        "deadline in seconds after submission maps as deadline=COLUMN, an absolute one as deadline_at=COLUMN "
        "(an ElasticFlow trace's ddl is read as deadline_at)",
        json_schema_extra=cli(metavar="FIELD=COLUMN"),
    )
    cluster: str = Field("default", description="cluster name (see `wattsched clusters`) or YAML path")
    gpu_type: str | None = Field(
        None, description="GPU model for every node of a single-model cluster (e.g. T4 on n16g4)"
    )
    mode: Literal["temporal", "packing"] = Field("temporal", description="temporal | packing")
    queue: str = Field("fifo", description="queue policy")
    placement: str = Field("best-fit", description="placement policy")
    allocation: str | None = Field(
        None, description="allocation policy run in rounds (replaces queue + placement), e.g. tiresias"
    )
    round_s: float | None = Field(
        None, gt=0, description="allocation round length in s [default: the policy's published one, else 300]"
    )
    round_on_events: bool | None = Field(
        None, description="also decide on arrivals and completions [default: as the policy says]"
    )
    energy_budget_kwh: float | None = Field(
        None, gt=0, description="energy budget of the whole run for budget-aware policies (powerflow)"
    )
    energy_budget_until_s: float | None = Field(
        None,
        gt=0,
        description="the energy budget covers the run's energy up to this time, its tail after its last job "
        "included (an accounting window's end, e.g. a compared run's last completion) [default: the run's own end]",
    )
    checkpoint_interval_s: float = Field(
        0.0, ge=0, description="jobs checkpoint this often; a stop loses progress since (0: none lost)"
    )
    restart_model: Literal["elasticflow", "fixed"] = Field(
        "elasticflow", description="restart delay after a resume, resize or migration: elasticflow | fixed"
    )
    restart_delay_s: float = Field(30.0, ge=0, description="restart_model fixed: the delay in s (Pollux: 30)")
    performance: Literal["auto", "tables", "trace", "generated"] = Field(
        "auto",
        description="job speed: measured throughput tables or trace durations (auto: tables for allocation "
        "policies, trace durations for queue + placement); generated: analytic tables, no dataset (demo)",
    )
    gpu_loads: Literal["catalog", "eaco-measured"] = Field(
        "catalog",
        description="a job's GPU load (share of the GPU's dynamic power range): catalog (per-model utilisation) | "
        "eaco-measured (EaCO's Table 1 loads for its four models, catalog x 0.408 for the others); part of the "
        "job model, for every run of a comparison",
    )
    profiles: str | None = Field(
        None,
        description='measured GPU profile CSV(s), comma-separated (docs/data-formats.md, "Profile CSV"; a path '
        "or <dataset>/<file>): jobs whose model and batch they cover run and draw as measured; sets "
        "sharing_model to measured unless given",
        json_schema_extra={"cli_metavar": "FILE[,FILE]"},
    )
    sharing_model: Literal["slicing", "eaco", "measured"] = Field(
        "slicing",
        description="jobs sharing a GPU: slicing (time-slicing by utilisation, loads add up) | eaco (EaCO's own "
        "published setting: fitted to its V100 pairs) | measured (fitted to the H200 profiles' sets: "
        "switch overhead, power mix) [default: measured with --profiles, else slicing]",
    )
    sharing_noise: float = Field(
        0.0,
        ge=0,
        le=1,
        description="relative std. dev. of a shared job's true speed around the sharing model's prediction "
        "(seeded; 0: predictions are exact)",
    )
    assign_models: Literal["auto", "always", "never"] = Field(
        "auto",
        description="give jobs without a model one by the seeded rule (auto: when the policy needs models)",
    )
    seed: int = Field(42, description="random seed")
    inflate: float = Field(
        1.3, gt=0, description="packing mode: fill to this multiple of cluster GPU capacity"
    )
    shuffle: bool = Field(True, description="packing mode: seeded shuffle of the pod order")
    max_jobs: int | None = Field(None, ge=1, description="keep only the first N jobs by submission time")
    deadline_slack: float | None = Field(
        None,
        ge=1.0,
        description="give training jobs without a deadline one at submit + slack x trace duration "
        "(ElasticFlow-style; none by default)",
    )
    services: str | None = Field(
        None,
        description="inference services added to the workload: 'default' (built-in set, seeded diurnal rates) "
        "or a rates CSV (hour, <service>...) (docs/cedla.md §1)",
    )
    skip_invalid: bool = Field(False, description="skip malformed rows (counted in summary.json)")
    data_dir: str | None = Field(
        None, description="local dataset directory (else WATTSCHED_DATA or the cache)"
    )
    check_invariants: bool = Field(False, description="check resource invariants after every event (slow)")
    synthetic: SyntheticConfig = Field(default_factory=SyntheticConfig)

    # Energy layer (temporal mode).
    energy: bool = Field(
        True, description="account energy, cost and carbon", json_schema_extra=cli("--energy")
    )
    power_model: str = Field("linear", description="binary | linear | dvfs")
    power_manager: str = Field("always-on", description="always-on | idle-timeout | forecast")
    node_base_w: float | None = Field(None, ge=0, description="node base power; default per power model")
    pue: float = Field(1.0, ge=1.0, description="facility power usage effectiveness")
    power_states: PowerStateConfig = Field(default_factory=PowerStateConfig)
    region: str | None = Field(None, description="grid region for price and carbon, e.g. US-CAL-CISO")
    year: int = Field(2023, description="grid signal year")
    price_csv: str | None = Field(
        None,
        description="hourly price CSV of your own market, instead of --region: time, price_usd_per_mwh, or a "
        "GreenDCC standardized or processed price file (recognised by header; docs/signals.md §6a)",
    )
    carbon_csv: str | None = Field(
        None,
        description="hourly carbon-intensity CSV, instead of --region: time, carbon_g_per_kwh, or an Electricity "
        "Maps hourly file (recognised by header; --carbon-kind picks its column)",
    )
    signal_tz: str = Field("UTC", description="time zone of the market of --price-csv / --carbon-csv")
    align: Literal["weekday_hour", "offset"] = Field("weekday_hour", description="trace-to-grid time rule")
    grid_start: datetime | None = Field(None, description="align=offset: grid time of trace time 0")
    wrap: Literal["cycle_year", "error"] = Field(
        "cycle_year", description="trace longer than the signal year"
    )
    carbon_kind: Literal["direct", "lca"] = "direct"
    signal_max_gap_hours: int = Field(6, ge=0, description="longest signal gap filled by interpolation")
    signal_fill: Literal["hold", "interpolate"] | None = Field(
        None, description="fill rule for longer gaps (default: error); filled hours are reported"
    )
    gpu_power_limit: float | None = Field(
        None, gt=0, le=1, description="dvfs: power limit as a fraction of max"
    )
    gpu_sm_clock: float | None = Field(None, gt=0, le=1, description="dvfs: SM clock as a fraction of max")
    governor: Literal["static", "energy-optimal"] = Field("static", description="dvfs: per-job setting rule")

    @model_validator(mode="after")
    def _profiles_share_as_measured(self) -> SimulationConfig:
        # Runs on measured profiles use the sharing model fitted to measurement unless one is named.
        if self.profiles and "sharing_model" not in self.model_fields_set:
            self.sharing_model = "measured"
        return self

    @model_validator(mode="after")
    def _dvfs_settings_need_dvfs(self) -> SimulationConfig:
        uses = self.gpu_power_limit is not None or self.gpu_sm_clock is not None or self.governor != "static"
        if uses and self.power_model != "dvfs":
            raise ValueError("gpu_power_limit, gpu_sm_clock and governor need power_model: dvfs")
        if self.gpu_power_limit is not None and self.gpu_sm_clock is not None:
            raise ValueError("set gpu_power_limit or gpu_sm_clock, not both")
        return self


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """1-based line of every mapping key in a YAML document, by key path."""
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = (*path, str(key.value))
                lines[sub] = key.start_mark.line + 1
                walk(value, sub)

    root = yaml.compose(text)
    if root is not None:
        walk(root, ())
    return lines


def _parse_config(path: Path, text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
        problem = one_line(", ".join(p for p in parts if p) or str(exc))
        raise InputError(path, mark.line + 1 if mark else None, None, f"not valid YAML ({problem})") from None
    except RecursionError:
        raise InputError(path, None, None, "not valid YAML (nested too deeply)") from None
    if not isinstance(data, dict):
        raise InputError(path, 1, None, "expected a mapping of settings at the top level")
    return data


def _read_config(path: str | Path) -> tuple[dict[str, Any], str]:
    """The settings and the text of a YAML config file, read with the hardened reader of the trace readers
    (missing file, directory, non-UTF-8 bytes, NUL bytes: one :class:`InputError` naming the file)."""
    path = Path(path)
    text = read_text_bytes(path, "a YAML config file").decode("utf-8")
    return _parse_config(path, text), text


def resolve_config(file: str | Path | None, overrides: dict[str, Any]) -> SimulationConfig:
    """Settings from `file` (if any) with `overrides` (CLI flags that were given) on top, validated."""
    data, text = _read_config(file) if file else ({}, "")
    merged = {**data}
    for key, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    try:
        return SimulationConfig.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(str(p) for p in err["loc"])
        field = ".".join(loc) or None
        line = None
        source = str(file) if file else "command line"
        if file:
            lines = _key_lines(text)
            while loc and loc not in lines:
                loc = loc[:-1]
            line = lines.get(loc)
            if field is None or not any(k == field.split(".")[0] for k in data):
                source, line = "command line", None
        raise InputError(source, line, field, err["msg"]) from None
