"""Experiments as one protocol (docs/experiments.md, "Adding an experiment").

An :class:`Experiment` says only what is its own: a typed config (pydantic), the grid of runs it makes from it
(each a :class:`Cell`: the keys that tell the run apart and the simulation config it runs), optional headline lines
drawn from the run records, and optional plots. Everything else comes from here, the same for every experiment:

* the CLI command ``wattsched experiment <name>`` with one flag per config field (``cli/experiment.py``, generated
  as ``simulate``'s flags are), ``--out``, ``--workers``, ``--backend``, ``--address``, ``--fresh``;
* the executor (a process pool or a Ray cluster, ``experiments/parallel.py``) and resuming an interrupted grid (its
  finished cells are kept until the files are written);
* the accounting rule: the runs compared are charged over one common window (``experiments/window.py``);
* one run-record schema, ``records.csv``: the experiment's name, the cell's keys, the policy label, and every
  metric under the comparison's one name for it (``compare.METRICS``: ``energy_kwh``, ``cost_usd``, ``co2_kg``,
  ``jct_mean_s``, ``jct_p95_s``, ``makespan_s``, ``deadline_misses``, ``slo_violation_hours``, ``restarts``, ...),
  so that ``wattsched compare`` and ``wattsched report`` read any protocol experiment, present or future, without a
  table of its own;
* one renderer for ``summary.md`` and the experiment's resolved config in ``config.yaml``.

An experiment is registered with ``@EXPERIMENTS.register("<name>")``; the module must be imported by
``experiments/catalog.py`` (the one list of protocol experiments).
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import pandas as pd
from pydantic import BaseModel

from ..core.registry import Registry
from .config import SimulationConfig

if TYPE_CHECKING:
    from .run import RunResult
from .parallel import Execution, ProgressFn, grid_done, run_tasks

RECORDS_FILE = "records.csv"
SUMMARY_FILE = "summary.md"
CONFIG_FILE = "config.yaml"


class Cell(NamedTuple):
    """One run of an experiment's grid: what tells it apart from the others (its row label) and what it runs."""

    keys: dict[str, Any]
    config: SimulationConfig


class Experiment(ABC):
    """What an experiment says of its own; see the module docstring for what it gets from the protocol."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    config_model: ClassVar[type[BaseModel]]

    @abstractmethod
    def grid(self, cfg: BaseModel) -> list[Cell]:
        """The runs, in the order their rows are written."""

    def window_group(self, keys: dict[str, Any]) -> Hashable:
        """Which runs are compared with one another, and so charged over one common window (all by default;
        e.g. one group per cluster size where runs on different clusters are never compared)."""
        return 0

    def extra(self, result: RunResult) -> dict[str, Any]:
        """Columns of the experiment's own beside the shared metrics, from a finished run (in the worker: the
        whole run is at hand, its per-job table and time series included)."""
        return {}

    def headline(self, cfg: BaseModel, records: pd.DataFrame) -> list[str]:
        """Lines for the summary's top, drawn from the records (the experiment's finding)."""
        return []

    def plots(self, cfg: BaseModel, records: pd.DataFrame, out: Path) -> list[Path]:
        """Figures written into `out` (none by default)."""
        return []


EXPERIMENTS: Registry[Experiment] = Registry("experiment")


@dataclass
class ProtocolResult:
    out: Path
    records: pd.DataFrame
    files: list[Path]
    window: str  # the line naming the common accounting window
    wall_s: float
    workers: int


_Done = tuple[int, dict[str, Any], dict[str, float], str, list[str], dict[str, Any]]


def _run_cell(shared: tuple[Experiment, Sequence[Cell]], index: int) -> _Done:
    """One cell, in a worker: its index, what the common window needs of its summary, its metrics, policy,
    bases and the experiment's own columns."""
    from .compare import summary_metrics, summary_policy
    from .run import run_simulation
    from .window import window_input

    experiment, cells = shared
    result = run_simulation(cells[index].config)
    summary = result.summary
    policy, bases = summary_policy(summary)
    return index, window_input(summary), summary_metrics(summary), policy, bases, experiment.extra(result)


