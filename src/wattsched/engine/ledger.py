"""Energy, cost and carbon of a run, integrated exactly from its event log.

Power is piecewise constant between events, so energy is a finite sum. Rather than updating a power meter in
Python at every event, the ledger rebuilds every constant-power segment after the run from what the engine
already records (the allocation log: every placement a job held, from when to when, at what GPU load and in which
phase; node power-state transitions) and sums them with a few sorted numpy passes. The result is the same exact
integral, at a small fraction of the per-event cost.

A GPU is in one of four power states (docs/energy.md, "GPU power states"): off with its node, bare idle (on, no
job), held (allocated to jobs that compute nothing: a job restarting, i.e. starting its process and loading its
checkpoint) or computing. A restarting job's GPUs draw the held draw (``PowerModel.gpu_held_w``), not its load.

Segments are of two kinds:

* node segments: between consecutive changes of a node's CPU allocation or power state. An ON node draws
  ``G x P_idle(GPU) + P_cpu(allocation) + base``; a node booting or shutting down draws its idle power (booked as
  ``power_transitions``); an OFF node draws ``off_power_w``.
* GPU segments: while a GPU holds at least one job, between changes of its computing jobs' summed load
  (utilisation times the GPU setting's power scale) or of which of its jobs compute. It draws
  ``PowerModel.gpu_state_w`` instead of its idle power, so the segment adds that minus ``P_idle``. A computing GPU
  is booked in ``gpu_active`` (its whole draw); what held jobs add is ``gpu_held`` (above bare idle on a GPU only
  held, where its bare idle stays in ``gpu_idle``; above the computing draw on a shared GPU).

Cost and carbon multiply each segment's power by the integral of the aligned hourly signal over it.

Beyond the run's own end the ledger also keeps its tail (``engine.tail.PowerTail``): the power step function of
the node power states the power manager leaves, for comparisons over a common window (docs/energy.md,
"Accounting window"). The own-window figures above never include it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.states import BOOTING, OFF, ON, PHASE_RUNNING, SHUTTING_DOWN
from ..energy.power_models import PowerModel
from .alloc_log import JOB_STAT_FIELDS, PlacementColumns, ragged_ranges
from .observers import Observer
from .power import NodePower, Transition
from .tail import J_PER_KWH, TAIL_COMPONENTS, PowerTail

if TYPE_CHECKING:
    from ..energy.signals.alignment import AlignedSignal
    from .temporal import Simulator

COMPONENTS = (
    "gpu_active",
    "gpu_held",
    "gpu_idle",
    "cpu",
    "node_base",
    "power_transitions",
    "facility_overhead",
)


def _segments_of(sorted_keys: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices k of events that open a segment [times[k], times[k+1]) of positive length within one key."""
    dt = times[1:] - times[:-1]
    dt[sorted_keys[:-1] != sorted_keys[1:]] = 0.0  # across keys: no segment
    k = np.flatnonzero(dt > 0)
    return k, dt[k]


def _cumulative(
    w: np.ndarray, which: np.ndarray, ends: np.ndarray, last: np.ndarray | None = None
) -> np.ndarray:
    """The running sum over steps of +w[which] (a segment's start) or -w[which] where `ends` (its end), at
    positions `last` (all if None): the same sums as ``cumsum(concatenate([w, -w])[order])``, in the dtype of
    `w`, made in one step-length array."""
    steps = w.take(which)
    np.negative(steps, out=steps, where=ends)
    np.cumsum(steps, out=steps)
    if last is None:
        return steps
    out: np.ndarray = steps[last]
    return out


