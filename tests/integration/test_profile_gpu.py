"""`wattsched profile` on a real GPU: a tiny profile (resnet18 at batch 8, 2-s window), read-only.

Marked ``gpu``; skips unless pynvml finds a GPU and PyTorch (with torchvision) sees CUDA. Imports nothing that
needs pydantic, so it also runs with ``--noconftest`` on a GPU machine that has only the profiler's packages.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def _gpu_limit_mw() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no binding, no driver: nothing to profile
        pytest.skip(f"NVML not available: {exc}")
    if pynvml.nvmlDeviceGetCount() < 1:
        pytest.skip("NVML sees no GPU")
    return int(pynvml.nvmlDeviceGetPowerManagementLimit(pynvml.nvmlDeviceGetHandleByIndex(0)))


@pytest.mark.gpu
def test_tiny_real_profile_is_read_only(tmp_path: Path) -> None:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("torchvision") is None:
        pytest.skip("PyTorch or torchvision is not installed")
    limit_before = _gpu_limit_mw()
    cuda = subprocess.run([sys.executable, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
                          capture_output=True, timeout=300, check=False)  # fmt: skip
    if cuda.returncode != 0:
        pytest.skip("PyTorch sees no CUDA GPU")
    out = tmp_path / "tiny.csv"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-m", "wattsched.profiling", "--models", "resnet18:8", "--sets", "1", "--window-s", "2",
         "--idle-s", "1", "--warmup-steps", "3", "--out", str(out), "--quiet"],
        env=env, capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = list(csv.DictReader(out.open()))
    assert [r["state"] for r in rows] == ["idle-bare", "idle-held", "training"]
    job = rows[-1]
    assert job["model"] == "resnet18" and job["batch"] == "8"
    assert int(job["iters"]) > 0 and float(job["it_per_s"]) > 0
    window_s = float(job["window_s"])
    assert window_s > 1.5 and window_s < 10
    power = float(job["gpu_power_mean_w"])
    assert 10 < power < 2000  # watts, not milliwatts
    energy = float(job["gpu_energy_j"])
    assert 0.5 * power * float(job["window_s"]) < energy < 2 * power * float(job["window_s"])
    assert float(job["peak_mem_gib"]) > 0
    assert _gpu_limit_mw() == limit_before  # nothing changed
