"""The engine under a random legal allocation policy (acceptance test of "Job performance models and allocation
rounds", item 6).

A test-only :class:`AllocationPolicy` makes random but legal decisions every round (and on arrivals, completions
and wake-ups it asks for): it starts pending jobs on random placements (random GPU counts for jobs with a
throughput table, the trace count otherwise; gangs over several nodes; whole or shared GPUs whose memory fits),
stops, resizes, migrates and retunes running jobs (power limits and SM clocks in the allowed ranges), rejects a
few, and sometimes suspends with state saved. After a number of rounds it calms down (starts only) so every run
ends. Each run is checked against the allocation log, the outcome and the energy ledger:

1. no GPU is over-allocated (the engine checks its state after every event; the log is also replayed);
2. every completed job did exactly its work: sum over its log segments of rate x time, minus progress lost,
   equals its work (iterations for a job with a table) within 1e-9 relative; every logged rate and load is the
   performance model's for the job's configuration and co-runners at that time;
3. progress lost on a preemption is exactly the progress since the job's last checkpoint, so never more than
   one checkpoint interval of running (none with interval 0 or a suspend);
4. every resume, resize and migration of a job that ran before is charged: a restart phase of the restart
   model's delay at rate 0 with the GPUs held at the job's load; counts match the outcome's counters;
5. the ledger's components sum to its total and match an independent step integrator; the live meter queried by
   the policy mid-run matches the integrator's running total (and its power the live state);
6. the same seed gives byte-identical logs, outcomes and energy.

Illegal targets (over-allocation, unknown job, malformed placements, memory that does not fit) raise
:class:`InvalidDecision` naming the policy and the job.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import StepIntegrator, make_cluster
from wattsched.core.cluster import MILLI
from wattsched.core.gpus import gpu_model
from wattsched.core.jobs import JobTable
from wattsched.core.settings import DEFAULT_SETTING, GpuSetting
from wattsched.core.states import (
    PHASE_RESTARTING,
    PHASE_RUNNING,
    STATUS_DONE,
    STATUS_DROPPED,
    STATUS_UNSCHEDULABLE,
)
from wattsched.data.registry import dataset
from wattsched.energy.dvfs import power_limit_range, sm_clock_range
from wattsched.energy.power_models import POWER_MODELS
from wattsched.engine.alloc_log import NO_ALLOC
from wattsched.engine.ledger import COMPONENTS, EnergyLedger
from wattsched.engine.meter import PowerMeter
from wattsched.engine.power import NodePower, PowerStateConfig
from wattsched.engine.temporal import Simulator
from wattsched.perf.model import PerformanceModel
from wattsched.perf.restart import RestartModel
from wattsched.policies import PLACEMENT_POLICIES
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.contract import AllocationPolicy, Decision, InvalidDecision, Target
from wattsched.policies.planning import Plan, resized_request
from wattsched.policies.power import power_manager_from_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "data"
REL = 1e-9

# Model names with a (toy) throughput table per GPU type; the ElasticFlow names also have catalog facts (memory,
# checkpoint size), so co-location must respect GPU memory and restarts pay for the checkpoint.
TABLE_MODELS = {
    "T4": ["bert", "cifar10", "imagenet", "ncf", "yolov3"],
    "A100": ["bert", "gpt2", "resnet50", "vgg16"],
    "V100": ["Alpha (batch size 8)", "Beta (batch size 4)", "A3C"],
}
BATCHES = {"T4": [0, 0, 96, 128], "A100": [0, 512, 512], "V100": [0]}


def write_data_dir(root: Path) -> Path:
    """A data directory holding every ElasticFlow table file the dataset registry lists, each a copy of the
    fixture toy table of its GPU type, and the fixture Gavel throughputs (so `PerformanceModel.build` loads
    tables through the registry, as a run does)."""
    for f in dataset("elasticflow-throughputs").files:
        gpu = f.path.split("/")[0].removeprefix("throughputs_")
        if f.path.startswith("throughputs_"):
            target = root / "elasticflow-throughputs" / f.path
            target.parent.mkdir(parents=True, exist_ok=True)
            toy = FIXTURES / "elasticflow-throughputs" / f"throughputs_{gpu}" / "toy.csv"
            target.write_text(toy.read_text())
    gavel = root / "gavel-traces" / "simulation_throughputs.json"
    gavel.parent.mkdir(parents=True, exist_ok=True)
    gavel.write_text((FIXTURES / "gavel-traces" / "simulation_throughputs.json").read_text())
    return root


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return write_data_dir(tmp_path_factory.mktemp("perf-data"))


# --------------------------------------------------------------------------------------------------------------
# The random legal policy
# --------------------------------------------------------------------------------------------------------------


class RandomLegalPolicy(AllocationPolicy):
    """Random starts, stops, resizes, migrations, co-locations, settings and rejections, all legal."""

    name = "random-legal"
    decide_on_arrival = True
    decide_on_completion = True

    def __init__(self, seed: int, calm_after: int, round_s: float):
        self.rng = np.random.default_rng(seed)
        self.calm_after = calm_after
        self.round_s = round_s
        self.calls = 0
        self.fallback = PLACEMENT_POLICIES.create("first-fit")
        # Set by the test: the probe reads the live state and the step integrator.
        self.sim: Simulator | None = None
        self.power_model = "linear"
        self.scratch: StepIntegrator | None = None
        self.probes: list[tuple[float, float, float, float, float]] = []
        self.decisions: list[tuple[float, bool]] = []

    def bind(self, ctx) -> None:
        self.spec = ctx.spec
        self.perf = ctx.perf
        self.fallback.bind(ctx.spec, np.random.default_rng(0), ctx.node_rank)
        self.cap_gib = {c: float(gpu_model(m).memory_gib) for c, m in enumerate(ctx.spec.gpu_models)}

    # --- checks made from inside the run --------------------------------------------------------------------
    def _probe(self, view) -> None:
        """The live meter against the step integrator's running total, and its power against the live state."""
        sim = self.sim
        if sim is None or sim.power_meter is None:
            return
        pue = sim.power_meter.ledger.pue
        integrator = next(o for o in sim.observers if isinstance(o, StepIntegrator))
        if self.scratch is None:  # a second integrator, run over one second of the present state: power now
            self.scratch = StepIntegrator(self.power_model, integrator.base, integrator.off_w)
            self.scratch.on_start(sim)
        scratch = self.scratch
        scratch.energy = dict.fromkeys(StepIntegrator.COMPONENTS, 0.0)
        scratch.on_interval(sim, 0.0, 1.0)
        self.probes.append(
            (
                view.now,
                view.energy_used_j() / pue,
                sum(integrator.energy.values()),
                view.power_w() / pue,
                sum(scratch.energy.values()),
            )
        )

    # --- random legal targets -------------------------------------------------------------------------------
    def _setting(self, code: int) -> GpuSetting:
        r = self.rng.random()
        if code < 0 or r < 0.5:
            return DEFAULT_SETTING
        name = self.spec.gpu_models[code]
        lo, hi = power_limit_range(name) if r < 0.75 else sm_clock_range(name)
        value = round(float(self.rng.uniform(lo, hi)), 3)
        value = min(max(value, math.ceil(lo * 1000) / 1000), hi)
        if r < 0.75:
            return GpuSetting(power_limit_fraction=value)
        return GpuSetting(sm_clock_fraction=value)

    def _memory_fits(self, job: int, node: int, g: int, code: int) -> bool:
        need = self.perf.memory_gib(job)
        if need <= 0:
            return True
        others = self.residents.get((node, g), [])
        return need + sum(self.perf.memory_gib(k) for k in others) <= self.cap_gib[code] + 1e-9

    def _random_target(self, view, plan: Plan, job: int, whole: bool = False) -> Target | None:
        rng, state, spec = self.rng, plan.state, view.spec
        req = view.request(job)
        if req.num_gpu == 0:  # CPU only: one node with the CPU and memory
            nodes = np.flatnonzero(
                state.available & (state.cpu_left >= req.cpu_milli) & (state.mem_left >= req.memory_mib)
            )
            if nodes.size == 0:
                return None
            node = int(rng.choice(nodes))
            return Target(((node, (), req.cpu_milli, req.memory_mib),))
        eligible = np.flatnonzero(req.node_mask & state.available)
        if eligible.size == 0:
            return None
        code = int(spec.gpu_model_code[int(rng.choice(eligible))])  # one GPU type per placement
        nodes = eligible[spec.gpu_model_code[eligible] == code]
        if self.perf.modelled[job] and self.perf.has_table(job, code) and not whole:
            top = min(self.perf.max_gpus(job, code), int(spec.gpu_count[nodes].sum()))
            ngpu = int(rng.integers(1, max(top, 1) + 1))
        else:
            ngpu = req.num_gpu
        if whole:
            share = MILLI
        elif req.gpu_milli < MILLI:
            share = int(rng.choice([req.gpu_milli, MILLI]))
        else:
            share = int(rng.choice([MILLI, MILLI, MILLI, 500, 300]))
        sized = resized_request(view, req, ngpu)
        chosen: list[tuple[int, tuple[int, ...]]] = []
        left = ngpu
        for node in rng.permutation(nodes).tolist():
            row = state.gpu_left[node]
            cands = [
                g
                for g in range(int(spec.gpu_count[node]))
                if row[g] >= share and (share >= MILLI or self._memory_fits(job, node, g, code))
            ]
            if share < MILLI and rng.random() < 0.6:  # prefer co-location: GPUs other jobs already share
                cands = [g for g in cands if row[g] < MILLI] or cands
            if not cands:
                continue
            take = min(len(cands), left)
            if rng.random() < 0.3:
                take = int(rng.integers(1, take + 1))
            gpus = tuple(sorted(int(g) for g in rng.choice(cands, size=take, replace=False)))
            chosen.append((node, gpus))
            left -= take
            if left == 0:
                break
        if left:
            return None
        placement, cpu_left, mem_left = [], sized.cpu_milli, sized.memory_mib
        for k, (node, gpus) in enumerate(chosen):
            last = k == len(chosen) - 1
            cpu = cpu_left if last else int(sized.cpu_milli * len(gpus) / ngpu)
            mem = mem_left if last else int(sized.memory_mib * len(gpus) / ngpu)
            cpu_left -= cpu
            mem_left -= mem
            placement.append((node, gpus, cpu, mem))
        placement = tuple(placement)
        if not plan.is_free(placement, share):
            return None
        return Target(placement, share, self._setting(code))

    def _take(self, plan: Plan, job: int, target: Target) -> None:
        plan.take(job, target)
        if target.share_milli < MILLI:
            for node, gpus, _, _ in target.placement:
                for g in gpus:
                    self.residents.setdefault((node, g), []).append(job)

    def _release(self, plan: Plan, job: int, target: Target) -> None:
        plan.release(job)
        if target.share_milli < MILLI:
            for node, gpus, _, _ in target.placement:
                for g in gpus:
                    self.residents[(node, g)].remove(job)

    def _restore(self, plan: Plan, job: int, target: Target) -> None:
        """Undo `_release`: the job keeps what it holds (nothing else was taken in between)."""
        assert plan.restore(job)
        if target.share_milli < MILLI:
            for node, gpus, _, _ in target.placement:
                for g in gpus:
                    self.residents.setdefault((node, g), []).append(job)

    def _place(self, view, plan: Plan, job: int, tries: int, calm: bool) -> bool:
        for _ in range(tries):
            target = self._random_target(view, plan, job, whole=calm)
            if target is not None:
                self._take(plan, job, target)
                return True
        if calm:  # make sure every job eventually runs: the trace request on whole GPUs, first fit
            req = view.request(job)
            if req.num_gpu:
                req = replace(req, gpu_milli=MILLI)
            found = self.fallback.place(plan.state, req)
            if found is not None:
                self._take(plan, job, Target(found))
                return True
        return False

    def allocate(self, view) -> Decision:
        self.calls += 1
        self._probe(view)
        rng = self.rng
        calm = self.calls > self.calm_after
        plan = Plan(view)
        running = view.running_jobs()
        self.residents: dict[tuple[int, int], list[int]] = {}
        for job in running.tolist():
            target = view.target(job)
            if target.share_milli < MILLI:
                for node, gpus, _, _ in target.placement:
                    for g in gpus:
                        self.residents.setdefault((node, g), []).append(job)
        for job in rng.permutation(running).tolist():
            r = rng.random()
            if calm or r < 0.55:
                continue  # keep
            current = view.target(job)
            if r < 0.7:  # stop (preempt)
                self._release(plan, job, current)
            elif r < 0.88:  # resize / migrate / change share
                self._release(plan, job, current)
                if not self._place(view, plan, job, 3, False):
                    self._restore(plan, job, current)
            elif r < 0.94 and current.num_gpus:  # another share on the same GPUs (keeps running)
                self._release(plan, job, current)
                share = int(rng.choice([200, 300, 500, MILLI]))
                if plan.is_free(current.placement, share) and (
                    share >= MILLI
                    or all(
                        self._memory_fits(job, n, g, int(view.spec.gpu_model_code[n]))
                        for n, gpus, _, _ in current.placement
                        for g in gpus
                    )
                ):
                    self._take(plan, job, Target(current.placement, share, current.setting))
                else:
                    self._restore(plan, job, current)
            elif current.num_gpus:  # retune in place
                code = int(view.spec.gpu_model_code[current.placement[0][0]])
                plan.assign[job] = Target(current.placement, current.share_milli, self._setting(code))
        reject = []
        for job in rng.permutation(view.pending_jobs()).tolist():
            r = rng.random()
            if not calm and r < 0.02:
                reject.append(job)
            elif calm or r < 0.7:
                self._place(view, plan, job, 5 if calm else 2, calm)
        save = bool(rng.random() < 0.4)
        wake = view.now + float(rng.uniform(0.0, self.round_s)) if rng.random() < 0.15 and not calm else None
        self.decisions.append((view.now, save))
        return plan.decision(running, wake_at=wake, reject=reject, save_on_stop=save)


