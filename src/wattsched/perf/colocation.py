"""GPU sharing calibrated on EaCO's measurements (docs/eaco.md §2).

Two sharing models exist; a run picks one (``--sharing-model``):

* ``slicing`` (default; docs/perf.md §4.2): jobs on a GPU time-slice it, each at ``min(1, 1/U)`` of its solo
  speed with ``U`` the sum of their solo utilisations (busy fractions), and the GPU draws power for the summed
  load.
* ``eaco``: fitted to EaCO's Table 1 (each of four models alone on an 8-V100 node: average power, energy, JCT) and
  its Table 3 pairs (two jobs sharing the same 8 GPUs). It tells a job's power load ``u_j`` (what it draws) apart
  from its busy fraction ``b_j = s * u_j`` (the share of time it keeps the GPU busy, what time-slicing divides):

  - loads: the four measured models get the load that reproduces their Table 1 power on the engine's V100 node
    model; every other model gets its catalog utilisation times the mean measured/catalog ratio of the four;
  - busy fractions: ``s`` makes the four jobs' busy fractions sum to the 96.64 % GPU utilisation EaCO measured
    with all four co-located (power is not busy time: docs/eaco.md §2);
  - speed: job j runs at ``1 / (max(B, 1) + kappa * (B - b_j))`` of its solo speed, ``B = sum b`` (time-slicing
    past B = 1, and co-runners' GPU time slowing a job even below it, as the measured pairs show);
  - power overlap: the GPU's load is ``max_j u_j + beta * (U - max_j u_j)`` with ``U = sum u`` (the pairs draw
    far less than the sum of their solo draws).

The fit is a minimax grid search over (beta, kappa), reproducible from the constants here (``calibrate``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from ..core.cluster import ClusterSpec
from ..core.gpus import gpu_model
from ..energy.binary import PWR_FALLBACK_CPU
from ..energy.power_models import idle_node_draw_w
from .catalog import MODEL_FACTS, normalise

SHARING_MODELS = ("slicing", "eaco", "measured")

# EaCO (Haghshenas & Hashemi, arXiv 2412.08294) Table 1: each job alone on one node of 8 V100.
# model key -> (average power W, energy kWh, JCT h)
EACO_ALONE: dict[str, tuple[float, float, float]] = {
    "alexnet": (712.0, 24.73, 34.76),
    "resnet18": (959.0, 33.69, 35.13),
    "resnet50": (1330.0, 47.87, 36.01),
    "vgg16": (1533.0, 55.38, 36.13),
}
# Table 3: pairs sharing the same 8 GPUs, started together. (models, energy of all jobs kWh, average JCT h)
EACO_PAIRS: tuple[tuple[tuple[str, str], float, float], ...] = (
    (("alexnet", "resnet50"), 50.93, 36.63),
    (("alexnet", "vgg16"), 54.97, 36.51),
    (("resnet18", "vgg16"), 60.84, 37.01),
)
# EaCO's text: average GPU utilisation (nvidia-smi) with all four Table 1 jobs co-located.
EACO_FOUR_JOB_UTILISATION = 0.9664
EACO_GPU = "V100"
EACO_GPUS = 8
EACO_SOCKETS = 2  # 2x Xeon Gold 6240 per node


@lru_cache(maxsize=64)
def host_idle_w(gpu: str, gpus: int, sockets: int = EACO_SOCKETS) -> float:
    """The engine's draw of a powered-on node with nothing running (linear power model, docs/energy.md), for one
    node of `gpus` GPUs and `sockets` CPU sockets of the power model's CPU."""
    cpu = PWR_FALLBACK_CPU
    node = ClusterSpec.from_arrays(
        name="host", node_names=["host"], cpu_milli=[sockets * cpu.cores_per_socket * cpu.vcpus_per_core * 1000],
        memory_mib=[0], gpu_count=[gpus], gpu_model_names=[gpu],
    )  # fmt: skip
    return float(idle_node_draw_w(node)[0])


