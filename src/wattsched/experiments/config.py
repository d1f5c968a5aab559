"""Typed run configuration. YAML files and CLI flags both end up here; unknown keys are errors.

A run's settings come in groups: ``workload``, ``scheduler``, ``perf``, ``energy`` and ``signals``, beside a few
top-level ones (``cluster``, ``gpu_type``, ``seed``, ``data_dir``, ``check_invariants``). The nested form is
canonical (``config.resolved.yaml`` is written in it); the flat form of earlier config files and code (``queue:
fifo`` at the top level) is accepted too: each flat key maps to its group (:data:`FLAT_KEYS`), a string
``workload`` is the workload's name and a bool ``energy`` says whether energy is accounted. One setting given in
both forms is an error naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo

from ..core.errors import InputError
from ..engine.power import PowerStateConfig
from ..workloads.reading import read_text_bytes
from ..workloads.synthetic import SyntheticConfig
from ..workloads.validate import one_line

if TYPE_CHECKING:
    from ..policies.build import SchedulerConfig


def cli(flag: str | None = None, hidden: bool = False, metavar: str | None = None) -> dict[str, Any]:
    """Field metadata for the generated CLI: a flag name other than ``--<field-name>``, or no flag at all, and
    the placeholder of its value in the help."""
    return {"cli": flag, "cli_hidden": hidden, "cli_metavar": metavar}


class WorkloadSettings(BaseModel):
    """What is run: the jobs (a named trace, a CSV or the synthetic generator) and how they are read and filled
    in."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        "synthetic",
        description="workload name (see `wattsched workloads`) or CSV path",
        json_schema_extra=cli("--workload"),
    )
    columns: dict[str, str] = Field(
        default_factory=dict,
        description="generic job CSV with other column names: read wattsched's field FIELD from the file's "
        "column COLUMN, e.g. submit_time=submission_time (repeat the flag, or separate items with commas); a "
        "deadline in seconds after submission maps as deadline=COLUMN, an absolute one as deadline_at=COLUMN "
        "(an ElasticFlow trace's ddl is read as deadline_at)",
        json_schema_extra=cli(metavar="FIELD=COLUMN"),
    )
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
    assign_models: Literal["auto", "always", "never"] = Field(
        "auto",
        description="give jobs without a model one by the seeded rule (auto: when the policy needs models)",
    )
    inflate: float = Field(
        1.3, gt=0, description="packing mode: fill to this multiple of cluster GPU capacity"
    )
    shuffle: bool = Field(True, description="packing mode: seeded shuffle of the pod order")
    synthetic: SyntheticConfig = Field(default_factory=SyntheticConfig)


class SchedulingSettings(BaseModel):
    """How jobs are scheduled: the simulation mode, a queue + placement pair or an allocation policy in rounds,
    and the energy budget a budget-aware policy is given. It has every setting of
    :class:`~wattsched.policies.build.SchedulerSettings` (``SchedulerConfig.of(cfg.scheduler, ...)``)."""

    model_config = ConfigDict(extra="forbid")

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


class PerfSettings(BaseModel):
    """The job performance model: where a job's speed and GPU load come from, GPU sharing, checkpoints and
    restarts."""

    model_config = ConfigDict(extra="forbid")

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
    checkpoint_interval_s: float = Field(
        0.0, ge=0, description="jobs checkpoint this often; a stop loses progress since (0: none lost)"
    )
    restart_model: Literal["elasticflow", "fixed"] = Field(
        "elasticflow", description="restart delay after a resume, resize or migration: elasticflow | fixed"
    )
    restart_delay_s: float = Field(30.0, ge=0, description="restart_model fixed: the delay in s (Pollux: 30)")

    @model_validator(mode="after")
    def _profiles_share_as_measured(self) -> PerfSettings:
        # Runs on measured profiles use the sharing model fitted to measurement unless one is named.
        if self.profiles and "sharing_model" not in self.model_fields_set:
            self.sharing_model = "measured"
        return self


