"""Compiled kernels of the engine: C sources shipped with the package, built once with the system C compiler.

Why C through the system compiler and not numba (measured on the 2-core development machine): numba costs every
process about 0.6 s before its first kernel runs (0.27 s to import it, 0.35-0.5 s to set up its compiler on the
first call, even from its on-disk cache, scipy.linalg included) and adds about 210 MB to an install (llvmlite alone
173 MB), while the whole compiled loop of the Philly replay (82k jobs) takes about 0.05 s and the process's total
target is about 2 s. A C file needs no new dependency, and loading the built library with ctypes takes under a
millisecond. The first use on a machine compiles it (0.3-1 s, with the log line "compiling kernels, once") into a
user cache directory; every later process loads it from there.

Where no C compiler is found, or ``WATTSCHED_NATIVE=0`` is set, :func:`load` returns None and the engine runs its
Python code, which gives the same results (the tests compare both).

The cache: ``$WATTSCHED_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/wattsched/kernels``, else
``~/.cache/wattsched/kernels``. A library's name holds a hash of its source, the compiler and the flags, so a
changed source is rebuilt, and builds are written under a temporary name and renamed, so that concurrent processes
never load a half-written file.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger("wattsched.engine")

# Strict IEEE arithmetic: results must match the Python code bit for bit (no fused multiply-add, no reordering).
CFLAGS = ("-O2", "-std=c99", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math")
_loaded: dict[str, ctypes.CDLL | None] = {}


def cache_dir() -> Path:
    explicit = os.environ.get("WATTSCHED_KERNEL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wattsched" / "kernels"


def enabled() -> bool:
    return os.environ.get("WATTSCHED_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def _compiler() -> str | None:
    cc = os.environ.get("CC")
    if cc and shutil.which(cc):
        return cc
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _build(source: Path, target: Path, cc: str) -> bool:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.stem + "-", suffix=".so.tmp", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run(
            [cc, *CFLAGS, "-o", tmp, str(source), "-lm"], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            log.warning(
                "compiled kernels unavailable (%s failed: %s); the engine runs in Python", cc, proc.stderr
            )
            return False
        os.replace(tmp, target)
        return True
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load(name: str) -> ctypes.CDLL | None:
    """The compiled library of ``engine/<name>.c``, built on first use; None where it cannot be had."""
    if name in _loaded:
        return _loaded[name]
    lib = None
    if enabled():
        try:
            lib = _load(name)
        except OSError as exc:  # an unwritable cache or a library that does not load: run the Python code
            log.warning("compiled kernels unavailable (%s); the engine runs in Python", exc)
    _loaded[name] = lib
    return lib


def _load(name: str) -> ctypes.CDLL | None:
    source = Path(__file__).with_name(f"{name}.c")
    cc = _compiler()
    if cc is None:
        return None
    key = hashlib.sha256()
    key.update(source.read_bytes())
    key.update(" ".join((os.path.basename(cc), *CFLAGS, platform.machine(), platform.system())).encode())
    target = cache_dir() / f"{name}-{key.hexdigest()[:20]}.so"
    if not target.exists():
        log.warning("compiling kernels, once (%s into %s)", source.name, target.parent)
        if not _build(source, target, cc):
            return None
    return ctypes.CDLL(str(target))
