"""Run directory writer: resolved config, per-job table, time series and summary, each written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.atomic import write_json, write_text, write_with
from ..core.cluster import ClusterSpec
from ..core.placement import Placement

if TYPE_CHECKING:
    import pandas as pd


def stats(values: np.ndarray) -> dict[str, float | None]:
    """mean, p50, p95, p99 of a sample (None for an empty sample)."""
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"mean": None, "p50": None, "p95": None, "p99": None}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p95": float(p95), "p99": float(p99)}


def placement_strings(placements: list[Placement | None], spec: ClusterSpec) -> list[str]:
    """'node:gpu,gpu;node:gpu' per job ('' when not placed); CPU-only jobs show the node alone."""
    names = spec.node_names.tolist()
    out = []
    for p in placements:
        if p is None:
            out.append("")
            continue
        out.append(";".join(f"{names[n]}:{','.join(map(str, g))}" if g else names[n] for n, g, _, _ in p))
    return out


# Rows converted to Arrow at a time: a table of 10^6 jobs converted whole would double the run's peak memory.
WRITE_CHUNK_ROWS = 1 << 18


def _arrow_chunks(df: pd.DataFrame):
    import pyarrow as pa

    for start in range(0, max(len(df), 1), WRITE_CHUNK_ROWS):
        yield pa.Table.from_pandas(df.iloc[start : start + WRITE_CHUNK_ROWS], preserve_index=False)


def write_table(df: pd.DataFrame, stem: Path) -> None:
    """`stem`.parquet and `stem`.csv, each atomically, converted in chunks of rows, each chunk once for both."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    schema = pa.Schema.from_pandas(df, preserve_index=False)

    def both(parquet_path: Path, csv_path: Path) -> None:
        with pq.ParquetWriter(parquet_path, schema) as parquet, pacsv.CSVWriter(csv_path, schema) as csv:
            for chunk in _arrow_chunks(df):
                table = chunk.cast(schema)
                parquet.write_table(table)
                csv.write_table(table)

    # The CSV is moved into place first, then the Parquet file; neither is left half-written.
    write_with(
        stem.with_suffix(".parquet"),
        lambda parquet_path: write_with(
            stem.with_suffix(".csv"), lambda csv_path: both(parquet_path, csv_path)
        ),
    )


def write_run_dir(
    out: Path,
    config: dict[str, Any],
    jobs: pd.DataFrame,
    series: pd.DataFrame,
    summary: dict[str, Any],
    tables: dict[str, pd.DataFrame] | None = None,
) -> Path:
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "config.resolved.yaml", yaml.safe_dump(config, sort_keys=False))
    write_table(jobs, out / "jobs")
    write_table(series, out / "timeseries")
    for name, table in (tables or {}).items():
        write_table(table, out / name)
    write_json(out / "summary.json", summary)
    return out
