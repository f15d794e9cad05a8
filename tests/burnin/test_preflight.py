"""Burn-in preflight end to end: each node-layer fault is caught by the check its catalog entry names.

Seven hosts of the session's cluster provisioned through the real playbooks (four GPUs and rails each), two faults
on most struck in service, burned in through the CLI: every fault must show in its host's verdict, and the healthy
host must be admitted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.burnin.preflight import check_node
from provision.checks import preflight
from provision.checks.outcome import Outcome
from provision.sim import cluster
from provision.sim.host import inject_now
from provision.spec import load_spec
from provision.spec.faults import CATALOG
from tests.conftest import run_cli
from tests.simhelpers import provision, shrink_to_four_gpus, write_spec

FAULTS = [
    {"kind": "pcie_downtrained", "node": "sim02", "target": "mlx5_4", "params": {"width": 8}},
    {"kind": "disk_full", "node": "sim02", "params": {"mount": "/", "percent": 99}},
    {"kind": "ecc_uncorrectable", "node": "sim03", "target": "gpu1"},
    {"kind": "pcie_downtrained", "node": "sim03", "target": "gpu3", "params": {"width": 4}},
    {"kind": "xid", "node": "sim04", "target": "gpu2", "params": {"code": 79}},
    {"kind": "row_remap_pending", "node": "sim04", "target": "gpu3"},
    {"kind": "fabricmanager_down", "node": "sim04"},
    {"kind": "mig_enabled", "node": "sim03", "target": "gpu2"},
    {"kind": "application_clocks_low", "node": "sim02", "target": "gpu3"},
    {"kind": "thermal_throttle", "node": "sim05", "target": "gpu0"},
    {"kind": "hca_port_down", "node": "sim05", "target": "mlx5_5"},
    {"kind": "rails_swapped", "node": "sim05", "target": "mlx5_0", "params": {"with": "mlx5_3"}},
    {"kind": "ib_link_low_rate", "node": "sim06", "target": "mlx5_4", "params": {"rate": "HDR"}},
    {"kind": "unknown_kernel_log_line", "node": "sim06"},
    {"kind": "nvlink_errors_growing", "node": "sim06", "target": "gpu1", "params": {"link": 7}},
    {"kind": "xid", "node": "sim07", "target": "gpu3", "params": {"code": 13}},
]


@pytest.fixture(scope="module")
def burned_in(tmp_path_factory: pytest.TempPathFactory) -> dict:
    directory = tmp_path_factory.mktemp("preflight")
    # most of these hosts are faulty on purpose: lift the failure budget that would call it systemic
    spec = shrink_to_four_gpus(write_spec(directory, FAULTS, hosts="sim[01-07]", stages=["preflight"],
                                          admission={"max_failure_percent": {"burnin": 100}}))
    provision(spec)
    result = run_cli("burnin", str(spec), "--json", timeout=300)
    assert result.stdout, result.stderr
    payload = json.loads(result.stdout)
    verdicts = json.loads((Path(payload["run_dir"]) / "burnin-preflight.json").read_text())
    return {"spec": spec, "rc": result.returncode, "payload": payload,
            "nodes": {row["node"]: row for row in payload["nodes"]},
            "verdicts": {verdict["node"]: verdict for verdict in verdicts}}


def outcomes(verdict: dict) -> dict[str, str]:
    return {result["check"]: result["outcome"] for result in verdict["results"]}


def test_healthy_and_benign_hosts_are_admitted(burned_in: dict) -> None:
    assert burned_in["rc"] == 1  # some were quarantined
    assert burned_in["nodes"]["sim01"]["state"] == "admitted"
    assert set(outcomes(burned_in["verdicts"]["sim01"]).values()) == {"ok"}
    # a benign Xid warns, and warnings do not block admission by default
    assert burned_in["nodes"]["sim07"]["state"] == "admitted"
    assert outcomes(burned_in["verdicts"]["sim07"])["xid"] == "warning"


@pytest.mark.parametrize("fault", FAULTS[:-1], ids=lambda fault: f"{fault['kind']}-{fault['node']}")
def test_each_fault_is_caught_by_its_check(burned_in: dict, fault: dict) -> None:
    kind = CATALOG[fault["kind"]]
    node = burned_in["nodes"][fault["node"]]
    assert node["state"] == "quarantined"
    assert node["stage"] == kind.stage == "preflight"
    expected = "warning" if fault["kind"] == "unknown_kernel_log_line" else "failed"
    assert outcomes(burned_in["verdicts"][fault["node"]])[kind.check] == expected
    if expected == "failed":
        assert node["check"] in {check for check, outcome in outcomes(burned_in["verdicts"][fault["node"]]).items()
                                 if outcome == "failed"}


def test_unknown_kernel_line_quarantines_when_warnings_block(burned_in: dict) -> None:
    # sim06 carries a low-rate link too; its kernel-log finding is the warning with the line as evidence
    verdict = burned_in["verdicts"]["sim06"]
    kernel = next(result for result in verdict["results"] if result["check"] == "kernel_log")
    assert any("mce: [Hardware Error]" in line for line in kernel["evidence"])


def test_status_shows_the_quarantine_reasons(burned_in: dict) -> None:
    shown = run_cli("status", str(burned_in["spec"]), "--json")
    assert shown.returncode == 0
    nodes = {node["name"]: node for node in json.loads(shown.stdout)["nodes"]}
    assert nodes["sim04"]["state"] == "quarantined" and nodes["sim04"]["stage"] == "preflight"
    assert nodes["sim04"]["reason"].startswith("preflight/row_remap: ") and "(+2 more)" in nodes["sim04"]["reason"]


def test_a_gpu_lost_after_provisioning_fails_gpu_count(burned_in: dict) -> None:
    loaded = load_spec(burned_in["spec"])
    state_dir = burned_in["spec"].parent / ".provision" / loaded.spec.cluster.name
    node = next(node for node in loaded.nodes if node.name == "sim01")
    inject_now(cluster.node_paths(state_dir, "sim01").root.parent, "gpu_missing", "gpu3")
    results = {result.check: result for result in check_node(loaded, node, state_dir)}
    assert results["gpu_count"].outcome is Outcome.FAILED
    assert "3 GPUs visible" in results["gpu_count"].message


def test_many_failures_in_one_stage_stop_as_systemic(tmp_path: Path) -> None:
    spec = shrink_to_four_gpus(write_spec(tmp_path, [{"kind": "disk_full", "node": "sim01"},
                                                     {"kind": "disk_full", "node": "sim02"}], stages=["preflight"]))
    provision(spec)
    result = run_cli("burnin", str(spec), "--json", timeout=120)
    payload = json.loads(result.stdout)
    assert result.returncode == 1
    assert "systemic" in payload["stopped"] and "no node was quarantined" in payload["stopped"]
    assert {row["state"] for row in payload["nodes"]} == {"burning-in"}


def test_a_probe_that_cannot_run_is_unknown_never_ok() -> None:
    gathered = preflight.Gathered(problems={probe.name: f"{probe.name}: not found" for probe in preflight.PROBES})
    expect = preflight.Expectations(
        gpu_count=8, gpu_model="H100-SXM-80GB", driver="535.183.01", gpu_pcie=(5, 16), hca_pcie=(5, 16),
        rail_hcas=("mlx5_0",), link_gbps=400, nvlink_links=18, gpudirect="peermem", acs_disable=True,
        acs_scope="gpu_hca_paths", thresholds={"corrected_ecc": 1, "gpu_temperature_c": 84, "disk_usage_percent": 95},
        iommu="passthrough")
    results = preflight.evaluate(gathered, expect)
    by_check = {result.check: result.outcome for result in results}
    for check in ("gpu_count", "driver", "ecc", "row_remap", "xid", "kernel_log", "pcie_link", "acs", "ib_ports",
                  "nvlink", "throttle", "disk", "iommu"):
        assert by_check[check] is Outcome.UNKNOWN, check