class EnergySettings(BaseModel):
    """The energy layer (temporal mode): whether energy is accounted, the power model, the power manager and its
    node power states, the facility's PUE and the GPU setting policy (DVFS)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        True, description="account energy, cost and carbon", json_schema_extra=cli("--energy")
    )
    power_model: str = Field("linear", description="binary | linear | dvfs")
    power_manager: str = Field("always-on", description="always-on | idle-timeout | forecast")
    node_base_w: float | None = Field(None, ge=0, description="node base power; default per power model")
    pue: float = Field(1.0, ge=1.0, description="facility power usage effectiveness")
    gpu_power_limit: float | None = Field(
        None, gt=0, le=1, description="dvfs: power limit as a fraction of max"
    )
    gpu_sm_clock: float | None = Field(None, gt=0, le=1, description="dvfs: SM clock as a fraction of max")
    governor: Literal["static", "energy-optimal"] = Field("static", description="dvfs: per-job setting rule")
    power_states: PowerStateConfig = Field(default_factory=PowerStateConfig)

    @model_validator(mode="after")
    def _dvfs_settings_need_dvfs(self) -> EnergySettings:
        uses = self.gpu_power_limit is not None or self.gpu_sm_clock is not None or self.governor != "static"
        if uses and self.power_model != "dvfs":
            raise ValueError("gpu_power_limit, gpu_sm_clock and governor need power_model: dvfs")
        if self.gpu_power_limit is not None and self.gpu_sm_clock is not None:
            raise ValueError("set gpu_power_limit or gpu_sm_clock, not both")
        return self


class SignalSettings(BaseModel):
    """The hourly electricity price and grid carbon intensity: a region's series or the user's own files, and
    how trace time is aligned to them."""

    model_config = ConfigDict(extra="forbid")

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


# The groups of a run's settings, by their key in SimulationConfig.
GROUPS: dict[str, type[BaseModel]] = {
    "workload": WorkloadSettings,
    "scheduler": SchedulingSettings,
    "perf": PerfSettings,
    "energy": EnergySettings,
    "signals": SignalSettings,
}
# The two group fields whose flat key is not their own name (it is their group's key).
_FLAT_NAMES = {("workload", "name"): "workload", ("energy", "enabled"): "energy"}
# Flat key -> (group, field): every setting of a group as the flat form names it (``queue`` -> scheduler.queue).
FLAT_KEYS: dict[str, tuple[str, str]] = {
    _FLAT_NAMES.get((group, name), name): (group, name)
    for group, model in GROUPS.items()
    for name in model.model_fields
}


def setting_field(key: str) -> FieldInfo:
    """The field of a setting by its flat key, in its group or at the top level (an experiment's config reuses
    its description and CLI metadata: the same flag says the same thing everywhere)."""
    if key in FLAT_KEYS:
        group, name = FLAT_KEYS[key]
        return GROUPS[group].model_fields[name]
    return SimulationConfig.model_fields[key]


def same_setting(key: str) -> Any:
    """A field of an experiment's config that is the run setting `key` (flat key): its default, description and
    CLI metadata, so the experiment's flag is simulate's (``columns``, ``profiles``, ``data_dir``, ...)."""
    info = setting_field(key)
    if info.default_factory is not None:
        return Field(default_factory=info.default_factory, description=info.description,
                     json_schema_extra=info.json_schema_extra)  # fmt: skip
    return Field(info.default, description=info.description, json_schema_extra=info.json_schema_extra)


def flat_key(group: str, name: str) -> str:
    """The flat key of setting `name` of `group` (``("scheduler", "queue")`` -> ``queue``)."""
    return _FLAT_NAMES.get((group, name), name)


class MixedFormsError(ValueError):
    """One setting given both by its flat key and in its group."""

    def __init__(self, key: str, group: str, name: str):
        self.key = key
        super().__init__(
            f"{key} is given twice, as the flat key {key} and as {group}.{name}: give it in one form"
        )


def _is_group_form(key: str, value: Any) -> bool:
    """Whether `value` under the top-level `key` is a whole group (a mapping or the group's model), not the flat
    setting of the same name (a string ``workload``, a bool ``energy``)."""
    return key in GROUPS and isinstance(value, (Mapping, GROUPS[key]))


def nest_settings(data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` (settings in the flat form, the nested form or both) in the nested form: each flat key moved into
    its group. Other keys (top-level settings, unknown keys) stay where they are. One setting given in both
    forms raises :class:`MixedFormsError`."""
    out: dict[str, Any] = {}
    flat: dict[str, dict[str, Any]] = {}
    for key, value in data.items():
        if key in FLAT_KEYS and not _is_group_form(key, value):
            group, name = FLAT_KEYS[key]
            flat.setdefault(group, {})[name] = value
        else:
            out[key] = value
    for group, values in flat.items():
        given = out.get(group)
        if isinstance(given, BaseModel):  # a group's model beside flat keys of it: the settings it was given
            given = {name: getattr(given, name) for name in given.model_fields_set}
        elif given is None:
            given = {}
        elif not isinstance(given, Mapping):
            continue  # not a group: validation names it
        for name in values:
            if name in given:
                raise MixedFormsError(flat_key(group, name), group, name)
        out[group] = {**given, **values}
    return out


def flat_settings(data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` (a config dump, ``config.resolved.yaml``, in either form) in the flat form: each group's settings
    by their flat keys (``scheduler: {queue: fifo}`` -> ``queue: fifo``, ``workload: {name: x}`` ->
    ``workload: x``). For readers of run directories written before and after the nested form."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if _is_group_form(key, value):
            items = (
                value.items()
                if isinstance(value, Mapping)
                else ((n, getattr(value, n)) for n in type(value).model_fields)
            )
            for name, item in items:
                out[flat_key(key, name)] = item
        else:
            out[key] = value
    return out


class SimulationConfig(BaseModel):
    """Every setting of a run, in groups (module docstring). The `wattsched simulate` flags are generated from
    these fields (cli/options.py): a leaf field is a flag named after it (``scheduler.round_s`` ->
    ``--round-s``) unless its metadata names another (``workload.name`` -> ``--workload``)."""

    model_config = ConfigDict(extra="forbid")

    cluster: str = Field("default", description="cluster name (see `wattsched clusters`) or YAML path")
    gpu_type: str | None = Field(
        None, description="GPU model for every node of a single-model cluster (e.g. T4 on n16g4)"
    )
    seed: int = Field(42, description="random seed")
    data_dir: str | None = Field(
        None, description="local dataset directory (else WATTSCHED_DATA or the cache)"
    )
    check_invariants: bool = Field(False, description="check resource invariants after every event (slow)")
    workload: WorkloadSettings = Field(default_factory=WorkloadSettings)
    scheduler: SchedulingSettings = Field(default_factory=SchedulingSettings)
    perf: PerfSettings = Field(default_factory=PerfSettings)
    energy: EnergySettings = Field(default_factory=EnergySettings)
    signals: SignalSettings = Field(default_factory=SignalSettings)

    # For mypy: the flat keys are keyword arguments too (the __init__ the pydantic plugin writes lacks them).
    if TYPE_CHECKING:

        def __init__(self, **data: Any) -> None: ...

    @model_validator(mode="before")
    @classmethod
    def _flat_keys_into_groups(cls, data: Any) -> Any:
        # Config files and code written for the flat form (``queue: fifo``) keep working.
        return nest_settings(data) if isinstance(data, Mapping) else data

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> SimulationConfig:
        """pydantic's copy; `update` may also name flat keys (``{"queue": "sjf"}``), which update a copy of their
        group, as construction accepts them. Values are not validated (as pydantic's); an unknown key is an
        error."""
        if not update:
            return super().model_copy(deep=deep)
        own: dict[str, Any] = {}
        flat: dict[str, dict[str, Any]] = {}
        for key, value in update.items():
            if key in FLAT_KEYS and not _is_group_form(key, value):
                group, name = FLAT_KEYS[key]
                flat.setdefault(group, {})[name] = value
            elif key in type(self).model_fields:
                own[key] = value
            else:
                raise ValueError(f"model_copy: {key!r} is not a setting of SimulationConfig")
        for group, values in flat.items():
            if group in own:  # the whole group and a flat key of it
                name = next(iter(values))
                raise MixedFormsError(flat_key(group, name), group, name)
            own[group] = getattr(self, group).model_copy(update=values)
        return super().model_copy(update=own, deep=deep)

    def scheduler_config(self) -> SchedulerConfig:
        """What the run's scheduler is built from (``policies.build.build_scheduler``): the ``scheduler`` group, with
        the run's power manager, which an allocation policy may plan around."""
        from ..policies.build import SchedulerConfig

        return SchedulerConfig.of(self.scheduler, self.energy.power_manager)

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat key (``queue``, ``workload`` for the workload's name, ``synthetic`` as its
        model), with the top-level ones."""
        out: dict[str, Any] = {}
        for key in type(self).model_fields:
            value = getattr(self, key)
            if key in GROUPS:
                out.update({flat_key(key, name): getattr(value, name) for name in type(value).model_fields})
            else:
                out[key] = value
        return out


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


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `top` over it, mappings merged key by key at every depth."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _leaf_paths(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for key, value in data.items():
        path = (*prefix, str(key))
        out += _leaf_paths(value, path) if isinstance(value, Mapping) and value else [path]
    return out


def _file_paths(data: Mapping[str, Any]) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Nested setting path -> the key path the file gave it by (``("scheduler", "queue")`` -> ``("queue",)`` for
    a flat key), for every top-level key of the file."""
    out: dict[tuple[str, ...], tuple[str, ...]] = {}
    for key, value in data.items():
        key = str(key)
        out[FLAT_KEYS[key] if key in FLAT_KEYS and not _is_group_form(key, value) else (key,)] = (key,)
    return out


def _flag_field(loc: tuple[str, ...]) -> str | None:
    """A setting's name as the command line gives it: its flat key, the rest of the path after it."""
    if len(loc) >= 2 and loc[0] in GROUPS:
        return ".".join((flat_key(loc[0], loc[1]), *loc[2:]))
    return ".".join(loc) or None


def _located(
    file: str | Path | None, text: str, data: Mapping[str, Any], flags: Mapping[str, Any], err: Any
) -> InputError:
    """The InputError of a validation error at nested path ``err["loc"]``: in the config file (its line, the
    setting as the file names it, flat or nested) or on the command line (the flat name)."""
    loc = tuple(str(p) for p in err["loc"])
    msg = err["msg"]
    from_flags = _leaf_paths(flags)
    if file and not any(loc[: len(p)] == p for p in from_flags):
        paths = _file_paths(data)
        for n in range(len(loc), 0, -1):
            if loc[:n] in paths:
                where = (*paths[loc[:n]], *loc[n:])
                lines = _key_lines(text)
                key = where
                while key and key not in lines:
                    key = key[:-1]
                return InputError(file, lines.get(key), ".".join(where), msg)
        # A group's own check (loc names the group) over settings the file gives: the file, without a line.
        if loc and any(p[: len(loc)] == loc for p in paths):
            return InputError(file, None, None, msg)
    if len(loc) <= 1 and (not loc or loc[0] in GROUPS):
        return InputError("command line", None, None, msg)
    return InputError("command line", None, _flag_field(loc), msg)


def resolve_config(file: str | Path | None, overrides: Mapping[str, Any]) -> SimulationConfig:
    """Settings from `file` (if any) with `overrides` (CLI flags that were given) on top, validated. Either may
    use the flat or the nested form; a mapping given in both is merged key by key."""
    data, text = _read_config(file) if file else ({}, "")
    try:
        nested = nest_settings(data)
    except MixedFormsError as exc:
        raise InputError(str(file), _key_lines(text).get((exc.key,)), exc.key, str(exc)) from None
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        flags = nest_settings(given)
    except MixedFormsError as exc:
        raise InputError("command line", None, exc.key, str(exc)) from None
    try:
        return SimulationConfig.model_validate(_merge(nested, flags))
    except ValidationError as exc:
        raise _located(file, text, data, flags, exc.errors()[0]) from None
