"""OpenSSH servers on loopback for the real-transport tests: one sshd per simulated host, a dedicated login user.

Host keys are generated and written to a known_hosts the tests hand to Ansible and paramiko, so host key
checking stays on. How each sshd is started (plainly, or inside a host's namespace) is the test's business:
this module only writes what it needs and says how to run it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

USER = "provision-test"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def run(*command: str, input_text: str | None = None) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=60, input=input_text).stdout


def ensure_user() -> None:
    """The login user, made once: under a lock, as the two workers of ``make test`` may both ask at once."""
    with open("/tmp/provision-test-login-user.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if subprocess.run(["id", USER], capture_output=True).returncode != 0:
            run("useradd", "-m", "-s", "/bin/sh", USER)
            run("usermod", "-p", "*", USER)  # locked for passwords, but key logins work with UsePAM no


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def wait_listening(address: str, port: int, deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex((address, port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"sshd did not listen on {address}:{port}")


@dataclass
class LoopbackSshd:
    """Keys, configs and known_hosts for one sshd per host under ``work``; all on one port."""

    work: Path
    addresses: dict[str, str]
    port: int = 0
    known: list[str] = field(default_factory=list)
    max_startups: str | None = None  # None: sshd's default, as a bastion has it
    #: Per host, where one sshd (a bastion) is stricter than the others.
    max_startups_at: dict[str, str] = field(default_factory=dict)
    #: Hosts whose sshd logs every accepted login to ``sshd_<host>.log`` (see :meth:`logins`).
    logged: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        ensure_user()
        os.makedirs("/run/sshd", exist_ok=True)
        self.work.chmod(0o755)
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.client_key))
        authorized = self.work / "authorized_keys"
        authorized.write_text((self.work / "client.pub").read_text())
        authorized.chmod(0o644)
        self.port = self.port or free_port(next(iter(self.addresses.values())))

    @property
    def client_key(self) -> Path:
        return self.work / "client"

    @property
    def known_hosts(self) -> Path:
        return self.work / "known_hosts"

    def command(self, host: str) -> list[str]:
        """The sshd command line for ``host``; its host key goes into known_hosts."""
        address = self.addresses[host]
        key = self.work / f"host_{host}"
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        config = self.work / f"sshd_{host}"
        config.write_text("\n".join([
            f"ListenAddress {address}:{self.port}", f"HostKey {key}",
            f"AuthorizedKeysFile {self.work / 'authorized_keys'}", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "PidFile none",
            *([f"MaxStartups {limit}"] if (limit := self.max_startups_at.get(host, self.max_startups))
              else []),  # else sshd's 10:30:100
            # as every distribution's sshd_config has it: Ansible's file transfers then take sftp, as they do on a
            # real host, not the "piped" fallback (scp speaks sftp too since OpenSSH 9)
            "Subsystem sftp internal-sftp",
            f"AllowUsers {USER}", f"LogLevel {'INFO' if host in self.logged else 'ERROR'}"]) + "\n")
        kind, public, *_ = (self.work / f"host_{host}.pub").read_text().split(" ")
        self.known.append(f"[{address}]:{self.port} {kind} {public}")
        self.known_hosts.write_text("\n".join(self.known) + "\n")
        log = ["-E", str(self.work / f"sshd_{host}.log")] if host in self.logged else ["-e"]
        return [SSHD, "-D", *log, "-f", str(config)]

    def logins(self, host: str) -> int:
        """Logins ``host``'s sshd accepted so far (a handshake each): the load a bastion sees from us."""
        path = self.work / f"sshd_{host}.log"
        return path.read_text().count("Accepted publickey") if path.exists() else 0

    def connection(self, *, forks: int, become_password_env: str | None = None) -> dict[str, object]:
        """The spec's ``connection:`` section for these hosts: root through sudo with the password the variable
        holds, when given, else no privilege at all."""
        section: dict[str, object] = {
            "transport": "ssh", "user": USER, "port": self.port, "key_file": str(self.client_key),
            "known_hosts": str(self.known_hosts), "become": become_password_env is not None, "forks": forks,
            "timeout_s": 20}
        if become_password_env is not None:
            section["become_password"] = {"env": become_password_env}
        return section


