"""The one connection model: jump host, ``~`` in paths, become through sudo — for Ansible and our own sessions.

A real OpenSSH bastion and a real node sshd on loopback: the burn-in's session reaches the node through the
bastion (with the bastion stopped it cannot), runs as the unprivileged login user, and becomes root through
sudo with the spec's become password on stdin. A refused privilege comes back as ``needs root: <what sudo
said>``, and preflight then makes exactly the checks that needed root ``unknown`` with that evidence.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from provision.checks import preflight
from provision.checks.outcome import Outcome
from provision.facts.session import refused_by_sudo
from provision.hosts.connection import ConnectionModel, connection_model, parse_jump_host
from provision.hosts.remote import SshSession
from provision.spec import load_spec
from tests.conftest import EXAMPLES
from tests.sshd import SSHD, USER, LoopbackSshd, run, stop, wait_listening

needs_sshd = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(SSHD) or not shutil.which("sudo"),
                                reason="needs root, OpenSSH's sshd and sudo (make test installs them)")
SUDOERS = Path("/etc/sudoers.d/provision-test-connection")
PASSWORD = "staple-orbit-7c2e"


def test_jump_host_syntax() -> None:
    assert str(parse_jump_host("ops@bastion.example:2222")) == "ops@bastion.example:2222"
    assert parse_jump_host("10.0.0.5") == parse_jump_host("10.0.0.5:22")
    assert parse_jump_host("10.0.0.5").user is None


def test_the_play_shares_connections_and_compresses_nothing(tmp_path: Path) -> None:
    from provision.hosts.ansible import settings

    args = settings(tmp_path)["ANSIBLE_SSH_ARGS"].split()
    assert "-C" not in args and "Compression=yes" not in args, "wheels are zip files: zlib on them is CPU for nothing"
    assert "ControlMaster=auto" in args and any(arg.startswith("ControlPersist=") for arg in args)


@pytest.mark.parametrize(("stderr", "said"), [
    ("sudo: a password is required\n", "sudo: a password is required"),
    ("provision is not in the sudoers file.  This incident will be reported.\n",
     "provision is not in the sudoers file.  This incident will be reported."),
    ("Sorry, try again.\nsudo: 1 incorrect password attempt\n", "sudo: 1 incorrect password attempt"),
    # sudo 1.9.13 given one wrong password on stdin (recorded here)
    ("Sorry, try again.\n\nsudo: no password was provided\nsudo: 1 incorrect password attempt\n",
     "sudo: 1 incorrect password attempt"),
    ("Sorry, user provision may not run sudo on gpu-a17.\n", "Sorry, user provision may not run sudo on gpu-a17."),
    ("dmesg: read kernel buffer failed: Operation not permitted\n", None),
])
def test_sudo_refusals_are_told_from_command_failures(stderr: str, said: str | None) -> None:
    assert refused_by_sudo(stderr) == said


def test_paths_take_tilde_and_the_spec_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    data = yaml.safe_load((EXAMPLES / "h100-511.yaml").read_text())
    data["connection"].update(key_file="~/.ssh/provision_ed25519", known_hosts="keys/known_hosts",
                              jump_host="ops@bastion.example:2222")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    model = connection_model(load_spec(spec))
    assert model.key_file == tmp_path / "home" / ".ssh" / "provision_ed25519"
    assert model.known_hosts == tmp_path / "keys" / "known_hosts"
    variables = model.ansible_vars("10.0.1.17")
    assert variables["ansible_ssh_private_key_file"] == str(model.key_file)
    assert variables["ansible_become"] is True and variables["ansible_become_method"] == "sudo"
    # the jump host's key is checked against the same known_hosts, with the same key
    # through the play's one master connection to the jump host (%%C: ssh's own token, passed on to the jump's ssh)
    assert (f"-o ProxyCommand='ssh -W %h:%p -p 2222 -o StrictHostKeyChecking=yes -o UserKnownHostsFile="
            f"{model.known_hosts} -i {model.key_file} -o BatchMode=yes -o ConnectTimeout={model.timeout_s} "
            "-o ControlMaster=auto -o ControlPath=~/.ssh/provision/jump-%%C ops@bastion.example'"
            ) in variables["ansible_ssh_common_args"]


@pytest.fixture(scope="module")
def bastion_and_node():
    work = Path(tempfile.mkdtemp(prefix="provision-jump-", dir="/tmp"))
    addresses = {"bastion": "127.0.0.60", "node": "127.0.0.61"}
    servers = LoopbackSshd(work, addresses)
    daemons = {host: subprocess.Popen(servers.command(host), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
               for host in addresses}
    for address in addresses.values():
        wait_listening(address, servers.port)
    subprocess.run(["chpasswd"], input=f"{USER}:{PASSWORD}\n", text=True, check=True, timeout=30)
    try:
        yield servers, addresses, daemons
    finally:
        SUDOERS.unlink(missing_ok=True)
        run("usermod", "-p", "*", USER)
        stop(list(daemons.values()))
        shutil.rmtree(work, ignore_errors=True)


def _model(servers: LoopbackSshd, jump: str | None, *, become: bool = True) -> ConnectionModel:
    return ConnectionModel("ssh", USER, servers.port, servers.client_key, servers.known_hosts,
                           parse_jump_host(jump) if jump else None, become, 10)


def _sudoers(rule: str | None) -> None:
    if rule is None:
        SUDOERS.unlink(missing_ok=True)
        return
    SUDOERS.write_text(rule + "\n")
    SUDOERS.chmod(0o440)


@needs_sshd
def test_sessions_go_through_the_jump_host_and_become_root_with_the_password(bastion_and_node) -> None:
    servers, addresses, _daemons = bastion_and_node
    _sudoers(f"{USER} ALL=(ALL) ALL")  # password required, as on most real hosts
    jump = f"{addresses['bastion']}:{servers.port}"
    session = SshSession("node", addresses["node"], _model(servers, jump), become_password=PASSWORD)
    try:
        plain = session.run(["id", "-un"], 10)
        assert plain.ok and plain.stdout.strip() == USER
        root = session.run(["id", "-u"], 10, become=True)
        assert root.ok and root.stdout.strip() == "0", root
    finally:
        session.close()

    wrong = SshSession("node", addresses["node"], _model(servers, jump), become_password="not-" + PASSWORD)
    try:
        refused = wrong.run(["id", "-u"], 10, become=True)
        assert not refused.ok and refused.problem().startswith("needs root: sudo:"), refused
        assert PASSWORD not in refused.stdout + refused.stderr
    finally:
        wrong.close()

    without = SshSession("node", addresses["node"], _model(servers, jump))  # sudo -n: never waits for a password
    try:
        refused = without.run(["id", "-u"], 10, become=True)
        assert refused.problem() == "needs root: sudo: a password is required", refused
    finally:
        without.close()


@needs_sshd
def test_without_the_bastion_the_node_is_not_reached(bastion_and_node) -> None:
    servers, addresses, _daemons = bastion_and_node
    dead_bastion = "127.0.0.62"  # nothing listens there: a session that honours the jump host cannot connect
    with pytest.raises(Exception, match=r"(?i)refused|unable to connect|error"):
        SshSession("node", addresses["node"], _model(servers, f"{dead_bastion}:{servers.port}"))


@needs_sshd
def test_refused_root_makes_exactly_the_root_checks_unknown(bastion_and_node) -> None:
    servers, addresses, _daemons = bastion_and_node
    _sudoers(None)  # the login user may not use sudo at all
    session = SshSession("node", addresses["node"], _model(servers, f"{addresses['bastion']}:{servers.port}"),
                         become_password=PASSWORD)
    try:
        gathered = preflight.collect(session, 20)
    finally:
        session.close()
    for probe in preflight.PROBES:
        if probe.needs_root:
            assert gathered.problems[probe.name].startswith("needs root: "), (probe.name, gathered.problems)
            assert "sudoers" in gathered.problems[probe.name] or "may not run sudo" in gathered.problems[probe.name]
    expect = preflight.Expectations(
        gpu_count=8, gpu_model="H100-SXM-80GB", driver="535.183.01", gpu_pcie=(5, 16), hca_pcie=(5, 16),
        rail_hcas=("mlx5_0",), link_gbps=400, nvlink_links=18, gpudirect="peermem", acs_disable=True,
        acs_scope="all_bridges", thresholds={"corrected_ecc": 1, "gpu_temperature_c": 84, "disk_usage_percent": 95})
    results = {result.check: result for result in preflight.evaluate(gathered, expect)}
    for check in ("xid", "kernel_log", "acs"):  # dmesg and lspci -vvv need root
        assert results[check].outcome is Outcome.UNKNOWN and "needs root" in results[check].message, results[check]
    assert results["disk"].outcome is not Outcome.UNKNOWN  # df needs no root: judged as usual


@pytest.fixture
def default_bastion():
    """A bastion and a node at sshd's default MaxStartups (10:30:100): past ten unauthenticated connections at once,
    sshd drops new ones at random (30% at first) — what a delivery's nodes opened at once meet at a bastion."""
    work = Path(tempfile.mkdtemp(prefix="provision-startups-", dir="/tmp"))
    addresses = {"bastion": "127.0.0.62", "node": "127.0.0.63"}
    servers = LoopbackSshd(work, addresses)
    daemons = [subprocess.Popen(servers.command(host), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
               for host in addresses]
    for address in addresses.values():
        wait_listening(address, servers.port)
    try:
        yield servers, addresses
    finally:
        stop(daemons)
        shutil.rmtree(work, ignore_errors=True)


AT_ONCE = 40


def _open_at_once(servers: LoopbackSshd, addresses: dict[str, str], count: int) -> list[str]:
    from concurrent.futures import ThreadPoolExecutor

    jump = f"{addresses['bastion']}:{servers.port}"

    def one(_index: int) -> str:
        try:
            session = SshSession("node", addresses["node"], _model(servers, jump, become=False))
        except Exception as error:
            return f"{type(error).__name__}: {error}"
        try:
            result = session.run(["true"], 10)
            return "ok" if result.ok else result.problem()
        finally:
            session.close()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(one, range(count)))


