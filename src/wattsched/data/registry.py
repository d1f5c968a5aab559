"""Dataset registry: where each public dataset comes from, and where wattsched finds it on this machine.

Lookup order for a dataset file ``<dataset>/<relpath>``:

1. ``--data-dir DIR`` (passed in as ``data_dir``), else the ``WATTSCHED_DATA`` environment variable: a local copy
   laid out as ``DIR/<dataset>/<relpath>`` (CI points this at ``../shared/data``);
2. the download cache (``WATTSCHED_CACHE``, default ``~/.cache/wattsched``), filled by ``wattsched data fetch``.

Datasets are never committed to the repository.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from ..core.errors import DataNotFoundError, UnknownNameError


@dataclass(frozen=True)
class DataFile:
    path: str  # relative to the dataset folder
    url: str  # public upstream URL
    sha256: str
    size: int


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    licence: str
    citation: str
    files: tuple[DataFile, ...]


@cache
def datasets() -> dict[str, Dataset]:
    raw = json.loads(resources.files("wattsched.data").joinpath("datasets.json").read_text())
    out = {}
    for d in raw["datasets"]:
        files = tuple(DataFile(**f) for f in d["files"])
        out[d["name"]] = Dataset(d["name"], d["description"], d["licence"], d["citation"], files)
    return out


def dataset(name: str) -> Dataset:
    try:
        return datasets()[name]
    except KeyError:
        raise UnknownNameError("dataset", name, datasets()) from None


def cache_dir() -> Path:
    return Path(os.environ.get("WATTSCHED_CACHE") or Path.home() / ".cache" / "wattsched")


def data_roots(data_dir: str | Path | None = None) -> list[Path]:
    roots: list[Path] = []
    explicit = data_dir or os.environ.get("WATTSCHED_DATA")
    if explicit:
        roots.append(Path(explicit).expanduser())
    roots.append(cache_dir())
    return roots


def locate(dataset_name: str, relpath: str, data_dir: str | Path | None = None) -> Path:
    """Path of one dataset file, or a DataNotFoundError that says how to get it."""
    roots = data_roots(data_dir)
    for root in roots:
        candidate = root / dataset_name / relpath
        if candidate.is_file():
            return candidate
    searched = ", ".join(str(r / dataset_name / relpath) for r in roots)
    raise DataNotFoundError(
        f"dataset file '{dataset_name}/{relpath}' not found (looked in: {searched}); "
        f"run `wattsched data fetch {dataset_name}`, or point --data-dir / WATTSCHED_DATA at a local copy"
    )


def is_available(dataset_name: str, relpath: str, data_dir: str | Path | None = None) -> bool:
    try:
        locate(dataset_name, relpath, data_dir)
    except DataNotFoundError:
        return False
    return True
