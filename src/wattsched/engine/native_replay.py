"""The compiled event loop (``replay_kernel.c``) for runs it reproduces exactly, and when it applies.

A queue + placement run with built-in policies spends almost all its time in per-event Python: a scheduling pass,
a placement scoring every node, the start and finish bookkeeping, the recorder's row. When every part of a run is
one the kernel mirrors, :func:`compiled_replay` hands the whole loop to it and then writes its results back into
the simulator (arrays, allocation log, cluster state, recorder, node idle times), as if the Python loop had run.
The results are the same bit for bit (tests/unit/test_native_replay.py runs both).

It applies when:

* the scheduler says how to run it compiled (``native_plan()``, which ``QueuePlacementScheduler`` answers for the
  built-in queue and placement policies the kernel implements, and no GPU-setting rule; ``RoundScheduler`` for
  Tiresias with consolidated placement on whole GPUs, every job taking at least one, see below);
* no invariant checks, nothing scheduled before the first event, every node on, and a power manager (if any)
  that neither reacts to starts and idle nodes nor runs timers (always-on);
* observers that only watch the start and the end of the run, besides the time-series recorder;
* every job that can run takes whole GPUs (or none), or is a one-GPU shared pod under the plain time-slicing
  sharing model (``_sharing_mirrored``); no fixed GPUs per node;
* job speeds that depend only on the GPU type (no throughput tables, no measured profiles).

Anything else runs the Python loop.

Tiresias in rounds runs compiled while it never contends: the rounds are events of the kernel (after the
completions of their instant, the decision after that instant's arrivals, empty stretches skipped as
``RoundScheduler._round`` does), and each decision is Tiresias's ``_start_waiting``. Where Tiresias would need
anything else (more GPUs asked for than the cluster has: its preempting path; jobs waiting with nothing running:
the stall watch), the kernel stops, the simulator's arrays are put back as they were, and the whole run goes to
the Python loop from its start (a contended run pays the kernel's partial run on top; on the traces measured,
a few percent).
"""

from __future__ import annotations

import ctypes
import math
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
from sortedcontainers import SortedList

from ..core.cluster import MILLI
from ..core.settings import DEFAULT_SETTING
from ..core.states import (
    ON,
    PHASE_RELEASED,
    PHASE_RUNNING,
    STATUS_DONE,
    STATUS_FUTURE,
    STATUS_PENDING,
    STATUS_RUNNING,
    STATUS_UNSCHEDULABLE,
)
from ..perf.colocation import SharingModel
from ..policies.contract import ARRIVED, LEFT, RELEASED, TAKEN, PowerManager
from . import kernels
from .alloc_log import PlacementColumns
from .observers import Observer
from .recorder import TimeSeriesRecorder
from .temporal import KIND_CALLBACK, STALL_LIMIT_S

if TYPE_CHECKING:
    from .temporal import Simulator

QUEUE_MODES = {"block": 0, "every": 1}  # stop at the first job that cannot start / try every waiting job
PLACEMENTS = {"first-fit": 0, "best-fit": 1, "consolidated": 2}
ROUND_MODES = {
    "tiresias": 1
}  # allocation policies in rounds the kernel mirrors (while they need nothing else)
_ERR_STALLED, _ERR_MEMORY, _ERR_CONTENDED = 1, 2, 4
_PER_EVENT_HOOKS = ("on_interval", "on_job_start", "on_job_end", "on_batch_end")
_SAMPLE_JOBS = 32  # jobs whose tabulated rate and load are checked against the performance model's answers

_I64 = ctypes.c_int64
_F64 = ctypes.c_double
_PI = ctypes.POINTER(ctypes.c_int64)
_PF = ctypes.POINTER(ctypes.c_double)
_PU8 = ctypes.POINTER(ctypes.c_uint8)
_PI8 = ctypes.POINTER(ctypes.c_int8)


