"""Packing mode's pod loop compiled (``packing_kernel.c``), for the runs it reproduces exactly, and when it applies.

A packing run spends its time placing pods one by one: the filter, a score for every feasible node, the GPUs, the
allocation and the observer's per-pod columns, each a few numpy calls on small arrays. :func:`compiled_packing`
hands the whole loop to the kernel when every part of it is one the kernel mirrors, and gives back the same
outcome the Python loop gives (the same placements, the same time series bit for bit, the cluster state left as
the Python loop leaves it; tests/unit/test_native_packing.py runs both).

It applies when:

* the placement policy says how to run it compiled (``native_packing_plan()``: first-fit, best-fit, FGD, PWR and
  the ``pwr_<W1>_fgd_<W2>`` weighted sums, by exact type);
* every observer says how to compute its columns compiled (``native_packing_plan()``; the fragmentation/power
  observer of the FGD/PWR experiment), at most one of them;
* no invariant checks; no gang (a pod larger than any node) and no pod of several partial GPUs among the pods;
* every power value of the binary power models is a whole number of watts (sums then exact in any order).

FGD's score is ``int64(100 * sigmoid(x))`` through numpy's ``exp``; the kernel computes it with the C library's
``exp`` and hands any value within 1e-9 of an integer back to numpy (:func:`exact_score`), so that truncation
gives what the Python code gives (packing_kernel.c explains the bound).

Anything else, or no C compiler, runs the Python loop (engine/packing.py).
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.cluster import MILLI, ClusterState
from ..core.placement import NodeShare, Placement
from . import kernels

PLACEMENTS = {"first-fit": 0, "best-fit": 1, "weighted": 2}
GPU_CHOICES = {"best": 0, "fgd": 1, "pwr": 2}
CANDIDATE_BUDGET = 8 << 20  # node entries in the kernel's per-request-class candidate lists (64 MB)
STATE_ARRAYS = (
    "gpu_left",
    "cpu_left",
    "mem_left",
    "free_gpus",
    "gpu_left_total",
    "max_gpu_left",
    "jobs_on_node",
    "gpu_pod_kinds",
)
_ERRORS = {2: "out of memory", 3: "the exact FGD score callback failed"}

_I64 = ctypes.c_int64
_F64 = ctypes.c_double
_PI = ctypes.POINTER(ctypes.c_int64)
_PF = ctypes.POINTER(ctypes.c_double)
_PU8 = ctypes.POINTER(ctypes.c_uint8)
EXACT_SCORE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)


class _Frag(ctypes.Structure):
    """``Frag`` of packing_kernel.c."""

    _fields_ = [
        *[(name, _I64) for name in ("n_thr", "n_cls", "scale", "div", "access_rows", "all_access")],
        *[(name, _PI) for name in ("thr", "cls_t", "cls_cpu", "cls_num", "cls_w", "node_model")],
        ("acc", _PU8),
    ]


class _Power(ctypes.Structure):
    """``Power`` of packing_kernel.c."""

    _fields_ = [
        ("cpu_max_w", _F64),
        ("cpu_idle_w", _F64),
        ("milli_per_core", _I64),
        ("cores_per_socket", _I64),
        ("gpu_idle_w", _PF),
        ("gpu_max_w", _PF),
        ("gpu_count", _PI),
        ("real_cores", _PI),
        ("sockets", _PI),
    ]


class _Packing(ctypes.Structure):
    """``Packing`` of packing_kernel.c, field for field."""

    _fields_ = [
        *[
            (name, _I64)
            for name in (
                "n_pods",
                "n_nodes",
                "width",
                "n_jobs",
                "placement",
                "w_pwr",
                "w_fgd",
                "gpus_by",
                "rank_weight",
                "n_classes",
                "observe",
                "total_milli",
                "fgd_zero_score",
                "allocated_milli",
                "nodes_busy",
                "arrived",
                "error",
                "exact_calls",
            )
        ],
        ("order", _PI),
        *[(name, _PI) for name in ("num_gpu", "gpu_milli", "cpu_milli", "mem_mib", "mask_id", "req_class")],
        ("feas_class", _PI),
        ("n_feas_classes", _I64),
        ("candidate_budget", _I64),
        ("never_fits", _PU8),
        ("node_masks", _PU8),
        ("rank", _PI),
        ("available", _PU8),
        *[(name, _PI) for name in STATE_ARRAYS[:-1]],  # the cluster state, in STATE_ARRAYS' order
        ("pod_kinds", _PI),  # gpu_pod_kinds
        ("fgd", _Frag),
        ("pwr", _Power),
        ("obs_frag", _Frag),
        ("obs_power", _Power),
        ("obs_frag_scaled", _PI),
        ("obs_node_power", _PF),
        ("obs_frag_total", _I64),
        ("obs_power_total", _F64),
        ("exact_score", EXACT_SCORE),
        ("placed", _PU8),
        ("out_node", _PI),
        ("out_gpus", _PI),
        ("series", _PF),
    ]


def _i64(values: Any) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int64)


def _u8(values: Any) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.uint8)


def _f64(values: Any) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float64)


class _Keep:
    """Holds every array handed to the kernel alive for the call."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []

    def ptr(self, arr: np.ndarray, kind: Any) -> Any:
        if not arr.flags.c_contiguous:
            raise ValueError("compiled packing needs C-contiguous arrays")
        self.arrays.append(arr)
        return arr.ctypes.data_as(kind)


