"""Grid execution without Ray: the backend registry, the CLI's --backend/--address/--fresh checks, the cell digest,
and resuming an interrupted grid (finished cells are not run again; --fresh runs them all)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import wattsched.experiments.fgd_pwr as fgd_pwr
from tests.unit.test_fgd_pwr_experiment import TINY, tiny_jobs
from tests.unit.test_powerflow_experiment import PERFDATA
from wattsched.cli.experiment import experiment_app
from wattsched.core.errors import WattschedError
from wattsched.experiments.cells import CELLS_DIR, digest
from wattsched.experiments.fgd_pwr import FgdPwr, FgdPwrConfig, GridInputs
from wattsched.experiments.parallel import GRID_BACKENDS, Execution, ProcessExecutor, run_tasks
from wattsched.experiments.protocol import run_experiment

POLICIES = ["fgd", "pwr_200_fgd_800", "random"]
CELLS = len(POLICIES) * 2  # two seeds each
RESULT_FILES = ("curves.csv", "grid.csv")
POWERFLOW = ["powerflow", "--workload", "pollux/workload-1", "--cluster", "n16g4", "--gpu-type", "T4"]
POWERFLOW += ["--seeds", "1", "--baselines", "fifo", "--budget-points", "2", "--caps", "1.0,0.7"]
POWERFLOW += ["--data-dir", str(PERFDATA), "--power-manager", "always-on", "--quiet"]


@pytest.fixture(scope="module")
def inputs() -> GridInputs:
    return GridInputs("tiny", tiny_jobs(), TINY)


@pytest.fixture(scope="module")
def reference(inputs, tmp_path_factory) -> dict[str, bytes]:
    """The tiny grid's result files from one uninterrupted run."""
    out = tmp_path_factory.mktemp("reference")
    run_experiment(FgdPwr(inputs), FgdPwrConfig(seeds=2, policies=POLICIES), out, workers=1, plots=False)
    return {name: (out / name).read_bytes() for name in RESULT_FILES}


class CountingPacker:
    """Stands in for run_packing (called once per cell by run_one): counts the calls and fails on one of them."""

    def __init__(self, fail_on_call: int | None = None) -> None:
        self.calls = 0
        self.fail_on_call = fail_on_call
        self.real = fgd_pwr.run_packing

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError("cell failed on purpose")
        return self.real(*args, **kwargs)


def run_tiny(inputs, out: Path, execution: Execution | None = None, workers: int = 1, progress=None):
    cfg = FgdPwrConfig(seeds=2, policies=POLICIES)
    return run_experiment(FgdPwr(inputs), cfg, out, workers, execution, progress, plots=False)


def result_bytes(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in RESULT_FILES}


def cached_cells(out: Path) -> list[Path]:
    return sorted((out / CELLS_DIR).glob("*.pkl"))


def test_backends_are_registered_by_name():
    assert GRID_BACKENDS.names() == ["process", "ray"]
    Execution().check()
    with pytest.raises(WattschedError, match="--address is for --backend ray"):
        Execution("process", "127.0.0.1:6379").check()
    with pytest.raises(WattschedError, match="unknown backend 'dask'; valid backends: process, ray"):
        Execution("dask").check()


def test_run_tasks_reports_results_and_width():
    results, width = run_tasks(pow, 2, [(3,), (5,), (10,)], workers=1)
    assert sorted(results) == [8, 32, 1024] and width == 1


def test_interrupted_grid_resumes_without_rerunning_finished_cells(inputs, reference, tmp_path, monkeypatch):
    failing = CountingPacker(fail_on_call=3)
    monkeypatch.setattr(fgd_pwr, "run_packing", failing)
    with pytest.raises(RuntimeError, match="on purpose"):
        run_tiny(inputs, tmp_path)
    assert failing.calls == CELLS  # one process: every other cell still ran
    assert len(cached_cells(tmp_path)) == CELLS - 1
    assert not (tmp_path / "curves.csv").exists()

    counting = CountingPacker()
    monkeypatch.setattr(fgd_pwr, "run_packing", counting)
    notices: list[str] = []
    run_tiny(inputs, tmp_path, Execution(notify=notices.append))
    assert counting.calls == 1  # only the cell that failed
    assert notices == [f"resumed {CELLS - 1} of {CELLS} runs from {tmp_path / CELLS_DIR}"]
    assert result_bytes(tmp_path) == reference
    assert not (tmp_path / CELLS_DIR).exists()  # removed once the files are written


