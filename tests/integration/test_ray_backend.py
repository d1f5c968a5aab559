"""`--backend ray` on a local multi-node Ray cluster (a 0-CPU head and three 1-CPU nodes, each its own raylet):
the same result files as the process pool, byte for byte; an interrupted grid resumes; one-line errors."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.unit.test_fgd_pwr_experiment import TINY, tiny_jobs
from tests.unit.test_grid_execution import POWERFLOW, one_error_line
from wattsched.cli.experiment import experiment_app
from wattsched.experiments.cells import CELLS_DIR
from wattsched.experiments.fgd_pwr import FgdPwr, FgdPwrConfig, GridInputs
from wattsched.experiments.parallel import Execution
from wattsched.experiments.protocol import run_experiment

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'wattsched[ray]')")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = pytest.mark.ray

NODES = 3
NODE_ARGS = {"include_dashboard": False, "object_store_memory": 80 * 2**20}
POLICIES = ["fgd", "pwr_200_fgd_800", "random"]
CONFIG = FgdPwrConfig(seeds=2, policies=POLICIES)


def descendants(pid: int) -> set[int]:
    """Live (not zombie) processes below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


@pytest.fixture(scope="module")
def ray_cluster():
    import os

    before = descendants(os.getpid())
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, **NODE_ARGS})
    try:
        for _ in range(NODES):
            cluster.add_node(num_cpus=1, **NODE_ARGS)
        cluster.wait_for_nodes()
        yield cluster
        started = descendants(os.getpid()) - before
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
    assert started, "the cluster's processes were not seen"
    deadline = time.monotonic() + 20
    while (left := started & descendants(os.getpid())) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"processes left after the cluster shut down: {sorted(left)}"


@pytest.fixture(scope="module")
def inputs() -> GridInputs:
    return GridInputs("tiny", tiny_jobs(), TINY)


@pytest.fixture(scope="module")
def pool_run(inputs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pool")
    run_experiment(FgdPwr(inputs), CONFIG, out, workers=2, plots=False)
    return out


def same_bytes(a: Path, b: Path, names) -> None:
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_fgd_pwr_on_ray_equals_the_process_pool(ray_cluster, inputs, pool_run, tmp_path):
    execution = Execution("ray", ray_cluster.address)
    result = run_experiment(FgdPwr(inputs), CONFIG, tmp_path, execution=execution, plots=False)
    same_bytes(pool_run, tmp_path, ("curves.csv", "grid.csv", "records.csv"))
    assert result.workers == NODES  # the cluster's CPUs
    assert not ray.is_initialized()  # the grid's own connection is closed again


def test_workers_caps_the_runs_in_flight(ray_cluster, inputs, pool_run, tmp_path):
    execution = Execution("ray", ray_cluster.address)
    result = run_experiment(FgdPwr(inputs), CONFIG, tmp_path, workers=2, execution=execution, plots=False)
    assert result.workers == 2
    same_bytes(pool_run, tmp_path, ("curves.csv", "grid.csv"))


def test_powerflow_through_the_cli_equals_the_process_pool(ray_cluster, tmp_path):
    """A grid with a cell of dependent runs per seed (its equal-energy runs use its baselines' energies), via
    `--backend ray --address`."""
    runner = CliRunner()
    pool = runner.invoke(experiment_app, [*POWERFLOW, "--out", str(tmp_path / "pool"), "--workers", "2"])
    assert pool.exit_code == 0, pool.output
    args = [*POWERFLOW, "--out", str(tmp_path / "ray"), "--backend", "ray", "--address", ray_cluster.address]
    on_ray = runner.invoke(experiment_app, args)
    assert on_ray.exit_code == 0, on_ray.output
    assert "on 3 worker(s)" in on_ray.output
    same_bytes(tmp_path / "pool", tmp_path / "ray", ("results.csv", "sweep.csv"))
    # runs.csv also lists each run's measured wall time; everything else in it is identical.
    runs = [pd.read_csv(tmp_path / side / "runs.csv").drop(columns="wall_s") for side in ("pool", "ray")]
    pd.testing.assert_frame_equal(*runs)
    assert len(runs[0]) == 6


def test_an_interrupted_grid_on_ray_resumes(ray_cluster, inputs, pool_run, tmp_path):
    def interrupt(done: int, total: int) -> None:
        if done == 1:
            raise KeyboardInterrupt

    execution = Execution("ray", ray_cluster.address)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(FgdPwr(inputs), CONFIG, tmp_path, execution=execution, progress=interrupt, plots=False)
    assert not ray.is_initialized()
    kept = len(list((tmp_path / CELLS_DIR).glob("*.pkl")))
    assert kept >= 1
    notices: list[str] = []
    execution = Execution("ray", ray_cluster.address, notify=notices.append)
    run_experiment(FgdPwr(inputs), CONFIG, tmp_path, execution=execution, plots=False)
    assert notices == [f"resumed {kept} of 6 runs from {tmp_path / CELLS_DIR}"]
    same_bytes(pool_run, tmp_path, ("curves.csv", "grid.csv"))
    assert not (tmp_path / CELLS_DIR).exists()


def test_task_errors_arrive_as_the_cells_own(ray_cluster, inputs, tmp_path):
    from wattsched.core.errors import UnknownNameError
    from wattsched.experiments.fgd_pwr import run_one
    from wattsched.experiments.parallel import run_tasks

    # A cell whose policy was never checked (the experiment's grid checks the names before any cell runs).
    with pytest.raises(UnknownNameError, match="unknown placement policy 'nope'"):
        run_tasks(run_one, inputs, [("nope", 42)], None, execution=Execution("ray", ray_cluster.address))
    assert not ray.is_initialized()


def test_unreachable_address_is_one_error_line(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = [*POWERFLOW, "--out", str(tmp_path), "--backend", "ray", "--address", f"127.0.0.1:{port}"]
    started = time.monotonic()
    line = one_error_line(CliRunner().invoke(experiment_app, args))
    assert line.startswith(f"error: cannot reach the Ray cluster at 127.0.0.1:{port}: ")
    assert time.monotonic() - started < 10
    assert not tmp_path.joinpath("results.csv").exists()