def _frag(model: Any, keep: _Keep) -> _Frag:
    """A FragModel (policies/fgd.py) as the kernel reads it."""
    acc = _u8(model.acc)
    return _Frag(
        n_thr=len(model.thr),
        n_cls=len(model.cls_t),
        scale=model.scale,
        div=max(model.scale, 1),
        access_rows=acc.shape[0],
        all_access=int(model.all_access),
        thr=keep.ptr(_i64(model.thr), _PI),
        cls_t=keep.ptr(_i64(model.cls_t), _PI),
        cls_cpu=keep.ptr(_i64(model.cls_cpu), _PI),
        cls_num=keep.ptr(_i64(model.cls_num), _PI),
        cls_w=keep.ptr(_i64(model.cls_w), _PI),
        node_model=keep.ptr(_i64(model.node_model), _PI),
        acc=keep.ptr(acc, _PU8),
    )


def _power(model: Any, keep: _Keep) -> _Power:
    """A BinaryPowerModel (energy/binary.py) as the kernel reads it."""
    return _Power(
        cpu_max_w=float(model.cpu.max_w),
        cpu_idle_w=float(model.cpu.idle_w),
        milli_per_core=int(model.milli_per_core),
        cores_per_socket=int(model.cpu.cores_per_socket),
        gpu_idle_w=keep.ptr(_f64(model.gpu_idle_w), _PF),
        gpu_max_w=keep.ptr(_f64(model.gpu_max_w), _PF),
        gpu_count=keep.ptr(_i64(model.gpu_count), _PI),
        real_cores=keep.ptr(_i64(model.real_cores), _PI),
        sockets=keep.ptr(_i64(model.sockets), _PI),
    )


def _whole_watts(model: Any) -> bool:
    values = np.concatenate([model.gpu_idle_w, model.gpu_max_w, [model.cpu.max_w, model.cpu.idle_w]])
    return bool(
        np.isfinite(values).all() and (values == np.round(values)).all() and np.abs(values).max() < 2**40
    )


def _supported_frag(model: Any) -> bool:
    return all(
        hasattr(model, a) for a in ("thr", "cls_t", "cls_cpu", "cls_num", "cls_w", "acc", "node_model")
    )


def _plan(placement: Any, observers: Sequence[Any]) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    hook = getattr(placement, "native_packing_plan", None)
    plan = hook() if callable(hook) else None
    if not plan or plan.get("placement") not in PLACEMENTS or plan.get("gpus_by") not in GPU_CHOICES:
        return None
    if plan.get("fgd") is not None and not _supported_frag(plan["fgd"]):
        return None
    if plan.get("pwr") is not None and not _whole_watts(plan["pwr"]):
        return None
    observed = []
    for obs in observers:
        hook = getattr(obs, "native_packing_plan", None)
        obs_plan = hook() if callable(hook) else None
        if obs_plan is None:
            return None
        observed.append(obs_plan)
    if len(observed) > 1:
        return None
    obs = observed[0] if observed else None
    if obs is not None and (not _supported_frag(obs["frag"]) or not _whole_watts(obs["power"])):
        return None
    return plan, obs


