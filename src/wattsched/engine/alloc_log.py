"""The allocation log: an append-only record of what every job held, at what setting, and how fast it ran.

The engine appends one entry whenever anything about a job's allocation changes: it starts, stops, is resized or
migrated, finishes a restart, gets another GPU setting, or runs at another rate because its co-runners changed. An
entry holds until the job's next entry. Everything after the run (energy ledger, job table, allocation table) is
derived from this log, so a job may hold any number of placements over its life.

Entries are stored as rows of one flat float64 array (one C call per entry); integer fields are exact in float64.
The placements are kept both as the tuples policies return and, for the sums after the run, as columns
(:class:`PlacementColumns`), built from the tuples once or given by the compiled loop.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, overload

import numpy as np

from ..core.placement import NodeShare, Placement
from ..core.settings import DEFAULT_SETTING, GpuSetting
from ..core.states import PHASE_NAMES

if TYPE_CHECKING:  # pandas only where a table is made: not on a run's start path
    import pandas as pd

FIELDS = ("time_s", "job", "alloc", "load", "rate", "phase", "setting", "lost")
_WIDTH = len(FIELDS)
_INTEGER_FIELDS = ("job", "alloc", "phase", "setting")
NO_ALLOC = -1


def num_gpus(placement: Placement) -> int:
    return sum(len(g) for _, g, _, _ in placement)


def ragged_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The ranges ``[starts[i], starts[i] + counts[i])`` one after another, as one index array."""
    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(int(counts.sum()), dtype=np.int64)


@dataclass(frozen=True)
class PlacementColumns:
    """Every allocation's placement as arrays: allocation a holds shares ``share_start[a]:share_start[a + 1]``
    (node, milli-CPU), share s the GPU slots ``gpu_slot[gpu_start[s]:gpu_start[s + 1]]``."""

    share_start: np.ndarray  # int64 [A + 1]
    share_node: np.ndarray  # int64 [S]
    share_cpu: np.ndarray  # int64 [S]
    gpu_start: np.ndarray  # int64 [S + 1]
    gpu_slot: np.ndarray  # int64 [G]

    def gpus_per_alloc(self) -> np.ndarray:
        per_alloc: np.ndarray = self.gpu_start[self.share_start[1:]] - self.gpu_start[self.share_start[:-1]]
        return per_alloc


# The fields AllocationLog.job_stats reads from the holding intervals.
JOB_STAT_FIELDS = ("time_s", "job", "alloc", "setting")


def last_held(rows: dict[str, np.ndarray], num_jobs: int) -> np.ndarray:
    """The last allocation each job held (NO_ALLOC if none), from holding intervals (AllocationLog.intervals:
    ordered by job, then time), as AllocationLog.last_allocs finds it in the entries."""
    job, alloc = rows["job"], rows["alloc"]
    last = np.full(num_jobs, NO_ALLOC, dtype=np.int64)
    if len(job):
        closing = np.r_[job[1:] != job[:-1], True]
        last[job[closing]] = alloc[closing]
    return last


