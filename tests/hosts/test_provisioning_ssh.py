"""Provisioning over real SSH: one OpenSSH sshd per simulated host on loopback, a dedicated test user.

Host keys are generated and written to a generated known_hosts; host key checking stays on. The driver swap on
sim02 exercises Ansible's reboot module over SSH (the host's `shutdown` stand-in reboots the simulated host and
sshd stays up, as a real host's would come back).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from provision.facts.lspci import parse_lspci_verbose
from provision.facts.nvidia_smi import parse_query_csv
from tests.conftest import example_text, run_cli
from tests.simhelpers import SimHost
from tests.sshd import SSHD, USER, LoopbackSshd, hand_to_login_user, login_user_sudo, start_all, stop

PROVISIONING = "simulate,register,provision"  # burn-in has its own tests
PASSWORD = "right-horse-battery-4d1c"
BECOME = {"PROVISION_BECOME_PASSWORD": PASSWORD}

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(SSHD) or not shutil.which("sudo"),
                                reason="needs root, OpenSSH's sshd and sudo (make test installs them)")


@pytest.fixture(scope="module")
def ssh_cluster():
    work = Path(tempfile.mkdtemp(prefix="provision-ssh-", dir="/tmp"))
    addresses = {"sim01": "127.0.0.11", "sim02": "127.0.0.12"}
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        servers = LoopbackSshd(work, addresses)
        with login_user_sudo(PASSWORD):
            start_all(servers, addresses, daemons)
            data = yaml.safe_load(example_text())
            data["nodes"]["groups"][0]["hosts"] = "sim[01-02]"
            data["connection"] = servers.connection(forks=2, become_password_env="PROVISION_BECOME_PASSWORD")
            data["simulation"] = {"seed": 5, "faults": [{"kind": "acs_enabled", "node": "sim01"},
                                                        {"kind": "wrong_driver", "node": "sim02"}]}
            spec = work / "spec.yaml"
            spec.write_text(yaml.safe_dump(data, sort_keys=False))
            assert run_cli("apply", str(spec), "--phases", "simulate").returncode == 0
            state = work / ".provision" / "sim16"
            hand_to_login_user(state, list(addresses))
            yield spec, state
    finally:
        stop(daemons)
        shutil.rmtree(work, ignore_errors=True)


def test_apply_over_ssh_converges_the_hosts(ssh_cluster) -> None:
    spec, state = ssh_cluster
    result = run_cli("apply", "--json", str(spec), "--phases", PROVISIONING, timeout=600, env=BECOME)
    assert result.returncode == 0, result.stdout + result.stderr
    record = Path(json.loads(result.stdout)["run_dir"])
    inventory = yaml.safe_load((record / "inventory.yml").read_text().split("\n", 1)[1])
    host = inventory["all"]["hosts"]["sim01"]
    assert host["ansible_connection"] == "ssh" and host["ansible_user"] == USER
    assert "StrictHostKeyChecking=yes" in host["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=no" not in (record / "inventory.yml").read_text()
    outcomes = {row["host"]: row for row in json.loads((record / "provision.json").read_text())}
    assert all(row["failed_task"] is None for row in outcomes.values())
    assert any(change["task"] == "Reboot into the pinned driver and OFED's stack (over SSH)"
               for change in outcomes["sim02"]["changes"])
    sim01, sim02 = SimHost(state, "sim01"), SimHost(state, "sim02")
    assert not [d for d in parse_lspci_verbose(sim01.run("lspci", "-vvv").stdout)
                if d.acs_redirects and d.address != "0000:04:01.0"]
    drivers = parse_query_csv(sim02.run("nvidia-smi", "--query-gpu=driver_version", "--format=csv").stdout)
    assert {row["driver_version"] for row in drivers} == {"535.183.01"}


def test_an_unreachable_host_is_reported_and_the_others_carry_on(ssh_cluster, tmp_path: Path) -> None:
    spec, _state = ssh_cluster
    data = yaml.safe_load(spec.read_text())
    data["nodes"]["groups"][0]["hosts"] = "sim[01-03]"  # sim03 (127.0.0.13) has no sshd
    data["admission"] = {"max_failure_percent": {"provision": 50, "burnin": 20}}  # a budget that lets them go on
    moved = spec.parent / "spec-unreachable.yaml"
    moved.write_text(yaml.safe_dump(data, sort_keys=False))
    # sim02 would only repeat sim01's converged play: the reachable host that carries on is sim01
    result = run_cli("apply", "--json", str(moved), "--state-dir", str(spec.parent / ".provision" / "sim16"),
                     "--phases", "register,provision", "--limit", "sim[01,03]", timeout=600, env=BECOME)
    assert result.returncode == 1, result.stdout + result.stderr
    assert json.loads(result.stdout)["quarantined"] == ["sim03"]
    status = json.loads(run_cli("status", "--json", "--state-dir", str(spec.parent / ".provision" / "sim16")).stdout)
    reasons = {node["name"]: node["reason"] for node in status["nodes"]}
    assert reasons["sim03"].startswith("unreachable:")
    assert {node["name"]: node["state"] for node in status["nodes"]}["sim01"] == "provisioned"
    runs = status["last_run"]
    assert runs["command"] == "apply" and runs["exit_code"] == 1


def test_preflight_checks_run_over_ssh(ssh_cluster) -> None:
    """The burn-in's read-only probes go over one SSH session per host (fabric, host keys checked). Without root
    the login user cannot read the kernel log or the capability blocks: those checks are unknown, never ok; with
    sudo they are judged."""
    spec, _state = ssh_cluster
    data = yaml.safe_load(spec.read_text())
    data["burnin"]["stages"] = ["preflight"]
    for key in ("dcgm", "soak"):  # each read by its stage alone
        data["burnin"].pop(key, None)
    become = spec.parent / "spec-preflight-become.yaml"
    become.write_text(yaml.safe_dump(data, sort_keys=False))
    data["connection"]["become"] = False
    del data["connection"]["become_password"]
    plain = spec.parent / "spec-preflight.yaml"
    plain.write_text(yaml.safe_dump(data, sort_keys=False))
    state_dir = str(spec.parent / ".provision" / "sim16")

    unprivileged = run_cli("burnin", "--json", str(plain), "--state-dir", state_dir, timeout=300)
    assert unprivileged.returncode == 1, unprivileged.stdout + unprivileged.stderr
    payload = json.loads(unprivileged.stdout)
    assert "admitted" not in {row["state"] for row in payload["nodes"]}
    for verdict in json.loads((Path(payload["run_dir"]) / "burnin-preflight.json").read_text()):
        outcomes = {result["check"]: result for result in verdict["results"]}
        for check in ("acs", "xid", "kernel_log"):
            assert outcomes[check]["outcome"] == "unknown", outcomes[check]
            assert "needs root" in outcomes[check]["message"], outcomes[check]
        assert outcomes["gpu_count"]["outcome"] == "ok"

    result = run_cli("burnin", "--json", str(become), "--state-dir", state_dir, timeout=300,
                     env=BECOME)
    payload = json.loads(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert {row["node"]: row["state"] for row in payload["nodes"]} == {"sim01": "admitted", "sim02": "admitted"}
    verdicts = json.loads((Path(payload["run_dir"]) / "burnin-preflight.json").read_text())
    for verdict in verdicts:
        outcomes = {result["check"]: result["outcome"] for result in verdict["results"]}
        assert outcomes["ib_ports"] == outcomes["acs"] == outcomes["peermem"] == outcomes["gpu_count"] == "ok"
        assert outcomes["xid"] == "ok" and outcomes["kernel_log"] in ("ok", "warning")  # judged, not unknown


def test_a_wrong_sudo_password_is_a_per_host_result_and_the_right_one_continues(ssh_cluster) -> None:
    spec, state_dir = ssh_cluster
    become = spec
    wrong = "wrong-canary-93be2f"
    refused = run_cli("apply", "--json", str(become), "--state-dir", str(state_dir), "--phases", "register,provision",
                      env={"PROVISION_BECOME_PASSWORD": wrong}, timeout=600)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert sorted(json.loads(refused.stdout)["quarantined"]) == ["sim01", "sim02"]
    status = json.loads(run_cli("status", "--json", "--state-dir", str(state_dir)).stdout)
    for node in (node for node in status["nodes"] if node["name"] in ("sim01", "sim02")):
        assert node["state"] == "quarantined" and node["stage"] == "provision", node
        assert "incorrect sudo password" in node["reason"].lower(), node["reason"]
    for path in [*state_dir.rglob("*.json*"), *state_dir.rglob("*.db"), *state_dir.rglob("*.yml")]:
        assert wrong.encode() not in path.read_bytes(), path
    assert wrong not in refused.stdout + refused.stderr

    accepted = run_cli("apply", "--json", str(become), "--state-dir", str(state_dir), "--phases", "register,provision",
                       env=BECOME, timeout=600)
    assert accepted.returncode == 0, accepted.stdout[-3000:] + accepted.stderr
    status = json.loads(run_cli("status", "--json", "--state-dir", str(state_dir)).stdout)
    assert {node["name"]: node["state"] for node in status["nodes"] if node["name"] != "sim03"} == {
        "sim01": "provisioned", "sim02": "provisioned"}
