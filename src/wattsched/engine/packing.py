"""Packing mode: the FGD/PWR evaluation procedure (docs/fgd-pwr.md §5), placement only, no time.

1. order pods by name, then shuffle with the seeded RNG;
2. inflate: append pods drawn uniformly with replacement from the original list until the next one would push the
   requested GPU milli past ``inflate x`` cluster capacity. As in the Go code, the stopping check adds the pod's
   *per-GPU* milli, not count x milli (docs/fgd-pwr.md §9 discrepancy 4); appended pods are not reshuffled;
3. submit pods one at a time; no departures, no queue, no retry: a pod that fits nowhere is dropped and counted.

Step 3 runs compiled (engine/native_packing.py) where the placement policy and the observers are ones the kernel
mirrors, with the same results; otherwise, or without a C compiler, in the Python loop below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..core.cluster import MILLI, ClusterSpec, ClusterState
from ..core.jobs import JobTable
from ..core.placement import Placement
from ..core.requests import JobRequest, RequestBook
from .recorder import GrowableColumns


class Placer(Protocol):
    """What packing mode needs of a placement policy (``policies.base.PlacementPolicy`` has it): the engine
    names no policy module but the contract."""

    def bind(self, spec: ClusterSpec, rng: np.random.Generator) -> None: ...

    def prepare(self, jobs: JobTable, spec: ClusterSpec) -> None: ...

    def place(self, state: ClusterState, req: JobRequest) -> Placement | None: ...


class PackingObserver:
    """Hook called after every pod in packing mode (fragmentation and power metrics plug in here).

    An observer whose columns the compiled loop can compute says how in ``native_packing_plan()``
    (engine/native_packing.py); on that path its ``after_pod`` is not called."""

    def columns(self) -> tuple[str, ...]:
        return ()

    def on_start(self, state: ClusterState, jobs: JobTable) -> None: ...

    def after_pod(self, state: ClusterState, pod: int, placement: Placement | None) -> tuple[float, ...]:
        return ()


def arrival_order(
    jobs: JobTable, cluster: ClusterSpec, inflate: float, shuffle: bool, rng: np.random.Generator
) -> np.ndarray:
    """Indices of the pods to submit, in order, after shuffling and inflation."""
    by_name = np.argsort(jobs.job_id.astype(str), kind="stable")
    order = by_name[rng.permutation(by_name.size)] if shuffle else by_name
    target = inflate * cluster.total_gpus * MILLI
    total = int(jobs.gpu_demand_milli.sum())
    extra: list[int] = []
    milli = jobs.gpu_milli
    demand = jobs.gpu_demand_milli
    n = len(jobs)
    if int(milli.max(initial=0)) <= 0:
        return order  # only CPU-only pods: inflation by GPU milli can never stop
    while True:
        draws = rng.integers(n, size=256)
        for k in draws.tolist():
            if total + int(milli[k]) > target:
                return np.concatenate([order, np.asarray(extra, dtype=np.int64)])
            extra.append(k)
            total += int(demand[k])


@dataclass
class PackingOutcome:
    order: np.ndarray  # job indices in submission order (with repeats from inflation)
    placed: np.ndarray  # bool per submission
    placements: list[Placement | None]
    series: GrowableColumns
    allocated_milli_final: int
    arrived_milli_final: int


def run_packing(
    jobs: JobTable,
    spec: ClusterSpec,
    placement: Placer,
    rng_order: np.random.Generator,
    rng_policy: np.random.Generator,
    inflate: float = 1.3,
    shuffle: bool = True,
    observers: Iterable[PackingObserver] = (),
    check_invariants: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> PackingOutcome:
    observers = list(observers)
    state = ClusterState(spec)
    book = RequestBook.build(jobs, spec)
    placement.bind(spec, rng_policy)
    placement.prepare(jobs, spec)
    order = arrival_order(jobs, spec, inflate, shuffle, rng_order)
    extra_cols = tuple(c for o in observers for c in o.columns())
    series = GrowableColumns(("pod", "arrived_gpu_milli", "allocated_gpu_milli", "placed", *extra_cols))
    for o in observers:
        o.on_start(state, jobs)
    if not check_invariants:
        from .native_packing import compiled_packing

        compiled = compiled_packing(placement, observers, book, state, order)
        if compiled is not None:
            placed_c, placements_c, rows, arrived_c = compiled
            series.append(*rows.ravel().tolist())
            if progress is not None:
                progress(order.size, order.size)
            return PackingOutcome(order, placed_c, placements_c, series, state.allocated_milli, arrived_c)
    placed = np.zeros(order.size, dtype=bool)
    placements: list[Placement | None] = [None] * order.size
    arrived = 0
    step = max(order.size // 200, 1)
    demand = jobs.gpu_demand_milli
    milli_of = jobs.gpu_milli
    for i, j in enumerate(order.tolist()):
        arrived += int(demand[j])
        result = None if book.never_fits[j] else placement.place(state, book.request(j))
        if result is not None:
            milli = int(milli_of[j])
            for node, gpus, cpu, mem in result:
                state.allocate(node, gpus, milli, cpu, mem)
            placed[i] = True
            placements[i] = result
        extras = tuple(v for o in observers for v in o.after_pod(state, j, result))
        series.append(i, arrived, state.allocated_milli, float(result is not None), *extras)
        if check_invariants:
            state.check_invariants()
        if progress is not None and i % step == 0:
            progress(i, order.size)
    if progress is not None:
        progress(order.size, order.size)
    return PackingOutcome(order, placed, placements, series, state.allocated_milli, arrived)
