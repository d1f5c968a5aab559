"""GPU sharing calibrated on measured profiles (docs/perf.md §9): ``--sharing-model measured``.

Jobs that time-slice one GPU are described by what each does alone: its utilisation ``u`` (the GPU's busy
fraction) and its GPU power ``P``. The GPU held by the set, computing nothing, draws ``P_h`` (its held draw, from
the profiles where measured, else the catalogue's; docs/energy.md, "GPU power states").

* **Speed.** The GPU's busy time is shared max-min fairly: each job asks for ``u_i`` of it; with two or more jobs,
  a share ``o`` of the GPU's time is lost to context switches, so ``1 - o`` is handed out, the smallest demands
  first in full, the rest in equal parts. Job i runs at ``s_i = (busy time it gets) / u_i`` of its speed alone.
  Input-bound jobs whose demands fit (``U = sum u <= 1 - o``) overlap and keep their speed; GPU-bound jobs are
  time-sliced, each at about ``(1 - o) / U``.
* **Power.** Each job's work costs the dynamic energy it costs alone: ``P = P_h + sum_i s_i (P_i - P_h)``, plus the
  switching time ``f = min(U, 1) - sum_i s_i u_i`` drawn at ``lambda`` times the jobs' mean busy draw
  ``mean_i (P_i - P_h) / u_i``. Two GPU-bound jobs then draw about the mean of their powers alone, not the maximum.

``o`` and ``lambda`` are fitted (least squares on the relative errors of every job's speed and the GPU's power) on
the sets of two jobs in the ``h200-colocation-probe`` dataset (gpu-bound and input-bound files together);
``fit_sharing`` reproduces the fit and reports each row's error (``wattsched perf fit-sharing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.gpus import gpu_model
from .colocation import SharingModel
from .profiles import MeasuredSet, Profiles

# Fitted on h200-colocation-probe gpu-bound.csv + input-bound.csv, sets of two (docs/perf.md §9.2; reproduced by
# `wattsched perf fit-sharing` and tests/unit/test_measured_sharing.py when the dataset is present).
H200_SWITCH_OVERHEAD = 0.125
H200_SWITCH_POWER = 0.296
MIN_UTILISATION = 0.01  # a job reported at 0 % still takes some GPU time


@dataclass(frozen=True)
class MeasuredSharing(SharingModel):
    name: str = "measured"
    switch_overhead: float = H200_SWITCH_OVERHEAD  # o: share of GPU time lost to context switches
    switch_power: float = H200_SWITCH_POWER  # lambda: switching draws this share of the mean busy draw
    basis: str = "fitted to h200-colocation-probe sets of two (docs/perf.md §9.2)"

    def speeds(self, utilisations: Sequence[float] | np.ndarray) -> np.ndarray:
        """Each job's speed relative to alone with jobs of these utilisations on one GPU."""
        u = np.maximum(np.asarray(utilisations, dtype=np.float64), MIN_UTILISATION)
        if u.size <= 1:
            return np.ones(u.size)
        busy = np.zeros(u.size)
        left = 1.0 - self.switch_overhead
        for k, i in enumerate(np.argsort(u, kind="stable").tolist()):
            busy[i] = min(u[i], left / (u.size - k))
            left -= busy[i]
        return np.minimum(busy / u, 1.0)

    def speed(self, own: float, others: Sequence[float], busy_scale: float | None = None) -> float:
        # Utilisations are busy fractions already: no scale applies (busy_scale is the EaCO model's).
        if not others:
            return 1.0
        return float(self.speeds([own, *others])[0])

    def switching(self, utilisations: Sequence[float] | np.ndarray, speeds: np.ndarray) -> float:
        """Share of the time the GPU spends switching between the jobs."""
        u = np.maximum(np.asarray(utilisations, dtype=np.float64), MIN_UTILISATION)
        return max(0.0, min(float(u.sum()), 1.0) - float((speeds * u).sum())) if u.size > 1 else 0.0

    def power_terms_w(
        self, utilisations: Sequence[float], powers_w: Sequence[float], held_w: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(speeds, each job's share of the GPU's draw above ``held_w``); the shares sum to ``P - P_h``."""
        u = np.maximum(np.asarray(utilisations, dtype=np.float64), MIN_UTILISATION)
        dynamic = np.maximum(np.asarray(powers_w, dtype=np.float64) - held_w, 0.0)
        speeds = self.speeds(u)
        switching = self.switching(u, speeds)
        return speeds, speeds * dynamic + self.switch_power * switching * dynamic / u / max(u.size, 1)

    def predict(
        self, utilisations: Sequence[float], powers_w: Sequence[float], held_w: float
    ) -> tuple[np.ndarray, float]:
        """(each job's speed, the GPU's power) with jobs of these utilisations and powers alone on one GPU."""
        speeds, terms = self.power_terms_w(utilisations, powers_w, held_w)
        if len(utilisations) == 1:
            return speeds, float(powers_w[0])
        return speeds, held_w + float(terms.sum())

    def set_power_w(self, utilisations: Sequence[float], powers_w: Sequence[float], held_w: float) -> float:
        return self.predict(utilisations, powers_w, held_w)[1]

    def describe(self) -> dict[str, object]:
        return {
            "sharing_model": self.name,
            "switch_overhead": round(self.switch_overhead, 4),
            "switch_power": round(self.switch_power, 4),
            "basis": self.basis,
        }


MEASURED = MeasuredSharing()


def held_w_for(profiles: Profiles | None, gpu: str) -> tuple[float, str]:
    """The GPU's held draw and where it comes from (the profiles' readings, else the catalogue)."""
    measured = profiles.held_w(gpu) if profiles is not None else None
    if measured is not None:
        return measured, "profiles"
    spec = gpu_model(gpu)
    return spec.held_draw_w, "catalogue (measured)" if spec.held_measured else "catalogue (reconstructed)"


# --- the fit ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FitRow:
    regime: str
    name: str
    source: str
    speed_measured: tuple[float, ...]
    speed_model: tuple[float, ...]
    power_measured_w: float
    power_model_w: float
    saving_measured: float
    saving_model: float

    @property
    def speed_errors(self) -> tuple[float, ...]:
        return tuple(m / s - 1.0 for m, s in zip(self.speed_model, self.speed_measured, strict=True))

    @property
    def power_error(self) -> float:
        return self.power_model_w / self.power_measured_w - 1.0


def _fit_rows(model: MeasuredSharing, profiles: Profiles, sets: Sequence[MeasuredSet]) -> list[FitRow]:
    rows = []
    for measured in sets:
        solos = profiles.of_set(measured) or []
        held, _ = held_w_for(profiles, measured.gpu)
        utils = [s.utilisation for s in solos]
        powers = [s.power_w for s in solos]
        speeds, power = model.predict(utils, powers, held)
        observed = tuple(v / s.it_per_s for v, s in zip(measured.it_per_s, solos, strict=True))
        rows.append(FitRow(
            measured.regime, measured.name, measured.source, observed, tuple(float(v) for v in speeds),
            measured.power_w, power, energy_saving(measured.power_w, observed, powers),
            energy_saving(power, speeds, powers),
        ))  # fmt: skip
    return rows


def energy_saving(
    set_power_w: float, speeds: Sequence[float] | np.ndarray, powers_alone_w: Sequence[float]
) -> float:
    """1 - (energy of the set doing its work together) / (energy of the same work done one job after another,
    each alone): per second together the set does ``s_i`` seconds of job i's solo work, which alone costs
    ``s_i * P_i``."""
    alone = float(sum(s * p for s, p in zip(speeds, powers_alone_w, strict=True)))
    return 1.0 - set_power_w / alone if alone > 0 else 0.0


def fittable_sets(profiles: Profiles) -> list[MeasuredSet]:
    """Sets of two whose members were all measured alone on the same GPU."""
    return [
        s for s in profiles.sets
        if len(s.members) == 2 and profiles.of_set(s) is not None
    ]  # fmt: skip


def fit_sharing(profiles: Profiles) -> tuple[MeasuredSharing, list[FitRow]]:
    """Least-squares fit of (o, lambda) on the profiles' sets of two, coarse-to-fine grid; the model and its rows."""
    sets = fittable_sets(profiles)
    if not sets:
        raise ValueError("the profiles hold no set of two jobs measured together with both measured alone")

    def cost(o: float, lam: float) -> float:
        rows = _fit_rows(MeasuredSharing(switch_overhead=o, switch_power=lam), profiles, sets)
        return sum(sum(e * e for e in r.speed_errors) + r.power_error**2 for r in rows)

    best = (np.inf, 0.0, 0.0)
    lo_o, hi_o, lo_l, hi_l = 0.0, 0.5, 0.0, 2.0
    for _ in range(3):  # 21 x 21, then zoom around the best point
        for o in np.linspace(lo_o, hi_o, 21):
            for lam in np.linspace(lo_l, hi_l, 21):
                c = cost(float(o), float(lam))
                if c < best[0]:
                    best = (c, float(o), float(lam))
        wo, wl = (hi_o - lo_o) / 10, (hi_l - lo_l) / 10
        lo_o, hi_o = max(best[1] - wo, 0.0), min(best[1] + wo, 0.9)
        lo_l, hi_l = max(best[2] - wl, 0.0), best[2] + wl
    model = MeasuredSharing(
        switch_overhead=round(best[1], 3), switch_power=round(best[2], 3),
        basis=f"fitted to {len(sets)} measured set(s) of two",
    )  # fmt: skip
    return model, _fit_rows(model, profiles, sets)


