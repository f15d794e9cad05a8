"""Read-only access to a host: run a command, read a file, list device links.

"Ansible changes, fabric observes": configuration goes through playbooks, while
fact collection and test launches go through one session per host, either over
SSH (fabric on paramiko, host keys checked) or the local transport. The local
transport is how the simulated cluster is reached; what makes a session point
at a simulated host is the same pair of inventory variables the playbooks get
(``hw_root`` and ``provision_environment``), so nothing here knows about the
simulator.
"""

from __future__ import annotations

import contextlib
import io
import random
import shlex
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from provision.facts.session import CommandResult as CommandResult
from provision.facts.session import HostSession as HostSession
from provision.facts.session import LocalSession as LocalSession
from provision.facts.session import ReadFailed as ReadFailed
from provision.facts.session import become_argv, refused_by_sudo
from provision.hosts import inventory
from provision.hosts.connection import ConnectionModel, connection_model
from provision.spec import LoadedSpec
from provision.spec.secrets import resolve as resolve_secret
from provision.spec.semantics import ResolvedNode

#: Tries at opening a command's channel: sshd refuses one past its MaxSessions while it closes finished ones.
CHANNEL_ATTEMPTS = 3
#: SSH handshakes in flight from this controller at once, all hosts together. sshd (a bastion first of all: every
#: node's connection starts as one there) drops unauthenticated connections at random past MaxStartups' first
#: figure (10 by default): a delivery's worth at once would lose healthy nodes to the drop.
HANDSHAKES_AT_ONCE = 8
#: Tries at connecting before the node is called unreachable, with backoff: a connection sshd dropped (MaxStartups,
#: a restart, a full accept queue) is ours to try again, not the node's fault.
CONNECT_ATTEMPTS = 4
CONNECT_BACKOFF_S = 0.5
_HANDSHAKES = threading.BoundedSemaphore(HANDSHAKES_AT_ONCE)
#: What a dropped or refused connection looks like from paramiko; an authentication or host-key refusal is not.
_DROPPED = ("Error reading SSH protocol banner", "Connection reset", "EOF", "Unable to connect",
            "Connection refused", "Broken pipe", "SSH session not active")  # a silent host's timeout is not retried


def open_connection(connection: Any, *, keep_gateway: bool = False) -> None:
    """Open ``connection`` (and its jump host's) within :data:`HANDSHAKES_AT_ONCE` and :data:`CONNECT_ATTEMPTS`:
    a drop is retried after a growing, jittered pause; a refused key or host key fails at once. ``keep_gateway``:
    the jump connection is shared, so a failed attempt leaves it open."""
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        try:
            with _HANDSHAKES:
                connection.open()
            return
        except Exception as error:
            said = f"{type(error).__name__}: {error}"
            if attempt == CONNECT_ATTEMPTS or not any(mark.lower() in said.lower() for mark in _DROPPED):
                raise
            with contextlib.suppress(Exception):
                close_connection(connection, keep_gateway=keep_gateway)
            time.sleep(CONNECT_BACKOFF_S * 2 ** (attempt - 1) * (1 + random.random()))


