"""Build an HTML report and load it in headless Chromium: `make report-screenshot`.

    python tools/report_screenshot.py --out runs/report [RUN_OR_EXPERIMENT_DIR...]

Without directories it runs the demo (`wattsched demo`: the energy-aware policies on built-in data only) into
OUT/demo and takes its report. Writes OUT/report.html and OUT/report.png (the whole page) and OUT/report-top.png
(its first screen, the picture in the README) and prints the file size, the browser's load time and any console
lines of the page.

`demo_runs` makes a smaller set of plain `simulate` runs (power managers and queues) against the demo's generated
price and carbon series; the report's browser test uses it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from typer.testing import CliRunner

from wattsched.cli.main import app
from wattsched.core.atomic import write_text, write_with
from wattsched.experiments.browser import find_chromium, load_page, network_refs
from wattsched.experiments.demo import run_demo, write_generated_signals
from wattsched.experiments.report import build_report

DEMO_RUNS = {
    "always-on": [],
    "idle-timeout": ["--power-manager", "idle-timeout"],
    "forecast": ["--power-manager", "forecast"],
    "sjf-idle-timeout": ["--queue", "sjf", "--power-manager", "idle-timeout"],
}


def demo_runs(out: Path, jobs: int = 400, runs: dict[str, list[str]] | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    price, carbon = write_generated_signals(out)
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
    parser.add_argument("--jobs", type=int, default=1000, help="jobs of the demo")
    args = parser.parse_args(argv)
    html_path, png = args.out / "report.html", args.out / "report.png"
    if args.dirs:
        text = build_report(args.dirs, args.baseline, title="wattsched report")
    else:
        text = run_demo(args.out / "demo", args.jobs).report.read_text()
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
    top = args.out / "report-top.png"
    write_with(top, lambda p: _first_screen(png, p))
    print(f"first screen: {top}")
    for line in load.console:
        print(f"console: {line}")
    return 1 if load.console else 0


def _first_screen(page_png: Path, target: Path, height: int = 1000) -> None:
    from PIL import Image

    with Image.open(page_png) as page:
        page.crop((0, 0, page.width, min(height, page.height))).save(target, format="PNG", optimize=True)


if __name__ == "__main__":
    sys.exit(main())
