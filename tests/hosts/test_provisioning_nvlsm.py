"""An HGX B200 host provisioned end to end on the simulated cluster: the gpu_driver role installs the pinned NVLSM
and loads the modules its ConnectX bridge ports need before it starts the fabric manager, and preflight finds the
fabric manager running. The simulated host is as strict as the board (field guide 8.1): its fabric manager exits
once started while NVLSM cannot run, at a restart and at a boot alike."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import run_cli
from tests.simhelpers import SimHost, write_spec


def test_a_b200_host_gets_nvlsm_and_its_fabric_manager_stays_up_only_with_it(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [], hosts="sim01", stages=["preflight"])
    data = yaml.safe_load(spec.read_text())
    data["hardware"]["hgx-h100"]["gpu"]["model"] = "B200-SXM-180GB"
    data["software"].update(gpu_driver="570.172.08", cuda="12.8", nvlsm="2025.06.5")
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    applied = run_cli("apply", "--json", str(spec), "--phases", "simulate,register,provision,burnin", timeout=600)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    status = {node["name"]: node for node in json.loads(run_cli("status", "--json", str(spec)).stdout)["nodes"]}
    assert status["sim01"]["state"] == "admitted", status["sim01"]
    verdicts = json.loads((Path(json.loads(applied.stdout)["run_dir"]) / "burnin-preflight.json").read_text())
    manager = next(result for result in verdicts[0]["results"] if result["check"] == "fabric_manager")
    assert manager["outcome"] == "ok", manager

    host = SimHost(tmp_path / ".provision" / "sim16", "sim01")
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
