"""A delivery as a real site has it, end to end: `provision apply` (provisioning, then every burn-in stage) on
simulated hosts presented at the real paths (no ``hw_root``), each an sshd started by ``provision sim shell`` in
its own namespace, reached only through a second sshd acting as the bastion (a direct connection is refused),
logging in as an unprivileged user that becomes root through sudo with a password only the spec's reference
names. The burn-in's Python is the node runtime the node_runtime role installs from a local wheelhouse.

What the prefix presentation cannot show is checked here too: the playbook's writes land in the host's ``/etc``,
``/usr/local``, ``/opt`` and ``/var`` and never in this machine's, the reboot goes through ``/usr/sbin/shutdown``,
the modules read the real ``/proc/modules`` and ``/sys``; the login user meets what a real host refuses it
(``dmesg``, ``lspci``'s capability blocks), and with sudo refused the checks that need root are unknown, never ok.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from provision.facts.lspci import parse_lspci_verbose
from provision.facts.nvidia_smi import parse_query_csv
from provision.hosts.remote import SshSession
from provision.sim import namespace
from tests.conftest import ROOT, run_cli
from tests.simhelpers import SimHost, shrink_to_four_gpus, write_spec
from tests.sshd import (
    SSHD,
    USER,
    LoopbackSshd,
    grant_sudo,
    hand_to_login_user,
    reachable_only_through_the_bastion,
    stop,
    wait_listening,
)

PASSWORD = "ferry-quartz-19b4"
BECOME = "PROVISION_TEST_BECOME_PASSWORD"
TORCH = "2.13.0"
BASTION = "127.0.0.70"
ADDRESSES = {"sim01": "127.0.0.71", "sim02": "127.0.0.72", "sim03": "127.0.0.73", "sim04": "127.0.0.74"}
FAULTS = [{"kind": "acs_enabled", "node": "sim01"},  # provisioning clears it
          {"kind": "peermem_unregistered", "node": "sim03"},  # provisioning's gpudirect check fails it
          {"kind": "xid", "node": "sim04", "target": "gpu3", "params": {"code": 79}}]  # a log only root reads

pytestmark = pytest.mark.skipif(
    not os.path.exists(SSHD) or namespace.unavailable() is not None or not shutil.which("sudo")
    or not shutil.which("nft"),
    reason=f"needs OpenSSH's sshd, sudo, nftables and {namespace.unavailable() or 'root'} (make test installs them)")

#: What the pcie_acs role installs: at these real paths inside a host, and never on this machine.
ACS_FILES = ("usr/local/sbin/provision-acs-disable", "etc/systemd/system/provision-acs.service")
RUNTIME = "/opt/provision/runtime"
NODE_CHECK = "/usr/local/sbin/provision-node-check"


WHEELHOUSE_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "provision-tests"


def _wheelhouse(directory: Path) -> Path:
    """What an air-gapped site carries in: the pinned torch and what it needs, fetched where an index is reachable
    (here: this machine's pip configuration) once per torch version and constraints, then linked from the cache."""
    pins = hashlib.sha256((ROOT / "constraints.txt").read_bytes()).hexdigest()[:12]
    cached = WHEELHOUSE_CACHE / f"wheelhouse-torch{TORCH}-{pins}"
    if not (cached / ".complete").exists():
        shutil.rmtree(cached, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "-d", str(cached), f"torch=={TORCH}",
                        "numpy", "-c", str(ROOT / "constraints.txt")], check=True, capture_output=True, timeout=600)
        (cached / ".complete").write_text("")
    directory.mkdir(parents=True, exist_ok=True)
    for wheel in cached.glob("*.whl"):
        try:
            os.link(wheel, directory / wheel.name)
        except OSError:  # another filesystem
            shutil.copy2(wheel, directory / wheel.name)
    return directory