# --------------------------------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Scenario:
    nodes: list[tuple[int, str, int, int]]
    jobs: list[dict]
    seed: int
    round_s: float
    on_events: bool
    calm_after: int
    checkpoint_s: float
    restart: tuple[str, float]
    power_model: str
    manager: str
    pue: float


@st.composite
def scenarios(draw) -> Scenario:
    types = draw(st.sampled_from([["T4"], ["A100"], ["V100"], ["T4"], ["A100", "V100"]]))
    nodes = draw(
        st.lists(
            st.tuples(
                st.sampled_from([1, 2, 4, 8]),
                st.sampled_from(types),
                st.integers(2, 8).map(lambda c: c * 8000),
                st.just(10**6),
            ),
            min_size=1,
            max_size=4,
        )
    )
    present = sorted({n[1] for n in nodes})
    # Model names of the main GPU type (most GPUs), on which work is defined. A job whose model has a table only
    # on another GPU type of a mixed cluster crashes the performance model (batch size 0; see the report).
    spec = make_cluster(nodes)
    main = spec.gpu_models[int(np.argmax(np.bincount(spec.gpu_model_code, weights=spec.gpu_count)))]
    names = ["", *TABLE_MODELS[main]]
    batches = BATCHES[main]
    job = st.fixed_dictionaries(
        {
            "submit": st.floats(0, 300, allow_nan=False).map(lambda x: round(x, 1)),
            "duration": st.floats(5, 300, allow_nan=False).map(lambda x: round(x, 1)),
            "gpus": st.sampled_from([0, 1, 1, 1, 2, 2, 4, 8]),
            "milli": st.sampled_from([1000, 1000, 500, 300]),
            "cpu": st.integers(0, 8).map(lambda c: c * 1000),
            "model": st.sampled_from(names + names[1:]),
            "batch": st.sampled_from(batches),
            "spec": st.sampled_from(["", "", "", *present]),
            "ckpt": st.sampled_from([math.nan, math.nan, 0.0, 15.0, 45.0]),
            "iterations": st.sampled_from([math.nan, math.nan, 500.0]),
        }
    )
    rows = draw(st.lists(job, min_size=1, max_size=15))
    for r in rows:
        if r["gpus"] != 1:
            r["milli"] = 0 if r["gpus"] == 0 else 1000
        if r["gpus"] == 0:
            r["model"] = ""
    return Scenario(
        nodes=nodes,
        jobs=rows,
        seed=draw(st.integers(0, 2**16)),
        round_s=draw(st.sampled_from([10.0, 20.0, 45.0])),
        on_events=draw(st.booleans()),
        calm_after=draw(st.integers(5, 40)),
        checkpoint_s=draw(st.sampled_from([0.0, 20.0, 60.0])),
        restart=draw(st.sampled_from([("elasticflow", 0.0), ("fixed", 5.0), ("fixed", 30.0)])),
        power_model=draw(st.sampled_from(["linear", "dvfs"])),
        manager=draw(st.sampled_from(["always-on", "always-on", "idle-timeout"])),
        pue=draw(st.sampled_from([1.0, 1.25])),
    )


