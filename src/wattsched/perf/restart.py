"""What a checkpoint-restart costs: the delay a job spends holding GPUs without progress after a resume, resize
or migration (docs/perf.md §5; published range in docs/baselines.md, "Restart costs across simulators").

* ``elasticflow`` (default): ElasticFlow's ``estimate_overhead`` (pkusys/ElasticFlow ``scheduler/utils.py``): a
  base of 2 s (7 s with 256 or more GPUs); if the job resumes on exactly the GPUs it last ran on, only the base;
  otherwise +27 s (+20 s more with 256 or more GPUs) and 2 x (log2 g + 1) s for g GPUs. 8 GPUs: 37 s.
  wattsched adds the checkpoint's save and load time, 2 x size / bandwidth, from the per-model checkpoint
  size (``perf/catalog``; 0 for a job without a model).
* ``fixed``: the same delay for every restart (Pollux charges 30 s per reallocation).

A job's first start costs nothing: trace durations already include start-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RESTART_KINDS = ("elasticflow", "fixed")


@dataclass(frozen=True)
class RestartModel:
    kind: str = "elasticflow"
    fixed_s: float = 30.0
    storage_gb_per_s: float = 1.0  # checkpoint save/load bandwidth (reconstructed: a shared file system)

    def __post_init__(self) -> None:
        if self.kind not in RESTART_KINDS:
            raise ValueError(f"unknown restart model '{self.kind}'; valid: {', '.join(RESTART_KINDS)}")

    def delay_s(self, num_gpus: int, same_gpus: bool, checkpoint_gb: float = 0.0) -> float:
        if self.kind == "fixed":
            return self.fixed_s
        g = max(int(num_gpus), 1)
        big = g >= 256
        delay = 7.0 if big else 2.0
        if not same_gpus:
            delay += 27.0 + (20.0 if big else 0.0) + 2.0 * (math.log2(g) + 1.0)
        return delay + 2.0 * checkpoint_gb / self.storage_gb_per_s

    def describe(self) -> dict[str, object]:
        if self.kind == "fixed":
            return {"restart_model": "fixed", "restart_delay_s": self.fixed_s}
        return {
            "restart_model": "elasticflow",
            "formula": "2 s (+5 s at >=256 GPUs); unless resumed on the same GPUs: +27 s (+20 s at >=256 GPUs) "
            "+ 2*(log2 g + 1) s; plus 2 x checkpoint size / storage bandwidth",
            "storage_gb_per_s": self.storage_gb_per_s,
        }
