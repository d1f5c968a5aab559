"""The `hkbu-dag` experiment: contention-aware comm scheduling of DAG jobs against the same placements without it.

The HKBU ICDCS'20 scheduler (Wang, Shi, Wang, Chu; simulator `HKBU-HPML/dl-scheduling`, docs/hkbu-dag.md) runs
every job as per-iteration DAGs on the simulator of `policies/hkbu_dag.py` (the experiment's own simulator: each
cell is a task of its own, carried out by :meth:`HkbuDag.run_cell`). Each run fixes a placement policy (`ssf`,
`sf`, `stf`, `blf`, `random`), a GPU pick (`lwf`, `lswf`, `lgwf`, `bp`, `random`) and a comm admission mode:
`adadual` (AdaDUAL, threshold 1, SRSF order: the contention-aware scheduler), `exclusive` (threshold 0, one comm
task per node) or `unaware` (every comm task starts at once: no contention awareness). Tasks run in SRSF order in
all of them. Every (placement, pick, mode) sees the same job sets (one per seed, the `microsoft_generate`
reconstruction). The simulator has no power tail, so no common window applies.

Outputs in DIR: ``records.csv`` (the shared run records), ``results.csv`` (one row per run, the simulator's own
figures in ms and kJ), ``summary.json`` (the means per configuration and the AdaDUAL-vs-unaware changes),
``summary.md``, ``config.yaml`` and the plots ``jct_cdf.png`` and ``policies.png``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ..core.atomic import write_json
from ..core.errors import UnknownNameError, WattschedError
from ..policies.hkbu_dag import (
    DEFAULT_COMM_LOAD,
    DagCluster,
    check_placement,
    comm_policy,
    parse_gpu_pick,
    simulate_dag,
)
from ..workloads.hkbu_dag import GENERATORS, UPSTREAM_JOBS, generate
from .grid import machine_description, save_figure, write_results
from .parallel import FIRST_SEED
from .protocol import EXPERIMENTS, Cell, Experiment, Outcome, Section

AWARE = "adadual"
UNAWARE = "unaware"
DEFAULT_PLACEMENTS = ("ssf", "sf", "stf", "blf", "random")
DEFAULT_PICKS = ("lwf", "lswf", "lgwf", "bp", "random")
DEFAULT_MODES = ("adadual", "exclusive", "unaware")
CDF_REFERENCE = ("ssf", "lwf")  # the placement and pick whose JCT distribution is plotted per mode
ALLOCATION = "hkbu-dag"  # the registered allocation policy of these rules (for the reconstruction mark)
# The upstream repository's README is one line ("# dl_scheduling") and its docs state no result; the paper text was
# not read (docs/hkbu-dag.md §7). Nothing to print beside the measured figures.
PUBLISHED_CLAIMS: dict[str, str] = {}


class HkbuDagConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    placements: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PLACEMENTS),
        description="comma-separated placement policies: ssf, sf, stf, blf, random",
    )
    picks: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PICKS),
        description="comma-separated GPU picks: lwf (= lwf2), lwfN, lswf, lgwf, bp, random",
    )
    comm_modes: list[str] = Field(
        default_factory=lambda: list(DEFAULT_MODES),
        description="comma-separated comm admission: adadual, exclusive, unaware, thres-N",
    )
    seeds: int = Field(3, description="job sets per configuration, seeds 42, 43, ...")
    generator: str = Field("microsoft", description="job generator: microsoft (Philly-like) or random")
    jobs: int = Field(UPSTREAM_JOBS, ge=1, description="jobs per job set (upstream: 160)")
    nodes: int = Field(16, ge=1, description="nodes (upstream: 16)")
    gpus_per_node: int = Field(4, ge=1, description="GPUs per node (upstream: 4)")
    power_model: str = Field("linear", description="power model: linear, binary or dvfs")
    comm_load: float = Field(
        DEFAULT_COMM_LOAD, ge=0.0, le=1.0, description="GPU load while a GPU only all-reduces (reconstructed)"
    )
    gpu_mem_mb: float = Field(32768.0, ge=1.0, description="GPU memory in MB (upstream: 32768)")


@dataclass(frozen=True)
class Setup:
    """What every run shares (picklable)."""

    generator: str = "microsoft"
    num_jobs: int = UPSTREAM_JOBS
    nodes: int = 16
    gpus_per_node: int = 4
    power_model: str = "linear"
    comm_load: float = DEFAULT_COMM_LOAD
    gpu_mem_mb: float = 32768.0

    @property
    def cluster(self) -> DagCluster:
        return DagCluster(num_nodes=self.nodes, gpus_per_node=self.gpus_per_node, gpu_mem_mb=self.gpu_mem_mb)

    def jobs(self, seed: int):
        return generate(self.generator, self.num_jobs, seed, max_workers=self.cluster.num_gpus)

    @classmethod
    def of(cls, cfg: HkbuDagConfig) -> Setup:
        return cls(cfg.generator, cfg.jobs, cfg.nodes, cfg.gpus_per_node, cfg.power_model, cfg.comm_load,
                   cfg.gpu_mem_mb)  # fmt: skip


@dataclass
class RunRecord:
    placement: str
    gpu_pick: str
    comm: str
    seed: int
    mean_jct_ms: float
    p50_jct_ms: float
    p99_jct_ms: float
    makespan_ms: float
    energy_kj: float
    gpu_energy_kj: float
    mean_queue_ms: float
    comm_tasks: int
    mean_comm_ms: float
    max_comm_per_node: int
    gpu_compute_share: float  # GPU time computing / (GPUs x makespan)
    wall_s: float
    jct_ms: list[float] = field(default_factory=list, repr=False)


def run_task(setup: Setup, placement: str, gpu_pick: str, comm: str, seed: int) -> RunRecord:
    started = time.perf_counter()
    jobs = setup.jobs(seed)
    try:
        r = simulate_dag(
            jobs,
            setup.cluster,
            placement=placement,
            gpu_pick=gpu_pick,
            comm=comm,
            seed=seed,
            power_model=setup.power_model,
            comm_load=setup.comm_load,
        )
    except WattschedError as exc:  # name the run; a plain message pickles across processes
        raise WattschedError(f"{placement}/{gpu_pick}/{comm}, seed {seed}: {exc}") from None
    jct = r.jct_ms
    gpus = setup.cluster.num_gpus
    return RunRecord(
        placement=placement,
        gpu_pick=gpu_pick,
        comm=comm,
        seed=seed,
        mean_jct_ms=float(jct.mean()),
        p50_jct_ms=float(np.percentile(jct, 50)),
        p99_jct_ms=float(np.percentile(jct, 99)),
        makespan_ms=r.makespan_ms,
        energy_kj=r.energy_j / 1e3,
        gpu_energy_kj=r.gpu_energy_j / 1e3,
        mean_queue_ms=float((r.placed_ms - r.arrival_ms).mean()),
        comm_tasks=r.comm_tasks,
        mean_comm_ms=r.comm_ms_total / r.comm_tasks if r.comm_tasks else 0.0,
        max_comm_per_node=int(r.max_comm_per_node.max()) if r.max_comm_per_node.size else 0,
        gpu_compute_share=r.gpu_compute_ms / (gpus * r.makespan_ms) if r.makespan_ms > 0 else 0.0,
        wall_s=time.perf_counter() - started,
        jct_ms=jct.tolist(),
    )


def check_names(
    placements: Sequence[str], picks: Sequence[str], modes: Sequence[str]
) -> tuple[list, list, list]:
    """Validated, de-duplicated lists; the comparison needs both `adadual` and `unaware`."""
    for p in placements:
        check_placement(p)
    for g in picks:
        parse_gpu_pick(g)
    for m in modes:
        comm_policy(m)
    if not placements or not picks:
        raise WattschedError("--placements and --picks need at least one name each")
    if AWARE not in modes or UNAWARE not in modes:
        raise WattschedError(
            f"--comm-modes must include {AWARE} and {UNAWARE} (the experiment compares them)"
        )
    return list(dict.fromkeys(placements)), list(dict.fromkeys(picks)), list(dict.fromkeys(modes))


def _bases() -> list[str]:
    from .compare import (
        reconstruction_bases,
    )  # the mark compare gave this experiment's runs before the protocol

    return reconstruction_bases({"allocation": ALLOCATION})


@EXPERIMENTS.register("hkbu-dag")
class HkbuDag(Experiment):
    name = "hkbu-dag"
    description = (
        "HKBU ICDCS'20 DAG scheduling: AdaDUAL + SRSF against contention-unaware comm, per placement and GPU "
        "pick, on wattsched's event-driven reimplementation of `HKBU-HPML/dl-scheduling` (`online/`)."
    )
    config_model = HkbuDagConfig

    def grid(self, cfg: BaseModel) -> list[Cell]:
        """Every placement x GPU pick x comm mode x seed; checked first, as the hand-written command did."""
        from ..energy.power_models import POWER_MODELS

        assert isinstance(cfg, HkbuDagConfig)
        placements, picks, modes = check_names(cfg.placements, cfg.picks, cfg.comm_modes)
        if cfg.seeds < 1:
            raise WattschedError(f"--seeds must be at least 1, got {cfg.seeds}")
        if cfg.generator not in GENERATORS:
            raise UnknownNameError("DAG job generator", cfg.generator, GENERATORS)
        if cfg.power_model not in POWER_MODELS.names():
            raise UnknownNameError("power model", cfg.power_model, POWER_MODELS.names())
        setup = Setup.of(cfg)
        setup.jobs(FIRST_SEED)  # fail early on a bad job count or cluster
        simulate_dag(setup.jobs(FIRST_SEED), setup.cluster, comm_load=cfg.comm_load, power_model=cfg.power_model,
                     placement=placements[0], gpu_pick=picks[0], comm=modes[0])  # fmt: skip
        seeds = range(FIRST_SEED, FIRST_SEED + cfg.seeds)
        return [
            Cell({"placement": p, "gpu_pick": g, "comm": m, "seed": s}, task=(setup, p, g, m, s))
            for p in placements
            for g in picks
            for m in modes
            for s in seeds
        ]

    def run_cell(self, cell: Cell) -> Outcome:
        r = run_task(*cell.task)
        metrics = {
            "energy_kwh": r.energy_kj / 3600,
            "jct_mean_s": r.mean_jct_ms * 1e-3,
            "queue_delay_mean_s": r.mean_queue_ms * 1e-3,
            "makespan_s": r.makespan_ms * 1e-3,
        }
        # to the millisecond, as the simulator's times are meant (the summary's table shows these as they are)
        extra = {"p99_jct_s": round(r.p99_jct_ms * 1e-3, 3), "max_comm_per_node": r.max_comm_per_node}
        return Outcome(metrics, f"{r.placement}+{r.gpu_pick} {r.comm}", _bases(), extra, raw=r)

    def tables(
        self, cfg: BaseModel, cells: Sequence[Cell], outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        records = [o.raw for o in outcomes]
        results = results_frame(records)
        write_results(out, results)
        write_json(out / "summary.json", summarise(_setup(cfg), records, results))
        return [out / "results.csv", out / "summary.json"]

    def headline(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[str]:
        configs = records.groupby(["placement", "gpu_pick", "comm"], sort=False)["jct_mean_s"].mean()
        per = configs.unstack("comm")
        wins = int((per[AWARE] < per[UNAWARE]).sum())
        lines = [
            f"**AdaDUAL beats `{UNAWARE}` on mean JCT in {wins} of {len(per)} placement x GPU-pick "
            "configurations** (seed means). Means over every placement x GPU pick x seed:"
        ]
        for mode, g in records.groupby("comm", sort=False):
            lines.append(
                f"- `{mode}`: mean JCT {g['jct_mean_s'].mean():.2f} s, p99 {g['p99_jct_s'].mean():.2f} s, "
                f"makespan {g['makespan_s'].mean():.2f} s, energy {g['energy_kwh'].mean() * 3600:.0f} kJ"
            )
        return lines

    def sections(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[Section]:
        runs = [o.raw for o in outcomes]
        return summary_sections(summarise(_setup(cfg), runs, results_frame(runs)))

    def plots(
        self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        runs = [o.raw for o in outcomes]
        return write_plots(out, runs, summarise(_setup(cfg), runs, results_frame(runs)))


def _setup(cfg: BaseModel) -> Setup:
    assert isinstance(cfg, HkbuDagConfig)
    return Setup.of(cfg)


def results_frame(records: list[RunRecord]) -> pd.DataFrame:
    rows = [{k: v for k, v in asdict(r).items() if k != "jct_ms"} for r in records]
    df = pd.DataFrame(rows)
    return df.sort_values(["placement", "gpu_pick", "comm", "seed"], kind="stable").reset_index(drop=True)


METRICS = ("mean_jct_ms", "p50_jct_ms", "p99_jct_ms", "makespan_ms", "energy_kj", "gpu_energy_kj",
           "mean_comm_ms", "max_comm_per_node")  # fmt: skip


def _std(vals: np.ndarray) -> float | None:
    return float(vals.std(ddof=1)) if vals.size > 1 else None


def _pct(new: float, old: float) -> float:
    return 100.0 * (new / old - 1.0) if old else 0.0


def summarise(setup: Setup, records: Sequence[RunRecord], results: pd.DataFrame) -> dict:
    """Means (and sample std) per configuration, AdaDUAL against unaware per placement and pick, every mode pooled."""
    per: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for (p, g, m), grp in results.groupby(["placement", "gpu_pick", "comm"], sort=False):
        row: dict[str, Any] = {}
        for metric in METRICS:
            vals = grp[metric].to_numpy(dtype=float)
            row[metric] = float(vals.mean())
            row[metric + "_std"] = _std(vals)
        per.setdefault(str(p), {}).setdefault(str(g), {})[str(m)] = row
    versus: dict[str, dict[str, dict[str, float]]] = {}
    for p, picks in per.items():
        for g, modes in picks.items():
            a, u = modes[AWARE], modes[UNAWARE]
            versus.setdefault(p, {})[g] = {
                "mean_jct_change_pct": _pct(a["mean_jct_ms"], u["mean_jct_ms"]),
                "p99_jct_change_pct": _pct(a["p99_jct_ms"], u["p99_jct_ms"]),
                "makespan_change_pct": _pct(a["makespan_ms"], u["makespan_ms"]),
                "energy_change_pct": _pct(a["energy_kj"], u["energy_kj"]),
            }
    # Headline: every mode pooled over placements and picks (mean of the per-configuration means).
    overall: dict[str, dict[str, float]] = {}
    for m, grp in results.groupby("comm", sort=False):
        overall[str(m)] = {
            k: float(grp[k].mean()) for k in ("mean_jct_ms", "p99_jct_ms", "makespan_ms", "energy_kj")
        }
    changes = [v["mean_jct_change_pct"] for rows in versus.values() for v in rows.values()]
    wins = sum(c < 0 for c in changes)
    return {
        "setup": asdict(setup),
        "cluster": f"{setup.nodes} nodes x {setup.gpus_per_node} GPUs (V100, {setup.gpu_mem_mb:,.0f} MB)",
        "seeds": sorted({int(r.seed) for r in records}),
        "per": per,
        "versus": versus,
        "overall": overall,
        "adadual_wins": {"configs": len(changes), "lower_mean_jct": wins},
        "published_claims": PUBLISHED_CLAIMS or None,
        "runs": len(records),
        "summed_run_s": float(sum(r.wall_s for r in records)),
        "machine": machine_description(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _s(ms: float) -> str:
    return f"{ms / 1000:.2f}"


def _pm(r: dict[str, Any], key: str, fmt) -> str:
    sd = r[key + "_std"]
    return fmt(r[key]) + ("" if sd is None else f" ± {fmt(sd)}")


def summary_sections(s: dict[str, Any]) -> list[Section]:
    """The parts of summary.md of this experiment's own: its setup, AdaDUAL against unaware per configuration, the
    seed means with their spread, and what differs from upstream (the shared runs table lists every run)."""
    setup = s["setup"]
    modes = list(next(iter(next(iter(s["per"].values())).values())))
    versus = pd.DataFrame(
        [
            {
                "placement": p, "GPU pick": g,
                "mean JCT adadual (s)": _s(s["per"][p][g][AWARE]["mean_jct_ms"]),
                "mean JCT unaware (s)": _s(s["per"][p][g][UNAWARE]["mean_jct_ms"]),
                "mean JCT": f"**{v['mean_jct_change_pct']:+.1f} %**", "p99 JCT": f"{v['p99_jct_change_pct']:+.1f} %",
                "makespan": f"{v['makespan_change_pct']:+.1f} %", "energy": f"{v['energy_change_pct']:+.1f} %",
            }
            for p, rows in s["versus"].items()
            for g, v in rows.items()
        ]
    )  # fmt: skip
    every = pd.DataFrame(
        [
            {
                "placement": p, "GPU pick": g, "comm": m,
                "mean JCT (s)": _pm(r, "mean_jct_ms", _s), "p50 JCT (s)": _s(r["p50_jct_ms"]),
                "p99 JCT (s)": _s(r["p99_jct_ms"]), "makespan (s)": _s(r["makespan_ms"]),
                "energy (kJ)": _pm(r, "energy_kj", lambda x: f"{x:.0f}"),
                "mean comm task (ms)": f"{r['mean_comm_ms']:.0f}",
                "most comm tasks on a node": f"{r['max_comm_per_node']:.0f}",
            }
            for p, picks in s["per"].items()
            for g, by_mode in picks.items()
            for m in modes
            for r in (by_mode[m],)
        ]
    )  # fmt: skip
    return [
        Section(
            "Setup",
            [
                "Per-iteration DAG jobs; comm speed 1/((k-1)·0.235 + 0.856·k) MB/ms with k comm tasks on the "
                "busiest node of the job, recomputed whenever k changes (docs/hkbu-dag.md §3).",
                "",
                f"- Jobs: `{setup['generator']}` generator, {setup['num_jobs']} jobs per seed (seeds "
                f"{', '.join(map(str, s['seeds']))}); the same job set for every configuration of a seed.",
                f"- Cluster: {s['cluster']}. Energy: power model `{setup['power_model']}`, GPU busy at the job's "
                f"utilisation during forward/backward, at load {setup['comm_load']:g} while only all-reducing, "
                "idle otherwise; nodes add base + idle CPU for the makespan (reconstructed, docs/hkbu-dag.md §5). "
                "No power tail: each run is charged up to its own makespan.",
                "- Comm modes: `adadual` = AdaDUAL (threshold 1) in SRSF order, the contention-aware scheduler; "
                "`exclusive` = threshold 0 (one comm task per node at a time); `unaware` = every comm task starts "
                "at once. Compute tasks run SRSF in every mode.",
                f"- {s['runs']} runs, {s['summed_run_s']:.1f} s summed over runs; machine: {s['machine']}.",
            ],
        ),
        Section(
            "AdaDUAL vs unaware, per placement and GPU pick (change of the seed means)",
            [
                "A placement policy only orders the jobs waiting for GPU memory; with the upstream 32 GB GPUs (up "
                "to seven workers each) nearly every job is placed on arrival, so the placement policies give "
                "(nearly) the same runs and the GPU pick decides. `--gpu-mem-mb` makes memory scarce."
            ],
            versus,
        ),
        Section("Every configuration (means over seeds ± sample std)", table=every),
        Section(
            "Published figures",
            [
                "None available: the upstream README is a single title line and the repository states no "
                "results; the ICDCS'20 paper text was not read, so no paper figure is quoted beside these "
                "(docs/hkbu-dag.md §7)."
            ],
        ),
        Section(
            "What differs from the upstream simulator",
            [
                "- Continuous time instead of 1 ms ticks; a solo comm task runs at 1/β from its start (upstream "
                "sets 1.28 MB/ms and overwrites it with 1/β in the same tick).",
                "- `lswf` and `lgwf` are reconstructed (named in upstream scripts, defined nowhere); `lwf` is "
                "`lwf2`.",
                "- Energy is wattsched's addition (upstream models none).",
            ],
        ),
    ]


def write_plots(out: Path, records: Sequence[RunRecord], s: dict[str, Any]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(dict.fromkeys(r.comm for r in records))
    colour = {m: c for m, c in zip(modes, ("tab:red", "tab:green", "tab:blue", "tab:orange", "tab:purple"),
                                   strict=False)}  # fmt: skip
    # 1. JCT CDF of the reference configuration (or the first one run), seeds pooled.
    placements = list(s["per"])
    ref_p = CDF_REFERENCE[0] if CDF_REFERENCE[0] in s["per"] else placements[0]
    ref_g = CDF_REFERENCE[1] if CDF_REFERENCE[1] in s["per"][ref_p] else next(iter(s["per"][ref_p]))
    fig, ax = plt.subplots(figsize=(6, 4))
    for m in modes:
        jct = np.sort(
            np.concatenate(
                [r.jct_ms for r in records if (r.placement, r.gpu_pick, r.comm) == (ref_p, ref_g, m)]
            )
        )
        ax.plot(jct / 1000, np.arange(1, jct.size + 1) / jct.size, color=colour[m], label=m)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"JCT CDF, placement {ref_p}, GPU pick {ref_g}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out / "jct_cdf.png")
    # 2. Mean JCT and energy per placement x pick, one bar per comm mode.
    configs = [(p, g) for p in s["per"] for g in s["per"][p]]
    fig, axes = plt.subplots(
        2, 1, figsize=(min(18, max(8, 0.22 * len(configs) * len(modes))), 7), sharex=True
    )
    width = 0.8 / len(modes)
    x = np.arange(len(configs))
    for ax, (metric, label, scale) in zip(axes, (("mean_jct_ms", "mean JCT (s)", 1000.0),
                                                 ("energy_kj", "energy (kJ)", 1.0)), strict=True):  # fmt: skip
        for i, m in enumerate(modes):
            vals = [s["per"][p][g][m][metric] / scale for p, g in configs]
            errs = [(s["per"][p][g][m][metric + "_std"] or 0.0) / scale for p, g in configs]
            ax.bar(x + (i - (len(modes) - 1) / 2) * width, vals, width, yerr=errs, color=colour[m], label=m,
                   capsize=2)  # fmt: skip
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[1].set_xticks(x, [f"{p}\n{g}" for p, g in configs], fontsize=7)
    fig.tight_layout()
    save_figure(fig, out / "policies.png")
    return [out / "jct_cdf.png", out / "policies.png"]