def build_jobs(rows: list[dict]) -> JobTable:
    return JobTable.build(
        job_id=[f"j{i}" for i in range(len(rows))],
        submit_s=[r["submit"] for r in rows],
        duration_s=[r["duration"] for r in rows],
        num_gpu=[r["gpus"] for r in rows],
        gpu_milli=[r["milli"] for r in rows],
        cpu_milli=[r["cpu"] for r in rows],
        gpu_spec=[r["spec"] for r in rows],
        model_name=[r["model"] for r in rows],
        batch_size=[r["batch"] for r in rows],
        iterations=[r["iterations"] for r in rows],
        checkpoint_s=[r["ckpt"] for r in rows],
    )


@dataclass
class Run:
    sim: Simulator
    outcome: object
    ledger: EnergyLedger
    integrator: StepIntegrator
    policy: RandomLegalPolicy
    perf: PerformanceModel


def run_scenario(sc: Scenario, data_dir: Path) -> Run:
    spec = make_cluster(sc.nodes)
    kind, fixed = sc.restart
    perf, jobs = PerformanceModel.build(
        build_jobs(sc.jobs), spec, RestartModel(kind, fixed_s=fixed), data_dir=data_dir
    )
    policy = RandomLegalPolicy(sc.seed, sc.calm_after, sc.round_s)
    scheduler = RoundScheduler(policy, sc.round_s, sc.on_events, sc.on_events)
    config = PowerStateConfig(idle_timeout_s=30.0, boot_time_s=20.0, shutdown_time_s=10.0, off_power_w=5.0)
    power = NodePower(power_manager_from_config(sc.manager, config), config)
    model = POWER_MODELS.create(sc.power_model)
    ledger = EnergyLedger(
        model, node_base_w=50.0, pue=sc.pue, controller=power, off_power_w=config.off_power_w
    )
    integrator = StepIntegrator(sc.power_model, ledger.node_base_w, config.off_power_w)
    sim = Simulator(
        jobs,
        spec,
        scheduler,
        np.random.default_rng(sc.seed),
        perf=perf,
        power=power,
        checkpoint_interval_s=sc.checkpoint_s,
        observers=[ledger, integrator],
        check_invariants=True,  # state (no over-allocation, counters) checked after every event
        power_meter=PowerMeter(ledger),
    )
    policy.sim, policy.power_model = sim, sc.power_model
    outcome = sim.run()
    return Run(sim, outcome, ledger, integrator, policy, perf)


