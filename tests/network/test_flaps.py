"""``provision topology flaps`` and ``repaired`` end to end on a simulated cluster's fabric history."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from provision.network.cable_health import cable_key
from provision.network.sources import design_fabric
from provision.spec import load_spec
from tests.conftest import run_cli
from tests.simhelpers import write_spec
from topology import routes, tomography

FLAPPING = "leaf-su01-r2/5"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("flaps")
    spec = write_spec(directory, [{"kind": "flapping_cable", "target": FLAPPING, "params": {"flaps_per_hour": 2}}],
                      hosts="sim[01-16]")
    state = directory / "state"
    result = run_cli("sim", "up", str(spec), "--state-dir", str(state))
    assert result.returncode == 0, result.stderr
    return spec, state


def flaps(spec: Path, state: Path, *extra: str):
    result = run_cli("topology", "flaps", str(spec), "--state-dir", str(state), "--json", *extra)
    return result, json.loads(result.stdout) if result.stdout.strip() else None


def test_flaps_names_exactly_the_injected_cable_with_its_evidence(cluster, tmp_path):
    spec, state = cluster
    result, report = flaps(spec, state, "--actions", str(tmp_path / "actions"))
    assert result.returncode == 1, result.stderr
    [suspect] = report["suspects"]
    fabric = design_fabric(load_spec(spec))
    node, port = FLAPPING.rsplit("/", 1)
    assert suspect["cable"] == cable_key(fabric.cable_at((node, int(port))))
    assert suspect["class"] == "flapping" and suspect["flaps_in_window"] == 48
    assert suspect["serial"].startswith("MT") and any("[329]" in line for line in suspect["evidence"])
    assert report["storms"] and report["storms"][0]["cables"] >= 8  # the simulated switch reboot, suppressed
    assert suspect["history"] == {"last_repair": None, "next_step": "reseat", "earlier_findings": 0}
    actions = tmp_path / "actions"
    script = (actions / "disable_ports.sh").read_text()
    assert script.count("ibportstate -G 0x") == 2 and f" {port} disable" in script
    payloads = json.loads((actions / "disable_ports.ufm.json").read_text())
    assert {payload["action"] for payload in payloads} == {"disable"} and len(payloads) == 2
    [ticket] = (actions / "tickets").iterdir()
    assert "next step: **reseat**" in ticket.read_text() and suspect["serial"] in ticket.read_text()
    recheck = json.loads((actions / "recheck.json").read_text())
    assert recheck[suspect["cable"]]


def test_a_repair_moves_the_ladder_and_counts_flaps_since(cluster):
    spec, state = cluster
    result = run_cli("topology", "repaired", str(spec), FLAPPING, "--action", "reseat", "--note", "T-1234",
                     "--state-dir", str(state))
    assert result.returncode == 0, result.stderr
    _, report = flaps(spec, state)
    history = report["suspects"][0]["history"]
    assert history["last_repair"]["action"] == "reseat" and history["next_step"] == "clean"
    assert history["flaps_since_repair"] == 0  # the simulated day ended before the repair was recorded
    assert run_cli("topology", "repaired", str(spec), "leaf-su01-r2/99", "--action", "clean", "--state-dir",
                   str(state)).returncode == 2


def test_bad_evidence_is_counted_not_fatal_and_bad_results_are_located(cluster, tmp_path):
    spec, state = cluster
    events = state / "sim" / "fabric" / "ufm" / "event.log"
    noisy = tmp_path / "event.log"
    noisy.write_text("garbage first line\n" + events.read_text() +
                     "2026-11-02 11:00:00.000 [1] [112] MINOR [Hardware] IB Port [Default / Switch: nowhere-9 / "
                     "1/1/1] [dev_id: 0x9]: Link Downed counter delta threshold exceeded.\n")
    result, report = flaps(spec, state, "--events", str(noisy))
    assert result.returncode == 1
    assert report["ingestion"][str(noisy)]["malformed"] == 1
    assert report["unmatched_total"] == 1 and report["unmatched"][0]["where"] == "nowhere-9/1"
    bad = tmp_path / "results.json"
    bad.write_text(json.dumps({"tests": [{"flows": [["sim01/mlx5_0", "sim99/mlx5_0"]], "passed": False}]}))
    result, _ = flaps(spec, state, "--results", str(bad))
    assert result.returncode == 2 and "tests[0]" in result.stderr and "sim99/mlx5_0" in result.stderr


def test_tomography_over_results_names_a_degraded_cable_no_event_mentions(cluster, tmp_path):
    spec, state = cluster
    fabric = design_fabric(load_spec(spec))
    router = routes.Router(fabric)
    rng = random.Random(5)
    bad = next(number for number, cable in enumerate(router.cables) if cable.a[0].startswith("spine"))
    localizer = tomography.Localizer(router, seed=5)
    tests = []

    def run(test: tomography.Test) -> bool:
        failed = bad in test.cables
        failed = (not failed) if rng.random() < 0.02 else failed
        tests.append({"flows": [list(flow) for flow in test.flows], "passed": not failed})
        return failed

    tomography.localize(localizer, run)
    results = tmp_path / "burnin-pairs.json"
    results.write_text(json.dumps({"routing": "dmodk", "tests": tests}))
    result, report = flaps(spec, state, "--results", str(results))
    assert result.returncode == 1, result.stderr
    degraded = [suspect for suspect in report["suspects"] if suspect["class"] == "degraded"]
    assert [suspect["cable"] for suspect in degraded] == [cable_key(router.cables[bad])]
    assert report["tomography"]["found"][0]["cable"] == cable_key(router.cables[bad])
    assert report["tomography"]["no_more_bad"] >= 0.99


def test_the_dump_adds_cables_it_shows_down_or_slower_than_designed(tmp_path):
    spec = write_spec(tmp_path, [{"kind": "ib_link_low_rate", "node": "sim02", "target": "mlx5_3",
                                  "params": {"rate": "HDR"}},
                                 {"kind": "hca_port_down", "node": "sim05", "target": "mlx5_0"}], hosts="sim[01-16]")
    state = tmp_path / "state"
    assert run_cli("sim", "up", str(spec), "--state-dir", str(state)).returncode == 0
    result, report = flaps(spec, state)
    assert result.returncode == 1, result.stderr
    classes = {suspect["cable"]: suspect["class"] for suspect in report["suspects"]}
    fabric = design_fabric(load_spec(spec))
    assert classes == {cable_key(fabric.cable_at(("sim02/mlx5_3", 1))): "degraded",
                       cable_key(fabric.cable_at(("sim05/mlx5_0", 1))): "down"}


def test_execute_disables_both_switch_ends_and_reads_them_back(tmp_path):
    """--execute runs the disable list from a host (ibportstate over the simulated fabric): each port must read
    back PhysLinkState Disabled; the disabled cable leaves the fabric's sweep until its ports are enabled."""
    from provision.facts.ibportstate import final_state
    from tests.simhelpers import SimHost

    spec = write_spec(tmp_path, [{"kind": "flapping_cable", "target": FLAPPING, "params": {"flaps_per_hour": 2}}],
                      hosts="sim[01-16]")
    state = tmp_path / "state"
    assert run_cli("sim", "up", str(spec), "--state-dir", str(state)).returncode == 0
    refused = run_cli("topology", "flaps", str(spec), "--state-dir", str(state), "--execute")
    assert refused.returncode == 2 and "give --actions too" in refused.stderr
    result, report = flaps(spec, state, "--actions", str(tmp_path / "actions"), "--execute", "--via", "sim03")
    assert result.returncode == 1, result.stderr
    [suspect] = report["suspects"]
    assert [(row["result"], row["cable"]) for row in report["executed"]] == [("disabled", suspect["cable"])] * 2
    assert all(row["detail"] == "LinkState Down, PhysLinkState Disabled" for row in report["executed"])
    manifests = [json.loads((record / "manifest.json").read_text()) for record in (state / "runs").iterdir()]
    assert sorted(manifest["command"] for manifest in manifests) == ["disable-ports", "sim up"]  # each recorded
    [manifest] = [manifest for manifest in manifests if manifest["command"] == "disable-ports"]
    assert manifest["disable-ports"]["via"] == "sim03" and manifest["status"] == "succeeded"
    audit = json.loads(run_cli("topology", "audit", "--json", str(spec), "--state-dir", str(state)).stdout)
    assert [(cable["category"], cable["expected"]) for cable in audit["cables"]] == [
        ("missing", suspect["cable"].lower())]
    host = SimHost(state, "sim01")  # after the repair, by hand from any host
    for row in report["executed"]:
        enabled = host.run("ibportstate", "-G", row["guid"], str(row["port"]), "enable")
        assert final_state(enabled.stdout) == ("Active", "LinkUp")
    clean = run_cli("topology", "audit", "--json", str(spec), "--state-dir", str(state))
    assert clean.returncode == 0, clean.stdout
