"""The production-identical presentation: the provisioning playbooks, unchanged, against simulated hosts at the
real paths (no ``hw_root``), each host an sshd started by ``provision sim shell`` in its own namespace.

What the prefix presentation cannot show is checked here: the playbook's writes land in the host's ``/etc`` and
``/usr/local`` and never in this machine's, the reboot goes through ``/usr/sbin/shutdown``, the modules read the
real ``/proc/modules`` and ``/sys``. The login user is unprivileged, as on a real delivery: it meets what a real
host refuses it (``dmesg``, ``lspci``'s capability blocks) and becomes root through sudo with a password that
only the spec's reference names; with sudo refused, the checks that need root are unknown, never ok.
"""

from __future__ import annotations

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
from provision.sim import namespace
from tests.conftest import EXAMPLES, ROOT, run_cli
from tests.simhelpers import SimHost
from tests.sshd import SSHD, USER, LoopbackSshd, grant_sudo, hand_to_login_user, stop, wait_listening

PROVISIONING = "register,provision"
PASSWORD = "ferry-quartz-19b4"
BECOME = "PROVISION_TEST_BECOME_PASSWORD"

pytestmark = pytest.mark.skipif(
    not os.path.exists(SSHD) or namespace.unavailable() is not None,
    reason=f"needs OpenSSH's sshd and {namespace.unavailable() or 'root'}")

#: What the pcie_acs role installs: at these real paths inside a host, and never on this machine.
ACS_FILES = ("usr/local/sbin/provision-acs-disable", "etc/systemd/system/provision-acs.service")


@pytest.fixture(scope="module")
def namespaced_cluster():
    for path in ACS_FILES:
        assert not (Path("/") / path).exists(), f"/{path} exists on this machine before the test"
    work = Path(tempfile.mkdtemp(prefix="provision-ns-", dir="/tmp"))
    addresses = {"sim01": "127.0.0.21", "sim02": "127.0.0.22"}
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        servers = LoopbackSshd(work, addresses)
        data = yaml.safe_load((EXAMPLES / "sim-cluster.yaml").read_text())
        data["nodes"]["groups"][0]["hosts"] = "sim[01-02]"
        data["nodes"]["groups"][0]["address_start"] = "127.0.0.21"
        data["connection"] = servers.connection(forks=2, become_password_env=BECOME)
        data["burnin"]["stages"] = ["preflight"]  # the stages that start workers need the node runtime
        data["simulation"] = {"seed": 3, "presentation": "namespace",
                              "faults": [{"kind": "acs_enabled", "node": "sim01"},
                                         {"kind": "peermem_missing", "node": "sim01"},
                                         {"kind": "wrong_driver", "node": "sim02"},
                                         {"kind": "xid", "node": "sim02", "target": "gpu3", "params": {"code": 79}}]}
        spec = work / "spec.yaml"
        spec.write_text(yaml.safe_dump(data, sort_keys=False))
        result = run_cli("sim", "up", str(spec))
        assert result.returncode == 0, result.stdout + result.stderr
        state = work / ".provision" / "sim16"
        hand_to_login_user(state, list(addresses))
        grant_sudo(state, list(addresses), PASSWORD)
        for host, address in addresses.items():
            daemons.append(subprocess.Popen([sys.executable, "-m", "provision", "sim", "shell", str(spec), host,
                                             "--", *servers.command(host)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE))
            wait_listening(address, servers.port)
        yield spec, state, servers
    finally:
        stop(daemons)
        shutil.rmtree(work, ignore_errors=True)


def _ssh(servers: LoopbackSshd, address: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-i", str(servers.client_key), "-o", f"UserKnownHostsFile={servers.known_hosts}",
                           "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-p", str(servers.port),
                           f"{USER}@{address}", command], capture_output=True, text=True, timeout=60)


def test_a_logged_in_user_sees_the_host_at_the_real_paths(namespaced_cluster) -> None:
    _spec, _state, servers = namespaced_cluster
    seen = _ssh(servers, "127.0.0.21", "hostname; command -v lspci; ls /sys/class/infiniband; cat /etc/hostname")
    assert seen.returncode == 0, seen.stderr
    hostname, lspci, *rest = seen.stdout.split()
    assert (hostname, rest[-1]) == ("sim01", "sim01")
    assert lspci.startswith("/usr/") and "mlx5_0" in rest
    plain = parse_lspci_verbose(_ssh(servers, "127.0.0.21", "lspci -vvv").stdout)
    assert plain and all(device.access_denied for device in plain), "a user without root reads no capability"
    assert not any(device.acs_redirects for device in plain)
    refused = _ssh(servers, "127.0.0.21", "dmesg")
    assert refused.returncode == 1 and "read kernel buffer failed: Operation not permitted" in refused.stderr
    as_root = _ssh(servers, "127.0.0.21", f"echo {PASSWORD} | sudo -S -p '' lspci -vvv")
    assert as_root.returncode == 0, as_root.stderr
    assert any(device.acs_redirects for device in parse_lspci_verbose(as_root.stdout)), \
        "the injected ACS fault is visible to root at the real path"
    wrong = _ssh(servers, "127.0.0.21", "echo not-it | sudo -S -p '' dmesg")
    assert wrong.returncode != 0 and "incorrect password" in wrong.stderr
    refused = run_cli("sim", "shell", str(_spec), "sim01", "--", "true")
    assert refused.returncode == 2 and "already presented" in refused.stderr