# --------------------------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------------------------


def close(a: float, b: float, scale: float = 1.0) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b), scale)


def job_rows(cols) -> dict[int, np.ndarray]:
    if not len(cols["job"]):
        return {}
    order = np.argsort(cols["job"], kind="stable")
    jobs, starts = np.unique(cols["job"][order], return_index=True)
    return dict(zip(jobs.tolist(), np.split(order, starts[1:]), strict=True))


def gpu_set(placement) -> frozenset:
    return frozenset((node, g) for node, gpus, _, _ in placement for g in gpus)


def check_replay(run: Run) -> None:
    """Replay the log: after every instant, no GPU holds more than 1000 milli, no node more CPU or memory than it
    has, and every holding job's logged rate and load are the performance model's for its configuration and
    co-runners at that time (rate 0 while restarting)."""
    sim, perf, log = run.sim, run.perf, run.sim.log
    spec = sim.spec
    cols = log.columns()
    times = cols["time_s"]
    assert (np.diff(times) >= 0).all(), "log not in time order"
    holding: dict[int, int] = {}  # job -> row index of its current entry
    ends = np.r_[np.flatnonzero(np.diff(times) > 0), len(times) - 1]
    i = 0
    for end in ends.tolist():
        for r in range(i, end + 1):
            job = int(cols["job"][r])
            if cols["alloc"][r] == NO_ALLOC:
                holding.pop(job, None)
            else:
                holding[job] = r
        i = end + 1
        share_on: dict[tuple[int, int], int] = {}
        residents: dict[tuple[int, int], list[int]] = {}
        cpu = np.zeros(spec.num_nodes, dtype=np.int64)
        mem = np.zeros(spec.num_nodes, dtype=np.int64)
        for job, r in holding.items():
            a = int(cols["alloc"][r])
            share = int(log.shares[a])
            assert 0 < share <= MILLI
            for node, gpus, c, m in log.placements[a]:
                cpu[node] += c
                mem[node] += m
                assert len(set(gpus)) == len(gpus) and all(0 <= g < spec.gpu_count[node] for g in gpus)
                for g in gpus:
                    share_on[(node, g)] = share_on.get((node, g), 0) + share
                    if share < MILLI:
                        residents.setdefault((node, g), []).append(job)
        assert all(v <= MILLI for v in share_on.values()), f"GPU over-allocated at t={times[end]}"
        assert (cpu <= spec.cpu_milli).all() and (mem <= spec.memory_mib).all()
        for job, r in holding.items():
            a = int(cols["alloc"][r])
            placement, share = log.placements[a], int(log.shares[a])
            setting = log.settings[int(cols["setting"][r])]
            ngpu = sum(len(g) for _, g, _, _ in placement)
            code = int(spec.gpu_model_code[placement[0][0]])
            load = perf.gpu_load(job, code, setting) if ngpu else 0.0
            assert cols["load"][r] == pytest.approx(load, rel=1e-12, abs=1e-15), f"job {job} load"
            if cols["phase"][r] == PHASE_RESTARTING:
                assert cols["rate"][r] == 0.0
                continue
            assert cols["phase"][r] == PHASE_RUNNING
            nodes = len(placement)
            switches = len({int(spec.switch_id[n]) for n, _, _, _ in placement}) if nodes > 1 else 1
            if not perf.modelled[job]:
                nodes = switches = 1
            rate = perf.solo_rate(job, code, ngpu, nodes, switches, setting)
            if share < MILLI:
                co = [[k for k in residents[(n, g)] if k != job] for n, gpus, _, _ in placement for g in gpus]
                rate *= perf.shared_factor(job, code, co)
            assert cols["rate"][r] == pytest.approx(rate, rel=1e-12), (
                f"job {job} runs at a stale rate at t={times[end]}: logged {cols['rate'][r]}, model {rate}"
            )


