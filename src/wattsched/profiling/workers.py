"""The real job runner: one process per job on the profiled GPU, so that the driver time-slices a set's jobs.

Built-in jobs are long-lived ``python -m wattsched.profiling.worker`` processes (protocol in worker.py): started
together, warmed up one after another (cuDNN's autotuning then sees the GPU to itself), kept alive and idle
between windows. A ``--command`` job cannot be paused, so it is started for each window: it runs until it has
reported ``warmup_steps`` steps (or for ``command_warmup_s`` if it reports none), the window is measured, then it
is stopped (SIGTERM to its process group, SIGKILL after 10 s).

A command reports progress by printing ``wattsched-steps N`` lines on stdout, N the steps done so far; its
``iters`` in a window is the growth of N over the window and its ``it_per_s`` that over the window's length.
A command that prints none has empty ``iters`` and ``it_per_s``: its rows give power and utilisation only.

Each process sees only the profiled GPU (``CUDA_VISIBLE_DEVICES`` in NVML's PCI order) and runs in its own
session, so a Ctrl-C reaches only the profiler, which then stops them and restores what it changed.
"""

from __future__ import annotations

import collections
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .jobs import JobSpec, ProfileError
from .runner import JobWindow

STEPS_LINE = re.compile(r"^\s*wattsched-steps\s+(\d+)\s*$")
STOP_GRACE_S = 10.0
_EOF = None