class EnergyLedger(Observer):
    def __init__(
        self,
        model: PowerModel,
        node_base_w: float,
        pue: float = 1.0,
        controller: NodePower | None = None,
        off_power_w: float = 0.0,
        price: AlignedSignal | None = None,
        carbon: AlignedSignal | None = None,
    ):
        self.model = model
        self.node_base_w = node_base_w
        self.pue = pue
        self.controller = controller
        self.off_power_w = off_power_w
        self.price = price
        self.carbon = carbon
        self._energy = np.zeros(len(COMPONENTS))
        self.peak_w = 0.0
        self.span_s = 0.0
        self.cost_usd: float | None = None
        self.co2_kg: float | None = None
        self._end_state: np.ndarray | None = None
        self._tail: tuple[list[Transition], float, bool] = ([], 0.0, True)

    @property
    def energy_j(self) -> dict[str, float]:
        return {k: float(v) for k, v in zip(COMPONENTS, self._energy, strict=True)}

    def on_start(self, sim: Simulator) -> None:
        self.model.bind(sim.spec)
        self.t_start = sim.now

    def on_finish(self, sim: Simulator) -> None:
        self.t_end = sim.now
        self.span_s = self.t_end - self.t_start
        self._integrate(sim)
        self._peak()
        n = sim.spec.num_nodes
        power_state = getattr(self.controller, "power_state", None)
        self._end_state = (
            np.full(n, ON, dtype=np.int64) if power_state is None else power_state.astype(np.int64)
        )
        self._tail = ([], self.t_end, True)

    def on_tail(self, transitions: list[Transition], drained_to_s: float, settled: bool) -> None:
        """The node power transitions after the run's own end (``Simulator.run`` drains the power manager's
        timers with no jobs), how far they were played out, and whether no timer was left."""
        self._tail = (list(transitions), float(drained_to_s), bool(settled))

    def _idle_draw(self) -> np.ndarray:
        """Watts [node, power state, TAIL_COMPONENTS] of a node holding no job, pre-PUE, as `_integrate` books
        them: on, idle GPUs + idle CPUs + base; booting or shutting down, idle power + base; off, off_power_w."""
        model = self.model
        nodes = np.arange(len(model.gpu_count))
        out = np.zeros((len(nodes), 4, len(TAIL_COMPONENTS)))
        out[:, ON, 0] = model.gpu_idle_w[nodes] * model.gpu_count[nodes]
        out[:, ON, 1] = model.cpu_w(model.spec.cpu_milli[nodes], nodes)
        out[:, ON, 2] = self.node_base_w
        moving = model.node_idle_w(nodes) + self.node_base_w
        out[:, BOOTING, 3] = moving
        out[:, SHUTTING_DOWN, 3] = moving
        out[:, OFF, 3] = self.off_power_w
        return out

    def tail(self) -> PowerTail:
        """The run's own-window totals and its power step function from its own end on."""
        if self._end_state is None:
            raise RuntimeError("the ledger has no tail before the run finished")
        transitions, drained_to, settled = self._tail
        draw = self._idle_draw()
        state = self._end_state
        trans = np.array(transitions, dtype=np.float64).reshape(-1, 4)  # time, node, new state, old state
        node = trans[:, 1].astype(np.int64)
        delta = draw[node, trans[:, 2].astype(np.int64)] - draw[node, trans[:, 3].astype(np.int64)]
        first = draw[np.arange(len(state)), state].sum(axis=0)
        steps = np.cumsum(np.vstack([first[None, :], delta]), axis=0)
        times = np.r_[self.t_end, trans[:, 0]]
        last_at_time = np.r_[times[1:] != times[:-1], True]  # the state after every transition at that time
        times, steps = times[last_at_time], steps[last_at_time]
        by = self.energy_j
        return PowerTail(
            start_s=self.t_start,
            end_s=self.t_end,
            energy_kwh=float(self._energy.sum()) / J_PER_KWH,
            energy_by_component_kwh={k: v / J_PER_KWH for k, v in by.items()},
            cost_usd=self.cost_usd,
            co2_kg=self.co2_kg,
            pue=self.pue,
            t_s=times,
            component_w={name: steps[:, i].copy() for i, name in enumerate(TAIL_COMPONENTS)},
            drained_to_s=drained_to,
            settled=settled,
        )

    # --- building the segments ------------------------------------------------------------------------------
    def _allocations(self, sim: Simulator) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, int]:
        """The allocation log's holding intervals (job order, then time: start ``time_s``, ``end_s``, ``load``,
        ``computing``) and their node shares in order (share ids and each one's interval), and the GPU width."""
        width = max(sim.spec.max_gpus_per_node, 1)
        # What the job table reads after the run (AllocationLog.job_stats) is kept from the same sort of the log.
        rows = sim.log.intervals(
            self.t_end,
            fields=("time_s", "alloc", "load", "phase"),
            keep=JOB_STAT_FIELDS,
        )
        cols = sim.log.placement_columns()
        alloc = rows.pop("alloc")
        rows["computing"] = rows.pop("phase") == PHASE_RUNNING
        per_interval = cols.share_start[alloc + 1] - cols.share_start[alloc]
        share = ragged_ranges(cols.share_start[alloc], per_interval)
        share_iv = np.repeat(np.arange(len(alloc), dtype=np.int64), per_interval)
        return rows, share, share_iv, width

    def _integrate(self, sim: Simulator) -> None:
        rows, share, share_iv, width = self._allocations(sim)
        cols = sim.log.placement_columns()
        start, end = rows["time_s"], rows["end_s"]
        # Each pass makes its own event arrays from the shares and returns only its segments (10^6 jobs: ~10^7
        # events): the node pass first, its segments being the fewer.
        n_t0, n_dt, n_node, n_state, n_alloc = self._node_segments(
            sim, share_iv, cols.share_node[share], cols.share_cpu[share], start, end
        )
        g_t0, g_dt, g_node, g_draw_w, g_held_w, g_computing = self._gpu_segments(
            cols, share, share_iv, start, end, rows["load"], rows["computing"], width
        )
        del rows, share, share_iv, start, end
        model, spec = self.model, sim.spec
        # Each segment-length array is made when its sum is taken and let go after (10^6 jobs: ~40 MB each).
        e = self._energy
        # A GPU only held keeps its bare idle in gpu_idle; a computing one moves all of its draw to gpu_active.
        g_active_w = np.where(g_computing, g_draw_w - g_held_w, 0.0)
        e[0] = float(g_active_w @ g_dt)
        del g_active_w
        e[1] = float(g_held_w @ g_dt)
        del g_held_w
        g_idle = model.gpu_idle_w[g_node]
        del g_node
        g_idle_out = np.where(g_computing, g_idle, 0.0)
        del g_computing
        gpu_idle_out = float(g_idle_out @ g_dt)
        del g_idle_out
        g_excess = g_draw_w - g_idle
        del g_draw_w, g_idle
        on = n_state == ON
        moving = (n_state == BOOTING) | (n_state == SHUTTING_DOWN)
        gpu_idle_w = np.where(on, model.gpu_idle_w[n_node] * model.gpu_count[n_node], 0.0)
        cpu_w = np.where(on, model.cpu_w(spec.cpu_milli[n_node] - n_alloc, n_node), 0.0)
        base_w = np.where(on, self.node_base_w, 0.0)
        trans_w = np.where(moving, model.node_idle_w(n_node) + self.node_base_w, 0.0)
        trans_w += np.where(n_state == OFF, self.off_power_w, 0.0)
        del on, moving, n_state, n_alloc, n_node

        e[2] = float(gpu_idle_w @ n_dt) - gpu_idle_out
        e[3] = float(cpu_w @ n_dt)
        e[4] = float(base_w @ n_dt)
        e[5] = float(trans_w @ n_dt)
        e[6] = (self.pue - 1.0) * float(e[:6].sum())

        # The cluster's power over time: every segment as +w at its start and -w at its end.
        seg_t0 = np.concatenate([n_t0, g_t0])
        del n_t0, g_t0
        seg_t1 = seg_t0 + np.concatenate([n_dt, g_dt])
        del n_dt, g_dt
        seg_w = np.concatenate([gpu_idle_w + cpu_w + base_w + trans_w, g_excess]) * self.pue
        del base_w, trans_w
        if self.price is not None:
            self.cost_usd = float(np.sum(self.price.cost_usd(seg_w, seg_t0, seg_t1)))
        if self.carbon is not None:
            self.co2_kg = float(np.sum(self.carbon.co2_kg(seg_w, seg_t0, seg_t1)))
        times = np.concatenate([seg_t0, seg_t1])
        del seg_t0, seg_t1
        order = np.argsort(times, kind="stable")
        times.sort(kind="stable")  # = times[order], without a second array
        # Only the value after the last step at each time is ever read (series_at, the peak): those alone are
        # kept, made one column at a time (10^6 jobs: ~10^7 steps a column).
        last = np.flatnonzero(np.r_[times[1:] != times[:-1], True]) if times.size else np.zeros(0, np.int64)
        self._step_t = times[last]
        del times
        # Step k adds +w[order[k]] (a start) or -w[order[k] - n] (an end).
        n = len(seg_w)
        ends = order >= n
        np.subtract(order, n, out=order, where=ends)
        if n < 2**31:  # half the memory of the step-length index for the three sums below
            order = order.astype(np.int32)
        self._step = {"power_w": _cumulative(seg_w, order, ends, last)}
        del seg_w
        gpu_w = np.concatenate([gpu_idle_w, g_excess])
        del gpu_idle_w
        self._step["gpu_w"] = _cumulative(gpu_w, order, ends, last)
        gpu_w[: len(cpu_w)] = cpu_w  # the CPU column: node segments' CPU draw, nothing on GPU segments
        gpu_w[len(cpu_w) :] = 0.0
        del cpu_w, g_excess
        self._step["cpu_w"] = _cumulative(gpu_w, order, ends, last)

    def _gpu_segments(
        self,
        cols: PlacementColumns,
        share: np.ndarray,
        share_iv: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        load: np.ndarray,
        computing: np.ndarray,
        width: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """GPU segments while a GPU holds a job: where an interval starts, events +load (computing only) and +1
        computing or +1 held job; the opposite at its end. Returns (t0, dt, node, draw W, held excess W,
        computing) per segment."""
        # One row per interval and GPU, in the order of interval, then share, then GPU.
        per_share = cols.gpu_start[share + 1] - cols.gpu_start[share]
        g_id = np.repeat(cols.share_node[share], per_share) * width
        g_id += cols.gpu_slot[ragged_ranges(cols.gpu_start[share], per_share)]
        g_job = np.repeat(share_iv, per_share)
        del per_share
        rows = len(g_job)
        t = np.concatenate([start[g_job], end[g_job]])
        gid = np.empty(2 * rows, dtype=np.int32)  # GPU ids fit in 32 bits: half the memory of the event array
        gid[:rows] = g_id
        gid[rows:] = g_id
        del g_id
        order = np.lexsort((t, gid))
        t = t[order]
        gid.sort(kind="stable")  # = gid[order]: the GPU ids in order
        # Event k is the start of interval row order[k], or the end of row order[k] - rows where `ends`.
        ends = order >= rows
        np.subtract(order, rows, out=order, where=ends)
        on = computing[g_job]
        # Job counts on a GPU: int32 is exact and halves these two event-length arrays.
        step = on.astype(np.int32)
        computing_after = _cumulative(step, order, ends) > 0  # after each event, some job on the GPU computes
        held_after = _cumulative(1 - step, order, ends) > 0  # some job holds it without computing
        del step
        cum_load = _cumulative(np.where(on, load[g_job], 0.0), order, ends)
        del order, ends, on
        # Segments [t[k], t[k + 1]) of positive length on one GPU that holds a job.
        keep = gid[:-1] == gid[1:]
        keep &= t[1:] > t[:-1]
        keep &= computing_after[:-1] | held_after[:-1]
        k = np.flatnonzero(keep)
        del keep
        t0 = t[k]
        dt = t[k + 1] - t0
        del t
        node = (gid[k] // width).astype(np.int64)
        del gid
        computing_now = computing_after[k]
        held_now = held_after[k]
        del computing_after, held_after
        load_now = np.maximum(cum_load[k], 0.0)
        del cum_load, k
        draw, held = self.model.gpu_state_w(load_now, computing_now, held_now, node)
        return t0, dt, node, draw, held, computing_now

    def _node_segments(
        self,
        sim: Simulator,
        a_job: np.ndarray,
        a_node: np.ndarray,
        a_cpu: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Node segments: initial ON state, CPU deltas, power-state transitions and a closing event, per node.
        `a_job`, `a_node`, `a_cpu`: each node share's interval, node and milli-CPU."""
        n = sim.spec.num_nodes
        trans = np.array(self.controller.transitions if self.controller else [], dtype=np.float64)
        trans = trans.reshape(-1, 4)  # time, node, new state, old state
        all_nodes = np.arange(n)
        ev_t = np.concatenate(
            [np.full(n, self.t_start), start[a_job], end[a_job], trans[:, 0], np.full(n, self.t_end)]
        )
        ev_node = np.concatenate([all_nodes, a_node, a_node, trans[:, 1].astype(np.int64), all_nodes])
        ev_cpu = np.concatenate([np.zeros(n), a_cpu, -a_cpu, np.zeros(len(trans)), np.zeros(n)])
        ev_state = np.concatenate(
            [
                np.full(n, ON, dtype=np.int8),
                np.full(2 * len(a_job), -1, dtype=np.int8),
                trans[:, 2].astype(np.int8),
                np.full(n, -1, dtype=np.int8),
            ]
        )
        ev_kind = np.concatenate(
            [np.zeros(n, np.int8), np.ones(2 * len(a_job) + len(trans), np.int8), np.full(n, 2, np.int8)]
        )
        order = np.lexsort((ev_kind, ev_t, ev_node))
        ev_t, ev_node, ev_state = ev_t[order], ev_node[order], ev_state[order]
        alloc = np.cumsum(ev_cpu[order])
        del order, ev_cpu, ev_kind
        last_state_event = np.maximum.accumulate(np.where(ev_state >= 0, np.arange(len(ev_state)), 0))
        k, dt = _segments_of(ev_node, ev_t)
        return ev_t[k], dt, ev_node[k], ev_state[last_state_event[k]], alloc[k]

    def _peak(self) -> None:
        if self._step_t.size:  # a run of zero length has no segments
            last_at_time = np.r_[self._step_t[1:] != self._step_t[:-1], True]
            self.peak_w = float(self._step["power_w"][last_at_time].max())

    # --- results --------------------------------------------------------------------------------------------
    def series_at(self, times: np.ndarray, release: bool = False) -> dict[str, np.ndarray]:
        """Power columns (and node power-state counts) in force at each of `times`; `release` frees the step
        functions afterwards (they are the ledger's largest arrays)."""
        idx = np.searchsorted(self._step_t, times, side="right") - 1
        out = {name: np.where(idx >= 0, step[np.maximum(idx, 0)], 0.0) for name, step in self._step.items()}
        if release:
            self._step_t = np.zeros(0)
            self._step = {name: np.zeros(0) for name in self._step}
        if self.controller is not None:
            counts = self._state_counts(self.controller.transitions, len(self.model.gpu_count))
            cidx = np.searchsorted(counts[0], times, side="right") - 1
            rows = counts[1][np.maximum(cidx, 0)]
            out["nodes_on"] = rows[:, ON]
            out["nodes_off"] = rows[:, OFF]
            out["nodes_booting"] = rows[:, BOOTING] + rows[:, SHUTTING_DOWN]
        return out

    def _state_counts(self, transitions: list[Transition], num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
        """(times, nodes per power state after each time), starting with every node on."""
        trans = np.array(transitions, dtype=np.float64).reshape(-1, 4)
        delta = np.zeros((len(trans) + 1, 4), dtype=np.int64)
        delta[0, ON] = num_nodes
        rows = np.arange(1, len(trans) + 1)
        np.add.at(delta, (rows, trans[:, 2].astype(np.int64)), 1)
        np.add.at(delta, (rows, trans[:, 3].astype(np.int64)), -1)
        return np.r_[self.t_start, trans[:, 0]], np.cumsum(delta, axis=0)

    def summary(self, allocated_gpu_seconds: float) -> dict[str, Any]:
        total_j = float(self._energy.sum())
        kwh = total_j / J_PER_KWH
        out: dict[str, Any] = {
            "energy_kwh": kwh,
            "energy_by_component_kwh": {k: v / J_PER_KWH for k, v in self.energy_j.items()},
            "avg_power_kw": (total_j / self.span_s / 1000.0) if self.span_s > 0 else 0.0,
            "peak_power_kw": self.peak_w / 1000.0,
            "cost_usd": self.cost_usd,
            "co2_kg": self.co2_kg,
            "energy_per_gpu_hour_kwh": kwh / (allocated_gpu_seconds / 3600.0)
            if allocated_gpu_seconds > 0
            else None,
        }
        return out
