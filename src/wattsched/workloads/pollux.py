"""The Pollux workloads (Qiao et al., OSDI'21; dataset `philly-pollux`, ``workloads*/workload-N.csv``).

Columns ``name, time, application, num_replicas, batch_size``: a job's submission offset within an 8-hour window,
its application (cifar10, ncf, deepspeech2, bert, yolov3, imagenet: the models of the ElasticFlow T4 tables, which
come from the Pollux artifact), its initial GPU count and global batch size. Run times are not in the files
(Pollux derives them from profiles that are not public), so a job's work is **reconstructed** (docs/perf.md §6):

    iterations = epochs x training samples / global batch size

with the epochs Pollux's simulator trains each application for (``simulator/applications.py``,
``max_epochs``) and the size of the dataset each application trains on (public dataset facts). The duration in
the job table is the time those iterations take at the job's own GPU count and batch on T4 GPUs (the Pollux
testbed), from the ElasticFlow T4 table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.cluster import MILLI
from ..perf.tables import elasticflow_tables
from .reading import _finish, _text, read_table, require_columns
from .validate import LoadedWorkload, RowValidator, check_gpu_request, check_non_negative, is_missing


@dataclass(frozen=True)
class PolluxApplication:
    epochs: int  # Pollux simulator max_epochs
    samples: int  # training samples per epoch
    dataset: str


POLLUX_APPLICATIONS: dict[str, PolluxApplication] = {
    "cifar10": PolluxApplication(100, 50_000, "CIFAR-10 training set"),
    "imagenet": PolluxApplication(90, 1_281_167, "ImageNet-1k training set"),
    "bert": PolluxApplication(2, 87_599, "SQuAD v1.1 training questions"),
    "deepspeech2": PolluxApplication(80, 20_376, "CMU ARCTIC, 18 voices x 1,132 utterances (reconstructed)"),
    "yolov3": PolluxApplication(50, 16_551, "PASCAL VOC 2007+2012 trainval images"),
    "ncf": PolluxApplication(10, 4_970_845, "MovieLens-1M: 994,169 training ratings x (1 + 4 negatives)"),
}
REFERENCE_GPU = "T4"


def read_pollux_workload(
    path: str | Path, skip_invalid: bool = False, source: str | None = None, data_dir=None
) -> LoadedWorkload:
    path = Path(path)
    df, lines = read_table(path)
    require_columns(df, path, ("name", "time", "application", "num_replicas", "batch_size"))
    v = RowValidator(path, lines)
    v.flag(is_missing(df["name"]), "name", "missing value")
    submit = v.number(df["time"], "time")
    check_non_negative(v, submit, "time")
    num = v.number(df["num_replicas"], "num_replicas", integer=True)
    batch = v.number(df["batch_size"], "batch_size", integer=True)
    v.flag(batch <= 0, "batch_size", "batch_size must be a positive integer, got {value}", batch)
    check_gpu_request(v, num, np.where(num > 0, MILLI, 0), ("num_replicas", "num_replicas"))
    v.flag(num <= 0, "num_replicas", "num_replicas must be at least 1, got {value}", num)
    app = _text(df["application"])
    known = np.isin(app, list(POLLUX_APPLICATIONS))
    v.flag(
        ~known,
        "application",
        "unknown application {value!r} (known: " + ", ".join(POLLUX_APPLICATIONS) + ")",
        app,
    )
    tables = elasticflow_tables(REFERENCE_GPU, data_dir)
    iterations = np.full(len(df), np.nan)
    duration = np.full(len(df), np.nan)
    for i in np.flatnonzero(known & ~v.bad).tolist():
        spec = POLLUX_APPLICATIONS[app[i]]
        iterations[i] = spec.epochs * spec.samples / batch[i]
        duration[i] = iterations[i] / tables[app[i]].throughput(int(num[i]), float(batch[i]))
    notes = [
        "Pollux workload: work = epochs x training samples / global batch (reconstructed, docs/perf.md §6); "
        "duration = that work at the job's GPU count and batch on T4 (ElasticFlow T4 table)",
        "no CPU/memory request (0)",
    ]
    return _finish(
        v, skip_invalid, path, source or path.stem, notes,
        job_id=_text(df["name"]), submit_s=submit, duration_s=duration, num_gpu=num,
        gpu_milli=np.where(num > 0, MILLI, 0), model_name=app, batch_size=batch, iterations=iterations,
    )  # fmt: skip
