"""The allocation log: an append-only record of what every job held, at what setting, and how fast it ran.

The engine appends one entry whenever anything about a job's allocation changes: it starts, stops, is resized or
migrated, finishes a restart, gets another GPU setting, or runs at another rate because its co-runners changed. An
entry holds until the job's next entry. Everything after the run (energy ledger, job table, allocation table) is
derived from this log, so a job may hold any number of placements over its life.

Entries are stored as rows of one flat float64 array (one C call per entry); integer fields are exact in float64.
"""

from __future__ import annotations

from array import array

import numpy as np
import pandas as pd

from ..core.placement import Placement
from ..core.settings import DEFAULT_SETTING, GpuSetting
from ..core.states import PHASE_NAMES

FIELDS = ("time_s", "job", "alloc", "load", "rate", "phase", "setting", "lost")
_WIDTH = len(FIELDS)
_INTEGER_FIELDS = ("job", "alloc", "phase", "setting")
NO_ALLOC = -1


def num_gpus(placement: Placement) -> int:
    return sum(len(g) for _, g, _, _ in placement)


class AllocationLog:
    def __init__(self) -> None:
        self._flat = array("d")
        # What each allocation holds, referenced by the `alloc` field: a placement and the milli-GPU taken on each
        # of its GPUs (two parallel columns rather than an object per allocation: 10^6 jobs).
        self.placements: list[Placement] = []
        self.shares = array("q")
        self.settings: list[GpuSetting] = [DEFAULT_SETTING]  # referenced by the `setting` field
        self._setting_ids: dict[GpuSetting, int] = {DEFAULT_SETTING: 0}

    def __len__(self) -> int:
        return len(self._flat) // _WIDTH

    def add_alloc(self, placement: Placement, share_milli: int) -> int:
        self.placements.append(placement)
        self.shares.append(share_milli)
        return len(self.placements) - 1

    def setting_id(self, setting: GpuSetting) -> int:
        sid = self._setting_ids.get(setting)
        if sid is None:
            sid = self._setting_ids[setting] = len(self.settings)
            self.settings.append(setting)
        return sid

    def append(
        self,
        time: float,
        job: int,
        alloc: int,
        load: float,
        rate: float,
        phase: int,
        setting: int,
        lost: float = 0.0,
    ) -> None:
        self._flat.extend((time, job, alloc, load, rate, phase, setting, lost))

    def columns(self) -> dict[str, np.ndarray]:
        """Each field as an array, in append (time) order; integer fields as int64."""
        data = np.frombuffer(self._flat, dtype=np.float64).reshape(-1, _WIDTH)
        out = {name: data[:, i] for i, name in enumerate(FIELDS)}
        for name in _INTEGER_FIELDS:
            out[name] = out[name].astype(np.int64)
        return out

    def intervals(self, t_end: float, fields: tuple[str, ...] = FIELDS) -> dict[str, np.ndarray]:
        """One row per entry that holds an allocation, with the time it ends (the job's next entry, or
        `t_end`), ordered by job and then time (the order the ledger's sums were defined in). Only `fields`
        (and ``end_s``) are returned: at 10^6 jobs every extra column costs tens of MB."""
        data = np.frombuffer(self._flat, dtype=np.float64).reshape(-1, _WIDTH)
        job_all = data[:, 1].astype(np.int64)
        order = np.argsort(job_all, kind="stable")  # entries are appended in time order
        job = job_all[order]
        del job_all
        t0 = data[order, 0]
        same_job_next = np.r_[job[1:] == job[:-1], False]
        t1 = np.where(same_job_next, np.r_[t0[1:], 0.0], t_end)
        del same_job_next
        held = data[order, 2] != NO_ALLOC
        pick = order[held]
        rows = {}
        for name in fields:
            column = data[pick, FIELDS.index(name)]
            rows[name] = column.astype(np.int64) if name in _INTEGER_FIELDS else column
        rows["end_s"] = t1[held]
        return rows

    def last_placements(self, num_jobs: int) -> list[Placement | None]:
        """The last placement each job held (None if it never ran)."""
        cols = self.columns()
        held = np.flatnonzero(cols["alloc"] != NO_ALLOC)[::-1]  # newest first
        jobs, first = np.unique(cols["job"][held], return_index=True)
        last = np.full(num_jobs, NO_ALLOC, dtype=np.int64)
        last[jobs] = cols["alloc"][held][first]
        return [self.placements[a] if a != NO_ALLOC else None for a in last.tolist()]

    def job_stats(self, num_jobs: int, t_end: float) -> dict[str, np.ndarray]:
        """Per job, over the time it held GPUs: time-weighted mean GPU count, SM-clock and power-limit
        fractions, and the sequence of distinct GPU counts it held (e.g. "2>4>2")."""
        rows = self.intervals(t_end, fields=("time_s", "job", "alloc", "setting"))
        dt = rows["end_s"] - rows["time_s"]
        job = rows["job"]
        gpus_of_alloc = np.array([num_gpus(p) for p in self.placements] or [0], dtype=np.int64)
        gpus = gpus_of_alloc[rows["alloc"]]
        clock, limit = self.setting_fractions()
        held = np.bincount(job, weights=dt, minlength=num_jobs)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = {
                "mean_num_gpu": np.bincount(job, weights=gpus * dt, minlength=num_jobs) / held,
                "mean_sm_clock_frac": np.bincount(
                    job, weights=clock[rows["setting"]] * dt, minlength=num_jobs
                )
                / held,
                "mean_power_limit_frac": np.bincount(
                    job, weights=limit[rows["setting"]] * dt, minlength=num_jobs
                )
                / held,
            }
        counts = np.full(num_jobs, "", dtype=object)
        entries = np.bincount(job, minlength=num_jobs)
        first = np.searchsorted(job, np.arange(num_jobs))  # rows are sorted by job
        single = entries == 1
        counts[single] = gpus[first[single]].astype(str)
        for j in np.flatnonzero(entries > 1).tolist():
            seq = gpus[first[j] : first[j] + entries[j]].tolist()
            counts[j] = ">".join(str(c) for i, c in enumerate(seq) if i == 0 or c != seq[i - 1])
        mean["gpu_counts"] = counts
        return mean

    def setting_fractions(self) -> tuple[np.ndarray, np.ndarray]:
        """Per setting id: (SM-clock fraction, power-limit fraction), 1.0 where the setting leaves it at max."""
        clock = np.array([s.sm_clock_fraction or 1.0 for s in self.settings])
        limit = np.array([s.power_limit_fraction or 1.0 for s in self.settings])
        return clock, limit

    def frame(self, node_names: np.ndarray, job_ids: np.ndarray) -> pd.DataFrame:
        """The log as a table for the run directory: one row per change."""
        cols = self.columns()
        names = node_names.tolist()
        alloc_text = [
            ";".join(f"{names[n]}:{','.join(map(str, g))}" if g else names[n] for n, g, _, _ in p)
            for p in self.placements
        ]
        alloc = cols["alloc"]
        held = alloc >= 0
        safe = np.where(held, alloc, 0)
        gpus = np.array([num_gpus(p) for p in self.placements] or [0], dtype=np.int64)
        shares = np.frombuffer(self.shares, dtype=np.int64) if len(self.shares) else np.zeros(1, np.int64)
        clock, limit = self.setting_fractions()
        return pd.DataFrame(
            {
                "time_s": cols["time_s"],
                "job_id": np.asarray(job_ids, dtype=object)[cols["job"]].astype(str),
                "phase": np.asarray(PHASE_NAMES, dtype=object)[cols["phase"]].astype(str),
                "num_gpu": np.where(held, gpus[safe], 0),
                "share_milli": np.where(held, shares[safe], 0),
                "placement": np.array(
                    [alloc_text[a] if a >= 0 else "" for a in alloc.tolist()], dtype=object
                ),
                "sm_clock_frac": clock[cols["setting"]],
                "power_limit_frac": limit[cols["setting"]],
                "rate": cols["rate"],
                "gpu_load": cols["load"],
                "work_lost": cols["lost"],
            }
        )
