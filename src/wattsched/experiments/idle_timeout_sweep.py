"""The idle-timeout sweep: how long should a node stay idle before it is switched off?

Dynamic right-sizing (``--power-manager idle-timeout``, docs/energy.md) switches a node off once it has been idle
for the timeout and boots it when waiting work needs it. A short timeout saves idle power and costs boots (jobs
wait for them); a long one keeps nodes on for work that may come. The sweep runs one workload on one cluster with
every node always on (the baseline) and under each timeout, all else equal, and charges every run over one common
accounting window, so the energies are comparable.

The whole experiment is this module: a config, the grid and a headline; the protocol (``experiments/protocol.py``)
supplies the command, the executor, resuming, the accounting window, ``records.csv`` and ``summary.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from .config import SimulationConfig, same_setting
from .protocol import EXPERIMENTS, Cell, Experiment, Outcome


class IdleTimeoutSweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workload: str = Field("synthetic", description="workload name (see `wattsched workloads`) or CSV path")
    cluster: str = Field("default", description="cluster name (see `wattsched clusters`) or YAML path")
    timeouts_s: list[float] = Field(
        default_factory=lambda: [60.0, 300.0, 900.0, 1800.0, 3600.0],
        description="idle timeouts to sweep (s), comma-separated",
    )
    max_jobs: int | None = Field(None, ge=1, description="keep only the first N jobs by submission time")
    region: str | None = Field(None, description="grid region for cost and carbon, e.g. US-CAL-CISO")
    boot_time_s: float = Field(300.0, ge=0, description="off -> on (the power manager's boot delay)")
    seed: int = Field(42, description="random seed")
    data_dir: str | None = same_setting("data_dir")


@EXPERIMENTS.register("idle-timeout-sweep")
class IdleTimeoutSweep(Experiment):
    name = "idle-timeout-sweep"
    description = (
        "Energy and JCT of dynamic right-sizing (idle-timeout) over a range of timeouts, against every node "
        "always on; one workload, one cluster, one common accounting window."
    )
    config_model = IdleTimeoutSweepConfig

    def grid(self, cfg: BaseModel) -> list[Cell]:
        assert isinstance(cfg, IdleTimeoutSweepConfig)
        base = {
            "workload": cfg.workload, "cluster": cfg.cluster, "max_jobs": cfg.max_jobs, "region": cfg.region,
            "seed": cfg.seed, "data_dir": cfg.data_dir, "energy": True,
        }  # fmt: skip
        cells = [Cell({"idle_timeout_s": math.inf}, SimulationConfig(**base, power_manager="always-on"))]
        for timeout in sorted(set(cfg.timeouts_s)):
            states = {"idle_timeout_s": timeout, "boot_time_s": cfg.boot_time_s}
            config = SimulationConfig(**base, power_manager="idle-timeout", power_states=states)
            cells.append(Cell({"idle_timeout_s": timeout}, config))
        return cells

    def headline(self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome]) -> list[str]:
        swept_mask = records["policy"].str.contains("idle-timeout")
        base, swept = records[~swept_mask], records[swept_mask]
        if base.empty or swept.empty:
            return []
        b = base.iloc[0]
        best = swept.loc[swept["energy_kwh"].idxmin()]
        change = 100 * (best["energy_kwh"] / b["energy_kwh"] - 1)
        jct = 100 * (best["jct_mean_s"] / b["jct_mean_s"] - 1)
        return [
            f"**Least energy at a {best['idle_timeout_s']:g} s timeout**: {best['energy_kwh']:,.1f} kWh, "
            f"{change:+.1f} % against every node always on ({b['energy_kwh']:,.1f} kWh); mean JCT {jct:+.1f} %."
        ]

    def plots(
        self, cfg: BaseModel, records: pd.DataFrame, outcomes: Sequence[Outcome], out: Path
    ) -> list[Path]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from .grid import save_figure

        fig, ax = plt.subplots(figsize=(6, 4))
        for row in records.to_dict("records"):
            label = "always on" if math.isinf(row["idle_timeout_s"]) else f"{row['idle_timeout_s']:g} s"
            ax.scatter(
                row["jct_mean_s"] / 3600, row["energy_kwh"], color="C0" if "idle" in row["policy"] else "C3"
            )
            ax.annotate(label, (row["jct_mean_s"] / 3600, row["energy_kwh"]), fontsize=8, xytext=(4, 2),
                        textcoords="offset points")  # fmt: skip
        ax.set_xlabel("mean JCT (h)")
        ax.set_ylabel("energy over the common window (kWh)")
        ax.set_title("idle-timeout sweep")
        path = out / "energy_vs_jct.png"
        save_figure(fig, path)
        plt.close(fig)
        return [path]
