"""Who may change GPU settings through the node agent: a Unix socket and the peer's kernel credentials.

Reads (``/metrics``, ``GET /gpus``, ``GET /windows``) are open to anyone over TCP. Changes (``POST``/``DELETE``:
power limits, locked clocks, the job hooks) are answered only on the agent's Unix domain socket (default
``/run/wattsched/agent.sock``), which is created ``0660`` and owned by root (or the agent's user) and one group,
so that other local users cannot even connect; and every change is then checked against the connecting process's
credentials as the kernel reports them (``SO_PEERCRED``, plus ``SO_PEERGROUPS`` for its supplementary groups):
root, the agent's own user, and the users and groups given with ``--allow-user``/``--allow-group`` may change,
anyone else gets 403 (docs/agent.md §3).
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import socket
import stat
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from .nvml import AgentError

DEFAULT_SOCKET = "/run/wattsched/agent.sock"
SOCKET_ENV = "WATTSCHED_AGENT_SOCKET"
SOCKET_MODE = 0o660
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux >= 4.13; Python names it from 3.13 on
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class PeerCredentials:
    """The process at the other end of a Unix socket, as the kernel saw it when it connected."""

    pid: int
    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    def describe(self) -> str:
        return f"uid {self.uid} ({user_name(self.uid)}), pid {self.pid}"


def peer_credentials(sock: socket.socket) -> PeerCredentials:
    """``SO_PEERCRED`` of a connected Unix stream socket, with ``SO_PEERGROUPS`` where the kernel has it."""
    pid, uid, gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    groups: tuple[int, ...] = ()
    with contextlib.suppress(OSError):  # an older kernel: the primary group only
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 4 * 256)
        groups = struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4])
    return PeerCredentials(pid, uid, gid, tuple(groups))


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def resolve_user(name: str) -> int:
    """A user name (or a numeric uid) as a uid; an unknown name is an error naming it."""
    if name.isdigit():
        return int(name)
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        raise AgentError(f"--allow-user {name}: no such user on this node", 400) from None


def resolve_group(name: str, option: str = "--allow-group") -> int:
    if name.isdigit():
        return int(name)
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise AgentError(f"{option} {name}: no such group on this node", 400) from None


@dataclass(frozen=True)
class WriteAccess:
    """The uids and gids whose processes may change GPU settings; a peer qualifies by its uid, its primary gid or
    one of its supplementary groups."""

    uids: frozenset[int]
    gids: frozenset[int] = frozenset()

    @classmethod
    def from_names(
        cls, users: Iterable[str] = (), groups: Iterable[str] = (), own_uid: int | None = None
    ) -> WriteAccess:
        """Root and the agent's own user always, plus the named users and groups."""
        own = os.geteuid() if own_uid is None else own_uid
        uids = {0, own, *(resolve_user(u) for u in users)}
        return cls(frozenset(uids), frozenset(resolve_group(g) for g in groups))

    def allows(self, peer: PeerCredentials) -> bool:
        return peer.uid in self.uids or bool(self.gids & {peer.gid, *peer.groups})

    def check(self, peer: PeerCredentials, action: str) -> None:
        """Raise a 403 ``AgentError`` unless `peer` may do `action`."""
        if not self.allows(peer):
            raise AgentError(
                f"{action} refused: {user_name(peer.uid)} (uid {peer.uid}) may not change GPU settings; "
                f"allowed: {self.describe()} (wattsched agent --allow-user/--allow-group)",
                403,
            )

    def describe(self) -> str:
        names = [user_name(uid) for uid in sorted(self.uids)]
        names += [f"group {group_name(gid)}" for gid in sorted(self.gids)]
        return ", ".join(names)


def default_socket_group(users: Iterable[str], groups: Iterable[str]) -> int:
    """The group the socket belongs to when ``--socket-group`` is not given: the first ``--allow-group``, else
    the primary group of the first ``--allow-user``, else the agent's own group (so only its user and root)."""
    for group in groups:
        return resolve_group(group)
    for user in users:
        uid = resolve_user(user)
        try:
            return pwd.getpwuid(uid).pw_gid
        except KeyError:
            break
    return os.getegid()


def bind_private_socket(sock: socket.socket, path: str, gid: int, mode: int = SOCKET_MODE) -> None:
    """Bind `sock` at `path` with `mode`, owned by the agent's user and group `gid`, before it listens (so no one
    can connect before the permissions are set). Creates a missing parent directory 0755; replaces a stale socket
    nobody answers on; refuses a path where another agent answers or that is not a socket."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, mode=0o755, exist_ok=True)
        _bind(sock, path, mode)
    except PermissionError as exc:
        raise AgentError(
            f"cannot create the agent's socket {path}: {exc.strerror} (run the agent as root, or give --socket "
            "a path in a directory you may write)",
            403,
        ) from None
    try:
        os.chown(path, -1, gid)
        os.chmod(path, mode)
    except OSError as exc:
        os.unlink(path)
        raise AgentError(
            f"cannot give {path} group {group_name(gid)} and mode {mode:o}: {exc.strerror}", 403
        ) from None


def _bind(sock: socket.socket, path: str, mode: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise AgentError(f"{path} exists and is not a socket; remove it or give another --socket", 400)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(path)
            except OSError as exc:
                if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                    raise
            else:
                raise AgentError(f"another agent is already listening on {path}", 409)
        os.unlink(path)  # stale: left by an agent that was killed
    previous = os.umask(0o777 & ~mode)  # the socket file is born with `mode` at most
    try:
        sock.bind(path)
    finally:
        os.umask(previous)


def socket_summary(path: str) -> str:
    """e.g. ``srw-rw---- root:slurm``: the socket's mode and owner as ``ls -l`` shows them."""
    info = os.stat(path)
    return f"{stat.filemode(info.st_mode)} {user_name(info.st_uid)}:{group_name(info.st_gid)}"
