"""Fuzzing the trace and cluster readers with malformed input.

Every reader must either load the file or raise a :class:`WattschedError` whose message is one line, never
another exception, and in time linear in the input. Rows with too many or too few fields must be rejected
with the file line of the first such row.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from wattsched.core.errors import InputError, WattschedError
from wattsched.workloads.clusters import load_cluster_yaml, read_alibaba_nodes, read_spec_csv
from wattsched.workloads.generic_csv import read_generic_csv
from wattsched.workloads.traces import (
    read_alibaba_pods,
    read_gavel,
    read_hyperdrive,
    read_philly,
    read_tiresias,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
THROUGHPUTS = FIXTURES / "data" / "gavel-traces" / "simulation_throughputs.json"
WHITESPACE = " \t\r\n\v\f"  # a line of only these is blank
TIME_LIMIT_S = 2.0  # inputs here are a few kB; the readers take milliseconds


def _gavel(path):
    return read_gavel(path, THROUGHPUTS)


def _spec(path):
    return read_spec_csv(path, name="n1g1")


# reader, separator, header (None: no header, the field count is fixed), quoting
CSV_READERS = {
    "generic": (
        read_generic_csv,
        ",",
        "job_id,submit_time,duration,num_gpu,gpu_milli,cpu_milli,memory_mib,gpu_model,job_class,model_name,"
        "deadline,user",
        csv.QUOTE_MINIMAL,
    ),
    "philly": (read_philly, ",", "timestamp,duration,num_gpus,gpu_time,cluster", csv.QUOTE_MINIMAL),
    "tiresias": (
        read_tiresias,
        ",",
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval",
        csv.QUOTE_MINIMAL,
    ),
    "hyperdrive": (
        read_hyperdrive,
        ",",
        "experiment-id,job-id,start-time,run-time,num-gpus",
        csv.QUOTE_MINIMAL,
    ),
    "alibaba-pods": (
        read_alibaba_pods,
        ",",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
        "scheduled_time",
        csv.QUOTE_MINIMAL,
    ),
    "gavel": (_gavel, "\t", None, csv.QUOTE_NONE),
    "alibaba-nodes": (read_alibaba_nodes, ",", "sn,cpu_milli,memory_mib,gpu,model", csv.QUOTE_MINIMAL),
    "spec": (
        _spec,
        ",",
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node",
        csv.QUOTE_MINIMAL,
    ),
}
GAVEL_FIELDS = (7, 10)
ALL_READERS = {**{k: v[0] for k, v in CSV_READERS.items()}, "cluster-yaml": load_cluster_yaml}


def load(reader, path: Path) -> WattschedError | None:
    """Run a reader; return its error (or None), after checking the error's form and the time taken."""
    t0 = time.perf_counter()
    try:
        reader(path)
    except WattschedError as exc:
        error = exc
    else:
        error = None
    elapsed = time.perf_counter() - t0
    assert elapsed < TIME_LIMIT_S, f"{elapsed:.2f} s for {path.stat().st_size} bytes"
    if error is not None:
        message = str(error)
        assert message and message.splitlines() == [message], repr(message)
    return error


def is_blank(cells: list[str], sep: str) -> bool:
    """What the readers drop as a blank line: nothing but whitespace (separators count when whitespace)."""
    if not cells:
        return True
    if len(cells) > 1 and sep not in WHITESPACE:
        return False
    return all(not c.strip(WHITESPACE) for c in cells)


# -- (i) arbitrary bytes -------------------------------------------------------------------------------------

SEEDS = [
    (FIXTURES / "data" / "philly-pollux" / "philly.csv").read_bytes(),
    (FIXTURES / "jobs_seconds.csv").read_bytes(),
    (FIXTURES / "cluster_small.yaml").read_bytes(),
    (FIXTURES / "data" / "gavel-traces" / "msr" / "seed=0" / "0e4a51.trace").read_bytes(),
]


