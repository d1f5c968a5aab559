"""Re-fit the power-limit response curves from the Zeus traces and write (or verify) dvfs_fit.json.

Usage: python tools/fit_dvfs.py [--data-dir DIR] [--out PATH] [--check]

The traces are found like every dataset file: --data-dir, else WATTSCHED_DATA, else the download cache
(`wattsched data fetch zeus-power`). --check re-fits and compares with the file instead of writing it (numbers to
1e-9, everything else exactly); exit status 1 on any difference. The fit-quality table is printed either way.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from wattsched.core.atomic import write_text
from wattsched.core.errors import WattschedError
from wattsched.energy import zeus

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "src" / "wattsched" / "energy" / zeus.FIT_FILE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None, help="folder holding zeus-power/ (default: WATTSCHED_DATA)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fit file to write or check")
    ap.add_argument("--check", action="store_true", help="verify the file instead of writing it")
    args = ap.parse_args(argv)
    try:
        doc = zeus.fit_zeus_curves(args.data_dir)
    except WattschedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(zeus.format_fit_table(doc))
    if args.check:
        if not args.out.is_file():
            print(f"error: {args.out} does not exist", file=sys.stderr)
            return 1
        diffs = zeus.fit_differences(doc, json.loads(args.out.read_text(encoding="utf-8")))
        for d in diffs:
            print(f"differs: {d}", file=sys.stderr)
        print(f"check: {args.out.name} {'differs' if diffs else 'matches the re-fit'}")
        return 1 if diffs else 0
    write_text(args.out, zeus.fit_json_text(doc))
    print(f"wrote {args.out.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
