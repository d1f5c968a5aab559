"""Who may change GPU settings through the node agent (agent/auth.py, docs/agent.md §3).

The check itself (``WriteAccess``, ``SO_PEERCRED``, the socket's mode and owner) is tested as any user. The tests
marked ``as_root`` create a throwaway system account (``useradd --system``, removed afterwards), start
``wattsched agent --nvml fake`` with a state file, and act as that account from a forked child (``setuid``): refused
with the fake GPUs' settings unchanged, while root and an ``--allow-user`` succeed and metrics stay readable.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.agent_fixtures import running_agent, start_agent_process
from wattsched.agent import auth
from wattsched.agent.auth import PeerCredentials, WriteAccess, bind_private_socket, peer_credentials
from wattsched.agent.client import AgentClient, AgentRequestError
from wattsched.agent.fake_nvml import FakeNvml, read_state_file
from wattsched.agent.nvml import AgentError
from wattsched.cli import agent as agent_cli
from wattsched.cli.main import app

# -- the check -------------------------------------------------------------------------------------------------


def test_write_access_by_uid_primary_group_and_supplementary_groups() -> None:
    access = WriteAccess(frozenset({0, 64030}), frozenset({990}))
    assert access.allows(PeerCredentials(pid=1, uid=0, gid=0))
    assert access.allows(PeerCredentials(pid=1, uid=64030, gid=64030))
    assert access.allows(PeerCredentials(pid=1, uid=1001, gid=990))  # primary group
    assert access.allows(PeerCredentials(pid=1, uid=1001, gid=1001, groups=(27, 990)))  # supplementary
    assert not access.allows(PeerCredentials(pid=1, uid=1001, gid=1001, groups=(1001, 27)))
    assert not WriteAccess(frozenset()).allows(PeerCredentials(pid=1, uid=0, gid=0))  # nothing implicit here


def test_from_names_always_allows_root_and_the_agents_own_user() -> None:
    assert WriteAccess.from_names(own_uid=0) == WriteAccess(frozenset({0}))
    access = WriteAccess.from_names(["1234", "root"], ["0"], own_uid=4321)
    assert access.uids == {0, 1234, 4321} and access.gids == {0}
    with pytest.raises(AgentError, match="--allow-user no-such-user-x7: no such user on this node"):
        WriteAccess.from_names(["no-such-user-x7"])
    with pytest.raises(AgentError, match="--allow-group no-such-group-x7: no such group on this node"):
        WriteAccess.from_names([], ["no-such-group-x7"])


def test_a_refusal_is_a_403_naming_the_caller_and_who_may() -> None:
    access = WriteAccess(frozenset({0}), frozenset({0}))
    with pytest.raises(AgentError) as refused:
        access.check(PeerCredentials(pid=7, uid=4242, gid=4242), "POST /gpus/0/power-limit")
    assert refused.value.status == 403
    assert str(refused.value) == (
        "POST /gpus/0/power-limit refused: 4242 (uid 4242) may not change GPU settings; "
        "allowed: root, group root (wattsched agent --allow-user/--allow-group)"
    )
    access.check(PeerCredentials(pid=7, uid=0, gid=0), "POST /gpus/0/power-limit")  # no exception


def test_peer_credentials_are_the_kernels() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        peer = peer_credentials(left)
    assert (peer.pid, peer.uid, peer.gid) == (os.getpid(), os.geteuid(), os.getegid())
    assert set(os.getgroups()) <= set(peer.groups) | {os.getegid()}


def test_default_socket_group() -> None:
    me = pwd.getpwuid(os.geteuid())
    assert auth.default_socket_group([], []) == os.getegid()
    assert auth.default_socket_group([me.pw_name], []) == me.pw_gid
    assert auth.default_socket_group([me.pw_name], [str(os.getegid())]) == os.getegid()


def test_the_cli_and_the_agent_agree_on_the_default_socket() -> None:
    assert agent_cli.DEFAULT_SOCKET == auth.DEFAULT_SOCKET and agent_cli.SOCKET_ENV == auth.SOCKET_ENV


# -- the socket file -------------------------------------------------------------------------------------------


def test_socket_is_0660_with_its_group_and_stale_ones_are_replaced(tmp_path: Path) -> None:
    path = str(tmp_path / "run" / "agent.sock")  # the directory is created
    with socket.socket(socket.AF_UNIX) as first:
        bind_private_socket(first, path, os.getegid())
        info = os.stat(path)
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o660
        assert (info.st_uid, info.st_gid) == (os.geteuid(), os.getegid())
        assert stat.S_IMODE(os.stat(tmp_path / "run").st_mode) == 0o755
        first.listen()
        with socket.socket(socket.AF_UNIX) as second, pytest.raises(AgentError, match="already listening"):
            bind_private_socket(second, path, os.getegid())  # a live agent's socket is left alone
    with socket.socket(socket.AF_UNIX) as third:  # the first closed without removing it: stale, replaced
        bind_private_socket(third, path, os.getegid())
    os.unlink(path)
    Path(path).write_text("not a socket")
    with (
        socket.socket(socket.AF_UNIX) as fourth,
        pytest.raises(AgentError, match="exists and is not a socket"),
    ):
        bind_private_socket(fourth, path, os.getegid())


def test_a_caller_the_agent_does_not_allow_is_refused_with_nothing_changed() -> None:
    """The peer check on its own, as any user: an agent that allows nobody (not even its own user) refuses."""
    nvml = FakeNvml(gpu_count=2)
    with running_agent(nvml, access=WriteAccess(frozenset())) as (client, agent):
        for change in (
            lambda: client.set_power_limit(0, 200),
            lambda: client.lock_clocks(1, 900, 1200),
            lambda: client.reset(0),
            lambda: client.job_started("9", [0]),
            lambda: client.job_ended("9"),
        ):
            with pytest.raises(AgentRequestError) as refused:
                change()
            assert refused.value.status == 403 and "may not change GPU settings" in str(refused.value)
            assert "Traceback" not in str(refused.value)
        assert client.state()["gpus"][0]["power_limit_w"] == 400.0  # reads on the socket are fine
        assert "DCGM_FI_DEV_POWER_USAGE" in client.metrics()
        assert agent.changed == {} and agent.jobs.job_gpus == {}
    assert nvml.calls == [] and [g.power_limit_mw for g in nvml.gpus] == [400_000, 400_000]


# -- a real unprivileged user against the agent process (root only) --------------------------------------------

as_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("userdel"),
    reason="needs root and useradd/userdel: creates a throwaway system user to act as an unprivileged caller",
)


@pytest.fixture(scope="module")
def throwaway_user() -> Iterator[pwd.struct_passwd]:
    """A fresh system account with its own group, no home and no login; deleted (with its group) afterwards."""
    name = f"wattsched-test-{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)  # fmt: skip
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)
        with contextlib.suppress(KeyError):
            grp.getgrnam(name)
            subprocess.run(["groupdel", name], check=False, capture_output=True)


def as_user(user: pwd.struct_passwd, action: Callable[[], Any]) -> dict[str, Any]:
    """Run `action` in a forked child that has dropped to `user` (uid, gid, no supplementary groups); its result
    ``{"ok": value}`` or the exception it raised ``{"error", "status"}``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            try:
                answer: dict[str, Any] = {"ok": action(), "uid": os.getuid()}
            except Exception as exc:
                answer = {"error": str(exc), "status": getattr(exc, "status", None), "uid": os.getuid()}
            payload = json.dumps(answer).encode()
        except BaseException:
            payload, code = json.dumps({"child failed": traceback.format_exc()}).encode(), 1
        with open(write_end, "wb") as out:
            out.write(payload)
        os._exit(code)
    os.close(write_end)
    with open(read_end, "rb") as stream:
        payload = stream.read()
    _, status = os.waitpid(pid, 0)
    answer = json.loads(payload)
    assert os.waitstatus_to_exitcode(status) == 0 and answer["uid"] == user.pw_uid, answer
    return answer


