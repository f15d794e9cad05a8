"""The provisioning failure budget acts: ``admission.max_failure_percent.provision`` reaches the play (a play
keyword sees extra vars, not inventory vars — it was silently 100%), and a host whose play the budget stopped is
not recorded ``provisioned``: it stays where it was, and the next apply takes it."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import run_cli
from tests.simhelpers import write_spec


def _states(spec: Path) -> dict[str, str]:
    return {node["name"]: node["state"] for node in json.loads(run_cli("status", "--json", str(spec)).stdout)["nodes"]}


def test_a_failure_over_the_budget_stops_the_play_and_leaves_the_others_for_the_next_apply(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [{"kind": "pin_unavailable", "node": "sim02"}], hosts="sim[01-04]",
                      admission={"max_failure_percent": {"provision": 10, "burnin": 10}})
    data = yaml.safe_load(spec.read_text())
    data["connection"]["forks"] = 1
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    phases = "simulate,register,provision"

    first = run_cli("apply", "--json", str(spec), "--phases", phases, timeout=900)
    assert first.returncode == 1, first.stdout[-2000:] + first.stderr[-2000:]
    report = {phase["phase"]: phase for phase in json.loads(first.stdout)["phases"]}["provision"]
    assert report["failed"] == ["sim02"] and sorted(report["stopped"]) == ["sim01", "sim03", "sim04"], report
    assert "10% provisioning failure budget" in report["summary"]
    states = _states(spec)
    assert states == {"sim01": "new", "sim02": "quarantined", "sim03": "new", "sim04": "new"}

    # the operator sets the broken host aside; the next apply provisions the others
    assert run_cli("drain", "sim02", "--reason", "mirror lacks the pinned driver", "--spec", str(spec)).returncode == 0
    second = run_cli("apply", "--json", str(spec), "--phases", phases, timeout=900)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    states = _states(spec)
    assert states == {"sim01": "provisioned", "sim02": "drained", "sim03": "provisioned", "sim04": "provisioned"}
