"""`wattsched serve ...`: the scheduler running live on a Slurm cluster (docs/live-slurm.md §1) or on Kubernetes
(docs/live-kubernetes.md).

The flags of a run setting (policies, energy, signals, the seed) are generated from its field of the run config,
as `simulate`'s are (cli/options.py :func:`with_setting_options`): the same name, type, check and help, with a
sentence on the live meaning where it needs one. The services' own flags (where they listen, their state, the
cluster manager's side) are written here.
"""

from __future__ import annotations

import logging
import signal
import threading
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from ..experiments.config import SimulationConfig, resolve_config
from .common import console, require_extra, user_errors
from .options import Setting, is_set, with_setting_options

SERVE_HELP = "Run the scheduler live on a cluster manager (Slurm, Kubernetes)."  # also listed by cli/main.py
serve_app = typer.Typer(help=SERVE_HELP, no_args_is_help=True)


def _live_signals(run: SimulationConfig):
    """The price and carbon series a live run's policies read (the run's region or price and carbon files, read
    as its signal settings say), aligned to the mirror's origin (epoch seconds) by the simulator's rule (weekday
    and hour of the signal year); None when none is configured."""
    sig = run.signals
    if sig.region is None and sig.price_csv is None and sig.carbon_csv is None:
        return None
    from datetime import UTC, datetime

    from ..experiments.energy_setup import align_grid_signals, load_grid_signals

    cfg = SimulationConfig(signals=sig)
    loaded = load_grid_signals(cfg, [])  # read once, checked before the service starts

    def aligned(origin_s: float):
        return align_grid_signals(cfg, loaded, datetime.fromtimestamp(origin_s, UTC))

    return aligned


# The run settings of the live services, by flat key (experiments/config.py FLAT_KEYS); their flags are
# simulate's. Values are checked as simulate's (resolve_config), into a SimulationConfig of which only these are
# read. A live sentence (added to the field's help) starts with "Live".
_RUN = partial(resolve_config, None)
_SEED = Setting("seed", live="Live: the seed of the policies' tie-break node order, as in simulate")
# How the series are read (their alignment is live's own: onto today by weekday and hour).
_SIGNALS = (
    Setting("region", live="Live: the price and carbon the policies read"),
    Setting("year", live="Live: its series is mapped onto today by weekday and hour"),
    Setting("price_csv"),
    Setting("carbon_csv"),
    Setting("signal_tz"),
    Setting("carbon_kind"),
    Setting("signal_max_gap_hours"),
    Setting("signal_fill"),
)
SLURM_SETTINGS = (
    Setting("queue"),
    Setting("placement"),
    Setting("allocation"),
    Setting("round_s"),
    Setting(
        "power_states.idle_timeout_s",
        live="Live: with --power idle-timeout, a node idle this long is powered down through scontrol",
        aliases=("--idle-timeout",),
    ),
    Setting(
        "checkpoint_interval_s",
        live="Live: the jobs' own checkpoint interval (0: they checkpoint when stopped)",
        aliases=("--checkpoint-interval",),
    ),
    *_SIGNALS,
    _SEED,
)
CHECK_SETTINGS = (
    Setting("placement", live="Live: the one policy, after a fifo queue, live and in the simulator"),
    Setting("seed", live="Live: the tie-break seed, live and in the simulator"),
)
# FGD's typical pods: the workload's, as in simulate; live, without one, the pods listed at start.
_K8S_WORKLOAD = Setting(
    "workload",
    default=None,
    live="Live: the workload FGD's typical pods come from (e.g. alibaba-v2023/default, PATH.csv); without it, the "
    "pods listed at start",
)
K8S_EXTENDER_SETTINGS = (Setting("placement", default="fgd"), _K8S_WORKLOAD, _SEED)
K8S_SCHEDULER_SETTINGS = (
    Setting("placement", default="fgd"),
    Setting(
        "queue",
        default=None,
        live="Live: given, the full contract (LiveDriver) with --placement, instead of placing pods one by one as "
        "they come (a fifo queue then by default)",
    ),
    Setting("allocation", live="Live: the full contract"),
    Setting("round_s"),
    Setting(
        "power_manager",
        default=None,
        live="Live: given, the full contract; nodes are cordoned and powered through --power-up-cmd / "
        "--power-down-cmd",
    ),
    Setting(
        "power_states.idle_timeout_s",
        live="Live: with --power-manager idle-timeout, a node idle this long is cordoned and powered down",
        aliases=("--idle-timeout",),
    ),
    *_SIGNALS,
    _K8S_WORKLOAD,
    _SEED,
)

