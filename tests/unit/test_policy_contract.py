"""The policy contract suite: every registered queue + placement pair, allocation policy and power manager makes the
same decisions on the same scripted history in the simulator, on Slurm (in-memory front end) and on Kubernetes
(in-memory API), or is refused at start, in one line, by a backend that lacks a capability it needs
(tests/contract_harness.py; the real local Slurm runs the same suite in tests/live/test_local_slurm.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.contract_harness import (
    HORIZON_S,
    POWER_STATES,
    SCRIPT,
    StepPrice,
    first_difference,
    run_live,
    run_simulator,
)
from wattsched.backends.k8s.backend import K8sBackend
from wattsched.backends.k8s.fake import FakeCoreV1Api
from wattsched.backends.slurm.backend import SlurmBackend
from wattsched.core.errors import WattschedError
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import build_scheduler
from wattsched.policies.base import PLACEMENT_POLICIES, QUEUE_POLICIES
from wattsched.policies.contract import (
    ALLOCATION_POLICIES,
    POWER_MANAGERS,
    Capability,
    ClusterView,
    MissingCapability,
)
from wattsched.policies.power import power_manager_from_config

BACKENDS = ("slurm", "k8s")
# Whole-second observations against the simulator's exact times: a completion is seen up to a second late, and
# with GPU settings (speeds below 1) such delays add up over a job's chain of successors.
TOLERANCE_S = 1.0
SETTINGS_TOLERANCE_S = 5.0


def _offered(kind: str) -> frozenset[Capability]:
    backend = SlurmBackend(runner=lambda argv: "") if kind == "slurm" else K8sBackend(
        FakeCoreV1Api(), power_up_cmd="true", power_down_cmd="true"
    )  # fmt: skip
    return backend.capabilities | {Capability.METERS_ENERGY, Capability.KNOWS_PRICES}


def _compare(kw: dict, kind: str, tmp_path, manager: str | None = None) -> None:
    price = StepPrice() if kw.get("allocation", "").startswith("cedla") else None
    cfg = SimulationConfig(**kw).scheduler_config()
    sched = build_scheduler(cfg, None)
    needs = sched.required_capabilities()
    make_manager = (lambda: power_manager_from_config(manager, POWER_STATES)) if manager else (lambda: None)
    if manager:
        needs |= make_manager().needs
    lacking = needs - _offered(kind)
    if lacking:
        with pytest.raises(
            MissingCapability, match=f"needs .*which the {'slurm' if kind == 'slurm' else 'kubernetes'}"
        ):
            run_live(kind, build_scheduler(cfg, None), make_manager(), tmp_path, price)
        return
    sim = run_simulator(sched, make_manager(), price)
    resize = Capability.RESIZES in needs  # the operator allows it (serve slurm --allow-resize)
    live = run_live(kind, build_scheduler(cfg, None), make_manager(), tmp_path, price, resize)
    assert sim, "the script makes decisions"
    sim = [
        e for e in sim if e.time_s <= HORIZON_S
    ]  # the live loop stops at the horizon; the simulator's tail not
    # Speeds other than 1 (GPU settings, shared GPUs) end jobs between the live loop's whole seconds.
    slowed = needs & {Capability.SETS_GPU_SETTINGS, Capability.SHARES_GPUS}
    diff = first_difference(sim, live, SETTINGS_TOLERANCE_S if slowed else TOLERANCE_S)
    assert diff is None, f"{kw} on {kind}: {diff}"


PAIRS = list(itertools.product(QUEUE_POLICIES.names(), PLACEMENT_POLICIES.names()))


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize(("queue", "placement"), PAIRS)
def test_queue_and_placement_pairs_decide_alike_on_every_backend(queue, placement, kind, tmp_path):
    _compare({"queue": queue, "placement": placement}, kind, tmp_path)


# Known divergences, kept visible (strict: the day they agree, this list must shrink). A move live is a requeue
# and a new start that waits until the old run is seen gone: one observation (a second here) later than in the
# simulator, where a move is instant. Policies that resize running jobs every round (optimus-greedy, powerflow) move
# several jobs a round, so their jobs end a second later each time and their next decisions differ.
RESIZE_SPEED = pytest.mark.xfail(
    strict=True, reason="a live move waits one observation for the old run to end; the simulator's is instant"
)
ALLOCATIONS = [
    pytest.param(name, kind, marks=RESIZE_SPEED) if (name, kind) in {("optimus-greedy", "slurm"), ("powerflow", "slurm")}  # noqa: E501
    else (name, kind)
    for name in ALLOCATION_POLICIES.names()
    for kind in BACKENDS
]  # fmt: skip


@pytest.mark.parametrize(("allocation", "kind"), ALLOCATIONS)
def test_allocation_policies_decide_alike_or_are_refused(allocation, kind, tmp_path):
    _compare({"allocation": allocation}, kind, tmp_path)


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("manager", POWER_MANAGERS.names())
def test_power_managers_decide_alike(manager, kind, tmp_path):
    _compare({"queue": "fifo", "placement": "best-fit"}, kind, tmp_path, manager)


def test_the_script_exercises_what_the_contract_promises(tmp_path):
    """The suite's history has later arrivals (jobs added after bind), preemptions (tiresias with low thresholds
    would; here gandiva's time slices) and powered-off nodes (idle-timeout), so the equalities above test them."""
    assert any(submit > 0 for _, submit, _, _ in SCRIPT)
    gandiva = run_simulator(build_scheduler(SimulationConfig(allocation="gandiva").scheduler, None), None)
    assert any(e.action in ("stop", "move") for e in gandiva)
    idle = run_simulator(
        build_scheduler(SimulationConfig(queue="fifo", placement="best-fit").scheduler, None),
        power_manager_from_config("idle-timeout", POWER_STATES),
    )
    assert any(e.action == "power_off" for e in idle) and any(e.action == "power_on" for e in idle)


