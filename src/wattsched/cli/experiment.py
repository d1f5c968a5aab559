"""`wattsched experiment ...`: reproduction experiments that run a grid of policies x seeds.

Still one file (~610 lines): the seven hand-written commands of the experiments written before the protocol;
each goes as its experiment moves onto ``experiments/protocol.py`` (whose commands are generated here).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..experiments.config import SimulationConfig
from ..experiments.parallel import Execution
from .common import console, err_console, progress_bar, user_errors
from .options import config_options, parse_key_values

experiment_app = typer.Typer(
    help="Reproduction experiments (policy x seed grids) with tables and plots.", no_args_is_help=True
)


# Options every experiment takes.
WorkersOption = Annotated[
    int | None,
    typer.Option(
        help=escape(
            "worker processes; with --backend ray, the most runs at once [default: all cores; the Ray "
            "cluster's CPUs]"
        )
    ),
]
BackendOption = Annotated[
    str,
    typer.Option(
        help=escape(
            "where the runs go: process (worker processes on this machine) | ray (a Ray cluster; "
            "pip install 'wattsched[ray]')"
        )
    ),
]
AddressOption = Annotated[
    str | None,
    typer.Option(
        help=escape("--backend ray: the cluster's address, HOST:PORT of its head [default: a local Ray]")
    ),
]
FreshOption = Annotated[
    bool,
    typer.Option("--fresh", help="rerun every run, clearing those an interrupted run of this --out kept"),
]
DataDirOption = Annotated[str | None, typer.Option(help="local dataset directory (else $WATTSCHED_DATA)")]
QuietOption = Annotated[bool, typer.Option("--quiet", help="no progress bar")]
PlotsOption = Annotated[
    bool, typer.Option("--plots/--no-plots", help=escape("write the figures (PNG; needs the [plots] extra)"))
]
# The column mapping of a CSV workload: the same option as `simulate --columns`, from the same config field.
_COLUMNS = next(o for o in config_options(SimulationConfig) if o.path == ("workload", "columns"))
ColumnsOption = Annotated[
    list[str] | None, typer.Option(_COLUMNS.flag, help=escape(_COLUMNS.help), metavar=_COLUMNS.metavar)
]
# Measured profiles: the same option as `simulate --profiles`, from the same config field.
_PROFILES = next(o for o in config_options(SimulationConfig) if o.path == ("perf", "profiles"))
ProfilesOption = Annotated[
    str | None, typer.Option(_PROFILES.flag, help=escape(_PROFILES.help), metavar=_PROFILES.metavar)
]


def _notice(line: str) -> None:
    err_console.print(escape(line), soft_wrap=True, highlight=False)  # above the progress bar, never wrapped


def grid_execution(backend: str, address: str | None, fresh: bool) -> Execution:
    """The --backend, --address and --fresh of an experiment, checked before anything is loaded or run."""
    execution = Execution(backend, address, fresh=fresh, notify=_notice)
    execution.check()
    return execution


def column_mapping(items: list[str] | None) -> dict[str, str]:
    return parse_key_values(items or [], _COLUMNS.flag, _COLUMNS.metavar)


def parse_numbers(text: str, kind: type, option: str, example: str) -> list:
    """A comma-separated option as numbers of `kind`; a bad item is a usage error naming the option."""
    from ..experiments.grid import parse_list

    try:
        return [kind(item) for item in parse_list(text)]
    except ValueError:
        raise typer.BadParameter(f"{option}: expected numbers such as {example}, got {text!r}") from None


@experiment_app.callback()
def _experiments() -> None:
    """Reproduction experiments (policy x seed grids) with tables and plots."""


@experiment_app.command("fgd-pwr")
def fgd_pwr(
    trace: Annotated[
        str, typer.Option(help="Alibaba v2023 pod list: default, gpushare40, multigpu20, ...")
    ] = "default",
    seeds: Annotated[int, typer.Option(help="runs per policy, seeds 42, 43, ...")] = 10,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("runs/fgd-pwr"),
    policies: Annotated[
        str | None,
        typer.Option(help=escape("comma-separated placement policies [default: the 11 of the papers]")),
    ] = None,
    workers: WorkersOption = None,
    backend: BackendOption = "process",
    address: AddressOption = None,
    fresh: FreshOption = False,
    inflate: Annotated[float, typer.Option(help="arrivals as a multiple of cluster GPU capacity")] = 1.3,
    data_dir: DataDirOption = None,
    quiet: QuietOption = False,
) -> None:
    """FGD (ATC'23) and PWR (CCGrid'25) packing experiments: allocation, fragmentation, power, GRAR."""
    from ..experiments.fgd_pwr import check_policies, run_experiment, trace_inputs
    from ..experiments.grid import parse_list

    names = parse_list(policies) if policies else None
    with user_errors():
        execution = grid_execution(backend, address, fresh)
        if names is not None:
            check_policies(names)  # fail on a bad name before loading any data
        inputs = trace_inputs(trace, data_dir)
        with progress_bar(f"fgd-pwr {inputs.label}", enabled=not quiet) as progress:
            result = run_experiment(
                trace=trace,
                seeds=seeds,
                out=out,
                policies=names,
                workers=workers,
                data_dir=data_dir,
                inflate=inflate,
                progress=progress,
                inputs=inputs,
                execution=execution,
            )
    s = result.summary
    console.print(f"{s['runs']} runs in {s['wall_s']:.1f} s on {s['workers']} worker(s)")
    console.print(f"curves.csv, grid.csv, summary.md and plots in [bold]{result.out}[/]")


@experiment_app.command("powerflow")
def powerflow(
    workload: Annotated[str, typer.Option(help="workload name or CSV path, e.g. pollux/workload-6")],
    cluster: Annotated[str, typer.Option(help="cluster name or YAML path, e.g. n16g4")],
    gpu_type: Annotated[
        str | None, typer.Option(help="GPU model for every node of a single-model cluster (e.g. T4)")
    ] = None,
    seeds: Annotated[int, typer.Option(help="runs per setting, seeds 42, 43, ...")] = 3,
    baselines: Annotated[
        str, typer.Option(help="comma-separated: fifo (queue fifo + first-fit) and allocation policies")
    ] = "fifo,tiresias,gandiva,optimus-greedy",
    budget_points: Annotated[
        int, typer.Option(help="PowerFlow budgets from 60 % to 120 % of the largest baseline energy")
    ] = 7,
    caps: Annotated[
        str, typer.Option(help="comma-separated SM-clock caps (fractions of f_max) for the baselines")
    ] = "1.0,0.9,0.8,0.7,0.6",
    power_manager: Annotated[
        str,
        typer.Option(
            help="comma-separated power managers (always-on, idle-timeout, forecast): the whole grid runs once "
            "under each, every run of a grid under the same one; with several, DIR/<manager>/ and a headline "
            "per manager in DIR/summary.md"
        ),
    ] = "always-on,idle-timeout",
    out: Annotated[Path, typer.Option(help="output directory")] = Path("runs/powerflow"),
    profiles: ProfilesOption = None,
    columns: ColumnsOption = None,
    workers: WorkersOption = None,
    backend: BackendOption = "process",
    address: AddressOption = None,
    fresh: FreshOption = False,
    data_dir: DataDirOption = None,
    quiet: QuietOption = False,
) -> None:
    """PowerFlow-reconstructed vs baselines at equal energy, with budget and clock-cap sweeps."""
    from ..experiments.grid import parse_list
    from ..experiments.powerflow import (
        LABEL,
        check_power_managers,
        parse_caps,
        prepare,
        run_experiment,
        run_power_managers,
    )

    with user_errors():
        execution = grid_execution(backend, address, fresh)
        managers = check_power_managers(parse_list(power_manager))
        prep = prepare(
            workload,
            cluster,
            gpu_type,
            seeds,
            parse_list(baselines),
            budget_points,
            parse_caps(caps),
            managers[0],
            data_dir,
            column_mapping(columns),
            profiles,
        )
        with progress_bar(f"powerflow {workload}", enabled=not quiet) as progress:
            if len(managers) == 1:
                results = {
                    managers[0]: run_experiment(
                        workload,
                        cluster,
                        out=out,
                        workers=workers,
                        progress=progress,
                        prepared=prep,
                        execution=execution,
                    )
                }
            else:
                results = run_power_managers(
                    prep, managers, out=out, workers=workers, progress=progress, execution=execution
                ).per_manager
    for pm, result in results.items():
        s = result.summary
        console.print(
            f"power manager {pm}: {s['runs']} runs in {s['wall_s']:.1f} s on {s['workers']} worker(s); "
            f"{LABEL} is a reconstruction"
        )
        for b in s["baselines"]:
            r = s["per_baseline"][b]
            how = ", ".join(f"{n} {k}" for k, n in sorted(Counter(r["statuses"]).items()))
            console.print(
                f"  vs {b}: mean JCT ratio {r['ratio']:.2f} ± {r['ratio_std']:.2f} at the baseline's energy "
                f"({how}); PowerFlow's equal-energy run {r['budget_error_pct']:+.1f} % off that energy"
            )
        console.print(
            "  energies over the window of each seed's baselines and no-budget run, which PowerFlow's budgets "
            "cover (docs/powerflow.md); within: the run landed within ±2 %; unused: PowerFlow cannot use that "
            "much, its no-budget JCT; interpolated: on its budget sweep"
        )
        console.print(f"results.csv, sweep.csv, runs.csv, summary.md and plots in [bold]{result.out}[/]")
    if len(results) > 1:
        console.print(f"headline per power manager: [bold]{out / 'summary.md'}[/] and headline.csv")


@experiment_app.command("eaco")
def eaco(
    nodes: Annotated[
        str, typer.Option(help="cluster sizes: 28 and/or 64 nodes of 8 V100, comma-separated")
    ] = "28,64",
    seeds: Annotated[int, typer.Option(help="runs per policy and size, seeds 42, 43, ...")] = 3,
    policies: Annotated[
        str,
        typer.Option(
            help="comma-separated: eaco, fifo, fifo-packed, gandiva; for reference fifo-spread, fifo-best-fit"
        ),
    ] = ("eaco,fifo,fifo-packed,gandiva"),
    workload: Annotated[str, typer.Option(help="workload name or CSV path")] = "gavel/msr/all",
    max_jobs: Annotated[
        int | None, typer.Option(help="keep the first N jobs by submission (0: all)", min=0)
    ] = 500,
    noise: Annotated[
        float, typer.Option(help="prediction noise: std. dev. of a shared job's true speed around the model")
    ] = 0.05,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("runs/eaco"),
    profiles: ProfilesOption = None,
    gpu_type: Annotated[
        str | None, typer.Option(help="GPU type of every node (e.g. H200) instead of the clusters' V100")
    ] = None,
    columns: ColumnsOption = None,
    workers: WorkersOption = None,
    backend: BackendOption = "process",
    address: AddressOption = None,
    fresh: FreshOption = False,
    data_dir: DataDirOption = None,
    quiet: QuietOption = False,
) -> None:
    """EaCO vs FIFO, FIFO_packed and Gandiva on 28 and 64 nodes of 8 V100: energy, active nodes, runtime, JCT."""
    from ..experiments.eaco import run_experiment
    from ..experiments.grid import parse_list

    with user_errors():
        execution = grid_execution(backend, address, fresh)
        sizes = parse_numbers(nodes, int, "--nodes", "28,64")
        names = parse_list(policies)
        with progress_bar("eaco", enabled=not quiet) as progress:
            result = run_experiment(
                nodes=sizes, seeds=seeds, policies=names, workload=workload, max_jobs=max_jobs or None,
                noise=noise, out=out, workers=workers, data_dir=data_dir, progress=progress,
                columns=column_mapping(columns), execution=execution, profiles=profiles, gpu_type=gpu_type,
            )  # fmt: skip
    s = result.summary
    console.print(f"{s['runs']} runs in {s['wall_s']:.1f} s on {s['workers']} worker(s)")
    for nodes_, rows in sorted(s["versus"].items()):
        for b, v in rows.items():
            console.print(
                f"  {nodes_} nodes, eaco vs {b}: energy {-v['energy_saving_pct']:+.1f} %, active nodes "
                f"{-v['fewer_nodes_pct']:+.1f} %, runtime {v['runtime_change_pct']:+.1f} %, JCT "
                f"{v['jct_change_pct']:+.1f} %"
            )
    console.print("  energy over the common window of each cluster size and seed (docs/energy.md)")
    console.print(f"results.csv, summary.md and plots in [bold]{result.out}[/]")


@experiment_app.command("cedla")
def cedla(
    region: Annotated[
        str | None, typer.Option(help="one region (default: US-CAL-CISO, US-NY-NYIS, US-MIDA-PJM and DE-LU)")
    ] = None,
    year: Annotated[int, typer.Option(help="price and carbon year")] = 2023,
    policies: Annotated[
        str,
        typer.Option(
            help="comma-separated: price-unaware-always-on, price-unaware-drs, price-unaware-drs-forecast, "
            "price-aware-no-drs, cedla"
        ),
    ] = "price-unaware-always-on,price-unaware-drs,price-unaware-drs-forecast,price-aware-no-drs,cedla",
    workload: Annotated[str, typer.Option(help="training workload name or CSV path")] = "philly",
    cluster: Annotated[str, typer.Option(help="cluster name or YAML path")] = "philly",
    deadline_slack: Annotated[
        float, typer.Option(help="training deadline = submit + slack x duration (reconstructed)")
    ] = 3.0,
    services: Annotated[
        str, typer.Option(help="inference services: 'default' or a rates CSV (hour, <service>...)")
    ] = "default",
    max_jobs: Annotated[
        int | None, typer.Option(help="keep the first N training jobs by submission (0: all)", min=0)
    ] = None,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("runs/cedla"),
    profiles: ProfilesOption = None,
    columns: ColumnsOption = None,
    price_csv: Annotated[
        str | None,
        typer.Option(
            help="your own market instead of --region: hourly prices (time, price_usd_per_mwh; or a GreenDCC "
            "standardized or processed price file, recognised by header)"
        ),
    ] = None,
    carbon_csv: Annotated[
        str | None,
        typer.Option(
            help="with --price-csv: hourly carbon intensity (time, carbon_g_per_kwh; or an Electricity Maps "
            "hourly file)"
        ),
    ] = None,
    signal_tz: Annotated[str, typer.Option(help="time zone of --price-csv / --carbon-csv")] = "UTC",
    signal_fill: Annotated[
        str | None,
        typer.Option(help="fill signal gaps longer than --signal-max-gap-hours: hold | interpolate"),
    ] = None,
    signal_max_gap_hours: Annotated[int, typer.Option(help="longest signal gap interpolated", min=0)] = 6,
    workers: WorkersOption = None,
    backend: BackendOption = "process",
    address: AddressOption = None,
    fresh: FreshOption = False,
    data_dir: DataDirOption = None,
    quiet: QuietOption = False,
) -> None:
    """CE-DLA-reconstructed vs price-unaware FIFO (always on, or with DRS) and the planner without DRS, per region."""
    from ..experiments.cedla import REGIONS, Signals, run_experiment
    from ..experiments.grid import parse_list

    with user_errors():
        execution = grid_execution(backend, address, fresh)
        names = parse_list(policies)
        with progress_bar("cedla", enabled=not quiet) as progress:
            result = run_experiment(
                regions=[region] if region else REGIONS, year=year, policies=names, workload=workload,
                cluster=cluster, deadline_slack=deadline_slack, services=services, max_jobs=max_jobs or None,
                out=out, workers=workers, data_dir=data_dir, progress=progress,
                signals=Signals(price_csv, carbon_csv, signal_tz, signal_fill, signal_max_gap_hours),
                columns=column_mapping(columns), execution=execution, profiles=profiles,
            )  # fmt: skip
    for reg, e in result.summary["per"].items():
        for p, r in e["policies"].items():
            console.print(
                f"  {reg:12s} {p:24s} ${r['cost_usd']:>10,.0f} ({-r['cost_saving_pct'] + 0.0:+.1f} %)  "
                f"{r['energy_kwh']:>10,.0f} kWh  misses {r['deadline_misses']}  "
                f"late service-hours {r['slo_violation_hours']}"
            )
    console.print("  cost, energy and carbon over the common window of each region's runs (docs/energy.md)")
    console.print(f"results.csv, summary.md and plots in [bold]{result.out}[/]")


@experiment_app.command("hkbu-dvfs")
def hkbu_dvfs(
    models: Annotated[
        str, typer.Option(help="comma-separated task models: 2070S, 1080Ti, tpds-synthetic")
    ] = "2070S,1080Ti,tpds-synthetic",
    modes: Annotated[str, typer.Option(help="comma-separated: offline, online")] = "offline,online",
    utilisations: Annotated[
        str, typer.Option(help="comma-separated task-set utilisations U (tasks per GPU)")
    ] = "0.2,0.4,0.6,0.8,1.0,1.2,1.4,1.6",
    seeds: Annotated[int, typer.Option(help="task sets per point, seeds 42, 43, ...")] = 3,
    gpus: Annotated[int, typer.Option(help="cluster GPUs: a set has U x GPUs tasks (upstream: 2048)")] = 512,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node (the paper: 16)")] = 16,
    theta: Annotated[
        float,
        typer.Option(help="t_theta = max(theta x t_hat, t_min); 1 never theta-adjusts (upstream scripts)"),
    ] = 0.0,
    trace: Annotated[
        str,
        typer.Option(help="DL trace for the simulator part ('none' to skip): hkbu-dvfs vs default clocks"),
    ] = "philly",
    trace_cluster: Annotated[
        str, typer.Option(help="cluster of the trace part (rewritten to each GPU type)")
    ] = ("philly"),
    trace_jobs: Annotated[int, typer.Option(help="first N jobs of the trace (0: all)", min=0)] = 5000,
    trace_gpus: Annotated[str, typer.Option(help="comma-separated GPU types for the trace part")] = (
        "P100,V100,A40,RTX6000"
    ),
    deadline_slack: Annotated[
        float, typer.Option(help="trace deadlines at submit + slack x duration (reconstructed)")
    ] = 3.0,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("runs/hkbu-dvfs"),
    columns: ColumnsOption = None,
    workers: WorkersOption = None,
    backend: BackendOption = "process",
    address: AddressOption = None,
    fresh: FreshOption = False,
    data_dir: DataDirOption = None,
    quiet: QuietOption = False,
) -> None:
    """HKBU-DVFS list scheduling (TPDS'22): energy vs U per combination, DVFS and DRS on/off, deadline satisfaction."""
    from ..experiments.grid import parse_list
    from ..experiments.hkbu_dvfs import TraceSetup, run_experiment, saving_lines

    with user_errors():
        execution = grid_execution(backend, address, fresh)
        us = parse_numbers(utilisations, float, "--utilisations", "0.2,0.4")
        with progress_bar("hkbu-dvfs", enabled=not quiet) as progress:
            result = run_experiment(
                out, models=parse_list(models), modes=parse_list(modes), utilisations=us, seeds=seeds, gpus=gpus,
                gpus_per_node=gpus_per_node, theta=theta, workers=workers, progress=progress,
                trace=None if trace == "none" else TraceSetup(
                    trace, trace_cluster, trace_jobs or None, deadline_slack, data_dir, column_mapping(columns)
                ),
                trace_gpus=parse_list(trace_gpus), execution=execution,
            )  # fmt: skip
    s = result.summary
    console.print(f"{s['task_sets']} task sets, {s['runs']} schedules in {s['wall_s']:.1f} s")
    for line in saving_lines(s):
        console.print(line)
    console.print(f"results.csv, savings.csv, summary.md, summary.json and plots in [bold]{result.out}[/]")


@experiment_app.command("hkbu-dag")
def hkbu_dag(
    placements: Annotated[
        str, typer.Option(help="comma-separated placement policies: ssf, sf, stf, blf, random")
    ] = "ssf,sf,stf,blf,random",
    picks: Annotated[
        str, typer.Option(help="comma-separated GPU picks: lwf (= lwf2), lwfN, lswf, lgwf, bp, random")
    ] = "lwf,lswf,lgwf,bp,random",
    comm_modes: Annotated[
        str, typer.Option(help="comma-separated comm admission: adadual, exclusive, unaware, thres-N")
    ] = "adadual,exclusive,unaware",
    seeds: Annotated[int, typer.Option(help="job sets per configuration, seeds 42, 43, ...")] = 3,
    generator: Annotated[
        str, typer.Option(help="job generator: microsoft (Philly-like) or random")
    ] = "microsoft",
    jobs: Annotated[int, typer.Option(help="jobs per job set (upstream: 160)", min=1)] = 160,
    nodes: Annotated[int, typer.Option(help="nodes (upstream: 16)", min=1)] = 16,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node (upstream: 4)", min=1)] = 4,
    power_model: Annotated[str, typer.Option(help="power model: linear, binary or dvfs")] = "linear",
    comm_load: Annotated[
        float, typer.Option(help="GPU load while a GPU only all-reduces (reconstructed)", min=0.0, max=1.0)
    ] = 0.2,
    gpu_mem_mb: Annotated[float, typer.Option(help="GPU memory in MB (upstream: 32768)", min=1.0)] = 32768.0,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("runs/hkbu-dag"),
    workers: WorkersOption = None,
    backend: BackendOption = "process",
    address: AddressOption = None,
    fresh: FreshOption = False,
    quiet: QuietOption = False,
) -> None:
    """HKBU ICDCS'20 DAG scheduling: AdaDUAL + SRSF vs contention-unaware comm, per placement and GPU pick."""
    from ..experiments.grid import parse_list
    from ..experiments.hkbu_dag import check_names, run_experiment

    with user_errors():
        execution = grid_execution(backend, address, fresh)
        names = check_names(parse_list(placements), parse_list(picks), parse_list(comm_modes))
        with progress_bar("hkbu-dag", enabled=not quiet) as progress:
            result = run_experiment(
                placements=names[0], picks=names[1], modes=names[2], seeds=seeds, generator=generator,
                num_jobs=jobs, nodes=nodes, gpus_per_node=gpus_per_node, power_model=power_model,
                comm_load=comm_load, gpu_mem_mb=gpu_mem_mb, out=out, workers=workers, progress=progress,
                execution=execution,
            )  # fmt: skip
    s = result.summary
    console.print(f"{s['runs']} runs in {s['wall_s']:.1f} s on {s['workers']} worker(s)")
    for mode, r in s["overall"].items():
        console.print(
            f"  {mode:10s} mean JCT {r['mean_jct_ms'] / 1000:.2f} s, p99 {r['p99_jct_ms'] / 1000:.2f} s, "
            f"makespan {r['makespan_ms'] / 1000:.2f} s, energy {r['energy_kj']:.0f} kJ"
        )
    w = s["adadual_wins"]
    console.print(
        f"  adadual beats unaware on mean JCT in {w['lower_mean_jct']} of {w['configs']} configurations"
    )
    console.print(f"results.csv, summary.json, summary.md and plots in [bold]{result.out}[/]")


@experiment_app.command("hkbu-online-pd")
def hkbu_online_pd(
    instances: Annotated[int, typer.Option(help="random small instances (seeds 0, 1, ...)", min=1)] = 120,
    order_searches: Annotated[
        int, typer.Option(help="adversarial arrival orders found by local search (one instance each)", min=0)
    ] = 20,
    eta: Annotated[float, typer.Option(help="price-function tuning parameter eta")] = 1.0,
    philly: Annotated[bool, typer.Option(help="also replay Philly against greedy first-fit and EDF")] = True,
    max_jobs: Annotated[
        int | None, typer.Option(help="Philly: keep the first N jobs by submission (0: all)", min=0)
    ] = None,
    deadline_slack: Annotated[
        float, typer.Option(help="Philly: deadline = submit + slack x duration (reconstructed)")
    ] = 3.0,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("runs/hkbu-online-pd"),
    workers: WorkersOption = None,
    backend: BackendOption = "process",
    address: AddressOption = None,
    fresh: FreshOption = False,
    data_dir: DataDirOption = None,
    quiet: QuietOption = False,
) -> None:
    """HKBU-OnlinePD-reconstructed: empirical competitive ratio vs the proven bound, and a Philly replay."""
    from ..experiments.hkbu_online_pd import LABEL, run_experiment

    with user_errors():
        execution = grid_execution(backend, address, fresh)
        with progress_bar("hkbu-online-pd", enabled=not quiet) as progress:
            result = run_experiment(
                out=out, random_count=instances, order_searches=order_searches, eta=eta, philly=philly,
                max_jobs=max_jobs or None, deadline_slack=deadline_slack, workers=workers, data_dir=data_dir,
                progress=progress, execution=execution,
            )  # fmt: skip
    s = result.summary
    w = s["worst_instance"]
    console.print(f"{LABEL} (a reconstruction): {s['instances']} small instances in {s['wall_s']:.1f} s")
    console.print(
        f"  proven competitive ratio bound {s['competitive_ratio_bound']:.3f} "
        f"(alpha {s['bound']['alpha']:.3f}, small-job limit {s['bound']['small_job_limit']:.3f})"
    )
    for kind, r in s["per_kind"].items():
        console.print(f"  {kind:12s} empirical ratio mean {r['ratio_mean']:.3f}, max {r['ratio_max']:.3f}")
    console.print(f"  worst instance {w['instance']} ({w['kind']}): {w['empirical_ratio']:.3f}")
    for r in s["philly"]["runs"]:
        console.print(
            f"  philly {r['policy']:16s} started {r['started']:>6}  on time {r['on_time']:>6}  "
            f"net ${r['net_value_usd']:>12,.0f}  energy {r['energy_kwh']:>10,.0f} kWh"
        )
    if s["philly"]["runs"]:
        console.print("  philly energy and net value over the common window of its runs (docs/energy.md)")
    console.print(f"ratios.csv, summary.json, summary.md and plots in [bold]{result.out}[/]")


# -- protocol experiments: one command each, generated from the experiment's config ---------------------------
def _protocol_command(name: str) -> None:
    import inspect

    from ..experiments.protocol import experiment as find_experiment
    from .options import command_with_config_options

    exp = find_experiment(name)

    def handler(overrides: dict, extra: dict) -> None:
        from pydantic import ValidationError

        from ..core.errors import WattschedError
        from ..experiments.protocol import run_experiment

        with user_errors():
            try:
                cfg = exp.config_model(**overrides)
            except ValidationError as exc:
                first = exc.errors()[0]
                field = ".".join(str(p) for p in first["loc"])
                raise WattschedError(f"--{field.replace('_', '-')}: {first['msg']}") from None
            execution = grid_execution(extra["backend"], extra["address"], extra["fresh"])
            with progress_bar(name, enabled=not extra["quiet"]) as progress:
                result = run_experiment(
                    exp, cfg, extra["out"], extra["workers"], execution, progress, plots=extra["plots"]
                )
        for line in exp.headline(cfg, result.records) if not result.records.empty else []:
            console.print(escape(line.replace("**", "")), highlight=False)
        console.print(
            f"{name}: {len(result.records)} runs in {result.wall_s:.1f} s on {result.workers} worker(s); "
            f"{', '.join(p.name for p in result.files)} in [bold]{escape(str(result.out))}[/]",
            highlight=False,
        )

    def option(param: str, annotation: object, default: object) -> inspect.Parameter:
        return inspect.Parameter(
            param, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
        )

    extra = [
        option("out", Annotated[Path, typer.Option(help="output directory")], Path(f"runs/{name}")),
        option("workers", WorkersOption, None),
        option("backend", BackendOption, "process"),
        option("address", AddressOption, None),
        option("fresh", FreshOption, False),
        option("quiet", QuietOption, False),
        option("plots", PlotsOption, True),
    ]
    command = command_with_config_options(exp.config_model, extra, handler, exp.description)
    experiment_app.command(name)(command)


def _register_protocol_commands() -> None:
    from ..experiments.protocol import experiment_names

    for name in experiment_names():
        _protocol_command(name)


_register_protocol_commands()
