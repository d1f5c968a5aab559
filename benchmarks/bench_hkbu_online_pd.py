"""HKBU-OnlinePD-reconstructed: `hkbu-online-pd` replays the full Philly trace in under 3x the
wall time of the plain FIFO + best-fit replay, both measured in this run on this machine.

Both runs: workload `philly` on cluster `philly` (82,247 jobs), deadlines at submit + 3 x duration, default energy
accounting. Needs the data (WATTSCHED_DATA or --data-dir).

    python benchmarks/bench_hkbu_online_pd.py [--data-dir DIR]
"""

from __future__ import annotations

from _replay import parser, timed, verdict
from wattsched.experiments.config import SimulationConfig


def main() -> None:
    args_parser = parser(__doc__)
    args_parser.add_argument("--max-jobs", type=int, default=None, help="a subset (default: the whole trace)")
    args = args_parser.parse_args()
    base = {"workload": "philly", "cluster": "philly", "deadline_slack": 3.0, "data_dir": args.data_dir,
            "max_jobs": args.max_jobs}  # fmt: skip
    fifo_s, fifo = timed(SimulationConfig(**base, queue="fifo", placement="best-fit"))
    pd_s, pd_ = timed(SimulationConfig(**base, allocation="hkbu-online-pd"))
    params = pd_["policies"]["allocation"]["parameters"]
    print(f"fifo + best-fit replay: {fifo_s:.1f} s ({fifo['jobs_completed']} jobs completed)")
    print(
        f"hkbu-online-pd replay:  {pd_s:.1f} s ({params['admitted']} admitted, {params['rejected']} rejected, "
        f"{params['late_starts']} late starts)"
    )
    verdict(pd_s, fifo_s)


if __name__ == "__main__":
    main()
