"""Allocation-rounds benchmark: round-based policies against the plain replay, measured in one run.

Machines of the same kind differ up to 3x in speed, so the targets are ratios against a reference measured in
the same invocation: the Philly replay with fifo + best-fit (the foundation case). The cases alternate, each in
its own child process (peak RSS is that run's alone), and the best of N runs of each is reported, by CPU time
(the verdict) and by wall time (benchmarks/_alternate.py).

- ``tiresias`` on the full Philly trace with 300 s rounds: at most 1.3x the replay (its rounds cost what changed
  since the last one: nothing is preempted on Philly, so most rounds change nothing).
- ``optimus-greedy`` on Pollux workload-6, cluster n16g4 with T4 GPUs, 60 s rounds: under a tenth of the replay.
- ``replay-python-loop`` (no target): the same replay with the compiled loop off (``WATTSCHED_NATIVE=0``), the
  Python event loop every round-based run uses: ``tiresias`` against it says what the rounds and the policy cost,
  ``tiresias`` against ``replay`` what the event loop in Python costs besides.

Each timing covers loading the trace, building the performance model, simulating and writing the run directory.
With ``--baseline-src`` the cases also run with that checkout (e.g. the commit before a change), alternated with
these, and each case's run directory must be identical to that checkout's.

    WATTSCHED_DATA=../shared/data python benchmarks/bench_rounds.py [--repeats 3] [--baseline-src /tmp/base/src]
"""

from __future__ import annotations

import os
import sys

from _alternate import main

REFERENCE = "replay"
PYTHON_LOOP = "replay-python-loop"  # the replay run by the Python event loop (the compiled loop switched off)
CASES = {
    REFERENCE: {"workload": "philly", "cluster": "philly", "queue": "fifo", "placement": "best-fit"},
    PYTHON_LOOP: {"workload": "philly", "cluster": "philly", "queue": "fifo", "placement": "best-fit"},
    "tiresias": {"workload": "philly", "cluster": "philly", "allocation": "tiresias", "round_s": 300},
    "optimus-greedy": {
        "workload": "pollux/workload-6",
        "cluster": "n16g4",
        "gpu_type": "T4",
        "allocation": "optimus-greedy",
        "round_s": 60,
    },
}
# Largest allowed CPU-time ratio against the reference.
MAX_RATIO = {"tiresias": 1.3, "optimus-greedy": 0.1}


if __name__ == "__main__":
    if sys.argv[1:3] == ["--child", PYTHON_LOOP]:
        os.environ["WATTSCHED_NATIVE"] = "0"  # read when the run starts (engine/kernels.py)
    main(__doc__, __file__, CASES, REFERENCE, MAX_RATIO)