@needs_sshd
def test_forty_sessions_at_once_through_a_bastion_at_sshds_defaults_all_connect(default_bastion) -> None:
    """The controller keeps its handshakes in flight under MaxStartups' first figure and retries a dropped one:
    no node is lost to the bastion."""
    assert _open_at_once(*default_bastion, AT_ONCE) == ["ok"] * AT_ONCE


@needs_sshd
def test_all_at_once_and_connecting_once_the_bastion_drops_sessions(default_bastion, monkeypatch) -> None:
    """The same forty, all handshakes at once and no retry: sshd drops some (the test above can fail)."""
    import threading

    from provision.hosts import remote as observe

    monkeypatch.setattr(observe, "CONNECT_ATTEMPTS", 1)
    monkeypatch.setattr(observe, "_HANDSHAKES", threading.BoundedSemaphore(AT_ONCE))
    outcomes = _open_at_once(*default_bastion, AT_ONCE)
    assert any("protocol banner" in outcome or "reset" in outcome.lower() or "EOF" in outcome
               for outcome in outcomes), outcomes


class _Flaky:
    """A connection whose first opens are dropped the way sshd's MaxStartups drops them, or refused for good."""

    def __init__(self, drops: int, error: Exception) -> None:
        self.drops, self.error, self.opened, self.closed, self.gateway = drops, error, 0, 0, None

    def open(self) -> None:
        self.opened += 1
        if self.opened <= self.drops:
            raise self.error

    def close(self) -> None:
        self.closed += 1