def check_jobs(run: Run) -> None:
    """Work done, progress lost and restarts charged, per job, from the log."""
    sim, out, perf, log = run.sim, run.outcome, run.perf, run.sim.log
    cols = log.columns()
    times, alloc, phase, rate, lost = cols["time_s"], cols["alloc"], cols["phase"], cols["rate"], cols["lost"]
    interval = sim.ckpt_interval
    decisions: dict[float, list[bool]] = {}
    for t, save in run.policy.decisions:
        decisions.setdefault(t, []).append(save)
    ngpus = [sum(len(g) for _, g, _, _ in p) for p in log.placements]
    for job, rows in job_rows(cols).items():
        work = float(perf.work[job])
        rows = rows.tolist()
        nxt = [times[rows[k + 1]] if k + 1 < len(rows) else sim.now for k in range(len(rows))]
        done = out.status[job] == STATUS_DONE
        if done:
            assert alloc[rows[-1]] == NO_ALLOC and times[rows[-1]] == out.end_s[job]
            assert lost[rows[-1]] == 0.0
        # 2. work: the integral of the logged rate, less what was lost, is the job's work.
        progress = sum(
            rate[r] * (t1 - times[r]) for r, t1 in zip(rows, nxt, strict=True) if alloc[r] != NO_ALLOC
        )
        total_lost = float(lost[rows].sum())
        assert total_lost == pytest.approx(out.work_lost[job], rel=REL, abs=1e-12)
        if done:
            assert close(progress - total_lost, work), f"job {job}: did {progress - total_lost}, work {work}"
        else:
            assert progress - total_lost <= work * (1 + REL)
        # 3. losses; 4. restarts.
        restarts = preemptions = 0
        restart_gpu_s = 0.0
        epoch = None  # when the job's present run of progress (and its checkpoint schedule) began
        # The allocation the job held before its present one, and the latest one it held.
        prev_alloc = last_held = NO_ALLOC
        ran = False
        for k, r in enumerate(rows):
            before = rows[k - 1] if k else None
            a = int(alloc[r])
            if a == NO_ALLOC:
                if k == len(rows) - 1 and done:
                    continue  # completion
                preemptions += 1
                if lost[r] > 0:
                    assert interval[job] > 0, f"job {job} lost progress without checkpointing"
                    assert False in decisions.get(times[r], []), "progress lost on a suspend"
                    t, t0 = times[r], epoch
                    gained = _progress(cols, rows, nxt, t0, t)
                    m = (t - t0) / interval[job]
                    cands = {math.floor(m)} | (
                        {round(m), round(m) - 1} if abs(m - round(m)) < 1e-9 else set()
                    )
                    expected = [
                        _progress(cols, rows, nxt, t0 + c * interval[job], t) for c in cands if c >= 0
                    ]
                    assert any(close(lost[r], e, work) for e in expected), (
                        f"job {job} lost {lost[r]} at t={t}; progress since its last checkpoint {expected}"
                    )
                    window = _progress(cols, rows, nxt, max(t - interval[job], t0), t)
                    assert lost[r] <= window * (1 + REL) + 1e-12 and lost[r] <= gained * (1 + REL) + 1e-12
                else:
                    assert lost[r] == 0.0
                epoch = None
                continue
            new_alloc = before is None or int(alloc[before]) != a
            if new_alloc:
                prev_alloc, last_held = last_held, a
                was_running = before is not None and phase[before] == PHASE_RUNNING
                if not ran or ngpus[a] == 0:
                    assert phase[r] == PHASE_RUNNING, f"job {job}: a first start or a GPU-less start is free"
                elif was_running and gpu_set(log.placements[a]) == gpu_set(log.placements[prev_alloc]):
                    assert phase[r] == PHASE_RUNNING, f"job {job}: a share change in place keeps it running"
                else:
                    assert phase[r] == PHASE_RESTARTING, (
                        f"job {job} resumed, resized or moved without a restart"
                    )
                ran = True
            if phase[r] == PHASE_RESTARTING and (new_alloc or phase[before] != PHASE_RESTARTING):
                assert new_alloc
                same = gpu_set(log.placements[a]) == gpu_set(log.placements[prev_alloc])
                delay = perf.restart_delay_s(job, ngpus[a], same)
                assert delay > 0
                restarts += 1
                restart_gpu_s += delay * ngpus[a]
                # The restart holds the GPUs at rate 0 until it ends, or until the job is stopped or moved.
                k2 = k + 1
                while k2 < len(rows) and alloc[rows[k2]] == a and phase[rows[k2]] == PHASE_RESTARTING:
                    k2 += 1
                assert k2 < len(rows), f"job {job} still restarting at the end"
                t_end = times[rows[k2]]
                if alloc[rows[k2]] == a:
                    assert phase[rows[k2]] == PHASE_RUNNING
                    assert t_end - times[r] == pytest.approx(delay, rel=REL, abs=1e-9), f"job {job} restart"
                else:
                    assert t_end - times[r] <= delay * (1 + REL) + 1e-9
            if phase[r] == PHASE_RUNNING and (new_alloc or phase[before] != PHASE_RUNNING):
                epoch = times[r]
        assert restarts == out.restarts[job], (
            f"job {job}: {restarts} restarts in the log, {out.restarts[job]}"
        )
        assert restart_gpu_s == pytest.approx(out.restart_gpu_s[job], rel=REL, abs=1e-9)
        assert preemptions == out.preemptions[job]


