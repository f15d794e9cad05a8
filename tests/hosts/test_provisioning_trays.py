"""GB200 compute trays provisioned and burned in end to end on the simulated racks: the imex role installs IMEX at
the driver's version, writes the domain's peers and the channel option before the driver first loads, gpu_driver
starts the daemon and no fabric manager; preflight's tray checks then pass on a healthy tray, and a tray whose
daemon exits once started is provisioned and left to preflight's imex check (its catalogue stage), as a fabric
manager that dies is. The burn-in then judges the racks: a tray's own faults quarantine it at their stage and
check, a domain whose switch tray is degraded is slow with no tray to blame and its trays are held, none
quarantined, and a shrinking domain admits the trays that passed as a smaller domain, which Slurm's topology and
the report say."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from provision.checks import preflight, spec_expectations
from provision.checks.outcome import Outcome
from provision.hosts.remote import LocalSession
from provision.sim import cluster
from provision.spec import load_spec
from tests.conftest import ROOT, run_cli
from tests.sim.test_nvl72 import RACKS, tray_spec
from tests.simhelpers import SimHost


def _provisionable(directory: Path, faults: list[dict]) -> Path:
    """The six-tray rack with the simulated cluster's repositories (and their keys) and connection; no runtime
    (the GB200 example's index_url is not reachable here: the simulated node's own Python runs the burn-in)."""
    spec = tray_spec(directory, faults)
    data = yaml.safe_load(spec.read_text())
    for group, start in zip(data["nodes"]["groups"], ("127.0.20.1", "127.0.20.11"), strict=True):
        group["address_start"] = start  # loopback: the burn-in's workers rendezvous at these addresses
    example = yaml.safe_load((ROOT / "examples" / "sim-cluster.yaml").read_text())
    data["software"]["repositories"] = [{**repository, "key": str((ROOT / "examples" / repository["key"]).resolve())}
                                        for repository in example["software"]["repositories"]]
    data["software"].pop("runtime", None)
    data["connection"] = example["connection"]
    data["burnin"].update(stages=["preflight", "nvlink_domain"], ranks_per_node=2,
                          workload=example["burnin"]["workload"])
    data["burnin"].pop("soak")  # read by the soak stage only: refused without it
    data["admission"] = {"max_failure_percent": {"burnin": 50}}  # two trays of six fail on their own faults
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def test_trays_get_imex_with_their_domains_peers_and_no_fabric_manager_and_burn_in_as_racks(tmp_path: Path) -> None:
    spec = _provisionable(tmp_path, [{"kind": "imex_down", "node": "gb006"},
                                     {"kind": "fabric_unhealthy", "node": "gb003", "target": "gpu1"},
                                     {"kind": "degraded_switch_tray", "node": "gb004"}])
    applied = run_cli("apply", "--json", str(spec), "--phases", "simulate,register,provision", timeout=900)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    loaded = load_spec(spec)
    state = tmp_path / ".provision" / loaded.spec.cluster.name
    addresses = {node.name: node.address for node in loaded.nodes}
    for trays in RACKS.values():
        for tray in trays:
            host = SimHost(state, tray)
            peers = host.root.joinpath("etc/nvidia-imex/nodes_config.cfg").read_text().split()
            assert peers == [addresses[other] for other in trays], tray
            assert host.root.joinpath("dev/nvidia-caps-imex-channels/channel0").exists(), tray
            assert "nvidia-fabricmanager" not in host.run("dpkg-query", "-W", check=False).stdout, tray
    status = {row["name"]: row for row in json.loads(run_cli("status", "--json", str(spec)).stdout)["nodes"]}
    assert {row["state"] for row in status.values()} == {"provisioned"}, status
    node = next(node for node in loaded.nodes if node.name == "gb001")
    host = SimHost(state, "gb001")
    session = LocalSession("gb001", host.root, cluster.environment(host.paths))
    expect = spec_expectations.expectations(loaded, node)
    results = {result.check: result for result in preflight.evaluate(
        preflight.collect(session, 30, platform="nvl72"), expect)}
    for check in ("gpu_fabric", "platform", "imex", "imex_peers", "imex_channel", "arch", "driver"):
        assert results[check].outcome is Outcome.OK, (check, results[check])
    shown = SimHost(state, "gb006").run("systemctl", "show", "nvidia-imex", "--property=ActiveState").stdout
    assert shown.strip() == "ActiveState=failed"

    _burned_in_as_racks(spec, state)


def _burned_in_as_racks(spec: Path, state: Path) -> None:
    """rack1 (shrink, min_trays 2): gb003's GPU fabric unhealthy, the other two admitted as an 8-GPU domain. rack2
    (hold): gb006's IMEX down; the rack's degraded switch tray makes its domain slow beside rack1 with no tray to
    blame, so gb004 and gb005 are held in burning-in, named with the domain's finding, and none is quarantined."""
    burned = run_cli("burnin", "--json", str(spec), timeout=600)
    assert burned.returncode == 1, burned.stdout + burned.stderr
    summary = burned.stdout[-3000:]
    nodes = {row["name"]: row for row in json.loads(run_cli("status", "--json", str(spec)).stdout)["nodes"]}
    assert {name: row["state"] for name, row in nodes.items()} == {
        "gb001": "admitted", "gb002": "admitted", "gb003": "quarantined", "gb004": "burning-in",
        "gb005": "burning-in", "gb006": "quarantined"}, (nodes, summary)
    assert nodes["gb003"]["stage"] == "preflight" and "gpu_fabric" in nodes["gb003"]["reason"]
    assert nodes["gb006"]["stage"] == "preflight" and "imex" in nodes["gb006"]["reason"]
    for tray in ("gb004", "gb005"):
        reason = nodes[tray]["reason"]
        assert nodes[tray]["stage"] == "nvlink_domain", nodes[tray]
        assert "waits on its NVLink domain: its NVLink domain is slow with no tray to blame: rack2" in reason, reason
    domains = json.loads(next(state.glob("runs/*/workers/nvlink-domains/nvlink-domains.json")).read_text())
    assert [(entry["domain"], entry["trays"], bool(entry["slow"])) for entry in domains] == [
        ("rack1", ["gb001", "gb002"], False), ("rack2", ["gb004", "gb005"], True)], domains
    topology = run_cli("topology", "slurm", str(spec), "--admitted")
    assert topology.returncode == 0, topology.stderr
    assert "BlockName=rack1 Nodes=gb[001-002]" in topology.stdout, topology.stdout
    assert "# rack1: degraded: 2 of 3 trays admitted, a domain of 8 GPUs" in topology.stdout
    assert "BlockName=rack2" not in topology.stdout