@dataclass
class AgentRun:
    state_file: Path
    tcp: AgentClient
    sock: AgentClient
    socket_line: str  # the agent's line about its socket: path, mode, owner, who may change
    final: list[tuple[int, Any]] | None = None  # the fake GPUs' settings after the agent stopped


@contextlib.contextmanager
def agent_process(*options: str) -> Iterator[AgentRun]:
    """`wattsched agent --nvml fake` (2 GPUs at a preset 300 W, a state file) with `options`, its socket in a
    0755 directory like /run/wattsched, so that only the socket's own mode keeps anyone out; stopped by SIGTERM."""
    with tempfile.TemporaryDirectory(prefix="wattsched-auth-") as tmp:
        os.chmod(tmp, 0o755)
        state_file = Path(tmp) / "fake-nvml.json"
        preset = {"gpus": [{"power_limit_mw": 300_000, "locked_clocks_mhz": None}] * 2, "deny_set": False}
        state_file.write_text(json.dumps(preset))
        process, port, socket_line = start_agent_process(state_file, *options)
        socket_path = str(Path(tmp) / "agent.sock")
        run = AgentRun(
            state_file, AgentClient("127.0.0.1", port), AgentClient(socket_path=socket_path), socket_line
        )
        try:
            yield run
        finally:
            process.terminate()
            _out, err = process.communicate(timeout=15)
            run.final = _settings(state_file)
        assert process.returncode == 0 and "Traceback" not in err, err