def compiled_packing(
    placement: Any,
    observers: Sequence[Any],
    book: Any,
    state: ClusterState,
    order: np.ndarray,
) -> tuple[np.ndarray, list[Placement | None], np.ndarray, int] | None:
    """Run packing's pod loop compiled, or return None (nothing changed) where it does not apply.

    Call after ``bind``, ``prepare`` and every observer's ``on_start``. Returns (placed per pod, placements, the
    time-series rows, GPU milli arrived); `state` is left as the Python loop leaves it.
    """
    if not kernels.enabled():
        return None
    planned = _plan(placement, observers)
    if planned is None:
        return None
    plan, obs = planned
    jobs = book.jobs
    if book.per_node is not None or bool(book.gang[order].any()):
        return None
    partial = (jobs.num_gpu > 1) & (jobs.gpu_milli > 0) & (jobs.gpu_milli < MILLI)
    if bool(partial[order].any()) or state.gpu_pod_kinds.shape[1] != state.gpu_left.shape[1] + 1:
        return None
    if not all(
        a.dtype == np.int64 and a.flags.c_contiguous and a.flags.writeable
        for a in (getattr(state, name) for name in STATE_ARRAYS)
    ):
        return None  # the kernel updates the state's own arrays in place
    lib = kernels.load("packing_kernel")
    if lib is None:
        return None
    lib.ws_packing_size.restype = ctypes.c_int64
    if lib.ws_packing_size() != ctypes.sizeof(_Packing):
        return None  # a stale or foreign library: never pass it a struct of another layout
    lib.ws_packing.restype = ctypes.c_int64
    lib.ws_packing.argtypes = [ctypes.POINTER(_Packing)]
    return _run(lib, plan, obs, book, state, _i64(order))


def _request_classes(jobs: Any) -> tuple[np.ndarray, int]:
    """FGD's cache key per job: equal (CPU, GPU milli, GPU count), equal id."""
    key = np.stack([jobs.cpu_milli, jobs.gpu_milli, jobs.num_gpu], axis=1).astype(np.int64)
    if len(key) == 0:
        return np.zeros(0, dtype=np.int64), 0
    uniq, inverse = np.unique(key, axis=0, return_inverse=True)
    return _i64(inverse.reshape(-1)), len(uniq)