def check_rows(profiles: Profiles, model: MeasuredSharing = MEASURED) -> list[FitRow]:
    """The model's error on every fittable set of the profiles."""
    return _fit_rows(model, profiles, fittable_sets(profiles))


# --- what `wattsched perf colocate --profiles` shows ------------------------------------------------------------
def colocate_measured(
    profiles: Profiles, models: Sequence[str], gpu: str, model: MeasuredSharing = MEASURED
) -> dict[str, Any]:
    """Each job's speed relative to alone, the GPU's power and the energy saving of `models` (``name`` or
    ``name:batch``) time-slicing one `gpu`, from their measured profiles alone. A set the profiles measured is
    shown beside the prediction."""
    from ..core.errors import WattschedError

    if not models:
        raise WattschedError("--models: name at least one model")
    gpu_model(gpu)  # an unknown GPU is a clear error
    solos = []
    for raw in models:
        name, _, batch = raw.partition(":")
        try:
            solo = profiles.solo(gpu, name, int(batch) if batch else 0)
        except ValueError:
            raise WattschedError(f"--models: bad batch size in {raw!r} (name or name:batch)") from None
        if solo is None:
            covered = ", ".join(profiles.models(gpu)) or "none"
            raise WattschedError(
                f"no profile of {raw!r} alone on {gpu} in {', '.join(profiles.files)} (profiled there: {covered})"
            )
        solos.append(solo)
    held, held_source = held_w_for(profiles, gpu)
    utils = [s.utilisation for s in solos]
    powers = [s.power_w for s in solos]
    speeds, power = model.predict(utils, powers, held)
    names = [s.model if [t.model for t in solos].count(s.model) == 1 else f"{s.model}#{i + 1}"
             for i, s in enumerate(solos)]  # fmt: skip
    out: dict[str, Any] = {
        "gpu": gpu,
        "models": names,
        "set": {
            "power_w": power,
            "energy_saving": energy_saving(power, speeds, powers),
            "utilisation_demand": float(sum(utils)),
            "switching_share": model.switching(utils, speeds),
            "held_w": held,
            "held_w_source": held_source,
        },
        "jobs": {
            n: {
                "speed": float(v),
                "batch": s.batch,
                "regime": s.regime,
                "alone_it_per_s": s.it_per_s,
                "it_per_s": s.it_per_s * float(v),
                "alone_power_w": s.power_w,
                "alone_utilisation": s.utilisation,
                "memory_gib": s.memory_gib,
                "profile": s.source,
            }
            for n, s, v in zip(names, solos, speeds, strict=True)
        },
        "sharing_model": model.describe(),
        "profiles": profiles.describe()["files"],
        "notes": [],
    }
    wanted = sorted((s.model, s.batch) for s in solos)
    for measured in profiles.sets:
        alone = profiles.of_set(measured)
        if measured.gpu == gpu and sorted(measured.members) == wanted and alone is not None:
            observed = [v / s.it_per_s for v, s in zip(measured.it_per_s, alone, strict=True)]
            out["set"]["measured"] = {
                "power_w": measured.power_w,
                "energy_saving": energy_saving(measured.power_w, observed, [s.power_w for s in alone]),
                "speeds": dict(zip([m for m, _ in measured.members], observed, strict=True)),
                "source": measured.source,
            }  # fmt: skip
            break
    if len(solos) > 2:
        out["notes"].append(
            f"a set of {len(solos)}: a prediction from the fit on sets of two, not a measurement"
        )
    memory = sum(s.memory_gib for s in solos)
    out["set"]["memory_gib"] = memory
    if memory > gpu_model(gpu).memory_gib:
        out["notes"].append(
            f"summed peak memory {memory:.1f} GiB exceeds the {gpu}'s {gpu_model(gpu).memory_gib:g}"
        )
    return out
