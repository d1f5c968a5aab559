"""Type-check src/wattsched with mypy and hold every file to the committed baseline: `make lint`.

Usage: python tools/typecheck.py [--update [--allow-growth]] [--baseline PATH] [--mypy-output FILE]

mypy runs with the configuration in pyproject.toml ([tool.mypy]). The baseline (tools/mypy-baseline.txt) lists
the errors mypy reported when it was last recorded, one a line as `path: [code] message`, without line numbers,
so that edits elsewhere in a file leave it alone. The rule is per file: no file may have more errors than the
baseline gives it.

- A file with more errors fails the check (exit status 1); the errors the baseline does not hold are listed.
- A file with fewer errors passes, with a hint to shrink the baseline: `python tools/typecheck.py --update`.
- --update rewrites the baseline from this run. It refuses (exit status 1) when that would let any file have more
  errors than before, unless --allow-growth is given: the baseline may only shrink.

Prints one summary line: files checked, errors, errors in the baseline. Exit status 2 when mypy itself fails
(a crash, a bad configuration, mypy not installed). --mypy-output compares a saved mypy output instead of running
mypy (for debugging the comparison).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BASELINE = ROOT / "tools" / "mypy-baseline.txt"
TARGET = "src/wattsched"
UPDATE_HINT = "python tools/typecheck.py --update"

# `path:line[:col]: error: message  [code]` (mypy without --pretty). Notes and the summary line do not match.
_ERROR = re.compile(
    r"^(?P<path>[^:\n]+\.pyi?):(?P<line>\d+)(?::\d+)?: error: (?P<msg>.*?)(?:  \[(?P<code>[a-z0-9-]+)\])?$"
)
_FOUND = re.compile(r"^Found \d+ errors? in \d+ files? \(checked (?P<n>\d+) source files?\)$")
_SUCCESS = re.compile(r"^Success: no issues found in (?P<n>\d+) source files?$")
# Messages that quote other line numbers ("defined on line 12"): those numbers drift like the error's own.
_LINE_REF = re.compile(r"\bline \d+\b")

HEADER = """\
# mypy errors the type check still tolerates, one a line: `path: [code] message` (no line numbers).
# Written by `python tools/typecheck.py --update`; the rule is per file, and the baseline may only shrink:
# fix errors and rewrite it, never add to it by hand. See docs/architecture.md, "Type checking".
"""


@dataclass(frozen=True)
class MypyError:
    path: str
    line: int
    code: str
    message: str

    @property
    def key(self) -> str:
        """The baseline line: the error without its line numbers."""
        return f"{self.path}: [{self.code}] {_LINE_REF.sub('line N', self.message)}"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: error: {self.message}  [{self.code}]"


@dataclass
class MypyRun:
    errors: list[MypyError]
    files_checked: int | None  # from mypy's summary line; None when it printed none


@dataclass
class FileDiff:
    path: str
    baseline: int
    current: int
    new: list[MypyError] = field(default_factory=list)  # errors whose key the baseline holds fewer times


@dataclass
class Comparison:
    errors: int
    baseline: int
    grown: list[FileDiff]
    shrunk: list[FileDiff]

    @property
    def ok(self) -> bool:
        return not self.grown


def parse_mypy_output(text: str) -> MypyRun:
    errors: list[MypyError] = []
    files_checked: int | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        m = _ERROR.match(line)
        if m:
            path = m["path"].replace("\\", "/")
            errors.append(MypyError(path, int(m["line"]), m["code"] or "misc", m["msg"]))
            continue
        s = _FOUND.match(line) or _SUCCESS.match(line)
        if s:
            files_checked = int(s["n"])
    return MypyRun(errors, files_checked)


def parse_baseline(text: str) -> Counter[str]:
    return Counter(ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#"))


def format_baseline(errors: Iterable[MypyError]) -> str:
    return HEADER + "".join(f"{key}\n" for key in sorted(e.key for e in errors))


def _path_of(key: str) -> str:
    return key.split(": [", 1)[0]


def _per_file(keys: Counter[str]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for key, n in keys.items():
        counts[_path_of(key)] += n
    return counts


def compare(errors: list[MypyError], baseline: Counter[str]) -> Comparison:
    current = Counter(e.key for e in errors)
    now, before = _per_file(current), _per_file(baseline)
    grown: list[FileDiff] = []
    shrunk: list[FileDiff] = []
    for path in sorted(set(now) | set(before)):
        diff = FileDiff(path, before[path], now[path])
        if diff.current > diff.baseline:
            # The errors in excess of the baseline, key by key; the last ones of a repeated key are the new ones.
            extra = {
                k: n - baseline[k] for k, n in current.items() if _path_of(k) == path and n > baseline[k]
            }
            for e in reversed([e for e in errors if e.path == path]):
                if extra.get(e.key, 0) > 0:
                    extra[e.key] -= 1
                    diff.new.append(e)
            diff.new.sort(key=lambda e: e.line)
            grown.append(diff)
        elif diff.current < diff.baseline:
            shrunk.append(diff)
    return Comparison(sum(current.values()), sum(baseline.values()), grown, shrunk)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def report(cmp: Comparison) -> list[str]:
    """The lines the check prints before its summary: what grew (failures) and what shrank (hints)."""
    out: list[str] = []
    for d in cmp.grown:
        out.append(
            f"{d.path}: {_plural(d.current, 'error')}, the baseline allows {d.baseline}; not in the baseline:"
        )
        out.extend(f"  {e}" for e in d.new)
    for d in cmp.shrunk:
        out.append(
            f"{d.path}: {_plural(d.current, 'error')}, the baseline has {d.baseline}: shrink it ({UPDATE_HINT})"
        )
    return out


def summary(cmp: Comparison, files_checked: int | None) -> str:
    checked = "?" if files_checked is None else str(files_checked)
    verdict = (
        f"FAILED: {_plural(len(cmp.grown), 'file')} over the baseline"
        if cmp.grown
        else ("ok" if not cmp.shrunk else f"ok, {_plural(len(cmp.shrunk), 'file')} under the baseline")
    )
    return f"typecheck: {checked} files checked, {_plural(cmp.errors, 'error')}, baseline {cmp.baseline}: {verdict}"


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def run_mypy(target: str = TARGET) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "mypy", "--no-pretty", "--no-color-output", "--show-error-codes", target]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--update", action="store_true", help="rewrite the baseline from this run")
    ap.add_argument("--allow-growth", action="store_true", help="let --update give a file more errors")
    ap.add_argument("--baseline", type=Path, default=DEFAULT_BASELINE, help="baseline file")
    ap.add_argument("--mypy-output", type=Path, default=None, help="compare this saved mypy output instead")
    args = ap.parse_args(argv)
    if args.allow_growth and not args.update:
        ap.error("--allow-growth goes with --update")

    if args.mypy_output is not None:
        rc, text = (1, args.mypy_output.read_text())
    else:
        try:
            import mypy  # noqa: F401
        except ImportError:
            print(
                "typecheck: mypy is not installed (it is pinned in requirements.lock; `make lint`)",
                file=sys.stderr,
            )
            return 2
        rc, text = run_mypy()
    run = parse_mypy_output(text)
    if rc not in (0, 1) or (rc == 1 and not run.errors and args.mypy_output is None):
        print(text, end="" if text.endswith("\n") else "\n", file=sys.stderr)
        print(f"typecheck: mypy failed (exit status {rc})", file=sys.stderr)
        return 2

    baseline = parse_baseline(args.baseline.read_text()) if args.baseline.is_file() else Counter()
    cmp = compare(run.errors, baseline)
    if args.update:
        if cmp.grown and not args.allow_growth:
            print("\n".join(report(cmp)))
            print(
                f"typecheck: not updating {_shown(args.baseline)}: {_plural(len(cmp.grown), 'file')} would get "
                "more errors (fix them, or pass --allow-growth if this really must grow)"
            )
            return 1
        args.baseline.write_text(format_baseline(run.errors))
        print(
            f"typecheck: wrote {_shown(args.baseline)} ({_plural(len(run.errors), 'error')} in "
            f"{_plural(len({e.path for e in run.errors}), 'file')}; was {cmp.baseline})"
        )
        return 0
    lines = report(cmp)
    if lines:
        print("\n".join(lines))
    print(summary(cmp, run.files_checked))
    return 0 if cmp.ok else 1


if __name__ == "__main__":
    sys.exit(main())
