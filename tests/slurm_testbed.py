"""A real Slurm on one host for tests: munge, slurmctld and N slurmd with fake GPUs (docs/live-slurm.md §2).

Test infrastructure, not part of the installed package (it was ``wattsched.backends.slurm.testbed``): run it from
the repository root, where ``tests`` is importable.

Everything (configuration, state, logs, sockets, fake ``/dev/nvidiaN`` devices, power-saving scripts) lives under
one base directory, and every port is picked free at start, so two testbeds and a system Slurm do not clash.
Processes are stopped by PID only: the ones started here, the ones named in the testbed's pid files, and any
process whose environment carries this testbed's marker variable (job steps, slurmd started by the resume
program). Needs root (slurmd as SlurmdUser, ``mknod``, munged as the munge user) and the Debian packages
``munge slurm-wlm slurm-client``; the opt-in accounting mode (``accounting=True``: slurmdbd on a private MariaDB,
so ``sacct`` works) also ``slurmdbd mariadb-server``.

    with LocalSlurm(tmpdir) as slurm:
        slurm.run(["sbatch", "--parsable", "--wrap", "true"])

Command line for a person::

    python -m tests.slurm_testbed start DIR   # prints `export SLURM_CONF=...`, leaves it running
    python -m tests.slurm_testbed stop DIR
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import wattsched
from wattsched.core.errors import WattschedError

MARKER = "WATTSCHED_SLURM_TESTBED"  # set in every testbed process's environment; its value is the base dir
BINARIES = ("slurmctld", "slurmd", "munged", "sinfo", "sbatch", "scontrol", "squeue", "scancel", "setsid")
# Accounting mode only (LocalSlurm(accounting=True)): slurmdbd on a private MariaDB, so sacct works.
ACCOUNTING_BINARIES = ("slurmdbd", "sacct", "sacctmgr", "mariadbd", "mariadb-install-db", "mariadb")
CLUSTER = "wattsched-test"
ACCOUNT = "research"  # the account every testbed job is charged to in accounting mode (root's default)
MANIFEST = "testbed.json"
AGENT_SOCKET_FILE = "etc/agent-socket"  # under the base dir: its presence turns the job prolog/epilog hook on
NVIDIA_MAJOR = 195  # the character-device major number of /dev/nvidiaN
STEP_COMMANDS = ("slurmstepd", "srun")  # orphaned to us by job steps; reaped by name (see LocalSlurm.reap)
NEVER_S = 365 * 86400  # SuspendTime standing for "no automatic power-down"
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

# slurmscriptd runs the resume program with most signals blocked; a slurmd started from there inherits the mask
# and ignores SIGTERM, so it is exec'd through this wrapper (docs/live-slurm.md §2.4).
_WRAPPER = """\
#!{python}
import os, signal, sys
signal.pthread_sigmask(signal.SIG_SETMASK, [])
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(sig, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])
"""

_RESUME = """\
#!/bin/sh
# ResumeProgram: $1 is a host list such as gpu[1,3]. slurmd needs -b (the host's boot time would make slurmctld
# wait for a reboot), the signal-mask wrapper, and a full detach (setsid -f), or the first job after resume fails.
# -D keeps slurmd in the process setsid started, so its pid file names it and no extra fork is left behind.
export SLURM_CONF={conf}
export {marker}={base}
for node in $({scontrol} show hostnames "$1"); do
  echo "$(date +%T) resume $node" >> {log}
  {setsid} -f {wrapper} {slurmd} -D -b -N "$node" -f {conf} </dev/null >/dev/null 2>&1
done
"""

_SUSPEND = """\
#!/bin/sh
# SuspendProgram: "powers down" a node by stopping its slurmd (PID from its pid file).
export SLURM_CONF={conf}
for node in $({scontrol} show hostnames "$1"); do
  pidfile={run}/slurmd-$node.pid
  pid=$(cat "$pidfile" 2>/dev/null || true)
  echo "$(date +%T) suspend $node pid=$pid" >> {log}
  if [ -n "$pid" ]; then
    echo "$pid" >> {run}/suspended.pids
    kill "$pid" 2>/dev/null || true
  fi
done
"""

# Prolog/Epilog (PrologFlags=Alloc: on every node of a job, at allocation). Every job of every live test runs
# them, so they do nothing unless DIR/etc/agent-socket names a node agent's Unix socket (LocalSlurm.set_agent_socket).
# slurmd gives them no PATH; they must never fail, or slurmd drains the node. PYTHONPATH: the wattsched that built the
# testbed, not whichever one the interpreter would import by default (another checkout's editable install).
_JOB_HOOK = """\
#!/bin/sh
[ -f {agent_socket} ] || exit 0
read -r socket < {agent_socket}
export SLURM_CONF={conf} PATH={path} PYTHONPATH={pythonpath}
{python_sh} -m wattsched.cli.main agent-job {phase} --socket "$socket" >> {agent_log} 2>&1
exit 0
"""


def _which(name: str) -> str | None:
    # /usr/sbin is not on every PATH (non-login shells, CI runners).
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")


def _tail(text: str | bytes | None, lines: int = 15) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").strip().splitlines()[-lines:])


def _file_tail(path: Path, lines: int = 15) -> str:
    try:
        return _tail(path.read_text(errors="replace"), lines)
    except OSError:
        return ""


def _free_ports(count: int) -> list[int]:
    """Ports free on all addresses now (held open together so they differ); a small race remains until use."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait_for(what: str, predicate: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WattschedError(f"local Slurm: timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # The state letter follows the ')' that closes the command name; Z = zombie (already dead).
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def _marked_pids(marker: bytes) -> list[int]:
    """Every live process whose environment carries this testbed's marker (never this process itself)."""
    me = os.getpid()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me and _has_marker(int(entry), marker):
            pids.append(int(entry))
    return pids


