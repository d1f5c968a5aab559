"""``wattsched-green``'s ``colocate`` mechanism: a training job that would otherwise wait for GPUs (or for a node
to boot) shares the GPUs of a running training job where the performance model says the pair uses less energy
than running apart and neither job stretches beyond the JCT bound nor misses its deadline; after an observation
window the pair's observed speeds are checked against the bound and a pair that breaks it is undone (EaCO's early
observation, docs/eaco.md §3; docs/green.md §1).

The prediction, per GPU of the pair (n GPUs each, the same GPU type): both jobs' remaining work at the speeds
``perf.predicted_shared_factor`` gives them next to each other (a measured pair or measured profiles where there
are, else the sharing model; the source is counted) until the first finishes, then the other alone; energy from
``perf.shared_load`` (the GPU's draw with both jobs on it) plus the GPU's share of its node's base draw, against
both jobs running alone on GPUs of their own (the guest's GPUs and their share of the node base draw are what
sharing saves). Services never share; a job whose co-location was undone runs alone from then on, and the
combination of models undone is not formed again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...core.cluster import MILLI
from ...core.gpus import gpu_model
from ...core.settings import DEFAULT_SETTING, GpuSetting
from ...core.states import STATUS_RUNNING
from ..contract import ClusterView, Target
from ..planning import Plan, on_same_gpus
from ..sharing import gpu_set, solo_rate_on
from .eaco import EPOCH_S, JCT_BOUND

PAIR_SHARE = MILLI // 2  # each job of a pair holds half of each of its GPUs (sets of two, as the H200 probe)
DEFAULT_COLOCATION_BOUND = round(JCT_BOUND - 1.0, 9)  # EaCO's bound: at most +10 % run time against alone
OBSERVATION_S = EPOCH_S  # EaCO's observation window: one epoch of its Table 1 jobs


@dataclass(frozen=True)
class PairPrediction:
    """One candidate pair's prediction: energy (J) together and apart, each job's run time together (s)."""

    host: int
    saving_j: float
    host_s: float
    guest_s: float


def pair_times(
    host_s: float, guest_s: float, host_speed: float, guest_speed: float
) -> tuple[float, float, float]:
    """(time both run together, host's run time, guest's run time) for two jobs with `host_s` and `guest_s` of
    solo time left, at these speeds while together and at full speed once alone."""
    host_end, guest_end = host_s / host_speed, guest_s / guest_speed
    if host_end <= guest_end:
        together = host_end
        return together, together, together + guest_s - guest_speed * together
    together = guest_end
    return together, together + host_s - host_speed * together, together


class Colocation:
    """The mechanism's state and decisions; ``wattsched-green`` calls it with its round's plan."""

    def __init__(self, bound: float = DEFAULT_COLOCATION_BOUND, observation_s: float = OBSERVATION_S) -> None:
        if bound < 0 or not math.isfinite(bound):
            raise ValueError(f"colocation_bound must be a finite number >= 0, got {bound}")
        self.bound = float(bound)
        self.observation_s = float(observation_s)
        self.partner: dict[int, int] = {}  # job -> the job on the same GPUs
        self.guest_of: dict[int, int] = {}  # host -> the job that joined it
        self.due: dict[int, float] = {}  # guest -> when its pair is judged
        self.solo_only: set[int] = set()  # jobs of an undone pair: they run alone from then on
        self.refused: set[tuple[str, str]] = (
            set()
        )  # (host model, guest model) pairs observed beyond the bound
        self.colocated_starts = 0
        self.undos = 0
        self.observations = 0
        self.sources = {"measured": 0, "modelled": 0}

    def bind(
        self, perf, spec, jobs, codes: np.ndarray, service: np.ndarray, base_share_w: float, margin_s: float
    ):
        self.perf, self.spec, self.jobs, self.codes = perf, spec, jobs, codes
        self.service, self.deadline = service, jobs.deadline_s
        self.base_share_w, self.margin_s = base_share_w, margin_s
        self._pair_cache: dict[tuple, tuple[float, float, float]] = {}

    def parameters(self) -> dict[str, object]:
        return {
            "colocation_bound": self.bound,
            "colocation_observation_s": self.observation_s,
            "colocated_starts": self.colocated_starts,
            "colocation_undos": self.undos,
            "colocation_observations": self.observations,
            "colocation_sources": dict(self.sources),
        }

    # --- predictions ----------------------------------------------------------------------------------------
    def _pair(self, host: int, guest: int, code: int, setting: GpuSetting) -> tuple[float, float, float]:
        """(host speed, guest speed, GPU draw in W) of the pair on one GPU, the host at `setting`."""
        perf = self.perf
        key = (self._signature(host, code), self._signature(guest, code), code, setting)
        cached = self._pair_cache.get(key)
        if cached is None:
            host_speed = perf.predicted_shared_factor(host, code, [[guest]])
            guest_speed = perf.predicted_shared_factor(guest, code, [[host]])
            load = perf.shared_load(host, code, setting, [[guest]]) + perf.shared_load(
                guest, code, DEFAULT_SETTING, [[host]]
            )
            gpu = gpu_model(self.spec.gpu_models[code])
            draw = gpu.idle_w + (gpu.max_w - gpu.idle_w) * min(1.0, load)
            cached = self._pair_cache[key] = (host_speed, guest_speed, draw)
        return cached

    def _signature(self, job: int, code: int) -> tuple:
        """What the pair predictions read of a job: equal signatures predict alike."""
        perf = self.perf
        return (
            perf.model_key(job),
            float(self.jobs.batch_size[job]),
            int(self.jobs.num_gpu[job]),
            perf.slicing_utilisation(job, code),
            perf.gpu_load(job, code, DEFAULT_SETTING),
        )

    def _model(self, job: int) -> str:
        return f"{self.perf.model_key(job)}@{float(self.jobs.batch_size[job]):g}"

    def _deadline_holds(self, job: int, now: float, run_s: float, alone_s: float) -> bool:
        """Whether a job that runs `run_s` from now (`alone_s` alone) ends before its deadline with the planning
        margin, or, where sharing does not slow it, before its deadline (the margin guards the slowdown only)."""
        deadline = self.deadline[job]
        if math.isnan(deadline):
            return True
        end = now + run_s
        return end <= float(deadline) - self.margin_s or (
            run_s <= alone_s * (1 + 1e-9) and end <= float(deadline)
        )

    def predict(
        self,
        view: ClusterView,
        host: int,
        host_target: Target,
        host_left_s: float,
        guest: int,
        guest_left_s: float,
    ) -> PairPrediction | None:
        """The pair's prediction if it keeps both bounds and deadlines and saves energy; None otherwise."""
        code = int(self.codes[guest])
        host_speed, guest_speed, pair_w = self._pair(host, guest, code, host_target.setting)
        if host_speed <= 0 or guest_speed <= 0:
            return None
        together, host_s, guest_s = pair_times(host_left_s, guest_left_s, host_speed, guest_speed)
        limit = 1.0 + self.bound + 1e-9
        if host_s > limit * host_left_s or guest_s > limit * guest_left_s:
            return None
        delay = view.restart_delay_s(guest, host_target)
        if not self._deadline_holds(host, view.now, host_s, host_left_s) or not self._deadline_holds(
            guest, view.now, guest_s + delay, guest_left_s + delay
        ):
            return None
        perf, base = self.perf, self.base_share_w
        host_w = perf.gpu_power_w(host, code, host_target.setting) + base
        guest_w = perf.gpu_power_w(guest, code, DEFAULT_SETTING) + base
        after_w = host_w if host_s > guest_s else guest_w
        apart = host_w * host_left_s + guest_w * guest_left_s
        shared = (pair_w + base) * together + after_w * (max(host_s, guest_s) - together)
        saving = host_target.num_gpus * (apart - shared)
        return PairPrediction(host, saving, host_s, guest_s) if saving > 0 else None

    # --- the round ------------------------------------------------------------------------------------------
    def begin_round(self, view: ClusterView, plan: Plan) -> None:
        """Give a job whose partner left its GPUs whole again; judge the pairs whose observation is due (an undone
        pair's guest is stopped, with the engine's checkpoint and restart cost, and goes back to the queue)."""
        status = view.status
        for job, other in list(self.partner.items()):
            if job not in self.partner:
                continue
            if status[job] == STATUS_RUNNING and status[other] == STATUS_RUNNING:
                continue
            self._forget(job)
            for k in (job, other):
                if status[k] == STATUS_RUNNING:
                    self._whole_again(view, plan, k)
        for guest, due in list(self.due.items()):
            if view.now + 1e-6 < due:
                continue
            host = self.partner[guest]
            del self.due[guest]
            verdict = self._breaks_bound(view, host, guest)
            if verdict is None:  # one of them is restarting: look again one window later
                self.due[guest] = view.now + self.observation_s
            elif verdict:
                self.undos += 1
                self.solo_only.update((host, guest))
                self.refused.add((self._model(host), self._model(guest)))
                self._forget(guest)
                plan.release(guest)  # not assigned again: stopped, back to the queue
                self._whole_again(view, plan, host)

    def _forget(self, job: int) -> None:
        other = self.partner.pop(job, None)
        if other is None:
            return
        self.partner.pop(other, None)
        for k in (job, other):
            self.guest_of.pop(k, None)
            self.due.pop(k, None)

    def _whole_again(self, view: ClusterView, plan: Plan, job: int) -> None:
        target = view.target(job)
        if target is None or target.share_milli >= MILLI or job in plan.assign:
            return
        plan.release(job)
        if plan.is_free(target.placement, MILLI):
            plan.take(job, Target(target.placement, MILLI, target.setting))  # in place: it keeps running
        else:
            plan.restore(job)

    def _breaks_bound(self, view: ClusterView, host: int, guest: int) -> bool | None:
        """Whether the pair, at the speeds observed now, stretches a job beyond the bound or past its deadline
        (None: nothing to observe now)."""
        target = view.target(host)
        guest_target = view.target(guest)
        if target is None or guest_target is None:
            return None
        code = int(self.codes[guest])
        key = gpu_set(target.placement)
        pair = np.array([host, guest])
        rates = view.rate(pair)
        solo = np.array(
            [
                solo_rate_on(self.perf, self.spec, host, code, key, target.setting),
                solo_rate_on(self.perf, self.spec, guest, code, key, guest_target.setting),
            ]
        )
        if (rates <= 0).any() or (solo <= 0).any():
            return None  # one is restarting: nothing observed yet
        self.observations += 1
        speeds = np.minimum(rates / solo, 1.0)
        left = view.remaining_work(pair) / solo
        _, host_s, guest_s = pair_times(float(left[0]), float(left[1]), float(speeds[0]), float(speeds[1]))
        limit = 1.0 + self.bound + 1e-9
        if host_s > limit * float(left[0]) or guest_s > limit * float(left[1]):
            return True
        return not (
            self._deadline_holds(host, view.now, host_s, float(left[0]))
            and self._deadline_holds(guest, view.now, guest_s, float(left[1]))
        )

    def needs_round(self, view: ClusterView) -> bool:
        """Whether a pair lost a job or is due for judgement (then a round runs even with no job waiting)."""
        status = view.status
        if any(status[job] != STATUS_RUNNING for job in self.partner):
            return True
        return any(view.now + 1e-6 >= due for due in self.due.values())

    def next_due(self, now: float) -> float | None:
        wake = min(self.due.values(), default=None)
        return wake if wake is not None and wake > now else None

    def hosts(self, view: ClusterView, plan: Plan, exclude: set[int]) -> dict[tuple[int, int], list[tuple]]:
        """Running training jobs a waiting job may join, by (GPU count, GPU type): (job, target, solo time
        left) of each whole-GPU job alone on its GPUs, not already paired, moved or changed in this plan."""
        running = view.running_jobs()
        if running.size == 0:
            return {}
        rates = view.rate(running)
        left = view.remaining_work(running)
        out: dict[tuple[int, int], list[tuple]] = {}
        for job, rate, work in zip(running.tolist(), rates.tolist(), left.tolist(), strict=True):
            if self.service[job] or rate <= 0 or job in self.partner or job in self.solo_only:
                continue
            if job in exclude or job in plan.assign or job in plan.released:
                continue
            target = view.target(job)
            if target is None or target.share_milli < MILLI or target.num_gpus == 0:
                continue
            out.setdefault((target.num_gpus, int(self.codes[job])), []).append((job, target, work / rate))
        return out

    def try_join(
        self, view: ClusterView, plan: Plan, guest: int, guest_left_s: float, hosts: dict, failed: set[tuple]
    ) -> bool:
        """Start `guest` on the GPUs of the host of the largest predicted saving; False if none passes. `failed`:
        guest signatures that found no host in this round (the plan only fills up, so they find none later)."""
        code = int(self.codes[guest])
        if code < 0 or self.service[guest] or guest in self.solo_only:
            return False
        n = int(self.jobs.num_gpu[guest])
        shape = (self._signature(guest, code), n) if math.isnan(self.deadline[guest]) else (guest,)
        if shape in failed:
            return False
        candidates = hosts.get((n, code), [])
        mask = view.request(guest).node_mask
        memory = self.perf.memory_gib(guest)
        capacity = gpu_model(self.spec.gpu_models[code]).memory_gib
        guest_model = self._model(guest)
        options: list[tuple[float, int, PairPrediction, Target]] = []
        for host, target, host_left_s in candidates:
            if host in self.partner or not mask[target.placement[0][0]]:
                continue
            if memory > 0 and memory + self.perf.memory_gib(host) > capacity + 1e-9:
                continue
            if (self._model(host), guest_model) in self.refused:
                continue
            prediction = self.predict(view, host, target, host_left_s, guest, guest_left_s)
            if prediction is not None:
                options.append((-prediction.saving_j, host, prediction, target))
        options.sort(key=lambda o: o[:2])
        for _, host, _, target in options:
            own = on_same_gpus(view, guest, target.placement)
            plan.release(host)
            if not plan.fits_together(target.placement, own, PAIR_SHARE):
                plan.restore(host)
                continue
            plan.take(
                host, Target(target.placement, PAIR_SHARE, target.setting)
            )  # in place: it keeps running
            plan.take(guest, Target(own, PAIR_SHARE, DEFAULT_SETTING))
            self.partner[host], self.partner[guest] = guest, host
            self.guest_of[host] = guest
            self.due[guest] = view.now + view.restart_delay_s(guest, target) + self.observation_s
            self.colocated_starts += 1
            self.sources[self.perf.shared_factor_source(guest, code, host)] += 1
            return True
        failed.add(shape)
        return False
