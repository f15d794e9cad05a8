"""The dcgm stage end to end on the simulated cluster: DCGM installed and started by the dcgm role, preflight's
check of its host engine, and ``dcgmi diag -r 4 -j`` on every node at once, each fault found only under DCGM's
load failing its own test on its own GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provision.facts.dcgm import parse_diag
from provision.spec.faults import CATALOG
from tests.conftest import run_cli
from tests.simhelpers import SimHost, provision, shrink_to_four_gpus, write_spec

FAULTS = [
    {"kind": "gpu_memory_mismatch", "node": "sim02", "target": "gpu1"},
    {"kind": "gpu_power_low", "node": "sim03", "target": "gpu2", "params": {"max_w": 380.0}},
    {"kind": "pcie_replays", "node": "sim04", "target": "gpu3"},
]
GPU_NAMED = {"sim02": "GPU 1", "sim03": "GPU 2", "sim04": "GPU 3"}


@pytest.fixture(scope="module")
def burned_in(tmp_path_factory: pytest.TempPathFactory) -> dict:
    spec = shrink_to_four_gpus(write_spec(tmp_path_factory.mktemp("dcgm"), FAULTS, hosts="sim[01-05]",
                                          stages=["preflight", "dcgm"],
                                          admission={"max_failure_percent": {"burnin": 100}}))
    data = yaml.safe_load(spec.read_text())
    data["burnin"]["dcgm"] = {"level": 4}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    provision(spec)
    state_dir = spec.parent / ".provision" / data["cluster"]["name"]
    SimHost(state_dir, "sim05").run("systemctl", "stop", "nvidia-dcgm")  # the host engine stopped since
    result = run_cli("burnin", str(spec), "--json", timeout=600)
    assert result.stdout, result.stderr
    payload = json.loads(result.stdout)
    return {"rc": result.returncode, "run_dir": Path(payload["run_dir"]),
            "nodes": {row["node"]: row for row in payload["nodes"]}}


def test_a_healthy_node_passes_every_test_of_level_four_and_is_admitted(burned_in: dict) -> None:
    assert burned_in["nodes"]["sim01"]["state"] == "admitted", burned_in["nodes"]["sim01"]
    report = parse_diag((burned_in["run_dir"] / "dcgm" / "sim01.json").read_text())  # the evidence, as printed
    assert {test.plugin for test in report.tests} >= {"software", "memtest", "pulse_test", "targeted_power"}


@pytest.mark.parametrize("fault", FAULTS, ids=lambda fault: fault["kind"])
def test_what_only_dcgms_load_finds_fails_its_test_on_its_gpu(burned_in: dict, fault: dict) -> None:
    kind = CATALOG[fault["kind"]]
    node = burned_in["nodes"][fault["node"]]
    assert (node["state"], node["stage"], node["check"]) == ("quarantined", kind.stage, kind.check), node
    assert GPU_NAMED[fault["node"]] in node["reason"], node["reason"]


def test_a_host_engine_that_stopped_fails_preflight_before_the_diagnostic(burned_in: dict) -> None:
    node = burned_in["nodes"]["sim05"]
    assert (node["state"], node["stage"], node["check"]) == ("quarantined", "preflight", "dcgm"), node
    assert "host engine does not answer" in node["reason"]
    assert not (burned_in["run_dir"] / "dcgm" / "sim05.json").exists()
