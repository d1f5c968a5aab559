"""Communication-contention-aware scheduling of per-iteration DAG jobs (HKBU, ICDCS 2020; docs/hkbu-dag.md).

S. Wang, S. Shi, C. Wang, X. Chu, "Communication contention aware scheduling of multiple deep learning training
jobs" (ICDCS 2020); simulator `HKBU-HPML/dl-scheduling`, `online/` (no licence: every rule below is described
from that code and reimplemented; nothing is copied). This module is its own event-driven simulator, as upstream
has its own: jobs are DAGs (forward -> backward on every worker -> one all-reduce), not the engine's fluid jobs.

What the upstream simulator does (files in `online/`, commit d5398bd unless said otherwise):

* **Cluster** (`job_master.py` `CLUSTER`, `cluster.py`): 16 nodes x 4 GPUs of 32,768 MB. A GPU may host several
  jobs' workers while its memory lasts (each worker holds `train_mem`); it runs one task at a time.
* **Placement** (`job_master.py` `allocate`): waiting jobs are ordered by the placement policy (`ssf`: least
  total GPU time first; `sf`: fewest workers; `stf`: shortest per-worker time; `blf`: most workers, then longest;
  `random`), and each in turn gets GPUs from the GPU pick, or waits if too few GPUs have the memory. Picks
  (`pick_gpus`): `lwf<N>` (least workload first): a job of at most N workers takes the GPUs of least workload
  anywhere (ties by node); a larger one walks the nodes by least mean GPU workload and takes their GPUs, least
  loaded first; `bp`: the first GPUs with the memory, in index order; `random`. A GPU's workload is the compute
  time its jobs still have plus, for jobs spread over several nodes, `model_size x 7.8125` ms per iteration (the
  1 Gb/s estimate, 1000/128 ms per MB), counted down as tasks finish (`cluster.py` `gpu.add_job`, `job.py`).
* **Task order** (`job_master.py` `schedule`): an idle GPU runs the ready task (forward or backward) of the job on
  it with the **shortest remaining service** (SRSF, `remain_compute_cumul_workload`: compute time left over all
  workers); comm tasks ready to start are tried in the same order.
* **Comm** (`job.py` `dag_task.update_comm_time`, `cluster.py` `net_conf`): a job on one node synchronises at once;
  a job on several nodes runs one all-reduce of `model_size` MB at speed 1/((k - 1) eta + beta k) MB/ms, k the
  number of comm tasks on its busiest node, beta = 0.856, eta = 0.235; the speed is recomputed whenever k changes
  and the transferred volume carried over.
* **Admission** (`job.py` `is_all_nodes_free`): with threshold T, a comm task starts only if at most T comm tasks
  already run on every node of the job. AdaDUAL (T = 1 with `adaDual`): with none running it starts; with one, it
  starts only if that task's remaining volume is at least 2(beta + eta)/beta times the new job's model size (so the
  overlap costs the running task less than it saves the new one); with two or more it waits.

Reconstructed (docs/hkbu-dag.md §9 lists each with its reason):

* `lswf` and `lgwf` are named in upstream run scripts (`run_simulator.sh`) but defined in no stored version; here
  `lgwf` is lwf's GPU-level branch for every job (least-loaded GPUs anywhere) and `lswf` its node-level branch for
  every job (least-loaded servers first, GPUs within them least-loaded first). `lwf` without a number is `lwf2`,
  the threshold of upstream's default command line (`blf-2-srsf-0-true`).
* Time is continuous (upstream ticks 1 ms and ends a comm at the first tick after its end); a solo comm task runs at
  1/beta from its start (upstream sets 1.28 MB/ms but recomputes it to 1/beta in the same tick before any transfer).
* AdaDUAL compares against every comm task on the job's nodes (upstream collects them from the first node with the
  highest count only); placement is retried at arrivals and completions (when memory can change), not every tick.
* Energy (upstream has none): a GPU draws the power model's busy power at its job's utilisation while it runs a
  forward or backward task, busy power at `comm_load` while one of its jobs all-reduces and it computes nothing,
  and idle power otherwise; nodes add their base and idle CPU draw for the whole makespan.

This file (~670 lines) stays whole: it is one reimplementation of one upstream simulator, its event loop
(:class:`DagSimulator`) with the placement and communication rules it calls, kept together so that it reads
against the upstream code and docs/hkbu-dag.md; the task model is ``workloads/hkbu_dag.py``.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.cluster import ClusterSpec
from ..core.errors import UnknownNameError, WattschedError
from ..energy.power_models import POWER_MODELS
from ..energy.utilisation import MODEL_GPU_UTIL, TRAINING_DEFAULT_UTIL
from ..workloads.hkbu_dag import DagJobs

# Contention model, active constants (`online/cluster.py` `net_conf`, 10 GbE, ms and MB).
BETA = 0.856
ETA = 0.235
FULL_SPEED = 1.28  # MB/ms upstream sets at a comm start; overwritten by 1/BETA in the same tick (module doc)
ALPHA = 0.0
ADADUAL_RATIO = 2.0 * (BETA + ETA) / BETA  # `is_all_nodes_free`: judge = 2(beta + eta)/beta
WORKLOAD_MS_PER_MB = 1000.0 / 128.0  # `pick_gpus`: comm estimate model_size x 7.8125 ms per iteration
DEFAULT_LWF_THRESHOLD = 2
# GPU utilisation while a GPU only all-reduces (reconstructed: NCCL's ring kernels keep a few SMs and the copy
# engines busy, far from a compute kernel; no measurement of this was found; docs/hkbu-dag.md §5).
DEFAULT_COMM_LOAD = 0.2
# Node CPUs for the static node draw (reconstructed: upstream gives host memory only, 16 GB).
NODE_CPU_MILLI = 32_000
NODE_MEMORY_MIB = 16_384
# Network names of the job profiles as the utilisation table spells them.
UTIL_NAME = {"inception-v3": "inception3"}

_EPS = 1e-9
_READY_FW, _READY_BW, _RUN_FW, _RUN_BW, _WAIT = 0, 1, 2, 3, 4
_TASK, _COMM = 0, 1


def comm_speed(k, beta: float = BETA, eta: float = ETA):
    """MB/ms of each of k concurrent comm tasks on a node: 1/((k - 1) eta + beta k) (`online/job.py`)."""
    k = np.asarray(k, dtype=np.float64)
    if np.any(k < 1):
        raise WattschedError("comm speed needs at least one comm task on the node")
    out = 1.0 / ((k - 1.0) * eta + beta * k)
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class DagCluster:
    """Nodes x GPUs of one model and memory (upstream `CLUSTER`: 16 x 4 GPUs of 32,768 MB; V100 assumed)."""

    num_nodes: int = 16
    gpus_per_node: int = 4
    gpu_mem_mb: float = 32768.0
    gpu_model: str = "V100"

    def __post_init__(self) -> None:
        if self.num_nodes < 1 or self.gpus_per_node < 1:
            raise WattschedError("a DAG cluster needs at least one node and one GPU per node")
        if self.gpu_mem_mb <= 0:
            raise WattschedError("GPU memory must be positive")

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def spec(self) -> ClusterSpec:
        n = self.num_nodes
        return ClusterSpec.from_arrays(
            name=f"hkbu-dag-{n}x{self.gpus_per_node}",
            node_names=[f"node{i}" for i in range(n)],
            cpu_milli=[NODE_CPU_MILLI] * n,
            memory_mib=[NODE_MEMORY_MIB] * n,
            gpu_count=[self.gpus_per_node] * n,
            gpu_model_names=[self.gpu_model] * n,
        )


@dataclass(frozen=True)
class CommPolicy:
    """Comm admission: at most `threshold` comm tasks already on each of the job's nodes (None: no limit)."""

    name: str
    threshold: int | None
    adadual: bool = False

    def describe(self) -> str:
        if self.threshold is None:
            return "unaware: every comm task starts at once"
        if self.adadual and self.threshold == 1:
            return f"AdaDUAL (threshold 1, joins a running task only if it has >= {ADADUAL_RATIO:.3f}x left)"
        return (
            f"threshold {self.threshold}: starts only if at most {self.threshold} comm task(s) on its nodes"
        )