_AGENT_METRICS_URL = typer.Option(
    help="each node agent's /metrics ({node}: the node name): measured GPU power for the policies' view; "
    "without it, the linear power model"
)


def _type_map(values: list[str]) -> dict[str, str]:
    out = {}
    for v in values:
        name, sep, model = v.partition("=")
        if not sep or not name or not model:
            raise typer.BadParameter(
                f"--gpu-type-map: expected SLURM_TYPE=MODEL (e.g. rtx3090=A10), got {v!r}"
            )
        out[name] = model
    return out


@serve_app.command("slurm")
@with_setting_options(SimulationConfig, SLURM_SETTINGS, _RUN)
def slurm(
    run: SimulationConfig,
    partition: Annotated[
        str | None, typer.Option(help="only this partition (default: every node and job)")
    ] = None,
    interval: Annotated[float, typer.Option(help="seconds between observations", min=0.05)] = 1.0,
    state_db: Annotated[Path, typer.Option(help="wattsched's job record (sqlite)")] = Path(
        "wattsched-slurm.sqlite"
    ),
    metrics_port: Annotated[int, typer.Option(help="Prometheus /metrics port (0: none)", min=0)] = 9401,
    metrics_address: Annotated[str, typer.Option(help="address /metrics listens on")] = "127.0.0.1",
    power: Annotated[
        str,
        typer.Option(
            help="who powers nodes: slurm (its SuspendTime; jobs wake nodes), none, or a wattsched power manager "
            "(idle-timeout, forecast: wattsched powers nodes down and up through scontrol)"
        ),
    ] = "slurm",
    allow_resize: Annotated[
        bool,
        typer.Option(
            "--allow-resize/--no-resize",
            help="let an allocation policy change a job's GPU count or nodes (scontrol update NumNodes, "
            "TresPerNode): only for jobs that can use any number of GPUs",
        ),
    ] = False,
    gpu_type_map: Annotated[
        list[str] | None, typer.Option(help="SLURM_TYPE=MODEL for GPU types not in the catalog (repeatable)")
    ] = None,
    record_profiles: Annotated[
        Path | None,
        typer.Option(
            help="append each job's measured GPU energy, power and utilisation (from the node agents' job "
            "windows) to this profile CSV (docs/profile.md §6)"
        ),
    ] = None,
    agent_url: Annotated[
        str,
        typer.Option(help="where --record-profiles reads each node's agent; {node} is the Slurm node name"),
    ] = "http://{node}:9400",
    record_interval: Annotated[
        float, typer.Option(help="seconds between reads of the agents for --record-profiles", min=1)
    ] = 30.0,
    agent_metrics_url: Annotated[str | None, _AGENT_METRICS_URL] = None,
    max_steps: Annotated[int | None, typer.Option(help="stop after this many observations (tests)")] = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING")] = "INFO",
) -> None:
    """Place Slurm jobs submitted held (sbatch --hold) with wattsched's policies: observe with sinfo/squeue --json,
    start with scontrol update nodelist= + scontrol release."""
    require_extra("prometheus_client", "live")
    from ..backends.driver import LiveDriver, LiveMetrics
    from ..backends.profile_recorder import ProfileRecorder
    from ..backends.slurm.backend import SlurmBackend
    from ..backends.store import JobStore
    from ..policies.build import SchedulerConfig, build_scheduler
    from ..policies.contract import POWER_MANAGERS
    from ..policies.power import power_manager_from_config

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with user_errors():
        managers = [m for m in POWER_MANAGERS.names() if m != "always-on"]
        if power not in ("slurm", "none", *managers):
            raise typer.BadParameter(f"--power: slurm, none or one of {', '.join(managers)}; got {power!r}")
        manager = None
        if power in managers:
            manager = power_manager_from_config(power, run.energy.power_states)
        recorder = None
        if record_profiles is not None:  # checked before anything starts (the job store is a file too)
            if not record_profiles.parent.is_dir():
                raise typer.BadParameter(
                    f"--record-profiles: directory {record_profiles.parent} does not exist"
                )
            try:
                recorder = ProfileRecorder(record_profiles, agent_url, record_interval)
            except ValueError as exc:
                raise typer.BadParameter(str(exc)) from None
        scheduler = build_scheduler(SchedulerConfig.of(run.scheduler), None)
        metrics = LiveMetrics()
        driver = LiveDriver(
            SlurmBackend(partition=partition, wakes_nodes_for_jobs=power == "slurm"), scheduler,
            JobStore(state_db), seed=run.seed, power_manager=manager, allow_resize=allow_resize,
            gpu_type_map=_type_map(gpu_type_map or []), metrics=metrics, signals_for=_live_signals(run),
            checkpoint_interval_s=run.perf.checkpoint_interval_s, agent_metrics_url=agent_metrics_url,
        )  # fmt: skip
        driver.recorder = recorder
        if metrics_port:
            metrics.serve(metrics_port, metrics_address)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        where = f", metrics on http://{metrics_address}:{metrics_port}/metrics" if metrics_port else ""
        console.print(
            f"wattsched serving Slurm with {scheduler.name} every {interval:g} s{where}", highlight=False
        )
        driver.run(interval, stop, max_steps)
        driver.store.close()


