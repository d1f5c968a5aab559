"""``wattsched serve slurm --record-profiles FILE``: a live cluster's own jobs as profile CSV rows.

Each node's agent measures the jobs its job hooks announce (agent/jobmeter.py): one window per stretch of time in
which a group of jobs holds a group of GPUs. The scheduler reads the closed windows from every node's agent
(``GET /windows?after=N``, every ``interval_s`` and when it stops) and appends one row per job per window to FILE,
in the profile CSV layout (perf/profiles.py, docs/data-formats.md):

* a job alone on its GPUs gives a set of one whose ``window_s`` is its run time; jobs sharing GPUs give the rows
  of a set (``set`` = their models joined by ``+``, the window's figures on each row);
* ``gpu``: the catalog name of the GPU's NVML name; ``regime``: ``live``; ``repeat``: ``<window>@<host>``;
* ``model`` and ``batch`` from the job's name as the scheduler saw it (``resnet50``, ``resnet50-b128``,
  ``vgg16_bs64``, ``bert:32``: model, then an optional batch after ``-``, ``_``, ``:`` or ``@``, with an optional
  ``b``/``bs``/``batch``); a name that does not parse is the model as is, batch 0 (unknown);
* ``iters`` and ``it_per_s`` are empty: the scheduler does not see a job's steps, so these rows are power-only
  readings (``Profiles.power_only``), which calibrate GPU power per model and set, not speed;
* energy, power, utilisation and SM clock are per GPU (the window's GPUs averaged), energy from NVML's counter;
  ``power_limit_w`` is the GPU's limit when a setting had moved it from its default.

A restarted scheduler skips the windows FILE already holds (their ``repeat``).
"""

from __future__ import annotations

import csv
import logging
import re
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..perf.catalog import normalise
from ..perf.profiles import EXTRA_COLUMNS, PROFILE_COLUMNS, TRAINING, write_rows
from .base import Observation

log = logging.getLogger("wattsched.live.profiles")

REGIME = "live"
DEFAULT_AGENT_URL = "http://{node}:9400"
_JOB_NAME = re.compile(r"^(?P<model>.+?)(?:[-_:@](?:b|bs|batch)?(?P<batch>\d+))?$", re.IGNORECASE)


def model_and_batch(job_name: str) -> tuple[str, int]:
    """``resnet50-b128`` -> (``resnet50``, 128); ``my job.sh`` -> (``myjobsh``, 0)."""
    match = _JOB_NAME.match(job_name.strip())
    if match and match.group("batch"):
        model, batch = match.group("model"), int(match.group("batch"))
    else:
        model, batch = job_name.strip(), 0
    return normalise(model) or "job", batch


def window_rows(window: dict[str, Any], names: dict[str, str]) -> list[dict[str, object]]:
    """One profile row per job of an agent's closed window; `names` maps job ids to the names the scheduler saw."""
    from ..profiling.runner import catalog_gpu

    members = []
    for job in window["jobs"]:
        name = names.get(job["job_id"]) or job.get("name") or f"job{job['job_id']}"
        members.append((job["job_id"], *model_and_batch(name)))
    shared = {
        "gpu": catalog_gpu(window["gpu_name"]), "regime": REGIME, "set": "+".join(m for _, m, _ in members),
        "jobs_in_set": len(members), "repeat": f"{window['seq']}@{window['hostname']}", "iters": None,
        "job_seconds": round(window["window_s"], 3), "it_per_s": None, "window_s": round(window["window_s"], 3),
        "gpu_energy_j": round(window["energy_j"], 3), "gpu_power_mean_w": _round(window["power_mean_w"]),
        "gpu_power_max_w": _round(window["power_max_w"]), "util_gpu_mean_pct": _round(window["util_gpu_mean_pct"]),
        "util_mem_mean_pct": _round(window["util_mem_mean_pct"]), "sm_mhz_mean": _round(window["sm_mhz_mean"]),
        "state": TRAINING, "power_limit_w": window.get("power_limit_w"),
    }  # fmt: skip
    gpus = ",".join(map(str, window["gpus"]))
    return [
        shared | {"model": model, "batch": batch,
                  "source": f"wattsched serve slurm; job {job_id} on {window['hostname']} GPUs {gpus}; "
                            f"energy={window['energy_source']}"}
        for job_id, model, batch in members
    ]  # fmt: skip


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


class ProfileRecorder:
    """Reads the agents' windows and appends their rows to `path`."""

    def __init__(
        self,
        path: str | Path,
        agent_url: str = DEFAULT_AGENT_URL,
        interval_s: float = 30.0,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if "{node}" not in agent_url and "://" not in agent_url:
            raise ValueError(f"--agent-url: a URL such as http://{{node}}:9400, got {agent_url!r}")
        self.path = Path(path)
        self.agent_url = agent_url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.clock = clock
        self.names: dict[str, str] = {}
        self.nodes: list[str] = []
        self.after: dict[str, int] = {}  # per agent URL: the last window number read
        self.seen = self._windows_in_file()  # per agent host name: window numbers already written
        self.rows_written = 0
        self._next_poll = 0.0
        self._failing: set[str] = set()

    def _windows_in_file(self) -> dict[str, set[int]]:
        """The windows FILE already holds, per host; a file that is not a profile CSV is refused here, at start."""
        seen: dict[str, set[int]] = {}
        if self.path.is_file():
            with self.path.open(newline="") as handle:
                reader = csv.DictReader(handle)
                if list(reader.fieldnames or []) != list(PROFILE_COLUMNS + EXTRA_COLUMNS):
                    raise InputError(self.path, 1, None, "not a wattsched profile file (other columns)")
                for row in reader:
                    number, at, host = (row.get("repeat") or "").partition("@")
                    if at and number.isdigit():
                        seen.setdefault(host, set()).add(int(number))
        return seen

    def observe(self, obs: Observation) -> None:
        """Keep the job names and the GPU nodes of the latest observation."""
        self.names.update({job.job_id: job.name for job in obs.jobs})
        self.nodes = [node.name for node in obs.nodes if node.gpus > 0]

    def poll(self, force: bool = False) -> int:
        """Read every agent's new windows (at most every `interval_s`, unless forced); the rows written."""
        if not force and self.clock() < self._next_poll:
            return 0
        self._next_poll = self.clock() + self.interval_s
        rows: list[dict[str, object]] = []
        for url in dict.fromkeys(self.agent_url.format(node=node) for node in self.nodes):
            rows.extend(self._read_agent(url))
        if rows:
            write_rows(self.path, rows, append=True)
            self.rows_written += len(rows)
        return len(rows)

    def _read_agent(self, url: str) -> list[dict[str, object]]:
        from ..agent.client import AgentClient, AgentRequestError

        parts = urllib.parse.urlsplit(url)
        client = AgentClient(parts.hostname or "127.0.0.1", parts.port or 9400, timeout_s=self.timeout_s)
        try:
            answer = client.windows(self.after.get(url, 0))
        except AgentRequestError as exc:
            if url not in self._failing:  # once per outage, not every poll
                log.warning("profiles: cannot read the agent at %s: %s", url, exc)
                self._failing.add(url)
            return []
        self._failing.discard(url)
        self.after[url] = int(answer.get("last", 0))
        seen = self.seen.setdefault(str(answer.get("hostname", url)), set())
        rows = []
        for window in answer.get("windows", []):
            if window["seq"] in seen:
                continue
            seen.add(window["seq"])
            rows.extend(window_rows(window, self.names))
        return rows
