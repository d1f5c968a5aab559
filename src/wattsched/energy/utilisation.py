"""Default GPU utilisation per model, used by the `linear` and `dvfs` power models when a trace has none.

Reconstructed defaults (no trace shipped with wattsched has per-job GPU utilisation): compute-bound DNN training
runs the GPU near saturation (a V100-SXM2 at 84 % utilisation in the logs cited by docs/energy-models.md §2); NCF is not
GPU-bound (34-84 W on a 250 W V100 whatever the power limit, docs/energy-models.md §4); inference at small batches
leaves the GPU mostly idle (H100 ~300 W of 700 W at batch 1, docs/energy-models.md §2).
"""

from __future__ import annotations

import numpy as np

from ..core.cluster import MILLI
from ..core.jobs import INFERENCE, JobTable

MODEL_GPU_UTIL: dict[str, float] = {
    "resnet50": 0.90,
    "imagenet": 0.90,
    "vgg16": 0.90,
    "vgg19": 0.90,
    "vgg11": 0.90,
    "inception3": 0.90,
    "inception4": 0.90,
    "gpt2": 0.90,
    "bert": 0.85,
    "yolov3": 0.85,
    "deepspeech2": 0.80,
    "cifar10": 0.75,
    "resnet50_cifar10": 0.75,
    "ncf": 0.35,
}
TRAINING_DEFAULT_UTIL = 0.84
INFERENCE_DEFAULT_UTIL = 0.40


def job_gpu_load(jobs: JobTable) -> np.ndarray:
    """Utilisation each job adds to each GPU it holds: the trace value where present, else the model or class
    default; a shared pod adds at most its share of the GPU (gpu_milli / 1000)."""
    names = np.char.lower(jobs.model_name.astype(str))
    by_model = np.array([MODEL_GPU_UTIL.get(str(n), np.nan) for n in names], dtype=np.float64)
    by_class = np.where(jobs.job_class == INFERENCE, INFERENCE_DEFAULT_UTIL, TRAINING_DEFAULT_UTIL)
    util = np.where(np.isnan(jobs.gpu_util), np.where(np.isnan(by_model), by_class, by_model), jobs.gpu_util)
    share = np.minimum(jobs.gpu_milli, MILLI) / MILLI
    return np.clip(util, 0.0, 1.0) * np.where(jobs.num_gpu > 0, share, 0.0)
