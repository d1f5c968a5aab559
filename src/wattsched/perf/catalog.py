"""Per-model facts the performance model needs beyond the throughput tables (docs/perf.md §3, §4).

* Which measured tables model each catalog GPU: the GPU's own measurements where they exist (Gavel: K80, P100,
  V100; ElasticFlow: A100, T4), else a stated proxy.
* Per model: solo GPU utilisation (drives time-slicing and the linear power model), GPU memory per GPU
  (co-location must fit), checkpoint size (restart cost).

Utilisation, memory and checkpoint size are **reconstructed** defaults, not measurements: utilisation from the
anchors in docs/energy-models.md §2 and §4 (compute-bound training near saturation, a V100 at 84 % in nvidia-smi
logs; NCF not GPU-bound); memory as the typical PyTorch peak at the model's usual per-GPU batch, rounded;
checkpoint size as parameters x 4 bytes x 3 (weights and two Adam moments) from the models' published parameter
counts. They are used for co-location feasibility, time-slicing and restart cost only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .tables import parse_gavel_type


@dataclass(frozen=True)
class ModelFacts:
    utilisation: float  # solo GPU utilisation while training
    memory_gib: float  # GPU memory per GPU at its usual per-GPU batch
    params_m: float  # parameters, millions

    @property
    def checkpoint_gb(self) -> float:
        return self.params_m * 1e6 * 4 * 3 / 1e9


# Keys are normalised names (see `normalise`): lower case, no "-", "_" or batch suffix.
MODEL_FACTS: dict[str, ModelFacts] = {
    "resnet50": ModelFacts(0.90, 10.0, 25.6),
    "imagenet": ModelFacts(0.90, 10.0, 25.6),  # Pollux/ElasticFlow T4 name: ResNet-50 on ImageNet
    "resnet101": ModelFacts(0.90, 12.0, 44.5),
    "resnet152": ModelFacts(0.90, 14.0, 60.2),
    "resnet18": ModelFacts(0.80, 3.0, 11.7),
    "cifar10": ModelFacts(0.75, 2.0, 11.2),  # Pollux: ResNet-18 on CIFAR-10
    "resnet50cifar10": ModelFacts(0.75, 3.0, 23.5),
    "vgg11": ModelFacts(0.90, 10.0, 132.9),
    "vgg16": ModelFacts(0.90, 12.0, 138.4),
    "vgg19": ModelFacts(0.90, 13.0, 143.7),
    "alexnet": ModelFacts(0.80, 4.0, 61.1),
    "googlenet": ModelFacts(0.85, 6.0, 6.6),
    "inception3": ModelFacts(0.90, 9.0, 23.8),
    "inception4": ModelFacts(0.90, 12.0, 42.7),
    "bert": ModelFacts(0.85, 14.0, 110.0),
    "gpt2": ModelFacts(0.90, 16.0, 124.0),
    "transformer": ModelFacts(0.85, 8.0, 65.0),
    "lm": ModelFacts(0.60, 4.0, 30.0),
    "deepspeech2": ModelFacts(0.80, 10.0, 38.0),
    "yolov3": ModelFacts(0.85, 10.0, 61.9),
    "ncf": ModelFacts(0.35, 1.5, 4.0),
    "recommendation": ModelFacts(0.35, 2.0, 4.0),
    "a3c": ModelFacts(0.30, 1.0, 1.0),
    "cyclegan": ModelFacts(0.90, 6.0, 28.3),
}

# Catalog GPU -> (source, table GPU) whose measurements model it; proxies are stated in every run's notes.
TABLE_SOURCE: dict[str, tuple[str, str]] = {
    "V100": ("gavel", "v100"),
    "V100M16": ("gavel", "v100"),
    "V100M32": ("gavel", "v100"),
    "V100-PCIE": ("gavel", "v100"),
    "P100": ("gavel", "p100"),
    "T4": ("elasticflow", "T4"),
    "A100": ("elasticflow", "A100"),
    "G3": ("elasticflow", "A100"),
    "A100-PCIE": ("elasticflow", "A100"),
    "H100": ("elasticflow", "A100"),
    "H200": ("elasticflow", "A100"),
    "H100-PCIE": ("elasticflow", "A100"),
    "A10": ("elasticflow", "T4"),
    "G2": ("elasticflow", "T4"),
    "A40": ("elasticflow", "A100"),
    "RTX6000": ("elasticflow", "T4"),
}
OWN_MEASUREMENTS = {"V100", "V100M16", "V100M32", "P100", "T4", "A100"}

_NON_ALNUM = re.compile(r"[^a-z0-9]")


def normalise(name: str) -> str:
    """'ResNet-50 (batch size 64)' -> 'resnet50'; 'resnet50_cifar10' -> 'resnet50cifar10'."""
    family, _ = parse_gavel_type(str(name))
    return _NON_ALNUM.sub("", family.lower())


def facts(name: str) -> ModelFacts | None:
    return MODEL_FACTS.get(normalise(name))