def run_experiment(
    experiment: Experiment,
    cfg: BaseModel,
    out: str | Path,
    workers: int | None = None,
    execution: Execution | None = None,
    progress: ProgressFn | None = None,
) -> ProtocolResult:
    """Run the experiment's grid, charge its runs over one common window, and write ``records.csv``,
    ``summary.md``, ``config.yaml`` and its plots into `out`."""
    from ..core.atomic import write_text
    from .grid import write_csv
    from .window import rebase

    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cells = experiment.grid(cfg)
    tasks = [(i,) for i in range(len(cells))]
    done = run_tasks(_run_cell, (experiment, cells), tasks, workers, progress, out, execution)
    rows: list[_Record] = []
    for index, window_in, metrics, policy, bases, extra in sorted(done.results, key=lambda r: r[0]):
        rows.append(_Record(index, window_in, metrics, policy, bases, extra))
    groups = len({experiment.window_group(c.keys) for c in cells})
    window = rebase(
        rows,
        lambda r: experiment.window_group(cells[r.index].keys),
        lambda r: cells[r.index].config,
        "experiment" if groups == 1 else "group of compared runs",
    )
    records = pd.DataFrame([_row(experiment.name, cells[r.index], r) for r in rows])
    files = [out / RECORDS_FILE, out / SUMMARY_FILE, out / CONFIG_FILE]
    write_csv(files[0], records)
    import yaml

    write_text(files[2], yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    plots = experiment.plots(cfg, records, out)
    write_text(files[1], render_summary(experiment, cfg, records, window, plots))
    grid_done(out)
    return ProtocolResult(out, records, [*files, *plots], window, time.perf_counter() - started, done.workers)


@dataclass
class _Record:
    """One run's figures while its energy is charged over the common window (``window.rebase`` sets
    ``energy_kwh``, ``own_window_kwh``, ``cost_usd`` and ``co2_kg``)."""

    index: int
    window_input: dict[str, Any]
    metrics: dict[str, float]
    policy: str
    bases: list[str]
    extra: dict[str, Any]

    def __post_init__(self) -> None:
        self.energy_kwh = self.metrics["energy_kwh"]
        self.cost_usd = self.metrics["cost_usd"]
        self.co2_kg = self.metrics["co2_kg"]
        self.own_window_kwh = math.nan


def _row(name: str, cell: Cell, r: _Record) -> dict[str, Any]:
    metrics = {
        **r.metrics,
        "energy_kwh": r.energy_kwh,
        "own_window_kwh": r.own_window_kwh,
        "cost_usd": r.cost_usd,
        "co2_kg": r.co2_kg,
    }
    return {
        "experiment": name,
        **cell.keys,
        "policy": r.policy,
        "basis": " | ".join(r.bases),
        **metrics,
        **r.extra,
    }


# -- the one renderer --------------------------------------------------------------------------------------------
def render_summary(
    experiment: Experiment, cfg: BaseModel, records: pd.DataFrame, window: str, plots: Sequence[Path] = ()
) -> str:
    """``summary.md`` of any protocol experiment: what it is, its settings, its finding, every run's figures under
    the comparison's metric names, the accounting window and the reconstructions it ran."""
    from .compare import METRICS, column_definitions, format_value, is_component, shown_metrics

    frame = records.copy()
    metrics = shown_metrics(frame)
    columns = list(frame.columns)
    keys = columns[columns.index("experiment") + 1 : columns.index("policy")]  # the cell's keys sit between
    known = {m.key for m in METRICS}
    own = [c for c in columns[columns.index("basis") + 1 :] if c not in known and not is_component(c)]
    lines = [f"# {experiment.name}", "", experiment.description, ""]
    settings = cfg.model_dump(mode="json")
    lines += ["Settings: " + ", ".join(f"`{k}={_plain(v)}`" for k, v in settings.items()), ""]
    headline = experiment.headline(cfg, records)
    if headline:
        lines += [*headline, ""]
    header = [*keys, "policy", *(m.header for m in metrics), *own]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in frame.to_dict("records"):
        cells = [_plain(row[k]) for k in keys] + [str(row["policy"])]
        cells += [format_value(m, float(row[m.key])) for m in metrics] + [_plain(row[c]) for c in own]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", window, ""]
    definitions = column_definitions(frame, [m.key for m in metrics])
    lines += [f"- **{header}**: {text}" for header, text in definitions]
    bases = sorted(
        {
            b
            for text in frame.get("basis", pd.Series(dtype=str)).fillna("")
            for b in str(text).split(" | ")
            if b
        }
    )
    if bases:
        lines += ["", "Reconstructions in these runs:", *(f"- {b}" for b in bases)]
    if plots:
        lines += ["", *(f"![{p.stem}]({p.name})" for p in plots)]
    return "\n".join(lines).rstrip() + "\n"


def _plain(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def experiment_names() -> list[str]:
    """The registered protocol experiments (their modules imported once, by the catalog)."""
    from . import catalog  # noqa: F401 (registers them)

    return EXPERIMENTS.names()


def experiment(name: str) -> Experiment:
    from . import catalog  # noqa: F401

    return EXPERIMENTS.create(name)
