"""Job specifications as a struct of arrays (one entry per job), plus helpers to build and validate them."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np

from .cluster import MILLI, ClusterSpec

if TYPE_CHECKING:
    import pandas as pd

TRAINING, INFERENCE = 0, 1
JOB_CLASSES = ("training", "inference")


@dataclass
class JobTable:
    """All jobs of a workload. ``duration_s`` is the amount of work in seconds at full speed.

    ``gpu_milli`` is the share of each GPU a job takes: 1000 for whole GPUs, 1..999 for a shared pod on one GPU,
    0 for a CPU-only job. ``gpu_spec`` is an OR-list of GPU models (``V100M16|V100M32``); empty means any model.
    """

    job_id: np.ndarray  # object [J]
    submit_s: np.ndarray  # float64 [J], seconds since workload start
    duration_s: np.ndarray  # float64 [J]
    num_gpu: np.ndarray  # int64 [J]
    gpu_milli: np.ndarray  # int64 [J]
    cpu_milli: np.ndarray  # int64 [J]
    memory_mib: np.ndarray  # int64 [J]
    gpu_spec: np.ndarray  # object [J]: "" or "A|B"
    job_class: np.ndarray  # int8 [J]: TRAINING or INFERENCE
    model_name: np.ndarray  # object [J]
    deadline_s: np.ndarray  # float64 [J]: absolute, on the submit_s clock; NaN when none
    user: np.ndarray  # object [J]: user or virtual cluster
    source_line: np.ndarray  # int64 [J]: line in the input file (1-based, header = line 1); 0 if generated
    gpu_util: np.ndarray = field(default_factory=lambda: np.zeros(0))  # float64 [J]: GPU util, NaN unknown
    batch_size: np.ndarray = field(default_factory=lambda: np.zeros(0))  # int64 [J]: global batch, 0 unknown
    iterations: np.ndarray = field(
        default_factory=lambda: np.zeros(0)
    )  # float64 [J]: work in it., NaN unknown
    checkpoint_s: np.ndarray = field(
        default_factory=lambda: np.zeros(0)
    )  # float64 [J]: interval, NaN default
    request_rate_rps: np.ndarray = field(
        default_factory=lambda: np.zeros(0)
    )  # float64 [J]: an inference service-hour's requests/s, NaN for training
    source: str = "unknown"
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.job_id)
        for name, fill, dtype in (
            ("gpu_util", np.nan, np.float64),
            ("batch_size", 0, np.int64),
            ("iterations", np.nan, np.float64),
            ("checkpoint_s", np.nan, np.float64),
            ("request_rate_rps", np.nan, np.float64),
        ):
            if getattr(self, name).shape != (n,):
                setattr(self, name, np.zeros(n, dtype=dtype) if fill == 0 else np.full(n, fill, dtype=dtype))

    def __len__(self) -> int:
        return len(self.job_id)

    @property
    def gpu_demand_milli(self) -> np.ndarray:
        return self.num_gpu * self.gpu_milli

    def subset(self, index: np.ndarray) -> JobTable:
        kw = {f.name: getattr(self, f.name)[index] for f in fields(self) if f.name not in ("source", "notes")}
        return JobTable(**kw, source=self.source, notes=list(self.notes))

    @staticmethod
    def concat(tables: list[JobTable], source: str, notes: list[str]) -> JobTable:
        """Several job tables as one, in submission order (stable)."""
        kw = {
            f.name: np.concatenate([getattr(t, f.name) for t in tables])
            for f in fields(JobTable)
            if f.name not in ("source", "notes")
        }
        order = np.argsort(kw["submit_s"], kind="stable")
        return JobTable(**{k: v[order] for k, v in kw.items()}, source=source, notes=list(notes))

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        cols = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("source", "notes")}
        df = pd.DataFrame(cols)
        df["job_class"] = np.asarray(JOB_CLASSES, dtype=object)[self.job_class]
        return df

    @staticmethod
    def build(
        job_id,
        submit_s,
        duration_s,
        num_gpu,
        gpu_milli=None,
        cpu_milli=None,
        memory_mib=None,
        gpu_spec=None,
        job_class=None,
        model_name=None,
        deadline_s=None,
        user=None,
        source_line=None,
        gpu_util=None,
        batch_size=None,
        iterations=None,
        checkpoint_s=None,
        request_rate_rps=None,
        source: str = "unknown",
        notes: list[str] | None = None,
    ) -> JobTable:
        """Fill defaults: whole GPUs, no CPU/memory request, any GPU model, training, no deadline."""
        n = len(job_id)

        def arr(value, dtype, default):
            if value is None:
                # Zeros from calloc take no memory until written (10^6 jobs: 8 MB a column otherwise).
                if dtype is not object and default == 0:
                    return np.zeros(n, dtype=dtype)
                return np.full(n, default, dtype=dtype)
            return np.asarray(value, dtype=dtype)

        num = arr(num_gpu, np.int64, 1)
        milli = arr(gpu_milli, np.int64, MILLI) if gpu_milli is not None else np.where(num > 0, MILLI, 0)
        return JobTable(
            job_id=np.asarray(job_id, dtype=object),
            submit_s=arr(submit_s, np.float64, 0.0),
            duration_s=arr(duration_s, np.float64, 0.0),
            num_gpu=num,
            gpu_milli=np.asarray(milli, dtype=np.int64),
            cpu_milli=arr(cpu_milli, np.int64, 0),
            memory_mib=arr(memory_mib, np.int64, 0),
            gpu_spec=arr(gpu_spec, object, ""),
            job_class=arr(job_class, np.int8, TRAINING),
            model_name=arr(model_name, object, ""),
            deadline_s=arr(deadline_s, np.float64, np.nan),
            user=arr(user, object, ""),
            source_line=arr(source_line, np.int64, 0),
            gpu_util=arr(gpu_util, np.float64, np.nan),
            batch_size=arr(batch_size, np.int64, 0),
            iterations=arr(iterations, np.float64, np.nan),
            checkpoint_s=arr(checkpoint_s, np.float64, np.nan),
            request_rate_rps=arr(request_rate_rps, np.float64, np.nan),
            source=source,
            notes=list(notes or []),
        )


def spec_masks(jobs: JobTable, cluster: ClusterSpec) -> tuple[np.ndarray, np.ndarray]:
    """Map each job's GPU-model OR-list to a row of a boolean matrix over the cluster's model codes.

    Returns ``(spec_id [J], allowed [S, M])``: job j may use a node of model code c iff ``allowed[spec_id[j], c]``.
    A job without GPUs, or with an empty spec, may use every node.
    """
    return spec_matrix(jobs.gpu_spec, cluster)


def spec_matrix(specs: np.ndarray, cluster: ClusterSpec) -> tuple[np.ndarray, np.ndarray]:
    """`spec_masks` for any array of GPU-model OR-lists (``""`` = any model)."""
    uniq, spec_id = np.unique(np.asarray(specs).astype(str), return_inverse=True)
    allowed = np.zeros((len(uniq), max(len(cluster.gpu_models), 1)), dtype=bool)
    for s, text in enumerate(uniq):
        if not text:
            allowed[s, :] = True
            continue
        for model in text.split("|"):
            code = cluster.model_code(model.strip())
            if code >= 0:
                allowed[s, code] = True
    return spec_id.astype(np.int64), allowed