@contextlib.contextmanager
def login_user_sudo(password: str, sudoers: Path = Path("/etc/sudoers.d/provision-test")) -> Iterator[None]:
    """For the block, this machine's login user becomes root through sudo with ``password``, as on hosts where
    sudo is not passwordless (hosts presented on a prefix are this machine's tools: its sudoers is theirs); the
    password is locked again after it."""
    subprocess.run(["chpasswd"], input=f"{USER}:{password}\n", text=True, check=True, timeout=30)
    sudoers.write_text(f"{USER} ALL=(ALL) ALL\n")
    sudoers.chmod(0o440)
    try:
        yield
    finally:
        sudoers.unlink(missing_ok=True)
        run("usermod", "-p", "*", USER)


def start_all(servers: LoopbackSshd, addresses: dict[str, str], daemons: list[subprocess.Popen[bytes]]) -> None:
    """One plain sshd per host (appended to ``daemons`` as each starts, for the caller to stop), each listening
    before the next starts."""
    for host, address in addresses.items():
        daemons.append(subprocess.Popen(servers.command(host), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        wait_listening(address, servers.port)


def hand_to_login_user(state: Path, hosts: list[str]) -> None:
    """Build the simulated hosts, then give them to the login user, who changes them over SSH (the folders above
    them must let that user through)."""
    from tests.simhelpers import SimHost

    for directory in (state.parent, state):
        directory.chmod(0o755)
    for host in hosts:
        SimHost(state, host)
    run("chown", "-R", f"{USER}:{USER}", str(state / "sim"))


def grant_sudo(state: Path, hosts: list[str], password: str) -> None:
    """Inside each simulated host (its own /etc, seen only in its namespace): the login user may run anything
    through sudo with its password, as on most real hosts. This machine's sudoers and shadow stay untouched."""
    hashed = run("openssl", "passwd", "-6", "-stdin", input_text=password).strip()
    shadow = [line for line in Path("/etc/shadow").read_text().splitlines() if not line.startswith(f"{USER}:")]
    shadow.append(f"{USER}:{hashed}:19000:0:99999:7:::")
    for host in hosts:
        etc = state / "sim" / "nodes" / host / "root" / "etc"
        (etc / "sudoers.d").mkdir(parents=True, exist_ok=True)
        rule = etc / "sudoers.d" / USER
        # no cached credentials: inside a host's PID namespace sudo cannot read its parent's start time (the /proc
        # view shows only the host's own entries), so a ticket would outlive its session and let a wrong
        # password through on the next command that reuses the PID; many sites set this anyway
        rule.write_text(f"Defaults:{USER} timestamp_timeout=0\n{USER} ALL=(ALL) ALL\n")
        (etc / "shadow").write_text("\n".join(shadow) + "\n")
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {host}\n")  # sudo resolves its host name
        for path, mode in ((etc / "sudoers.d", 0o755), (rule, 0o440), (etc / "shadow", 0o640), (etc / "hosts", 0o644)):
            os.chown(path, 0, 0)
            path.chmod(mode)


@contextlib.contextmanager
def reachable_only_through_the_bastion(addresses: list[str], port: int) -> Iterator[None]:
    """Connections to the nodes' sshd are refused unless the login user's own process makes them, which on this
    machine is the bastion's sshd forwarding a jump (a real site's firewall: only the bastion reaches the nodes).
    An nftables table of its own, deleted on the way out; every address is loopback."""
    if shutil.which("nft") is None:
        raise AssertionError("needs nftables' nft (make test installs it)")
    table = f"provision_test_{os.getpid()}"
    uid = int(run("id", "-u", USER).strip())
    run("nft", "add", "table", "inet", table)
    run("nft", "add", "chain", "inet", table, "out", "{ type filter hook output priority 0 ; }")
    run("nft", "add", "rule", "inet", table, "out", "ip", "daddr", "{ " + ", ".join(addresses) + " }",
        "tcp", "dport", str(port), "meta", "skuid", "!=", str(uid), "reject", "with", "tcp", "reset")
    try:
        yield
    finally:
        subprocess.run(["nft", "delete", "table", "inet", table], capture_output=True, timeout=30, check=False)


def stop(daemons: list[subprocess.Popen[bytes]], grace_s: float = 3.0) -> None:
    """Terminate every daemon, give them ``grace_s`` together, then kill what is left (a host's namespace, whose
    ``unshare`` parent does not end on SIGTERM, was waited on for 10 s each)."""
    for daemon in daemons:
        daemon.terminate()
    deadline = time.monotonic() + grace_s
    for daemon in daemons:
        try:
            daemon.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=10)