COMM_MODES: dict[str, CommPolicy] = {
    "adadual": CommPolicy("adadual", 1, True),
    "exclusive": CommPolicy("exclusive", 0, False),
    "unaware": CommPolicy("unaware", None, False),
}


def comm_policy(name: str) -> CommPolicy:
    """A named mode (`adadual`, `exclusive`, `unaware`) or `thres-N` (at most N comm tasks already running)."""
    if name in COMM_MODES:
        return COMM_MODES[name]
    m = re.fullmatch(r"thres-(\d+)", name)
    if m:
        return CommPolicy(name, int(m.group(1)), False)
    raise UnknownNameError("comm admission mode", name, [*COMM_MODES, "thres-N"])


def _stable(keys: list[np.ndarray]) -> np.ndarray:
    """Positions sorted by keys (first key primary), ties kept in queue order."""
    return np.lexsort((np.arange(keys[0].size), *reversed(keys)))


# Placement order: queue positions -> order (`allocate`); a registry, no if/elif over names.
PlacementOrder = Callable[[DagJobs, np.ndarray, np.random.Generator], np.ndarray]
PLACEMENT_ORDERS: dict[str, PlacementOrder] = {
    "ssf": lambda jobs, q, rng: _stable([jobs.service_ms[q]]),
    "sf": lambda jobs, q, rng: _stable([jobs.nworkers[q]]),
    "stf": lambda jobs, q, rng: _stable([jobs.compute_ms[q]]),
    "blf": lambda jobs, q, rng: _stable([-jobs.nworkers[q], -jobs.compute_ms[q]]),
    "random": lambda jobs, q, rng: rng.permutation(q.size),
}
GPU_PICKS = ("lwf", "lswf", "lgwf", "bp", "random")


