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

An experiment is registered with ``@EXPERIMENTS.register("<name>")``; its name and module are listed in
``experiments/catalog.py`` (the one list of protocol experiments), which imports the module when it is asked for.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import pandas as pd
from pydantic import BaseModel

from ..core.errors import UnknownNameError
from ..core.registry import Registry
from .config import SimulationConfig

if TYPE_CHECKING:
    from .run import RunResult
from .parallel import Execution, ProgressFn, grid_done, run_tasks

RECORDS_FILE = "records.csv"
RUNS_SHOWN = 200  # rows of the runs table in summary.md; records.csv holds every run
SUMMARY_FILE = "summary.md"
CONFIG_FILE = "config.yaml"


class Cell(NamedTuple):
    """One run of an experiment's grid: what tells it apart from the others (its row label) and what it runs: a
    simulation config (run by the simulator), or `task`, the experiment's own description of a run that
    :meth:`Experiment.run_cell` carries out (a DAG simulation, a packing replay, a task set; picklable)."""

    keys: dict[str, Any]
    config: SimulationConfig | None = None
    task: Any = None


@dataclass
class Outcome:
    """What one cell gave: its figures under the comparison's metric names (``compare.METRICS``; None for a cell
    that is not a run to compare, e.g. a small instance of a ratio study), its policy label and reconstruction
    bases, the experiment's own columns for ``records.csv``, what the common window needs of its summary (None:
    the run is not charged over a window, e.g. a simulator without power tails) and `raw`, the experiment's own
    per-run record for its own tables and plots. Charging the common window updates ``energy_kwh``,
    ``own_window_kwh``, ``cost_usd`` and ``co2_kg`` in `metrics` (in place)."""

    metrics: dict[str, float] | None
    policy: str
    bases: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    window_input: dict[str, Any] | None = None
    raw: Any = None
    # What window.rebase reads and sets on a record (attributes); copied back into `metrics` by Experiment.charge.
    energy_kwh: float = field(default=math.nan, init=False, repr=False)
    own_window_kwh: float = field(default=math.nan, init=False, repr=False)
    cost_usd: float = field(default=math.nan, init=False, repr=False)
    co2_kg: float = field(default=math.nan, init=False, repr=False)


@dataclass
class Section:
    """A part of ``summary.md`` of the experiment's own, rendered by the one renderer: a heading, sentences, and
    optionally a table (a frame: its columns are the header, floats shown to `digits` significant digits)."""

    title: str
    lines: list[str] = field(default_factory=list)
    table: pd.DataFrame | None = None
    digits: int = 4