@serve_app.command("check")
@with_setting_options(SimulationConfig, CHECK_SETTINGS, _RUN)
def check(
    run: SimulationConfig,
    slurm: Annotated[
        bool,
        typer.Option(
            "--slurm/--fake", help="a real Slurm ($SLURM_CONF; 3 nodes x 4 GPUs) or the in-memory one"
        ),
    ] = False,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("runs/sim-to-live"),
) -> None:
    """Sim-to-live check: the scripted workload (12 sleep jobs, a 2-node gang among them) placed live and in the
    simulator; writes compare.csv and report.md side by side, with the decision latency."""
    import time

    from ..backends.driver import LiveDriver
    from ..backends.simcheck import DEFAULT_SCRIPT, compare, report, sbatch_args
    from ..backends.slurm.backend import SlurmBackend, subprocess_runner
    from ..backends.slurm.fake import FakeSlurm
    from ..backends.store import JobStore
    from ..core.atomic import write_text
    from ..core.states import STATUS_DONE
    from ..experiments.grid import write_csv
    from ..policies.build import SchedulerConfig, build_scheduler

    placement = run.scheduler.placement
    with user_errors():
        cfg = SchedulerConfig(queue="fifo", placement=placement)
        fake = None if slurm else FakeSlurm.uniform(3)
        if fake is None:
            runner = subprocess_runner()
            backend = SlurmBackend(runner=runner, clock=time.time)
        else:
            runner, in_memory = fake, fake
            backend = SlurmBackend(runner=runner, clock=lambda: in_memory.now)
        durations = {}
        for j in DEFAULT_SCRIPT:
            if fake is not None:
                job_id = fake.submit(j.gpus_per_node, j.num_nodes, j.duration_s)
            else:
                job_id = runner(sbatch_args(j)).strip().split(";")[0]
            durations[job_id] = j.duration_s
        out.mkdir(parents=True, exist_ok=True)
        driver = LiveDriver(
            backend, build_scheduler(cfg, None), JobStore(out / "state.sqlite"), seed=run.seed
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if fake is not None:
                fake.advance(fake.now + 0.25)
            else:
                time.sleep(0.25)
            driver.step()
            c = driver.cluster
            if c is not None and all(
                c.status[c.index[i]] >= STATUS_DONE for i in durations
            ):  # done or dropped
                break
        table = compare(driver, cfg, durations)
        write_csv(out / "compare.csv", table)
        where = "a real Slurm" if slurm else "the in-memory Slurm front end"
        write_text(out / "report.md", report(table, driver.latencies_s, f"fifo + {placement} on {where}"))
    same = bool(table.same_nodes.all() and table.same_rank.all())
    console.print(
        f"{'identical' if same else 'DIFFERENT'} placements and start order; report.md in [bold]{out}[/]"
    )
    if not same:
        raise typer.Exit(1)


def _k8s_common(run: SimulationConfig, kubeconfig: str | None, offline: str | None, log_level: str):
    from ..backends.k8s.connect import connect
    from ..policies.base import PLACEMENT_POLICIES
    from ..workloads.catalog import load_workload

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    policy = PLACEMENT_POLICIES.create(run.scheduler.placement)
    workload = run.workload.name if is_set(run, ("workload", "name")) else None
    jobs = load_workload(workload).jobs if workload else None
    api, where = connect(kubeconfig, offline)
    return policy, jobs, api, where


_K8S_OPTIONS = {
    "log_level": typer.Option(help="DEBUG, INFO, WARNING"),
    "kubeconfig": typer.Option(help="kubeconfig file (default: in-cluster, else ~/.kube/config)"),
    "offline": typer.Option(
        help="no API server: serve an in-memory cluster, a wattsched cluster name (default, alibaba-v2023, "
        "PATH.yaml) or a v1.NodeList JSON file; bindings go nowhere"
    ),
}


@serve_app.command("k8s-extender")
@with_setting_options(SimulationConfig, K8S_EXTENDER_SETTINGS, _RUN)
def k8s_extender(
    run: SimulationConfig,
    host: Annotated[str, typer.Option(help="address to listen on (kube-scheduler beside it: 127.0.0.1)")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="port (0: any free port)", min=0, max=65535)] = 8888,
    prefix: Annotated[str, typer.Option(help="URL prefix of the verbs (the urlPrefix's path)")] = "/energy",
    tls_cert: Annotated[Path | None, typer.Option(help="TLS certificate (PEM); with --tls-key")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="TLS private key (PEM)")] = None,
    tls_client_ca: Annotated[
        Path | None, typer.Option(help="mutual TLS: require a client certificate signed by this CA (PEM)")
    ] = None,
    max_body_bytes: Annotated[int, typer.Option(help="largest request body accepted", min=1024)] = 32 * 2**20,
    kubeconfig: Annotated[str | None, _K8S_OPTIONS["kubeconfig"]] = None,
    offline: Annotated[str | None, _K8S_OPTIONS["offline"]] = None,
    log_level: Annotated[str, _K8S_OPTIONS["log_level"]] = "INFO",
) -> None:
    """A kube-scheduler extender: POST <prefix>/filter, /prioritize and /bind score and bind pods with a wattsched
    placement policy (docs/live-kubernetes.md)."""
    if not offline:
        require_extra("kubernetes")
    from ..backends.k8s.extender import Extender, ExtenderServer
    from ..backends.k8s.watcher import ClusterWatcher

    with user_errors():
        if bool(tls_cert) != bool(tls_key):
            raise typer.BadParameter("--tls-cert and --tls-key go together")
        if tls_client_ca and not tls_cert:
            raise typer.BadParameter("--tls-client-ca needs --tls-cert and --tls-key")
        policy, jobs, api, where = _k8s_common(run, kubeconfig, offline, log_level)
        watcher = ClusterWatcher(api, policy, seed=run.seed, workload=jobs)
        stop = threading.Event()
        server = ExtenderServer(Extender(watcher), host, port, prefix, max_body_bytes,
                                str(tls_cert) if tls_cert else None, str(tls_key) if tls_key else None,
                                str(tls_client_ca) if tls_client_ca else None)  # fmt: skip
        threads = watcher.start(stop)
        server.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        scheme = "https" if server.tls else "http"
        console.print(f"wattsched k8s-extender ({policy.name}) on {scheme}://{host}:{server.port}"
                      f"{'/' + prefix.strip('/') if prefix.strip('/') else ''}/{{filter,prioritize,bind}}"
                      f"{' (mutual TLS: client certificate required)' if server.mtls else ''}; "
                      f"cluster: {where}", highlight=False)  # fmt: skip
        stop.wait()
        server.stop()
        for t in threads:
            t.join(timeout=2)


