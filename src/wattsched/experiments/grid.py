"""Pieces every experiment grid shares: its result, the policy-name check, the trace check, the results table and
the thinning of time series for plots."""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.atomic import write_with
from ..core.errors import UnknownNameError, WattschedError


@dataclass
class ExperimentResult:
    out: Path
    results: pd.DataFrame
    summary: dict[str, Any]
    runs: list = field(repr=False, default_factory=list)


def worker_count(workers: int | None, tasks: int | None = None) -> int:
    """`workers` (default: one per core), never more than there are tasks."""
    count = workers or os.cpu_count() or 1
    return max(1, min(count, tasks) if tasks is not None else count)


def machine_description() -> str:
    return f"{platform.platform()}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}"


def parse_list(text: str) -> list[str]:
    """A comma-separated option as its non-empty, stripped items."""
    return [p.strip() for p in text.split(",") if p.strip()]


def check_policy_names(names: Sequence[str], known: Sequence[str], required: str, why: str) -> list[str]:
    """`names` without repeats; each must be known, and `required` among them (`why` says what needs it)."""
    for n in names:
        if n not in known:
            raise UnknownNameError("policy", n, list(known))
    if required not in names:
        raise WattschedError(f"--policies must include {required} ({why})")
    return list(dict.fromkeys(names))


def require_times(inputs, workload: str) -> None:
    if not inputs.has_times:
        raise WattschedError(f"workload '{workload}' has no submission times; the experiment needs a trace")


def write_csv(path: Path, df: pd.DataFrame) -> None:
    write_with(path, lambda p: df.to_csv(p, index=False, float_format="%.6g"))


def write_results(out: str | Path, results: pd.DataFrame) -> Path:
    """Create the output directory and write `results.csv` into it; the directory."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "results.csv", results)
    return out


def save_figure(fig, path: Path, dpi: int = 120) -> None:
    """Write a matplotlib figure as PNG atomically, then free it."""
    import matplotlib.pyplot as plt

    write_with(path, lambda p: fig.savefig(p, dpi=dpi, format="png"))
    plt.close(fig)


def thinned(size: int, points: int) -> np.ndarray:
    """At most `points` evenly spread indices into a series of `size`, first and last included."""
    if size <= 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.linspace(0, size - 1, points).astype(np.int64))


def plots_if_available(write: Callable[..., Any], *args: Any) -> Any:
    """An experiment's figures, or none (an empty list) where matplotlib, the ``[plots]`` extra, is not installed:
    the tables and the summary stand without them; the skip is logged in one line."""
    from .report_plots import PLOTS_SKIPPED, plots_available

    if not plots_available():
        logging.getLogger("wattsched").warning(PLOTS_SKIPPED)
        return []
    return write(*args)
