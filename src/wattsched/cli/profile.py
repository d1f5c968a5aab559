"""`wattsched profile`: measure training jobs on this machine's GPU into a profile CSV (docs/profile.md).

Imports only typer, rich and the light parts of wattsched at module level, so that ``python -m
wattsched.profiling`` runs on a GPU machine without the rest of wattsched's dependencies (pydantic, ...).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .common import console, err_console, missing_extra, print_error, progress_bar, user_errors


def _numbers(text: str | None, option: str, kind: type = float) -> list:
    if not text:
        return []
    try:
        return [kind(v) for v in (v.strip() for v in text.split(",")) if v]
    except ValueError:
        raise typer.BadParameter(f"{option}: a comma-separated list of numbers, got {text!r}") from None


def _check_target(out: Path, append: bool) -> int:
    """Fail before measuring, not after: the directory exists, and an --append target is a profile file. Returns
    the first repeat number to use: past the file's own, so that appended windows of a set stay apart."""
    import csv

    from ..core.errors import InputError
    from ..perf.profiles import EXTRA_COLUMNS, PROFILE_COLUMNS

    if not out.parent.is_dir():
        raise InputError(out, None, None, f"directory {out.parent} does not exist")
    if append and out.is_file():
        with out.open(newline="") as handle:
            reader = csv.DictReader(handle)
            if list(reader.fieldnames or []) != list(PROFILE_COLUMNS + EXTRA_COLUMNS):
                raise InputError(
                    out, 1, None, "not a wattsched profile file (other columns); give a new file"
                )
            repeats = [int(r["repeat"]) for r in reader if (r["repeat"] or "").strip().isdigit()]
        return max(repeats, default=-1) + 1
    return 0


def profile_command(
    models: Annotated[
        str | None,
        typer.Option(
            help="built-in jobs, MODEL:BATCH,... (any torchvision classification model), e.g. "
            "alexnet:256,resnet50:128"
        ),
    ] = None,
    command: Annotated[
        list[str] | None,
        typer.Option(
            help="your own job: [NAME[:BATCH]=]COMMAND, run for each window; it may print "
            "'wattsched-steps N' lines (steps done so far) to report its speed; repeatable"
        ),
    ] = None,
    sets: Annotated[
        str,
        typer.Option(help="set sizes: 1 = each job alone, 2 = every pair, ... (comma-separated; '' none)"),
    ] = "1",
    named_set: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="one set by its jobs, e.g. alexnet+resnet50 (repeatable; added to --sets)"
        ),
    ] = None,
    regime: Annotated[
        str, typer.Option(help="gpu-bound (batch on the GPU) or input-bound (each batch filled on the CPU)")
    ] = "gpu-bound",
    window_s: Annotated[float, typer.Option(min=0.1, help="length of each measurement window (s)")] = 10.0,
    warmup_steps: Annotated[int, typer.Option(min=0, help="steps each job runs before any window")] = 15,
    repeats: Annotated[int, typer.Option(min=1, help="windows per set (at each power limit)")] = 1,
    idle_s: Annotated[float, typer.Option(min=0.1, help="length of each idle reading (s)")] = 4.0,
    power_limits: Annotated[
        str | None,
        typer.Option(
            help="also measure every set under each power limit, W,W,... (needs root; the GPU's own "
            "limit is restored on exit, error, SIGINT and SIGTERM). Without it nothing is changed"
        ),
    ] = None,
    device_index: Annotated[int, typer.Option(min=0, help="the GPU to profile (NVML index)")] = 0,
    out: Annotated[Path, typer.Option(help="profile CSV to write (atomically)")] = Path("profile.csv"),
    append: Annotated[bool, typer.Option("--append", help="keep the rows already in --out")] = False,
    gpu_name: Annotated[
        str | None, typer.Option(help=escape("the gpu column [default: from NVML's name, e.g. H200]"))
    ] = None,
    sample_ms: Annotated[float, typer.Option(min=1, help="NVML sampling interval (ms)")] = 50.0,
    nvml: Annotated[
        str, typer.Option(help="real: the GPU through pynvml | fake: a simulated GPU and simulated jobs")
    ] = "real",
    python: Annotated[
        str, typer.Option(help="the Python that runs the built-in jobs (needs torch and torchvision)")
    ] = sys.executable,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bar or per-window lines")] = False,
) -> None:
    """Measure training jobs on one GPU, alone and time-sliced in sets, into a profile CSV (the layout of the
    h200-colocation-probe dataset, docs/data-formats.md): NVML sampled every 50 ms, energy from NVML's counter;
    idle readings bare and with the jobs' contexts held. Reads the GPU only, unless --power-limits is given."""
    from ..agent.control import StopRequested
    from ..perf.profiles import write_rows
    from ..profiling.jobs import REGIMES, ProfileError, label_jobs, parse_command, parse_models, plan_sets
    from ..profiling.runner import Profiler

    with user_errors():
        if regime not in REGIMES:
            raise ProfileError(f"--regime: one of {', '.join(REGIMES)}; got {regime!r}")
        jobs = parse_models(models or "") + [parse_command(c, i + 1) for i, c in enumerate(command or [])]
        if not jobs:
            raise ProfileError("nothing to profile: give --models MODEL:BATCH,... and/or --command")
        jobs = label_jobs(jobs)
        chosen = plan_sets(jobs, _numbers(sets, "--sets", int), named_set or [])
        limits = _numbers(power_limits, "--power-limits")
        first_repeat = _check_target(out, append)
        library, runner = _nvml_and_runner(nvml, device_index, regime, warmup_steps, python)
        profiler = Profiler(
            library, runner, jobs, chosen, device_index=device_index, regime=regime, window_s=window_s,
            repeats=repeats, idle_s=idle_s, power_limits_w=limits, sample_interval_s=sample_ms / 1000,
            gpu_name=gpu_name, first_repeat=first_repeat,
            on_window=None if quiet else (lambda line: err_console.print(line, highlight=False, markup=False)),
        )  # fmt: skip
        try:
            with progress_bar(
                f"profile: {len(chosen)} set(s) on GPU {device_index}", enabled=not quiet
            ) as bar:
                profiler.progress = bar
                rows = profiler.run()
        except StopRequested as stop:
            changed = "; the GPU's power limit is restored" if limits else ""
            print_error(f"stopped by {stop} before the end: nothing written{changed}")
            raise typer.Exit(130) from None
        written = write_rows(out, rows, append=append)
    console.print(f"wrote {written} rows to [bold]{escape(str(out))}[/]", highlight=False)


def _nvml_and_runner(kind: str, device_index: int, regime: str, warmup_steps: int, python: str):
    from ..agent.nvml import load_nvml
    from ..profiling.jobs import ProfileError

    if kind not in ("real", "fake"):
        raise ProfileError(f"--nvml: real or fake, got {kind!r}")
    try:
        library = load_nvml(kind)
    except ImportError:
        raise ProfileError(
            f"{missing_extra('pynvml', 'wattsched profile --nvml real')} (module pynvml); or try --nvml fake"
        ) from None
    if kind == "fake":
        from ..profiling.fake import SimulatedJobRunner

        return library, SimulatedJobRunner(library, device_index)
    from ..profiling.workers import ProcessJobRunner

    return library, ProcessJobRunner(device_index, regime, warmup_steps, python=python)


def main() -> None:  # pragma: no cover - `python -m wattsched.profiling`
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(profile_command)
    app()
