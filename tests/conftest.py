"""Shared fixtures: tiny clusters and job tables built in code, and the real-data directory (if any)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from wattsched.core.cluster import ClusterSpec, ClusterState
from wattsched.core.jobs import JobTable


def make_cluster(shapes: list[tuple[int, str, int, int]], name: str = "test") -> ClusterSpec:
    """shapes: (gpus, model, milli-CPU, MiB) per node."""
    return ClusterSpec.from_arrays(
        name=name,
        node_names=[f"n{i}" for i in range(len(shapes))],
        cpu_milli=[s[2] for s in shapes],
        memory_mib=[s[3] for s in shapes],
        gpu_count=[s[0] for s in shapes],
        gpu_model_names=[s[1] for s in shapes],
    )


def make_jobs(rows: list[dict]) -> JobTable:
    """rows: dicts with submit, duration, gpus and optional milli, cpu, mem, spec."""
    return JobTable.build(
        job_id=[r.get("id", f"j{i}") for i, r in enumerate(rows)],
        submit_s=[r.get("submit", 0.0) for r in rows],
        duration_s=[r.get("duration", 10.0) for r in rows],
        num_gpu=[r.get("gpus", 1) for r in rows],
        gpu_milli=[r.get("milli", 1000 if r.get("gpus", 1) > 0 else 0) for r in rows],
        cpu_milli=[r.get("cpu", 0) for r in rows],
        memory_mib=[r.get("mem", 0) for r in rows],
        gpu_spec=[r.get("spec", "") for r in rows],
    )


def state_with(
    spec: ClusterSpec, gpu_left: list[list[int]], cpu_left: list[int] | None = None
) -> ClusterState:
    """A state whose per-GPU milli left (and CPU left) are set directly, derived arrays refreshed."""
    state = ClusterState(spec)
    for n, row in enumerate(gpu_left):
        state.gpu_left[n, : len(row)] = row
    if cpu_left is not None:
        state.cpu_left[:] = cpu_left
    state._refresh_all()
    state.allocated_milli = int(spec.gpu_count.sum() * 1000 - state.gpu_left_total.sum())
    return state


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def real_data_dir() -> Path | None:
    root = os.environ.get("WATTSCHED_DATA")
    return Path(root) if root and Path(root).is_dir() else None


def require_real_file(dataset: str, relpath: str) -> Path:
    root = real_data_dir()
    if root is None:
        pytest.skip(
            "real trace not available: set WATTSCHED_DATA to a dataset directory (CI: ../shared/data)"
        )
    path = root / dataset / relpath
    if not path.is_file():
        pytest.skip(f"real trace not available: {dataset}/{relpath} is not under WATTSCHED_DATA")
    return path


def simulate_energy(
    jobs,
    spec,
    placement="first-fit",
    model="linear",
    manager="always-on",
    pue=1.0,
    base=None,
    price=None,
    carbon=None,
    **states,
):
    """Run a temporal simulation with a power manager and the energy ledger; invariants checked per event."""
    from wattsched.energy.ledger import EnergyLedger
    from wattsched.energy.power_models import POWER_MODELS
    from wattsched.energy.power_states import POWER_MANAGERS, NodePowerController, PowerStateConfig
    from wattsched.energy.utilisation import job_gpu_load
    from wattsched.engine.temporal import Simulator
    from wattsched.policies import PLACEMENT_POLICIES, QUEUE_POLICIES

    power = POWER_MODELS.create(model)
    controller = NodePowerController(POWER_MANAGERS.create(manager), PowerStateConfig(**states))
    accountant = EnergyLedger(
        power,
        job_gpu_load(jobs),
        node_base_w=power.default_node_base_w if base is None else base,
        pue=pue,
        controller=controller,
        price=price,
        carbon=carbon,
    )
    sim = Simulator(
        jobs,
        spec,
        QUEUE_POLICIES.create("fifo"),
        PLACEMENT_POLICIES.create(placement),
        np.random.default_rng(0),
        observers=[controller, accountant],
        check_invariants=True,
    )
    out = sim.run()
    return sim, out, accountant, controller
