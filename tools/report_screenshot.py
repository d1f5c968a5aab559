"""Build an HTML report and load it in headless Chromium: `make report-screenshot`.

    python tools/report_screenshot.py --out runs/report [RUN_OR_EXPERIMENT_DIR...]

Without directories it first makes a demo-sized set of runs on built-in data only (the synthetic workload on the
default cluster: always-on, idle-timeout and forecast power managers, and a shortest-job-first queue with
idle-timeout) against a generated price and carbon series (a daily sine, written beside the runs as
generated-price.csv / generated-carbon.csv, so the report names them as such). Writes OUT/report.html and
OUT/report.png and prints the file size, the browser's load time and any console lines of the page.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
from pathlib import Path

from typer.testing import CliRunner

from wattsched.cli.main import app
from wattsched.core.atomic import write_text
from wattsched.experiments.browser import find_chromium, load_page, network_refs
from wattsched.experiments.report import build_report

DEMO_RUNS = {
    "always-on": [],
    "idle-timeout": ["--power-manager", "idle-timeout"],
    "forecast": ["--power-manager", "forecast"],
    "sjf-idle-timeout": ["--queue", "sjf", "--power-manager", "idle-timeout"],
}


def write_signals(out: Path, year: int = 2023) -> tuple[Path, Path]:
    """A generated hourly price (USD/MWh) and carbon-intensity (gCO2/kWh) series for `year`: daily sines."""
    start = dt.datetime(year, 1, 1)
    hours = int((dt.datetime(year + 1, 1, 1) - start).total_seconds() // 3600)
    price, carbon = ["time,price_usd_per_mwh"], ["time,carbon_g_per_kwh"]
    for h in range(hours):
        stamp = (start + dt.timedelta(hours=h)).isoformat()
        phase = 2 * math.pi * (h % 24) / 24
        price.append(f"{stamp},{60 - 35 * math.cos(phase - math.pi * 0.75):.2f}")
        carbon.append(f"{stamp},{320 + 120 * math.cos(phase):.1f}")
    price_csv, carbon_csv = out / "generated-price.csv", out / "generated-carbon.csv"
    write_text(price_csv, "\n".join(price) + "\n")
    write_text(carbon_csv, "\n".join(carbon) + "\n")
    return price_csv, carbon_csv


def demo_runs(out: Path, jobs: int = 400, runs: dict[str, list[str]] | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    price, carbon = write_signals(out)
    made = []
    for name, args in (runs or DEMO_RUNS).items():
        target = out / name
        argv = [
            "simulate",
            "--quiet",
            "--jobs",
            str(jobs),
            "--price-csv",
            str(price),
            "--carbon-csv",
            str(carbon),
        ]
        result = CliRunner().invoke(app, [*argv, *args, "--out", str(target)])
        if result.exit_code != 0:
            raise SystemExit(f"simulate {name} failed: {result.output}")
        made.append(target)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "dirs", nargs="*", type=Path, help="run or experiment directories (default: demo runs)"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/report"))
    parser.add_argument("--baseline", default=None)
    parser.add_argument("--jobs", type=int, default=400, help="jobs per demo run")
    args = parser.parse_args(argv)
    dirs = args.dirs or demo_runs(args.out / "runs", args.jobs)
    html_path, png = args.out / "report.html", args.out / "report.png"
    text = build_report(dirs, args.baseline, title="wattsched report")
    write_text(html_path, text)
    print(f"{html_path}: {len(text.encode()) / 1e6:.2f} MB, {text.count('<svg')} plots")
    refs = network_refs(text)
    if refs:
        print(f"network references: {refs[:5]}")
        return 1
    if find_chromium() is None:
        print("no chromium on PATH: no screenshot (apt-get install chromium)")
        return 0
    load = load_page(html_path, png, height=5600)
    print(
        f"chromium: page loaded in {load.seconds:.2f} s (browser start-up alone {load.baseline_seconds:.2f} s); "
        f"screenshot {png}"
    )
    for line in load.console:
        print(f"console: {line}")
    return 1 if load.console else 0


if __name__ == "__main__":
    sys.exit(main())