class PlacementList:
    """Every allocation's placement by id, as a list of them reads: those of the compiled loop are kept as columns
    and a placement's tuples are made when it is read (10^6 allocations as tuples take ~250 MB), those added one
    by one after them are kept as given."""

    def __init__(self) -> None:
        self._columns: PlacementColumns | None = None
        self._share_mem = np.zeros(0, dtype=np.int64)
        self._compiled = 0
        self._items: list[Placement] = []

    def set_compiled(self, columns: PlacementColumns, share_mem: np.ndarray) -> None:
        """The first allocations, made by the compiled loop (none may have been added before)."""
        if len(self):
            raise RuntimeError("compiled placements come first")
        self._columns = columns
        self._share_mem = np.ascontiguousarray(share_mem, dtype=np.int64)
        self._compiled = len(columns.share_start) - 1

    @property
    def compiled_columns(self) -> PlacementColumns | None:
        """The compiled loop's allocations as columns (they come first), or None."""
        return self._columns

    @property
    def added(self) -> list[Placement]:
        """The placements added one by one, after the compiled loop's."""
        return self._items

    def __len__(self) -> int:
        return self._compiled + len(self._items)

    def _compiled_one(self, a: int) -> Placement:
        cols = self._columns
        assert cols is not None
        first, last = int(cols.share_start[a]), int(cols.share_start[a + 1])
        new = tuple.__new__
        return tuple(
            new(
                NodeShare,
                (
                    int(cols.share_node[s]),
                    tuple(cols.gpu_slot[cols.gpu_start[s] : cols.gpu_start[s + 1]].tolist()),
                    int(cols.share_cpu[s]),
                    int(self._share_mem[s]),
                ),
            )
            for s in range(first, last)
        )

    @overload
    def __getitem__(self, index: int) -> Placement: ...
    @overload
    def __getitem__(self, index: slice) -> list[Placement]: ...
    def __getitem__(self, index: int | slice) -> Placement | list[Placement]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = index + len(self) if index < 0 else index
        if not 0 <= i < len(self):
            raise IndexError("placement index out of range")
        return self._compiled_one(i) if i < self._compiled else self._items[i - self._compiled]

    def __iter__(self) -> Iterator[Placement]:
        for i in range(self._compiled):
            yield self._compiled_one(i)
        yield from self._items

    def append(self, placement: Placement) -> None:
        self._items.append(placement)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PlacementList | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __repr__(self) -> str:
        return repr(list(self))


