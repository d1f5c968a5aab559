"""The live power meter: cluster power now and energy used so far, for policies that pace against a budget.

The ledger integrates a run's energy once, after the run, from the allocation log. A policy such as PowerFlow
needs the same quantity *during* the run. The meter reads the same two records (allocation log rows and node
power transitions) incrementally: each query replays only what was appended since the last one, updating
per-GPU loads and per-node CPU allocations, and integrates the cluster's power between consecutive events. It
applies the ledger's power rules (docs/energy.md), so at the end of a run ``energy_j`` equals the ledger's total;
the tests check this. The simulator registers it as an observer (for the start time only); it costs nothing
until a policy asks (``view.power_w()``, ``view.energy_used_j()``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.states import BOOTING, OFF, ON, PHASE_RUNNING, SHUTTING_DOWN
from .alloc_log import NO_ALLOC
from .observers import Observer

if TYPE_CHECKING:
    from .ledger import EnergyLedger
    from .temporal import Simulator


class PowerMeter(Observer):
    def __init__(self, ledger: EnergyLedger):
        self.ledger = ledger

    def on_start(self, sim: Simulator) -> None:
        spec, model = sim.spec, self.ledger.model
        model.bind(spec)
        self.sim = sim
        n = spec.num_nodes
        self.width = max(spec.max_gpus_per_node, 1)
        self.gpu_load = np.zeros(n * self.width)  # summed load of the computing jobs on each GPU
        self.gpu_computing = np.zeros(n * self.width, dtype=np.int64)  # jobs computing on each GPU
        self.gpu_held = np.zeros(n * self.width, dtype=np.int64)  # jobs holding it without computing
        self.cpu_alloc = np.zeros(n, dtype=np.int64)
        self.state = np.full(n, ON, dtype=np.int64)
        self.job_alloc: dict[int, tuple[int, float, bool]] = {}  # job -> (alloc, load, computing)
        self.node_w = np.array([self._node_w(node) for node in range(n)])
        self.busy_excess_w = np.zeros(n * self.width)  # draw minus idle per GPU holding a job
        self.total_w = float(self.node_w.sum())
        self.energy_raw_j = 0.0
        self.t_last = sim.now
        self.rows_seen = 0
        self.transitions_seen = 0

    def _node_w(self, node: int) -> float:
        """A node's draw without its GPUs' busy excess: idle GPUs, CPU and base when on (ledger rules)."""
        led, model, nodes = self.ledger, self.ledger.model, np.array([node])
        state = self.state[node]
        if state == ON:
            cpu_left = self.sim.spec.cpu_milli[nodes] - self.cpu_alloc[node]
            return float(
                model.gpu_idle_w[node] * model.gpu_count[node]
                + model.cpu_w(cpu_left, nodes)[0]
                + led.node_base_w
            )
        if state in (BOOTING, SHUTTING_DOWN):
            return float(model.node_idle_w(nodes)[0] + led.node_base_w)
        return led.off_power_w if state == OFF else 0.0

    def _refresh_node(self, node: int) -> None:
        new = self._node_w(node)
        self.total_w += new - self.node_w[node]
        self.node_w[node] = new

    def _refresh_gpu(self, flat_gpu: int) -> None:
        node = flat_gpu // self.width
        new = 0.0
        computing, held = self.gpu_computing[flat_gpu] > 0, self.gpu_held[flat_gpu] > 0
        if computing or held:
            model = self.ledger.model
            load = np.array([max(self.gpu_load[flat_gpu], 0.0)])
            draw, _ = model.gpu_state_w(load, np.array([computing]), np.array([held]), np.array([node]))
            new = float(draw[0] - model.gpu_idle_w[node])
        self.total_w += new - self.busy_excess_w[flat_gpu]
        self.busy_excess_w[flat_gpu] = new

    def _hold(self, alloc: int, load: float, computing: bool, sign: int) -> None:
        for node, gpus, cpu, _ in self.sim.log.placements[alloc]:
            self.cpu_alloc[node] += sign * cpu
            self._refresh_node(node)
            for g in gpus:
                flat = node * self.width + g
                if computing:
                    self.gpu_load[flat] += sign * load
                    self.gpu_computing[flat] += sign
                else:
                    self.gpu_held[flat] += sign
                self._refresh_gpu(flat)

    def _advance(self, t: float) -> None:
        if t > self.t_last:
            self.energy_raw_j += self.total_w * (t - self.t_last)
            self.t_last = t

    def catch_up(self, sim: Simulator) -> None:
        """Replay the log rows and power transitions appended since the last query, up to ``sim.now``."""
        log = sim.log
        # The log's columns when it has rows not yet replayed (none otherwise: no row event is then queued).
        rows: dict[str, np.ndarray] = log.columns() if len(log) > self.rows_seen else {}
        transitions = sim.power.transitions if sim.power is not None else []
        events: list[tuple[float, int, int]] = []  # (time, 0 = log row / 1 = transition, index)
        if rows:
            events += [
                (t, 0, i) for i, t in enumerate(rows["time_s"][self.rows_seen :].tolist(), self.rows_seen)
            ]
        events += [(transitions[i][0], 1, i) for i in range(self.transitions_seen, len(transitions))]
        events.sort()  # both sources are time-ordered; the merge keeps each one's order
        for t, kind, i in events:
            self._advance(t)
            if kind == 1:
                _, node, new_state, _ = transitions[i]
                self.state[node] = new_state
                self._refresh_node(node)
                continue
            job = int(rows["job"][i])
            previous = self.job_alloc.pop(job, None)
            if previous is not None:
                self._hold(*previous, -1)
            alloc = int(rows["alloc"][i])
            if alloc != NO_ALLOC:
                held = (alloc, float(rows["load"][i]), bool(rows["phase"][i] == PHASE_RUNNING))
                self.job_alloc[job] = held
                self._hold(*held, +1)
        self.rows_seen = len(log)
        self.transitions_seen = len(transitions)
        self._advance(sim.now)

    def power_w(self, sim: Simulator) -> float:
        """Facility power now (PUE included), after every event at ``sim.now`` applied so far."""
        self.catch_up(sim)
        return self.total_w * self.ledger.pue

    def energy_j(self, sim: Simulator) -> float:
        """Facility energy from the start of the run to ``sim.now`` (PUE included)."""
        self.catch_up(sim)
        return self.energy_raw_j * self.ledger.pue
