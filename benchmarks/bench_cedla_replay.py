"""CE-DLA: the `cedla` policy replays the Philly trace for one region in under 3x the wall time of the
plain FIFO + best-fit replay, both measured in this run on this machine.

Both runs: workload `philly` on cluster `philly`, region and year as given, deadlines at submit + 3 x duration.
The reference is FIFO + best-fit, always-on, training only (the plain replay). The measured run is `cedla` with the
built-in inference services and idle-timeout right-sizing (the experiment's configuration). Needs the data
(WATTSCHED_DATA or --data-dir).

    python benchmarks/bench_cedla_replay.py [--region DE-LU] [--year 2023]
"""

from __future__ import annotations

from _replay import parser, timed, verdict
from wattsched.experiments.config import SimulationConfig


def main() -> None:
    args_parser = parser(__doc__)
    args_parser.add_argument("--region", default="DE-LU")
    args_parser.add_argument("--year", type=int, default=2023)
    args = args_parser.parse_args()
    base = {"workload": "philly", "cluster": "philly", "region": args.region, "year": args.year,
            "deadline_slack": 3.0, "data_dir": args.data_dir}  # fmt: skip
    fifo_s, fifo = timed(SimulationConfig(**base, queue="fifo", placement="best-fit"))
    cedla_s, cedla = timed(
        SimulationConfig(**base, allocation="cedla", services="default", power_manager="idle-timeout")
    )
    print(f"fifo + best-fit replay: {fifo_s:.1f} s ({fifo['jobs_completed']} jobs)")
    print(f"cedla replay:           {cedla_s:.1f} s ({cedla['jobs_completed']} jobs incl. service-hours)")
    verdict(cedla_s, fifo_s)


if __name__ == "__main__":
    main()