class AllocationLog:
    def __init__(self) -> None:
        self._flat = array("d")
        self._adopted: np.ndarray | None = None  # rows written by the compiled loop, before those of _flat
        # Intervals kept by intervals(keep=...) for one later call: (t_end, entries, their fields).
        self._kept: tuple[float, int, dict[str, np.ndarray]] | None = None
        # What each allocation holds, referenced by the `alloc` field: a placement and the milli-GPU taken on each
        # of its GPUs (two parallel columns rather than an object per allocation: 10^6 jobs).
        self.placements = PlacementList()
        self.shares = array("q")
        self.settings: list[GpuSetting] = [DEFAULT_SETTING]  # referenced by the `setting` field
        self._setting_ids: dict[GpuSetting, int] = {DEFAULT_SETTING: 0}
        # The placements as columns, for allocations [0, len(self._share_start) - 1); extended on demand.
        self._share_start = array("q", [0])
        self._share_node = array("q")
        self._share_cpu = array("q")
        self._gpu_start = array("q", [0])
        self._gpu_slot = array("q")

    def __len__(self) -> int:
        return len(self._flat) // _WIDTH + (len(self._adopted) if self._adopted is not None else 0)

    def adopt_rows(self, rows: np.ndarray) -> None:
        """Entries written by the compiled loop (rows of FIELDS), kept without a copy; only into an empty log."""
        if len(self):
            raise RuntimeError("adopted rows come first")
        self._adopted = rows

    def drop_entries(self) -> None:
        """Let go of the entries (10^6 jobs: ~130 MB) once nothing reads them again; placements, settings and
        intervals kept for a later call stay."""
        self._flat = array("d")
        self._adopted = None

    def _rows(self) -> np.ndarray:
        """Every entry as a row of FIELDS, in append order."""
        flat = np.frombuffer(self._flat, dtype=np.float64).reshape(-1, _WIDTH)
        if self._adopted is None:
            return flat
        return self._adopted if not len(flat) else np.concatenate([self._adopted, flat])

    def add_alloc(self, placement: Placement, share_milli: int) -> int:
        self.placements.append(placement)
        self.shares.append(share_milli)
        return len(self.placements) - 1

    def placement_columns(self) -> PlacementColumns:
        """Every allocation's placement as arrays: the compiled loop's columns, then those of the tuples added one
        by one (turned into columns once, when first asked for)."""
        done = len(self._share_start) - 1
        added = self.placements.added
        if done < len(added):
            share_start, share_node, share_cpu = self._share_start, self._share_node, self._share_cpu
            gpu_start, gpu_slot = self._gpu_start, self._gpu_slot
            for placement in added[done:]:
                for node, gpus, cpu, _ in placement:
                    share_node.append(node)
                    share_cpu.append(cpu)
                    gpu_slot.extend(gpus)
                    gpu_start.append(len(gpu_slot))
                share_start.append(len(share_node))
        own = PlacementColumns(
            *(
                np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, dtype=np.int64)
                for a in (
                    self._share_start,
                    self._share_node,
                    self._share_cpu,
                    self._gpu_start,
                    self._gpu_slot,
                )
            )
        )
        compiled = self.placements.compiled_columns
        if compiled is None:
            return own
        if not added:
            return compiled
        n_shares, n_gpus = len(compiled.share_node), len(compiled.gpu_slot)
        return PlacementColumns(
            np.concatenate([compiled.share_start, own.share_start[1:] + n_shares]),
            np.concatenate([compiled.share_node, own.share_node]),
            np.concatenate([compiled.share_cpu, own.share_cpu]),
            np.concatenate([compiled.gpu_start, own.gpu_start[1:] + n_gpus]),
            np.concatenate([compiled.gpu_slot, own.gpu_slot]),
        )

    def add_compiled(self, columns: PlacementColumns, share_mem: np.ndarray, share_milli: np.ndarray) -> None:
        """Allocations made by the compiled loop, as columns (offsets from 0 for these allocations alone), the
        memory of each share and the milli-GPU each allocation takes on each of its GPUs; only into a log without
        allocations."""
        self.placements.set_compiled(columns, share_mem)
        self.shares.extend(array("q", np.ascontiguousarray(share_milli, dtype=np.int64).tobytes()))

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
        data = self._rows()
        out = {name: data[:, i] for i, name in enumerate(FIELDS)}
        for name in _INTEGER_FIELDS:
            out[name] = out[name].astype(np.int64)
        return out

    def intervals(
        self, t_end: float, fields: tuple[str, ...] = FIELDS, keep: tuple[str, ...] = ()
    ) -> dict[str, np.ndarray]:
        """One row per entry that holds an allocation, with the time it ends (the job's next entry, or
        `t_end`), ordered by job and then time (the order the ledger's sums were defined in). Only `fields`
        (and ``end_s``) are returned: at 10^6 jobs every extra column costs tens of MB. `keep`: fields (with
        ``end_s``) kept for the next call, which takes them instead of sorting the log again if it asks for no
        others over the same entries (the job table after the energy ledger)."""
        kept, self._kept = self._kept, None
        if kept is not None and kept[:2] == (t_end, len(self)) and set(fields) <= kept[2].keys():
            return {name: kept[2][name] for name in (*fields, "end_s")}
        rows = self._intervals(t_end, tuple(dict.fromkeys((*fields, *keep))))
        if keep:
            self._kept = (t_end, len(self), {name: rows[name] for name in (*keep, "end_s")})
        return {name: rows[name] for name in (*fields, "end_s")}

    def _intervals(self, t_end: float, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
        data = self._rows()
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

    def last_allocs(self, num_jobs: int) -> np.ndarray:
        """The last allocation each job held (NO_ALLOC if it never ran): int64 [num_jobs]."""
        data = self._rows()
        alloc = data[:, 2].astype(np.int64)
        held = np.flatnonzero(alloc != NO_ALLOC)[::-1]  # newest first
        jobs, first = np.unique(data[held, 1].astype(np.int64), return_index=True)
        last = np.full(num_jobs, NO_ALLOC, dtype=np.int64)
        last[jobs] = alloc[held[first]]
        return last

    def last_placements(self, num_jobs: int) -> list[Placement | None]:
        """The last placement each job held (None if it never ran)."""
        return [self.placements[a] if a != NO_ALLOC else None for a in self.last_allocs(num_jobs).tolist()]

    def placement_texts(self, allocs: np.ndarray, node_names: np.ndarray) -> np.ndarray:
        """'node:gpu,gpu;node:gpu' per allocation id ('' for NO_ALLOC; a share without GPUs shows the node
        alone), made from the placement columns: object [len(allocs)]. Equal texts are one string object
        (10^6 jobs hold a few thousand distinct ones), and no placement tuple is made."""
        cols = self.placement_columns()
        names = node_names.tolist()
        # Each share's key: its node and its GPU set (a bit mask, or an id per distinct set on wide nodes).
        if not len(cols.gpu_slot) or int(cols.gpu_slot.max()) < 62:
            cumulative = np.concatenate([[0], np.cumsum(np.left_shift(1, cols.gpu_slot))]).astype(np.int64)
            sets = cumulative[cols.gpu_start[1:]] - cumulative[cols.gpu_start[:-1]]
        else:
            ids: dict[tuple[int, ...], int] = {}
            slots = cols.gpu_slot.tolist()
            bounds = cols.gpu_start.tolist()
            sets = np.array(
                [ids.setdefault(tuple(slots[a:b]), len(ids)) for a, b in pairwise(bounds)],
                dtype=np.int64,
            )
        order = np.lexsort((sets, cols.share_node))
        node_sorted, set_sorted = cols.share_node[order], sets[order]
        opens = np.r_[True, (node_sorted[1:] != node_sorted[:-1]) | (set_sorted[1:] != set_sorted[:-1])]
        texts = []
        for s in order[opens[: len(order)]].tolist():
            node = names[int(cols.share_node[s])]
            gpus = cols.gpu_slot[cols.gpu_start[s] : cols.gpu_start[s + 1]].tolist()
            texts.append(f"{node}:{','.join(map(str, gpus))}" if gpus else node)
        share_text = np.empty(len(order), dtype=object)
        share_text[order] = np.asarray(texts, dtype=object)[np.cumsum(opens[: len(order)]) - 1]
        # One share per allocation for all but gangs: their text is their share's.
        per_alloc = np.diff(cols.share_start)
        held = allocs != NO_ALLOC
        safe = np.where(held, allocs, 0)
        out = np.full(len(allocs), "", dtype=object)
        single = held & (per_alloc[safe] == 1) if len(per_alloc) else np.zeros(len(allocs), dtype=bool)
        out[single] = share_text[cols.share_start[safe[single]]]
        for i in np.flatnonzero(held & ~single).tolist():
            a = int(allocs[i])
            out[i] = ";".join(share_text[cols.share_start[a] : cols.share_start[a + 1]].tolist())
        return out

    def job_stats(
        self, num_jobs: int, t_end: float, rows: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Per job, over the time it held GPUs: time-weighted mean GPU count, SM-clock and power-limit
        fractions, and the sequence of distinct GPU counts it held (e.g. "2>4>2"). `rows`: the intervals
        (``intervals(t_end, JOB_STAT_FIELDS)``) where already made."""
        if rows is None:
            rows = self.intervals(t_end, fields=JOB_STAT_FIELDS)
        dt = rows["end_s"] - rows["time_s"]
        job = rows["job"]
        gpus = self.placement_columns().gpus_per_alloc()[rows["alloc"]]
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
        # One string object per distinct count, not one per job (GPU counts are small: a table of them).
        alone = gpus[first[single]]
        top = int(alone.max()) if alone.size else 0
        counts[single] = np.asarray([str(v) for v in range(top + 1)], dtype=object)[alone]
        del alone
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
        import pandas as pd

        cols = self.columns()
        names = node_names.tolist()
        placements = self.placement_columns()
        # "node:gpu,gpu;node:gpu" per allocation, from the columns (no placement tuples made).
        slots = [str(g) for g in placements.gpu_slot.tolist()]
        gpu_start = placements.gpu_start.tolist()
        share_text = [
            f"{names[n]}:{','.join(slots[gpu_start[s] : gpu_start[s + 1]])}"
            if gpu_start[s + 1] > gpu_start[s]
            else names[n]
            for s, n in enumerate(placements.share_node.tolist())
        ]
        bounds = placements.share_start.tolist()
        alloc_text = [";".join(share_text[a:b]) for a, b in pairwise(bounds)]
        del share_text, slots, gpu_start
        alloc = cols["alloc"]
        held = alloc >= 0
        safe = np.where(held, alloc, 0)
        gpus = placements.gpus_per_alloc()
        gpus = gpus if len(gpus) else np.zeros(1, dtype=np.int64)
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