@dataclass(frozen=True)
class SharingModel:
    """How jobs on one GPU slow each other down and what the GPU draws."""

    name: str = "slicing"
    interference: float = 0.0  # kappa, per unit of co-runners' busy fraction
    power_overlap: float = 1.0  # beta; 1: loads add up
    loads: Mapping[str, float] = field(default_factory=dict)  # model key -> solo load (measured)
    other_scale: float = 1.0  # catalog utilisation x this for models without a measured load
    busy_scale: float = 1.0  # a load's busy fraction per unit load; 1: loads are utilisations

    def load_of(self, model_key: str, catalog_util: float) -> float:
        measured = self.loads.get(model_key)
        return measured if measured is not None else min(catalog_util * self.other_scale, 1.0)

    def busy_of(self, load: float) -> float:
        """The share of time a job with this solo load (in this model's terms) keeps its GPU busy: what
        time-slicing divides."""
        return load * self.busy_scale

    def speed(self, own: float, others: Sequence[float], busy_scale: float | None = None) -> float:
        """Speed relative to alone of a job with solo load `own` next to co-runners with loads `others`.
        `busy_scale`: busy fraction per unit of these loads; None for loads in this model's own terms (`load_of`),
        1 for loads that are utilisations already (the catalog's)."""
        if not others:
            return 1.0
        scale = self.busy_scale if busy_scale is None else busy_scale
        mine = own * scale
        busy = mine + sum(others) * scale
        return 1.0 / (max(busy, 1.0) + self.interference * (busy - mine))

    def gpu_load(self, loads: Sequence[float]) -> float:
        """The GPU's load (fraction of its dynamic power range) with jobs of these solo loads on it."""
        if not loads:
            return 0.0
        top = max(loads)
        return top + self.power_overlap * (sum(loads) - top)

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"sharing_model": self.name}
        if self.name != "slicing":
            out.update(
                interference_kappa=round(self.interference, 4),
                power_overlap_beta=round(self.power_overlap, 4),
                measured_loads={k: round(v, 4) for k, v in self.loads.items()},
                other_models_scale=round(self.other_scale, 4),
                busy_fraction_scale=round(self.busy_scale, 4),
                basis="fitted to EaCO Table 1 and Table 3 pairs; busy fractions scaled to its 96.64 % four-job "
                "utilisation (docs/eaco.md §2)",
            )
        return out


SLICING = SharingModel()


# --- predicting a set of jobs that start together on the same GPUs ---------------------------------------------
@dataclass(frozen=True)
class SetPrediction:
    energy_kwh: float
    avg_jct_h: float
    avg_power_w: float
    jct_h: dict[str, float]


def predict_set(
    model: SharingModel, loads: Sequence[float], solo_jct_h: Sequence[float], gpu: str, gpus: int, names=None
) -> SetPrediction:
    """Jobs with these solo loads and solo JCTs start together on the same `gpus` GPUs of one node: run them to
    completion under the sharing model (events at each completion) and add up the node's energy."""
    spec = gpu_model(gpu)
    dyn_w = gpus * (spec.max_w - spec.idle_w)
    base_w = host_idle_w(gpu, gpus)
    names = list(names) if names is not None else [str(i) for i in range(len(loads))]
    left = dict(enumerate(float(h) for h in solo_jct_h))  # hours of solo work left
    t = energy_wh = 0.0
    jct: dict[str, float] = {}
    while left:
        active = list(left)
        on = [loads[i] for i in active]
        power = base_w + dyn_w * min(1.0, model.gpu_load(on))
        speeds = {i: model.speed(loads[i], [loads[k] for k in active if k != i]) for i in active}
        step = min(left[i] / speeds[i] for i in active)
        energy_wh += power * step
        t += step
        for i in active:
            left[i] -= speeds[i] * step
            if left[i] <= 1e-9 * max(solo_jct_h[i], 1.0):
                jct[names[i]] = t
                del left[i]
    avg = float(np.mean(list(jct.values()))) if jct else 0.0
    return SetPrediction(energy_wh / 1000.0, avg, energy_wh / t if t > 0 else base_w, jct)


