"""One job model per comparison: which settings of a run are its policies, and which differ between runs.

A comparison of runs measures the policies only when everything else is the same. Every setting of
:class:`~wattsched.experiments.config.SimulationConfig` is one of:

* **policy** (``POLICY_SETTINGS``): what the compared systems choose: the queue, placement or allocation policy and
  its round, the energy budget a budget-aware policy is given, the power manager and its own parameters (idle
  timeout, forecast window), and the GPU setting policy (static power limit or SM clock, governor);
* **bookkeeping** (``BOOKKEEPING``): where the datasets are read from and whether invariants are checked; they change
  nothing that is simulated;
* **job model and environment**: everything else, grouped in ``GROUPS``: the workload (trace, synthetic
  generator, job count, deadlines, services), the cluster, the job performance model (speed source, model
  assignment, sharing model and noise, restarts, checkpoints), the power model (model, node base, PUE, boot and
  shutdown times, off draw), the price and carbon signals, the seed and the simulation mode. A setting this module
  does not know (a new field) counts as job model until it is classified: a difference is reported, never hidden.

Settings are named by their flat keys (``queue``, ``power_states.idle_timeout_s``; experiments/config.py
``FLAT_KEYS``), whichever form a config was written in, so that run directories written in the flat form and in the
nested one compare.

``performance`` and ``assign_models`` may say ``auto``, which resolves per policy (tables for allocation policies,
trace durations for queue + placement; models assigned when the policy needs them): they are compared as resolved
(:func:`resolved_job_model`), and as the run recorded them (``summary.json``'s ``performance_model``) where a run
directory is at hand. :func:`differences` names every setting whose value differs between runs; ``compare`` and
``report`` warn with it, the experiments and the demo refuse to run (:func:`require_one_job_model`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..core.errors import WattschedError

if TYPE_CHECKING:
    from .config import SimulationConfig

POLICY_SETTINGS = frozenset(
    {
        "queue",
        "placement",
        "allocation",
        "round_s",
        "round_on_events",
        "energy_budget_kwh",
        "energy_budget_until_s",
        "power_manager",
        "power_states.idle_timeout_s",
        "power_states.forecast_interval_s",
        "power_states.forecast_history_s",
        "power_states.forecast_season_s",
        "power_states.forecast_buffer_frac",
        "gpu_power_limit",
        "gpu_sm_clock",
        "governor",
    }
)
BOOKKEEPING = frozenset({"data_dir", "check_invariants"})
# What the non-policy settings are, for the docs and the messages (a setting not listed here is still compared).
GROUPS: dict[str, tuple[str, ...]] = {
    "workload": (
        "workload", "columns", "synthetic", "max_jobs", "deadline_slack", "services", "skip_invalid",
    ),
    "cluster": ("cluster", "gpu_type"),
    "performance model": (
        "performance", "assign_models", "gpu_loads", "profiles", "sharing_model", "sharing_noise", "restart_model",
        "restart_delay_s",
        "checkpoint_interval_s", "performance_model",
    ),
    "power model": (
        "energy", "power_model", "node_base_w", "pue", "power_states.boot_time_s", "power_states.shutdown_time_s",
        "power_states.off_power_w",
    ),
    "signals": (
        "region", "year", "price_csv", "carbon_csv", "signal_tz", "align", "grid_start", "wrap", "carbon_kind",
        "signal_max_gap_hours", "signal_fill",
    ),
    "seed": ("seed",),
    "simulation": ("mode", "inflate", "shuffle"),
}  # fmt: skip
# Recorded performance-model keys that repeat a config setting (compared once, as the setting): the sharing model's
# name and fitted parameters, its noise, the restart model.
_RECORDED_AS_SETTING = frozenset(
    {
        "sharing_model", "sharing_noise", "restart_model", "interference_kappa", "power_overlap_beta",
        "measured_loads", "other_models_scale", "basis", "gpu_loads", "switch_overhead", "switch_power",
    }
)  # fmt: skip


# Settings that may name a file the run reads: the job model compares the files' contents (summary.json
# ``input_files``), not the paths as typed (``jobs.csv`` in two folders is two workloads; one file named two ways is
# one).
FILE_SETTINGS = ("workload", "cluster", "services", "price_csv", "carbon_csv", "profiles")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def input_files(config: SimulationConfig) -> dict[str, dict[str, str]]:
    """The files a run's settings name (``workload`` as a CSV path, ``cluster`` as a YAML path, ``services``,
    ``price_csv``, ``carbon_csv``): setting -> absolute path and sha256 of the contents. Dataset and built-in names
    are not files and are left out (the dataset registry checks those by checksum)."""
    out: dict[str, dict[str, str]] = {}
    settings = config.flat()
    for name in FILE_SETTINGS:
        value = settings.get(name)
        if not isinstance(value, str) or not value:
            continue
        if name == "profiles":  # a list of files, each a path or <dataset>/<file>
            out.update(_profile_files(value, config.data_dir))
            continue
        path = Path(value).expanduser()
        if path.is_file():
            out[name] = {"path": str(path.resolve()), "sha256": _sha256(path)}
    return out


def _profile_files(value: str, data_dir: str | None) -> dict[str, dict[str, str]]:
    from ..core.errors import DataNotFoundError
    from ..perf.profiles import resolve_path
    from .grid import parse_list

    out = {}
    for i, name in enumerate(parse_list(value)):
        try:
            path = resolve_path(name, data_dir)
        except DataNotFoundError:
            continue
        out[f"profiles[{i}]"] = {"path": str(path.resolve()), "sha256": _sha256(path)}
    return out


def group_of(setting: str) -> str:
    head = setting.split(".")[0]
    for group, names in GROUPS.items():
        if setting in names or head in names:
            return group
    return "other"


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def _needs_models(allocation: str | None) -> bool:
    if not allocation:
        return False
    from ..policies.contract import ALLOCATION_POLICIES

    try:
        factory = ALLOCATION_POLICIES.factory(allocation)
    except (KeyError, ValueError, WattschedError):
        return False
    return bool(getattr(factory, "needs_models", False))


def resolved_job_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """The non-policy settings of one resolved config (``SimulationConfig.model_dump(mode="json")`` or a run's
    ``config.resolved.yaml``, nested or flat), flattened (``synthetic.num_jobs``), with ``performance`` and
    ``assign_models`` resolved as the run resolves them (experiments/run.py ``build_perf``)."""
    from .config import flat_settings

    config = flat_settings(config)
    flat: dict[str, Any] = {}
    _flat("", dict(config), flat)
    # An empty mapping (columns: {}) stays one entry, so that {} and {a: b} differ.
    allocation = config.get("allocation")
    assign_setting = config.get("assign_models", "auto")
    assign = assign_setting == "always" or (assign_setting == "auto" and _needs_models(allocation))
    performance = config.get("performance", "auto")
    tables = (
        assign or performance in ("tables", "generated") or (performance == "auto" and allocation is not None)
    )
    if "performance" in flat:
        flat["performance"] = (
            "trace durations" if not tables or performance == "trace" else
            "generated tables" if performance == "generated" else "measured tables"
        )  # fmt: skip
    if "assign_models" in flat:
        flat["assign_models"] = "assigned" if assign else "trace names only"
    unused = (
        {"synthetic"} if config.get("workload", "synthetic") != "synthetic" else set()
    )  # read for synthetic only
    return {
        k: v
        for k, v in flat.items()
        if k not in POLICY_SETTINGS and k.split(".")[0] not in BOOKKEEPING and k.split(".")[0] not in unused
    }


def recorded_job_model(config: Mapping[str, Any], summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """:func:`resolved_job_model`, with the performance model the run recorded (``summary.json``) in place of the
    resolved ``performance`` / ``assign_models`` where it recorded one."""
    model = resolved_job_model(config)
    files = summary.get("input_files") if isinstance(summary, Mapping) else None
    if isinstance(files, Mapping):
        for name, info in files.items():
            if name in model and isinstance(info, Mapping) and info.get("sha256"):
                model[name] = f"a file with sha256 {str(info['sha256'])[:16]}"
    recorded = summary.get("performance_model") if isinstance(summary, Mapping) else None
    if isinstance(recorded, Mapping):
        model.pop("performance", None)
        model.pop("assign_models", None)
        model.update(
            {f"performance_model.{k}": v for k, v in recorded.items() if k not in _RECORDED_AS_SETTING}
        )
    return model


@dataclass(frozen=True)
class Difference:
    """One non-policy setting whose value differs between the compared runs: the value of each run (by label;
    None where a run has no such setting)."""

    setting: str
    values: dict[str, Any]

    @property
    def group(self) -> str:
        return group_of(self.setting)

    def describe(self, limit: int = 4) -> str:
        by_value: dict[str, list[str]] = {}
        for label, value in self.values.items():
            by_value.setdefault(_show(value), []).append(label)
        parts = [f"{value} ({', '.join(labels[:limit])}{', ...' if len(labels) > limit else ''})"
                 for value, labels in by_value.items()]  # fmt: skip
        return f"{self.setting} [{self.group}]: " + " vs ".join(parts)


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    structured = isinstance(value, Mapping | list | tuple)
    text = json.dumps(value, sort_keys=True, default=str) if structured else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def differences(models: Mapping[str, Mapping[str, Any]]) -> list[Difference]:
    """Every setting whose value differs between the runs' job models (label -> :func:`resolved_job_model` or
    :func:`recorded_job_model`), in the order the settings first appear."""
    keys = list(dict.fromkeys(k for m in models.values() for k in m))
    if len({json.dumps(m.get("workload"), default=str) for m in models.values()}) > 1:
        # the workloads differ already; the generator's settings say nothing more where one is not synthetic
        keys = [k for k in keys if not k.startswith("synthetic.")]
    out = []
    for key in keys:
        values = {label: m.get(key) for label, m in models.items()}
        if len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) > 1:
            out.append(Difference(key, values))
    return out


def summary_line(diffs: Sequence[Difference]) -> str:
    """One line naming every differing setting and its values."""
    return (
        "the runs differ in more than their policies, so their differences are not the policies' alone: "
        + ("; ".join(d.describe() for d in diffs))
    )


def require_one_job_model(configs: Mapping[str, Any], what: str) -> None:
    """Refuse (one-line error naming the settings and values) when the runs of one comparison, label -> config
    (a SimulationConfig or its dump), differ in anything but their policies."""
    models = {
        label: resolved_job_model(cfg.model_dump(mode="json") if hasattr(cfg, "model_dump") else cfg)
        for label, cfg in configs.items()
    }
    diffs = differences(models)
    if diffs:
        raise WattschedError(
            f"{what}: its runs must share one job model and differ only in their policies, but they differ in "
            + "; ".join(d.describe() for d in diffs)
        )


def run_job_model(path: str | Path) -> dict[str, Any] | None:
    """The recorded job model of a run directory (None when it has no readable config)."""
    path = Path(path)
    try:
        config = yaml.safe_load((path / "config.resolved.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(config, Mapping):
        return None
    try:
        summary = json.loads((path / "summary.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        summary = None
    return recorded_job_model(config, summary)


def run_differences(runs: Mapping[str, str | Path]) -> list[Difference]:
    """The non-policy differences between run directories (label -> directory); runs without a readable config
    (experiment rows) are left out."""
    models = {label: m for label, path in runs.items() if (m := run_job_model(path)) is not None}
    return differences(models) if len(models) > 1 else []
