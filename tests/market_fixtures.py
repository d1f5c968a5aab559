"""A small day-night market and cluster for policy tests: $200/MWh from 00:00 to 12:00 UTC, $20 after, every day
of 2023; 2 nodes x 4 V100."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path


def write_day_night_market(folder: Path) -> Path:
    """Writes `p.csv` (hourly prices) and `c.yaml` (the cluster) into `folder`; returns it."""
    rows = ["time,price_usd_per_mwh"]
    for h in range(24 * 366):
        t = datetime(2023, 1, 1) + timedelta(hours=h)
        rows.append(t.strftime("%Y-%m-%dT%H:00:00Z") + ("," + ("200" if t.hour < 12 else "20")))
    (folder / "p.csv").write_text("\n".join(rows) + "\n")
    (folder / "c.yaml").write_text(
        "name: small\nnode_groups:\n  - count: 2\n    gpus: 4\n    gpu_model: V100\n    cpu_milli: 32000\n"
        "    memory_mib: 262144\n"
    )
    return folder
