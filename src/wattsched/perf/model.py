"""The job performance model the engine and policies query (docs/perf.md).

For every job it knows the amount of work (``work``: iterations for a job with a throughput table, seconds at
full speed otherwise) and answers, for a configuration (GPU type, GPU count, nodes and switches spanned, GPU
setting, co-runners):

* ``solo_rate``: progress per second running alone on its GPUs, from the measured tables (ElasticFlow, Gavel)
  with the interpolation rules of ``perf.tables``, times the DVFS speed of the setting (``energy.dvfs``);
  a job spread over more nodes or switches than it needs runs at its unconsolidated throughput;
* ``shared_factor``: the slowdown from co-runners on shared GPUs: Gavel's measured pair throughputs where they
  exist, else time-slicing by solo utilisation;
* ``gpu_load``: the utilisation it adds to each of its GPUs times the setting's power scale (what the power
  models turn into watts);
* ``energy_per_unit`` (alias ``energy_per_iteration``): GPU energy per unit of work.

A job without a table keeps the behaviour of a plain trace replay: speed 1 at its trace GPU count (times the
DVFS speed), scaled linearly with the GPU count it is given (stated assumption).

This file (~660 lines) stays whole: it is one class, the model the engine and the policies query, whose per-job
caches (rates, sharing noise, measured profiles and loads) every query reads; the tables, the restart model,
the sharing models and the profiles it is built from are modules of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.cluster import MILLI, ClusterSpec
from ..core.gpus import gpu_model
from ..core.jobs import INFERENCE, JobTable
from ..core.settings import DEFAULT_SETTING, GpuSetting
from ..energy.dvfs import dvfs_response, power_limit_range
from ..energy.utilisation import job_gpu_load
from .catalog import MODEL_FACTS, OWN_MEASUREMENTS, TABLE_SOURCE, normalise
from .colocation import SLICING, SharingModel
from .generated import SOURCE as GENERATED
from .generated import generated_tables
from .measured import MeasuredSharing, held_w_for
from .profiles import Profiles, Solo
from .restart import RestartModel
from .tables import ScalingTable, elasticflow_tables, gavel_pairs, gavel_tables, parse_gavel_type

ASSIGNMENT_RULE = (
    "uniform at random (seeded) over the models measured for the cluster's GPU type whose table covers the "
    "job's GPU count (over all of them when none does), then uniform over that model's measured batch sizes "
    "(as Gavel assigns job types uniformly at random)"
)

PROFILE_ASSIGNMENT_RULE = (
    "uniform at random (seeded) over the (model, batch) pairs measured alone on the cluster's main GPU type, for "
    "every GPU job the profiles do not already cover"
)

GENERATED_NOTE = (
    "throughput tables GENERATED from an analytic data-parallel scaling law (perf/generated.py, docs/perf.md "
    "§1.1), not measurements: for runs without datasets such as the demo"
)


def _tables_for(gpu: str, data_dir, generated: bool = False) -> tuple[str, dict[str, ScalingTable], dict]:
    """(source label, tables by model, Gavel pairs) for one GPU type: its measured tables or their proxy's, or the
    generated ones."""
    if generated:
        return f"{GENERATED}/{gpu}", generated_tables(gpu), {}
    source, name = TABLE_SOURCE.get(gpu, ("elasticflow", "A100"))
    if source == "gavel":
        return f"gavel/{name}", gavel_tables(name, data_dir), gavel_pairs(name, data_dir)
    return f"elasticflow/{name}", elasticflow_tables(name, data_dir), {}


class PerformanceModel:
    def __init__(
        self,
        jobs: JobTable,
        spec: ClusterSpec,
        job_load: np.ndarray | None = None,
        restart: RestartModel | None = None,
        tables: dict[int, tuple[str, dict[str, ScalingTable], dict]] | None = None,
        sharing: SharingModel = SLICING,
        sharing_noise: float = 0.0,
        noise_seed: int = 0,
        loads: SharingModel | None = None,
    ):
        self.jobs = jobs
        self.sharing = sharing
        # Where the job model takes modelled jobs' GPU loads from: the catalog (None) or a calibrated model's
        # measured loads (``gpu_loads: eaco-measured``). Independent of the sharing model, so that a job alone on
        # its GPUs draws the same under every sharing model.
        self.loads = loads
        # The simulator's truth may differ from the model: a shared job's speed is the prediction times
        # (1 + noise * z), z ~ N(0, 1) seeded per job and co-runner set (so predictions can be wrong).
        self.sharing_noise = float(sharing_noise)
        self._noise_seed = int(noise_seed)
        self._noise: dict[tuple, float] = {}
        self._calibrated_cache: dict[int, bool] = {}
        self.spec = spec
        self.restart = restart or RestartModel()
        n = len(jobs)
        self.job_load = np.asarray(job_gpu_load(jobs) if job_load is None else job_load, dtype=np.float64)
        self.trace_gpus = np.maximum(jobs.num_gpu, 1).astype(np.float64)
        # An inference service's GPUs are independent replicas (M/M/c servers, docs/cedla.md §1.4): its rate is
        # its one-GPU rate times its GPU count, wherever the GPUs are (no all-reduce, so no spread penalty).
        self.replicas = np.asarray(jobs.job_class == INFERENCE, dtype=bool)
        self.notes: list[str] = []
        self.assigned = np.zeros(n, dtype=bool)
        self.assignment_counts: dict[str, int] = {}
        # Per GPU code of the cluster: (source label, tables by model key, Gavel pairs).
        self.sources = tables or {}
        self.key: dict[int, np.ndarray] = {}  # code -> [J] table key per job (None: no table)
        self.batch = np.where(jobs.batch_size > 0, jobs.batch_size, 0).astype(np.float64)
        self.modelled = np.zeros(n, dtype=bool)
        self._main = -1  # GPU code whose tables define work (iterations); set by _attach
        self.work = jobs.duration_s.astype(np.float64).copy()
        self.checkpoint_gb = np.zeros(n)
        self.memory = np.zeros(n)
        self._rate_cache: dict[tuple, float] = {}
        # Measured profiles (perf.profiles): per GPU code, each job's profile alone there (None: not covered),
        # and the GPU load and utilisation it measured (NaN: not covered).
        self.profiles: Profiles | None = None
        self._profile: dict[int, list[Solo | None]] = {}
        self._measured_load: dict[int, np.ndarray] = {}
        self._measured_util: dict[int, np.ndarray] = {}
        self._profile_ref = np.full(n, -1, dtype=np.int64)  # per job, the GPU code of its reference profile
        # Two shared str objects indexed, not one str per job (60 MB at 10^6 jobs).
        self.source = np.array(["", "trace"], dtype=object)[(jobs.num_gpu > 0).astype(np.intp)]
        per_node = {
            c: int(spec.gpu_count[spec.gpu_model_code == c].max()) for c in range(len(spec.gpu_models))
        }
        self._gpus_per_node = per_node
        nodes_per_switch = np.bincount(spec.switch_id) if spec.num_nodes else np.zeros(1, dtype=np.int64)
        self._nodes_per_switch = max(int(nodes_per_switch.max()), 1)

    # --- construction ---------------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        jobs: JobTable,
        spec: ClusterSpec,
        restart: RestartModel | None = None,
        data_dir=None,
        assign: bool = False,
        rng: np.random.Generator | None = None,
        use_tables: bool = True,
        sharing: SharingModel = SLICING,
        sharing_noise: float = 0.0,
        noise_seed: int = 0,
        generated: bool = False,
        loads: SharingModel | None = None,
        profiles: Profiles | None = None,
    ) -> tuple[PerformanceModel, JobTable]:
        """The model for this workload and cluster, and the job table with assigned model names (if any).

        Tables are loaded when some job names a model or models are to be assigned; a job whose model has no
        table for the cluster's GPU type keeps trace behaviour unless `assign` gives it one. `generated`: the
        analytic tables of ``perf.generated`` instead of the measured ones (no dataset needed). `profiles`:
        measured profiles; a job whose (model, batch) they cover on a GPU type runs and draws there as measured
        (docs/perf.md §9).
        """
        wants = use_tables and (assign or bool((np.asarray(jobs.model_name, dtype=str) != "").any()))
        sources: dict[int, tuple[str, dict, dict]] = {}
        notes = []
        if wants:
            for code, gpu in enumerate(spec.gpu_models):
                sources[code] = _tables_for(gpu, data_dir, generated)
                if gpu not in OWN_MEASUREMENTS and not generated:
                    notes.append(
                        f"no throughput measurements for {gpu}: modelled with the {sources[code][0]} tables"
                    )
            if generated:
                notes.append(GENERATED_NOTE)
        keys = {code: _resolve(jobs, src[1]) for code, src in sources.items()}
        assigned = np.zeros(len(jobs), dtype=bool)
        counts: dict[str, int] = {}
        main_gpu = spec.gpu_models[_main_code(spec)] if spec.gpu_models else ""
        if assign and profiles is not None and profiles.models(main_gpu):
            jobs, assigned, counts = _assign_profiled(
                jobs, profiles, main_gpu, rng or np.random.default_rng(0)
            )
            keys = {code: _resolve(jobs, src[1]) for code, src in sources.items()}
            notes.append(f"models assigned from the profiles on {main_gpu}: {PROFILE_ASSIGNMENT_RULE}")
        elif assign and sources:
            jobs, assigned, counts = _assign(jobs, spec, sources, keys, rng or np.random.default_rng(0))
            keys = {code: _resolve(jobs, src[1]) for code, src in sources.items()}
        model = cls(
            jobs, spec, restart=restart, tables=sources, sharing=sharing, sharing_noise=sharing_noise, loads=loads,
            noise_seed=noise_seed,
        )  # fmt: skip
        model.notes += notes
        model.assigned = assigned
        model.assignment_counts = counts
        model._attach(keys)
        if profiles is not None:
            model._attach_profiles(profiles)
        return model, jobs

    def _attach(self, keys: dict[int, np.ndarray]) -> None:
        """Mark modelled jobs, fill their facts and work (iterations)."""
        self.key = keys
        jobs = self.jobs
        if not keys:
            return
        code0 = self._main = _main_code(self.spec)
        main = keys[code0]
        self.modelled = np.array([k is not None for k in main], dtype=bool)
        tables = self.sources[code0][1]
        for j in np.flatnonzero(self.modelled).tolist():
            table = tables[main[j]]
            if self.batch[j] <= 0 and table.batch_sizes[0] > 0:
                self.batch[j] = float(table.batch_sizes[0])
            f = MODEL_FACTS.get(normalise(main[j]))
            share = min(int(jobs.gpu_milli[j]), MILLI) / MILLI if jobs.num_gpu[j] > 0 else 0.0
            if f is not None:
                util = f.utilisation if np.isnan(jobs.gpu_util[j]) else float(jobs.gpu_util[j])
                if self.loads is not None and np.isnan(jobs.gpu_util[j]):  # the job model's measured loads
                    util = self.loads.load_of(normalise(main[j]), util)
                self.job_load[j] = min(max(util, 0.0), 1.0) * share
                self.memory[j] = f.memory_gib
                self.checkpoint_gb[j] = f.checkpoint_gb
            if np.isfinite(jobs.iterations[j]):
                self.work[j] = float(jobs.iterations[j])
            else:  # iterations = trace duration x throughput at the trace's configuration on the cluster's GPU
                n = int(self.trace_gpus[j])
                per_node = self._gpus_per_node[code0]
                self.work[j] = float(jobs.duration_s[j]) * self._table_rate(j, code0, n, -(-n // per_node), 1)
        if self.modelled.any():
            self.notes.append(
                f"{int(self.modelled.sum())} job(s) modelled with throughput tables ({self.sources[code0][0]}); "
                "work in iterations (trace iterations, else trace duration x throughput at the trace's "
                "GPU count on the cluster's GPU type)"
            )
        missing = int((~self.modelled & (jobs.num_gpu > 0)).sum())
        if missing:
            self.notes.append(f"{missing} GPU job(s) without a throughput table run at trace speed")

    def _attach_profiles(self, profiles: Profiles) -> None:
        """Jobs whose (model, batch) the profiles cover on a GPU type run and draw there as measured: speed alone
        from it/s, GPU load from power (on this GPU type's idle-to-max range), utilisation for sharing. Work of a
        job profiled on the main type, unless the trace gives iterations: trace duration x its measured rate at
        the trace's GPU count."""
        self.profiles = profiles
        jobs = self.jobs
        names = np.asarray(jobs.model_name, dtype=object).astype(str)
        n = len(jobs)
        self.source = np.where(self.modelled, "table", self.source).astype(object)
        for code, gpu in enumerate(self.spec.gpu_models):
            spec = gpu_model(gpu)
            found: list[Solo | None] = [None] * n
            loads = np.full(n, np.nan)
            utils = np.full(n, np.nan)
            for j in np.flatnonzero((names != "") & (jobs.num_gpu > 0)).tolist():
                solo = profiles.solo(gpu, names[j], int(jobs.batch_size[j]) if jobs.batch_size[j] > 0 else 0)
                if solo is None:
                    continue
                # As measured alone on a whole GPU, also for a fractional request: time-slicing does not cap a
                # job at its share (docs/perf.md §9.1).
                found[j] = solo
                loads[j] = min(max((solo.power_w - spec.idle_w) / (spec.max_w - spec.idle_w), 0.0), 1.0)
                utils[j] = solo.utilisation
            if any(f is not None for f in found):
                self._profile[code] = found
                self._measured_load[code] = loads
                self._measured_util[code] = utils
        # Each profiled job's reference type: the main one if profiled there, else the first type it is profiled
        # on. A job not modelled yet gets its work (iterations) from its reference profile, so that its work and
        # every rate it gets are in the same unit; a job modelled by a table keeps the table's iterations.
        code0 = self._main_or_largest()
        order = [code0, *(c for c in sorted(self._profile) if c != code0)]
        for j in range(n):
            ref = next((c for c in order if self._profiled(j, c)), -1)
            if ref < 0:
                continue
            self._profile_ref[j] = ref
            solo = self.profile_of(j, ref)
            self.batch[j] = float(solo.batch)  # type: ignore[union-attr]
            if solo.memory_gib > 0:  # type: ignore[union-attr]
                self.memory[j] = solo.memory_gib  # type: ignore[union-attr]
            if self.modelled[j] and ref != code0:
                continue
            self.modelled[j] = True
            if np.isfinite(jobs.iterations[j]):
                self.work[j] = float(jobs.iterations[j])
            else:
                count = int(self.trace_gpus[j])
                nodes = -(-count // max(self._gpus_per_node[ref], 1))
                self.work[j] = float(jobs.duration_s[j]) * self._profile_rate(j, ref, count, nodes, 1)
        self._mark_profiled_sources()
        counts = {gpu: sum(f is not None for f in self._profile[c]) for c, gpu in enumerate(self.spec.gpu_models)
                  if c in self._profile}  # fmt: skip
        self.notes.append(
            "measured profiles ("
            + ", ".join(Path(f).name for f in profiles.files)
            + "): "
            + ", ".join(f"{k} job(s) on {g}" for g, k in counts.items())
            + " run at their measured speed and power alone (per-job column perf_source)"
        )

    def _main_or_largest(self) -> int:
        return self._main if self._main >= 0 else _main_code(self.spec)

    def _mark_profiled_sources(self) -> None:
        for code, found in self._profile.items():
            for j, solo in enumerate(found):
                if solo is not None and (code == self._main_or_largest() or self.source[j] == "trace"):
                    self.source[j] = f"measured:{solo.source}"

    def profile_of(self, job: int, gpu_code: int) -> Solo | None:
        found = self._profile.get(gpu_code)
        return found[job] if found is not None else None

    def _profile_rate(self, job: int, code: int, num_gpus: int, nodes: int, switches: int) -> float:
        """A profiled job's iterations per second on `num_gpus` GPUs of type `code`: its measured rate alone on
        one GPU, scaled by its throughput table's n-GPU / 1-GPU ratio where it has one, else linearly (stated
        assumption, docs/perf.md §9.1)."""
        solo = self.profile_of(job, code)
        if solo is None:  # not profiled on this type: its reference profile's rate (proxy, like the tables')
            solo = self.profile_of(job, int(self._profile_ref[job]))
        rate = solo.it_per_s  # type: ignore[union-attr]
        if num_gpus == 1:
            return rate
        table_code = self._rate_code(job, code)
        if table_code >= 0:
            one = self._table_rate(job, table_code, 1, 1, 1)
            return rate * self._table_rate(job, table_code, num_gpus, nodes, switches) / one
        return rate * num_gpus

    def _rate_from_profile(self, job: int, gpu_code: int) -> bool:
        """Profiled on this type; or profiled elsewhere with no table here (its reference profile's rate stands
        in, as the main type's table does for a type without one)."""
        if self._profiled(job, gpu_code):
            return True
        return self._profile_ref[job] >= 0 and not self.has_table(job, gpu_code)

    def _profiled(self, job: int, gpu_code: int) -> bool:
        return gpu_code in self._profile and self._profile[gpu_code][job] is not None

    # --- rates ----------------------------------------------------------------------------------------------
    def speed(self, gpu_code: int, setting: GpuSetting) -> float:
        """DVFS speed factor of a setting on a GPU type (1 at the default setting)."""
        if setting is DEFAULT_SETTING or gpu_code < 0 or setting == DEFAULT_SETTING:
            return 1.0
        return dvfs_response(self.spec.gpu_models[gpu_code], setting)[0]

    def power_scale(self, gpu_code: int, setting: GpuSetting) -> float:
        if setting is DEFAULT_SETTING or gpu_code < 0 or setting == DEFAULT_SETTING:
            return 1.0
        return dvfs_response(self.spec.gpu_models[gpu_code], setting)[1]

    def setting_response(self, job: int, gpu_code: int, setting: GpuSetting) -> tuple[float, float]:
        """(speed, power scale) of one job at a setting on a GPU type: the type's DVFS response (``energy/dvfs.py``,
        a model of a compute-bound job mix), except where the job's measured profile there says a power limit
        does not bind: a limit at or above the draw it measured alone (its peak sample, else its mean) leaves it
        running and drawing as measured (speed 1, scale 1; docs/dvfs.md §5). Prediction
        (policies) and accounting (the engine's rate and load) both read this."""
        if setting is DEFAULT_SETTING or gpu_code < 0 or setting == DEFAULT_SETTING:
            return 1.0, 1.0
        if self.limit_above_measured_draw(job, gpu_code, setting):
            return 1.0, 1.0
        return dvfs_response(self.spec.gpu_models[gpu_code], setting)

    def limit_above_measured_draw(self, job: int, gpu_code: int, setting: GpuSetting) -> bool:
        """Whether the setting is a power limit at or above the job's measured draw alone on this GPU type (then
        the measurement, not the model, gives its speed and power there)."""
        fraction = setting.power_limit_fraction
        if fraction is None or not self._profile:
            return False
        solo = self.profile_of(job, gpu_code)
        if solo is None:
            return False
        limit_w = fraction * gpu_model(self.spec.gpu_models[gpu_code]).power_limit_max_w
        return limit_w >= _measured_peak_w(solo)

    def _never_bound(self) -> dict[str, int]:
        """Per GPU type, the profiled jobs whose measured draw is at or below its lowest allowed power limit: no
        limit slows them or lowers their draw."""
        out = {}
        for code, found in sorted(self._profile.items()):
            gpu = self.spec.gpu_models[code]
            lowest_w = power_limit_range(gpu)[0] * gpu_model(gpu).power_limit_max_w
            out[gpu] = sum(1 for solo in found if solo is not None and _measured_peak_w(solo) <= lowest_w)
        return out

    def _table_rate(self, job: int, code: int, n: int, nodes: int, switches: int) -> float:
        key = self.key[code][job]
        replicas = bool(self.replicas[job])
        if replicas:  # n times one GPU's rate, wherever the GPUs are
            count, consolidated = 1, True
        else:
            per_node = self._gpus_per_node.get(code, 1) or 1
            need_nodes = -(-n // per_node)
            need_switches = -(-need_nodes // self._nodes_per_switch)
            count, consolidated = n, nodes <= need_nodes and switches <= need_switches
        cache_key = (code, key, float(self.batch[job]), count, consolidated)
        rate = self._rate_cache.get(cache_key)
        if rate is None:
            table = self.sources[code][1][key]
            batch = self.batch[job] if table.batch_sizes[0] > 0 else None
            rate = table.throughput(count, batch, consolidated)
            self._rate_cache[cache_key] = rate
        return rate * n if replicas else rate

    def has_table(self, job: int, gpu_code: int) -> bool:
        """Whether the job runs from its own table on this GPU type. Only jobs modelled on the cluster's main
        GPU type count work in iterations; a job whose model has a table on another type only keeps trace
        behaviour (its work is in seconds, so no table rate applies to it anywhere)."""
        keys = self.key.get(gpu_code)
        return keys is not None and keys[job] is not None and bool(self.modelled[job])

    def _rate_code(self, job: int, gpu_code: int) -> int:
        """The GPU type whose table gives a modelled job's rate on `gpu_code`: its own, else the main type's
        (documented proxy, docs/perf.md); -1 for a job counted in seconds or one without any table (profiled)."""
        if not self.modelled[job] or gpu_code < 0:
            return -1
        code = gpu_code if self.has_table(job, gpu_code) else self._main
        keys = self.key.get(code)
        return code if keys is not None and keys[job] is not None else -1

    def solo_rate(
        self, job: int, gpu_code: int, num_gpus: int, nodes: int, switches: int, setting: GpuSetting
    ) -> float:
        """Work units per second with the job alone on its GPUs."""
        speed = self.setting_response(job, gpu_code, setting)[0]
        if self._profile and num_gpus > 0 and gpu_code >= 0 and self._rate_from_profile(job, gpu_code):
            return self._profile_rate(job, gpu_code, num_gpus, nodes, switches) * speed
        code = self._rate_code(job, gpu_code)
        if code >= 0 and num_gpus > 0:
            return self._table_rate(job, code, num_gpus, nodes, switches) * speed
        if num_gpus > 0 and num_gpus != self.trace_gpus[job]:
            return speed * num_gpus / self.trace_gpus[job]  # no table: linear in the GPU count
        return speed

    def max_gpus(self, job: int, gpu_code: int) -> int:
        """The most GPUs an elastic policy should give the job: its table's largest measured count (and no more
        GPUs than samples per batch); its trace count when it has no table."""
        code = self._rate_code(job, gpu_code)
        if code < 0:
            return int(self.trace_gpus[job])
        table = self.sources[code][1][self.key[code][job]]
        batch = self.batch[job] if table.batch_sizes[0] > 0 else None
        top = table.max_measured_count(batch)
        return int(min(top, self.batch[job])) if self.batch[job] > 0 else int(top)

    def gpu_load(self, job: int, gpu_code: int, setting: GpuSetting) -> float:
        """Utilisation the job adds to each of its GPUs, times its setting's dynamic-power scale."""
        measured = self._measured_load.get(gpu_code)
        load = self.job_load[job] if measured is None or np.isnan(measured[job]) else measured[job]
        scale = self.setting_response(job, gpu_code, setting)[1]
        return float(load) if scale == 1.0 else float(load) * scale

    def slicing_utilisation(self, job: int, gpu_code: int | None = None) -> float:
        """The job's solo GPU utilisation, which the sharing model divides among co-runners: measured where a
        profile covers the job on this GPU type, else the job model's load (the same under every sharing model,
        so a job alone on its GPUs runs and draws the same under any)."""
        measured = self._measured_util.get(self._main_or_largest() if gpu_code is None else gpu_code)
        if measured is not None and not np.isnan(measured[job]):
            return float(measured[job])
        return float(self.job_load[job])

    def shared_factor(self, job: int, gpu_code: int, co_runners: Sequence[Sequence[int]]) -> float:
        """The speed the simulator gives a job next to these co-runners: the prediction
        (:meth:`predicted_shared_factor`) times the run's seeded sharing noise, at most 1."""
        factor = self.predicted_shared_factor(job, gpu_code, co_runners)
        if self.sharing_noise <= 0 or not any(co_runners):
            return factor
        key = (job, tuple(sorted({k for others in co_runners for k in others})))
        z = self._noise.get(key)
        if z is None:
            z = self._noise[key] = float(np.random.default_rng((self._noise_seed, *key)).standard_normal())
        return float(min(max(factor * (1.0 + self.sharing_noise * z), 0.05), 1.0))

    def predicted_shared_factor(self, job: int, gpu_code: int, co_runners: Sequence[Sequence[int]]) -> float:
        """Speed relative to running alone, given the other jobs on each of its GPUs (synchronous training runs
        at the pace of its slowest GPU). A pair of one-GPU jobs measured by Gavel runs at the measured pair
        throughputs; otherwise the sharing model (time-slicing: on a GPU whose jobs' utilisations sum to U > 1,
        each gets 1/U of its solo speed; `eaco` adds interference)."""
        factor = 1.0
        own = self.slicing_utilisation(job, gpu_code)
        sharing = self.sharing
        # The loads' busy fraction per unit load: catalog loads are utilisations already; measured ones carry
        # the scale of the model they came from (docs/eaco.md §2).
        busy_scale = self.loads.busy_scale if self.loads is not None else 1.0
        for others in co_runners:
            if not others:
                continue
            measured = self._pair_factor(job, gpu_code, others)
            if measured is not None:
                factor = min(factor, measured)
                continue
            loads = [self.slicing_utilisation(k, gpu_code) for k in others]
            factor = min(factor, sharing.speed(own, loads, busy_scale))
        return factor

    def shared_factor_source(self, job: int, gpu_code: int, other: int) -> str:
        """Where :meth:`predicted_shared_factor` takes the pair (job, other) from: 'measured' (a measured pair's
        throughputs, a sharing model fitted to both jobs' measured pairs, or measured profiles of both jobs on this
        GPU type) or 'modelled' (the sharing model from the jobs' loads)."""
        if self._pair_factor(job, gpu_code, [other]) is not None:
            return "measured"
        if self._calibrated(job) and self._calibrated(other):
            return "measured"
        util = self._measured_util.get(gpu_code)
        if util is not None and not np.isnan(util[job]) and not np.isnan(util[other]):
            return "measured"
        return "modelled"

    def shared_load(
        self, job: int, gpu_code: int, setting: GpuSetting, co_runners: Sequence[Sequence[int]]
    ) -> float:
        """The load the job adds to its GPUs next to these co-runners. Loads add up under the default sharing
        model; under a model with power overlap beta < 1 the job with the largest load on a GPU (ties: the
        lower index) adds its own and every other job beta times its own, so the GPU's summed load is
        ``max + beta * (sum - max)`` (docs/eaco.md §2). Judged on the job's first GPU. The loads are the jobs'
        solo loads (``job_load``, the same under every sharing model): beta says what share of a co-runner's solo
        draw the GPU adds, so a job alone draws what it draws under any model."""
        load = self.gpu_load(job, gpu_code, setting)
        if not co_runners or not co_runners[0]:
            return load
        if isinstance(self.sharing, MeasuredSharing):
            return self._measured_shared_load(job, gpu_code, load, co_runners[0])
        beta = self.sharing.power_overlap
        if beta == 1.0:
            return load
        own = self.job_load[job]
        on_top = all(own > self.job_load[k] or (own == self.job_load[k] and job < k) for k in co_runners[0])
        return load if on_top else beta * load

    def _measured_shared_load(self, job: int, gpu_code: int, load: float, others: Sequence[int]) -> float:
        """The job's part of its GPU's load under the measured sharing model: an equal part of the held draw
        above idle, plus its term of the set's power (perf.measured), as a share of the GPU's dynamic range; the
        parts of all jobs on the GPU add up to the set's draw."""
        spec = gpu_model(self.spec.gpu_models[gpu_code])
        span = spec.max_w - spec.idle_w
        held, _ = held_w_for(self.profiles, spec.name)
        members = [job, *others]
        utils = [self.slicing_utilisation(k, gpu_code) for k in members]
        powers = [spec.idle_w + span * min(1.0, load)] + [
            spec.idle_w + span * min(1.0, self.gpu_load(k, gpu_code, DEFAULT_SETTING)) for k in others
        ]
        _, terms = self.sharing.power_terms_w(utils, powers, held)  # type: ignore[attr-defined]
        return ((held - spec.idle_w) / len(members) + float(terms[0])) / span

    def _pair_factor(self, job: int, gpu_code: int, others: Sequence[int]) -> float | None:
        if len(others) != 1 or gpu_code < 0 or gpu_code not in self.sources:
            return None
        other = others[0]
        if self._calibrated(job) and self._calibrated(other):
            return None  # the sharing model was fitted to this pair's measurements
        pairs = self.sources[gpu_code][2]
        keys = self.key[gpu_code]
        if not pairs or keys[job] is None or keys[other] is None:
            return None
        if self.trace_gpus[job] != 1 or self.trace_gpus[other] != 1:
            return None
        pair = pairs.get((keys[job], keys[other]))
        if pair is not None:
            mine = pair[0]
        else:  # a pair stored only under the other job's entry: [its steps/s, this job's steps/s]
            pair = pairs.get((keys[other], keys[job]))
            if pair is None:
                return None
            mine = pair[1]
        solo = self.sources[gpu_code][1][keys[job]].throughput(1)
        return mine / solo

    def model_key(self, job: int) -> str:
        """The job's normalised model name in the tables ('' when it has no table)."""
        keys = self.key.get(self._main)
        return normalise(keys[job]) if keys is not None and keys[job] is not None else ""

    def _calibrated(self, job: int) -> bool:
        """Whether the sharing model was fitted to this job's model (then its pairs come from the fit)."""
        if not self.sharing.loads:
            return False
        cached = self._calibrated_cache.get(job)
        if cached is None:
            cached = self._calibrated_cache[job] = self.model_key(job) in self.sharing.loads
        return cached

    def memory_gib(self, job: int) -> float:
        """GPU memory the job needs on each GPU (0 when unknown: a fractional pod's quota isolates it)."""
        return float(self.memory[job])

    # --- energy ---------------------------------------------------------------------------------------------
    def gpu_power_w(self, job: int, gpu_code: int, setting: GpuSetting) -> float:
        """Draw of one of the job's GPUs running alone: P_idle + (P_max - P_idle) * min(1, load)."""
        model = gpu_model(self.spec.gpu_models[gpu_code])
        load = min(1.0, self.gpu_load(job, gpu_code, setting))
        return model.idle_w + (model.max_w - model.idle_w) * load

    def energy_per_unit(
        self, job: int, gpu_code: int, num_gpus: int, nodes: int, switches: int, setting: GpuSetting
    ) -> float:
        """GPU energy (J) per unit of work (an iteration, or a second of work for a job without a table)."""
        rate = self.solo_rate(job, gpu_code, num_gpus, nodes, switches, setting)
        return num_gpus * self.gpu_power_w(job, gpu_code, setting) / rate

    energy_per_iteration = energy_per_unit

    # --- restarts -------------------------------------------------------------------------------------------
    def restart_delay_s(self, job: int, num_gpus: int, same_gpus: bool) -> float:
        return self.restart.delay_s(num_gpus, same_gpus, float(self.checkpoint_gb[job]))

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "jobs_with_table": int(self.modelled.sum()),
            "tables": {self.spec.gpu_models[c]: src[0] for c, src in self.sources.items()},
            "work_unit": "iterations for jobs with a table, seconds at full speed otherwise",
            **self.restart.describe(),
            "gpu_loads": "catalog" if self.loads is None else f"{self.loads.name}-measured",
            **self.sharing.describe(),
        }
        if self.sharing_noise > 0:
            out["sharing_noise"] = self.sharing_noise
        if self.profiles is not None:
            kinds = [str(s).split(":")[0] for s in self.source if s]
            out["profiles"] = self.profiles.describe()
            out["jobs_by_perf_source"] = {k: kinds.count(k) for k in sorted(set(kinds))}
            out["power_limit_response"] = (
                "measured where a power limit is at or above a profiled job's measured draw alone (peak sample, "
                "else mean): it runs and draws as measured; modelled (the GPU type's curve) otherwise"
            )
            out["profiled_jobs_no_power_limit_binds"] = self._never_bound()
        if self.assigned.any():
            out["model_assignment"] = {
                "rule": ASSIGNMENT_RULE,
                "jobs_assigned": int(self.assigned.sum()),
                "per_model": dict(sorted(self.assignment_counts.items())),
            }
        return out


def _measured_peak_w(solo: Solo) -> float:
    """The most a profiled job drew alone: its peak sample where measured, else its mean draw."""
    return solo.power_max_w if solo.power_max_w > 0 else solo.power_w


def main_gpu_model(spec: ClusterSpec) -> str:
    """The name of the GPU model with the most GPUs."""
    return str(spec.gpu_models[_main_code(spec)]) if spec.gpu_models else ""


def _main_code(spec: ClusterSpec) -> int:
    """The GPU model with the most GPUs (the one work is defined on)."""
    totals = np.bincount(
        spec.gpu_model_code[spec.gpu_model_code >= 0], weights=spec.gpu_count[spec.gpu_model_code >= 0]
    )
    return int(np.argmax(totals)) if totals.size else 0


def _resolve(jobs: JobTable, tables: dict[str, ScalingTable]) -> np.ndarray:
    """Per job, the key of its model's table: the exact name, else the same normalised name (for a Gavel family
    with several batch sizes: the one matching the job's batch, else the smallest)."""
    by_norm: dict[str, list[str]] = {}
    for key in tables:
        by_norm.setdefault(normalise(key), []).append(key)
    names = np.asarray(jobs.model_name, dtype=object).astype(str)
    out = np.full(len(jobs), None, dtype=object)
    uniq, inv = np.unique(names, return_inverse=True)
    for u, name in enumerate(uniq.tolist()):
        if not name:
            continue
        rows = np.flatnonzero(inv == u)
        if name in tables:
            out[rows] = name
            continue
        cands = by_norm.get(normalise(name))
        if not cands:
            continue
        by_batch = {parse_gavel_type(k)[1]: k for k in cands}
        smallest = by_batch[min(by_batch)]
        for j in rows.tolist():
            out[j] = by_batch.get(int(jobs.batch_size[j]), smallest)
    return out


def _assign(jobs: JobTable, spec: ClusterSpec, sources, keys, rng: np.random.Generator):
    """Give every GPU job without a table a model from the main GPU type's tables (ASSIGNMENT_RULE)."""
    code = _main_code(spec)
    tables = sources[code][1]
    need = np.array([k is None for k in keys[code]], dtype=bool) & (jobs.num_gpu > 0)
    names = sorted(tables)
    reach = np.array([tables[m].max_measured_count() for m in names])
    model_name = np.asarray(jobs.model_name, dtype=object).copy()
    batch = jobs.batch_size.copy()
    # A trace iteration count belongs to the trace's own model: an assigned job's work is derived afresh from its
    # duration at the trace configuration, like any job without iterations (docs/perf.md, work).
    iterations = np.where(need, np.nan, jobs.iterations)
    counts: dict[str, int] = {}
    for j in np.flatnonzero(need).tolist():
        ok = [i for i, r in enumerate(reach) if r >= jobs.num_gpu[j]] or list(range(len(names)))
        name = names[ok[int(rng.integers(len(ok)))]]
        table = tables[name]
        rows = table.batch_sizes
        model_name[j] = name
        batch[j] = int(rows[int(rng.integers(len(rows)))]) if rows[0] > 0 else 0
        counts[name] = counts.get(name, 0) + 1
    from dataclasses import replace

    return replace(jobs, model_name=model_name, batch_size=batch, iterations=iterations), need, counts


def _assign_profiled(jobs: JobTable, profiles: Profiles, gpu: str, rng: np.random.Generator):
    """Give every GPU job the profiles do not cover a profiled (model, batch) of `gpu` (PROFILE_ASSIGNMENT_RULE)."""
    from dataclasses import replace

    choices = sorted({(s.model, s.batch) for k, s in profiles.solos.items() if k[0] == gpu})
    names = np.asarray(jobs.model_name, dtype=object).astype(str)
    need = np.array(
        [
            jobs.num_gpu[j] > 0
            and (not names[j] or profiles.solo(gpu, names[j], int(jobs.batch_size[j])) is None)
            for j in range(len(jobs))
        ],
        dtype=bool,
    )
    model_name = np.asarray(jobs.model_name, dtype=object).copy()
    batch = jobs.batch_size.copy()
    counts: dict[str, int] = {}
    for j in np.flatnonzero(need).tolist():
        name, size = choices[int(rng.integers(len(choices)))]
        model_name[j], batch[j] = name, size
        counts[name] = counts.get(name, 0) + 1
    iterations = np.where(need, np.nan, jobs.iterations)
    return replace(jobs, model_name=model_name, batch_size=batch, iterations=iterations), need, counts
