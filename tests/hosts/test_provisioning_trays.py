"""GB200 compute trays provisioned end to end on the simulated rack: the imex role installs IMEX at the driver's
version, writes the domain's peers and the channel option before the driver first loads, gpu_driver starts the
daemon and no fabric manager; preflight's tray checks then pass on a healthy tray, and a tray whose daemon exits
once started is provisioned and left to preflight's imex check (its catalogue stage), as a fabric manager that
dies is. Burning trays in is still refused (tests/spec/test_nvlink_domains.py)."""

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
    example = yaml.safe_load((ROOT / "examples" / "sim-cluster.yaml").read_text())
    data["software"]["repositories"] = [{**repository, "key": str((ROOT / "examples" / repository["key"]).resolve())}
                                        for repository in example["software"]["repositories"]]
    data["software"].pop("runtime", None)
    data["connection"] = example["connection"]
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def test_trays_get_imex_with_their_domains_peers_and_no_fabric_manager(tmp_path: Path) -> None:
    spec = _provisionable(tmp_path, [{"kind": "imex_down", "node": "gb006"}])
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
