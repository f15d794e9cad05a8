"""The provisioning failure budget acts: ``admission.max_failure_percent.provision`` reaches the play (a play
keyword sees extra vars, not inventory vars — it was silently 100%), and a host whose play the budget stopped is
not recorded ``provisioned``: it stays where it was, and the next apply takes it. The host that failed is a
per-host failure with the package manager's words, and nothing of the pinned driver is half installed on it."""

from __future__ import annotations

import json
from pathlib import Path

from provision.facts.packages import parse_dpkg_status
from tests.conftest import run_cli
from tests.simhelpers import SimHost, write_spec


def _states(spec: Path) -> dict[str, str]:
    return {node["name"]: node["state"] for node in json.loads(run_cli("status", "--json", str(spec)).stdout)["nodes"]}


def test_a_failure_over_the_budget_stops_the_play_and_leaves_the_others_for_the_next_apply(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [{"kind": "pin_unavailable", "node": "sim02"}], hosts="sim[01-03]",
                      admission={"max_failure_percent": {"provision": 10, "burnin": 10}})
    phases = "simulate,register,provision"

    first = run_cli("apply", "--json", str(spec), "--phases", phases, timeout=900)
    assert first.returncode == 1, first.stdout[-2000:] + first.stderr[-2000:]
    report = {phase["phase"]: phase for phase in json.loads(first.stdout)["phases"]}["provision"]
    assert report["failed"] == ["sim02"] and sorted(report["stopped"]) == ["sim01", "sim03"], report
    assert "10% provisioning failure budget" in report["summary"]
    nodes = {node["name"]: node for node in json.loads(run_cli("status", "--json", str(spec)).stdout)["nodes"]}
    assert {name: node["state"] for name, node in nodes.items()} == {
        "sim01": "new", "sim02": "quarantined", "sim03": "new"}
    reason = nodes["sim02"]["reason"]
    assert nodes["sim02"]["stage"] == "provision", nodes["sim02"]
    assert reason.startswith("task failed: Install and hold the pinned driver packages"), reason
    assert "Version '535.183.01*' for 'nvidia-driver-535' was not found" in reason, reason
    host = SimHost(tmp_path / ".provision" / "sim16", "sim02")
    packages = parse_dpkg_status((host.root / "var/lib/dpkg/status").read_text())
    assert not [name for name in packages if name.startswith(("nvidia-driver", "nvidia-utils"))], packages

    # the operator sets the broken host aside; the next apply provisions the others
    assert run_cli("drain", "sim02", "--reason", "mirror lacks the pinned driver", "--spec", str(spec)).returncode == 0
    second = run_cli("apply", "--json", str(spec), "--phases", phases, timeout=900)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    states = _states(spec)
    assert states == {"sim01": "provisioned", "sim02": "drained", "sim03": "provisioned"}
