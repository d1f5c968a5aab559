"""Malformed input on the command line: exit code 2 and exactly one `error:` line, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from wattsched.cli.common import user_errors
from wattsched.cli.main import app
from wattsched.core.errors import InputError

runner = CliRunner()
GOLDEN = Path(__file__).parent.parent / "golden"
PHILLY_ROW = "2017-10-01 00:00:00,5,1,5,vc\n"


def one_error_line(result) -> str:
    """The run failed with code 2 and printed exactly one line, `error: ...`, and nothing else."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), repr(result.stderr)
    assert result.output.splitlines() == lines, repr(result.output)
    return lines[0]


def simulate(tmp_path: Path, *args, env=None):
    return runner.invoke(app, ["simulate", *map(str, args), "--out", str(tmp_path / "run")], env=env)


def test_directory_as_workload(tmp_path):
    line = one_error_line(simulate(tmp_path, "--workload", tmp_path))
    assert line == f"error: {tmp_path}: is a directory, expected a CSV file"
    folder = tmp_path / "jobs.csv"
    folder.mkdir()
    line = one_error_line(simulate(tmp_path, "--workload", folder))
    assert line == f"error: {folder}: is a directory, expected a CSV file"


def test_directory_as_cluster(tmp_path):
    line = one_error_line(simulate(tmp_path, "--cluster", tmp_path, "--jobs", 10))
    assert line.startswith(f"error: {tmp_path}: is a directory, expected a cluster")
    folder = tmp_path / "c.yaml"
    folder.mkdir()
    line = one_error_line(simulate(tmp_path, "--cluster", folder, "--jobs", 10))
    assert line == f"error: {folder}: is a directory, expected a cluster YAML file"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, ": file not found"),
        (b"", ":1: file is empty"),
        (bytes(range(256)) * 8, ":3: not UTF-8 text"),
        (b"job_id,submit_time,duration,num_gpu\nb,\xe9,1,1\n", ":2: not UTF-8 text"),
        (b"job_id,submit_time,duration,num_gpu\na,0,1,1\nb,\x00,1,1\n", ":3: contains a NUL byte"),
        (b"job_id,submit_time,duration,num_gpu\na,0,1,1" + b"," * 100_000 + b"\n", ":2: expected 4 fields"),
        (b"job_id,submit_time,duration,num_gpu\na,0,1\n", ":2: expected 4 fields, found 3"),
        (b'job_id,submit_time,duration,num_gpu\na,"0,1,1\nb,0,1,1\n', ":2: expected 4 fields, found 2"),
        (b"job_id,submit_time,duration,num_gpu\n[/bold]\nline,0,1,1\n", ":2: expected 4 fields, found 1"),
    ],
)
def test_bad_workload_file(tmp_path, content, fragment):
    path = tmp_path / "jobs.csv"
    if content is not None:
        path.write_bytes(content)
    line = one_error_line(simulate(tmp_path, "--workload", path, "--cluster", GOLDEN / "cluster.yaml"))
    assert line.startswith(f"error: {path}{fragment}"), line


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (bytes(range(256)), "not UTF-8 text"),
        (b"name: x\x00\n", "NUL byte"),
        (b"name: x\nnode_groups: [\n", "invalid YAML"),
        (b"[" * 5000 + b"]" * 5000, "invalid YAML"),
        (
            b"name: x\nnode_groups:\n  - {count: 1000000000000, gpus: 0, cpu_milli: 1, memory_mib: 1}\n",
            "nodes",
        ),
        (
            b"name: x\nnode_groups:\n  - {count: 1, gpus: 1, gpu_model: 'A\\nB', cpu_milli: 1, memory_mib: 1}\n",
            "'A",
        ),
    ],
)
def test_bad_cluster_yaml(tmp_path, content, fragment):
    path = tmp_path / "cluster.yaml"
    path.write_bytes(content)
    line = one_error_line(simulate(tmp_path, "--cluster", path, "--jobs", 10))
    assert line.startswith(f"error: {path}") and fragment in line, line


def test_binary_config_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(bytes(range(256)))
    line = one_error_line(simulate(tmp_path, "--config", path))
    assert "not UTF-8 text" in line


def test_long_error_is_not_wrapped_on_a_narrow_terminal(tmp_path):
    path = tmp_path / ("a-rather-long-file-name-" * 4 + ".csv")
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + PHILLY_ROW + "x,y\n")
    result = simulate(tmp_path, "--workload", path, env={"COLUMNS": "20"})
    assert len(one_error_line(result)) > 100


def test_user_errors_print_any_message_on_one_line(capsys):
    with pytest.raises(typer.Exit) as info, user_errors():
        raise InputError("odd\nname.csv", 3, None, "bad [/bold] value\r\nsecond line \x1b[31m")
    assert info.value.exit_code == 2
    err = capsys.readouterr().err
    assert err == "error: odd name.csv:3: bad [/bold] value second line \\x1b[31m\n"
    with pytest.raises(typer.Exit), user_errors():
        raise IsADirectoryError(21, "Is a directory", "/some\ndir")
    assert capsys.readouterr().err == "error: Is a directory: /some dir\n"


def test_load_workload_with_a_directory_is_one_input_error(tmp_path):
    from wattsched.workloads.catalog import load_workload

    for folder in (tmp_path, tmp_path / "jobs.csv", tmp_path / "philly"):  # plain, .csv-like, catalog-like
        folder.mkdir(exist_ok=True)
        with pytest.raises(InputError) as info:
            load_workload(str(folder))
        assert str(info.value) == f"{folder}: is a directory, expected a CSV file"


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("missing.yaml", None, ": file not found"),
        ("folder.yaml", "dir", ": is a directory, expected a YAML config file"),
        ("binary.yaml", bytes(range(256)), ":3: not UTF-8 text"),  # \n and \r come before the first bad byte
        ("latin1.yaml", b"seed: 1\nout: caf\xe9\n", ":2: not UTF-8 text"),
        ("nul.yaml", b"seed: 1\nqueue: fifo\x00\n", ":2: contains a NUL byte"),
        ("deep.yaml", b"[" * 5000 + b"]" * 5000, ": not valid YAML (nested too deeply)"),
        ("unclosed.yaml", b"seed: [1\n", ":2: not valid YAML (while parsing a flow sequence, expected ','"),
        ("list.yaml", b"- seed\n", ":1: expected a mapping of settings at the top level"),
    ],
)
def test_bad_config_file(tmp_path, name, content, fragment):
    path = tmp_path / name
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    line = one_error_line(simulate(tmp_path, "--config", path, "--jobs", 10))
    assert line.startswith(f"error: {path}{fragment}"), line