@serve_app.command("k8s-scheduler")
@with_setting_options(SimulationConfig, K8S_SCHEDULER_SETTINGS, _RUN)
def k8s_scheduler(
    run: SimulationConfig,
    power_up_cmd: Annotated[
        str | None, typer.Option(help="node power hook, run as an argument list; {node} is the node's name")
    ] = None,
    power_down_cmd: Annotated[
        str | None, typer.Option(help="node power hook for powering down ({node})")
    ] = None,
    eviction_grace: Annotated[
        int,
        typer.Option(help="seconds a stopped pod gets to save its checkpoint (SIGTERM) before it is killed"),
    ] = 30,
    interval: Annotated[
        float, typer.Option(help="full contract: seconds between observations", min=0.05)
    ] = 1.0,
    state_db: Annotated[Path, typer.Option(help="full contract: wattsched's job record (sqlite)")] = Path(
        "wattsched-k8s.sqlite"
    ),
    max_steps: Annotated[
        int | None, typer.Option(help="full contract: stop after this many observations")
    ] = None,
    scheduler_name: Annotated[str, typer.Option(help="the spec.schedulerName of the pods it places")] = (
        "energy-aware"
    ),
    events: Annotated[
        bool, typer.Option("--events/--no-events", help="post Scheduled/FailedScheduling")
    ] = True,
    kubeconfig: Annotated[str | None, _K8S_OPTIONS["kubeconfig"]] = None,
    offline: Annotated[str | None, _K8S_OPTIONS["offline"]] = None,
    log_level: Annotated[str, _K8S_OPTIONS["log_level"]] = "INFO",
) -> None:
    """A custom Kubernetes scheduler for the pods whose spec.schedulerName is --scheduler-name. With --queue,
    --allocation or --power-manager: the full policy contract (the same LiveDriver as serve slurm: start = bind,
    stop = evict with a checkpoint annotation, power = cordon + the node power hook); with --placement alone: each
    pod placed as it comes (docs/live-kubernetes.md)."""
    require_extra("kubernetes")  # --offline too: its bindings and events are the client's models
    from ..backends.k8s.scheduler import CustomScheduler

    with user_errors():
        policy, jobs, api, where = _k8s_common(run, kubeconfig, offline, log_level)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        # The full contract: a queue, an allocation or a power manager given (placement alone: pod by pod).
        power_manager = run.energy.power_manager if is_set(run, ("energy", "power_manager")) else None
        if is_set(run, ("scheduler", "queue")) or run.scheduler.allocation or power_manager:
            _k8s_full_contract(api, where, stop, run, power_manager, power_up_cmd, power_down_cmd, eviction_grace,
                               interval, state_db, scheduler_name, max_steps)  # fmt: skip
            return
        scheduler = CustomScheduler(
            api, policy, scheduler_name, seed=run.seed, workload=jobs, post_events=events
        )
        console.print(f"wattsched k8s-scheduler '{scheduler_name}' ({policy.name}); cluster: {where}",
                      highlight=False)  # fmt: skip
        scheduler.run(stop)
        console.print(
            f"bound {scheduler.stats.bound} pods, {scheduler.stats.conflicts} conflicts", highlight=False
        )


def _k8s_full_contract(api, where, stop, run: SimulationConfig, power_manager: str | None, power_up_cmd,
                       power_down_cmd, eviction_grace, interval, state_db, scheduler_name,
                       max_steps) -> None:  # fmt: skip
    from ..backends.driver import LiveDriver
    from ..backends.k8s.backend import K8sBackend
    from ..backends.store import JobStore
    from ..policies.build import SchedulerConfig, build_scheduler
    from ..policies.power import power_manager_from_config

    scheduler = build_scheduler(SchedulerConfig.of(run.scheduler), None)
    manager = None
    if power_manager:
        manager = power_manager_from_config(power_manager, run.energy.power_states)
    backend = K8sBackend(api, scheduler_name, power_up_cmd, power_down_cmd, eviction_grace)
    driver = LiveDriver(backend, scheduler, JobStore(state_db), seed=run.seed, power_manager=manager,
                        signals_for=_live_signals(run))  # fmt: skip
    console.print(f"wattsched k8s-scheduler '{scheduler_name}' ({scheduler.name}"
                  f"{', ' + manager.name if manager else ''}, full contract) every {interval:g} s; cluster: {where}",
                  highlight=False)  # fmt: skip
    driver.run(interval, stop, max_steps)
    driver.store.close()
