"""tools/typecheck.py: reading mypy's output and holding each file to the baseline, on made-up outputs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_tool():
    spec = importlib.util.spec_from_file_location("typecheck_tool", ROOT / "tools" / "typecheck.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


tc = _load_tool()

OUTPUT = """\
src/wattsched/a.py:10: error: Item "None" of "X | None" has no attribute "y"  [union-attr]
src/wattsched/a.py:10: note: See https://mypy.rtfd.io/en/stable/_refs.html#code-union-attr for more info
src/wattsched/a.py:20: error: Name "f" already defined on line 3  [no-redef]
src/wattsched/b.py:5:7: error: Need type annotation for "xs"  [var-annotated]
src/wattsched/b.py:9: error: Incompatible types in assignment (expression has type "int")  [assignment]
Found 4 errors in 2 files (checked 7 source files)
"""


def _baseline_of(text: str):
    return tc.parse_baseline(tc.format_baseline(tc.parse_mypy_output(text).errors))


def test_parse_reads_errors_skips_notes_and_takes_the_file_count():
    run = tc.parse_mypy_output(OUTPUT)
    assert run.files_checked == 7
    assert [(e.path, e.line, e.code) for e in run.errors] == [
        ("src/wattsched/a.py", 10, "union-attr"),
        ("src/wattsched/a.py", 20, "no-redef"),
        ("src/wattsched/b.py", 5, "var-annotated"),
        ("src/wattsched/b.py", 9, "assignment"),
    ]
    assert run.errors[2].message == 'Need type annotation for "xs"'
    assert tc.parse_mypy_output("Success: no issues found in 12 source files\n").files_checked == 12
    assert tc.parse_mypy_output("Success: no issues found in 12 source files\n").errors == []


def test_baseline_keys_carry_no_line_numbers():
    text = tc.format_baseline(tc.parse_mypy_output(OUTPUT).errors)
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert body == sorted(body)
    assert 'src/wattsched/a.py: [no-redef] Name "f" already defined on line N' in body
    assert 'src/wattsched/b.py: [var-annotated] Need type annotation for "xs"' in body
    # the same errors on other lines (code added above them) compare equal
    moved = OUTPUT.replace(":10:", ":14:").replace("line 3", "line 4").replace(":5:7:", ":8:1:")
    cmp = tc.compare(tc.parse_mypy_output(moved).errors, tc.parse_baseline(text))
    assert cmp.ok and not cmp.grown and not cmp.shrunk
    assert (cmp.errors, cmp.baseline) == (4, 4)


def test_a_file_with_more_errors_fails_and_lists_only_the_new_ones():
    baseline = _baseline_of(OUTPUT)
    more = OUTPUT.replace(
        "Found 4",
        'src/wattsched/b.py:30: error: Incompatible types in assignment (expression has type "int")  [assignment]\n'
        "src/wattsched/c.py:1: error: Missing return statement  [return]\nFound 6",
    )
    cmp = tc.compare(tc.parse_mypy_output(more).errors, baseline)
    assert not cmp.ok
    assert [(d.path, d.baseline, d.current) for d in cmp.grown] == [
        ("src/wattsched/b.py", 2, 3),
        ("src/wattsched/c.py", 0, 1),
    ]
    # a repeated message: the one beyond the baseline's count is new, reported with its line
    assert [e.line for e in cmp.grown[0].new] == [30]
    assert [str(e) for e in cmp.grown[1].new] == [
        "src/wattsched/c.py:1: error: Missing return statement  [return]"
    ]
    lines = tc.report(cmp)
    assert lines[0] == "src/wattsched/b.py: 3 errors, the baseline allows 2; not in the baseline:"
    assert lines[1].startswith("  src/wattsched/b.py:30: error: Incompatible types")
    assert "FAILED: 2 files over the baseline" in tc.summary(cmp, 7)


def test_a_file_with_fewer_errors_passes_with_a_hint_to_shrink():
    baseline = _baseline_of(OUTPUT)
    fewer = "\n".join(ln for ln in OUTPUT.splitlines() if "a.py:20" not in ln and "b.py" not in ln)
    cmp = tc.compare(tc.parse_mypy_output(fewer).errors, baseline)
    assert cmp.ok
    assert [(d.path, d.baseline, d.current) for d in cmp.shrunk] == [
        ("src/wattsched/a.py", 2, 1),
        ("src/wattsched/b.py", 2, 0),
    ]
    assert all("--update" in ln for ln in tc.report(cmp))
    assert tc.summary(cmp, 7) == (
        "typecheck: 7 files checked, 1 error, baseline 4: ok, 2 files under the baseline"
    )


def test_a_swapped_error_keeps_the_count_and_passes():
    # The rule is per file: one error fixed and another made in the same file leaves the count, and passes.
    baseline = _baseline_of(OUTPUT)
    swapped = OUTPUT.replace('has no attribute "y"', 'has no attribute "z"')
    cmp = tc.compare(tc.parse_mypy_output(swapped).errors, baseline)
    assert cmp.ok and not cmp.shrunk
    assert tc.summary(cmp, None) == "typecheck: ? files checked, 4 errors, baseline 4: ok"


def _main(tmp_path: Path, output: str, *args: str) -> int:
    out = tmp_path / "mypy.txt"
    out.write_text(output)
    return tc.main(["--baseline", str(tmp_path / "baseline.txt"), "--mypy-output", str(out), *args])


def test_update_writes_shrinks_and_refuses_to_grow(tmp_path, capsys):
    baseline = tmp_path / "baseline.txt"
    assert _main(tmp_path, OUTPUT) == 1  # no baseline yet: everything is new
    assert _main(tmp_path, OUTPUT, "--update") == 1 and not baseline.exists()
    assert _main(tmp_path, OUTPUT, "--update", "--allow-growth") == 0
    written = baseline.read_text()
    assert tc.parse_baseline(written) == _baseline_of(OUTPUT)
    assert _main(tmp_path, OUTPUT) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "typecheck: 7 files checked, 4 errors, baseline 4: ok"

    fewer = "\n".join(ln for ln in OUTPUT.splitlines() if "b.py:9" not in ln)
    assert _main(tmp_path, fewer, "--update") == 0
    assert sum(tc.parse_baseline(baseline.read_text()).values()) == 3

    # back to four errors: the check fails, and --update will not take the extra one without --allow-growth
    assert _main(tmp_path, OUTPUT) == 1
    assert "b.py:9: error" in capsys.readouterr().out
    assert _main(tmp_path, OUTPUT, "--update") == 1
    assert sum(tc.parse_baseline(baseline.read_text()).values()) == 3
    assert "not updating" in capsys.readouterr().out


def test_allow_growth_needs_update(tmp_path):
    with pytest.raises(SystemExit):
        _main(tmp_path, OUTPUT, "--allow-growth")