def _settings(state_file: Path) -> list[tuple[int, Any]]:
    return [(gpu["power_limit_mw"], gpu["locked_clocks_mhz"]) for gpu in read_state_file(state_file)["gpus"]]


def _agent_job(socket_path: str, phase: str) -> str:
    """`wattsched agent-job PHASE` as the prolog runs it; its exit code must be 0 whatever happens."""
    env = {"SLURM_JOB_ID": "31", "SLURM_JOB_GPUS": "0,1"}
    comment = ["--comment", "wattsched-gpu:power_limit_fraction=0.5"] if phase == "start" else []
    result = CliRunner().invoke(app, ["agent-job", phase, "--socket", socket_path, *comment], env=env)
    assert result.exit_code == 0, result.output
    return result.output


@as_root
def test_an_unprivileged_user_cannot_connect_but_reads_metrics(throwaway_user: pwd.struct_passwd) -> None:
    with agent_process() as run:
        state_file, tcp, sock = run.state_file, run.tcp, run.sock
        assert "(srw-rw---- root:root) from root" in run.socket_line
        before = _settings(state_file)
        path = str(sock.socket_path)
        for change in (
            lambda: AgentClient(socket_path=path).set_power_limit(0, 150),
            lambda: AgentClient(socket_path=path).lock_clocks(1, 600, 900),
            lambda: AgentClient(socket_path=path).reset(0),
            lambda: AgentClient(socket_path=path).job_started("31", [0]),
        ):
            answer = as_user(throwaway_user, change)
            assert answer["status"] == 403, answer
            assert answer["error"] == (
                f"agent at {path}: permission denied: only root and the users the agent allows may change GPU "
                "settings (docs/agent.md §3)"
            )
        # and over TCP, which anyone may reach: refused by the agent, pointing at the socket
        answer = as_user(throwaway_user, lambda: tcp.set_power_limit(0, 150))
        assert answer["status"] == 403 and f"only over the agent's Unix socket {path}" in answer["error"]
        # the prolog command as that user: one error line, exit 0, nothing changed
        output = as_user(throwaway_user, lambda: _agent_job(path, "start"))["ok"]
        assert "permission denied" in output and "Traceback" not in output
        assert _settings(state_file) == before == [(300_000, None), (300_000, None)]
        # reads stay open to the unprivileged user
        metrics = as_user(throwaway_user, tcp.metrics)["ok"]
        assert "DCGM_FI_DEV_POWER_MGMT_LIMIT{Hostname=" in metrics and "} 300.0" in metrics
        assert as_user(throwaway_user, tcp.state)["ok"]["gpus"][0]["power_limit_w"] == 300.0
        # root changes
        assert sock.set_power_limit(0, 150)["power_limit_w"] == 150.0
        assert _settings(state_file)[0] == (150_000, None)
        assert "GPU 0: power limit 200 W" in _agent_job(path, "start")
        assert "GPU 1: reset" in _agent_job(path, "end")
    assert run.final == before  # restored on SIGTERM


