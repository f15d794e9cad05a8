"""The pairs stage end to end on the simulated cluster: real ib_write_bw stand-in pairs moving bytes over
loopback through the nodes' sessions, a degraded cable on a host and two between switches, and the link
tomography naming each; then ``provision topology flaps`` reads the simulated fabric's event log and counters
(a flapping cable) and the burn-in's results, and names exactly the injected cables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests import browser
from tests.conftest import run_cli
from tests.simhelpers import processes_of, provision_then_burn_in, shrink_to_four_gpus, write_spec

HOST_CABLE = "leaf-su01-r2/3 - sim03/mlx5_4/1"
FLAPPING = "leaf-su01-r0/5 - spine-g01-01/1"
FABRIC_CABLES = {"leaf-su02-r1/6 - spine-g01-02/6", "leaf-su01-r1/7 - spine-g01-03/2"}
FAULTS = [
    {"kind": "degraded_link", "target": "leaf-su02-r1/6", "params": {"factor": 0.5}},
    {"kind": "degraded_link", "target": "spine-g01-03/2", "params": {"factor": 0.4}},
    {"kind": "degraded_link", "target": "leaf-su01-r2/3", "params": {"factor": 0.6}},  # sim03's mlx5_4 cable
    {"kind": "flapping_cable", "target": "leaf-su01-r0/5", "params": {"flaps_per_hour": 2}},
]


@pytest.fixture(scope="module")
def burned_in(tmp_path_factory: pytest.TempPathFactory) -> dict:
    spec = shrink_to_four_gpus(write_spec(tmp_path_factory.mktemp("pairs"), FAULTS, hosts="sim[01-08]",
                                          stages=["preflight", "pairs"],
                                          admission={"max_failure_percent": {"burnin": 100}}),
                               pair_message_bytes=1 << 20, pair_iters=20)
    outcome = provision_then_burn_in(spec)
    return {**outcome, "report": json.loads((outcome["run_dir"] / "pairs-report.json").read_text())}


def test_the_host_with_the_degraded_cable_is_quarantined_and_only_it(burned_in: dict) -> None:
    assert burned_in["rc"] == 1
    sim03 = burned_in["nodes"]["sim03"]
    assert sim03["state"] == "quarantined" and sim03["stage"] == "pairs"
    assert "pairs/pair_bandwidth" in sim03["reason"] and HOST_CABLE in sim03["reason"]
    others = {name: row["state"] for name, row in burned_in["nodes"].items() if name != "sim03"}
    assert set(others.values()) == {"admitted"}, others


def test_switch_cables_are_fabric_findings_not_node_failures(burned_in: dict) -> None:
    report = burned_in["report"]
    assert {finding["cable"] for finding in report["fabric_suspects"]} == FABRIC_CABLES
    assert all(finding["evidence"] for finding in report["fabric_suspects"])
    assert report["unexplained"] == []
    coverage = report["coverage"]
    assert coverage["covered"] == coverage["switch_cables_coverable"] > 0
    assert set(burned_in["payload"]["fabric_findings"]) == FABRIC_CABLES
    assert "2 fabric cable(s) named by the pair tests" in burned_in["payload"]["summary"]


def test_results_are_in_the_format_tomography_reads_and_no_test_process_is_left(burned_in: dict) -> None:
    results = json.loads((burned_in["run_dir"] / "pairs-results.json").read_text())
    # routed, and so named, by the simulated subnet manager's own tables: the report says so of every cable
    assert results["routing"] == "tables" and len(results["tests"]) >= 16
    routing = burned_in["report"]["routing"]
    assert routing == "the subnet manager's forwarding tables (opensm-lfts.dump)", routing
    assert all(finding["routing"] == routing for finding in burned_in["report"]["fabric_suspects"])
    slow = [test for test in results["tests"] if not test["passed"]]
    assert slow and all(test["gbps"] < test["threshold_gbps"] for test in slow)
    left = [command for command in processes_of(burned_in["spec"].parent)
            if "ib_write_bw" in command or "fabric_tests.perftest" in command]
    assert not left, left


def test_flaps_on_events_counters_and_burn_in_results_names_exactly_the_injected_cables(burned_in: dict,
                                                                                        tmp_path: Path) -> None:
    result = run_cli("topology", "flaps", str(burned_in["spec"]), "--json", "--actions", str(tmp_path / "actions"),
                     timeout=120)
    assert result.returncode == 1, result.stderr
    suspects = {row["cable"]: row for row in json.loads(result.stdout)["suspects"]}
    assert set(suspects) == FABRIC_CABLES | {HOST_CABLE, FLAPPING}
    assert suspects[FLAPPING]["class"] == "flapping" and suspects[FLAPPING]["flaps_in_window"] >= 40
    assert {suspects[cable]["class"] for cable in FABRIC_CABLES | {HOST_CABLE}} == {"degraded"}
    assert all(any("tomography" in line for line in suspects[cable]["evidence"]) for cable in FABRIC_CABLES)
    for cable in FABRIC_CABLES:  # the burn-in's finding is on the cable's record
        assert suspects[cable]["history"]["earlier_findings"] == 1
    payloads = json.loads((tmp_path / "actions" / "disable_ports.ufm.json").read_text())
    # both switch ends of every switch cable, the leaf end of the host's cable (its HCA leaves with the node)
    assert sorted(payload["description"].split(" cable ")[-1] for payload in payloads) == sorted(
        [*FABRIC_CABLES, FLAPPING] * 2 + [HOST_CABLE])
    commands = (tmp_path / "actions" / "disable_ports.sh").read_text().splitlines()
    assert sum(line.startswith("ibportstate -G ") and line.endswith(" disable") for line in commands) == 7
    tickets = sorted(path.name for path in (tmp_path / "actions" / "tickets").iterdir())
    assert len(tickets) == 4


def test_recheck_after_repair_tests_only_the_cables_routes(burned_in: dict) -> None:
    """Last in the module: it repairs the simulated cable (drops the fault, `sim up`) and puts it back after."""
    spec = burned_in["spec"]
    degraded, healthy = "spine-g01-03/2", "spine-g01-01/5"
    before = run_cli("topology", "recheck", str(spec), degraded, healthy, "--json", timeout=300)
    assert before.returncode == 1, before.stdout + before.stderr
    rows = {row["cable"].split(" - ")[-1] if "spine-g01-03/2" in row["cable"] else "healthy": row
            for row in json.loads(before.stdout)["cables"]}
    assert rows["spine-g01-03/2"]["verdict"] == "still_bad" and rows["healthy"]["verdict"] == "healthy"
    assert all(line.startswith("recheck: ") and "->" in line for line in rows["spine-g01-03/2"]["evidence"])
    assert len(rows["spine-g01-03/2"]["evidence"]) <= 3  # a few flows through the cable, not a burn-in

    original = spec.read_text()
    repaired = spec.with_name("repaired.yaml")  # the same cluster with the cable fixed
    data = yaml.safe_load(original)
    data["simulation"]["faults"] = [fault for fault in data["simulation"]["faults"]
                                    if fault.get("target") != degraded]
    repaired.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        assert run_cli("sim", "up", str(repaired), timeout=300).returncode == 0
        assert run_cli("topology", "repaired", str(repaired), degraded, "--action", "reseat").returncode == 0
        after = run_cli("topology", "recheck", str(repaired), degraded, "--json", timeout=300)
        assert after.returncode == 0, after.stdout + after.stderr
        assert [row["verdict"] for row in json.loads(after.stdout)["cables"]] == ["healthy"]
    finally:
        assert run_cli("sim", "up", str(spec), timeout=300).returncode == 0


@pytest.mark.skipif(not browser.available(), reason=browser.MISSING)
def test_the_report_shows_the_pair_heatmap_and_the_located_cables(burned_in: dict, tmp_path: Path) -> None:
    html = tmp_path / "acceptance.html"
    result = run_cli("report", str(burned_in["spec"]), "--output", str(html), timeout=120)
    assert result.returncode == 0 and str(html) in result.stdout, result.stderr
    seen = browser.open_report(html, "report-pairs")
    assert seen.console_errors == [] and seen.requests == [html.resolve().as_uri()]
    assert seen.cards == ["sim03"]
    heatmap = next(plot for plot in seen.plots if plot["title"] == "slowest pair test per host pair and rail")
    assert heatmap["declared"] == heatmap["drawn"] == heatmap["visible"] > 0 and heatmap["flagged"] >= 1
    rows = (tmp_path / "acceptance.pairs.csv").read_text().splitlines()
    results = json.loads((burned_in["run_dir"] / "pairs-results.json").read_text())["tests"]
    assert len(rows) - 1 == len(results) and sum(row.endswith(",False") for row in rows) == sum(
        not test["passed"] for test in results)
    for cable in FABRIC_CABLES:
        assert cable in seen.text
    figures = json.loads((tmp_path / "acceptance.cables.json").read_text())
    assert {row["cable"] for row in figures["located_by_burnin"]} == FABRIC_CABLES
