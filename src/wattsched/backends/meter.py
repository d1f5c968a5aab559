"""Cluster power and energy on a live cluster, as the policies' view gives them (``ClusterView.power_w`` and
``energy_used_j``; docs/live-slurm.md §3.5).

Measured beats modelled: where the node agents' metrics are configured (``--agent-metrics-url``, ``{node}`` the
node's name), each powered node's GPU power is the sum of its agent's ``DCGM_FI_DEV_POWER_USAGE`` gauges (the
dcgm-exporter name ``wattsched agent`` exports, docs/agent.md); the node's base and CPU draw, and every node whose
agent cannot be read, come from the linear power model (docs/energy.md): powered nodes at idle draw, GPUs of
running jobs at full load, GPUs held by jobs not yet running at the held draw. ``source`` says which one gave the
figure. Energy is power integrated over the observations (held constant between them).
"""

from __future__ import annotations

import logging
import time
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..core.cluster import MILLI
from ..core.states import ON, PHASE_RUNNING
from ..energy.power_models import LinearModel

if TYPE_CHECKING:
    from .live import LiveCluster

log = logging.getLogger("wattsched.live")

GPU_POWER_METRIC = "DCGM_FI_DEV_POWER_USAGE"
Fetch = Callable[[str], str]  # url -> the text exposition


def _http_fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2.0) as resp:
        return str(resp.read().decode("utf-8"))


def gpu_power_from_metrics(text: str) -> float:
    """Sum of the GPU power gauges in a Prometheus text exposition (W); ValueError when there are none."""
    from prometheus_client.parser import text_string_to_metric_families

    total, seen = 0.0, 0
    for family in text_string_to_metric_families(text):
        if family.name != GPU_POWER_METRIC:
            continue
        for sample in family.samples:
            total += float(sample.value)
            seen += 1
    if not seen:
        raise ValueError(f"no {GPU_POWER_METRIC} samples")
    return total


class LiveMeter:
    def __init__(
        self,
        cluster: LiveCluster,
        agent_metrics_url: str | None = None,
        fetch: Fetch = _http_fetch,
        scrape_interval_s: float = 15.0,
    ):
        self.cluster = cluster
        self.model = LinearModel()
        self.model.bind(cluster.spec)
        self.url = agent_metrics_url
        self.fetch = fetch
        self.scrape_interval_s = float(scrape_interval_s)
        n = cluster.spec.num_nodes
        self.measured_gpu_w = np.full(n, np.nan)  # last agent reading per node (NaN: none)
        self._scraped_at = -np.inf
        self._held_w = 0.0  # the power at the last sample, held until the next one (energy)
        self.energy_j = 0.0
        self.source = "model"
        self._last_s: float | None = None

    def sample(self) -> None:
        """After an observation: energy since the last one at the power then, then the power now."""
        now = self.cluster.now
        if self._last_s is not None and now > self._last_s:
            self.energy_j += self._held_w * (now - self._last_s)
        self._last_s = now
        if self.url is not None and time.monotonic() - self._scraped_at >= self.scrape_interval_s:
            self._scrape()
        self._held_w = self.power_w

    @property
    def power_w(self) -> float:
        """Cluster power now: the agents' last readings where there are any, the model for the rest (and for
        what the mirror changed since, e.g. jobs started by this decision)."""
        return self._power_now()

    def _scrape(self) -> None:
        self._scraped_at = time.monotonic()
        c = self.cluster
        for i in np.flatnonzero(c.power_state == ON).tolist():
            url = str(self.url).replace("{node}", str(c.spec.node_names[i]))
            try:
                self.measured_gpu_w[i] = gpu_power_from_metrics(self.fetch(url))
            except (OSError, ValueError) as exc:
                if not np.isnan(self.measured_gpu_w[i]):
                    log.warning("agent metrics of %s unreadable, modelled until they are back: %s", url, exc)
                self.measured_gpu_w[i] = np.nan

    def model_gpu_w(self) -> np.ndarray:
        """[N] GPU power per node under the linear model (0 for nodes that are not on)."""
        c, model, state = self.cluster, self.model, self.cluster.state
        allocated = (state.gpu_left >= 0) & (state.gpu_left < MILLI)
        computing = np.zeros_like(allocated)
        for job, target in c.targets.items():
            if c.phase[job] == PHASE_RUNNING:
                for node, gpus, _, _ in target.placement:
                    computing[node, list(gpus)] = True
        running = (allocated & computing).sum(axis=1)
        held = (allocated & ~computing).sum(axis=1)
        nodes = np.arange(c.spec.num_nodes)
        gpu = (
            model.gpu_idle_w * (c.spec.gpu_count - running - held)
            + model.gpu_busy_w(np.ones(nodes.size), nodes) * running
            + model.gpu_held_w * held
        )
        return np.where(c.power_state == ON, gpu, 0.0)

    def _power_now(self) -> float:
        c, model, state = self.cluster, self.model, self.cluster.state
        on = c.power_state == ON
        if not on.any():
            self.source = "model"
            return 0.0
        nodes = np.flatnonzero(on)
        gpu = self.model_gpu_w()
        measured = on & ~np.isnan(self.measured_gpu_w)
        gpu = np.where(measured, self.measured_gpu_w, gpu)
        count = int(measured.sum())
        if count == 0:
            self.source = "model"
        elif count == nodes.size:
            self.source = "agents (GPU power measured on every powered node; node base and CPUs modelled)"
        else:
            self.source = f"agents on {count} of {nodes.size} powered nodes, model elsewhere"
        cpu = model.cpu_w(state.cpu_left[nodes], nodes)
        return float(gpu[nodes].sum() + cpu.sum() + model.default_node_base_w * nodes.size)