# --- the fit ----------------------------------------------------------------------------------------------------
def measured_loads(gpu: str = EACO_GPU, gpus: int = EACO_GPUS) -> dict[str, float]:
    """The load of each Table 1 model that reproduces its measured average power on the engine's node model."""
    spec = gpu_model(gpu)
    base = host_idle_w(gpu, gpus)
    return {m: (p - base) / (gpus * (spec.max_w - spec.idle_w)) for m, (p, _, _) in EACO_ALONE.items()}


@dataclass(frozen=True)
class FitRow:
    row: str
    energy_kwh: float
    energy_kwh_measured: float
    avg_jct_h: float
    avg_jct_h_measured: float

    @property
    def energy_error(self) -> float:
        return self.energy_kwh / self.energy_kwh_measured - 1.0

    @property
    def jct_error(self) -> float:
        return self.avg_jct_h / self.avg_jct_h_measured - 1.0


ENERGY_TOLERANCE = 0.05  # calibration targets: 5 % in energy, 2 % in JCT per row
JCT_TOLERANCE = 0.02


def _rows(model: SharingModel) -> list[FitRow]:
    loads = model.loads
    rows = []
    for m, (_, energy, jct) in EACO_ALONE.items():
        p = predict_set(model, [loads[m]], [jct], EACO_GPU, EACO_GPUS, [m])
        rows.append(FitRow(m, p.energy_kwh, energy, p.avg_jct_h, jct))
    for pair, energy, jct in EACO_PAIRS:
        solo = [EACO_ALONE[m][2] for m in pair]
        p = predict_set(model, [loads[m] for m in pair], solo, EACO_GPU, EACO_GPUS, pair)
        rows.append(FitRow(" & ".join(pair), p.energy_kwh, energy, p.avg_jct_h, jct))
    return rows


def _worst(model: SharingModel) -> float:
    """The largest row error in units of its tolerance."""
    return max(
        max(abs(r.energy_error) / ENERGY_TOLERANCE, abs(r.jct_error) / JCT_TOLERANCE) for r in _rows(model)
    )


@lru_cache(maxsize=1)
def calibrate() -> tuple[SharingModel, tuple[FitRow, ...]]:
    """The `eaco` sharing model and its error on every calibration row (minimax over a coarse-to-fine grid)."""
    loads = measured_loads()
    ratios = [loads[m] / MODEL_FACTS[m].utilisation for m in loads]
    # Power-derived loads sum to 1.41 for the four jobs, yet together they kept the GPUs 96.64 % busy: busy time
    # is a scaled copy of the load, the scale set by that measurement (not by any JCT).
    busy = EACO_FOUR_JOB_UTILISATION / sum(loads.values())
    base = SharingModel("eaco", loads=loads, other_scale=float(np.mean(ratios)), busy_scale=busy)
    best = (np.inf, 1.0, 0.0)
    beta_lo, beta_hi, kappa_lo, kappa_hi = 0.0, 1.0, 0.0, 1.0
    for _ in range(4):  # 21 x 21 grid, then zoom around the best point
        for beta in np.linspace(beta_lo, beta_hi, 21):
            for kappa in np.linspace(kappa_lo, kappa_hi, 21):
                cost = _worst(_with(base, beta, kappa))
                if cost < best[0]:
                    best = (cost, float(beta), float(kappa))
        bw, kw = (beta_hi - beta_lo) / 10, (kappa_hi - kappa_lo) / 10
        beta_lo, beta_hi = max(best[1] - bw, 0.0), min(best[1] + bw, 1.0)
        kappa_lo, kappa_hi = max(best[2] - kw, 0.0), best[2] + kw
    model = _with(base, best[1], best[2])
    return model, tuple(_rows(model))


def _with(model: SharingModel, beta: float, kappa: float) -> SharingModel:
    return replace(model, interference=kappa, power_overlap=beta)


def sharing_model(name: str) -> SharingModel:
    if name == "slicing":
        return SLICING
    if name == "eaco":
        return calibrate()[0]
    if name == "measured":
        from .measured import MEASURED

        return MEASURED
    raise ValueError(f"unknown sharing model {name!r}: one of {', '.join(SHARING_MODELS)}")