class Experiment(ABC):
    """What an experiment says of its own; see the module docstring for what it gets from the protocol."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    config_model: ClassVar[type[BaseModel]]

    @abstractmethod
    def grid(self, cfg: BaseModel) -> list[Cell]:
        """The runs, in the order their rows are written."""

    def next_cells(self, cfg: BaseModel, cells: Sequence[Cell], outcomes: Sequence[Outcome]) -> list[Cell]:
        """Runs that depend on runs done so far (`cells` and their `outcomes`, every round's): the protocol runs
        them as a further round, and asks again until none is left. E.g. PowerFlow's equal-energy runs, whose
        budgets are its baselines' energies. None by default."""
        return []

    def start_order(self, cells: Sequence[Cell]) -> list[int]:
        """The order the cells start in (longest first keeps the workers busy to the end); the records keep the
        grid's order whatever it is. By default the grid's order."""
        return list(range(len(cells)))

    def window_group(self, keys: dict[str, Any]) -> Hashable:
        """Which runs are compared with one another, and so charged over one common window (all by default;
        e.g. one group per cluster size where runs on different clusters are never compared)."""
        return 0

    def run_cell(self, cell: Cell) -> Outcome:
        """Carry out one cell (in a worker). By default: simulate ``cell.config`` and take its summary's figures;
        an experiment with its own simulator overrides this and reads ``cell.task``."""
        from .compare import summary_metrics, summary_policy
        from .run import run_simulation
        from .window import window_input

        if cell.config is None:
            raise TypeError(
                f"{self.name}: a cell without a simulation config needs the experiment's run_cell"
            )
        result = run_simulation(cell.config)
        summary = result.summary
        policy, bases = summary_policy(summary)
        return Outcome(
            summary_metrics(summary),
            policy,
            bases,
            self.extra(result),
            window_input(summary),
            self.raw(result),
        )

    def extra(self, result: RunResult) -> dict[str, Any]:
        """Columns of the experiment's own beside the shared metrics, from a finished run (in the worker: the
        whole run is at hand, its per-job table and time series included)."""
        return {}

    def raw(self, result: RunResult) -> Any:
        """The experiment's own record of a finished simulation (kept as ``Outcome.raw``; picklable, small)."""
        return None

    def charge(self, cells: Sequence[Cell], outcomes: Sequence[Outcome]) -> str:
        """Charge the runs compared with one another over one common window (``experiments/window.py``, in
        place) and return the line naming it ("" where no run has a power tail to charge)."""
        charged = [(c, o) for c, o in zip(cells, outcomes, strict=True) if o.window_input is not None]
        if not charged:
            return ""
        for _, o in charged:
            assert o.metrics is not None
            o.energy_kwh, o.cost_usd, o.co2_kg = (o.metrics[k] for k in ("energy_kwh", "cost_usd", "co2_kg"))
        line = self.charge_records([c for c, _ in charged], [o for _, o in charged])
        for _, o in charged:
            assert o.metrics is not None
            o.metrics.update(
                energy_kwh=o.energy_kwh, own_window_kwh=o.own_window_kwh, cost_usd=o.cost_usd, co2_kg=o.co2_kg
            )
        return line

    def charge_records(
        self,
        cells: Sequence[Cell],
        records: Sequence[Any],
        what: str | None = None,
        target: str = "energy_kwh",
    ) -> str:
        """``window.rebase`` of `records` (one per cell: each with ``window_input``, ``energy_kwh`` and optionally
        ``cost_usd``/``co2_kg``), grouped by :meth:`window_group` of their cells' keys and with their cells'
        configs; `what` names a group in the returned line. For an experiment whose own tables are written from
        its run records, charged in place."""
        from .window import rebase

        config_of = {id(r): c.config for c, r in zip(cells, records, strict=True)}
        group_of = {id(r): self.window_group(c.keys) for c, r in zip(cells, records, strict=True)}
        if what is None:
            what = "experiment" if len(set(group_of.values())) == 1 else "group of compared runs"
        return rebase(records, lambda r: group_of[id(r)], lambda r: config_of[id(r)], what, target)

    def tables(
        self, cfg: BaseModel, cells: Sequence[Cell], outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        """Files of the experiment's own written into `out` beside ``records.csv`` (e.g. a per-run table with
        columns no other experiment has, a curve per run); none by default."""
        return []

    def sections(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[Section]:
        """Parts of ``summary.md`` of the experiment's own after the headline (findings, a published figure
        beside the measured one); none by default."""
        return []

    def headline(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[str]:
        """Lines for the summary's top, drawn from the records (the experiment's finding)."""
        return []

    def plots(
        self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        """Figures written into `out` (none by default); called only where matplotlib is installed."""
        return []


EXPERIMENTS: Registry[Experiment] = Registry("experiment")


@dataclass
class ProtocolResult:
    out: Path
    records: pd.DataFrame
    files: list[Path]
    window: str  # the line naming the common accounting window ("" where none applies)
    wall_s: float
    workers: int
    outcomes: list[Outcome]


def _run_cell(shared: tuple[Experiment, Sequence[Cell]], index: int) -> tuple[int, Outcome]:
    experiment, cells = shared
    return index, experiment.run_cell(cells[index])


def run_experiment(
    experiment: Experiment,
    cfg: BaseModel,
    out: str | Path,
    workers: int | None = None,
    execution: Execution | None = None,
    progress: ProgressFn | None = None,
    plots: bool = True,
) -> ProtocolResult:
    """Run the experiment's grid, charge its runs over one common window, and write ``records.csv``,
    ``summary.md``, ``config.yaml``, its own tables and its plots into `out`."""
    from ..core.atomic import write_text
    from .grid import plots_if_available, write_csv

    started = time.perf_counter()
    cells = experiment.grid(cfg)  # checks the settings first: a bad one leaves no directory behind
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    outcomes: list[Outcome] = []
    used_workers = 0
    todo = cells
    while todo:
        order = experiment.start_order(todo)
        if sorted(order) != list(range(len(todo))):
            raise ValueError(f"{experiment.name}: start_order must order every cell once")
        counted = None if progress is None else _counting_from(len(outcomes), progress)
        done = run_tasks(
            _run_cell, (experiment, todo), [(i,) for i in order], workers, counted, out, execution
        )
        outcomes += [o for _, o in sorted(done.results, key=lambda r: r[0])]
        used_workers = max(used_workers, done.workers)
        todo = experiment.next_cells(cfg, cells, outcomes)
        cells = [*cells, *todo]
    window = experiment.charge(cells, outcomes)
    records = pd.DataFrame(
        [_row(experiment.name, c, o) for c, o in zip(cells, outcomes, strict=True) if o.metrics is not None],
        columns=None if any(o.metrics is not None for o in outcomes) else ["experiment", "policy", "basis"],
    )
    files = [out / RECORDS_FILE, out / SUMMARY_FILE, out / CONFIG_FILE]
    write_csv(files[0], records)
    import yaml

    write_text(files[2], yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    own = experiment.tables(cfg, cells, outcomes, out)
    figures: list[Path] = []
    if plots:
        figures = plots_if_available(lambda: experiment.plots(cfg, records, outcomes, out)) or []
    backend = (execution or Execution()).backend
    wall = time.perf_counter() - started
    ran = f"{len(cells)} cells in {wall:,.1f} s on {used_workers} worker(s), {backend} backend."
    write_text(files[1], render_summary(experiment, cfg, records, window, figures, outcomes, ran))
    grid_done(out)
    return ProtocolResult(
        out, records, [*files, *own, *figures], window, time.perf_counter() - started, used_workers, outcomes
    )


def _counting_from(before: int, progress: ProgressFn) -> ProgressFn:
    """The progress of a later round counts the cells of every round before it."""
    return lambda n, total: progress(before + n, before + total)


def _row(name: str, cell: Cell, o: Outcome) -> dict[str, Any]:
    assert o.metrics is not None
    metrics = dict(o.metrics)
    metrics.setdefault("own_window_kwh", math.nan)
    return {
        "experiment": name,
        **cell.keys,
        "policy": o.policy,
        "basis": " | ".join(o.bases),
        **metrics,
        **o.extra,
    }


# -- the one renderer --------------------------------------------------------------------------------------------
def render_summary(
    experiment: Experiment,
    cfg: BaseModel,
    records: pd.DataFrame,
    window: str,
    plots: Sequence[Path] = (),
    outcomes: Sequence[Outcome] = (),
    ran: str = "",
) -> str:
    """``summary.md`` of any protocol experiment: what it is, its settings, its finding, its own sections, every
    run's figures under the comparison's metric names, the accounting window and the reconstructions it ran."""
    from .compare import METRICS, column_definitions, format_value, is_component, shown_metrics

    frame = records.copy()
    lines = [f"# {experiment.name}", "", experiment.description, ""]
    settings = cfg.model_dump(mode="json")
    lines += ["Settings: " + ", ".join(f"`{k}={_plain(v)}`" for k, v in settings.items()), ""]
    if ran:
        lines += [f"Ran {ran}", ""]
    headline = experiment.headline(cfg, records, outcomes)
    if headline:
        lines += [*headline, ""]
    for section in experiment.sections(cfg, records, outcomes):
        lines += [f"## {section.title}", ""]
        if section.lines:
            lines += [*section.lines, ""]
        if section.table is not None:
            lines += [*markdown_table(section.table, section.digits), ""]
    if frame.empty:
        lines += [
            "No runs to compare: every cell of this grid is of the experiment's own kind (see above).",
            "",
        ]
        return "\n".join(lines).rstrip() + "\n"
    metrics = shown_metrics(frame)
    columns = list(frame.columns)
    keys = columns[columns.index("experiment") + 1 : columns.index("policy")]  # the cell's keys sit between
    known = {m.key for m in METRICS}
    own = [c for c in columns[columns.index("basis") + 1 :] if c not in known and not is_component(c)]
    lines += ["## Runs", ""]
    if len(frame) > RUNS_SHOWN:
        lines.append(
            f"{len(frame):,} runs: too many for a table here; every one is in `{RECORDS_FILE}` "
            f"(`wattsched compare` on this directory shows them), the first {RUNS_SHOWN} below."
        )
        lines.append("")
        frame = frame.head(RUNS_SHOWN)
    header = [*keys, "policy", *(m.header for m in metrics), *own]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in frame.to_dict("records"):
        cells = [_cell(row[k], 6) for k in keys] + [str(row["policy"])]
        cells += [format_value(m, float(row[m.key])) for m in metrics] + [_cell(row[c], 4) for c in own]
        lines.append("| " + " | ".join(cells) + " |")
    if window:
        lines += ["", window]
    lines.append("")
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


def markdown_table(frame: pd.DataFrame, digits: int = 4) -> list[str]:
    """A frame as Markdown table lines: floats to `digits` significant digits (integral ones without a point),
    missing values as an em dash."""
    header = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v, digits) for v in row) + " |")
    return lines


def cell_text(value: Any, digits: int) -> str:
    """A table value as summary.md shows it (HTML callers escape it themselves)."""
    text = _cell(value, digits)
    return text.replace("\\|", "|") if isinstance(value, str) else text


def _cell(value: Any, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "\u2014"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}" if abs(value) >= 1e4 else str(int(value))
        return f"{value:,.{digits}g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value).replace("|", "\\|")


def _plain(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def experiment_names() -> list[str]:
    """The protocol experiments (from the catalog: no experiment's module is imported)."""
    from .catalog import experiment_names as names

    return names()


def experiment(name: str) -> Experiment:
    """The experiment `name`, its module imported (and so registered) first."""
    from . import catalog

    if name not in catalog.EXPERIMENT_MODULES:
        raise UnknownNameError("experiment", name, catalog.experiment_names())
    catalog.load(name)
    return EXPERIMENTS.create(name)