class SshSession:
    """One SSH connection per host (fabric on paramiko), shared by every command of a check run, through the
    spec's jump host when it names one.

    Host keys are checked against the known_hosts the spec names (or the user's), the jump host's too: an
    unknown key is refused, never added. ``become`` runs a command through sudo (``-n``, or ``-S`` with the
    become password on stdin); sudo's refusal comes back as ``needs root: <what sudo said>``.
    """

    def __init__(self, host: str, address: str, model: ConnectionModel, *, root: str = "/",
                 environment: Mapping[str, str] | None = None, become_password: str | None = None,
                 gateway: Any = None) -> None:
        """``gateway``: an open connection to the jump host shared with other sessions (a campaign's pool), which
        this session then tunnels through and leaves open; without it the session has a jump connection of its
        own."""
        self.host = host
        self.user = model.user
        self.root = root.rstrip("/")
        self.environment = dict(environment or {})
        self.become_password = become_password
        self.become_enabled = model.become
        self.owns_gateway = gateway is None
        if gateway is None and model.jump:
            gateway = jump_connection(model)
        self.connection = _connection(address, model.user, model.port, model, gateway=gateway)
        # now, once: the checks then share it from several threads
        open_connection(self.connection, keep_gateway=not self.owns_gateway)

    def run(self, argv: Sequence[str], timeout_s: float, *, become: bool = False) -> CommandResult:
        started = time.monotonic()
        prefix = ["env", *(f"{name}={value}" for name, value in self.environment.items())] \
            if self.environment else []
        command = [*prefix, *argv]
        stdin: Any = False
        escalate = become and self.user != "root" and self.become_enabled
        if escalate:
            command = become_argv(command, with_password=self.become_password is not None)
            stdin = io.StringIO(self.become_password + "\n") if self.become_password is not None else False
        for attempt in range(CHANNEL_ATTEMPTS):
            try:
                if stdin is not False:
                    stdin.seek(0)
                result = self.connection.run(shlex.join(command), hide=True, warn=True, timeout=timeout_s,
                                             in_stream=stdin)
                break
            except Exception as error:
                if type(error).__name__ == "ChannelException" and attempt + 1 < CHANNEL_ATTEMPTS:
                    time.sleep(0.2 * (attempt + 1))  # sshd refused a channel (MaxSessions): ours, try again
                    continue
                timed_out = "timed out" in str(error).lower() or type(error).__name__ == "CommandTimedOut"
                return CommandResult(tuple(argv), 255, "", f"{type(error).__name__}: {error}",
                                     time.monotonic() - started, timed_out=timed_out, lost=not timed_out)
        refusal = None
        if become and result.exited != 0 and self.user != "root":
            lines = (result.stderr.strip() or result.stdout.strip()).splitlines()
            refusal = refused_by_sudo(result.stderr) if escalate else (
                f"connection.become is off and {self.user} is not root: {lines[-1] if lines else 'refused'}")
        # paramiko's -1: the channel closed with no exit status, the connection gone under the command (ours)
        return CommandResult(tuple(argv), result.exited, result.stdout, result.stderr, time.monotonic() - started,
                             refused_root=refusal or "", lost=result.exited == -1)

    def read_text(self, path: str) -> str | None:
        result = self.run(["cat", "--", self.root + path], 30)
        if result.ok:
            return result.stdout
        if result.rc == 1 and result.stderr.strip().endswith(("No such file or directory", "Not a directory")):
            return None
        raise ReadFailed(f"could not read {path}: {result.problem()}", lost=result.lost)

    def resolve_links(self, directory: str) -> dict[str, str]:
        script = (f'for d in {shlex.quote(self.root + directory)}/*; do '
                  'printf "%s %s\\n" "${d##*/}" "$(readlink -f "$d")"; done')
        result = self.run(["sh", "-c", script], 30)
        if not result.ok:
            raise ReadFailed(f"could not list {directory}: {result.problem()}", lost=result.lost)
        pairs = (line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
        return {name: "/" + target[len(self.root):].lstrip("/") for name, target in pairs
                if not name.startswith("*")}

    def close(self) -> None:
        close_connection(self.connection, keep_gateway=not self.owns_gateway)


def jump_connection(model: ConnectionModel) -> Any:
    """A connection to the spec's jump host (not opened yet)."""
    assert model.jump is not None
    return _connection(model.jump.host, model.jump.user or model.user, model.jump.port, model)


def close_connection(connection: Any, *, keep_gateway: bool = False) -> None:
    """A fabric connection and the connection to its jump host, unless that one is shared (``keep_gateway``)."""
    connection.close()
    if not keep_gateway and getattr(connection, "gateway", None) is not None and hasattr(connection.gateway, "close"):
        connection.gateway.close()


def _connection(address: str, user: str, port: int, model: ConnectionModel, *, gateway: Any = None) -> Any:
    """A fabric Connection that refuses unknown host keys (checked against the spec's known_hosts)."""
    import paramiko
    from fabric import Connection

    connect_kwargs: dict[str, Any] = {"banner_timeout": model.timeout_s}
    if model.key_file:
        connect_kwargs["key_filename"] = str(model.key_file)
    connection = Connection(address, user=user, port=port, connect_kwargs=connect_kwargs,
                            connect_timeout=model.timeout_s, gateway=gateway)
    client = connection.client
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    if model.known_hosts:
        client.load_host_keys(str(model.known_hosts))
    else:
        client.load_system_host_keys()
    return connection


class SessionPool:
    """One SSH connection per host for a whole burn-in campaign: every probe, runtime check, launch and pair round
    of every stage goes over it, so a delivery costs the bastion one handshake per host, not one per host per
    launch (a stage makes one to six launches, isolation more). A connection that failed under a command is
    dropped and the next use opens a new one; the pool closes them all when the campaign ends."""

    def __init__(self) -> None:
        self._sessions: dict[str, HostSession] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._gateway_lock = threading.Lock()
        self._gateways: dict[tuple[str, int, str], Any] = {}
        self.opened = 0  # connections opened, reopenings included
        self.gateways_opened = 0

    def gateway(self, model: ConnectionModel) -> Any:
        """The campaign's one connection to the jump host: every node's session is a channel through it, so the
        bastion sees one handshake for the whole delivery instead of one per node (sshd's MaxSessions does not
        count tunnelled channels). Opened (again, if it dropped) under the handshake bound and its retries."""
        assert model.jump is not None
        key = (model.jump.host, model.jump.port, model.jump.user or model.user)
        with self._gateway_lock:
            gateway = self._gateways.get(key)
            if gateway is None or not gateway.is_connected:
                gateway = jump_connection(model)
                open_connection(gateway)
                lock, opened = threading.Lock(), gateway.open

                def open_once() -> None:  # nodes' connections open it too (fabric): one at a time, no-op if open
                    with lock:
                        opened()

                gateway.open = open_once
                self._gateways[key] = gateway
                self.gateways_opened += 1
        return gateway

    def get(self, host: str, opener: Callable[[], HostSession]) -> HostSession:
        with self._guard:
            lock = self._locks.setdefault(host, threading.Lock())
        with lock:  # one opening per host at a time: two stages' threads never race to open the same host
            session = self._sessions.get(host)
            if session is None:
                session = opener()
                self.opened += 1
                self._sessions[host] = session
        return _Pooled(self, host, session)

    def drop(self, host: str, session: HostSession) -> None:
        with self._guard:
            if self._sessions.get(host) is session:
                del self._sessions[host]
            else:
                return
        with contextlib.suppress(Exception):
            session.close()

    def close(self) -> None:
        with self._guard:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            with contextlib.suppress(Exception):
                session.close()
        with self._gateway_lock:
            gateways, self._gateways = list(self._gateways.values()), {}
        for gateway in gateways:
            with contextlib.suppress(Exception):
                gateway.close()


class _Pooled:
    """A pool's session as its users see it: ``close`` leaves the connection to the pool, and a command whose
    connection failed retires it so the next user connects afresh."""

    def __init__(self, pool: SessionPool, host: str, session: HostSession) -> None:
        self.pool, self.host, self.session = pool, host, session

    def run(self, argv: Sequence[str], timeout_s: float, *, become: bool = False) -> CommandResult:
        result = self.session.run(argv, timeout_s, become=become)
        if result.lost:
            self.pool.drop(self.host, self.session)
        return result

    def read_text(self, path: str) -> str | None:
        try:
            return self.session.read_text(path)
        except ReadFailed as failed:
            self._retire_if_lost(failed)
            raise

    def resolve_links(self, directory: str) -> dict[str, str]:
        try:
            return self.session.resolve_links(directory)
        except ReadFailed as failed:
            self._retire_if_lost(failed)
            raise

    def _retire_if_lost(self, failed: ReadFailed) -> None:
        if failed.lost:
            self.pool.drop(self.host, self.session)

    def close(self) -> None:
        return None


_POOLS: dict[str, SessionPool] = {}
_POOLS_GUARD = threading.Lock()


@contextlib.contextmanager
def shared_sessions(state_dir: Path) -> Iterator[SessionPool]:
    """Within this block, :func:`open_session` for the cluster at ``state_dir`` hands out pooled sessions (SSH
    only: a local session has no connection to keep). The burn-in campaign runs inside one."""
    key = str(state_dir.resolve())
    pool = SessionPool()
    with _POOLS_GUARD:
        outer = _POOLS.get(key)
        if outer is None:
            _POOLS[key] = pool
    try:
        yield outer or pool
    finally:
        if outer is None:
            with _POOLS_GUARD:
                _POOLS.pop(key, None)
            pool.close()


def open_session(loaded: LoadedSpec, node: ResolvedNode, state_dir: Path, *,
                 become_password: str | None = None) -> HostSession:
    """The session the inventory describes for ``node``: the one switch between real and simulated hosts; inside
    :func:`shared_sessions`, the campaign's one connection to the host."""
    variables = inventory.host_vars(loaded, node, state_dir)
    with _POOLS_GUARD:
        pool = _POOLS.get(str(state_dir.resolve()))
    if pool is None or variables.get("ansible_connection") == "local" or become_password is not None:
        return _open_session(loaded, node, state_dir, variables, become_password=become_password)
    return pool.get(node.name, lambda: _open_session(loaded, node, state_dir, variables, pool=pool))


def _open_session(loaded: LoadedSpec, node: ResolvedNode, state_dir: Path, variables: dict[str, Any], *,
                  become_password: str | None = None, pool: SessionPool | None = None) -> HostSession:
    root, environment = variables.get("hw_root") or "/", variables.get("provision_environment")
    if variables.get("ansible_connection") == "local":
        return LocalSession(node.name, Path(root), environment)
    connection = loaded.spec.connection
    if become_password is None and connection.become and connection.become_password is not None:
        become_password = resolve_secret(connection.become_password, what="connection.become_password",
                                         spec_dir=loaded.path.parent)  # at the moment of use, never kept
    model = connection_model(loaded)
    gateway = pool.gateway(model) if pool is not None and model.jump else None
    return SshSession(node.name, node.address, model, root=root, environment=environment,
                      become_password=become_password, gateway=gateway)