def test_fresh_reruns_every_cell(inputs, reference, tmp_path, monkeypatch):
    monkeypatch.setattr(fgd_pwr, "run_packing", CountingPacker(fail_on_call=2))
    with pytest.raises(RuntimeError):
        run_tiny(inputs, tmp_path)
    assert len(cached_cells(tmp_path)) == CELLS - 1
    counting = CountingPacker()
    monkeypatch.setattr(fgd_pwr, "run_packing", counting)
    notices: list[str] = []
    run_tiny(inputs, tmp_path, Execution(fresh=True, notify=notices.append))
    assert counting.calls == CELLS and notices == []
    assert result_bytes(tmp_path) == reference


def test_other_settings_do_not_reuse_cells(inputs, tmp_path, monkeypatch):
    monkeypatch.setattr(fgd_pwr, "run_packing", CountingPacker(fail_on_call=CELLS))
    with pytest.raises(RuntimeError):
        run_tiny(inputs, tmp_path)
    counting = CountingPacker()
    monkeypatch.setattr(fgd_pwr, "run_packing", counting)
    smaller = GridInputs(
        "tiny", tiny_jobs().subset(np.arange(40)), TINY
    )  # another trace: another setup digest
    run_tiny(smaller, tmp_path)
    assert counting.calls == CELLS


def test_changed_source_does_not_reuse_cells(inputs, tmp_path, monkeypatch):
    """Cells are keyed by the package's source too: an edited policy must not come back with its old results."""
    from wattsched.experiments import cells

    monkeypatch.setattr(fgd_pwr, "run_packing", CountingPacker(fail_on_call=CELLS))
    with pytest.raises(RuntimeError):
        run_tiny(inputs, tmp_path)
    assert len(cached_cells(tmp_path)) == CELLS - 1
    monkeypatch.setattr(cells, "source_digest", lambda: "another source")
    counting = CountingPacker()
    monkeypatch.setattr(fgd_pwr, "run_packing", counting)
    run_tiny(inputs, tmp_path)
    assert counting.calls == CELLS


def test_tree_digest_follows_source_files_only(tmp_path):
    from wattsched.experiments.cells import tree_digest

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "policy.py").write_text("RATE = 1\n")
    (tmp_path / "kernel.c").write_text("int x;\n")
    first = tree_digest(tmp_path)
    (tmp_path / "notes.txt").write_text("not code")
    assert tree_digest(tmp_path) == first
    (tmp_path / "pkg" / "policy.py").write_text("RATE = 2\n")
    assert tree_digest(tmp_path) != first


def test_process_pool_interrupted_by_the_user_resumes(inputs, reference, tmp_path):
    def interrupt(done: int, total: int) -> None:
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_tiny(inputs, tmp_path, workers=2, progress=interrupt)
    kept = len(cached_cells(tmp_path))
    assert kept >= 2  # every cell the caller saw finish is on disk
    seen: list[tuple[int, int]] = []
    notices: list[str] = []
    run_tiny(
        inputs, tmp_path, Execution(notify=notices.append), workers=2, progress=lambda *a: seen.append(a)
    )
    assert notices == [f"resumed {kept} of {CELLS} runs from {tmp_path / CELLS_DIR}"]
    assert seen[0] == (0, CELLS) and seen[-1] == (CELLS, CELLS)
    assert result_bytes(tmp_path) == reference


