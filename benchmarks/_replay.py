"""What the replay-ratio benchmarks share: a parser, a timed run and the verdict against a ratio target."""

from __future__ import annotations

import argparse
import sys
import time

from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import run_simulation

TARGET_RATIO = 3.0  # the targets: a policy's Philly replay in under 3x the plain fifo + best-fit replay


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=None)
    return p


def timed(cfg: SimulationConfig) -> tuple[float, dict]:
    t0 = time.perf_counter()
    result = run_simulation(cfg, None)
    return time.perf_counter() - t0, result.summary


def verdict(policy_s: float, reference_s: float) -> None:
    """Print the ratio and exit 0 when it meets the target, 1 when it does not."""
    ratio = policy_s / reference_s
    met = ratio < TARGET_RATIO
    print(f"ratio {ratio:.2f} (target < {TARGET_RATIO:g}): {'met' if met else 'NOT met'}")
    sys.exit(0 if met else 1)