class _Replay(ctypes.Structure):
    """``Replay`` of replay_kernel.c, field for field."""

    _fields_ = [
        *[
            (name, _I64)
            for name in (
                "n_jobs",
                "n_nodes",
                "width",
                "n_cols",
                "queue_mode",
                "placement",
                "rank_weight",
                "track_idle",
                "n_recorders",
                "status_pending",
                "status_running",
                "status_done",
                "status_unschedulable",
                "phase_running",
                "phase_released",
            )
        ],
        *[(name, _F64) for name in ("now", "last_time", "gpu_seconds", "last_start")],
        *[
            (name, _I64)
            for name in (
                "released",
                "allocated_milli",
                "nodes_busy",
                "release_epoch",
                "n_log",
                "n_series",
                "n_allocs",
                "n_shares",
                "n_gpus",
                "n_pending",
                "arrivals",
                "decisions",
                "error",
            )
        ],
        ("arrival_time", _PF),
        ("arrival_job", _PI),
        ("never_fits", _PU8),
        ("priority", _PF),
        ("num_gpu", _PI),
        ("gpu_milli", _PI),
        ("cpu_milli", _PI),
        ("mem_mib", _PI),
        ("mask_id", _PI),
        ("gang", _PU8),
        ("rate_tab", _PF),
        ("load_tab", _PF),
        ("node_masks", _PU8),
        ("node_code", _PI),
        ("rank", _PI),
        ("available", _PU8),
        ("gpu_left", _PI),
        ("cpu_left", _PI),
        ("mem_left", _PI),
        ("free_gpus", _PI),
        ("gpu_left_total", _PI),
        ("max_gpu_left", _PI),
        ("jobs_on_node", _PI),
        ("pod_kinds", _PI),
        ("idle_since", _PF),
        ("status", _PI8),
        ("start_s", _PF),
        ("end_s", _PF),
        ("alloc_of_job", _PI),
        ("log", _PF),
        ("series", _PF),
        ("alloc_share_start", _PI),
        ("share_node", _PI),
        ("share_cpu", _PI),
        ("share_mem", _PI),
        ("share_gpu_start", _PI),
        ("share_gpus", _PI),
        ("pending_out", _PI),
        ("max_residents", _I64),
        ("n_pushes", _I64),
        ("log_cap", _I64),
        ("interference", _F64),
        ("busy_scale", _F64),
        ("util", _PF),
        ("version", _PI),
        ("rate", _PF),
        ("remaining", _PF),
        ("last_update", _PF),
        ("alloc_milli", _PI),
        *[
            (name, _I64)
            for name in (
                "round_mode",
                "rounds",
                "round_decisions",
                "rounds_stopped",
                "capacity_gpus",
                "series_cap",
                "series_owned",
                "round_push",
            )
        ],
        *[(name, _F64) for name in ("round_s", "round_origin", "next_round")],
        *[(name, _PI) for name in ("spec_gpu_count", "spec_cpu", "spec_mem", "switch_id")],
    ]


_CTYPE_OF = {
    np.dtype(np.int64): _PI,
    np.dtype(np.float64): _PF,
    np.dtype(np.uint8): _PU8,
    np.dtype(np.int8): _PI8,
}


def _ptr(arr: np.ndarray) -> Any:
    """A pointer to the array's data; the array must be C-contiguous (checked by :func:`compiled_replay`)."""
    if not arr.flags.c_contiguous:
        raise ValueError("compiled replay needs C-contiguous arrays")
    pointer_type: type[Any] = _CTYPE_OF[arr.dtype]
    return arr.ctypes.data_as(pointer_type)


def _state_and_job_arrays(sim: Simulator) -> list[np.ndarray]:
    """The cluster-state and per-job arrays of the simulator the kernel writes in place."""
    state = sim.state
    return [
        state.gpu_left, state.cpu_left, state.mem_left, state.free_gpus, state.gpu_left_total, state.max_gpu_left,
        state.jobs_on_node, state.gpu_pod_kinds,
        sim.status, sim.start_s, sim.end_s, sim.version, sim.rate, sim.remaining, sim.last_update,
    ]  # fmt: skip


def _in_place_ok(*arrays: np.ndarray) -> bool:
    return all(a.flags.c_contiguous and a.flags.writeable for a in arrays)