def _descendants(roots: set[int]) -> set[int]:
    """Every live descendant of ``roots`` (by parent PID), so a job's shell goes down with its slurmstepd."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rpartition(b")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found and child not in roots:
                found.add(child)
                todo.append(child)
    return found


def _zombie_children() -> list[tuple[int, str]]:
    """(pid, command name) of this process's children that have exited and wait to be reaped."""
    me = os.getpid()
    zombies = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        head, _, rest = data.rpartition(b")")
        fields = rest.split()
        if len(fields) > 1 and fields[0] == b"Z" and int(fields[1]) == me:
            zombies.append((int(entry), head.partition(b"(")[2].decode(errors="replace")))
    return zombies


def _reap(pid: int) -> None:
    # Only children of this process can be reaped; for the others waitpid raises and there is nothing to do.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _kill_pids(pids: Sequence[int], timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; reaps those that are our children (no zombies)."""
    pids = sorted(set(pids))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while True:
        for pid in pids:
            _reap(pid)
        alive = [p for p in pids if _pid_alive(p)]
        if not alive:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    for pid in pids:
        _reap(pid)


def _prctl(option: int, arg: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if option == PR_GET_CHILD_SUBREAPER:
        value = ctypes.c_int(0)
        libc.prctl(option, ctypes.byref(value), 0, 0, 0)
        return value.value
    result: int = libc.prctl(option, arg, 0, 0, 0)  # restype c_int (ctypes' default): a Python int
    return result


class LocalSlurm:
    """munged + slurmctld + ``nodes`` slurmd named gpu1..gpuN, each with ``gpus_per_node`` fake GPUs.

    ``suspend_time`` is Slurm's SuspendTime (idle seconds before a node is powered down); ``None`` turns the
    automatic power-down off while keeping ``scontrol update nodename=... state=power_down`` and resume by job.
    ``accounting``: also start a private MariaDB and slurmdbd (docs/live-slurm.md §2.8) so ``sacct`` works.
    ``extra_partitions``: more partitions, name -> node list (e.g. ``{"long": "gpu3"}``), besides the default one.
    """

    def __init__(
        self,
        base_dir: str | Path,
        *,
        nodes: int = 3,
        gpus_per_node: int = 4,
        cpus_per_node: int = 8,
        memory_mib: int = 16000,
        gpu_type: str = "a100",
        suspend_time: int | None = 15,
        suspend_timeout: int = 5,
        resume_timeout: int = 90,
        start_timeout: float = 60.0,
        partition: str = "main",
        accounting: bool = False,
        extra_partitions: Mapping[str, str] | None = None,
    ):
        if nodes < 1 or gpus_per_node < 1:
            raise WattschedError("local Slurm: nodes and gpus_per_node must be at least 1")
        self.base = Path(base_dir).resolve()
        self.nodes = [f"gpu{i + 1}" for i in range(nodes)]
        self.gpus_per_node = gpus_per_node
        self.cpus_per_node = cpus_per_node
        self.memory_mib = memory_mib
        self.gpu_type = gpu_type
        self.suspend_time = suspend_time
        self.suspend_timeout = suspend_timeout
        self.resume_timeout = resume_timeout
        self.start_timeout = start_timeout
        self.partition = partition
        self.accounting = accounting
        self.extra_partitions = dict(extra_partitions or {})
        self.conf = self.base / "etc" / "slurm.conf"
        self.munge_socket = self.base / "munge" / "munge.socket"
        self.ctld_port = 0
        self.node_ports: dict[str, int] = {}
        self.dbd_port = 0
        self.mysql_dir = self.base / "mysql"  # accounting mode: MariaDB's datadir, socket and pid file
        self.mysql_socket = self.mysql_dir / "mysqld.sock"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._bins: dict[str, str] = {}
        self._subreaper_was = 1
        self._started = False
        self._testbed_pids: set[int] = set()  # pids seen in our pid files: their zombies are ours to reap

    # ---- availability -------------------------------------------------------------------------------------

    @staticmethod
    def available(accounting: bool = False) -> tuple[bool, str]:
        """(True, "") when this host can run a testbed (with ``accounting``: slurmdbd and MariaDB too), else
        (False, why) for a test skip."""
        if os.geteuid() != 0:
            return False, "local Slurm needs root (slurmd as SlurmdUser, mknod for fake GPUs, munged)"
        missing = [b for b in BINARIES if _which(b) is None]
        if missing:
            return False, (
                f"local Slurm: missing {', '.join(missing)}; install with "
                "`apt-get install --no-install-recommends munge slurm-wlm slurm-client` (.ci/run does this as root)"
            )
        try:
            pwd.getpwnam("munge")
        except KeyError:
            return False, "local Slurm: no 'munge' user (install the Debian 'munge' package)"
        missing = [b for b in ACCOUNTING_BINARIES if accounting and _which(b) is None]
        if missing:
            return False, (
                f"local Slurm accounting: missing {', '.join(missing)}; install with "
                "`apt-get install --no-install-recommends slurmdbd mariadb-server` (.ci/run does this as root)"
            )
        with tempfile.TemporaryDirectory(prefix="wattsched-mknod-") as tmp:
            try:
                os.mknod(os.path.join(tmp, "nvidia0"), 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, 0))
            except OSError as exc:
                return False, f"local Slurm: cannot create fake GPU devices (mknod: {exc.strerror})"
        return True, ""

    # ---- public surface -----------------------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client commands (and the jobs they submit) against this testbed."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        env[MARKER] = str(self.base)
        env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
        if self.accounting:
            env["MYSQL_UNIX_PORT"] = str(self.mysql_socket)  # slurmdbd's StorageHost=localhost connects here
        for key in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_", "SRUN_"))]:
            if key != "SLURM_CONF":
                del env[key]  # a job step's own variables would leak into our commands
        return env

    def set_agent_socket(self, socket_path: str | Path | None) -> None:
        """Have each job's prolog/epilog (run as root) call ``wattsched agent-job start|end --socket PATH`` (None:
        stop)."""
        path = self.base / AGENT_SOCKET_FILE
        if socket_path is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(f"{socket_path}\n")

    @property
    def jobs_dir(self) -> Path:
        """Working directory of commands run through :meth:`run`: batch jobs write slurm-<id>.out here."""
        return self.base / "jobs"

    def run(
        self, args: Sequence[str], *, check: bool = True, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command (argument list) against this testbed; raise on a non-zero exit."""
        args = [str(a) for a in args]
        self.reap()
        try:
            proc = subprocess.run(
                args, env=self.env, cwd=self.jobs_dir, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise WattschedError(
                f"local Slurm: '{shlex.join(args)}' timed out after {timeout:.0f} s\n{_tail(exc.stderr)}"
            ) from exc
        except FileNotFoundError as exc:
            raise WattschedError(f"local Slurm: '{args[0]}' not found ({exc})") from exc
        if check and proc.returncode != 0:
            raise WattschedError(
                f"local Slurm: '{shlex.join(args)}' failed (exit {proc.returncode})\n{_tail(proc.stderr)}"
            )
        return proc

    def json(self, args: Sequence[str]) -> dict[str, Any]:
        """Run a command that takes ``--json`` (sinfo, squeue, scontrol show) and parse its output."""
        args = [*args, "--json"] if "--json" not in args else list(args)
        out = self.run(args).stdout
        try:
            doc: dict[str, Any] = json.loads(out)  # the commands print one JSON object
        except json.JSONDecodeError as exc:
            raise WattschedError(
                f"local Slurm: '{shlex.join(args)}' printed no JSON: {_tail(out, 3)}"
            ) from exc
        return doc

    def node_states(self) -> dict[str, tuple[str, frozenset[str]]]:
        """{node: (state, state flags)} from ``sinfo --json``, e.g. ("idle", {"POWERED_DOWN"})."""
        nodes = self.json(["sinfo"]).get("nodes", [])
        return {
            n["name"]: (str(n.get("state", "")).lower(), frozenset(n.get("state_flags", []))) for n in nodes
        }

    def wait_idle(self, nodes: Sequence[str] | None = None, timeout: float | None = None) -> None:
        """Wait until the nodes are idle, responding, powered up and not in a transition."""
        names = list(nodes or self.nodes)
        busy_flags = {"POWERED_DOWN", "POWERING_DOWN", "POWERING_UP", "NOT_RESPONDING", "DRAIN", "COMPLETING"}

        def ready() -> bool:
            try:
                states = self.node_states()
            except WattschedError:
                return False
            return all(
                n in states and states[n][0] == "idle" and not (states[n][1] & busy_flags) for n in names
            )

        try:
            _wait_for(f"nodes {','.join(names)} to be idle", ready, timeout or self.start_timeout)
        except WattschedError as exc:
            raise WattschedError(f"{exc}\n{self.diagnostics()}") from None

    def diagnostics(self) -> str:
        """Node states and log tails, for error messages."""
        parts = []
        with contextlib.suppress(Exception):
            parts.append(
                "sinfo: " + self.run(["sinfo", "-N", "-h", "-o", "%N %T"], check=False).stdout.strip()
            )
        for log in sorted((self.base / "log").glob("*.log")):
            parts.append(f"--- {log.name}\n{_file_tail(log, 8)}")
        return "\n".join(parts)

    def cancel_all(self, timeout: float = 15.0) -> None:
        """Cancel every job and wait until none is left pending, running or completing (KillWait is 2 s)."""

        def queued() -> list[str]:
            return self.run(["squeue", "-h", "-o", "%i"], timeout=10).stdout.split()

        ids = queued()
        if ids:
            self.run(["scancel", *ids], check=False, timeout=10)
            _wait_for("cancelled jobs to end", lambda: not queued(), timeout, 0.2)

    def reap(self, everything: bool = False) -> None:
        """Reap the testbed's exited processes that were re-parented to us (we are their subreaper).

        An exited job step (slurmstepd double-forks away from slurmd) or srun helper (its step-watching child)
        has lost its environment, so the marker cannot tell it; it is known by its command name, which nothing
        run here in the background carries (:meth:`run` waits for its command). Reaping only collects an exit
        status: nothing is signalled here. ``everything``: reap every exited child (the CLI's supervisor, which
        has no other children)."""
        for pidfile in (self.base / "run").glob("slurmd-*.pid"):
            with contextlib.suppress(OSError, ValueError):
                self._testbed_pids.add(int(pidfile.read_text().split()[0]))
        with contextlib.suppress(OSError):
            self._testbed_pids |= {int(x) for x in (self.base / "run" / "suspended.pids").read_text().split()}
        popen = {p.pid for p in self._procs.values()}
        for proc in self._procs.values():
            proc.poll()
        for pid, comm in _zombie_children():
            if pid not in popen and (everything or comm in STEP_COMMANDS or pid in self._testbed_pids):
                _reap(pid)

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalSlurm:
        ok, why = self.available(self.accounting)
        if not ok:
            raise WattschedError(why)
        self._bins = {
            b: str(_which(b)) for b in (*BINARIES, *(ACCOUNTING_BINARIES if self.accounting else ()))
        }
        self._subreaper_was = _prctl(PR_GET_CHILD_SUBREAPER)
        # Daemons that the resume program detaches (and their zombies) are re-parented to us, not to PID 1,
        # which in containers often does not reap.
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        self._started = True
        try:
            self._write_files()
            self._start_munged()
            if self.accounting:
                self._start_mariadb()
                self._start_slurmdbd()
            self.start_slurmctld(wait=False)
            for node in self.nodes:
                self._start_slurmd(node)
            self.write_manifest()
            self.wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every testbed process (by PID) and reap them; safe to call twice."""
        if not self._started:
            return
        with contextlib.suppress(Exception):
            if self._procs.get("slurmctld") and self._procs["slurmctld"].poll() is None:
                # Cancelling first lets slurmd and slurmstepd end the jobs' processes themselves.
                self.cancel_all()
        teardown(self.base, extra_pids=[p.pid for p in self._procs.values()])
        for proc in self._procs.values():
            with contextlib.suppress(Exception):
                proc.wait(timeout=1)
        self.reap()
        self._procs.clear()
        (self.base / MANIFEST).unlink(missing_ok=True)
        if self.accounting:
            shutil.rmtree(
                self.mysql_dir, ignore_errors=True
            )  # the database: 100+ MB, and no use after the run
        if not self._subreaper_was:
            _prctl(PR_SET_CHILD_SUBREAPER, 0)
        self._started = False

    def stop_slurmctld(self, timeout: float = 15.0) -> None:
        """SIGTERM slurmctld (it saves its state to StateSaveLocation) and wait until it has exited."""
        proc = self._procs.pop("slurmctld", None)
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        # slurmscriptd is a fork of slurmctld; it exits with it, and any leftover is found by its marker.
        self.write_manifest()

    def start_slurmctld(self, *, wait: bool = True) -> None:
        """Start slurmctld (recovering the saved state, if any) and, with ``wait``, wait until nodes are idle."""
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            return
        self._procs["slurmctld"] = self._spawn(
            "slurmctld", [self._bins["slurmctld"], "-D", "-i", "-f", str(self.conf)]
        )
        _wait_for("slurmctld to answer", self._ctld_up, self.start_timeout, 0.1)
        if wait:
            self.write_manifest()
            self.wait_idle()

    # ---- manifest -----------------------------------------------------------------------------------------

    def write_manifest(self, supervisor: int | None = None) -> None:
        """``testbed.json``: the PIDs `stop DIR` needs (``supervisor``: the CLI's process that owns the daemons)."""
        if supervisor is None:
            with contextlib.suppress(OSError, ValueError):
                supervisor = json.loads((self.base / MANIFEST).read_text()).get("supervisor")
        data = {
            "base": str(self.base),
            "supervisor": supervisor,
            "slurm_conf": str(self.conf),
            "pids": {name: p.pid for name, p in self._procs.items() if p.poll() is None},
            "ports": {
                "slurmctld": self.ctld_port,
                **self.node_ports,
                **({"slurmdbd": self.dbd_port} if self.dbd_port else {}),
            },
        }
        (self.base / MANIFEST).write_text(json.dumps(data, indent=2) + "\n")

    # ---- internals ----------------------------------------------------------------------------------------

    def _ctld_up(self) -> bool:
        proc = self._procs.get("slurmctld")
        if proc is not None and proc.poll() is not None:
            raise WattschedError(
                f"local Slurm: slurmctld exited with {proc.returncode}\n"
                f"{_file_tail(self.base / 'log' / 'slurmctld.log')}\n{_file_tail(self.base / 'log' / 'slurmctld.out')}"
            )
        out = self.run(["scontrol", "ping"], check=False, timeout=10)
        return out.returncode == 0 and " is UP" in out.stdout

    def _spawn(self, name: str, args: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        env = self.env
        out = open(self.base / "log" / f"{name}.out", "ab")  # noqa: SIM115 (the child keeps the descriptor)
        try:
            # A new session: Ctrl-C in the terminal reaches the test runner, which then stops us in order.
            return subprocess.Popen(
                args, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, **kw
            )
        except OSError as exc:
            raise WattschedError(f"local Slurm: cannot start '{shlex.join(args)}': {exc}") from exc
        finally:
            out.close()

    def _write_files(self) -> None:
        base = self.base
        munge = pwd.getpwnam("munge")
        for sub in ("etc", "state", "run", "log", "dev", "bin", "jobs", "munge"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        if (base / MANIFEST).exists():
            raise WattschedError(
                f"local Slurm: {base} holds a testbed that was not stopped ({MANIFEST}); stop it first"
            )
        for node in self.nodes:
            (base / "spool" / node).mkdir(parents=True, exist_ok=True)
        # munged runs as the munge user: it must reach its directory, which must be private to it.
        base.chmod(0o755)
        for parent in base.parents:
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                raise WattschedError(
                    f"local Slurm: munged (user munge) cannot enter {parent}; use a directory under /tmp"
                )
        if len(str(self.munge_socket)) > 100:
            raise WattschedError(f"local Slurm: socket path too long for a unix socket: {self.munge_socket}")
        os.chown(base / "munge", munge.pw_uid, munge.pw_gid)
        (base / "munge").chmod(0o755)  # clients need to reach the socket
        key = base / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chown(key, munge.pw_uid, munge.pw_gid)
        key.chmod(0o400)
        # GRES File= must be character devices, or slurmd rejects them and CUDA_VISIBLE_DEVICES stays empty.
        for i in range(self.gpus_per_node):
            dev = base / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, i))

        self.ctld_port, *node_ports = _free_ports(1 + len(self.nodes) + self.accounting)
        if self.accounting:
            self.dbd_port = node_ports.pop()
        self.node_ports = dict(zip(self.nodes, node_ports, strict=True))
        fmt = {
            "conf": shlex.quote(str(self.conf)),
            "base": shlex.quote(str(base)),
            "marker": MARKER,
            "run": shlex.quote(str(base / "run")),
            "log": shlex.quote(str(base / "log" / "power.log")),
            "scontrol": self._bins["scontrol"],
            "setsid": self._bins["setsid"],
            "slurmd": self._bins["slurmd"],
            "wrapper": shlex.quote(str(base / "bin" / "nomask")),
            "python": sys.executable,
            "python_sh": shlex.quote(sys.executable),
            "agent_socket": shlex.quote(str(base / AGENT_SOCKET_FILE)),
            "pythonpath": shlex.quote(
                str(Path(wattsched.__file__).resolve().parents[1])
            ),  # this wattsched's src/
            "agent_log": shlex.quote(str(base / "log" / "agent-job.log")),
            "path": shlex.quote(f"{Path(self._bins['scontrol']).parent}:/usr/sbin:/usr/bin:/sbin:/bin"),
        }
        scripts = [("nomask", _WRAPPER), ("resume.sh", _RESUME), ("suspend.sh", _SUSPEND)]
        scripts += [("prolog.sh", _JOB_HOOK), ("epilog.sh", _JOB_HOOK)]
        for name, text in scripts:
            path = base / "bin" / name
            path.write_text(text.format(**fmt, phase="start" if name == "prolog.sh" else "end"))
            path.chmod(0o755)
        (base / "etc" / "slurm.conf").write_text(self._slurm_conf())
        last = self.gpus_per_node - 1
        files = f"{base}/dev/nvidia[0-{last}]" if last else f"{base}/dev/nvidia0"
        (base / "etc" / "gres.conf").write_text(
            f"NodeName={self._node_range()} Name=gpu Type={self.gpu_type} File={files}\n"
        )
        # No cgroup plugin is loaded (proctrack/linuxproc, task/none), so containers without cgroup v2
        # delegation work; the file only states that.
        (base / "etc" / "cgroup.conf").write_text(
            "# not used: ProctrackType=proctrack/linuxproc, TaskPlugin=task/none\n"
        )

    def _node_range(self) -> str:
        return f"gpu[1-{len(self.nodes)}]" if len(self.nodes) > 1 else "gpu1"

    def _slurm_conf(self) -> str:
        b = self.base
        # SuspendTime=NONE would also refuse `scontrol update state=power_down` in 22.05: "never" is a year.
        suspend = str(NEVER_S if self.suspend_time is None else int(self.suspend_time))
        lines = [
            "# Written by tests/slurm_testbed.py: a local test Slurm (docs/live-slurm.md §2).",
            f"ClusterName={CLUSTER}",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={b}/state",
            f"SlurmdSpoolDir={b}/spool/%n",
            f"SlurmctldPidFile={b}/run/slurmctld.pid",
            f"SlurmctldLogFile={b}/log/slurmctld.log",
            f"SlurmdPidFile={b}/run/slurmd-%n.pid",
            f"SlurmdLogFile={b}/log/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            *self._accounting_conf(),
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "SlurmdParameters=config_overrides",  # lets each node claim more CPUs than the host has
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            # Start released jobs at once (batch_sched_delay, 3 s by default) and run the backfill pass every
            # second (bf_interval, 30 s by default): after a slurmctld restart only backfill starts jobs released
            # onto nodes whose jobs ended while it was down, so the default left them pending for 30 s.
            "SchedulerParameters=batch_sched_delay=0,bf_interval=1",
            "PropagateResourceLimits=NONE",
            "KillWait=2",
            f"Prolog={b}/bin/prolog.sh",
            f"Epilog={b}/bin/epilog.sh",
            "PrologFlags=Alloc",  # without it a batch job's prolog runs only on its first node
            f"SuspendProgram={b}/bin/suspend.sh",
            f"ResumeProgram={b}/bin/resume.sh",
            f"SuspendTime={suspend}",
            f"SuspendTimeout={self.suspend_timeout}",
            f"ResumeTimeout={self.resume_timeout}",
            "SuspendRate=0",
            "ResumeRate=0",
            "DebugFlags=Power",
        ]
        for node in self.nodes:
            lines.append(
                f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={self.node_ports[node]} "
                f"CPUs={self.cpus_per_node} RealMemory={self.memory_mib} "
                f"Gres=gpu:{self.gpu_type}:{self.gpus_per_node}"
            )
        lines.append(
            f"PartitionName={self.partition} Nodes={self._node_range()} Default=YES MaxTime=INFINITE State=UP"
        )
        for name, nodes in self.extra_partitions.items():
            lines.append(f"PartitionName={name} Nodes={nodes} MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def _start_munged(self) -> None:
        d = self.base / "munge"
        args = [
            self._bins["munged"],
            "--foreground",
            f"--socket={self.munge_socket}",
            f"--key-file={d / 'munge.key'}",
            f"--pid-file={d / 'munged.pid'}",
            f"--log-file={d / 'munged.log'}",
            f"--seed-file={d / 'munged.seed'}",
        ]
        proc = self._spawn("munged", args, user="munge", group="munge", extra_groups=[])
        self._procs["munged"] = proc

        def up() -> bool:
            if proc.poll() is not None:
                raise WattschedError(
                    f"local Slurm: munged exited with {proc.returncode}: {shlex.join(args)}\n"
                    f"{_file_tail(d / 'munged.log')}\n{_file_tail(self.base / 'log' / 'munged.out')}"
                )
            return self.munge_socket.exists()

        _wait_for("munged's socket", up, 20, 0.05)

    def _accounting_conf(self) -> list[str]:
        if not self.accounting:
            return ["JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none"]
        return [
            # jobacct_gather/linux reads /proc (no cgroups needed); it samples the steps every 30 s by default.
            "JobAcctGatherType=jobacct_gather/linux",
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={self.dbd_port}",
            # The munge socket for slurmdbd connections: AuthInfo is not used for them, and without this the
            # clients (sacct, sacctmgr) and slurmctld ask the host's default munge socket.
            f"AccountingStoragePass={self.munge_socket}",
            # GPUs are not accounted unless named: AllocTRES then carries gres/gpu=N (and the typed count).
            f"AccountingStorageTRES=gres/gpu,gres/gpu:{self.gpu_type}",
        ]

    def _slurmdbd_conf(self, password: str) -> str:
        b = self.base
        return (
            "\n".join(
                [
                    "# Written by tests/slurm_testbed.py: the local test Slurm's accounting (docs/live-slurm.md §2.8).",
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    "DbdHost=localhost",
                    "DbdAddr=127.0.0.1",
                    f"DbdPort={self.dbd_port}",
                    "SlurmUser=root",
                    "DebugLevel=info",
                    f"LogFile={b}/log/slurmdbd.log",
                    f"PidFile={b}/run/slurmdbd.pid",
                    "StorageType=accounting_storage/mysql",
                    # localhost: the client library takes the unix socket named by MYSQL_UNIX_PORT (see _spawn).
                    "StorageHost=localhost",
                    "StorageLoc=slurm_acct_db",
                    "StorageUser=slurm",
                    f"StoragePass={password}",
                ]
            )
            + "\n"
        )

    def _mariadb(self, sql: str) -> None:
        """Run SQL as MariaDB's root (unix-socket authentication: we are root)."""
        args = [
            self._bins["mariadb"],
            "--no-defaults",
            f"--socket={self.mysql_socket}",
            "-u",
            "root",
            "-e",
            sql,
        ]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=30)
        if proc.returncode:
            raise WattschedError(f"local Slurm: MariaDB refused '{sql}': {_tail(proc.stderr, 3)}")

    def _start_mariadb(self) -> None:
        """A private MariaDB: its own datadir, a unix socket under the base dir and no TCP (skip-networking)."""
        d = self.mysql_dir
        if len(str(self.mysql_socket)) > 100:
            raise WattschedError(f"local Slurm: socket path too long for a unix socket: {self.mysql_socket}")
        user = "mysql"
        try:
            owner = pwd.getpwnam(user)
        except KeyError:
            user, owner = "root", pwd.getpwnam("root")  # mariadbd runs as root only when told --user=root
        shutil.rmtree(d, ignore_errors=True)  # a datadir left by a killed run would be reused half-made
        d.mkdir()
        os.chown(d, owner.pw_uid, owner.pw_gid)
        d.chmod(0o755)  # clients (slurmdbd, root) reach the socket
        # Small redo log and buffer pool: the defaults (96 MiB, 128 MiB) only cost disk and memory here.
        sizing = [
            "--innodb-log-file-size=64M",
            "--innodb-buffer-pool-size=128M",
            "--innodb-lock-wait-timeout=900",
        ]
        install = [
            self._bins["mariadb-install-db"],
            "--no-defaults",
            f"--user={user}",
            f"--datadir={d / 'data'}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
            *sizing,
        ]
        proc = subprocess.run(install, capture_output=True, text=True, timeout=120, env=self.env)
        if proc.returncode:
            raise WattschedError(
                f"local Slurm: '{shlex.join(install)}' failed ({proc.returncode}): {_tail(proc.stdout + proc.stderr)}"
            )
        args = [
            self._bins["mariadbd"],
            "--no-defaults",
            f"--user={user}",
            f"--datadir={d / 'data'}",
            f"--socket={self.mysql_socket}",
            f"--pid-file={d / 'mariadbd.pid'}",
            f"--log-error={d / 'mariadbd.log'}",
            "--skip-networking",
            *sizing,
        ]
        proc_db = self._procs["mariadbd"] = self._spawn("mariadbd", args)

        def up() -> bool:
            if proc_db.poll() is not None:
                raise WattschedError(
                    f"local Slurm: mariadbd exited with {proc_db.returncode}: {shlex.join(args)}\n"
                    f"{_file_tail(d / 'mariadbd.log')}"
                )
            return self.mysql_socket.exists()

        _wait_for("mariadbd's socket", up, 60, 0.1)
        password = secrets.token_hex(16)
        self._mariadb(
            "CREATE DATABASE slurm_acct_db; "
            f"CREATE USER 'slurm'@'localhost' IDENTIFIED BY '{password}'; "
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
        )
        conf = self.base / "etc" / "slurmdbd.conf"
        conf.write_text(self._slurmdbd_conf(password))
        os.chown(
            conf, 0, 0
        )  # slurmdbd refuses a file not owned by its SlurmUser (root) or readable by others
        conf.chmod(0o600)

    def _start_slurmdbd(self) -> None:
        """slurmdbd (it creates its tables on first start), then the cluster, an account and root's association.

        The cluster is registered before slurmctld starts, so slurmctld finds it and sends its nodes' TRES."""
        args = [self._bins["slurmdbd"], "-D"]
        proc = self._procs["slurmdbd"] = self._spawn("slurmdbd", args)

        def up() -> bool:
            if proc.poll() is not None:
                raise WattschedError(
                    f"local Slurm: slurmdbd exited with {proc.returncode}\n"
                    f"{_file_tail(self.base / 'log' / 'slurmdbd.log')}\n"
                    f"{_file_tail(self.base / 'log' / 'slurmdbd.out')}"
                )
            return (
                self.run(["sacctmgr", "-n", "-P", "show", "cluster"], check=False, timeout=10).returncode == 0
            )

        _wait_for("slurmdbd to answer", up, self.start_timeout, 0.2)
        self.run(["sacctmgr", "-i", "add", "cluster", CLUSTER])
        self.run(
            ["sacctmgr", "-i", "add", "account", ACCOUNT, f"cluster={CLUSTER}", "description=wattsched tests"]
        )
        self.run(["sacctmgr", "-i", "add", "user", "root", f"account={ACCOUNT}", f"cluster={CLUSTER}"])
        # sacctmgr made root's default account "root" with the cluster: charge the tests' jobs to ours instead.
        self.run(["sacctmgr", "-i", "modify", "user", "root", "set", f"defaultaccount={ACCOUNT}"])

    def _start_slurmd(self, node: str) -> None:
        args = [self._bins["slurmd"], "-D", "-N", node, "-f", str(self.conf)]
        self._procs[f"slurmd-{node}"] = self._spawn(f"slurmd-{node}", args)


def teardown(base: str | Path, extra_pids: Sequence[int] = ()) -> list[int]:
    """Stop every process of the testbed in ``base``; returns the PIDs signalled.

    Sources, all by PID: ``extra_pids`` (processes we started), the manifest, the pid files under run/ and
    munge/, and every process whose environment carries the marker (slurmstepd, job processes, slurmscriptd,
    slurmd started by the resume program). A PID from a file is used only if it still carries the marker, so a
    reused PID is never signalled."""
    base = Path(base).resolve()
    marker = f"{MARKER}={base}".encode()
    candidates: set[int] = set(extra_pids)
    with contextlib.suppress(OSError, ValueError):
        candidates |= {int(p) for p in json.loads((base / MANIFEST).read_text()).get("pids", {}).values()}
    for pidfile in [
        *(base / "run").glob("*.pid"),
        base / "munge" / "munged.pid",
        base / "mysql" / "mariadbd.pid",
    ]:
        with contextlib.suppress(OSError, ValueError):
            candidates.add(int(pidfile.read_text().split()[0]))
    own = set(extra_pids)
    # Two sweeps: a slurmd may fork a slurmstepd between the first listing and its death.
    signalled: list[int] = []
    for _ in range(2):
        pids = {p for p in candidates if p in own or _has_marker(p, marker)} | set(_marked_pids(marker))
        pids |= _descendants(pids)
        pids.discard(os.getpid())
        pids = {p for p in pids if _pid_alive(p)}
        if not pids:
            break
        _kill_pids(sorted(pids))
        signalled.extend(sorted(pids))
        candidates = set()
    # Daemons stopped by suspend.sh during the run are our zombies (we are their subreaper): reap them.
    with contextlib.suppress(OSError):
        for line in (base / "run" / "suspended.pids").read_text().split():
            with contextlib.suppress(ValueError):
                _reap(int(line))
    for pid in own:
        _reap(pid)
    return signalled


def _supervise(slurm: LocalSlurm) -> int:
    """`start DIR`: fork a supervisor that owns the daemons, reaps them and tears them down on SIGTERM.

    Without it the daemons would be orphaned to PID 1, which in containers often reaps nothing. The parent
    waits until the testbed is up (or failed), prints what a person needs and exits."""
    read_end, write_end = os.pipe()
    if os.fork():
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            report = pipe.read()
        ok = report.startswith("ok\n")
        print(
            report[3:] if ok else report.rstrip() or "error: the testbed supervisor died while starting",
            end="",
        )
        if not ok:
            print(file=sys.stderr)
        return 0 if ok else 1
    # Supervisor: its own session, so closing the terminal does not stop the testbed.
    os.close(read_end)
    os.setsid()
    code = 1
    try:
        slurm.base.mkdir(parents=True, exist_ok=True)
        (slurm.base / "log").mkdir(exist_ok=True)
        with open(os.devnull, "rb") as null, open(slurm.base / "log" / "supervisor.out", "ab") as log:
            os.dup2(null.fileno(), 0)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        stopping = False

        def on_signal(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)
        try:
            slurm.start()
            slurm.write_manifest(supervisor=os.getpid())
            lines = [f"supervisor pid {os.getpid()} (stop: python -m tests.slurm_testbed stop DIR)"]
            lines += [f"{name} pid {proc.pid}" for name, proc in slurm._procs.items()]
            lines += [
                f"manifest: {slurm.base / MANIFEST}",
                f"export SLURM_CONF={shlex.quote(str(slurm.conf))}",
            ]
            os.write(write_end, ("ok\n" + "\n".join(lines) + "\n").encode())
        except Exception as exc:
            os.write(write_end, f"error: {exc}\n".encode())
            raise
        finally:
            os.close(write_end)
        while not stopping:
            slurm.reap(everything=True)
            time.sleep(1.0)
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            slurm.stop()
            time.sleep(0.2)  # the last orphans of killed job shells arrive just after
            slurm.reap(everything=True)
        os._exit(code)


def _stop_dir(base: Path, timeout: float = 30.0) -> list[int]:
    """`stop DIR`: SIGTERM the supervisor (it tears down in order), then sweep whatever is left by PID."""
    if not base.is_dir():
        raise WattschedError(f"{base} is not a directory; nothing to stop")
    try:
        manifest = json.loads((base / MANIFEST).read_text())
    except (OSError, ValueError):
        manifest = {}  # stopped already, or never started: still sweep the pid files and the marker
    supervisor = manifest.get("supervisor")
    signalled = []
    if supervisor and _pid_alive(supervisor) and _is_supervisor(supervisor, base):
        os.kill(supervisor, signal.SIGTERM)
        signalled.append(supervisor)
        with contextlib.suppress(WattschedError):
            _wait_for(
                f"supervisor {supervisor} to stop the testbed", lambda: not _pid_alive(supervisor), timeout
            )
    signalled += teardown(base)
    (base / MANIFEST).unlink(missing_ok=True)
    shutil.rmtree(base / "mysql", ignore_errors=True)  # accounting mode's database, if the supervisor left it
    return signalled


def _is_supervisor(pid: int, base: Path) -> bool:
    # The supervisor is a python running this module's `start` for this base dir (guards against PID reuse).
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"start" in argv and any(
        Path(a.decode(errors="replace")).resolve() == base.resolve() for a in argv if a
    )


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.slurm_testbed",
        description="Start or stop a local test Slurm (munge, slurmctld, slurmd with fake GPUs) in DIR.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    start = sub.add_parser("start", help="start a testbed in DIR (created if missing) and leave it running")
    start.add_argument("dir")
    start.add_argument("--nodes", type=int, default=3)
    start.add_argument("--gpus", type=int, default=4, help="fake GPUs per node")
    start.add_argument(
        "--suspend-time", type=int, default=15, help="idle seconds before power-down; -1: never"
    )
    start.add_argument(
        "--accounting", action="store_true", help="also start slurmdbd on a private MariaDB, so sacct works"
    )
    stop = sub.add_parser("stop", help="stop the testbed in DIR (by the PIDs in its manifest and pid files)")
    stop.add_argument("dir")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "start":
            ok, why = LocalSlurm.available(args.accounting)
            if not ok:
                raise WattschedError(why)
            slurm = LocalSlurm(
                args.dir,
                accounting=args.accounting,
                nodes=args.nodes,
                gpus_per_node=args.gpus,
                suspend_time=None if args.suspend_time < 0 else args.suspend_time,
            )
            if (slurm.base / MANIFEST).exists():
                raise WattschedError(f"{slurm.base} holds a running testbed ({MANIFEST}); stop it first")
            return _supervise(slurm)
        pids = _stop_dir(Path(args.dir))
        print(f"stopped {len(pids)} processes" + (f": {' '.join(map(str, pids))}" if pids else ""))
        return 0
    except WattschedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(_main())
