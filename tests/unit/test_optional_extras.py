"""A simulator-only install (`pip install wattsched`, no extras): the optional libraries are imported only by the
commands that need them, and those commands say which extra to install in one line, exit 2, no traceback.
benchmarks/install_footprint.py checks the same in a real fresh venv."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wattsched.cli import common
from wattsched.cli.common import OPTIONAL_MODULES, missing_extra, user_errors
from wattsched.cli.main import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def without(monkeypatch, *modules: str) -> None:
    """`modules` look uninstalled to the CLI's checks (importlib.util.find_spec answers None)."""
    real = importlib.util.find_spec

    def find_spec(name, package=None):
        return None if name.split(".")[0] in modules else real(name, package)

    monkeypatch.setattr(common.importlib.util, "find_spec", find_spec)


def one_line(result, extra: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), repr(result.stderr)
    assert lines[0].endswith(f"pip install 'wattsched[{extra}]'"), lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("args", "module", "extra", "needs"),
    [
        (["serve", "k8s-scheduler"], "kubernetes", "k8s", "serve k8s-scheduler needs the kubernetes client"),
        (["serve", "k8s-extender"], "kubernetes", "k8s", "serve k8s-extender needs the kubernetes client"),
        (["serve", "slurm"], "prometheus_client", "live", "serve slurm needs prometheus-client"),
        (["agent", "--nvml", "fake"], "prometheus_client", "agent", "agent needs prometheus-client"),
        (["agent", "--nvml", "real"], "pynvml", "agent", "agent needs NVML bindings (nvidia-ml-py)"),
    ],
)
def test_command_names_its_extra(monkeypatch, tmp_path, args, module, extra, needs):
    without(monkeypatch, module)
    monkeypatch.chdir(tmp_path)  # nothing a half-started command could write lands in the repository
    line = one_line(runner.invoke(app, args), extra)
    assert needs in line


def test_missing_optional_import_is_one_line():
    """A lazy import deep inside a command (e.g. the report's plots) ends as the extra's line, exit 2."""
    import typer

    with pytest.raises(typer.Exit) as exit_info, user_errors():
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib.pyplot")
    assert exit_info.value.exit_code == 2
    assert missing_extra("matplotlib", "wattsched demo") == (
        "wattsched demo needs matplotlib: pip install 'wattsched[plots]'"
    )
    with pytest.raises(ModuleNotFoundError), user_errors():  # any other missing module is a bug: traceback
        raise ModuleNotFoundError("No module named 'nonexistent'", name="nonexistent")


def test_every_extra_is_declared():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for _module, (_what, extra) in OPTIONAL_MODULES.items():
        assert extra in extras
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in core if "==" in d], "exact pins belong in requirements.lock"
    optional = ("kubernetes", "nvidia-ml-py", "prometheus-client", "matplotlib", "ray")
    assert not [d for d in core if d.startswith(optional)]
    assert set(extras) >= {"live", "k8s", "agent", "plots", "ray", "dev", "all"}


BLOCKER = textwrap.dedent(
    """
    import sys
    BLOCK = {blocked!r}

    class Uninstalled:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCK:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Uninstalled())
    """
)


@pytest.mark.slow  # three CLI processes, ~3 s: `make test-fast` leaves it out
def test_simulator_runs_without_the_optional_libraries(tmp_path):
    """`wattsched --help` and `simulate` in a process where none of the optional libraries can be imported."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(OPTIONAL_MODULES)))
    env = {"PYTHONPATH": f"{ROOT / 'src'}:{tmp_path}", "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
    cli = [sys.executable, "-m", "wattsched.cli.main"]
    help_run = subprocess.run([*cli, "--help"], env=env, capture_output=True, text=True, timeout=120)
    assert help_run.returncode == 0, help_run.stderr
    sim = subprocess.run(
        [*cli, "simulate", "--quiet", "--jobs", "50", "--out", str(tmp_path / "run")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert sim.returncode == 0, sim.stderr
    assert (tmp_path / "run" / "summary.json").is_file()
    k8s = subprocess.run(
        [*cli, "serve", "k8s-scheduler"], env=env, capture_output=True, text=True, timeout=120
    )
    assert k8s.returncode == 2 and "Traceback" not in k8s.stderr, k8s.stderr
    assert k8s.stderr.strip().endswith("pip install 'wattsched[k8s]'")
