"""Named workloads (real traces found through the dataset registry) and generic CSV paths.

``load_workload(name)`` maps a short name to a dataset file and its reader. Missing files raise the
``DataNotFoundError`` from :func:`wattsched.data.registry.locate`, which says how to fetch them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..core.errors import DataNotFoundError, InputError, UnknownNameError, WattschedError
from ..core.jobs import JobTable
from ..data.registry import locate
from .generic_csv import read_generic_csv
from .pollux import read_pollux_workload
from .traces import read_alibaba_pods, read_gavel, read_hyperdrive, read_philly, read_tiresias
from .validate import LoadedWorkload

ALIBABA_LISTS = (
    "default", "cpu0", "cpu037", "cpu050", "cpu072", "cpu100", "cpu200", "cpu235", "cpu250", "cpu300",
    "gpushare20", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
    "gpuspec05", "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33",
    "multigpu20", "multigpu30", "multigpu40", "multigpu50",
)  # fmt: skip
GAVEL_MSR_VCS = (
    "0e4a51", "103959", "11cb48", "23dbec", "2869ce", "51b7ef", "6214e9", "6c71a0", "795a4c", "7f04ca",
    "925e2b", "b436b2", "e13805", "ed69ec", "ee9e8c",
)  # fmt: skip
GAVEL_PHYSICAL = (
    "artifact_evaluation", "debug", "debug_v2", "highmem_test", "max_min_fairness", "medium_test",
    "minimize_makespan", "small_test",
)  # fmt: skip
GAVEL_THROUGHPUTS = "simulation_throughputs.json"


POLLUX_SETS = {"pollux": "workloads", "pollux-0.5": "workloads-0.5", "pollux-1.5": "workloads-1.5",
               "pollux-2.0": "workloads-2.0"}  # fmt: skip


@dataclass(frozen=True)
class _Entry:
    dataset: str
    relpath: str
    reader: Callable[..., LoadedWorkload]
    gavel: bool = False
    needs_data_dir: bool = False  # the reader loads other dataset files (e.g. throughput tables)
    vc: str | None = None  # keep only this Philly virtual cluster's jobs (its `cluster` column)
    reader_options: tuple[tuple[str, object], ...] = ()


def _entries() -> dict[str, _Entry]:
    out: dict[str, _Entry] = {"philly": _Entry("philly-pollux", "philly.csv", read_philly)}
    for vc in GAVEL_MSR_VCS:  # Philly's virtual clusters (ElasticFlow and PowerFlow evaluate VC 103959)
        # GPU-only requests: the per-GPU CPU and memory assumed for the whole trace fit the philly cluster's
        # node shape, not the 8-GPU ElasticFlow specs these VCs are replayed on (64 GiB per GPU against
        # 32 GiB there would strand half of every node's GPUs).
        out[f"philly/vc-{vc}"] = _Entry(
            "philly-pollux", "philly.csv", read_philly, vc=vc,
            reader_options=(("cpu_milli_per_gpu", 0), ("memory_mib_per_gpu", 0)),
        )  # fmt: skip
    for lst in ALIBABA_LISTS:
        out[f"alibaba-v2023/{lst}"] = _Entry(
            "alibaba-gpu-v2023", f"csv/openb_pod_list_{lst}.csv", read_alibaba_pods
        )
    for prefix, folder in POLLUX_SETS.items():
        for k in range(1, 9):
            out[f"{prefix}/workload-{k}"] = _Entry(
                "philly-pollux", f"{folder}/workload-{k}.csv", read_pollux_workload, needs_data_dir=True
            )
    out["tiresias/60_job"] = _Entry("tiresias-traces", "60_job.csv", read_tiresias)
    out["tiresias/480_job_trace"] = _Entry("tiresias-traces", "480_job_trace.csv", read_tiresias)
    out["tiresias/hyperdrive"] = _Entry("tiresias-traces", "philly_hyperdrive_workload.csv", read_hyperdrive)
    for vc in GAVEL_MSR_VCS:
        out[f"gavel/msr/{vc}"] = _Entry("gavel-traces", f"msr/seed=0/{vc}.trace", read_gavel, gavel=True)
    for name in GAVEL_PHYSICAL:
        out[f"gavel/physical/{name}"] = _Entry(
            "gavel-traces", f"physical_cluster/{name}.trace", read_gavel, True
        )
    return out


_CATALOG = _entries()
# Workloads made of several catalog entries: all of Gavel's msr VCs together, as Gavel replays them on one
# 500-GPU cluster (gavel-traces/msr/cluster_specs.json).
_COMPOSITE = {"gavel/msr/all": tuple(f"gavel/msr/{vc}" for vc in GAVEL_MSR_VCS)}


def workload_names() -> list[str]:
    """Every named trace ``load_workload`` knows (a path to a generic ``.csv`` works too)."""
    return [*_CATALOG, *_COMPOSITE]


def _load_composite(name: str, data_dir, skip_invalid: bool) -> LoadedWorkload:
    parts = [load_workload(part, data_dir, skip_invalid) for part in _COMPOSITE[name]]
    notes = list(dict.fromkeys(n for p in parts for n in p.jobs.notes))
    notes.append(f"{len(parts)} traces merged by submit time: {', '.join(_COMPOSITE[name])}")
    jobs = JobTable.concat([p.jobs for p in parts], source=name, notes=notes)
    return replace(
        parts[0],
        jobs=jobs,
        invalid_skipped=sum(p.invalid_skipped for p in parts),
        invalid_examples=[e for p in parts for e in p.invalid_examples][:5],
        path=name,
    )


def _exists(name: str) -> bool:
    """Whether `name` is an existing path (a file, a directory, anything); False for names no path can have."""
    try:
        return Path(name).exists()
    except (OSError, ValueError):  # e.g. a name too long for the file system, or holding a NUL
        return False


def missing_data(name: str, data_dir: str | Path | None = None) -> str | None:
    """Why the dataset files of a named workload cannot be found (how to get them), or None when they can; an
    unknown name is an error. Cheap: nothing is read."""
    name = str(name).strip()
    if name in _COMPOSITE:
        return next((m for part in _COMPOSITE[name] if (m := missing_data(part, data_dir))), None)
    entry = _CATALOG.get(name)
    if entry is None:
        if name.lower().endswith(".csv") or _exists(name):
            return None  # a generic CSV: reading it reports any problem with the file itself
        raise UnknownNameError("workload", name, [*workload_names(), "PATH.csv"])
    try:
        locate(entry.dataset, entry.relpath, data_dir)
        if entry.gavel:
            locate(entry.dataset, GAVEL_THROUGHPUTS, data_dir)
    except DataNotFoundError as exc:
        return str(exc)
    return None


def refuse_column_mapping(name: str, columns: Mapping[str, str] | None) -> None:
    """A column mapping is for a generic job CSV; a named or synthetic workload has its own reader."""
    if columns:
        raise WattschedError(
            f"--columns maps the columns of a generic job CSV; workload '{name}' is not one (it has its own "
            "reader): drop --columns or give a CSV path"
        )


def _require_jobs(loaded: LoadedWorkload) -> LoadedWorkload:
    """A trace that yields no job is an error, never an empty run."""
    if len(loaded.jobs):
        return loaded
    if loaded.invalid_skipped:
        why = f"no valid job: all {loaded.invalid_skipped} row(s) are invalid and were skipped"
    else:
        why = "no jobs: the file has a header but no data rows"
    raise InputError(loaded.path, None, None, why)


def load_workload(
    name: str,
    data_dir: str | Path | None = None,
    skip_invalid: bool = False,
    columns: Mapping[str, str] | None = None,
) -> LoadedWorkload:
    """A named trace, or a CSV path in the generic schema whose columns `columns` may map (field -> column)."""
    name = str(name).strip()
    entry = _CATALOG.get(name)
    if entry is None and name not in _COMPOSITE:
        if name.lower().endswith(".csv") or _exists(name):
            # the hardened reader: a directory, a missing or unreadable file, binary bytes -> one InputError
            return _require_jobs(read_generic_csv(name, skip_invalid=skip_invalid, columns=columns))
        raise UnknownNameError("workload", name, [*workload_names(), "PATH.csv"])
    refuse_column_mapping(name, columns)
    if name in _COMPOSITE:
        return _load_composite(name, data_dir, skip_invalid)
    assert entry is not None  # neither a path nor a composite: a catalog entry
    path = locate(entry.dataset, entry.relpath, data_dir)
    if entry.gavel:
        throughputs = locate(entry.dataset, GAVEL_THROUGHPUTS, data_dir)
        user = name.rsplit("/", 1)[1] if name.startswith("gavel/msr/") else None
        return read_gavel(path, throughputs, skip_invalid=skip_invalid, source=name, user=user)
    if entry.needs_data_dir:
        return entry.reader(path, skip_invalid=skip_invalid, source=name, data_dir=data_dir)
    loaded = entry.reader(path, skip_invalid=skip_invalid, source=name, **dict(entry.reader_options))
    if entry.vc is not None:
        jobs = loaded.jobs.subset(np.flatnonzero(np.asarray(loaded.jobs.user, dtype=str) == entry.vc))
        jobs.notes.append(
            f"jobs of Philly virtual cluster {entry.vc} only ({len(jobs)} of {len(loaded.jobs)})"
        )
        loaded = replace(loaded, jobs=jobs)
    return loaded