def test_a_dropped_connection_is_tried_again_and_a_refused_one_is_not(monkeypatch) -> None:
    import paramiko

    from provision.hosts import remote as observe

    monkeypatch.setattr(observe, "CONNECT_BACKOFF_S", 0.01)
    dropped = _Flaky(2, paramiko.SSHException("Error reading SSH protocol banner"))
    observe.open_connection(dropped)
    assert (dropped.opened, dropped.closed) == (3, 2)
    refused = _Flaky(1, paramiko.AuthenticationException("Authentication failed."))
    with pytest.raises(paramiko.AuthenticationException):
        observe.open_connection(refused)
    assert refused.opened == 1
    lost = _Flaky(9, EOFError())
    with pytest.raises(EOFError):
        observe.open_connection(lost)
    assert lost.opened == observe.CONNECT_ATTEMPTS


@needs_sshd
def test_a_campaign_reuses_one_connection_per_host_and_replaces_a_lost_one(default_bastion) -> None:
    """Every launch of every stage asks for the host's session; inside the campaign's pool they get one
    connection, and one that died under a command is retired so the next launch connects afresh — a dead
    connection is ours to replace, never the node's verdict."""
    import threading

    from provision.hosts.remote import SessionPool

    servers, addresses = default_bastion
    jump = f"{addresses['bastion']}:{servers.port}"
    pool = SessionPool()

    def opener() -> SshSession:
        return SshSession("node", addresses["node"], _model(servers, jump, become=False))

    try:
        for _launch in range(5):
            session = pool.get("node", opener)
            assert session.run(["true"], 10).ok
            session.close()  # a stage closing its session leaves the connection to the pool
        assert pool.opened == 1
        first = pool.get("node", opener)
        transport = first.session.connection.client.get_transport()
        threading.Timer(0.5, transport.close).start()  # the connection dies under a running command
        lost = first.run(["sleep", "5"], 10)
        assert lost.lost and not lost.ok and not lost.timed_out, lost
        again = pool.get("node", opener)
        assert again.run(["hostname"], 10).ok and pool.opened == 2
    finally:
        pool.close()


