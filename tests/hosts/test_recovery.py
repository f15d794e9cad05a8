"""A host that does not come back from its reboot is power-cycled through its BMC and finishes provisioning; with
its BMC unreachable it is quarantined as unreachable, with both facts in its evidence.

sim02 runs the wrong driver (so the play reboots it into the pinned one) and hangs on that reboot
(``reboot_hang``). The BMCs are ``provision sim bmcs``: a sushy-tools Redfish emulator per node on 127.0.0.N,
behind the spec's credentials, whose power the simulator applies to its host (Off powers it off, On boots it).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import redfish
from tests.conftest import run_cli
from tests.simhelpers import write_spec

pytestmark = pytest.mark.skipif(redfish.available() is not None, reason=str(redfish.available()))
USER, PASSWORD = "admin", "sim-bmc-0451"
FAULTS = [{"kind": "wrong_driver", "node": "sim02"}, {"kind": "reboot_hang", "node": "sim02"}]
PHASES = "simulate,register,provision"


def _spec(directory: Path, hosts: str = "sim[01-02]") -> Path:
    spec = write_spec(directory, FAULTS, hosts=hosts,  # a budget that lets one host of two fail
                      admission={"max_failure_percent": {"provision": 50, "burnin": 50}})
    data = yaml.safe_load(spec.read_text())
    data["nodes"]["groups"][0]["bmc_address_start"] = "127.0.0.1"
    data["bmc"] = {"scheme": "http", "port": redfish.free_port("127.0.0.1"), "timeout_s": 40,
                   "credentials": {"username": {"env": "TEST_BMC_USERNAME"}, "password": {"file": "bmc-password"}}}
    data["host"] = {**data.get("host", {}), "reboot_timeout_s": 6}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    (directory / "bmc-password").write_text(PASSWORD + "\n")
    return spec


def _apply(spec: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    result = run_cli("apply", "--json", str(spec), "--phases", PHASES, env={"TEST_BMC_USERNAME": USER},
                     timeout=900)
    status = json.loads(run_cli("status", "--json", str(spec)).stdout)
    return result, {node["name"]: node for node in status["nodes"]}


def _node_history(spec: Path, node: str) -> list[dict]:
    return json.loads(run_cli("history", node, "--json", "--spec", str(spec)).stdout)["moves"]


def test_a_hung_host_is_power_cycled_through_its_bmc_and_provisioned(tmp_path: Path) -> None:
    spec = _spec(tmp_path, hosts="sim02")  # the hung host alone: the next test has a bystander carry on beside it
    with redfish.serving_spec(spec, 1, {"TEST_BMC_USERNAME": USER}):
        result, nodes = _apply(spec)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert {name: node["state"] for name, node in nodes.items()} == {"sim02": "provisioned"}
        cycled = [entry for entry in _node_history(spec, "sim02") if entry["to"] == "provisioned"]
        steps = cycled[-1]["evidence"]["power_cycled"]["steps"]
        assert [step.split(":")[0] for step in steps] == ["ForceOff", "On"]


def test_with_its_bmc_unreachable_a_hung_host_is_quarantined_with_both_facts(tmp_path: Path) -> None:
    spec = _spec(tmp_path)  # no emulator is running: every BMC address refuses the connection
    result, nodes = _apply(spec)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert nodes["sim01"]["state"] == "provisioned"
    assert nodes["sim02"]["state"] == "quarantined"
    port = yaml.safe_load(spec.read_text())["bmc"]["port"]
    last = _node_history(spec, "sim02")[-1]
    reason = last["reason"]
    assert last["evidence"]["bmc"]["ok"] is False and last["evidence"]["failed_task"] == "Wait for a new boot id"
    assert reason.startswith("unreachable: did not come back from its reboot within 6 s (Wait for a new boot id); "
                             f"BMC: BMC unreachable at http://127.0.0.2:{port}/redfish/v1"), reason
