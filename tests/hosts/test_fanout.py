"""Sixteen hosts behind one bastion whose sshd drops unauthenticated connections beyond three at once
(``MaxStartups 3:50:6``): the fan-out of a play and of a burn-in campaign must lose no node.

Each host is an OpenSSH sshd on loopback (the simulated hosts on a prefix, as in test_provision_ssh), reached only
through the bastion's. What is asserted is what a delivery of hundreds of nodes depends on: every host answers
with its own measurements, none is called unreachable or lost, and the bastion sees one login per play and per
campaign however many hosts there are. The hosts are left unprovisioned: the play stops each at its first task
(the spec pins another kernel than the hosts run, which the preflight role refuses), so the test pays for the
connections and not for the roles. The 64-host run is a benchmark, not this test.
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

from provision.state.lifecycle import NodeState
from provision.state.store import StateStore
from tests.conftest import example_text, run_cli
from tests.sshd import SSHD, USER, LoopbackSshd, hand_to_login_user, login_user_sudo, start_all, stop
from tests.stores import recorded_run

HOSTS = 16
BASTION = "127.0.0.90"
ADDRESSES = {f"sim{index:02d}": f"127.0.0.{100 + index}" for index in range(1, HOSTS + 1)}
PASSWORD = "fanout-staple-7c1e"
BECOME = {"PROVISION_BECOME_PASSWORD": PASSWORD}
#: Not the kernel the simulated hosts run (5.15.0-112-generic): the preflight role refuses each host at once.
OTHER_KERNEL = "5.15.0-999-generic"
CONNECTION_WORDS = ("unreachable", "connection", "ssh", "timed out", "lost", "ours")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(SSHD) or not shutil.which("sudo"),
                                reason="needs root, OpenSSH's sshd and sudo (make test installs them)")


@pytest.fixture(scope="module")
def fleet():
    work = Path(tempfile.mkdtemp(prefix="provision-fanout-", dir="/tmp"))
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        servers = LoopbackSshd(work, {"bastion": BASTION, **ADDRESSES}, max_startups_at={"bastion": "3:50:6"},
                               logged=("bastion",))
        with login_user_sudo(PASSWORD):
            start_all(servers, {"bastion": BASTION, **ADDRESSES}, daemons)
            data = yaml.safe_load(example_text())
            data["nodes"]["groups"][0]["hosts"] = f"sim[01-{HOSTS}]"
            data["nodes"]["groups"][0]["address_start"] = ADDRESSES["sim01"]
            data["connection"] = {**servers.connection(forks=HOSTS, become_password_env=next(iter(BECOME))),
                                  "jump_host": f"{USER}@{BASTION}:{servers.port}"}
            data["burnin"]["stages"] = ["preflight"]
            for key in ("dcgm", "soak"):  # each read by its stage alone
                data["burnin"].pop(key, None)
            data["simulation"] = {"seed": 11, "faults": []}
            spec = work / "spec.yaml"
            spec.write_text(yaml.safe_dump(data, sort_keys=False))
            assert run_cli("apply", str(spec), "--phases", "simulate,register").returncode == 0
            state = work / ".provision" / "sim16"
            hand_to_login_user(state, list(ADDRESSES))
            yield spec, state, servers
    finally:
        stop(daemons)
        shutil.rmtree(work, ignore_errors=True)


def test_a_play_reaches_every_host_through_one_bastion_login(fleet) -> None:
    spec, state, servers = fleet
    data = yaml.safe_load(spec.read_text())
    data["software"]["kernel"] = OTHER_KERNEL
    pinned = spec.parent / "spec-other-kernel.yaml"
    pinned.write_text(yaml.safe_dump(data, sort_keys=False))
    before = servers.logins("bastion")
    result = run_cli("apply", "--json", str(pinned), "--state-dir", str(state), "--phases", "provision",
                     timeout=600, env=BECOME)
    assert result.returncode == 1, result.stdout + result.stderr
    record = json.loads((Path(json.loads(result.stdout)["run_dir"]) / "provision.json").read_text())
    assert sorted(row["host"] for row in record) == sorted(ADDRESSES)
    for row in record:
        assert not row.get("unreachable"), row
        assert OTHER_KERNEL in json.dumps(row), row  # refused by its own kernel, not lost on the way
    assert servers.logins("bastion") - before == 1, "one master connection to the bastion for the play"
    # plan's check-mode play sudoes with the same password: each host refused by its kernel, none for want of it
    planned = run_cli("plan", str(pinned), "--state-dir", str(state), "--phases", "provision", "--limit",
                      "sim[01-02]", timeout=300, env=BECOME)
    assert "sudo password" not in planned.stdout + planned.stderr, planned.stdout + planned.stderr
    assert planned.stdout.count(OTHER_KERNEL) >= 2, planned.stdout + planned.stderr


def test_a_campaign_measures_every_host_through_one_bastion_login(fleet) -> None:
    spec, state, servers = fleet
    with StateStore(state) as store:  # the roles are not what this test pays for: the store says they ran
        setup = recorded_run(store, "apply")
        for host in ADDRESSES:
            store.transition(host, NodeState.PROVISIONED, run_id=setup, reason="test: connections only")
    before = servers.logins("bastion")
    result = run_cli("burnin", "--json", str(spec), "--state-dir", str(state), timeout=600, env=BECOME)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    payload = json.loads(result.stdout)
    assert payload.get("nodes"), result.stdout + result.stderr
    verdicts = json.loads((Path(payload["run_dir"]) / "burnin-preflight.json").read_text())
    assert sorted(verdict["node"] for verdict in verdicts) == sorted(ADDRESSES)
    for verdict in verdicts:
        outcomes = {row["check"]: row for row in verdict["results"]}
        # judged as root on the node itself (lspci's capability blocks need a working sudo over the session)
        assert outcomes["acs"]["outcome"] == "ok" and outcomes["ib_ports"]["outcome"] == "ok", verdict["node"]
        assert outcomes["driver"]["outcome"] != "ok", "unprovisioned: no driver, the node's own measurement"
        unknown = [row for row in verdict["results"] if row["outcome"] == "unknown"]
        assert not [row for row in unknown if any(word in row["message"].lower() for word in CONNECTION_WORDS)], \
            unknown
    assert servers.logins("bastion") - before == 1, "one connection to the bastion for the whole campaign"