@st.composite
def mangled(draw) -> bytes:
    """A fixture with random bytes spliced in, or plain random bytes."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=400))
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        cut = draw(st.integers(0, 8))
        junk = draw(
            st.one_of(st.binary(max_size=8), st.sampled_from([b",", b"\t", b'"', b"\n", b"\r", b":"]))
        )
        data[at : at + cut] = junk
    return bytes(data)


@pytest.mark.parametrize("name", sorted(ALL_READERS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mangled())
def test_arbitrary_bytes_load_or_raise_one_line(tmp_path, name, data):
    path = tmp_path / ("input.yaml" if name == "cluster-yaml" else "input.csv")
    path.write_bytes(data)
    load(ALL_READERS[name], path)


# -- (ii) the right header, random field counts and cell text ------------------------------------------------

TYPICAL_CELLS = (
    "", " ", "0", "1", "2", "8", "-1", "1.5", "1000", "nan", "inf", "-inf", "1e30", "abc", "V100", "T4|A10",
    "training", "inference", "2017-10-01 00:00:00", "2024-01-01T00:00:00+01:00", "ResNet-50 (batch size 64)",
)  # fmt: skip
CELLS = st.one_of(st.sampled_from(TYPICAL_CELLS), st.text(max_size=12))


@st.composite
def table(draw, sep: str, width: int, quoting: int) -> tuple[bytes, list[list[str]], bool]:
    """Rows of cells whose counts are mostly right; returns (file bytes, rows, written with csv quoting)."""
    n_rows = draw(st.integers(0, 8))
    rows = []
    for _ in range(n_rows):
        count = draw(st.one_of(st.just(width), st.just(width), st.integers(0, width + 3)))
        rows.append(draw(st.lists(CELLS, min_size=count, max_size=count)))
    quoted = quoting != csv.QUOTE_NONE and draw(st.booleans())
    # NUL bytes are the bytes fuzzer's business; unquoted cells must not split or join fields
    banned = {"\x00"} if quoted else {sep, "\r", "\n", "\x00", *("" if quoting == csv.QUOTE_NONE else '"')}
    rows = [["".join(ch for ch in c if ch not in banned) for c in row] for row in rows]
    if quoted:  # any text, quoted where needed: the field counts stay exact
        buf = io.StringIO()
        end = draw(st.sampled_from(["\n", "\r\n"]))  # with "\n", QUOTE_MINIMAL would leave a lone "\r" bare
        style = csv.QUOTE_MINIMAL if end == "\r\n" else csv.QUOTE_ALL
        writer = csv.writer(buf, delimiter=sep, lineterminator=end, quoting=style)
        writer.writerows(rows)
        text = buf.getvalue()
    else:  # raw cells: nothing that could split or join a field
        text = "".join(sep.join(row) + "\n" for row in rows)
    return text.encode("utf-8"), rows, quoted


def physical_lines(rows: list[list[str]], quoted: bool, sep: str, first_line: int) -> list[int]:
    """The file line each row starts on (quoted cells may hold line breaks)."""
    out, line = [], first_line
    for row in rows:
        out.append(line)
        if quoted:
            text = sep.join(row)
            line += text.count("\n") + text.count("\r") - text.count("\r\n")
        line += 1
    return out


def first_bad_line(rows, lines, sep: str, width: int) -> int | None:
    for row, line in zip(rows, lines, strict=True):
        if len(row) != width and not is_blank(row, sep):
            return line
    return None


@pytest.mark.parametrize("name", sorted(CSV_READERS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_rows_load_or_raise_at_first_bad_row(tmp_path, name, data):
    reader, sep, header, quoting = CSV_READERS[name]
    width = len(header.split(sep)) if header else data.draw(st.sampled_from(GAVEL_FIELDS))
    body, rows, quoted = data.draw(table(sep, width, quoting))
    path = tmp_path / "input.csv"
    path.write_bytes((header + "\n").encode() + body if header else body)
    lines = physical_lines(rows, quoted, sep, 2 if header else 1)
    if header is None:  # gavel: the first non-blank row picks the 7- or 10-field layout
        firsts = [(row, line) for row, line in zip(rows, lines, strict=True) if not is_blank(row, sep)]
        assume(not firsts or len(firsts[0][0]) in GAVEL_FIELDS)
        width = len(firsts[0][0]) if firsts else width
    bad = first_bad_line(rows, lines, sep, width)
    error = load(reader, path)
    if bad is not None:
        assert isinstance(error, InputError), f"row on line {bad} has the wrong field count: {error}"
        assert error.line == bad, str(error)
        assert f"expected {width} fields" in error.message


# -- YAML built from random data -----------------------------------------------------------------------------

YAML_VALUES = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-5, 100), st.just(10**9), st.text(max_size=8), st.floats()
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["name", "count", "x"]), inner, max_size=3),
    ),
    max_leaves=12,
)
GROUP_VALUES = st.fixed_dictionaries(
    {},
    optional={
        "count": st.one_of(st.integers(-2, 64), st.integers(10**6, 10**12), YAML_VALUES),  # big: refused
        "gpus": st.one_of(st.integers(-1, 16), YAML_VALUES),
        "gpu_model": st.one_of(st.sampled_from(["A100", "T4", "X1"]), YAML_VALUES),
        "cpu_milli": st.one_of(st.integers(-1, 10**6), YAML_VALUES),
        "memory_mib": st.one_of(st.integers(-1, 10**6), YAML_VALUES),
        "nodes_per_switch": st.one_of(st.integers(0, 8), YAML_VALUES),
        "name_prefix": st.one_of(st.text(max_size=6), YAML_VALUES),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    doc=st.fixed_dictionaries(
        {},
        optional={
            "name": st.one_of(st.text(max_size=8), YAML_VALUES),
            "notes": YAML_VALUES,
            "node_groups": st.one_of(st.lists(GROUP_VALUES, max_size=3), YAML_VALUES),
            "extra": YAML_VALUES,
        },
    )
)
def test_random_cluster_yaml_loads_or_raises_one_line(tmp_path, doc):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    load(load_cluster_yaml, path)


# -- deterministic worst cases -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CSV_READERS))
@pytest.mark.parametrize("bad_row", [1, 15])
def test_one_line_with_100000_extra_separators_fails_fast(tmp_path, name, bad_row):
    reader, sep, header, _ = CSV_READERS[name]
    width = len(header.split(sep)) if header else 7
    row = sep.join(["1"] * width)
    rows = [row] * 20
    rows[bad_row - 1] = row + sep * 100_000
    path = tmp_path / "wide.csv"
    path.write_text("\n".join(([header] if header else []) + rows) + "\n")
    line = bad_row + (1 if header else 0)
    t0 = time.perf_counter()
    with pytest.raises(InputError) as info:
        reader(path)
    elapsed = time.perf_counter() - t0
    if header is None and bad_row == 1:  # gavel: the first row also picks the layout
        assert info.value.line == 1 and "found 100007" in info.value.message
    else:
        assert info.value.line == line
        assert info.value.message.startswith(f"expected {width} fields")
        assert info.value.message.endswith(f"found {width + 100_000}")
    assert elapsed < 1.0, f"{elapsed:.2f} s"


def test_large_file_is_checked_in_linear_time(tmp_path):
    """About 3 MB: 200,000 rows and one bad row at the end; must fail within a second."""
    row = "2017-10-01 00:00:00,5,1,5,vc\n"
    path = tmp_path / "philly.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + row * 100_000 + "x,y\n" + row)
    t0 = time.perf_counter()
    with pytest.raises(InputError) as info:
        read_philly(path)
    assert time.perf_counter() - t0 < 1.0
    assert info.value.line == 100_002 and info.value.message == "expected 5 fields, found 2"
