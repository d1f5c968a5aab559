"""Per-job GPU measurement in the node agent: each job's GPU energy, power and utilisation, in windows.

The job hooks (``wattsched agent-job start|end``, the Slurm prolog and epilog) tell the agent which GPUs a job
holds (``POST /jobs/<id>/start``, ``POST /jobs/<id>/end``). The agent groups jobs that share GPUs: a *window* is
a stretch of time in which one group of jobs holds one group of GPUs (a job alone on its GPUs is a group of one).
Whenever a job starts or ends, the windows whose group it changes are closed and new ones open, so a job that ran
alone its whole life gives one window as long as its run, and a job that shared a GPU for part of it gives a
window alone and a window in a set. Energy is the difference of NVML's energy counter over the window when every
GPU of the window has one, else the sampled power integrated; power, utilisation and SM clock are sampled every
``interval_s`` by a thread while any window is open. Figures are per GPU (the window's GPUs averaged), the
layout of the profile CSV, where a row is one GPU's draw.

Closed windows are kept (the last ``keep`` of them) with a number (counting up from the agent's start time in
ms, so that a restarted agent never reuses one); ``wattsched serve slurm
--record-profiles`` reads them with ``GET /windows?after=N`` and writes profile rows (backends/profiles.py).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .nvml import AgentError, GpuDevice

DEFAULT_INTERVAL_S = 0.5
DEFAULT_KEEP = 10_000


@dataclass
class _OpenWindow:
    jobs: dict[str, str]  # job id -> name (as the hook gave it; may be "")
    gpus: tuple[int, ...]
    start_s: float
    start_mj: dict[int, int | None]
    samples: int = 0
    power_sum: float = 0.0  # of the per-GPU mean power of each sample
    power_max: float = 0.0
    util_sum: float = 0.0
    util_mem_sum: float = 0.0
    sm_sum: float = 0.0
    power_integral_j: float = 0.0  # per GPU, for GPUs without the counter
    last_sample_s: float | None = None
    last_power_w: float | None = None


class JobMeter:
    """The jobs on one node's GPUs and their measurement windows (thread-safe)."""

    def __init__(
        self,
        devices: list[GpuDevice],
        hostname: str,
        interval_s: float = DEFAULT_INTERVAL_S,
        keep: int = DEFAULT_KEEP,
        clock: Callable[[], float] = time.time,
    ):
        self.devices = devices
        self.hostname = hostname
        self.interval_s = interval_s
        self.clock = clock
        self.job_gpus: dict[str, tuple[int, ...]] = {}
        self.job_names: dict[str, str] = {}
        self.open: list[_OpenWindow] = []
        self.closed: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)
        self.sequence = int(clock() * 1000)  # window numbers from the start time (ms): a restart reuses none
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the hooks -------------------------------------------------------------------------------------------

    def begin(self, job_id: str, gpus: Iterable[int], name: str = "") -> dict[str, Any]:
        gpus = tuple(sorted(set(int(g) for g in gpus)))
        if not gpus:
            raise AgentError(f"job {job_id}: no GPUs given", 400)
        for gpu in gpus:
            if not 0 <= gpu < len(self.devices):
                raise AgentError(
                    f"job {job_id}: no GPU {gpu} on {self.hostname} ({len(self.devices)} GPUs)", 404
                )
        with self._lock:
            self.job_gpus[job_id] = gpus  # a repeated start (a requeued job) replaces the old entry
            self.job_names[job_id] = name
            self._regroup()
        self._ensure_sampling()
        return {"job": job_id, "gpus": list(gpus)}

    def end(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            if job_id not in self.job_gpus:
                raise AgentError(f"job {job_id} is not being measured on {self.hostname}", 404)
            del self.job_gpus[job_id]
            self._regroup()
            self.job_names.pop(job_id, None)
            return {"job": job_id, "last": self.sequence}

    def windows(self, after: int = 0) -> dict[str, Any]:
        with self._lock:
            found = [w for w in self.closed if w["seq"] > after]
            return {"hostname": self.hostname, "last": self.sequence, "windows": found}

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- windows ---------------------------------------------------------------------------------------------

    def _groups(self) -> list[tuple[frozenset[str], tuple[int, ...]]]:
        """Connected groups of jobs that share GPUs, with their GPUs."""
        groups: list[tuple[set[str], set[int]]] = []
        for job, gpus in self.job_gpus.items():
            touching = [g for g in groups if g[1] & set(gpus)]
            merged = ({job}, set(gpus))
            for jobs, held in touching:
                merged[0].update(jobs)
                merged[1].update(held)
                groups.remove((jobs, held))
            groups.append(merged)
        return [(frozenset(jobs), tuple(sorted(held))) for jobs, held in groups]

    def _regroup(self) -> None:
        """Close the windows whose group changed, open one for each new group."""
        now = self.clock()
        wanted = {(jobs, gpus) for jobs, gpus in self._groups()}
        still_open = []
        for window in self.open:
            key = (frozenset(window.jobs), window.gpus)
            if key in wanted:
                wanted.discard(key)
                still_open.append(window)
            else:
                self._close(window, now)
        for jobs, gpus in sorted(wanted, key=lambda w: w[1]):
            counters = {g: self.devices[g].energy_mj() for g in gpus}
            names = {j: self.job_names.get(j, "") for j in sorted(jobs)}
            still_open.append(_OpenWindow(names, gpus, now, counters))
        self.open = still_open

    def _close(self, window: _OpenWindow, now: float) -> None:
        seconds = max(now - window.start_s, 0.0)
        if (
            window.samples == 0
        ):  # shorter than the sampling interval: one reading now, so every figure is there
            self._add_sample(window, [self._read(g) for g in window.gpus], now)
        ends = {
            g: self.devices[g].energy_mj() if window.start_mj[g] is not None else None for g in window.gpus
        }
        counted = [
            (b, e)
            for g in window.gpus
            if (b := window.start_mj[g]) is not None and (e := ends[g]) is not None
        ]
        if len(counted) == len(window.gpus):
            total_j = sum(e - b for b, e in counted) / 1000
            energy_j, source = total_j / len(window.gpus), "nvml-counter"
        else:
            last_w, last_s = window.last_power_w, window.last_sample_s
            tail = last_w * max(now - last_s, 0.0) if last_w is not None and last_s else 0.0
            energy_j, source = window.power_integral_j + tail, "sampled"
        n = window.samples
        device = self.devices[window.gpus[0]]
        try:
            limit_w, default_w = device.power_limit_mw() / 1000, device.default_power_limit_w()
        except AgentError:
            limit_w, default_w = None, None
        capped = (
            limit_w
            if limit_w is not None and default_w is not None and abs(limit_w - default_w) > 0.5
            else None
        )
        self.sequence += 1
        self.closed.append({
            "seq": self.sequence, "hostname": self.hostname,
            "gpu_name": self.devices[window.gpus[0]].name, "gpus": list(window.gpus),
            "jobs": [{"job_id": j, "name": name} for j, name in window.jobs.items()],
            "start_s": window.start_s, "end_s": now, "window_s": seconds,
            "energy_j": energy_j, "energy_source": source,
            "power_mean_w": window.power_sum / n if n else (energy_j / seconds if seconds > 0 else None),
            "power_max_w": window.power_max if n else None,
            "util_gpu_mean_pct": window.util_sum / n if n else None,
            "util_mem_mean_pct": window.util_mem_sum / n if n else None,
            "sm_mhz_mean": window.sm_sum / n if n else None,
            "samples": n, "power_limit_w": capped,
        })  # fmt: skip

    # -- sampling --------------------------------------------------------------------------------------------

    def _ensure_sampling(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._sample_loop, name="wattsched-job-meter", daemon=True)
            self._thread.start()

    def _sample_loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                if not self.open:
                    continue
                readings = {g: self._read(g) for window in self.open for g in window.gpus}
                now = self.clock()
                for window in self.open:
                    self._add_sample(window, [readings[g] for g in window.gpus], now)

    def _read(self, gpu: int):
        try:
            return self.devices[gpu].read()
        except AgentError:  # a GPU unreadable this once: one sample fewer in the window's means
            return None

    @staticmethod
    def _add_sample(window: _OpenWindow, readings: list, now: float) -> None:
        read = [r for r in readings if r is not None and r.power_w is not None]
        if not read:
            return
        power = sum(r.power_w for r in read) / len(read)
        if window.last_sample_s is not None and window.last_power_w is not None:
            window.power_integral_j += window.last_power_w * (now - window.last_sample_s)
        else:
            window.power_integral_j += power * max(now - window.start_s, 0.0)
        window.last_sample_s, window.last_power_w = now, power
        window.samples += 1
        window.power_sum += power
        window.power_max = max(window.power_max, power)
        window.util_sum += sum(r.gpu_util_pct or 0 for r in read) / len(read)
        window.util_mem_sum += sum(r.mem_copy_util_pct or 0 for r in read) / len(read)
        window.sm_sum += sum(r.sm_clock_mhz or 0 for r in read) / len(read)
