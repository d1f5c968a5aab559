"""A scripted allocation policy for the live tests: it preempts, then moves and resizes, in a fixed order.

Jobs (in arrival order): 0 "long" asks for 2 GPUs on one node, 1 "urgent" for 4. The policy, pure like every
allocation policy (it reads only the view):

1. starts "long" on the first node, GPUs 0-1;
2. once "long" has run `run_before_preempt_s`, preempts it and gives "urgent" the whole first node;
3. puts "long" back on the second and third nodes, one GPU each: another shape than it was submitted with.
"""

from __future__ import annotations

import numpy as np

from wattsched.core.cluster import MILLI
from wattsched.core.states import PHASE_RUNNING, STATUS_PENDING, STATUS_RUNNING
from wattsched.policies.adapters import RoundScheduler
from wattsched.policies.contract import AllocationPolicy, ClusterView, Decision, Target

LONG, URGENT = 0, 1


class PreemptThenResize(AllocationPolicy):
    name = "test-preempt-then-resize"
    decide_on_arrival = True
    decide_on_completion = True

    def __init__(self, run_before_preempt_s: float = 2.0):
        self.run_before_preempt_s = run_before_preempt_s

    def allocate(self, view: ClusterView) -> Decision:
        status, running = view.status, view.running_jobs()
        if len(status) < 2:
            return Decision(keep=running)
        ran = float(view.executed_seconds(np.array([LONG]))[0])
        if status[LONG] == STATUS_PENDING and ran == 0:
            return Decision(keep=running, assign={LONG: _target((0, (0, 1)))})
        long_running = status[LONG] == STATUS_RUNNING and view.phase[LONG] == PHASE_RUNNING
        if long_running and status[URGENT] == STATUS_PENDING and ran >= self.run_before_preempt_s:
            keep = running[running != LONG]  # "long" is in neither keep nor assign: stopped
            return Decision(keep=keep, assign={URGENT: _target((0, (0, 1, 2, 3)))})
        if status[LONG] == STATUS_PENDING and ran > 0:
            return Decision(keep=running, assign={LONG: _target((1, (0,)), (2, (0,)))})
        return Decision(keep=running)


def _target(*parts: tuple[int, tuple[int, ...]]) -> Target:
    return Target(tuple((node, gpus, MILLI, 0) for node, gpus in parts))


def scripted_scheduler(round_s: float = 1.0) -> RoundScheduler:
    return RoundScheduler(PreemptThenResize(), round_s)