def _progress(cols, rows: list[int], nxt: list[float], t0: float, t1: float) -> float:
    """Progress of one job (its rows `rows`) over [t0, t1] from the logged rates."""
    total = 0.0
    for r, end in zip(rows, nxt, strict=True):
        if cols["alloc"][r] == NO_ALLOC:
            continue
        a, b = max(cols["time_s"][r], t0), min(end, t1)
        if b > a:
            total += cols["rate"][r] * (b - a)
    return total


def check_energy(run: Run) -> None:
    ledger, integrator, meter = run.ledger, run.integrator, run.sim.power_meter
    got = ledger.energy_j
    expected_total = sum(integrator.energy.values())
    scale = max(expected_total, 1.0)
    for name, value in integrator.energy.items():
        assert got[name] == pytest.approx(value, rel=REL, abs=REL * scale), name
    raw = sum(got[k] for k in COMPONENTS if k != "facility_overhead")
    assert got["facility_overhead"] == pytest.approx((ledger.pue - 1.0) * raw, rel=REL, abs=REL * scale)
    summary = ledger.summary(1.0)
    parts = summary["energy_by_component_kwh"]
    assert set(parts) == set(COMPONENTS)
    assert summary["energy_kwh"] == pytest.approx(sum(parts.values()), rel=1e-12)
    assert summary["energy_kwh"] * 3.6e6 == pytest.approx(
        expected_total * ledger.pue, rel=REL, abs=REL * scale
    )
    # The live meter, as the policy saw it during the run, and at the end.
    for t, meter_j, integrated_j, meter_w, live_w in run.policy.probes:
        assert meter_j == pytest.approx(integrated_j, rel=REL, abs=REL * scale), f"meter energy at t={t}"
        assert meter_w == pytest.approx(live_w, rel=REL, abs=1e-9), f"meter power at t={t}"
    assert meter.energy_j(run.sim) / ledger.pue == pytest.approx(raw, rel=REL, abs=REL * scale)


