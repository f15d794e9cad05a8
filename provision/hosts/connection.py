"""One connection model for Ansible and for every session of ours: user, port, key, known_hosts, jump host,
become, timeouts — read once from the spec, so the playbooks and the burn-in's probes and agents reach a host
the same way (a spec behind a bastion that only Ansible honoured never got its burn-in connected).

Paths take ``~`` and are relative to the spec's folder, as every other file the spec names. ``become`` runs a
command through ``sudo``: non-interactively (``sudo -n``), or with the spec's become password fed on stdin
(``sudo -S``) — never on a command line, never logged.
"""

from __future__ import annotations

import contextlib
import random
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.spec import LoadedSpec

#: Where the jump host's master connection listens (ssh expands ``~``; %C keeps the path short and per host).
JUMP_CONTROL_DIR = "~/.ssh/provision"
#: How long an idle master outlives its last client: a controller killed mid-play leaves it at most this long.
JUMP_PERSIST_S = 60
#: Tries at opening the master (a bastion's MaxStartups drops handshakes at random), with backoff.
JUMP_ATTEMPTS = 4


@dataclass(frozen=True)
class JumpHost:
    host: str
    port: int = 22
    user: str | None = None

    def __str__(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"


def parse_jump_host(text: str) -> JumpHost:
    """``[user@]host[:port]``, as ``ssh -J`` takes it."""
    user, _, rest = text.rpartition("@")
    host, _, port = rest.partition(":")
    return JumpHost(host, int(port) if port else 22, user or None)


@dataclass(frozen=True)
class ConnectionModel:
    transport: str
    user: str
    port: int
    key_file: Path | None
    known_hosts: Path | None
    jump: JumpHost | None
    become: bool
    timeout_s: int

    def ssh_args(self) -> str:
        """``ansible_ssh_common_args``: host keys checked against the spec's known_hosts, the jump host — reached
        through the one master connection to it (:func:`jump_master`) when one is open, so Ansible's forks cost
        the bastion no handshake each (its MaxStartups drops them past ten at once by default)."""
        options = ["-o StrictHostKeyChecking=yes"]
        if self.known_hosts:
            options.append(f"-o UserKnownHostsFile={self.known_hosts}")
        if self.jump:
            # ssh expands %-tokens in a ProxyCommand: %%C reaches the jump's ssh as its own %C
            proxy = " ".join(["ssh", "-W", "%h:%p", *self.jump_options(token="%%C"), self.jump_destination()])
            options.append(f"-o ProxyCommand='{proxy}'")
        return " ".join(options)

    def jump_destination(self) -> str:
        assert self.jump is not None
        return f"{self.jump.user or self.user}@{self.jump.host}"

    def jump_options(self, *, token: str = "%C") -> list[str]:
        """ssh's options for the jump host: its port, its key checked against the same known_hosts, our key,
        and the control socket its master connection listens on (``ControlMaster=auto``: a client when the
        master is up, a connection of its own when not)."""
        assert self.jump is not None
        return ["-p", str(self.jump.port), "-o", "StrictHostKeyChecking=yes",
                *(["-o", f"UserKnownHostsFile={self.known_hosts}"] if self.known_hosts else []),
                *(["-i", str(self.key_file)] if self.key_file else []),
                "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.timeout_s}",
                "-o", "ControlMaster=auto", "-o", f"ControlPath={JUMP_CONTROL_DIR}/jump-{token}"]

    def ansible_vars(self, address: str) -> dict[str, Any]:
        variables: dict[str, Any] = {"ansible_host": address, "ansible_connection": "ssh",
                                     "ansible_user": self.user, "ansible_port": self.port,
                                     "ansible_become": self.become, "ansible_become_method": "sudo",
                                     "ansible_timeout": self.timeout_s, "ansible_ssh_common_args": self.ssh_args()}
        if self.key_file:
            variables["ansible_ssh_private_key_file"] = str(self.key_file)
        return variables


def _path(value: Path | None, spec_dir: Path) -> Path | None:
    if value is None:
        return None
    expanded = value.expanduser()
    return expanded if expanded.is_absolute() else (spec_dir / expanded).resolve()


def connection_model(loaded: LoadedSpec) -> ConnectionModel:
    connection = loaded.spec.connection
    spec_dir = loaded.path.resolve().parent
    return ConnectionModel(
        transport=connection.transport, user=connection.user, port=connection.port,
        key_file=_path(connection.key_file, spec_dir), known_hosts=_path(connection.known_hosts, spec_dir),
        jump=parse_jump_host(connection.jump_host) if connection.jump_host else None,
        become=connection.become, timeout_s=connection.timeout_s)


@contextlib.contextmanager
def jump_master(model: ConnectionModel) -> Iterator[bool]:
    """One master connection to the jump host for a play: every host's ProxyCommand (``ControlMaster=auto``)
    becomes a channel of it, not a handshake of its own at the bastion. Opened before the play, tried again if
    the bastion drops it, closed after; if it cannot be opened the play still runs, each ProxyCommand then
    connecting by itself (and Ansible retrying a dropped one). Yields whether the master is up."""
    if model.jump is None:
        yield False
        return
    Path(JUMP_CONTROL_DIR).expanduser().mkdir(mode=0o700, parents=True, exist_ok=True)
    options, destination = model.jump_options(), model.jump_destination()
    up = False
    for attempt in range(1, JUMP_ATTEMPTS + 1):
        try:
            opened = subprocess.run(["ssh", *options, "-o", f"ControlPersist={JUMP_PERSIST_S}", "-M", "-N", "-f",
                                     destination], capture_output=True, text=True, timeout=model.timeout_s + 10,
                                    stdin=subprocess.DEVNULL)
            up = opened.returncode == 0
        except subprocess.TimeoutExpired:
            up = False
        if up or attempt == JUMP_ATTEMPTS:
            break
        time.sleep(0.5 * 2 ** (attempt - 1) * (1 + random.random()))
    try:
        yield up
    finally:
        if up:
            subprocess.run(["ssh", *options, "-O", "exit", destination], capture_output=True, timeout=30,
                           stdin=subprocess.DEVNULL)