def test_tiresias_keeps_its_starvation_offsets_when_jobs_are_added(tmp_path):
    """Today's bug, now a test: re-binding at each arrival reset Tiresias's learned offsets to zero."""
    from tests.contract_harness import script_jobs, script_spec
    from wattsched.policies.allocation.tiresias import Tiresias
    from wattsched.policies.contract import BindContext

    jobs, spec = script_jobs(), script_spec()
    policy = Tiresias()
    rng = np.random.default_rng(0)
    first = jobs.subset(np.arange(4))
    policy.bind(BindContext(spec, first, rng, np.arange(spec.num_nodes), None))  # type: ignore[arg-type]
    policy.service_offset[2] = 123.0
    policy.on_jobs_added(BindContext(spec, jobs, rng, np.arange(spec.num_nodes), None))  # type: ignore[arg-type]
    assert policy.service_offset.size == len(jobs)
    assert policy.service_offset[2] == 123.0 and not policy.service_offset[4:].any()


def test_policies_declare_every_capability_they_use():
    """Each allocation policy's actions in the simulator (which offers everything) use only capabilities it
    declares: the validator, told the backend offers nothing, reports every undeclared use."""
    from wattsched.engine import temporal
    from wattsched.policies.validation import ActionValidator

    for name in ALLOCATION_POLICIES.names():
        sched = build_scheduler(SimulationConfig(allocation=name).scheduler, None)
        declared = sched.required_capabilities()
        used: set[Capability] = set()

        class Recording(ActionValidator):
            def refuse(self, by, job, capability, _used=used):
                _used.add(capability)

        original = temporal.ActionValidator
        temporal.ActionValidator = Recording
        try:
            price = StepPrice() if name.startswith("cedla") else None
            sim_caps = temporal.sim_capabilities
            temporal.sim_capabilities = lambda *a: frozenset()
            temporal_check = temporal.check_capabilities
            temporal.check_capabilities = lambda *a, **k: None
            try:
                run_simulator(sched, None, price)
            finally:
                temporal.sim_capabilities = sim_caps
                temporal.check_capabilities = temporal_check
        finally:
            temporal.ActionValidator = original
        assert used <= declared, f"{name} uses {sorted(used - declared)} without declaring it"


def test_live_view_answers_like_the_simulator(tmp_path):
    """last_stop_s, next_arrival_s, restart delays and prices mean the same live as simulated."""
    from tests.contract_harness import run_live as _run

    seen: dict[str, object] = {}

    sched = build_scheduler(SimulationConfig(allocation="cedla").scheduler, None)
    inner_decide = sched.decide

    def decide(view: ClusterView, actions) -> None:
        seen.setdefault("next_arrival", view.next_arrival_s())
        seen.setdefault("price", view.price_usd_per_mwh())
        seen.setdefault("power", view.power_w())
        seen.setdefault("last_stop", view.last_stop_s(np.array([0]))[0])
        inner_decide(view, actions)

    sched.decide = decide
    _run("slurm", sched, None, tmp_path, StepPrice())
    assert seen["next_arrival"] == np.inf  # not "now": live arrivals are not known ahead
    assert seen["price"] == 40.0
    assert isinstance(seen["power"], float) and seen["power"] > 0
    assert seen["last_stop"] == 0.0  # its submit time until it first stops, as in the simulator


def test_a_missing_capability_is_one_clear_line():
    sched = build_scheduler(SimulationConfig(allocation="eaco").scheduler, None)
    with pytest.raises(WattschedError) as info:
        from wattsched.backends.live import check_live_policies

        check_live_policies(SlurmBackend(runner=lambda argv: ""), sched, None, False)
    message = str(info.value)
    assert "\n" not in message
    assert message == (
        "policy 'eaco' needs GPU sharing (several jobs on one GPU), which the slurm backend does not offer: "
        "Slurm's gres/gpu gives each job whole GPUs"
    )


def test_serve_k8s_scheduler_runs_the_full_contract_offline(tmp_path):
    from typer.testing import CliRunner

    from wattsched.cli.main import app

    base = ["serve", "k8s-scheduler", "--offline", "default", "--allocation", "tiresias", "--power-manager",
            "idle-timeout", "--max-steps", "3", "--interval", "0.05", "--state-db", str(tmp_path / "db")]  # fmt: skip
    res = CliRunner().invoke(app, base)
    assert res.exit_code != 0
    assert "power manager 'idle-timeout' needs switching nodes off and on" in res.output
    assert "--power-up-cmd and --power-down-cmd" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, [*base, "--power-up-cmd", "true {node}", "--power-down-cmd", "true {node}"])
    assert res.exit_code == 0, res.output
    assert "(tiresias, idle-timeout, full contract)" in " ".join(res.output.split())
