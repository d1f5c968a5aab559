"""What ``wattsched profile`` measures: the jobs (built-in torchvision jobs or a user's commands) and the sets.

A set is a window in which its jobs train at the same time on the one GPU; a set of one is a job alone.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..core.errors import WattschedError

REGIMES = ("gpu-bound", "input-bound")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class ProfileError(WattschedError):
    """A profile that cannot be run as asked (bad option, no GPU, no PyTorch, a job that failed)."""


@dataclass(frozen=True)
class JobSpec:
    model: str  # a torchvision model name, or the name given to a command
    batch: int  # per-step batch; 0 = unknown (a command that does not say)
    command: str | None = None  # a user's shell command instead of a built-in torchvision job
    label: str = ""  # unique among the profile's jobs: the model, or model:batch where a model comes twice

    @property
    def name(self) -> str:
        return self.label or self.model


def parse_models(text: str) -> list[JobSpec]:
    """``alexnet:256,resnet50:128`` -> one built-in job per entry (MODEL:BATCH)."""
    jobs = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        model, sep, batch = entry.partition(":")
        if not sep or not _NAME.match(model) or not batch.isdigit() or int(batch) < 1:
            raise ProfileError(f"--models: expected MODEL:BATCH entries (e.g. resnet50:128), got {entry!r}")
        jobs.append(JobSpec(model, int(batch)))
    return jobs


def parse_command(text: str, position: int) -> JobSpec:
    """A ``--command``: ``[NAME[:BATCH]=]COMMAND``. A prefix before the first '=' counts as the name only when it
    holds no space (``python train.py --lr=0.1`` is all command); the default name is ``command<position>``."""
    head, sep, rest = text.partition("=")
    name, batch, command = f"command{position}", 0, text
    if sep and head and " " not in head.strip() and rest.strip():
        model, colon, size = head.strip().partition(":")
        if not _NAME.match(model) or (colon and not size.isdigit()):
            raise ProfileError(f"--command: expected [NAME[:BATCH]=]COMMAND, got a prefix {head!r}")
        name, batch, command = model, int(size) if colon else 0, rest
    if not command.strip():
        raise ProfileError("--command: empty command")
    return JobSpec(name, batch, command=command.strip())


def label_jobs(jobs: Sequence[JobSpec]) -> list[JobSpec]:
    """Give each job a unique label: its model, or model:batch where the model comes more than once."""
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.model] = counts.get(job.model, 0) + 1
    labelled, seen = [], set()
    for job in jobs:
        label = job.model if counts[job.model] == 1 else f"{job.model}:{job.batch}"
        if label in seen:
            raise ProfileError(f"job {label} is given twice")
        seen.add(label)
        labelled.append(replace(job, label=label))
    return labelled


def plan_sets(jobs: Sequence[JobSpec], sizes: Sequence[int], named: Sequence[str]) -> list[tuple[int, ...]]:
    """The sets to measure, as indices into `jobs`: every combination of each size in `sizes` (in job order),
    then each named set (``alexnet+resnet50``, by label); duplicates dropped, order kept."""
    by_label = {job.name: i for i, job in enumerate(jobs)}
    sets: list[tuple[int, ...]] = []
    for size in sizes:
        if not 1 <= size <= len(jobs):
            raise ProfileError(f"--sets: a set of {size} needs 1 to {len(jobs)} jobs (there are {len(jobs)})")
        sets.extend(itertools.combinations(range(len(jobs)), size))
    for text in named:
        members = []
        for token in (t.strip() for t in text.split("+")):
            if token not in by_label:
                raise ProfileError(f"--set {text!r}: no job {token!r}; the jobs are {', '.join(by_label)}")
            members.append(by_label[token])
        if len(set(members)) != len(members):
            raise ProfileError(f"--set {text!r}: a job appears twice")
        sets.append(tuple(sorted(members)))
    unique = list(dict.fromkeys(sets))
    if not unique:
        raise ProfileError("nothing to measure: give --sets and/or --set")
    return unique


def set_name(jobs: Sequence[JobSpec], members: Sequence[int]) -> str:
    return "+".join(jobs[i].name for i in members)