# --- what `wattsched perf colocate` shows -----------------------------------------------------------------------
def colocate(
    models: Sequence[str], gpu: str = EACO_GPU, gpus: int = EACO_GPUS, hours: float | None = None
) -> dict[str, Any]:
    """The predicted energy, average JCT and average power of `models` sharing the same GPUs against each alone,
    under the calibrated (`eaco`) sharing model. Solo JCTs: EaCO's Table 1 for its four models on 8 V100, else
    `hours` (default: the mean of Table 1's JCTs)."""
    from ..core.errors import UnknownNameError

    if not models:
        raise UnknownNameError("model", "", sorted(MODEL_FACTS))
    keys = [normalise(m) for m in models]
    for raw, key in zip(models, keys, strict=True):
        if key not in MODEL_FACTS:
            raise UnknownNameError("model", raw, sorted(MODEL_FACTS))
    spec = gpu_model(gpu)  # raises UnknownNameError for a GPU not in the catalog
    if gpus < 1:
        raise ValueError(f"--gpus must be at least 1, got {gpus}")
    model = calibrate()[0]
    loads = [model.load_of(k, MODEL_FACTS[k].utilisation) for k in keys]
    table1 = gpu == EACO_GPU and gpus == EACO_GPUS
    default_h = float(np.mean([jct for _, _, jct in EACO_ALONE.values()]))
    solo = [
        float(hours) if hours is not None else (EACO_ALONE[k][2] if table1 and k in EACO_ALONE else default_h)
        for k in keys
    ]
    names = [f"{k}#{i + 1}" if keys.count(k) > 1 else k for i, k in enumerate(keys)]
    together = predict_set(model, loads, solo, gpu, gpus, names)
    alone = {
        n: predict_set(model, [u], [h], gpu, gpus, [n]) for n, u, h in zip(names, loads, solo, strict=True)
    }
    memory = sum(MODEL_FACTS[k].memory_gib for k in keys)
    notes = [
        "sharing model `eaco`: fitted to EaCO Table 1 and the Table 3 pairs (docs/eaco.md §2); sets of three or "
        "four jobs are predictions, not calibration rows",
    ]
    unmeasured = [k for k in keys if k not in model.loads]
    if unmeasured:
        notes.append(
            f"load of {', '.join(sorted(set(unmeasured)))} not measured by EaCO: catalog utilisation x "
            f"{model.other_scale:.3f}, busy fraction that load x {model.busy_scale:.3f} as for EaCO's four "
            "(reconstructed)"
        )
    if hours is None and not all(table1 and k in EACO_ALONE for k in keys):
        notes.append(f"solo JCT {default_h:.2f} h assumed (mean of EaCO Table 1) where Table 1 has none")
    if gpu != EACO_GPU:
        notes.append(f"loads measured on V100 applied to {gpu} as fractions of its dynamic power range")
    if memory > spec.memory_gib:
        notes.append(
            f"summed memory {memory:g} GiB exceeds the {spec.memory_gib:g} GiB of a {gpu}: EaCO would not "
            "co-locate this set"
        )
    sum_alone = sum(p.energy_kwh for p in alone.values())
    return {
        "gpu": gpu,
        "gpus": gpus,
        "models": names,
        "set": {
            "energy_kwh": together.energy_kwh,
            "avg_jct_h": together.avg_jct_h,
            "avg_power_w": together.avg_power_w,
            "jct_h": together.jct_h,
        },
        "alone": {
            n: {"energy_kwh": p.energy_kwh, "avg_jct_h": p.avg_jct_h, "avg_power_w": p.avg_power_w}
            for n, p in alone.items()
        },
        "alone_total_energy_kwh": sum_alone,
        "energy_saving": 1.0 - together.energy_kwh / sum_alone if sum_alone > 0 else 0.0,
        "jct_increase": together.avg_jct_h / float(np.mean([p.avg_jct_h for p in alone.values()])) - 1.0,
        "gpu_loads": dict(zip(names, loads, strict=True)),
        "busy_fractions": {n: model.busy_of(u) for n, u in zip(names, loads, strict=True)},
        "memory_gib": memory,
        "notes": notes,
        **{k: v for k, v in model.describe().items() if k != "sharing_model"},
    }