@as_root
def test_a_member_of_the_socket_group_is_refused_by_the_peer_check(throwaway_user: pwd.struct_passwd) -> None:
    group = grp.getgrgid(throwaway_user.pw_gid).gr_name
    with agent_process("--socket-group", group) as run:
        state_file, sock = run.state_file, run.sock
        assert f"(srw-rw---- root:{group}) from root" in run.socket_line  # it may connect, not change
        before = _settings(state_file)
        path = str(sock.socket_path)
        answer = as_user(throwaway_user, lambda: AgentClient(socket_path=path).set_power_limit(0, 150))
        assert answer["status"] == 403
        assert answer["error"] == (
            f"agent at {path}: POST /gpus/0/power-limit refused: {throwaway_user.pw_name} "
            f"(uid {throwaway_user.pw_uid}) may not change GPU settings; allowed: root "
            "(wattsched agent --allow-user/--allow-group)"
        )
        answer = as_user(throwaway_user, lambda: AgentClient(socket_path=path).job_started("31", [0]))
        assert answer["status"] == 403 and "POST /jobs/31/start refused" in answer["error"]
        assert as_user(throwaway_user, lambda: AgentClient(socket_path=path).gpu_state(0))["ok"]["index"] == 0
        assert _settings(state_file) == before
        with pytest.raises(AgentRequestError, match="job 31 is not being measured"):
            sock.job_ended("31")  # the refused job start left no measurement behind


@pytest.mark.parametrize("how", ["--allow-user", "--allow-group"])
@as_root
def test_an_allowed_user_changes_settings(throwaway_user: pwd.struct_passwd, how: str) -> None:
    name = throwaway_user.pw_name if how == "--allow-user" else grp.getgrgid(throwaway_user.pw_gid).gr_name
    with agent_process(how, name) as run:
        state_file, sock = run.state_file, run.sock
        allowed = f"root, {name}" if how == "--allow-user" else f"root, group {name}"
        group = grp.getgrgid(throwaway_user.pw_gid).gr_name  # the socket's group by default: the user's own
        assert f"(srw-rw---- root:{group}) from {allowed}" in run.socket_line
        path = str(sock.socket_path)
        answer = as_user(throwaway_user, lambda: AgentClient(socket_path=path).set_power_limit(1, 250))
        assert answer["ok"]["power_limit_w"] == 250.0, answer
        assert _settings(state_file) == [(300_000, None), (250_000, None)]
        output = as_user(throwaway_user, lambda: _agent_job(path, "start"))["ok"]
        assert "GPU 0: power limit 200 W" in output and "error" not in output
        assert _settings(state_file) == [(200_000, None), (200_000, None)]
    assert run.final == [(300_000, None), (300_000, None)]  # restored on SIGTERM


@as_root
def test_an_agent_that_may_not_create_its_socket_says_so_in_one_line(
    throwaway_user: pwd.struct_passwd,
) -> None:
    path = f"/run/wattsched-test-{secrets.token_hex(3)}/agent.sock"  # /run is root's

    def bind() -> None:
        with socket.socket(socket.AF_UNIX) as sock:
            bind_private_socket(sock, path, os.getegid())

    answer = as_user(throwaway_user, bind)
    assert answer["status"] == 403 and not os.path.exists(os.path.dirname(path))
    assert answer["error"] == (
        f"cannot create the agent's socket {path}: Permission denied (run the agent as root, or give --socket a "
        "path in a directory you may write)"
    )


def test_the_agent_cli_refuses_a_bad_socket_or_name_in_one_line(tmp_path: Path) -> None:
    not_a_socket = tmp_path / "agent.sock"
    not_a_socket.write_text("")
    base = ["agent", "--nvml", "fake", "--port", "0"]
    cases = [
        (
            ["--socket", str(not_a_socket)],
            f"{not_a_socket} exists and is not a socket; remove it or give another",
        ),
        (
            ["--socket", str(tmp_path / "s"), "--allow-user", "no-such-user-x7"],
            "--allow-user no-such-user-x7: no",
        ),
        (
            ["--socket", str(tmp_path / "s"), "--socket-group", "no-such-group-x7"],
            "--socket-group no-such-group-x7",
        ),
    ]
    for options, expected in cases:
        result = CliRunner().invoke(app, [*base, *options])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert result.output.startswith("error: ") and expected in " ".join(result.output.split()), (
            result.output
        )
    assert not (tmp_path / "s").exists()
