"""One connection model for Ansible and for every session of ours: user, port, key, known_hosts, jump host,
become, timeouts — read once from the spec, so the playbooks and the burn-in's probes and agents reach a host
the same way (a spec behind a bastion that only Ansible honoured never got its burn-in connected).

Paths take ``~`` and are relative to the spec's folder, as every other file the spec names. ``become`` runs a
command through ``sudo``: non-interactively (``sudo -n``), or with the spec's become password fed on stdin
(``sudo -S``) — never on a command line, never logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.spec import LoadedSpec


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
        """``ansible_ssh_common_args``: host keys checked against the spec's known_hosts, the jump host."""
        options = ["-o StrictHostKeyChecking=yes"]
        if self.known_hosts:
            options.append(f"-o UserKnownHostsFile={self.known_hosts}")
        if self.jump:
            # the jump host's key is checked against the same known_hosts
            proxy = (f"ssh -W %h:%p -p {self.jump.port} -o StrictHostKeyChecking=yes"
                     + (f" -o UserKnownHostsFile={self.known_hosts}" if self.known_hosts else "")
                     + (f" -i {self.key_file}" if self.key_file else "")
                     + f" {self.jump.user + '@' if self.jump.user else self.user + '@'}{self.jump.host}")
            options.append(f"-o ProxyCommand='{proxy}'")
        return " ".join(options)

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


