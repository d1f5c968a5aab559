"""One validator for the actions of every backend (docs/architecture.md, "The policy contract").

The simulator (``engine/temporal.py``) and the live mirror (``backends/live.py``) check each action a policy takes
with the same :class:`ActionValidator` before anything changes: a malformed target (a node or GPU that does not
exist, a GPU listed twice, a share outside 1..1000, a GPU model the job does not accept, a setting outside the
GPU's range, co-runners that do not fit in GPU memory) and an action the backend cannot carry out (a shared GPU,
a resize, a preemption, a GPU setting without the capability) raise :class:`~.contract.InvalidDecision` naming
the policy and the job. Capacity (a GPU already taken) is checked by ``ClusterState.allocate`` where resources are
taken.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..core.cluster import MILLI, ClusterSpec
from ..core.errors import WattschedError
from ..core.gpus import gpu_model
from ..core.placement import Placement
from ..core.requests import RequestBook
from ..core.settings import DEFAULT_SETTING, GpuSetting
from .contract import CAPABILITY_TEXT, Capability, InvalidDecision, Target

if TYPE_CHECKING:
    from ..perf.model import PerformanceModel


class ActionValidator:
    """Checks targets, settings, stops and shared-GPU memory against the cluster, the jobs' requests, the
    performance model and the backend's capabilities."""

    def __init__(
        self,
        spec: ClusterSpec,
        book: RequestBook,
        perf: PerformanceModel,
        capabilities: frozenset[Capability],
        job_name: Callable[[int], str],
    ):
        self.spec = spec
        self.book = book
        self.perf = perf
        self.capabilities = capabilities
        self._job_name = job_name
        # Plain-list copies (per node, not per job): the check runs on every start.
        self._gpu_count = spec.gpu_count.tolist()
        self._masks = [m.tolist() for m in book.node_mask_by_spec]
        self._node_code = spec.gpu_model_code.tolist()
        self._shares = Capability.SHARES_GPUS in capabilities
        self._resizes = Capability.RESIZES in capabilities
        self._preempts = Capability.PREEMPTS in capabilities
        self._settings = Capability.SETS_GPU_SETTINGS in capabilities

    def rebind(self, book: RequestBook, perf: PerformanceModel) -> None:
        """The job table grew (live): the requests and the model of the larger table."""
        self.book, self.perf = book, perf
        self._masks = [m.tolist() for m in book.node_mask_by_spec]

    def invalid(self, by: str, job: int | None, message: str) -> InvalidDecision:
        return InvalidDecision(by, None if job is None else self._job_name(job), message)

    def refuse(self, by: str, job: int, capability: Capability) -> None:
        """An action needs a capability the backend lacks (a policy that did not declare it)."""
        raise self.invalid(by, job, f"needs {CAPABILITY_TEXT[capability]}, which this backend does not offer")

    def target(self, by: str, job: int, target: Target) -> None:
        """Refuse a malformed target, or one the backend cannot run, before anything is allocated."""
        milli = int(target.share_milli)
        if not 0 < milli <= MILLI:
            raise self.invalid(by, job, f"GPU share {milli} milli-GPU is outside 1..{MILLI}")
        if milli < MILLI and not self._shares:
            self.refuse(by, job, Capability.SHARES_GPUS)
        book = self.book
        gpu_job = book.jobs.num_gpu[job] > 0
        mask = self._masks[book.spec_id[job]]
        gpu_count, num_nodes, names = self._gpu_count, len(self._gpu_count), self.spec.node_names
        seen: set[tuple[int, int]] = set()
        for node, gpus, cpu, mem in target.placement:
            if not 0 <= node < num_nodes:
                raise self.invalid(by, job, f"node {node} does not exist ({num_nodes} nodes)")
            if cpu < 0 or mem < 0:
                raise self.invalid(by, job, f"negative CPU or memory on node {names[node]}")
            for g in gpus:
                if not 0 <= g < gpu_count[node]:
                    raise self.invalid(
                        by, job, f"GPU {g} does not exist on node {names[node]} ({gpu_count[node]} GPUs)"
                    )
                if (node, g) in seen:
                    raise self.invalid(by, job, f"GPU {g} of node {names[node]} is listed twice")
                seen.add((node, g))
            if gpus and gpu_job and not mask[node]:
                raise self.invalid(by, job, f"node {names[node]} has a GPU model the job does not accept")
        if gpu_job and not seen:
            raise self.invalid(by, job, "a GPU job was given no GPU")
        if not self._resizes and not self.keeps_shape(job, target.placement):
            self.refuse(by, job, Capability.RESIZES)
        if seen:
            self.setting(by, job, target.placement, target.setting)

    def keeps_shape(self, job: int, placement: Placement) -> bool:
        """Whether a placement gives the job exactly what it asked for: its GPU count and, where the request
        fixes GPUs per node (a live gang), that many on each node."""
        jobs = self.book.jobs
        held = sum(len(g) for _, g, _, _ in placement)
        if held != int(jobs.num_gpu[job]):
            return False
        per_node = self.book.per_node
        if per_node is None or held == 0:
            return True
        want = int(per_node[job])
        return all(len(g) == want for _, g, _, _ in placement)

    def setting(self, by: str, job: int, placement: Placement, setting: GpuSetting) -> None:
        """A GPU setting outside the GPU's allowed range is the policy's error (raised before any change)."""
        if setting == DEFAULT_SETTING:
            return
        if not self._settings:
            self.refuse(by, job, Capability.SETS_GPU_SETTINGS)
        code = self._node_code[placement[0][0]] if placement else -1
        try:
            self.perf.speed(code, setting)
            self.perf.power_scale(code, setting)
        except WattschedError as exc:
            raise self.invalid(by, job, str(exc)) from None

    def stop(self, by: str, job: int) -> None:
        """A stop or move of a running job needs preemption."""
        if not self._preempts:
            self.refuse(by, job, Capability.PREEMPTS)

    def memory(self, by: str, job: int, placement: Placement, co_runners: Sequence[Sequence[int]]) -> None:
        """Jobs sharing a GPU must fit in its memory together (where the model knows their memory)."""
        perf = self.perf
        need = perf.memory_gib(job)
        if need <= 0:
            return
        code = self._node_code[placement[0][0]]
        cap = gpu_model(self.spec.gpu_models[code]).memory_gib
        for others in co_runners:
            total = need + sum(perf.memory_gib(k) for k in others)
            if total > cap + 1e-9:
                raise self.invalid(
                    by, job, f"GPU memory does not fit: {total:.1f} GiB needed on a {cap:g} GiB GPU"
                )
