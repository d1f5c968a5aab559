"""CE-DLA: the `cedla` policy replays the Philly trace for one region in at most 2x the CPU time of the plain
FIFO + best-fit replay, both measured in this run on this machine (benchmarks/_alternate.py: alternating child
processes, best of N, CPU and wall time).

Both runs: workload `philly` on cluster `philly`, region DE-LU, year 2023, deadlines at submit + 3 x duration. The
reference is FIFO + best-fit, always-on, training only (the plain replay). The measured run is `cedla` with the
built-in inference services and idle-timeout right-sizing (the experiment's configuration). Needs the data
(WATTSCHED_DATA). With ``--baseline-src`` both also run with that checkout, and cedla's run directory must be
identical to that checkout's.

    WATTSCHED_DATA=../shared/data python benchmarks/bench_cedla_replay.py [--repeats 3] [--baseline-src DIR]
"""

from __future__ import annotations

from _alternate import main

BASE = {"workload": "philly", "cluster": "philly", "region": "DE-LU", "year": 2023, "deadline_slack": 3.0}
REFERENCE = "fifo-replay"
CASES = {
    REFERENCE: {**BASE, "queue": "fifo", "placement": "best-fit"},
    "cedla": {**BASE, "allocation": "cedla", "services": "default", "power_manager": "idle-timeout"},
}
MAX_RATIO = {"cedla": 2.0}


if __name__ == "__main__":
    main(__doc__, __file__, CASES, REFERENCE, MAX_RATIO)
