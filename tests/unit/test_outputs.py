"""The run-directory table writer converts and writes in chunks of rows: same files as a whole-table write."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from wattsched.experiments import outputs


@pytest.mark.parametrize("chunk", [1, 3, 100])
def test_chunked_tables_equal_a_whole_table_write(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(outputs, "WRITE_CHUNK_ROWS", chunk)
    # A string column that is empty in the first chunks must keep its string type in later ones.
    df = pd.DataFrame(
        {
            "x": np.linspace(0, 1, 8),
            "s": [None] * 4 + ["a", "b", "", "c,d"],
            "n": np.arange(8, dtype=np.int64),
        }
    )
    outputs.write_table(df, tmp_path / "t")
    pd.testing.assert_frame_equal(pq.read_table(tmp_path / "t.parquet").to_pandas(), df)
    whole = tmp_path / "whole.csv"
    pacsv.write_csv(pa.Table.from_pandas(df, preserve_index=False), whole)
    assert (tmp_path / "t.csv").read_bytes() == whole.read_bytes()


def test_empty_table_keeps_its_header(tmp_path):
    df = pd.DataFrame({"x": np.zeros(0), "n": np.zeros(0, dtype=np.int64)})
    outputs.write_table(df, tmp_path / "t")
    assert (tmp_path / "t.csv").read_text().splitlines() == ['"x","n"']
    assert pq.read_table(tmp_path / "t.parquet").num_rows == 0
