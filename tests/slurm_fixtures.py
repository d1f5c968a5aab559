"""The ``local_slurm`` session fixture: one real local Slurm shared by every live Slurm test (docs/live-slurm.md §2)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from tests.slurm_testbed import LocalSlurm


@pytest.fixture(scope="session")
def local_slurm() -> Iterator[LocalSlurm]:
    """munge + slurmctld + slurmd gpu1..gpu3 (4 fake a100, 8 CPUs each), stopped by PID at the session's end.

    No automatic power-down (nodes idle between tests would otherwise suspend and cost 20-30 s to wake);
    ``scontrol update nodename=... state=power_down`` still works. Tests leave the nodes idle and powered up."""
    if os.environ.get("WATTSCHED_SKIP_SLURM") == "1":
        pytest.skip("local Slurm skipped: WATTSCHED_SKIP_SLURM=1")
    ok, why = LocalSlurm.available()
    if not ok:
        pytest.skip(why)
    # Not pytest's tmp_path: its parents are mode 0700 and munged, running as the munge user, must enter the dir.
    base = tempfile.mkdtemp(prefix="wattsched-slurm-")
    try:
        with LocalSlurm(base, suspend_time=None) as slurm:
            yield slurm
    finally:
        shutil.rmtree(base, ignore_errors=True)
