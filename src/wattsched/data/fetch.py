"""Download registered datasets into the cache, verifying every file's sha256.

Files land in ``<dest>/<dataset>/<path>`` (``dest`` defaults to the download cache). Each file is streamed
into a temporary file next to its target and only renamed into place once its checksum matches, so an
interrupted or corrupt download never leaves a file that looks valid. Standard library only (urllib).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal
from urllib.parse import quote

from .. import __version__
from ..core.atomic import atomic_path
from ..core.errors import DataNotFoundError, WattschedError
from . import registry
from .registry import DataFile, Dataset

CHUNK_BYTES = 1 << 16
MIRROR_ENV = "WATTSCHED_MIRROR"


class DownloadError(WattschedError):
    """A dataset file could not be downloaded (HTTP error, unreachable host, broken connection)."""


class ChecksumError(WattschedError):
    """A downloaded file's sha256 differs from the registry."""


@dataclass(frozen=True)
class FileProgress:
    """One progress report: `state` is 'skipped' (already present and verified), 'downloading' or 'done'."""

    dataset: str
    file: DataFile
    bytes_done: int
    state: Literal["skipped", "downloading", "done"]


ProgressCallback = Callable[[FileProgress], None]


@dataclass(frozen=True)
class Problem:
    """A file of a local copy that is missing or has the wrong checksum."""

    path: str
    reason: str


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def is_valid_copy(path: Path, file: DataFile) -> bool:
    # Size first: cheap, and rules out most stale or partial files without hashing.
    return path.is_file() and path.stat().st_size == file.size and file_sha256(path) == file.sha256


def file_url(dataset_name: str, file: DataFile, base_url: str | None) -> str:
    if not base_url:
        return file.url
    return f"{base_url.rstrip('/')}/{dataset_name}/{quote(file.path, safe='/=')}"


def _safe_relpath(dataset_name: str, relpath: str) -> PurePosixPath:
    # The registry is package data, but a path escaping the dataset folder must never be written.
    rel = PurePosixPath(relpath)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise WattschedError(f"dataset '{dataset_name}': invalid file path '{relpath}' in the registry")
    return rel


def fetch(
    name: str,
    dest: Path | None = None,
    base_url: str | None = None,
    progress: ProgressCallback | None = None,
    timeout: float = 60,
) -> list[Path]:
    """Download every file of dataset `name`; return the local paths (downloaded or already present)."""
    ds = registry.dataset(name)
    root = Path(dest).expanduser() if dest is not None else registry.cache_dir()
    base_url = base_url or os.environ.get(MIRROR_ENV) or None
    report = progress or (lambda _event: None)
    opener = urllib.request.build_opener()  # built per call so proxy settings are read now, not at import
    paths = []
    for file in ds.files:
        target = root / ds.name / _safe_relpath(ds.name, file.path)
        if is_valid_copy(target, file):
            report(FileProgress(ds.name, file, file.size, "skipped"))
        else:
            _download(opener, ds, file, file_url(ds.name, file, base_url), target, timeout, report)
            report(FileProgress(ds.name, file, file.size, "done"))
        paths.append(target)
    return paths


def _download(
    opener: urllib.request.OpenerDirector,
    ds: Dataset,
    file: DataFile,
    url: str,
    target: Path,
    timeout: float,
    report: ProgressCallback,
) -> None:
    request = urllib.request.Request(url, headers={"User-Agent": f"wattsched/{__version__}"})
    report(FileProgress(ds.name, file, 0, "downloading"))
    try:
        response = opener.open(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        raise DownloadError(
            f"download of {ds.name}/{file.path} failed: HTTP {exc.code} {exc.reason} ({url})"
        ) from None
    except urllib.error.URLError as exc:
        raise DownloadError(f"download of {ds.name}/{file.path} failed: {exc.reason} ({url})") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise DownloadError(f"download of {ds.name}/{file.path} failed: {exc} ({url})") from None

    with response, atomic_path(target) as tmp:
        digest = hashlib.sha256()
        done = 0
        try:
            with tmp.open("wb") as out:
                while chunk := response.read(CHUNK_BYTES):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    report(FileProgress(ds.name, file, done, "downloading"))
        except (OSError, http.client.HTTPException) as exc:
            raise DownloadError(
                f"download of {ds.name}/{file.path} broke off after {done} of {file.size} bytes: "
                f"{exc} ({url})"
            ) from None
        actual = digest.hexdigest()
        if actual != file.sha256:
            # Raising inside atomic_path removes the temporary file: nothing is left at `target`.
            raise ChecksumError(
                f"checksum mismatch for {ds.name}/{file.path} from {url}: expected sha256 {file.sha256} "
                f"({file.size} bytes), got {actual} ({done} bytes)"
            )


def find_local_copy(name: str, data_dir: str | Path | None = None) -> Path:
    """The first data root with a folder for dataset `name` (--data-dir / WATTSCHED_DATA, then the cache)."""
    ds = registry.dataset(name)
    roots = registry.data_roots(data_dir)
    for root in roots:
        if (root / ds.name).is_dir():
            return root / ds.name
    searched = ", ".join(str(r / ds.name) for r in roots)
    raise DataNotFoundError(
        f"no local copy of dataset '{ds.name}' (looked in: {searched}); "
        f"run `wattsched data fetch {ds.name}`, or point --data-dir / WATTSCHED_DATA at a local copy"
    )


def verify(name: str, data_dir: str | Path | None = None) -> tuple[Path, list[Problem]]:
    """Check every registered file of a local copy; return the copy's folder and what is wrong with it."""
    ds = registry.dataset(name)
    folder = find_local_copy(name, data_dir)
    problems = []
    for file in ds.files:
        path = folder / _safe_relpath(ds.name, file.path)
        if not path.is_file():
            problems.append(Problem(file.path, "missing"))
            continue
        size = path.stat().st_size
        actual = file_sha256(path)
        if actual != file.sha256:
            problems.append(
                Problem(
                    file.path,
                    f"sha256 mismatch: expected {file.sha256} ({file.size} bytes), "
                    f"got {actual} ({size} bytes)",
                )
            )
    return folder, problems