# GPU pick name -> (picker, lwf threshold): lswf and lgwf are the two branches of upstream's lwf rule.
_PICK_NAMES: dict[str, tuple[str, int]] = {
    "lwf": ("lwf", DEFAULT_LWF_THRESHOLD),
    "lswf": ("lwf", 0),
    "lgwf": ("lwf", 1 << 30),
    "bp": ("bp", 0),
    "random": ("random", 0),
}


def parse_gpu_pick(name: str) -> tuple[str, int]:
    """(`lwf`, threshold) for lwf, lwfN, lswf (threshold 0) and lgwf (no threshold); (name, 0) for bp/random."""
    if name in _PICK_NAMES:
        return _PICK_NAMES[name]
    m = re.fullmatch(r"lwf(\d+)", name)
    if m is None:
        raise UnknownNameError("GPU pick", name, [*GPU_PICKS, "lwfN"])
    return "lwf", int(m.group(1))


def check_placement(name: str) -> str:
    if name not in PLACEMENT_ORDERS:
        raise UnknownNameError("placement policy", name, PLACEMENT_ORDERS)
    return name


def _pick_first(eligible, need, threshold, workload, gpus_per_node, rng) -> np.ndarray:
    return np.flatnonzero(eligible)[:need]


def _pick_random(eligible, need, threshold, workload, gpus_per_node, rng) -> np.ndarray:
    return rng.permutation(np.flatnonzero(eligible))[:need]


def _pick_least_workload(eligible, need, threshold, workload, gpus_per_node, rng) -> np.ndarray:
    gpu = np.arange(eligible.size)
    node = gpu // gpus_per_node
    if need <= threshold:  # GPU level: least workload anywhere, ties by node, then GPU index
        order = np.lexsort((gpu, node, workload))
    else:  # node level: nodes by least mean GPU workload (ties by index), GPUs least loaded within each
        node_load = workload.reshape(-1, gpus_per_node).mean(axis=1)
        node_rank = np.empty(node_load.size, dtype=np.int64)
        node_rank[np.argsort(node_load, kind="stable")] = np.arange(node_load.size)
        order = np.lexsort((gpu, workload, node_rank[node]))
    return order[eligible[order]][:need]


_PICKERS = {"bp": _pick_first, "random": _pick_random, "lwf": _pick_least_workload}


def pick_gpus(
    kind: str,
    threshold: int,
    need: int,
    mem_needed: float,
    mem_left: np.ndarray,
    workload: np.ndarray,
    gpus_per_node: int,
    rng: np.random.Generator,
) -> np.ndarray | None:
    """GPU indices for a job of `need` workers, or None if fewer GPUs have the memory (`pick_gpus` upstream)."""
    eligible = mem_left >= mem_needed - _EPS
    if int(eligible.sum()) < need:
        return None
    return _PICKERS[kind](eligible, need, threshold, workload, gpus_per_node, rng)