def fingerprint(run: Run) -> dict[str, bytes]:
    log, out = run.sim.log, run.outcome
    prints = {name: np.ascontiguousarray(a).tobytes() for name, a in log.columns().items()}
    prints["placements"] = repr(log.placements).encode()
    prints["shares"] = bytes(log.shares)
    prints["settings"] = repr(log.settings).encode()
    for name in ("status", "start_s", "end_s", "restarts", "preemptions", "restart_gpu_s", "work_lost"):
        prints[name] = np.ascontiguousarray(getattr(out, name)).tobytes()
    prints["energy"] = json.dumps(run.ledger.energy_j).encode()
    prints["probes"] = repr(run.policy.probes).encode()
    return prints


# --------------------------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios())
def test_random_legal_policy_keeps_engine_invariants(sc: Scenario, data_dir: Path):
    run = run_scenario(sc, data_dir)
    out = run.outcome
    finished = (
        (out.status == STATUS_DONE) | (out.status == STATUS_UNSCHEDULABLE) | (out.status == STATUS_DROPPED)
    )
    assert finished.all(), "every job completes, is unschedulable or was rejected"
    assert run.sim.state.allocated_milli == 0 and (run.sim.state.cpu_left == run.sim.spec.cpu_milli).all()
    check_replay(run)
    check_jobs(run)
    check_energy(run)
    again = run_scenario(sc, data_dir)
    assert fingerprint(again) == fingerprint(run), "the same seed gives byte-identical outputs"


# --- illegal decisions ----------------------------------------------------------------------------------------


class ScriptedPolicy(AllocationPolicy):
    """Returns the given decisions, one per round that sees jobs, then keeps everything running."""

    name = "scripted-test"

    def __init__(self, decisions: list[Decision]):
        self.decisions = list(decisions)

    def allocate(self, view) -> Decision:
        if not self.decisions or not (view.queue_length or len(view.running_jobs())):
            return Decision(keep=view.running_jobs())
        return self.decisions.pop(0)


def run_scripted(decisions: list[Decision], rows: list[dict], data_dir: Path) -> Simulator:
    """Two nodes: n0 with two T4 (the main GPU type, tables from the T4 toy table), n1 with two A100."""
    spec = make_cluster([(2, "T4", 32000, 10**6), (2, "A100", 32000, 10**6)])
    defaults = {"submit": 0.0, "duration": 50.0, "gpus": 1, "milli": 1000, "cpu": 0, "model": "", "batch": 0}
    full = [{**defaults, "spec": "", "ckpt": math.nan, "iterations": math.nan, **r} for r in rows]
    perf, jobs = PerformanceModel.build(build_jobs(full), spec, data_dir=data_dir)
    scheduler = RoundScheduler(ScriptedPolicy(decisions), 10.0)
    sim = Simulator(jobs, spec, scheduler, np.random.default_rng(0), perf=perf, check_invariants=True)
    sim.run()
    return sim


def one(node: int, *gpus: int) -> tuple:
    return ((node, tuple(gpus), 0, 0),)


LOW_LIMIT = GpuSetting(power_limit_fraction=0.5)  # a T4 allows 60-70 W of 70 W