def _child_env(device_index: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # NVML numbers GPUs in PCI order; CUDA's default order differs
    env["CUDA_VISIBLE_DEVICES"] = str(device_index)
    package_root = str(Path(__file__).resolve().parents[2])  # the directory that holds wattsched/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


class _Process:
    """A child process with its stdout lines in a queue (read by a thread) and the tail of its stderr."""

    def __init__(self, label: str, args: Sequence[str] | str, env: dict[str, str], shell: bool = False):
        self.label = label
        self.lines: queue.Queue[tuple[float, str | None]] = queue.Queue()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=12)
        self.output_tail: collections.deque[str] = collections.deque(maxlen=12)
        try:
            self.popen = subprocess.Popen(
                args, shell=shell, env=env, text=True, bufsize=1, start_new_session=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
        except OSError as exc:
            raise ProfileError(f"job {label}: could not start ({exc})") from None
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.output_tail.append(line.rstrip())
            self.lines.put((time.monotonic(), line.rstrip("\n")))
        self.lines.put((time.monotonic(), _EOF))

    def _read_stderr(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            if line.strip():
                self.stderr_tail.append(line.rstrip())

    def send(self, line: str) -> None:
        try:
            assert self.popen.stdin is not None
            self.popen.stdin.write(line + "\n")
            self.popen.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self.failure("exited") from None

    def failure(self, what: str) -> ProfileError:
        time.sleep(0.2)  # let the reader threads catch the last lines
        tail = " | ".join(list(self.stderr_tail)[-4:] or list(self.output_tail)[-4:])
        code = self.popen.poll()
        status = f" (exit status {code})" if code is not None else ""
        return ProfileError(f"job {self.label}: {what}{status}" + (f": {tail}" if tail else ""))

    def expect(self, word: str, timeout_s: float) -> list[str]:
        """Wait for a line starting with `word`; its other fields. An ``error`` line or the end raises."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.failure(f"no '{word}' within {timeout_s:g} s")
            try:
                _, line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is _EOF:
                raise self.failure(f"exited before '{word}'")
            fields = line.split()
            if fields and fields[0] == "error":
                raise ProfileError(f"job {self.label}: {line[len('error') :].strip()}")
            if fields and fields[0] == word:
                return fields[1:]

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after the grace period; never raises."""
        if self.popen.poll() is None:
            for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.popen.pid, sig)
                    self.popen.wait(wait)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


@dataclass
class _CommandRun:
    process: _Process
    steps: int | None = None  # the last `wattsched-steps` value read
    steps_at: float = 0.0

    def drain(self) -> None:
        """Read the lines that arrived; keep the latest step count. Raises if the command ended."""
        while True:
            try:
                _, line = self.process.lines.get_nowait()
            except queue.Empty:
                return
            if line is _EOF:
                raise self.process.failure("exited during its warm-up or window")
            match = STEPS_LINE.match(line)
            if match:
                self.steps = int(match.group(1))


@dataclass
class ProcessJobRunner:
    device_index: int = 0
    regime: str = "gpu-bound"
    warmup_steps: int = 15
    python: str = sys.executable
    load_timeout_s: float = 600.0  # torch import, model build, first CUDA context
    step_timeout_s: float = 600.0  # warm-up, and a window's end beyond its length
    command_warmup_s: float = 30.0  # for a command that reports no steps
    jobs: list[JobSpec] = field(default_factory=list)
    _workers: dict[int, _Process] = field(default_factory=dict)
    _commands: dict[int, _CommandRun] = field(default_factory=dict)

    @property
    def holds_contexts(self) -> bool:
        return any(job.command is None for job in self.jobs)

    def start(self, jobs: Sequence[JobSpec]) -> None:
        self.jobs = list(jobs)
        builtin = [i for i, job in enumerate(self.jobs) if job.command is None]
        if builtin:
            check_torch(self.python)
        env = _child_env(self.device_index)
        for i in builtin:  # started together: importing torch and building models takes most of the start
            job = self.jobs[i]
            args = [self.python, "-m", "wattsched.profiling.worker", "--model", job.model, "--batch",
                    str(job.batch), "--regime", self.regime, "--warmup-steps", str(self.warmup_steps)]  # fmt: skip
            self._workers[i] = _Process(job.name, args, env)
        for i in builtin:
            self._workers[i].expect("loaded", self.load_timeout_s)
        for i in builtin:  # warmed up one at a time: each alone on the GPU
            self._workers[i].send("warmup")
            self._workers[i].expect("ready", self.step_timeout_s)

    def prepare(self, members: Sequence[int]) -> None:
        commands = [i for i in members if self.jobs[i].command is not None]
        for i in commands:
            job = self.jobs[i]
            env = _child_env(self.device_index, {"WATTSCHED_PROFILE": "1"})
            self._commands[i] = _CommandRun(_Process(job.name, job.command or "", env, shell=True))
        deadline = time.monotonic() + self.command_warmup_s
        waiting = list(commands)
        while waiting:
            time.sleep(0.05)
            for i in list(waiting):
                run = self._commands[i]
                run.drain()
                warmed = run.steps is not None and run.steps >= self.warmup_steps
                if warmed or time.monotonic() >= deadline:
                    waiting.remove(i)

    def run(self, members: Sequence[int], seconds: float) -> list[JobWindow]:
        start = time.monotonic()
        first_steps = {}
        for i in members:
            if i in self._commands:
                self._commands[i].drain()
                first_steps[i] = self._commands[i].steps
            else:
                self._workers[i].send(f"run {seconds:.6f}")
        results: dict[int, JobWindow] = {}
        for i in members:
            if i in self._workers:
                steps, job_seconds, memory = self._workers[i].expect("done", seconds + self.step_timeout_s)
                results[i] = JobWindow(int(steps), float(job_seconds), float(memory))
        left = seconds - (time.monotonic() - start)
        if left > 0 and self._commands:
            time.sleep(left)
        elapsed = time.monotonic() - start
        for i in members:
            if i in self._commands:
                run = self._commands[i]
                run.drain()
                before = first_steps[i]
                done = run.steps - before if run.steps is not None and before is not None else None
                results[i] = JobWindow(done, elapsed, None)
        return [results[i] for i in members]

    def finish(self, members: Sequence[int]) -> None:
        for i in members:
            run = self._commands.pop(i, None)
            if run is not None:
                run.process.stop()

    def close(self) -> None:
        for run in self._commands.values():
            run.process.stop()
        self._commands.clear()
        for worker in self._workers.values():
            if worker.popen.poll() is None:
                try:
                    worker.send("quit")
                    worker.popen.wait(5.0)
                except (ProfileError, subprocess.TimeoutExpired):
                    pass
            worker.stop()
        self._workers.clear()


def check_torch(python: str) -> None:
    """PyTorch and torchvision importable by `python`, else a ProfileError that says what to do."""
    probe = "import importlib.util as u, sys; sys.exit(0 if u.find_spec('torch') and u.find_spec('torchvision') else 3)"
    try:
        code = subprocess.run([python, "-c", probe], capture_output=True, timeout=60, check=False).returncode
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProfileError(f"could not run {python} to look for PyTorch ({exc})") from None
    if code != 0:
        raise ProfileError(
            f"the built-in jobs need PyTorch and torchvision, which {python} cannot import; install them "
            "(pip install torch torchvision) or profile your own program with --command"
        )