@pytest.fixture(scope="module")
def delivery():
    for path in (*ACS_FILES, RUNTIME.lstrip("/")):
        assert not (Path("/") / path).exists(), f"/{path} exists on this machine before the test"
    work = Path(tempfile.mkdtemp(prefix="provision-ns-", dir="/tmp"))
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        servers = LoopbackSshd(work, {"bastion": BASTION, **ADDRESSES}, logged=("bastion",))
        spec = shrink_to_four_gpus(write_spec(work, FAULTS, hosts="sim[01-04]", seed=3,
                                              admission={"max_failure_percent": {"provision": 50, "burnin": 50}}))
        data = yaml.safe_load(spec.read_text())
        data["nodes"]["groups"][0]["address_start"] = ADDRESSES["sim01"]
        data["connection"] = {**servers.connection(forks=4, become_password_env=BECOME),
                              "jump_host": f"{USER}@{BASTION}:{servers.port}"}
        data["software"]["runtime"] = {"torch": TORCH, "wheelhouse": "wheelhouse"}
        data["simulation"]["presentation"] = "namespace"
        checkpoints = work / "checkpoints"  # every node sees this machine's /tmp: a shared folder
        checkpoints.mkdir(mode=0o777)
        checkpoints.chmod(0o777)
        data["burnin"]["workload"]["checkpoint_dir"] = str(checkpoints)
        spec.write_text(yaml.safe_dump(data, sort_keys=False))
        _wheelhouse(work / "wheelhouse")
        result = run_cli("sim", "up", str(spec))
        assert result.returncode == 0, result.stdout + result.stderr
        state = work / ".provision" / "sim16"
        hand_to_login_user(state, list(ADDRESSES))
        grant_sudo(state, list(ADDRESSES), PASSWORD)
        daemons.append(subprocess.Popen(servers.command("bastion"), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE))
        wait_listening(BASTION, servers.port)
        for host, address in ADDRESSES.items():
            daemons.append(subprocess.Popen([sys.executable, "-m", "provision", "sim", "shell", str(spec), host,
                                             "--", *servers.command(host)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE))
            wait_listening(address, servers.port)
        with reachable_only_through_the_bastion(list(ADDRESSES.values()), servers.port):
            yield spec, state, servers
    finally:
        stop(daemons, grace_s=1.0)
        # the hosts' runtimes are gigabytes: removed behind the next test, not in front of it
        subprocess.Popen(["rm", "-rf", "--", str(work)], start_new_session=True)


def _ssh(servers: LoopbackSshd, address: str, command: str, *,
         jump: bool = True) -> subprocess.CompletedProcess[str]:
    options = ["-i", str(servers.client_key), "-o", f"UserKnownHostsFile={servers.known_hosts}",
               "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    # as the spec's connection does (ssh -J would not carry these options to the jump's own connection)
    through = ["-o", f"ProxyCommand=ssh -W %h:%p {' '.join(options)} -p {servers.port} {USER}@{BASTION}"] \
        if jump else []
    return subprocess.run(["ssh", *options, *through, "-p", str(servers.port), f"{USER}@{address}", command],
                          capture_output=True, text=True, timeout=60)


def test_a_node_is_reached_only_through_the_bastion(delivery) -> None:
    _spec, _state, servers = delivery
    direct = _ssh(servers, ADDRESSES["sim01"], "true", jump=False)
    assert direct.returncode == 255 and ("refused" in direct.stderr or "reset" in direct.stderr), direct.stderr
    with pytest.raises(Exception, match=r"(?i)refused|reset|unable to connect"):
        SshSession("sim01", ADDRESSES["sim01"], _model(servers, jump=False))
    through = _ssh(servers, ADDRESSES["sim01"], "true")
    assert through.returncode == 0, through.stderr


def _model(servers: LoopbackSshd, *, jump: bool):
    from provision.hosts.connection import ConnectionModel, parse_jump_host

    return ConnectionModel("ssh", USER, servers.port, servers.client_key, servers.known_hosts,
                           parse_jump_host(f"{BASTION}:{servers.port}") if jump else None, True, 10)


def test_a_logged_in_user_sees_the_host_at_the_real_paths(delivery) -> None:
    spec, _state, servers = delivery
    sim01 = ADDRESSES["sim01"]
    seen = _ssh(servers, sim01, "hostname; command -v lspci; ls /sys/class/infiniband; cat /etc/hostname")
    assert seen.returncode == 0, seen.stderr
    hostname, lspci, *rest = seen.stdout.split()
    assert (hostname, rest[-1]) == ("sim01", "sim01")
    assert lspci.startswith("/usr/") and "mlx5_0" in rest
    plain = parse_lspci_verbose(_ssh(servers, sim01, "lspci -vvv").stdout)
    assert plain and all(device.access_denied for device in plain), "a user without root reads no capability"
    assert not any(device.acs_redirects for device in plain)
    refused = _ssh(servers, sim01, "dmesg")
    assert refused.returncode == 1 and "read kernel buffer failed: Operation not permitted" in refused.stderr
    as_root = _ssh(servers, sim01, f"echo {PASSWORD} | sudo -S -p '' lspci -vvv")
    assert as_root.returncode == 0, as_root.stderr
    assert any(device.acs_redirects for device in parse_lspci_verbose(as_root.stdout)), \
        "the injected ACS fault is visible to root at the real path"
    wrong = _ssh(servers, sim01, "echo not-it | sudo -S -p '' dmesg")
    assert wrong.returncode != 0 and "incorrect password" in wrong.stderr
    busy = run_cli("sim", "shell", str(spec), "sim01", "--", "true")
    assert busy.returncode == 2 and "already presented" in busy.stderr


def test_provisioning_converges_the_hosts_and_installs_the_runtime(delivery) -> None:
    spec, state, servers = delivery
    before = servers.logins("bastion")
    result = run_cli("apply", "--json", str(spec), "--phases", "register,provision", timeout=900,
                     env={BECOME: PASSWORD})
    assert result.returncode == 1, result.stdout + result.stderr  # sim03 cannot register nvidia-peermem
    # the play's forks go through its one master connection to the bastion, not a login each
    assert servers.logins("bastion") - before == 1
    record = Path(json.loads(result.stdout)["run_dir"])
    host_vars = yaml.safe_load((record / "inventory.yml").read_text().split("\n", 1)[1])["all"]["hosts"]
    assert not {"hw_root", "provision_environment"} & set(host_vars["sim01"]), "no prefix in this presentation"
    assert "ProxyCommand" in host_vars["sim01"]["ansible_ssh_common_args"]
    outcomes = {row["host"]: row for row in json.loads((record / "provision.json").read_text())}
    assert "nvidia-peermem" in (outcomes["sim03"]["failed_task"] or ""), \
        outcomes["sim03"]
    for host in ("sim01", "sim02", "sim04"):
        assert outcomes[host]["failed_task"] is None, outcomes[host]
    status = {node["name"]: node for node in json.loads(run_cli("status", "--json", str(spec)).stdout)["nodes"]}
    assert status["sim03"]["state"] == "quarantined" and status["sim03"]["stage"] == "provision"
    sim01 = SimHost(state, "sim01")
    assert not [d for d in parse_lspci_verbose(sim01.run("lspci", "-vvv").stdout)
                if d.acs_redirects and d.address != "0000:04:01.0"], "ACS left on was cleared"
    drivers = parse_query_csv(SimHost(state, "sim02").run("nvidia-smi", "--query-gpu=driver_version",
                                                          "--format=csv").stdout)
    assert {row["driver_version"] for row in drivers} == {"535.183.01"}
    root = state / "sim" / "nodes" / "sim01" / "root"
    for path in (*ACS_FILES, "opt/provision/runtime/bin/python", NODE_CHECK.lstrip("/")):
        assert (root / path).exists(), f"/{path} did not land in the host"
        assert not (Path("/") / path).exists(), f"/{path} was written on this machine"
    # the bytecode of what the burn-in imports, written as root (its workers cannot), and not of every torch module
    compiled = {path.name.split(".")[0] for path in (root / RUNTIME.lstrip("/")).rglob("*.pyc")}
    assert {"node_test", "on_node", "distributed_c10d"} <= compiled, "the burn-in's imports"
    assert "test_case" not in compiled, "torch's test helpers, which nothing imports"
    described = _ssh(servers, ADDRESSES["sim02"], f"{RUNTIME}/bin/python -m fabric_tests.version")
    assert described.returncode == 0, described.stderr
    found = json.loads(described.stdout)
    assert found["torch"].split("+")[0] == TORCH and found["fabric_tests"].startswith("0.1.0+g")
    # Slurm's HealthCheckProgram, as root on the node, from what the roles installed: no controller package there
    checked = _ssh(servers, ADDRESSES["sim02"], f"echo {PASSWORD} | sudo -S -p '' {NODE_CHECK} --json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    verdict = json.loads(checked.stdout)
    assert verdict["status"] == "OK" and verdict["node"] == "sim02" and len(verdict["results"]) > 10, verdict
    absent = _ssh(servers, ADDRESSES["sim02"], f"{RUNTIME}/bin/python -c 'import provision.spec'; "
                                               f"{RUNTIME}/bin/python -c 'import pydantic'; command -v provision")
    assert absent.stderr.count("ModuleNotFoundError") == 2 and not absent.stdout.strip(), absent


def test_with_sudo_refused_the_root_checks_are_unknown_and_nobody_is_admitted(delivery) -> None:
    spec, _state, _servers = delivery
    result = run_cli("burnin", str(spec), "--json", timeout=600, env={BECOME: "not-" + PASSWORD})
    assert result.returncode == 1, result.stdout + result.stderr
    payload = json.loads(result.stdout)
    states = {row["node"]: row["state"] for row in payload["nodes"]}
    assert "admitted" not in states.values(), states
    # refused everywhere is the login's fault, not the nodes': a systemic stop, nobody quarantined for it
    assert "looks systemic" in json.dumps(payload), payload
    verdicts = json.loads((Path(payload["run_dir"]) / "burnin-preflight.json").read_text())
    assert {verdict["node"] for verdict in verdicts} == {"sim01", "sim02", "sim04"}
    for verdict in verdicts:
        outcomes = {result["check"]: result for result in verdict["results"]}
        for check in ("xid", "kernel_log", "acs", "pcie_link"):  # dmesg and lspci -vvv need root
            assert outcomes[check]["outcome"] == "unknown", (verdict["node"], outcomes[check])
            assert "needs root: sudo: 1 incorrect password attempt" in outcomes[check]["message"], outcomes[check]
        assert outcomes["gpu_count"]["outcome"] == "ok"  # nvidia-smi needs no root: judged as usual
    assert PASSWORD not in result.stdout + result.stderr


def test_with_sudo_apply_runs_every_stage_and_each_fault_is_caught_at_its_stage(delivery) -> None:
    spec, _state, servers = delivery
    before = servers.logins("bastion")
    # the delivery's apply goes on where provisioning left it (test_provisioning_converges_...: its play, one
    # login; a second play here would only show that again, for a minute and a half of the suite)
    result = run_cli("apply", str(spec), "--json", "--phases", "burnin", timeout=900, env={BECOME: PASSWORD})
    assert result.returncode == 1, result.stdout + result.stderr
    # one login for the campaign's tunnel: every probe, launch and pair round of every stage on every node went
    # through it
    assert servers.logins("bastion") - before == 1
    payload = json.loads(result.stdout)
    status = json.loads(run_cli("status", "--json", str(spec)).stdout)
    nodes = {row["name"]: row for row in status["nodes"]}
    run_dir = Path(payload["run_dir"])
    assert nodes["sim01"]["state"] == nodes["sim02"]["state"] == "admitted", payload.get("summary")
    assert (nodes["sim04"]["state"], nodes["sim04"]["stage"]) == ("quarantined", "preflight"), nodes["sim04"]
    assert nodes["sim04"]["reason"].startswith("preflight/xid: Xid 79"), nodes["sim04"]["reason"]
    assert nodes["sim03"]["state"] == "quarantined" and nodes["sim03"]["stage"] == "provision"
    for stage in ("node", "pairs", "collectives", "training"):
        verdicts = {verdict["node"]: verdict for verdict in json.loads((run_dir / f"burnin-{stage}.json").read_text())}
        assert set(verdicts) == {"sim01", "sim02"} and all(verdict["passed"] for verdict in verdicts.values()), stage
