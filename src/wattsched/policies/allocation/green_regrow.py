"""``regrow``: wattsched-green's resizing of running jobs (docs/green.md, section 4).

`gpus` and `shrink` decide a job's GPU count at its start only. PowerFlow resizes running jobs every round and
gains its JCT by widening long jobs into the GPUs others leave. Here, each round:

* **give back**: when the waiting jobs (not deferred) ask for more GPUs than are free on powered nodes, running jobs
  that `regrow` widened go back to the count they started on, least remaining time first (they lose the least
  by it), until the waiting jobs' demand is covered; before any job waits for them;
* **widen**: when no job waits, the GPUs free on powered nodes beyond the right-sizing headroom (the `gpus`
  mechanism's spare) go to running training jobs, most remaining time first: each to its widest count (its trace
  count times a power of two, within its measured scaling) whose energy per unit of work is at most
  ``1 + scale_tolerance`` times that at its trace count (the `gpus` rule, :meth:`WattschedGreen._wider`), if
  the time it saves on its remaining work is more than ``RESTARTS_PAID`` restarts (the engine's checkpoint-restart
  delay for a resize, ``perf.restart_delay_s`` at the new count on other GPUs: this widening's and the give-back's
  that may follow). Jobs that `shrink` narrowed keep their count (their count is the energy choice), services are
  never resized, and a job is widened at most once per ``COOLDOWN_ROUNDS`` rounds since its last resize.

A resize is a planned move: the engine checkpoints first (no work lost) and the job holds its GPUs without
progress for the restart delay (``engine/temporal.py`` ``move_many``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...core.cluster import MILLI
from ...core.settings import DEFAULT_SETTING
from ..contract import ClusterView, Target
from ..planning import Plan

if TYPE_CHECKING:
    from .green import WattschedGreen

# A job is widened at most once per this many rounds (300 s each: one hour) since its last resize. A resize costs
# a restart of about 30-40 s plus the checkpoint's save and load (ElasticFlow's estimate, perf/restart.py), so at
# most one widening and one give-back an hour keep the restart time under about 2 % of a job's run, and the
# give-back of a busy hour is not undone by the next idle round.
COOLDOWN_ROUNDS = 12
# A widening must save at least this many restart delays: its own, and that of the give-back that may follow.
RESTARTS_PAID = 2.0


class Regrow:
    """The mechanism's state and its two steps; `policy` is the wattsched-green instance that owns it."""

    def __init__(self, policy: WattschedGreen) -> None:
        self.p = policy
        self.start_count: dict[int, int] = {}  # job widened while running -> the count it held before
        self.last_resize_s: dict[int, float] = {}
        self.widest: dict[int, int] = {}  # job -> its widest count within the energy tolerance (any spare)
        self.regrown: set[int] = set()  # jobs widened at least once
        self.widenings = 0
        self.returned_gpus = 0

    def cooldown_s(self, round_s: float) -> float:
        return COOLDOWN_ROUNDS * round_s

    # --- give back ------------------------------------------------------------------------------------------
    def give_back(self, view: ClusterView, plan: Plan, waiting: list[int]) -> None:
        """Widened jobs back to their start count while the `waiting` jobs ask for more GPUs than are free on
        powered nodes, least remaining time first."""
        if not self.start_count or not waiting:
            return
        running = set(view.running_jobs().tolist())
        for job in [j for j in self.start_count if j not in running]:
            del self.start_count[job]
        p = self.p
        state = plan.state
        demand = float((p.gpus[waiting] * p.jobs.gpu_milli[waiting] / 1000.0).sum())
        deficit = demand - float(state.free_gpus[state.available].sum())
        if deficit <= 0:
            return
        widened = np.asarray(sorted(self.start_count), dtype=np.int64)
        left = view.remaining_work(widened)
        order = widened[np.argsort(left, kind="stable")].tolist()  # remaining work: least first
        for job in order:
            if deficit <= 0:
                break
            if job in plan.assign or job in plan.released:
                continue
            held = view.target(job)
            if held is None:
                continue
            start = self.start_count[job]
            plan.release(job)
            if plan.place(job, p._placement_for(start), num_gpu=start, setting=DEFAULT_SETTING) is None:
                plan.restore(job)
                continue
            freed = held.num_gpus - start
            deficit -= freed
            self.returned_gpus += freed
            del self.start_count[job]
            self.last_resize_s[job] = view.now
            p._slowed.discard(job)  # back at the default setting, as clocks does for every job when jobs wait

    # --- widen ------------------------------------------------------------------------------------------------
    def widen(self, view: ClusterView, plan: Plan, spare: float) -> None:
        """Spare GPUs to running training jobs, most remaining time first (see the module's docstring)."""
        if spare < 1:
            return
        p = self.p
        now = view.now
        cooldown = self.cooldown_s(p.default_round_s)
        running = view.running_jobs()
        chosen: list[tuple[int, int, Target]] = []
        for job, count in zip(running.tolist(), view.held_gpus(running).tolist(), strict=True):
            # Cheap tests first (this runs every round): shrunk (its count is the energy choice), at its widest
            # already, a service, just resized.
            if p.service[job] or count < p.gpus[job] or count >= self._widest(job):
                continue
            if job in plan.assign or job in plan.released:
                continue
            if now - self.last_resize_s.get(job, -np.inf) < cooldown:
                continue
            held = view.target(job)
            if held is None or held.share_milli < MILLI or held.num_gpus != count:
                continue
            chosen.append((job, held.num_gpus, held))
        if not chosen:
            return
        work = view.remaining_work(np.asarray([c[0] for c in chosen], dtype=np.int64)).tolist()
        candidates = [
            (w / max(self._rate(job, count, held), 1e-12), job, count, held, w)
            for (job, count, held), w in zip(chosen, work, strict=True)
        ]
        candidates.sort(key=lambda c: (-c[0], c[1]))
        for _, job, count, held, work_left in candidates:
            if spare < 1:
                break
            wider = self._within(job, count + int(spare))
            if wider <= count:
                continue
            now_s = work_left / max(self._rate(job, count, held), 1e-12)
            saved = now_s - work_left / max(self._rate(job, wider, held), 1e-12)
            if saved <= RESTARTS_PAID * p.perf.restart_delay_s(job, wider, False):
                continue
            plan.release(job)
            if plan.place(job, p._placement_for(wider), num_gpu=wider, setting=held.setting) is None:
                plan.restore(job)
                continue
            spare -= wider - count
            self.start_count.setdefault(job, count)
            self.last_resize_s[job] = now
            self.regrown.add(job)
            self.widenings += 1

    def _widest(self, job: int) -> int:
        found = self.widest.get(job)
        if found is None:
            found = self.widest[job] = self.p._wider(job, float(1 << 20))
        return found

    def _within(self, job: int, top: int) -> int:
        """The widest count within the tolerance and at most `top` (the trace count times a power of two)."""
        widest = min(self._widest(job), top)
        count = max(int(self.p.gpus[job]), 1)
        while 2 * count <= widest:
            count *= 2
        return count

    def _rate(self, job: int, count: int, held: Target) -> float:
        p = self.p
        code = int(p.codes[job])
        nodes = -(-count // p.gpus_per_node)
        return p.perf.solo_rate(job, code, count, nodes, 1, held.setting)
