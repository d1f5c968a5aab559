"""Shared fixtures: tiny clusters and job tables built in code, and the real-data directory (if any)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.k8s_fixtures import k8s, k8s_control_plane  # noqa: F401 (the live Kubernetes tests' control plane)
from tests.slurm_fixtures import local_slurm  # noqa: F401 (the session fixture of the live Slurm tests)
from wattsched.core.cluster import ClusterSpec, ClusterState
from wattsched.core.jobs import JobTable
from wattsched.engine.observers import Observer


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


def random_jobs(seed: int, n: int, span_s: float) -> JobTable:
    """`n` seeded jobs arriving within `span_s`, each 50-900 s long on 1, 2 or 4 GPUs."""
    rng = np.random.default_rng(seed)
    submits, durations, gpus = (
        np.sort(rng.uniform(0, span_s, n)),
        rng.uniform(50, 900, n),
        rng.choice([1, 2, 4], n),
    )
    return make_jobs(
        [
            {"submit": float(t), "duration": float(d), "gpus": int(g)}
            for t, d, g in zip(submits, durations, gpus, strict=True)
        ]
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


def make_sim(jobs, spec, queue="fifo", placement="first-fit", seed=0, observers=(), **kw):
    """A simulator running a queue + placement pair (invariants checked after every event)."""
    from wattsched.engine.temporal import Simulator
    from wattsched.policies import PLACEMENT_POLICIES, QUEUE_POLICIES
    from wattsched.policies.adapters import QueuePlacementScheduler

    scheduler = QueuePlacementScheduler(QUEUE_POLICIES.create(queue), PLACEMENT_POLICIES.create(placement))
    kw.setdefault("check_invariants", True)
    return Simulator(jobs, spec, scheduler, np.random.default_rng(seed), observers=observers, **kw)


class StepIntegrator(Observer):
    """An independent check of the energy ledger: at every event interval, cluster power is recomputed from
    scratch from the simulator's live state (node power states, CPU left, the jobs on each GPU, their loads and
    phases) and multiplied by the interval's length. Slow and simple on purpose."""

    COMPONENTS = ("gpu_active", "gpu_held", "gpu_idle", "cpu", "node_base", "power_transitions")

    def __init__(self, model_name: str, node_base_w: float, off_power_w: float = 0.0):
        from wattsched.energy.power_models import POWER_MODELS

        self.model = POWER_MODELS.create(model_name)
        self.base = node_base_w
        self.off_w = off_power_w
        self.energy = dict.fromkeys(self.COMPONENTS, 0.0)

    def on_start(self, sim) -> None:
        self.model.bind(sim.spec)

    def on_interval(self, sim, t0: float, t1: float) -> None:
        from wattsched.core.states import BOOTING, OFF, ON, PHASE_RUNNING, SHUTTING_DOWN

        dt = t1 - t0
        spec, model = sim.spec, self.model
        loads: dict[tuple[int, int], float] = {}  # computing jobs' summed load per GPU
        held: set[tuple[int, int]] = set()  # GPUs with a job that holds them without computing
        for job in sim.running:
            placement = sim.log.placements[int(sim.alloc_id[job])]
            computing = sim.phase[job] == PHASE_RUNNING
            for node, gpus, _, _ in placement:
                for g in gpus:
                    if computing:
                        loads[(node, g)] = loads.get((node, g), 0.0) + float(sim.load[job])
                    else:
                        held.add((node, g))
        states = sim.power.power_state if sim.power is not None else np.zeros(spec.num_nodes, dtype=int)
        for node in range(spec.num_nodes):
            idx = np.array([node])
            state = int(states[node])
            if state == ON:
                idle_w, held_w = float(model.gpu_idle_w[node]), float(model.gpu_held_w[node])
                for g in range(int(spec.gpu_count[node])):
                    if (node, g) in loads:
                        busy = float(model.gpu_busy_w(np.array([loads[(node, g)]]), idx)[0])
                        self.energy["gpu_active"] += busy * dt
                        if (node, g) in held:  # the held draw is the floor of a GPU anything holds
                            self.energy["gpu_held"] += max(held_w - busy, 0.0) * dt
                    else:
                        self.energy["gpu_idle"] += idle_w * dt
                        if (node, g) in held:
                            self.energy["gpu_held"] += (held_w - idle_w) * dt
                self.energy["cpu"] += float(model.cpu_w(np.array([sim.state.cpu_left[node]]), idx)[0]) * dt
                self.energy["node_base"] += self.base * dt
            elif state in (BOOTING, SHUTTING_DOWN):
                self.energy["power_transitions"] += (float(model.node_idle_w(idx)[0]) + self.base) * dt
            elif state == OFF:
                self.energy["power_transitions"] += self.off_w * dt


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
    from wattsched.energy.power_models import POWER_MODELS
    from wattsched.engine.ledger import EnergyLedger
    from wattsched.engine.meter import PowerMeter
    from wattsched.engine.power import NodePower, PowerStateConfig
    from wattsched.policies.power import power_manager_from_config

    power_model = POWER_MODELS.create(model)
    config = PowerStateConfig(**states)
    power = NodePower(power_manager_from_config(manager, config), config)
    accountant = EnergyLedger(
        power_model,
        node_base_w=power_model.default_node_base_w if base is None else base,
        pue=pue,
        controller=power,
        price=price,
        carbon=carbon,
    )
    integrator = StepIntegrator(model, accountant.node_base_w, config.off_power_w)
    meter = PowerMeter(accountant)
    sim = make_sim(
        jobs,
        spec,
        "fifo",
        placement,
        seed=0,
        observers=[accountant, integrator],
        power=power,
        power_meter=meter,
    )
    out = sim.run()
    sim.integrator = integrator
    return sim, out, accountant, power


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """One line saying whether the live Slurm tests ran (CI's output must show it; docs/live-slurm.md §2)."""
    outcomes = {"passed": 0, "failed": 0, "skipped": 0}
    for outcome in outcomes:
        for report in terminalreporter.stats.get(outcome, []):
            counted = report.when == "call" or (report.when == "setup" and outcome != "passed")
            if counted and "slurm" in getattr(report, "keywords", {}):
                outcomes[outcome] += 1
    if any(outcomes.values()):
        terminalreporter.write_line(
            "live Slurm tests (tests/live, real local Slurm): "
            f"{outcomes['passed']} passed, {outcomes['failed']} failed, {outcomes['skipped']} skipped"
        )


# EaCO's four models as Gavel names them, and a Gavel-format throughput file of them on V100 (toy steps/s, no
# measured pairs: pair speeds come from the run's sharing model), for the EaCO and Gavel-FIFO tests.
EACO_GAVEL_MODELS = {
    "alexnet": "AlexNet",
    "resnet18": "ResNet-18",
    "resnet50": "ResNet-50",
    "vgg16": "VGG-16",
}


@pytest.fixture(scope="module")
def gavel_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    body: dict = {"v100": {}, "v100_unconsolidated": {}}
    for name in EACO_GAVEL_MODELS.values():
        for n, rate in ((1, 10.0), (2, 19.0), (4, 36.0), (8, 68.0)):
            for worker in body:
                body[worker][f"('{name} (batch size 64)', {n})"] = {"null": rate}
    path = root / "gavel-traces" / "simulation_throughputs.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(body))
    return root
