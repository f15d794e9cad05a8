"""HGX B200 hosts provisioned end to end on the simulated cluster from ``examples/hgx-b200.yaml``: the gpu_driver
role installs the pinned NVLSM and loads the modules its ConnectX bridge ports need before it starts the fabric
manager, preflight finds the fabric manager running and the baseboard's NVSwitch bridge (four functions in
``ibstat``, told by their VPD) none of the rails, and the hosts are admitted. The simulated host is as strict as the
board (field guide 8.1): its fabric manager exits once started while NVLSM cannot run, at a restart and at a boot
alike."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import ROOT, run_cli
from tests.simhelpers import SimHost


def _example_on_the_simulator(directory: Path) -> Path:
    """The HGX B200 example cut to two hosts on loopback, with the simulated cluster's repositories (and their
    keys) and connection; no runtime (the example's index_url is not reachable here)."""
    data = yaml.safe_load((ROOT / "examples" / "hgx-b200.yaml").read_text())
    example = yaml.safe_load((ROOT / "examples" / "sim-cluster.yaml").read_text())
    data["nodes"]["groups"][0].update(hosts="b200-[001-002]", address_start="127.0.30.1")
    data["software"]["repositories"] = [{**repository, "key": str((ROOT / "examples" / repository["key"]).resolve())}
                                        for repository in example["software"]["repositories"]]
    data["software"].pop("runtime")
    data["connection"] = example["connection"]
    data["burnin"].update(stages=["preflight"], workload=example["burnin"]["workload"])
    data["simulation"] = {"seed": 3, "faults": []}
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_b200_hosts_get_nvlsm_and_are_admitted_with_the_bridge_ports_no_rails(tmp_path: Path) -> None:
    spec = _example_on_the_simulator(tmp_path)
    applied = run_cli("apply", "--json", str(spec), timeout=600)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    status = {node["name"]: node for node in json.loads(run_cli("status", "--json", str(spec)).stdout)["nodes"]}
    assert {node: row["state"] for node, row in status.items()} == {"b200-001": "admitted", "b200-002": "admitted"}
    verdicts = json.loads((Path(json.loads(applied.stdout)["run_dir"]) / "burnin-preflight.json").read_text())
    for verdict in verdicts:
        results = {result["check"]: result for result in verdict["results"]}
        assert results["fabric_manager"]["outcome"] == "ok", results["fabric_manager"]
        bridge = results["nvswitch_bridge"]
        assert bridge["outcome"] == "ok", bridge
        assert "mlx5_8, mlx5_9, mlx5_10, mlx5_11 IB device(s), none a rail" in bridge["message"], bridge
        assert results["ib_ports"]["message"].startswith("8 rail ports ACTIVE"), results["ib_ports"]

    host = SimHost(tmp_path / ".provision" / "b200-512", "b200-001")
    shown = host.run("ibstat").stdout
    assert shown.count("CA '") == 12, shown  # the eight rails and the bridge's four functions
    assert "nvlsm" in host.run("dpkg-query", "-W", "nvlsm").stdout
    assert "ib_umad" in host.root.joinpath("proc", "modules").read_text()

    def active() -> str:
        shown = host.run("systemctl", "show", "nvidia-fabricmanager", "--property=ActiveState").stdout
        return shown.strip().split("=", 1)[1]

    assert active() == "active"
    host.run("modprobe", "-r", "ib_umad")  # the bridge ports' user MAD access gone: NVLSM cannot start
    host.run("systemctl", "restart", "nvidia-fabricmanager", check=False)
    assert active() == "failed"
    host.run("modprobe", "ib_umad")
    host.run("systemctl", "restart", "nvidia-fabricmanager")
    assert active() == "active"
