"""Where a job runs: one :class:`NodeShare` per node it occupies, a :data:`Placement` for the whole job.

A placement is what a placement policy returns, what a :class:`~wattsched.policies.contract.Target` carries, what
the simulator's allocation log and the live mirror record, and what a backend turns into a cluster manager's job
or pod. ``NodeShare`` is a named tuple, so ``for node, gpus, cpu, mem in placement`` keeps working and a plain
4-tuple compares (and hashes) equal to the share it spells out.

wattsched's own placement builders construct ``NodeShare``. Code that receives a placement from a policy (the
engine, the live mirror, the validator) unpacks it by position: the contract still accepts a policy's plain
``(node, gpus, cpu_milli, memory_mib)`` tuples, so ``share.gpus`` is safe only on placements wattsched built.
"""

from __future__ import annotations

from typing import NamedTuple


class NodeShare(NamedTuple):
    """One node's share of a placement."""

    node: int  # node index in the ClusterSpec
    gpus: tuple[int, ...]  # GPU slot indices on that node (empty for a CPU-only job)
    cpu_milli: int
    memory_mib: int


Placement = tuple[NodeShare, ...]


def gpu_set(placement: Placement) -> frozenset[tuple[int, int]]:
    """The (node, GPU) pairs a placement holds: two placements hold the same GPUs when these are equal."""
    return frozenset((node, g) for node, gpus, _, _ in placement for g in gpus)
