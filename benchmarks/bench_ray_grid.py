"""The whole default FGD/PWR grid (11 policies x 10 seeds = 110 runs on the Alibaba v2023 default trace) on the
process pool and on a local multi-node Ray cluster (a 0-CPU head and three 1-CPU nodes, each its own raylet), in
one invocation: both wall times, their ratio, and whether curves.csv and grid.csv are identical byte for byte.

The process pool runs first, before the cluster exists; the Ray time includes connecting to the running cluster
and starting its worker processes, not starting the cluster (printed separately). Plots are off in both runs.
Exits 1 when the files differ.

Usage: WATTSCHED_DATA=DIR python benchmarks/bench_ray_grid.py [--seeds 10] [--workers 2] [--ray-workers N]
"""

from __future__ import annotations

import os

# One thread per process, as in the other benchmarks (and the executors' workers).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

NODES = 3
NODE_ARGS = {"include_dashboard": False, "object_store_memory": 80 * 2**20}
COMPARED = ("curves.csv", "grid.csv")


def machine() -> str:
    load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    return (
        f"{platform.platform()} | {os.cpu_count()} logical CPUs | Python {platform.python_version()} | "
        f"load {load}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2, help="process pool size")
    parser.add_argument("--ray-workers", type=int, default=None, help="runs in flight on Ray [cluster CPUs]")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    from wattsched.core.errors import WattschedError
    from wattsched.experiments.fgd_pwr import DEFAULT_POLICIES, run_experiment, trace_inputs
    from wattsched.experiments.parallel import Execution

    print(f"machine: {machine()}; ray {ray.__version__}")
    try:
        inputs = trace_inputs("default", args.data_dir)
    except WattschedError as exc:
        print(f"error: {exc}\n(set WATTSCHED_DATA to the dataset directory)", file=sys.stderr)
        return 2
    runs = len(DEFAULT_POLICIES) * args.seeds
    common = {"seeds": args.seeds, "inputs": inputs, "plots": False}
    with tempfile.TemporaryDirectory() as tmp:
        pool_out, ray_out = Path(tmp, "process"), Path(tmp, "ray")
        t0 = time.perf_counter()
        pool = run_experiment(out=pool_out, workers=args.workers, **common)
        pool_s = time.perf_counter() - t0
        print(f"process pool: {runs} runs on {pool.summary['workers']} worker processes: {pool_s:.1f} s")

        t0 = time.perf_counter()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, **NODE_ARGS})
        try:
            for _ in range(NODES):
                cluster.add_node(num_cpus=1, **NODE_ARGS)
            cluster.wait_for_nodes()
            print(
                f"Ray cluster: 0-CPU head + {NODES} x 1-CPU nodes started in {time.perf_counter() - t0:.1f} s"
            )
            t0 = time.perf_counter()
            on_ray = run_experiment(
                out=ray_out,
                workers=args.ray_workers,
                execution=Execution("ray", cluster.address),
                **common,
            )
            ray_s = time.perf_counter() - t0
        finally:
            if ray.is_initialized():
                ray.shutdown()
            cluster.shutdown()
        print(f"ray: {runs} runs, {on_ray.summary['workers']} in flight: {ray_s:.1f} s")
        print(f"ratio ray / process pool: {ray_s / pool_s:.2f}")
        identical = all((pool_out / n).read_bytes() == (ray_out / n).read_bytes() for n in COMPARED)
        print(f"{' and '.join(COMPARED)} identical: {'yes' if identical else 'NO'}")
    print(f"after: {machine()}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
