"""The allocation log's compact forms for 10^6-job runs (engine/alloc_log.py): placements of the compiled loop kept
as columns, placement texts made from columns, and the intervals the energy ledger keeps for the job table. Each
is checked against the plain form it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import make_cluster
from wattsched.core.placement import NodeShare
from wattsched.engine.alloc_log import NO_ALLOC, AllocationLog, PlacementColumns, PlacementList
from wattsched.experiments.outputs import placement_strings


def random_placements(rng: np.random.Generator, count: int, width: int, nodes: int) -> list:
    """Placements of one to three shares; a share holds up to `width` distinct GPUs, or none (CPU only)."""
    out = []
    for _ in range(count):
        shares = []
        for node in rng.choice(nodes, size=int(rng.integers(1, 4)), replace=False).tolist():
            take = int(rng.integers(0, min(width, 5) + 1))
            gpus = tuple(sorted(rng.choice(width, size=take, replace=False).tolist()))
            shares.append(NodeShare(node, gpus, int(rng.integers(0, 9000)), int(rng.integers(0, 70000))))
        out.append(tuple(shares))
    return out


def columns_log(placements: list, compiled: int) -> AllocationLog:
    """A log whose first `compiled` placements come as columns (as the compiled loop gives them), the rest one by
    one."""
    log = AllocationLog()
    first = placements[:compiled]
    share_start, node, cpu, mem, gpu_start, slots = [0], [], [], [], [0], []
    for p in first:
        for s in p:
            node.append(s[0])
            cpu.append(s[2])
            mem.append(s[3])
            slots.extend(s[1])
            gpu_start.append(len(slots))
        share_start.append(len(node))

    def arr(values: list) -> np.ndarray:
        return np.array(values, dtype=np.int64)

    cols = PlacementColumns(arr(share_start), arr(node), arr(cpu), arr(gpu_start), arr(slots))
    log.add_compiled(cols, arr(mem), np.full(len(first), 1000, dtype=np.int64))
    for p in placements[compiled:]:
        log.add_alloc(p, 1000)
    return log


@pytest.mark.parametrize("width", [8, 80])  # GPU sets as bit masks, and as ids past 62 GPUs a node
def test_placement_texts_match_the_strings_of_the_tuples(width):
    rng = np.random.default_rng(width)
    spec = make_cluster([(width, "V100", 64_000, 262_144)] * 6)
    placements = random_placements(rng, 300, width, 6)
    log = columns_log(placements, compiled=200)
    assert list(log.placements) == placements
    allocs = rng.integers(-1, len(placements), size=500)
    allocs[:3] = NO_ALLOC
    expected = placement_strings([placements[a] if a >= 0 else None for a in allocs.tolist()], spec)
    texts = log.placement_texts(allocs, spec.node_names)
    assert texts.tolist() == expected
    # Equal texts are one object: a 10^6-job column holds few distinct strings.
    assert len({id(t) for t in texts.tolist()}) <= len(set(expected)) + 3 * len(placements)


def test_placement_list_reads_as_the_list_it_replaces():
    rng = np.random.default_rng(1)
    placements = random_placements(rng, 40, 4, 3)
    log = columns_log(placements, compiled=25)
    got = log.placements
    assert len(got) == 40 and got == placements and repr(got) == repr(placements)
    assert got[-1] == placements[-1] and got[3:30:4] == placements[3:30:4]
    assert all(type(s) is NodeShare for p in got for s in p)
    with pytest.raises(IndexError):
        got[40]
    # Columns of both parts, in id order.
    cols = log.placement_columns()
    assert cols.gpus_per_alloc().tolist() == [sum(len(s[1]) for s in p) for p in placements]
    with pytest.raises(RuntimeError):  # the compiled loop's placements come first
        got.set_compiled(cols, np.zeros(0))
    assert len(PlacementList()) == 0


def test_kept_intervals_are_those_a_fresh_sort_gives():
    rng = np.random.default_rng(2)
    log = AllocationLog()
    for a in range(30):
        log.add_alloc(((0, (a % 4,), 0, 0),), 1000)
    t = 0.0
    for _ in range(300):
        t += float(rng.exponential(5.0))
        job = int(rng.integers(0, 25))
        alloc = int(rng.integers(-1, 30))
        log.append(t, job, alloc, float(rng.random()), 1.0, 2, int(rng.integers(0, 3)))
    fresh = AllocationLog()
    fresh._flat = log._flat
    want = fresh.intervals(t + 1.0, fields=("time_s", "job", "alloc", "setting"))
    first = log.intervals(
        t + 1.0, fields=("time_s", "alloc", "load"), keep=("time_s", "job", "alloc", "setting")
    )
    assert first.keys() == {"time_s", "alloc", "load", "end_s"}
    again = log.intervals(t + 1.0, fields=("time_s", "job", "alloc", "setting"))
    assert again.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(again[name], want[name], strict=True)
    assert log._kept is None  # taken once
    # Kept intervals of other entries are not used.
    log.intervals(t + 1.0, fields=("time_s",), keep=("time_s", "job"))
    log.append(t + 2.0, 0, 1, 0.5, 1.0, 2, 0)
    longer = log.intervals(t + 3.0, fields=("time_s", "job"))
    assert len(longer["job"]) == len(want["job"]) + 1