@pytest.mark.parametrize(
    ("assign", "rows", "message"),
    [
        ({0: Target(one(0, 0)), 1: Target(one(0, 0))}, [{}, {}], "over-allocation of GPU 0 on node 0"),
        (
            {0: Target(one(0, 0), 600), 1: Target(one(0, 0), 600)},
            [{}, {}],
            "over-allocation of GPU 0 on node 0",
        ),
        ({0: Target(one(0, 1)), 1: Target(((0, (0,), 40000, 0),))}, [{}, {}], "over-allocation of CPU"),
        ({0: Target(one(0, 5))}, [{}], "GPU 5 does not exist on node n0"),
        ({0: Target(one(0, -1))}, [{}], "GPU -1 does not exist on node n0"),
        ({0: Target(one(7, 0))}, [{}], "node 7 does not exist"),
        ({0: Target(one(-1, 0))}, [{}], "node -1 does not exist"),
        ({0: Target(one(0, 1, 1))}, [{"gpus": 2}], "GPU 1 of node n0 is listed twice"),
        ({0: Target(((0, (0,), 0, 0), (0, (0,), 0, 0)))}, [{"gpus": 2}], "GPU 0 of node n0 is listed twice"),
        ({0: Target(one(0, 0), 0)}, [{}], "GPU share 0 milli-GPU is outside"),
        ({0: Target(one(0, 0), -500)}, [{}], "GPU share -500"),
        ({0: Target(one(0, 0), 1500)}, [{}], "GPU share 1500"),
        ({0: Target(one(0))}, [{}], "a GPU job was given no GPU"),
        ({0: Target(one(0, 0))}, [{"spec": "A100"}], "node n0 has a GPU model the job does not accept"),
        ({0: Target(one(0, 0), setting=LOW_LIMIT)}, [{}], "T4: power limit fraction 0.5"),
        (
            {0: Target(one(0, 0), 500), 1: Target(one(0, 0), 500)},
            [{"model": "bert"}, {"model": "bert"}],
            "GPU memory does not fit",
        ),
    ],
)
def test_illegal_target_names_policy_and_job(assign, rows, message, data_dir):
    job = f"j{max(assign)}"
    with pytest.raises(InvalidDecision, match=f"policy 'scripted-test', job '{job}': {message}"):
        run_scripted([Decision(assign=assign)], rows, data_dir)


def test_illegal_change_of_a_running_job(data_dir):
    start = Decision(assign={0: Target(one(0, 0))})
    for second, message in [
        (Decision(assign={0: Target(one(0, 0), setting=LOW_LIMIT)}), "T4: power limit fraction 0.5"),
        (Decision(assign={0: Target(one(0, 0, 0))}), "GPU 0 of node n0 is listed twice"),
        (Decision(keep=[0], reject=[0]), "rejects a job that is not pending"),
        (Decision(keep=[0], assign={1: Target(one(0, 0))}), "over-allocation of GPU 0 on node 0"),
    ]:
        with pytest.raises(InvalidDecision, match=f"policy 'scripted-test', job 'j[01]': {message}"):
            run_scripted([start, second], [{}, {"submit": 5.0}], data_dir)


def test_unknown_or_wrong_jobs_are_refused(data_dir):
    with pytest.raises(InvalidDecision, match="policy 'scripted-test': assigns unknown job index 9"):
        run_scripted([Decision(assign={9: Target(one(0, 0))})], [{}], data_dir)
    with pytest.raises(InvalidDecision, match="policy 'scripted-test': keeps unknown job index -1"):
        run_scripted([Decision(keep=[-1])], [{}], data_dir)
    with pytest.raises(
        InvalidDecision, match="policy 'scripted-test', job 'j0': keeps a job that is not running"
    ):
        run_scripted([Decision(keep=[0])], [{}], data_dir)


def test_in_place_move_is_rerated_when_a_later_mover_joins_its_gpu(data_dir):
    """Regression: in one move_many, job 0 changes its share on its own GPU (it keeps running, re-rated at once)
    and job 1 then moves onto that GPU. Job 0 used to keep the rate it had alone (the movers were skipped when
    co-runners were re-rated), so it ran faster than the model says for as long as they shared the GPU."""
    rows = [{"model": "cifar10", "duration": 200.0}, {"model": "cifar10", "duration": 200.0}]
    apart = Decision(assign={0: Target(one(0, 0), 500), 1: Target(one(0, 1), 500)})
    together = Decision(assign={0: Target(one(0, 0), 400), 1: Target(one(0, 0), 600)})
    sim = run_scripted([apart, together], rows, data_dir)
    cols = sim.log.columns()
    held = np.where(cols["alloc"] >= 0, cols["alloc"], 0)
    at = (cols["job"] == 0) & (cols["alloc"] >= 0) & (np.asarray(sim.log.shares)[held] == 400)
    at &= cols["time_s"] == cols["time_s"][at].min()  # the instant of the move
    solo = sim.perf.solo_rate(0, 0, 1, 1, 1, DEFAULT_SETTING)
    shared = solo * sim.perf.shared_factor(0, 0, [[1]])
    assert shared < solo and cols["rate"][at][-1] == pytest.approx(shared, rel=1e-12)
    check_replay(Run(sim, None, None, None, None, sim.perf))


def test_job_with_a_table_only_on_a_secondary_gpu_type_can_run_there(data_dir):
    # n0 (two T4) is the main GPU type; 'gpt2' has a table on the A100 only. Work is counted in iterations only
    # for jobs modelled on the main type, so this job keeps its trace duration and runs at trace speed.
    sim = run_scripted([Decision(assign={0: Target(one(1, 0))})], [{"model": "gpt2"}], data_dir)
    assert not sim.perf.modelled[0] and not sim.perf.has_table(0, 1)
    assert sim.perf.work[0] == sim.jobs.duration_s[0]
    assert sim.log.columns()["rate"][0] == 1.0