def test_apply_at_the_real_paths_converges_the_hosts(namespaced_cluster) -> None:
    spec, state, _servers = namespaced_cluster
    result = run_cli("apply", "--json", str(spec), "--phases", PROVISIONING, timeout=600, env={BECOME: PASSWORD})
    assert result.returncode == 0, result.stdout + result.stderr
    record = Path(json.loads(result.stdout)["run_dir"])
    host_vars = yaml.safe_load((record / "inventory.yml").read_text().split("\n", 1)[1])["all"]["hosts"]
    assert not {"hw_root", "provision_environment"} & set(host_vars["sim01"]), "no prefix in this presentation"
    outcomes = {row["host"]: row for row in json.loads((record / "provision.json").read_text())}
    assert all(row["failed_task"] is None for row in outcomes.values()), outcomes
    assert any(change["task"] == "Reboot into the pinned driver (over SSH)" for change in outcomes["sim02"]["changes"])
    sim01, sim02 = SimHost(state, "sim01"), SimHost(state, "sim02")
    assert not [d for d in parse_lspci_verbose(sim01.run("lspci", "-vvv").stdout)
                if d.acs_redirects and d.address != "0000:04:01.0"]
    assert "nvidia_peermem" in sim01.run("lsmod").stdout
    drivers = parse_query_csv(sim02.run("nvidia-smi", "--query-gpu=driver_version", "--format=csv").stdout)
    assert {row["driver_version"] for row in drivers} == {"535.183.01"}
    root = state / "sim" / "nodes" / "sim01" / "root"
    for path in ACS_FILES:
        assert (root / path).is_file(), f"the role's /{path} did not land in the host"
        assert not (Path("/") / path).exists(), f"the role wrote /{path} on this machine"
    assert (root / "etc" / "modules-load.d" / "nvidia-peermem.conf").is_file()


def test_a_second_apply_at_the_real_paths_changes_nothing(namespaced_cluster) -> None:
    spec, _state, _servers = namespaced_cluster
    result = run_cli("apply", "--json", str(spec), "--phases", PROVISIONING, timeout=600, env={BECOME: PASSWORD})
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads((Path(json.loads(result.stdout)["run_dir"]) / "provision.json").read_text())
    assert {row["host"]: row["changed"] for row in rows} == {"sim01": 0, "sim02": 0}


def test_with_sudo_refused_the_root_checks_are_unknown_and_nobody_is_admitted(namespaced_cluster) -> None:
    spec, _state, _servers = namespaced_cluster
    result = run_cli("burnin", str(spec), "--json", timeout=300, env={BECOME: "not-" + PASSWORD})
    assert result.returncode == 1, result.stdout + result.stderr
    payload = json.loads(result.stdout)
    # refused everywhere is the login's fault, not the nodes': a systemic stop, nobody admitted nor quarantined
    assert {row["node"]: row["state"] for row in payload["nodes"]} == {"sim01": "burning-in", "sim02": "burning-in"}
    assert "looks systemic" in json.dumps(payload), payload
    verdicts = json.loads((Path(payload["run_dir"]) / "burnin-preflight.json").read_text())
    for verdict in verdicts:
        outcomes = {result["check"]: result for result in verdict["results"]}
        for check in ("xid", "kernel_log", "acs", "pcie_link"):  # dmesg and lspci -vvv need root
            assert outcomes[check]["outcome"] == "unknown", (verdict["node"], outcomes[check])
            assert "needs root: sudo:" in outcomes[check]["message"] and "incorrect password" in \
                outcomes[check]["message"], outcomes[check]
        assert outcomes["gpu_count"]["outcome"] == "ok"  # nvidia-smi needs no root: judged as usual
    assert PASSWORD not in result.stdout + result.stderr


def test_with_sudo_the_root_only_kernel_log_fault_is_caught(namespaced_cluster) -> None:
    spec, _state, _servers = namespaced_cluster
    result = run_cli("burnin", str(spec), "--json", timeout=300, env={BECOME: PASSWORD})
    assert result.returncode == 1, result.stdout + result.stderr
    nodes = {row["node"]: row for row in json.loads(result.stdout)["nodes"]}
    assert nodes["sim01"]["state"] == "admitted", nodes["sim01"]
    assert nodes["sim02"]["state"] == "quarantined" and nodes["sim02"]["check"] == "xid", nodes["sim02"]
    assert "79" in nodes["sim02"]["reason"]
