"""One accounting window for every comparison of temporal runs (docs/energy.md, "Accounting window").

A run's own figures (``energy_kwh``, ``cost_usd``, ``co2_kg`` in summary.json) cover its own window, from its
first submission to its own last completion. Runs compared with one another are all charged over one common
window instead: from the first submission to the latest end among the compared runs. After its own last
completion a run's nodes draw what its power manager leaves them at (``engine.tail.PowerTail``): a policy that
finishes early pays the static draw of its idle or switched-off cluster until its rivals finish, and one that
defers work no longer looks dearer only for running longer.

Every experiment that compares temporal runs, ``wattsched compare``/``report`` and the demo go through
:func:`charge`. Cost and carbon of the tail use the run's own aligned signals, rebuilt from its config through
the same energy setup as the run (:func:`signals_of`), so the common-window figures are exact integrals too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..core.errors import WattschedError
from ..engine.tail import PowerTail
from .config import SimulationConfig

RULE = (
    "common window: from the first submission to the latest end among the compared runs; after its own last "
    "completion a run's nodes draw what its power manager leaves them at"
)
KEY = "common_window"


def window_of(tails: Sequence[PowerTail]) -> tuple[float, float]:
    """(start, end) of the common window of `tails`: the first submission and the latest own end."""
    if not tails:
        raise WattschedError("no runs to put on a common window")
    return min(t.start_s for t in tails), max(t.end_s for t in tails)


def describe(start: float, end: float, runs: int) -> str:
    """One line naming the window, for tables and reports."""
    return (
        f"energy, cost and carbon over the common window of the {runs} compared run(s): "
        f"{start:,.0f} s to {end:,.0f} s ({(end - start) / 3600:,.2f} h, the latest end among them); "
        "after its own last completion each run's nodes draw what its power manager leaves them at"
    )


def block(tail: PowerTail, start: float, end: float, price=None, carbon=None) -> dict[str, Any]:
    """The ``common_window`` block of one run: its energy (with components), cost, carbon and mean power over
    the window [start, end], and the rule. Each run is charged from its own first submission (every trace
    starts at τ = 0, so compared runs of one workload share it)."""
    if end < tail.end_s:
        raise WattschedError(
            f"the common window ends at {end:.0f} s, before this run's own end ({tail.end_s:.0f} s)"
        )
    out = tail.over(end, price, carbon)
    out["start_s"] = float(start)
    span = end - start
    out["avg_power_kw"] = out["energy_kwh"] * 3600.0 / span if span > 0 else 0.0
    out["own_end_s"] = tail.end_s
    if not tail.settled and end > tail.drained_to_s:
        out["note"] = (
            f"the power manager still had timers {tail.drained_to_s - tail.end_s:,.0f} s after the run's end; "
            "its last state is held from there"
        )
    out["rule"] = RULE
    return out


def charge(
    tails: Sequence[PowerTail], signals: Sequence[tuple[Any, Any]] | None = None
) -> list[dict[str, Any]]:
    """The ``common_window`` blocks of compared runs (one per tail, same order); `signals`: each run's
    (price, carbon) aligned signals, or None where cost and carbon are not needed."""
    start, end = window_of(tails)
    pairs = signals if signals is not None else [(None, None)] * len(tails)
    return [block(t, start, end, p, c) for t, (p, c) in zip(tails, pairs, strict=True)]


def charge_summaries(summaries: Sequence[dict[str, Any]], configs: Sequence[SimulationConfig | None]) -> str:
    """Add a ``common_window`` block to each run summary (in place) and return the line naming the window.
    `configs`: each run's config, to rebuild its price and carbon signals for the tail's cost and carbon."""
    tails = [PowerTail.from_summary(s) for s in summaries]
    start, end = window_of(tails)
    # Only a run with a tail inside the window needs its signals (read from data files: skipped where not needed).
    signals, missing = [], []
    for cfg, s, t in zip(configs, summaries, tails, strict=True):
        try:
            signals.append(signals_of(cfg, s) if cfg is not None and t.end_s < end else (None, None))
        except (WattschedError, OSError) as exc:  # e.g. the data directory or a series file is not here
            signals.append((None, None))
            missing.append(str(exc))
    for s, b in zip(summaries, charge(tails, signals), strict=True):
        s[KEY] = b
    line = describe(start, end, len(tails)) + held_note(summaries)
    if missing:
        line += (
            f"; the cost and carbon of {len(missing)} run(s) are not shown: their price or carbon series could "
            f"not be read again ({missing[0]})"
        )
    return line


def held_note(summaries: Sequence[dict[str, Any]]) -> str:
    """The part of a window line that says where a run's tail had not settled by the window's end (a power manager
    with timers left after the drain's horizon): its last drained state is held from there."""
    notes = [s[KEY]["note"] for s in summaries if "note" in s.get(KEY, {})]
    return f"; {len(notes)} run(s) not settled: {notes[0]}" if notes else ""


def record_in_run_dirs(dirs: Sequence[Path]) -> str:
    """Charge the run directories `dirs` (compared with one another) over their common window and write each
    one's ``common_window`` block into its summary.json; the line naming the window."""
    from ..core.atomic import write_json
    from .config import resolve_config

    summaries = [json.loads((d / "summary.json").read_text(encoding="utf-8")) for d in dirs]
    line = charge_summaries(summaries, [resolve_config(d / "config.resolved.yaml", {}) for d in dirs])
    for d, s in zip(dirs, summaries, strict=True):
        write_json(d / "summary.json", s)
    return line


# -- the signals of a finished run ------------------------------------------------------------------------------


def _trace_start(summary: dict[str, Any]) -> datetime | None:
    model = summary.get("energy_model") or {}
    for kind in ("price", "carbon"):
        described = model.get(kind)
        if isinstance(described, dict):
            text = described.get("trace_start_utc")
            return None if text is None else datetime.fromisoformat(text)
    return None


def signals_of(cfg: SimulationConfig, summary: dict[str, Any]) -> tuple[Any, Any]:
    """The (price, carbon) aligned signals a finished run used, rebuilt from its config and the trace start its
    summary records, through the run's own energy setup; (None, None) where it had none."""
    model = summary.get("energy_model") or {}
    if summary.get("cost_usd") is None and summary.get("co2_kg") is None:
        return None, None
    if not any(isinstance(model.get(k), dict) for k in ("price", "carbon")):
        return None, None
    cfg = _with_recorded_files(cfg, summary)
    key = cfg.model_dump_json(include={"signals", "data_dir"})
    start = _trace_start(summary)
    return _signals_cached(key, None if start is None else start.isoformat())


def _with_recorded_files(cfg: SimulationConfig, summary: dict[str, Any]) -> SimulationConfig:
    """The config with signal files the run recorded by absolute path (summary.json ``input_files``) where the path
    as typed does not lead to a file from here (a relative path, read from another folder)."""
    files = summary.get("input_files") or {}
    updates = {}
    for name, typed in (("price_csv", cfg.signals.price_csv), ("carbon_csv", cfg.signals.carbon_csv)):
        recorded = files.get(name, {}).get("path") if isinstance(files.get(name), dict) else None
        if typed and recorded and not Path(typed).expanduser().is_file():
            updates[name] = recorded
    return cfg.model_copy(update={"signals": cfg.signals.model_copy(update=updates)}) if updates else cfg


@lru_cache(maxsize=32)
def _signals_cached(cfg_json: str, trace_start: str | None) -> tuple[Any, Any]:
    from .energy_setup import grid_signals

    cfg = SimulationConfig.model_validate_json(cfg_json)
    start = None if trace_start is None else datetime.fromisoformat(trace_start)
    return tuple(grid_signals(cfg, start, []))  # type: ignore[return-value]


def finite(value: Any) -> float:
    """A figure for a table: NaN for a missing one."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


# -- an experiment's runs --------------------------------------------------------------------------------------
# What a run's summary must keep to be charged over a common window later (picklable, a few KB).
INPUT_KEYS = ("energy_kwh", "energy_by_component_kwh", "cost_usd", "co2_kg", "tail_power", "energy_model")


def window_input(summary: dict[str, Any]) -> dict[str, Any]:
    """The part of a run summary :func:`rebase` needs (kept on an experiment's per-run record)."""
    return {k: summary[k] for k in INPUT_KEYS if k in summary}


def rebase(
    records: Sequence[Any],
    group: Callable[[Any], Hashable],
    config: Callable[[Any], SimulationConfig | None],
    what: str,
    target: str = "energy_kwh",
) -> str:
    """Charge an experiment's records over the common window of each group of compared runs (in place).

    Each record carries ``window_input`` (:func:`window_input` of its summary) and ``energy_kwh`` and optionally
    ``cost_usd``/``co2_kg``: these become the common-window figures, ``own_window_kwh`` keeps the run's own
    energy. `group` tells which runs are compared with one another (`what` names such a group in the returned
    line); `config` gives a record's run config (to rebuild its signals). With another `target` the common-window
    energy goes there and the record's own figures stay as they are (an experiment whose own-window figures
    define something, such as an energy budget)."""
    groups: dict[Hashable, list[Any]] = {}
    for r in records:
        groups.setdefault(group(r), []).append(r)
    longest, held = 0.0, ""
    for members in groups.values():
        summaries = [dict(r.window_input) for r in members]
        charge_summaries(summaries, [config(r) for r in members])
        held = held or held_note(summaries)
        for r, s in zip(members, summaries, strict=True):
            w = s[KEY]
            longest = max(longest, w["tail_s"])
            if target != "energy_kwh":
                setattr(r, target, w["energy_kwh"])
                continue
            r.own_window_kwh = r.energy_kwh
            r.energy_kwh = w["energy_kwh"]
            for name in ("cost_usd", "co2_kg"):
                if hasattr(r, name):
                    setattr(r, name, math.nan if w[name] is None else float(w[name]))
    own = "own_window_kwh" if target == "energy_kwh" else "energy_kwh"
    return (
        f"Energy, cost and carbon are charged over a common window per {what}: from the first submission to the "
        "latest end among its runs; after its own last completion a run's nodes draw what its power manager "
        f"leaves them at (docs/energy.md, Accounting window; longest tail {longest / 3600:,.2f} h). "
        f"{own}: each run's energy up to its own last completion{held}."
    )