def _run(
    lib: ctypes.CDLL,
    plan: dict[str, Any],
    obs: dict[str, Any] | None,
    book: Any,
    state: ClusterState,
    order: Any,
) -> tuple[np.ndarray, list[Placement | None], np.ndarray, int]:
    jobs, spec = book.jobs, book.spec
    keep = _Keep()
    n_pods = int(order.size)
    width = int(state.gpu_left.shape[1])
    has_gpu = jobs.num_gpu > 0
    mask_id = _i64(np.where(has_gpu, book.spec_id, -1))
    req_class, n_classes = _request_classes(jobs)
    placed = np.zeros(n_pods, dtype=np.uint8)
    out_node = np.full(n_pods, -1, dtype=np.int64)
    out_gpus = np.full((n_pods, width), -1, dtype=np.int64)
    cols = 7 if obs is not None else 4
    series = np.zeros((n_pods, cols), dtype=np.float64)
    exact: Callable[[int], int] = plan.get("exact_score") or (lambda delta: -1)
    failures: list[BaseException] = []

    def exact_score(delta: int) -> int:
        try:
            return int(exact(int(delta)))
        except BaseException as exc:  # an exception cannot cross the C frame: report it after the call
            failures.append(exc)
            return -1

    callback = EXACT_SCORE(exact_score)
    p = _Packing(
        n_pods=n_pods,
        n_nodes=spec.num_nodes,
        width=width,
        n_jobs=len(jobs),
        placement=PLACEMENTS[plan["placement"]],
        w_pwr=int(plan.get("w_pwr", 0)),
        w_fgd=int(plan.get("w_fgd", 0)),
        gpus_by=GPU_CHOICES[plan["gpus_by"]],
        rank_weight=int(plan["rank_weight"]),
        n_classes=n_classes,
        observe=int(obs is not None),
        total_milli=int(spec.total_gpus) * MILLI,
        fgd_zero_score=int(exact(0)) if plan.get("exact_score") else 50,
        allocated_milli=int(state.allocated_milli),
        nodes_busy=int(state.nodes_busy),
        arrived=0,
        order=keep.ptr(order, _PI),
        num_gpu=keep.ptr(_i64(jobs.num_gpu), _PI),
        gpu_milli=keep.ptr(_i64(jobs.gpu_milli), _PI),
        cpu_milli=keep.ptr(_i64(jobs.cpu_milli), _PI),
        mem_mib=keep.ptr(_i64(jobs.memory_mib), _PI),
        mask_id=keep.ptr(mask_id, _PI),
        req_class=keep.ptr(req_class, _PI),
        feas_class=keep.ptr(_i64(book.request_class), _PI),
        n_feas_classes=int(book.request_class.max(initial=-1)) + 1,
        candidate_budget=CANDIDATE_BUDGET,
        never_fits=keep.ptr(_u8(book.never_fits), _PU8),
        node_masks=keep.ptr(_u8(book.node_mask_by_spec), _PU8),
        rank=keep.ptr(_i64(plan["rank"]), _PI),
        available=keep.ptr(_u8(state.available), _PU8),
        gpu_left=keep.ptr(state.gpu_left, _PI),
        cpu_left=keep.ptr(state.cpu_left, _PI),
        mem_left=keep.ptr(state.mem_left, _PI),
        free_gpus=keep.ptr(state.free_gpus, _PI),
        gpu_left_total=keep.ptr(state.gpu_left_total, _PI),
        max_gpu_left=keep.ptr(state.max_gpu_left, _PI),
        jobs_on_node=keep.ptr(state.jobs_on_node, _PI),
        pod_kinds=keep.ptr(state.gpu_pod_kinds, _PI),
        exact_score=callback,
        placed=keep.ptr(placed, _PU8),
        out_node=keep.ptr(out_node, _PI),
        out_gpus=keep.ptr(out_gpus, _PI),
        series=keep.ptr(series, _PF),
    )
    if plan.get("fgd") is not None:
        p.fgd = _frag(plan["fgd"], keep)
    if plan.get("pwr") is not None:
        p.pwr = _power(plan["pwr"], keep)
    if obs is not None:
        p.obs_frag = _frag(obs["frag"], keep)
        p.obs_power = _power(obs["power"], keep)
        p.obs_frag_scaled = keep.ptr(_i64(obs["frag_scaled"]).copy(), _PI)
        p.obs_node_power = keep.ptr(_f64(obs["node_power"]).copy(), _PF)
        p.obs_frag_total = int(obs["frag_total"])
        p.obs_power_total = float(obs["power_total"])
    status = lib.ws_packing(ctypes.byref(p))
    if failures:
        raise failures[0]
    if status != 0:
        raise RuntimeError(f"compiled packing failed: {_ERRORS.get(status, status)}")
    state.allocated_milli = int(p.allocated_milli)
    state.nodes_busy = int(p.nodes_busy)
    # ~10^4 tuples at once: the cyclic garbage collector would scan the heap meanwhile, and tuples of ints never
    # form cycles.
    collecting = gc.isenabled()
    gc.disable()
    try:
        placements = _placements(jobs, order, out_node, out_gpus)
    finally:
        if collecting:
            gc.enable()
    return placed.astype(bool), placements, series, int(p.arrived)


def _placements(
    jobs: Any, order: np.ndarray, out_node: np.ndarray, out_gpus: np.ndarray
) -> list[Placement | None]:
    """One NodeShare per placed pod (its whole CPU and memory on one node), None for a dropped one."""
    num_gpu = jobs.num_gpu[order].tolist()
    cpu = jobs.cpu_milli[order].tolist()
    mem = jobs.memory_mib[order].tolist()
    gpu_rows = out_gpus.tolist()
    new = tuple.__new__  # NodeShare's fields in order, without its Python-level __new__ (10^4 pods)
    return [
        None if node < 0 else (new(NodeShare, (node, tuple(row[:ng]), c, m)),)
        for node, ng, row, c, m in zip(out_node.tolist(), num_gpu, gpu_rows, cpu, mem, strict=True)
    ]
