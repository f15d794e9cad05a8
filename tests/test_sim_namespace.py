"""The production-identical presentation: the provisioning playbooks, unchanged, against simulated hosts at the
real paths (no ``hw_root``), each host an sshd started by ``provision sim shell`` in its own namespace.

What the prefix presentation cannot show is checked here: the playbook's writes land in the host's ``/etc`` and
``/usr/local`` and never in this machine's, the reboot goes through ``/usr/sbin/shutdown``, the modules read the
real ``/proc/modules`` and ``/sys``.
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
from tests.sshd import SSHD, USER, LoopbackSshd, hand_to_login_user, stop, wait_listening

PROVISIONING = "register,provision"

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
        data["connection"] = servers.connection(forks=2)
        data["simulation"] = {"seed": 3, "presentation": "namespace",
                              "faults": [{"kind": "acs_enabled", "node": "sim01"},
                                         {"kind": "peermem_missing", "node": "sim01"},
                                         {"kind": "wrong_driver", "node": "sim02"}]}
        spec = work / "spec.yaml"
        spec.write_text(yaml.safe_dump(data, sort_keys=False))
        result = run_cli("sim", "up", str(spec))
        assert result.returncode == 0, result.stdout + result.stderr
        state = work / ".provision" / "sim16"
        hand_to_login_user(state, list(addresses))
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
    acs = parse_lspci_verbose(_ssh(servers, "127.0.0.21", "lspci -vvv").stdout)
    assert any(device.acs_redirects for device in acs), "the injected ACS fault is visible at the real path"
    refused = run_cli("sim", "shell", str(_spec), "sim01", "--", "true")
    assert refused.returncode == 2 and "already presented" in refused.stderr


def test_apply_at_the_real_paths_converges_the_hosts(namespaced_cluster) -> None:
    spec, state, _servers = namespaced_cluster
    result = run_cli("apply", "--json", str(spec), "--phases", PROVISIONING, timeout=600)
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
    result = run_cli("apply", "--json", str(spec), "--phases", PROVISIONING, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads((Path(json.loads(result.stdout)["run_dir"]) / "provision.json").read_text())
    assert {row["host"]: row["changed"] for row in rows} == {"sim01": 0, "sim02": 0}
