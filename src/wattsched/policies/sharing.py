"""Pieces shared by the policies that put several jobs on the same GPUs (``eaco``, ``wattsched-green``'s
``colocate``): a GPU set as a key, its size, and a job's speed alone on it."""

from __future__ import annotations

from functools import lru_cache

from ..core.settings import DEFAULT_SETTING, GpuSetting


def gpu_set(placement) -> tuple:
    """The GPUs of a placement as a hashable key: ((node, (gpu, ...)), ...)."""
    return tuple((node, tuple(gpus)) for node, gpus, _, _ in placement)


@lru_cache(maxsize=65536)
def gpu_set_size(key: tuple) -> int:
    """How many GPUs a :func:`gpu_set` key holds."""
    return sum(len(g) for _, g in key)


def solo_rate_on(
    perf, spec, job: int, gpu_code: int, key: tuple, setting: GpuSetting = DEFAULT_SETTING
) -> float:
    """The job's speed alone on this GPU set (a set over several nodes or switches runs unconsolidated)."""
    switches = len({int(spec.switch_id[node]) for node, _ in key})
    return perf.solo_rate(job, gpu_code, gpu_set_size(key), len(key), switches, setting)
