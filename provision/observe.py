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
import dataclasses
import io
import os
import random
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from provision import inventory
from provision.connection import ConnectionModel, become_argv, connection_model, refused_by_sudo
from provision.secrets import resolve as resolve_secret
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    refused_root: str = ""  # sudo's refusal, or why the command could not run as root

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def problem(self) -> str:
        """One line saying why the command's output cannot be trusted; ``needs root: <what sudo said>`` when
        the privilege was refused, so exactly the checks that needed it say why."""
        if self.refused_root:
            return f"needs root: {self.refused_root}"
        command = shlex.join(self.argv)
        if self.timed_out:
            return f"{command} timed out after {self.seconds:.0f} s"
        detail = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return f"{command} exited {self.rc}" + (f": {detail[-1]}" if detail else "")


class HostSession(Protocol):
    host: str

    def run(self, argv: Sequence[str], timeout_s: float, *, become: bool = False) -> CommandResult: ...

    def read_text(self, path: str) -> str | None: ...

    def resolve_links(self, directory: str) -> dict[str, str]: ...

    def close(self) -> None: ...


class LocalSession:
    """Commands run as child processes of the controller; paths are read under ``root``."""

    def __init__(self, host: str, root: Path = Path("/"), environment: Mapping[str, str] | None = None) -> None:
        self.host = host
        self.root = root
        self.environment = {**os.environ, **(environment or {})}

    def _path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def run(self, argv: Sequence[str], timeout_s: float, *, become: bool = False) -> CommandResult:
        if become and os.geteuid() != 0:  # the controller's own user: sudo, never waiting for a password
            result = self._run(become_argv(list(argv), with_password=False), timeout_s)
            refusal = refused_by_sudo(result.stderr) if not result.ok else None
            return dataclasses.replace(result, argv=tuple(argv), refused_root=refusal or "")
        return self._run(argv, timeout_s)

    def _run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        started = time.monotonic()
        try:
            process = subprocess.Popen(list(argv), env=self.environment, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, start_new_session=True)
        except OSError as error:
            return CommandResult(tuple(argv), 127, "", str(error), time.monotonic() - started)
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            stdout, stderr = process.communicate()
            return CommandResult(tuple(argv), -9, stdout, stderr, time.monotonic() - started, timed_out=True)
        return CommandResult(tuple(argv), process.returncode, stdout, stderr, time.monotonic() - started)

    def read_text(self, path: str) -> str | None:
        try:
            return self._path(path).read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def resolve_links(self, directory: str) -> dict[str, str]:
        base = self._path(directory)
        if not base.is_dir():
            return {}
        root = os.path.realpath(self.root)
        resolved = {}
        for name in sorted(os.listdir(base)):
            target = os.path.realpath(base / name)
            resolved[name] = "/" + os.path.relpath(target, root)
        return resolved

    def close(self) -> None:
        return None


def _kill_group(process: subprocess.Popen[str]) -> None:
    """A timed-out probe leaves nothing behind: its whole process group goes."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


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


def open_connection(connection: Any) -> None:
    """Open ``connection`` (and its jump host's) within :data:`HANDSHAKES_AT_ONCE` and :data:`CONNECT_ATTEMPTS`:
    a drop is retried after a growing, jittered pause; a refused key or host key fails at once."""
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
                close_connection(connection)
            time.sleep(CONNECT_BACKOFF_S * 2 ** (attempt - 1) * (1 + random.random()))


class SshSession:
    """One SSH connection per host (fabric on paramiko), shared by every command of a check run, through the
    spec's jump host when it names one.

    Host keys are checked against the known_hosts the spec names (or the user's), the jump host's too: an
    unknown key is refused, never added. ``become`` runs a command through sudo (``-n``, or ``-S`` with the
    become password on stdin); sudo's refusal comes back as ``needs root: <what sudo said>``.
    """

    def __init__(self, host: str, address: str, model: ConnectionModel, *, root: str = "/",
                 environment: Mapping[str, str] | None = None, become_password: str | None = None) -> None:
        self.host = host
        self.user = model.user
        self.root = root.rstrip("/")
        self.environment = dict(environment or {})
        self.become_password = become_password
        self.become_enabled = model.become
        gateway = _connection(model.jump.host, model.jump.user or model.user, model.jump.port, model) \
            if model.jump else None
        self.connection = _connection(address, model.user, model.port, model, gateway=gateway)
        open_connection(self.connection)  # now, once: the checks then share it from several threads

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
                                     time.monotonic() - started, timed_out=timed_out)
        refusal = None
        if become and result.exited != 0 and self.user != "root":
            lines = (result.stderr.strip() or result.stdout.strip()).splitlines()
            refusal = refused_by_sudo(result.stderr) if escalate else (
                f"connection.become is off and {self.user} is not root: {lines[-1] if lines else 'refused'}")
        return CommandResult(tuple(argv), result.exited, result.stdout, result.stderr, time.monotonic() - started,
                             refused_root=refusal or "")

    def read_text(self, path: str) -> str | None:
        result = self.run(["cat", "--", self.root + path], 30)
        return result.stdout if result.ok else None

    def resolve_links(self, directory: str) -> dict[str, str]:
        script = (f'for d in {shlex.quote(self.root + directory)}/*; do '
                  'printf "%s %s\\n" "${d##*/}" "$(readlink -f "$d")"; done')
        result = self.run(["sh", "-c", script], 30)
        pairs = (line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
        return {name: "/" + target[len(self.root):].lstrip("/") for name, target in pairs
                if not name.startswith("*")}

    def close(self) -> None:
        close_connection(self.connection)


def close_connection(connection: Any) -> None:
    """A fabric connection and the connection to its jump host, when it has one of its own."""
    connection.close()
    if getattr(connection, "gateway", None) is not None and hasattr(connection.gateway, "close"):
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


def open_session(loaded: LoadedSpec, node: ResolvedNode, state_dir: Path, *,
                 become_password: str | None = None) -> HostSession:
    """The session the inventory describes for ``node``: the one switch between real and simulated hosts."""
    variables = inventory.host_vars(loaded, node, state_dir)
    root, environment = variables.get("hw_root") or "/", variables.get("provision_environment")
    if variables.get("ansible_connection") == "local":
        return LocalSession(node.name, Path(root), environment)
    connection = loaded.spec.connection
    if become_password is None and connection.become and connection.become_password is not None:
        become_password = resolve_secret(connection.become_password, what="connection.become_password",
                                         spec_dir=loaded.path.parent)  # at the moment of use, never kept
    return SshSession(node.name, node.address, connection_model(loaded), root=root, environment=environment,
                      become_password=become_password)