def running_pid(pid: int) -> bool:
    """The process exists and is not a zombie (the pool's manager thread may reap it before we look)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def nap(shared, seconds: float) -> None:
    time.sleep(seconds)


def test_a_second_interrupt_while_winding_down_stops_the_workers(monkeypatch):
    pool = ProcessExecutor(None, 2)
    running = [pool.submit(nap, 60) for _ in range(2)]
    workers = list(pool._pool._processes.values())
    assert len(workers) == 2 and not any(f.done() for f in running)

    def interrupted(*args, **kwargs):  # what a second Ctrl-C does to ProcessPoolExecutor.shutdown's join
        raise KeyboardInterrupt

    monkeypatch.setattr(pool._pool, "shutdown", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pool.shutdown(wait=True, cancel_futures=True)
    deadline = time.monotonic() + 10
    while any(running_pid(p.pid) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running_pid(p.pid) for p in workers)  # not 60 s of naps, nor a hang at exit
    monkeypatch.undo()
    pool.shutdown()


def test_digest_is_the_same_in_every_process():
    setup = {"names": frozenset({"fifo", "gandiva", "tiresias"}), "arr": [1, 2.5, None], "path": Path("x")}
    script = (
        "from pathlib import Path; from wattsched.experiments.cells import digest; "
        "print(digest({'names': frozenset({'fifo', 'gandiva', 'tiresias'}), 'arr': [1, 2.5, None], "
        "'path': Path('x')}))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert outputs == {digest(setup)}
    assert digest((1, "a")) != digest((1.0, "a")) != digest(("1", "a"))
    assert digest(GridInputs("tiny", tiny_jobs(), TINY)) == digest(GridInputs("tiny", tiny_jobs(), TINY))
    assert digest(GridInputs("tiny", tiny_jobs(), TINY)) != digest(
        GridInputs("tiny", tiny_jobs().subset(np.arange(59)), TINY)
    )


# -- the command line ---------------------------------------------------------------------------------------
def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


REQUIRED = {"powerflow": ["--workload", "w", "--cluster", "c"]}  # checked after --backend and --address


@pytest.mark.parametrize("name", [c.name for c in experiment_app.registered_commands])
def test_every_experiment_takes_the_grid_options(name):
    command = [name, *REQUIRED.get(name, [])]
    result = CliRunner().invoke(experiment_app, [*command, "--address", "127.0.0.1:6379"])
    line = one_error_line(result)
    assert line == "error: --address is for --backend ray (the process backend runs on this machine)"
    result = CliRunner().invoke(experiment_app, [*command, "--backend", "dask"])
    assert one_error_line(result) == "error: unknown backend 'dask'; valid backends: process, ray"
    help_text = CliRunner().invoke(experiment_app, [name, "--help"], terminal_width=200).output
    for flag in ("--backend", "--address", "--fresh", "--workers"):
        assert flag in help_text, (name, flag)


def test_backend_ray_without_ray_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails as if not installed
    result = CliRunner().invoke(experiment_app, [*POWERFLOW, "--out", str(tmp_path), "--backend", "ray"])
    line = one_error_line(result)
    assert line == "error: --backend ray needs Ray, which is not installed: pip install 'wattsched[ray]'"


def test_cli_resumes_and_says_so(tmp_path):
    def interrupt(done: int, total: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    from wattsched.experiments.powerflow import PowerFlowConfig
    from wattsched.experiments.protocol import EXPERIMENTS
    from wattsched.experiments.protocol import run_experiment as run_protocol

    cfg = PowerFlowConfig(
        workload="pollux/workload-1", cluster="n16g4", gpu_type="T4", seeds=1, baselines=["fifo"],
        budget_points=2, caps=[1.0, 0.7], power_manager=["always-on"], data_dir=str(PERFDATA),
    )  # fmt: skip
    exp = EXPERIMENTS.create("powerflow")
    cells = len(exp.grid(cfg))  # the seed's dependent runs (one cell) and a cell per run's row
    with pytest.raises(KeyboardInterrupt):
        run_protocol(exp, cfg, tmp_path, workers=1, progress=interrupt, plots=False)
    kept = len(cached_cells(tmp_path))
    assert kept >= 3
    result = CliRunner().invoke(experiment_app, [*POWERFLOW, "--out", str(tmp_path), "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert f"resumed {kept} of {cells} runs from {tmp_path / CELLS_DIR}" in result.output
    assert not (tmp_path / CELLS_DIR).exists()
    fresh = CliRunner().invoke(experiment_app, [*POWERFLOW, "--out", str(tmp_path / "b"), "--fresh"])
    assert fresh.exit_code == 0 and "resumed" not in fresh.output
    for name in ("results.csv", "sweep.csv"):
        assert (tmp_path / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