@dataclass
class DagResult:
    """One run: per-job times (ms), makespan, energy (J) and comm statistics."""

    arrival_ms: np.ndarray
    placed_ms: np.ndarray
    finish_ms: np.ndarray
    makespan_ms: float
    gpu_energy_j: float
    static_energy_j: float
    gpu_compute_ms: float  # GPU-ms running forward/backward tasks
    gpu_comm_only_ms: float  # GPU-ms all-reducing and computing nothing
    comm_tasks: int
    comm_ms_total: float  # summed comm task durations
    max_comm_per_node: np.ndarray  # most comm tasks ever concurrent on each node
    compute_log: list[tuple[int, int, int, str, float, float]] = field(default_factory=list, repr=False)
    comm_log: list[tuple[int, tuple[int, ...], float, float]] = field(default_factory=list, repr=False)
    admission_log: list[tuple[float, int, tuple[int, ...]]] = field(default_factory=list, repr=False)

    @property
    def jct_ms(self) -> np.ndarray:
        return self.finish_ms - self.arrival_ms

    @property
    def energy_j(self) -> float:
        return self.gpu_energy_j + self.static_energy_j


class DagSimulator:
    """The event-driven DAG simulator (module docstring). One instance runs once."""

    def __init__(
        self,
        jobs: DagJobs,
        cluster: DagCluster = DagCluster(),
        placement: str = "ssf",
        gpu_pick: str = "lwf",
        comm: str | CommPolicy = "adadual",
        seed: int = 0,
        power_model: str = "linear",
        comm_load: float = DEFAULT_COMM_LOAD,
        node_base_w: float | None = None,
        record: bool = False,
        beta: float = BETA,
        eta: float = ETA,
    ):
        self.jobs = jobs
        self.cluster = cluster
        self.order = PLACEMENT_ORDERS[check_placement(placement)]
        self.pick_kind, self.pick_threshold = parse_gpu_pick(gpu_pick)
        self.comm = comm if isinstance(comm, CommPolicy) else comm_policy(comm)
        if not 0.0 <= comm_load <= 1.0:
            raise WattschedError(f"comm_load must be in [0, 1], got {comm_load}")
        if beta <= 0 or eta < 0:
            raise WattschedError(f"contention constants need beta > 0 and eta >= 0, got {beta}, {eta}")
        self.beta, self.eta = float(beta), float(eta)
        self.rng = np.random.default_rng(seed)
        self.record = record
        too_wide = np.flatnonzero(jobs.nworkers > cluster.num_gpus)
        if too_wide.size:
            j = int(too_wide[0])
            raise WattschedError(
                f"job {j} needs {int(jobs.nworkers[j])} GPUs; the cluster has {cluster.num_gpus}"
            )
        too_big = np.flatnonzero(jobs.train_mem_mb > cluster.gpu_mem_mb)
        if too_big.size:
            j = int(too_big[0])
            raise WattschedError(
                f"job {j} needs {jobs.train_mem_mb[j]:g} MB per GPU; GPUs have {cluster.gpu_mem_mb:g} MB"
            )
        self._power_setup(power_model, comm_load, node_base_w)

    def _power_setup(self, name: str, comm_load: float, node_base_w: float | None) -> None:
        spec = self.cluster.spec()
        model = POWER_MODELS.create(name)
        model.bind(spec)
        node0 = np.zeros(1, dtype=np.int64)
        names = [UTIL_NAME.get(str(m), str(m)).lower() for m in self.jobs.model]
        util = np.array([MODEL_GPU_UTIL.get(n, TRAINING_DEFAULT_UTIL) for n in names], dtype=np.float64)
        # One GPU model on every node: per-job busy power, comm and idle power are node-independent.
        self.busy_w = [float(model.gpu_busy_w(np.array([u]), node0)[0]) for u in util.tolist()]
        self.comm_w = float(model.gpu_busy_w(np.array([comm_load]), node0)[0])
        self.idle_w = float(model.gpu_idle_w[0])
        base = model.default_node_base_w if node_base_w is None else float(node_base_w)
        cpu_idle = float(model.cpu_w(spec.cpu_milli[:1], node0)[0])
        self.node_static_w = base + cpu_idle
        self.power_description = {
            "power_model": name,
            "gpu_model": self.cluster.gpu_model,
            "gpu_idle_w": self.idle_w,
            "gpu_comm_w": self.comm_w,
            "comm_load": comm_load,
            "node_static_w": self.node_static_w,
        }

    # -- the run ----------------------------------------------------------------------------------------------

    def run(self) -> DagResult:
        jobs, cl = self.jobs, self.cluster
        n_jobs, n_gpus, gpn = len(jobs), cl.num_gpus, cl.gpus_per_node
        fw = jobs.fw_ms.tolist()
        bw = jobs.bw_ms.tolist()
        size = jobs.model_size_mb.tolist()
        mem = jobs.train_mem_mb.tolist()
        iters = jobs.iters.tolist()
        nworkers = jobs.nworkers.tolist()
        beta, eta = self.beta, self.eta

        mem_left = np.full(n_gpus, float(cl.gpu_mem_mb))
        workload = np.zeros(n_gpus)
        residents: list[list[tuple[int, int]]] = [[] for _ in range(n_gpus)]  # (job, worker), placement order
        running = [-1] * n_gpus  # job whose task runs on the GPU
        running_worker = [0] * n_gpus
        comm_count = [0] * n_gpus  # comm tasks of this GPU's jobs in progress
        power = [self.idle_w] * n_gpus
        mode = [0] * n_gpus  # what the GPU did since `since`: 0 idle, 1 all-reducing only, 2 computing
        since = [0.0] * n_gpus
        energy = [0.0] * n_gpus
        compute_ms = 0.0
        comm_only_ms = 0.0

        job_gpus: list[list[int]] = [[] for _ in range(n_jobs)]
        job_nodes: list[tuple[int, ...]] = [() for _ in range(n_jobs)]
        phase: list[list[int]] = [[] for _ in range(n_jobs)]
        waiting = [0] * n_jobs
        iter_done = [0] * n_jobs
        remaining = jobs.service_ms.astype(np.float64).tolist()
        comm_once = [0.0] * n_jobs
        placed_seq = [0] * n_jobs
        placed_ms = np.full(n_jobs, np.nan)
        finish_ms = np.full(n_jobs, np.nan)
        finished = [False] * n_jobs

        node_comm: list[set[int]] = [set() for _ in range(cl.num_nodes)]
        max_comm = np.zeros(cl.num_nodes, dtype=np.int64)
        comm_sent = [0.0] * n_jobs
        comm_speed_now = [0.0] * n_jobs
        comm_since = [0.0] * n_jobs
        comm_start = [0.0] * n_jobs
        comm_version = [0] * n_jobs
        comm_tasks = 0
        comm_total = 0.0

        compute_log: list = []
        comm_log: list = []
        admission_log: list = []
        record = self.record

        heap: list[tuple[float, int, int, int, int]] = []
        seq = 0
        arrival_order = np.lexsort((np.arange(n_jobs), jobs.arrival_ms)).tolist()
        arrivals = jobs.arrival_ms.tolist()
        next_arrival = 0
        queue: list[int] = []
        ready_comm: set[int] = set()  # all workers done since the last step
        blocked: set[int] = set()  # refused by comm admission, waiting
        dirty: set[int] = set()
        done = 0
        placements = 0

        def set_power(g: int, t: float) -> None:
            nonlocal compute_ms, comm_only_ms
            dt = t - since[g]
            if dt > 0:
                energy[g] += power[g] * dt
                if mode[g] == 2:
                    compute_ms += dt
                elif mode[g] == 1:
                    comm_only_ms += dt
            since[g] = t
            if running[g] >= 0:
                power[g], mode[g] = self.busy_w[running[g]], 2
            elif comm_count[g] > 0:
                power[g], mode[g] = self.comm_w, 1
            else:
                power[g], mode[g] = self.idle_w, 0

        def sync(j: int, t: float) -> bool:
            """All-reduce done: next iteration, or the job ends (True)."""
            nonlocal done
            waiting[j] = 0
            iter_done[j] += 1
            for g in job_gpus[j]:
                workload[g] -= comm_once[j]
            if iter_done[j] >= iters[j]:
                finished[j] = True
                finish_ms[j] = t
                done += 1
                for g in job_gpus[j]:
                    mem_left[g] += mem[j]
                    residents[g] = [r for r in residents[g] if r[0] != j]
                return True
            ph = phase[j]
            for w in range(len(ph)):
                ph[w] = _READY_FW
            dirty.update(job_gpus[j])
            return False

        def comm_left(c: int, t: float) -> float:
            return size[c] - comm_sent[c] - comm_speed_now[c] * (t - comm_since[c])

        def admit(j: int, t: float) -> bool:
            policy = self.comm
            if policy.threshold is None:
                return True
            busiest = max(len(node_comm[n]) for n in job_nodes[j])
            if not policy.adadual or policy.threshold != 1:
                return busiest <= policy.threshold
            if busiest == 0:
                return True
            if busiest > 1:
                return False
            others = set().union(*(node_comm[n] for n in job_nodes[j]))
            return all(comm_left(c, t) / size[j] >= ADADUAL_RATIO for c in others)

        def place(t: float) -> None:
            nonlocal placements
            q = np.asarray(queue, dtype=np.int64)
            order = self.order(jobs, q, self.rng)
            placed_now = []
            for pos in order.tolist():
                j = int(q[pos])
                gpus = pick_gpus(
                    self.pick_kind,
                    self.pick_threshold,
                    nworkers[j],
                    mem[j],
                    mem_left,
                    workload,
                    gpn,
                    self.rng,
                )
                if gpus is None:
                    continue
                gl = gpus.tolist()
                job_gpus[j] = gl
                job_nodes[j] = tuple(sorted({g // gpn for g in gl}))
                multi = len(job_nodes[j]) > 1
                comm_once[j] = size[j] * WORKLOAD_MS_PER_MB if multi else 0.0
                per_gpu = (fw[j] + bw[j]) * iters[j] + comm_once[j] * iters[j]
                for w, g in enumerate(gl):
                    mem_left[g] -= mem[j]
                    workload[g] += per_gpu
                    residents[g].append((j, w))
                phase[j] = [_READY_FW] * nworkers[j]
                placed_ms[j] = t
                placed_seq[j] = placements
                placements += 1
                dirty.update(gl)
                placed_now.append(j)
            if placed_now:
                taken = set(placed_now)
                queue[:] = [j for j in queue if j not in taken]

        def start_task(g: int, t: float) -> None:
            nonlocal seq
            best, best_w, best_key = -1, 0, None
            for j, w in residents[g]:
                p = phase[j][w]
                if p in (_READY_FW, _READY_BW):
                    key = (remaining[j], placed_seq[j])
                    if best_key is None or key < best_key:
                        best, best_w, best_key = j, w, key
            if best < 0:
                return
            j, w = best, best_w
            is_fw = phase[j][w] == _READY_FW
            phase[j][w] = _RUN_FW if is_fw else _RUN_BW
            running[g], running_worker[g] = j, w
            set_power(g, t)
            end = t + (fw[j] if is_fw else bw[j])
            if record:
                compute_log.append((g, j, w, "fw" if is_fw else "bw", t, end))
            seq += 1
            heapq.heappush(heap, (end, _TASK, seq, g, 0))

        def task_done(g: int, t: float) -> None:
            j, w = running[g], running_worker[g]
            running[g] = -1
            set_power(g, t)
            dirty.add(g)
            if phase[j][w] == _RUN_FW:
                phase[j][w] = _READY_BW
                remaining[j] -= fw[j]
                workload[g] -= fw[j]
            else:
                phase[j][w] = _WAIT
                remaining[j] -= bw[j]
                workload[g] -= bw[j]
                waiting[j] += 1
                if waiting[j] == nworkers[j]:
                    ready_comm.add(j)

        def comm_end(j: int, t: float, changed: set[int]) -> bool:
            nonlocal comm_total
            for n in job_nodes[j]:
                node_comm[n].discard(j)
                changed.add(n)
            for g in job_gpus[j]:
                comm_count[g] -= 1
                set_power(g, t)
            comm_total += t - comm_start[j]
            if record:
                comm_log.append((j, job_nodes[j], comm_start[j], t))
            return sync(j, t)

        def reprice(changed: set[int], t: float) -> None:
            """New speeds for the comm tasks on nodes whose count changed; carry the volume sent."""
            nonlocal seq
            touched: set[int] = set()
            for n in changed:
                touched |= node_comm[n]
            for c in sorted(touched):
                comm_sent[c] += comm_speed_now[c] * (t - comm_since[c])
                comm_since[c] = t
                k = max(len(node_comm[n]) for n in job_nodes[c])
                speed = 1.0 / ((k - 1) * eta + beta * k)
                comm_speed_now[c] = speed
                comm_version[c] += 1
                left = max(size[c] - comm_sent[c], 0.0)
                seq += 1
                heapq.heappush(heap, (t + left / speed, _COMM, seq, c, comm_version[c]))

        while done < n_jobs:
            t_heap = heap[0][0] if heap else np.inf
            t_arr = arrivals[arrival_order[next_arrival]] if next_arrival < n_jobs else np.inf
            t = min(t_heap, t_arr)
            if t == np.inf:
                raise WattschedError("DAG simulation stalled: jobs left but nothing can happen")
            changed: set[int] = set()
            freed = False
            # 1. Task and comm ends (upstream `update_status`).
            while heap and heap[0][0] <= t + _EPS:
                _, kind, _, a, version = heapq.heappop(heap)
                if kind == _TASK:
                    task_done(a, t)
                elif version == comm_version[a]:
                    freed |= comm_end(a, t, changed)
            # 2. Arrivals join the queue.
            arrived = False
            while next_arrival < n_jobs and arrivals[arrival_order[next_arrival]] <= t + _EPS:
                queue.append(arrival_order[next_arrival])
                next_arrival += 1
                arrived = True
            # 3. Placement, when memory was freed or a job arrived.
            if queue and (arrived or freed):
                place(t)
            # 4. Comm admission in SRSF order; one-node jobs synchronise at once. A waiting job is retried only
            # when a comm task on one of its nodes ended: counts only rise otherwise, and the volume a running
            # task has left only falls, so neither rule could let it start (the same answers as every tick).
            retry = [j for j in blocked if any(n in changed for n in job_nodes[j])] if changed else []
            if ready_comm or retry:
                freed = False
                candidates = ready_comm.union(retry)
                ready_comm.clear()
                for j in sorted(candidates, key=lambda x: (remaining[x], placed_seq[x])):
                    if len(job_nodes[j]) == 1:
                        freed |= sync(j, t)
                    elif admit(j, t):
                        blocked.discard(j)
                        comm_tasks += 1
                        comm_start[j] = t
                        comm_sent[j] = 0.0
                        comm_speed_now[j] = 0.0
                        comm_since[j] = t
                        for n in job_nodes[j]:
                            node_comm[n].add(j)
                            changed.add(n)
                            max_comm[n] = max(max_comm[n], len(node_comm[n]))
                        for g in job_gpus[j]:
                            comm_count[g] += 1
                            set_power(g, t)
                        if record:
                            admission_log.append((t, j, tuple(len(node_comm[n]) for n in job_nodes[j])))
                    else:
                        blocked.add(j)
                if freed and queue:
                    place(t)
            # 5. Speeds follow the new counts.
            if changed:
                reprice(changed, t)
            # 6. Idle GPUs take their next task, SRSF.
            if dirty:
                for g in sorted(dirty):
                    if running[g] < 0:
                        start_task(g, t)
                dirty.clear()

        makespan = float(np.nanmax(finish_ms)) if n_jobs else 0.0
        for g in range(n_gpus):
            set_power(g, makespan)
        ms_to_s = 1e-3
        return DagResult(
            arrival_ms=jobs.arrival_ms.astype(np.float64),
            placed_ms=placed_ms,
            finish_ms=finish_ms,
            makespan_ms=makespan,
            gpu_energy_j=float(sum(energy)) * ms_to_s,
            static_energy_j=self.node_static_w * cl.num_nodes * makespan * ms_to_s,
            gpu_compute_ms=compute_ms,
            gpu_comm_only_ms=comm_only_ms,
            comm_tasks=comm_tasks,
            comm_ms_total=comm_total,
            max_comm_per_node=max_comm,
            compute_log=compute_log,
            comm_log=comm_log,
            admission_log=admission_log,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "gpu_pick": self.pick_kind,
            "pick_threshold": self.pick_threshold,
            "comm": self.comm.describe(),
            "beta": self.beta,
            "eta": self.eta,
            **self.power_description,
        }


def simulate_dag(jobs: DagJobs, cluster: DagCluster = DagCluster(), **options) -> DagResult:
    """Run one DAG simulation (options as :class:`DagSimulator`)."""
    return DagSimulator(jobs, cluster, **options).run()