class CompiledReplay:
    """One run of the kernel over a simulator, prepared by :func:`compiled_replay`."""

    def __init__(
        self, sim: Simulator, lib: ctypes.CDLL, plan: dict[str, Any], recorder: TimeSeriesRecorder | None
    ):
        self.sim = sim
        self.lib = lib
        self.plan = plan
        self.recorder = recorder

    def tables(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Per job and GPU code (column code + 1): the rate alone on its GPUs and the load it adds, at the
        default setting; None where the performance model answers otherwise (then the Python loop runs)."""
        sim = self.sim
        perf, jobs, spec = sim.perf, sim.jobs, sim.spec
        codes = range(-1, len(spec.gpu_models))
        ngpu = jobs.num_gpu
        trace = perf.trace_gpus
        scaled = (ngpu > 0) & (ngpu != trace)
        rate = np.empty((len(jobs), len(codes)))
        load = np.empty((len(jobs), len(codes)))
        for col, code in enumerate(codes):
            speed = perf.speed(code, DEFAULT_SETTING)
            scale = perf.power_scale(code, DEFAULT_SETTING)
            rate[:, col] = np.where(scaled, speed * ngpu / trace, speed)
            load[:, col] = perf.job_load if scale == 1.0 else perf.job_load * scale
        used = np.unique(spec.gpu_model_code) + 1
        if not (rate[:, used] > 0).all():
            return None  # a configuration without progress: the Python loop raises the policy's error
        # The tables restate PerformanceModel.solo_rate and gpu_load for jobs without tables or profiles: check
        # them against the model's own answers on a sample of jobs.
        sample = np.unique(np.linspace(0, len(jobs) - 1, min(len(jobs), _SAMPLE_JOBS)).astype(np.int64))
        for j in sample.tolist():
            for col in used.tolist():
                code, n = col - 1, int(ngpu[j])
                if perf.solo_rate(j, code, n, 1, 1, DEFAULT_SETTING) != rate[j, col]:
                    return None
                if perf.gpu_load(j, code, DEFAULT_SETTING) != load[j, col]:
                    return None
        return np.ascontiguousarray(rate), np.ascontiguousarray(load)

    def run(self) -> bool:
        """Run the loop compiled; False (nothing changed) where the kernel does not apply after all."""
        sim = self.sim
        tables = self.tables()
        if tables is None:
            return False
        rate_tab, load_tab = tables
        jobs, spec, state, book = sim.jobs, sim.spec, sim.state, sim.book
        n, num_nodes = len(jobs), spec.num_nodes
        order = np.argsort(jobs.submit_s, kind="stable")
        arrival_time = np.ascontiguousarray(jobs.submit_s[order], dtype=np.float64)
        arrival_job = np.ascontiguousarray(order, dtype=np.int64)
        num_gpu = np.ascontiguousarray(jobs.num_gpu, dtype=np.int64)
        gpu_milli = np.ascontiguousarray(jobs.gpu_milli, dtype=np.int64)
        cpu_milli = np.ascontiguousarray(jobs.cpu_milli, dtype=np.int64)
        mem_mib = np.ascontiguousarray(jobs.memory_mib, dtype=np.int64)
        mask_id = np.ascontiguousarray(np.where(num_gpu > 0, book.spec_id, -1), dtype=np.int64)
        never_fits = np.ascontiguousarray(book.never_fits, dtype=np.uint8)
        gang = np.ascontiguousarray(book.gang, dtype=np.uint8)
        plan = self.plan
        round_mode = ROUND_MODES.get(plan.get("rounds", ""), 0)
        # Tiresias orders the waiting jobs by submission, then index (its one queue while nobody ran before).
        queue_key = jobs.submit_s if round_mode else sim._priority
        priority = np.ascontiguousarray(queue_key, dtype=np.float64)
        node_masks = np.ascontiguousarray(book.node_mask_by_spec, dtype=np.uint8)
        node_code = np.ascontiguousarray(spec.gpu_model_code, dtype=np.int64)
        rank = np.ascontiguousarray(self.plan["rank"], dtype=np.int64)
        available = np.ascontiguousarray(state.available, dtype=np.uint8)
        power = sim.power
        idle_since = power.idle_since if power is not None else np.zeros(num_nodes)
        perf = sim.perf
        shared = (num_gpu > 0) & (gpu_milli < MILLI) & ~book.never_fits
        # A GPU holds at most MILLI // (smallest share) shared pods.
        max_residents = MILLI // int(gpu_milli[shared].min()) if shared.any() else 0
        util = np.ascontiguousarray(perf.job_load, dtype=np.float64)
        max_shares = int(np.where(book.gang, num_gpu, 1).sum()) + 1
        max_gpus = int(num_gpu.sum()) + 1  # GPUs of every start together
        alloc_of_job = np.full(n, -1, dtype=np.int64)
        alloc_milli = np.zeros(n + 1, dtype=np.int64)
        series = np.empty((2 * n + 1) * 5 if self.recorder is not None else 5)  # rounds: the kernel grows it
        alloc_share_start = np.zeros(n + 1, dtype=np.int64)
        share_node = np.zeros(max_shares, dtype=np.int64)
        share_cpu = np.zeros(max_shares, dtype=np.int64)
        share_mem = np.zeros(max_shares, dtype=np.int64)
        share_gpu_start = np.zeros(max_shares + 1, dtype=np.int64)
        share_gpus = np.zeros(max_gpus, dtype=np.int64)
        pending_out = np.zeros(n + 1, dtype=np.int64)
        rec = self.recorder
        spec_gpu_count = np.ascontiguousarray(spec.gpu_count, dtype=np.int64)
        spec_cpu = np.ascontiguousarray(spec.cpu_milli, dtype=np.int64)
        spec_mem = np.ascontiguousarray(spec.memory_mib, dtype=np.int64)
        switch_id = np.ascontiguousarray(spec.switch_id, dtype=np.int64)
        # A run the kernel leaves (Tiresias contending) runs again in Python from the start: keep what it changes.
        saved = self._in_place_arrays() if round_mode else []
        snapshot = [a.copy() for a in saved]
        r = _Replay(
            n_jobs=n,
            n_nodes=num_nodes,
            width=state.gpu_left.shape[1],
            n_cols=rate_tab.shape[1],
            queue_mode=QUEUE_MODES.get(plan.get("queue", ""), 0),
            placement=PLACEMENTS[self.plan["placement"]],
            rank_weight=int(self.plan["rank_weight"]),
            track_idle=int(power is not None),
            n_recorders=int(rec is not None),
            status_pending=STATUS_PENDING,
            status_running=STATUS_RUNNING,
            status_done=STATUS_DONE,
            status_unschedulable=STATUS_UNSCHEDULABLE,
            phase_running=PHASE_RUNNING,
            phase_released=PHASE_RELEASED,
            now=sim.now,
            last_time=rec.last_time if rec is not None else 0.0,
            gpu_seconds=rec.allocated_gpu_seconds if rec is not None else 0.0,
            last_start=sim._last_start,
            released=int(sim._released),
            allocated_milli=state.allocated_milli,
            nodes_busy=state.nodes_busy,
            release_epoch=state.release_epoch,
            arrival_time=_ptr(arrival_time),
            arrival_job=_ptr(arrival_job),
            never_fits=_ptr(never_fits),
            priority=_ptr(priority),
            num_gpu=_ptr(num_gpu),
            gpu_milli=_ptr(gpu_milli),
            cpu_milli=_ptr(cpu_milli),
            mem_mib=_ptr(mem_mib),
            mask_id=_ptr(mask_id),
            gang=_ptr(gang),
            rate_tab=_ptr(rate_tab),
            load_tab=_ptr(load_tab),
            node_masks=_ptr(node_masks),
            node_code=_ptr(node_code),
            rank=_ptr(rank),
            available=_ptr(available),
            gpu_left=_ptr(state.gpu_left),
            cpu_left=_ptr(state.cpu_left),
            mem_left=_ptr(state.mem_left),
            free_gpus=_ptr(state.free_gpus),
            gpu_left_total=_ptr(state.gpu_left_total),
            max_gpu_left=_ptr(state.max_gpu_left),
            jobs_on_node=_ptr(state.jobs_on_node),
            pod_kinds=_ptr(state.gpu_pod_kinds),
            idle_since=_ptr(idle_since),
            status=_ptr(sim.status),
            start_s=_ptr(sim.start_s),
            end_s=_ptr(sim.end_s),
            alloc_of_job=_ptr(alloc_of_job),
            series=_ptr(series),
            alloc_share_start=_ptr(alloc_share_start),
            share_node=_ptr(share_node),
            share_cpu=_ptr(share_cpu),
            share_mem=_ptr(share_mem),
            share_gpu_start=_ptr(share_gpu_start),
            share_gpus=_ptr(share_gpus),
            pending_out=_ptr(pending_out),
            max_residents=max_residents,
            interference=float(perf.sharing.interference),
            busy_scale=float(perf.loads.busy_scale) if perf.loads is not None else 1.0,
            util=_ptr(util),
            version=_ptr(sim.version),
            rate=_ptr(sim.rate),
            remaining=_ptr(sim.remaining),
            last_update=_ptr(sim.last_update),
            alloc_milli=_ptr(alloc_milli),
            round_mode=round_mode,
            capacity_gpus=int(spec.gpu_count[state.available].sum()),
            series_cap=len(series) // 5,
            round_s=float(plan.get("round_s", 0.0)),
            round_origin=float(plan.get("round_origin", 0.0)),
            next_round=sim._heap[0][0] if round_mode else math.inf,
            spec_gpu_count=_ptr(spec_gpu_count),
            spec_cpu=_ptr(spec_cpu),
            spec_mem=_ptr(spec_mem),
            switch_id=_ptr(switch_id),
        )
        error = self.lib.ws_replay(ctypes.byref(r), _I64(int(num_gpu.max(initial=0)) + 1))
        log = _adopt_log(self.lib, r)
        series = _adopt_series(self.lib, r, series)
        if error == _ERR_CONTENDED:
            for array, before in zip(saved, snapshot, strict=True):
                np.copyto(array, before)
            return False
        if error == _ERR_MEMORY:
            raise MemoryError("compiled replay: out of memory")
        seq_before = sim._seq
        self._write_back(r, alloc_of_job, alloc_milli, log, series)
        if round_mode:
            self._write_back_rounds(r, seq_before + int(r.round_push))
        self._write_placements(
            r, alloc_milli, alloc_share_start, share_node, share_cpu, share_mem, share_gpu_start, share_gpus
        )
        sim._pending = SortedList(
            zip(
                sim._priority[pending_out[: r.n_pending]].tolist(),
                pending_out[: r.n_pending].tolist(),
                strict=True,
            )
        )
        if error == _ERR_STALLED:
            raise sim._stalled(f"nothing has run for {STALL_LIMIT_S / 86400:.0f} simulated days")
        return True

    def _in_place_arrays(self) -> list[np.ndarray]:
        """The simulator's arrays the kernel updates in place."""
        arrays = _state_and_job_arrays(self.sim)
        if self.sim.power is not None:
            arrays.append(self.sim.power.idle_since)
        return arrays

    def _write_back_rounds(self, r: _Replay, round_seq: int) -> None:
        """What the rounds leave: the adapter's counts, the next round on the heap, the policy's state."""
        sim, plan = self.sim, self.plan
        plan["rounds_done"](int(r.rounds), int(r.round_decisions), bool(r.rounds_stopped))
        plan["policy_done"]()
        sim._heap.clear()
        if not r.rounds_stopped:
            sim._heap.append(
                (r.next_round, KIND_CALLBACK, round_seq, -1, (plan["round_callback"], sim.actions))
            )
        sim._pass_due = False

    def _write_back(
        self,
        r: _Replay,
        alloc_of_job: np.ndarray,
        alloc_milli: np.ndarray,
        log: np.ndarray,
        series: np.ndarray,
    ) -> None:
        """What the Python loop leaves in the simulator, from the kernel's results."""
        sim = self.sim
        state = sim.state
        started = np.flatnonzero(alloc_of_job >= 0)
        done = started[sim.status[started] == STATUS_DONE]
        sim.now = r.now
        sim._last_start = r.last_start
        sim._released = bool(r.released)
        sim._next_arrival = math.inf
        sim._seq += r.n_pushes
        sim.running_changes += r.n_allocs + len(done)
        state.allocated_milli = int(r.allocated_milli)
        state.nodes_busy = int(r.nodes_busy)
        state.release_epoch = int(r.release_epoch)
        # Per job, as Simulator.start, _begin_running, _finish and _give_back leave them (the kernel keeps rate,
        # remaining work, last update and version itself).
        sim.share[started] = alloc_milli[alloc_of_job[started]]
        sim.last_alloc[started] = alloc_of_job[started]
        sim.hold_since[started] = sim.start_s[started]
        held = sim.end_s[done] - sim.start_s[done]
        sim.attained_gpu_s[done] += sim.jobs.num_gpu[done] * held
        sim.executed_s[done] += held
        sim.last_stop[done] = sim.end_s[done]
        counts = sim.changes.counts
        counts[ARRIVED] += int(r.arrivals)
        counts[TAKEN] += int(r.n_allocs)
        counts[LEFT] += len(done)
        counts[RELEASED] += len(done)
        if r.decisions:
            sim.changes.decided()
        sim.log.adopt_rows(log.reshape(-1, 8))
        if sim.power is not None:
            sim.power.watch._last_queue = int(r.n_pending)
        rec = self.recorder
        if rec is not None:
            rec.allocated_gpu_seconds = r.gpu_seconds
            rec.last_time = r.last_time
            rec.series.adopt_rows(series[: r.n_series * 5].reshape(-1, 5))

    def _write_placements(
        self,
        r: _Replay,
        alloc_milli: np.ndarray,
        alloc_share_start: np.ndarray,
        share_node: np.ndarray,
        share_cpu: np.ndarray,
        share_mem: np.ndarray,
        share_gpu_start: np.ndarray,
        share_gpus: np.ndarray,
    ) -> None:
        """The allocation log's placements, one per start, as columns (their tuples are made when read)."""
        shares, allocs = int(r.n_shares), int(r.n_allocs)
        columns = PlacementColumns(
            alloc_share_start[: allocs + 1].copy(),
            share_node[:shares].copy(),
            share_cpu[:shares].copy(),
            share_gpu_start[: shares + 1].copy(),
            share_gpus[: r.n_gpus].copy(),
        )
        self.sim.log.add_compiled(columns, share_mem[:shares], alloc_milli[:allocs])


def _adopt_log(lib: ctypes.CDLL, r: _Replay) -> np.ndarray:
    """The kernel's log rows as an array that owns its buffer (freed with the kernel's allocator once no array
    refers to it): 10^6 jobs write ~150 MB of rows, better not copied."""
    address = ctypes.cast(r.log, ctypes.c_void_p).value
    if not address:
        return np.zeros(0)
    buffer = (ctypes.c_double * max(int(r.n_log) * 8, 1)).from_address(address)
    weakref.finalize(buffer, lib.ws_free, ctypes.c_void_p(address))
    r.log = None
    rows: np.ndarray = np.frombuffer(memoryview(buffer), dtype=np.float64)
    return rows[: int(r.n_log) * 8]


def _adopt_series(lib: ctypes.CDLL, r: _Replay, series: np.ndarray) -> np.ndarray:
    """The recorder's rows: `series`, or the kernel's own buffer where rounds outgrew it (a copy, then freed)."""
    if not r.series_owned:
        return series
    address = ctypes.cast(r.series, ctypes.c_void_p).value
    assert address, "the kernel owns a series buffer"
    rows = np.ctypeslib.as_array((ctypes.c_double * (int(r.n_series) * 5 or 1)).from_address(address)).copy()
    lib.ws_free(ctypes.c_void_p(address))
    r.series = None
    r.series_owned = 0
    return rows


def _sharing_mirrored(sim: Simulator, shared: np.ndarray) -> bool:
    """Whether the kernel's time-slicing reproduces the simulator's speeds and loads of these shared pods: the
    plain sharing model (no measured one) whose loads add up, no sharing noise, no measured pairs or
    utilisations, no GPU memory to check between co-runners, no checkpoints to settle."""
    perf = sim.perf
    sharing = perf.sharing
    return (
        type(sharing) is SharingModel
        and sharing.power_overlap == 1.0
        and perf.sharing_noise <= 0
        and not perf.sources
        and not perf._measured_util
        and not perf._measured_load
        and not (perf.memory[shared] > 0).any()
        and not (sim.ckpt_interval[shared] > 0).any()
        and sim.version.dtype == np.int64
    )


def _only_first_round(sim: Simulator, plan: dict[str, Any]) -> bool:
    """Whether the heap holds just the first round, at the rounds' origin, as RoundScheduler.on_start puts it."""
    if len(sim._heap) != 1:
        return False
    time, kind, _, ref, payload = sim._heap[0]
    return (
        kind == KIND_CALLBACK
        and ref == -1
        and time == plan["round_origin"] == sim.now
        and isinstance(payload, tuple)
        and payload[0] == plan["round_callback"]
        and payload[1] is sim.actions
    )


def compiled_replay(sim: Simulator) -> CompiledReplay | None:
    """The compiled loop for this run, or None where it does not apply (see the module docstring)."""
    if sim.check or not kernels.enabled():
        return None
    native_plan = getattr(sim.scheduler, "native_plan", None)
    plan = native_plan() if callable(native_plan) else None
    if not plan or plan.get("placement") not in PLACEMENTS:
        return None
    rounds = plan.get("rounds")
    known = plan.get("queue") in QUEUE_MODES if rounds is None else rounds in ROUND_MODES
    if not known:
        return None
    scheduler = sim.scheduler
    if not (scheduler.decide_on_arrival and scheduler.decide_on_release):
        return None
    # Rounds: the first one, which the adapter's on_start put on the heap, and nothing else.
    heap_ok = not sim._heap if rounds is None else _only_first_round(sim, plan)
    if not heap_ok or sim._pending or sim._deferred or sim.running or len(sim.log) or sim.log.placements:
        return None
    if (sim.status != STATUS_FUTURE).any() or not sim.state.available.all():
        return None
    power = sim.power
    if power is not None:
        manager = type(power.manager)
        if (
            manager.on_job_start is not PowerManager.on_job_start
            or manager.on_node_idle is not PowerManager.on_node_idle
            or power.transitions
            or not (power.power_state == ON).all()
            or not _in_place_ok(power.idle_since)
        ):
            return None
    recorders = [obs for obs in sim.observers if type(obs) is TimeSeriesRecorder]
    if len(recorders) > 1:
        return None
    for obs in sim.observers:
        if type(obs) is TimeSeriesRecorder:
            continue
        if any(getattr(type(obs), hook) is not getattr(Observer, hook) for hook in _PER_EVENT_HOOKS):
            return None
    jobs, book, perf, state = sim.jobs, sim.book, sim.perf, sim.state
    if book.per_node is not None or perf.profiles is not None or perf.modelled.any():
        return None
    runs = ~book.never_fits
    milli, ngpu = jobs.gpu_milli[runs], jobs.num_gpu[runs]
    share = (ngpu == 1) & (milli > 0) & (milli < MILLI)
    whole = np.where(ngpu > 0, (milli == MILLI) | share, (milli == 0) | (milli == MILLI))
    if not whole.all() or np.isnan(sim._priority).any() or not np.isfinite(jobs.submit_s).all():
        return None
    if share.any() and not _sharing_mirrored(sim, np.flatnonzero(runs)[share]):
        return None
    if rounds is not None and (share.any() or not (ngpu > 0).all()):
        return None  # Tiresias's bookkeeping of what waits and runs is mirrored for jobs on whole GPUs only
    if not np.isfinite(sim.remaining[runs]).all():
        return None
    if not _in_place_ok(*_state_and_job_arrays(sim)):
        return None
    if state.gpu_left.dtype != np.int64 or state.gpu_pod_kinds.shape[1] != state.gpu_left.shape[1] + 1:
        return None
    lib = kernels.load("replay_kernel")
    if lib is None:
        return None
    lib.ws_replay_size.restype = ctypes.c_int64
    if lib.ws_replay_size() != ctypes.sizeof(_Replay):
        return None  # a stale or foreign library: never pass it a struct of another layout
    lib.ws_replay.restype = ctypes.c_int64
    lib.ws_replay.argtypes = [ctypes.POINTER(_Replay), ctypes.c_int64]
    return CompiledReplay(sim, lib, plan, recorders[0] if recorders else None)
