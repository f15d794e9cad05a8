"""``provision power status | cycle`` against real Redfish BMCs: sushy-tools' emulator, one per node on its own
loopback address, behind basic authentication. The emulator applies a power change 1-11 s after it is asked,
so a cycle really waits for each state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import redfish
from tests.conftest import run_cli

pytestmark = pytest.mark.skipif(redfish.available() is not None, reason=str(redfish.available()))
USER, PASSWORD = "root", "calvin-7f3a91"


@pytest.fixture
def cluster(sim_spec: Path, tmp_path: Path):
    port = redfish.free_port("127.0.0.1")
    text = sim_spec.read_text().replace(
        "      address_start: 127.0.0.11", "      bmc_address_start: 127.0.0.1\n      address_start: 127.0.0.11", 1)
    text += (f"\nbmc:\n  scheme: http\n  port: {port}\n  timeout_s: 40\n  credentials:\n"
             "    username: {env: TEST_BMC_USERNAME}\n    password: {file: bmc-password}\n")
    sim_spec.write_text(text)
    (sim_spec.parent / "bmc-password").write_text(PASSWORD + "\n")
    nodes = {"sim01": "127.0.0.1", "sim02": "127.0.0.2", "sim03": "127.0.0.3"}
    with redfish.bmcs(tmp_path / "bmcs", nodes, username=USER, password=PASSWORD, port=port) as paths:
        yield sim_spec, port, paths


def _power(*args: str) -> tuple[int, dict, str]:
    result = run_cli("power", *args, "--json", env={"TEST_BMC_USERNAME": USER}, timeout=180)
    return result.returncode, json.loads(result.stdout) if result.stdout.strip() else {}, result.stderr


def test_power_status_reads_each_bmc_and_names_the_unreachable_one(cluster) -> None:
    spec, port, _paths = cluster
    code, payload, stderr = _power("status", str(spec), "--limit", "sim[01-04]")
    assert code == 1, stderr
    rows = {row["node"]: row for row in payload["nodes"]}
    assert all(rows[name]["ok"] and rows[name]["state"] == "on" for name in ("sim01", "sim02", "sim03"))
    assert not rows["sim04"]["ok"] and rows["sim04"]["state"] == "unknown"
    assert rows["sim04"]["detail"].startswith(f"BMC unreachable at http://127.0.0.4:{port}/redfish/v1")


def test_power_cycle_waits_for_off_then_on_and_is_recorded(cluster) -> None:
    spec, port, paths = cluster
    code, payload, stderr = _power("cycle", str(spec), "sim02")
    assert code == 0, stderr
    [row] = payload["nodes"]
    assert row["ok"] and row["state"] == "on"
    assert [step.split(":")[0] for step in row["steps"]] == ["ForceOff", "On"]
    assert redfish.power_state("127.0.0.2", port, paths["sim02"], USER, PASSWORD) == "On"
    log = (spec.parent / "bmcs" / "sim02" / "emulator.log").read_text()
    assert log.count("ComputerSystem.Reset") == 2, "one ForceOff and one On reached the BMC"
    runs = spec.parent / ".provision" / "sim16" / "runs"
    recorded = "".join(path.read_text(errors="replace") for path in runs.rglob("*") if path.is_file())
    assert "power-cycle" in recorded and PASSWORD not in recorded, "the run is recorded, the password is not"


def test_wrong_credentials_are_a_per_node_refusal(cluster) -> None:
    spec, _port, _paths = cluster
    (spec.parent / "bmc-password").write_text("wrong\n")
    code, payload, stderr = _power("status", str(spec), "--limit", "sim01")
    assert code == 1, stderr
    assert payload["nodes"][0]["detail"] == "the BMC refused the credentials: HTTP 401"
    assert "wrong" not in json.dumps(payload) + stderr