@needs_sshd
def test_a_file_not_read_is_never_a_file_that_is_not_there(default_bastion, tmp_path: Path) -> None:
    """``read_text`` says ``None`` only for an absent file: a read that failed (refused, the connection gone under
    it) raises, so a check reads it as unknown — an unread nv_mem is not an unregistered nvidia-peermem — and the
    pool retires a connection lost under a read as it does under a command."""
    import contextlib
    import threading

    from provision.hosts.remote import ReadFailed, SessionPool

    servers, addresses = default_bastion
    jump = f"{addresses['bastion']}:{servers.port}"
    pool = SessionPool()
    folder = Path(tempfile.mkdtemp(prefix="provision-read-", dir="/tmp"))
    folder.chmod(0o755)
    os.mkfifo(folder / "blocks")
    (folder / "blocks").chmod(0o644)

    def opener() -> SshSession:
        return SshSession("node", addresses["node"], _model(servers, jump, become=False))

    try:
        session = pool.get("node", opener)
        assert session.read_text(str(folder / "absent")) is None
        with pytest.raises(ReadFailed, match="Is a directory") as refused:
            session.read_text(str(folder))
        assert not refused.value.lost
        transport = session.session.connection.client.get_transport()
        threading.Timer(0.5, transport.close).start()  # the connection dies under the read (cat waits on a FIFO)
        with pytest.raises(ReadFailed, match="dropped") as dropped:
            session.read_text(str(folder / "blocks"))
        assert dropped.value.lost
        assert pool.get("node", opener).run(["true"], 10).ok and pool.opened == 2
    finally:
        pool.close()
        # the node's cat outlives the dropped connection, blocked opening the FIFO: a writer's close ends it (with no
        # reader left, the open fails)
        with contextlib.suppress(OSError):
            os.close(os.open(folder / "blocks", os.O_WRONLY | os.O_NONBLOCK))
        shutil.rmtree(folder, ignore_errors=True)


@needs_sshd
def test_a_campaign_reaches_every_node_through_one_connection_to_the_bastion(default_bastion) -> None:
    """Five hosts' sessions in one pool tunnel through one connection to the jump host: the bastion holds one TCP
    connection from the controller, not five (its MaxStartups sees one handshake for the whole delivery)."""
    from provision.hosts.remote import SessionPool

    servers, addresses = default_bastion
    model = _model(servers, f"{addresses['bastion']}:{servers.port}", become=False)
    pool = SessionPool()
    try:
        sessions = [pool.get(f"host{index}", lambda: SshSession("node", addresses["node"], model,
                                                                 gateway=pool.gateway(model)))
                    for index in range(5)]
        assert all(session.run(["true"], 10).ok for session in sessions)
        established = subprocess.run(["ss", "-Htn", "state", "established", "dst",
                                      f"{addresses['bastion']}:{servers.port}"], capture_output=True, text=True,
                                     timeout=10).stdout.splitlines()
        assert (len(established), pool.opened, pool.gateways_opened) == (1, 5, 1), established
        sessions[0].session.close()  # one host closed for good: the tunnel of the others stays
        assert sessions[1].run(["true"], 10).ok
    finally:
        pool.close()


@needs_sshd
def test_a_plays_forks_reach_the_nodes_through_one_master_at_the_bastion(default_bastion) -> None:
    """Ansible's forks each start ``ssh`` with the spec's ProxyCommand: with the play's master connection up they
    are its channels, and the bastion (at sshd's default MaxStartups) holds one connection from the controller
    however many forks run at once; after the play the master is gone."""
    import shlex
    import time

    from provision.hosts.connection import jump_master

    servers, addresses = default_bastion
    model = _model(servers, f"{addresses['bastion']}:{servers.port}", become=False)
    node = ["ssh", *shlex.split(model.ssh_args()), "-i", str(servers.client_key), "-o", "BatchMode=yes",
            "-p", str(servers.port), f"{USER}@{addresses['node']}"]
    with jump_master(model) as up:
        assert up
        forks = [subprocess.Popen([*node, "sleep", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(6)]
        time.sleep(1.0)
        established = subprocess.run(["ss", "-Htn", "state", "established", "dst",
                                      f"{addresses['bastion']}:{servers.port}"], capture_output=True, text=True,
                                     timeout=10).stdout.splitlines()
        outcomes = [fork.wait(timeout=30) for fork in forks]
        assert outcomes == [0] * 6, [fork.stderr.read() for fork in forks]  # type: ignore[union-attr]
        assert len(established) == 1, established
    checked = subprocess.run(["ssh", *model.jump_options(), "-O", "check", model.jump_destination()],
                             capture_output=True, text=True, timeout=10)
    assert checked.returncode != 0  # the master left with the play
