"""Generated scaling tables: iterations/s versus GPU count from an analytic law, for runs that must not need a
dataset (`wattsched demo`, ``--performance generated``). **Not measurements** (docs/perf.md §1.1).

One data-parallel iteration on ``n`` GPUs takes compute time ``T1 / n`` (the global batch split evenly) plus a
ring all-reduce of the gradients, ``2 (n - 1) / n x S / bandwidth`` (Patarasuk and Yuan, J. Parallel Distrib.
Comput. 69(2), 2009). With the one-GPU compute time as the unit:

    T(n) / T1 = 1 / n + rho x 2 (n - 1) / n x k(n),    k(n) = 1 for n <= GPUS_PER_NODE, else INTER_NODE_SLOWDOWN

``rho`` is the all-reduce time of the model's gradients over the node's links relative to its one-GPU compute
time, taken proportional to its parameter count (``params_m / 1000``, so ResNet-50 ~0.026 and VGG-16 ~0.14: big
dense models scale worse). Anchor: ElasticFlow's measured A100 ResNet-50 table at global batch 256 (docs/perf.md
§1) speeds up 5.64x on 8 GPUs, 8.23x on 16 and 10.2x on 64; solving the law for those gives rho ~0.030 and an
inter-node slowdown of 1.2-1.6, hence 0.026 and 1.5 here. Only the shape matters: a trace job's work is its trace
duration times its table throughput at the trace's GPU count (docs/perf.md §6.1), so the absolute unit cancels.
"""

from __future__ import annotations

import numpy as np

from .catalog import MODEL_FACTS
from .tables import ScalingTable

SOURCE = "generated"
GPUS_PER_NODE = 8
INTER_NODE_SLOWDOWN = 1.5  # gradients cross the node's network instead of its GPU links (anchor: docstring)
COUNTS = (1, 2, 4, 8, 16, 32, 64, 128)
# Models with facts in the catalog; the four EaCO measured in pairs (its sharing model is calibrated on them) first.
MODELS = ("alexnet", "resnet18", "resnet50", "vgg16", "bert", "gpt2", "deepspeech2", "ncf")


def communication_ratio(model: str) -> float:
    """rho of the module docstring: all-reduce time over one-GPU compute time, from the parameter count."""
    return MODEL_FACTS[model].params_m / 1000.0


def relative_iteration_time(model: str, gpus: np.ndarray) -> np.ndarray:
    n = np.asarray(gpus, dtype=np.float64)
    slowdown = np.where(n <= GPUS_PER_NODE, 1.0, INTER_NODE_SLOWDOWN)
    return 1.0 / n + communication_ratio(model) * 2.0 * (n - 1.0) / n * slowdown


def generated_tables(gpu: str) -> dict[str, ScalingTable]:
    """One table per model in MODELS for GPU type `gpu`: one row (batch 0: the model's own batch), 1 it/s on one
    GPU."""
    counts = np.array(COUNTS, dtype=np.int64)
    return {
        m: ScalingTable(
            source=f"{SOURCE}/{gpu}",
            gpu=gpu,
            model=m,
            batch_sizes=np.zeros(1),
            counts=counts,
            its=(1.0 / relative_iteration_time(m, counts)).reshape(1, -1),
        )
        for m in MODELS
    }
