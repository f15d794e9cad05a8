"""`provision topology audit` on the simulated as-built fabric: exactly the injected cabling faults, rules named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SHARED_FIXTURES, run_cli
from tests.simhelpers import write_spec

CABLE_FAULTS = [
    # the cables of sim01's rail-0 and rail-1 HCAs crossed: both land on the other rail's leaf
    {"kind": "miswired_cable", "target": "leaf-su01-r0/1", "params": {"partner": "leaf-su01-r1/1"}},
    {"kind": "missing_cable", "target": "spine-g03-02/4"},
    {"kind": "ib_link_low_rate", "node": "sim06", "target": "mlx5_4", "params": {"rate": "HDR"}},
]


def test_audit_reports_exactly_the_injected_cabling_faults(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, CABLE_FAULTS, hosts="sim[01-16]")
    assert run_cli("sim", "up", str(spec)).returncode == 0
    result = run_cli("topology", "audit", "--json", str(spec))
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["counts"] == {"miswired": 2, "missing": 1, "port_down": 0, "degraded": 1, "extra": 0}
    by_category: dict[str, list[dict]] = {}
    for cable in report["cables"]:
        by_category.setdefault(cable["category"], []).append(cable)
    swapped = {cable["expected"]: cable for cable in by_category["miswired"]}
    first = swapped["sim01/sim01 mlx5_0 - leaf-su01-r0/1"]
    assert first["actual"] == "leaf-su01-r1/1 - sim01/sim01 mlx5_0" or first["actual"].endswith("leaf-su01-r1/1")
    assert first["swap_partner"] == "sim01/sim01 mlx5_3 - leaf-su01-r1/1"  # rail 1 is mlx5_3 in this spec
    assert "rail_alignment" in first["rules"]
    missing = by_category["missing"][0]
    assert "spine-g03-02/4" in missing["expected"]
    assert {"even_uplinks", "non_blocking"} <= set(missing["rules"])
    degraded = by_category["degraded"][0]
    assert "sim06 mlx5_4" in degraded["expected"] and "running at HDR, designed NDR" in degraded["detail"]
    assert report["rules"]["rail_alignment"] and report["rules"]["disjoint_paths"]


def test_a_clean_simulated_fabric_audits_clean(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [], hosts="sim[01-16]")
    assert run_cli("sim", "up", str(spec)).returncode == 0
    result = run_cli("topology", "audit", str(spec))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("No problems")


def test_cable_fault_targets_must_exist_in_the_design(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [{"kind": "missing_cable", "target": "spine-g03-02/44"},
                                 {"kind": "miswired_cable", "target": "leaf-su01-r0/1",
                                  "params": {"partner": "leaf-su9-r1/1"}}], hosts="sim[01-16]")
    result = run_cli("validate", str(spec))
    assert result.returncode == 2
    assert "simulation.faults[0].target: no cable at spine-g03-02/44 in the designed fabric (spine-g03-02 has " \
           "ports 1-8)" in result.stderr
    assert "simulation.faults[1].params.partner: no cable at leaf-su9-r1/1" in result.stderr


@pytest.mark.skipif(not SHARED_FIXTURES.is_dir(), reason="needs ../shared/fixtures")
def test_audit_with_explicit_plans_reproduces_ufm() -> None:
    ufm = SHARED_FIXTURES / "ufm_ndt"
    result = run_cli("topology", "audit", "--json",
                     "--design", str(ufm / "positive_flow_ndts/switch_to_host_topo1.ndt"),
                     "--design", str(ufm / "positive_flow_ndts/switch_to_switch_topo2.ndt"),
                     "--observed", str(ufm / "positive_flow_ibnetdiscover/ibnetdiscover_director.txt"))
    assert result.returncode == 1
    counts = json.loads(result.stdout)["counts"]
    assert (counts["miswired"], counts["missing"], counts["extra"]) == (2, 2, 107)
    bad = run_cli("topology", "audit", "--design", str(ufm / "negative_flow_ndts/incorrect_ports.ndt"),
                  "--observed", str(ufm / "positive_flow_ibnetdiscover/ibnetdiscover_director.txt"))
    assert bad.returncode == 2 and "cannot read port" in bad.stderr
    not_a_dump = run_cli("topology", "audit", "--design", str(ufm / "positive_flow_ndts/switch_to_host_topo1.ndt"),
                         "--observed", str(ufm / "positive_flow_ndts/switch_to_host_topo1.ndt"))
    assert not_a_dump.returncode == 2 and "not ibnetdiscover output" in not_a_dump.stderr


def test_baseline_after_a_cable_repair_says_fixed_still_broken_newly_broken(tmp_path: Path) -> None:
    from provision.sim import cluster

    before_spec = write_spec(tmp_path, CABLE_FAULTS, hosts="sim[01-16]")
    assert run_cli("sim", "up", str(before_spec)).returncode == 0
    dump = cluster.sim_dir(tmp_path / ".provision" / "sim16") / "fabric" / "ibnetdiscover.txt"
    old = tmp_path / "before.txt"
    old.write_text(dump.read_text())
    # the technician fixes the crossed cables, reseats the spine cable into the wrong port, leaves sim06 alone
    repaired = [{"kind": "miswired_cable", "target": "spine-g03-02/4", "params": {"partner": "spine-g03-02/5"}},
                CABLE_FAULTS[2]]
    after_spec = write_spec(tmp_path, repaired, hosts="sim[01-16]")
    assert run_cli("sim", "up", str(after_spec)).returncode == 0
    result = run_cli("topology", "audit", "--json", str(after_spec), "--baseline", str(old))
    assert result.returncode == 1, result.stderr
    change = json.loads(result.stdout)
    assert {f["category"] for f in change["fixed"]} == {"miswired", "missing"}
    assert len(change["fixed"]) == 3
    assert [f["category"] for f in change["newly_broken"]] == ["miswired", "miswired"], change["newly_broken"]
    assert change["still_broken"] == []
    assert [f["category"] for f in change["untouched"]] == ["degraded"]  # sim06's HDR link: not touched
    assert len(change["cables_added"]) == 4 and len(change["cables_removed"]) == 3


def test_duplicate_hca_descriptions_are_refused_with_their_lines(tmp_path: Path) -> None:
    from provision.sim import cluster

    spec = write_spec(tmp_path, [], hosts="sim[01-16]")
    assert run_cli("sim", "up", str(spec)).returncode == 0
    dump = cluster.sim_dir(tmp_path / ".provision" / "sim16") / "fabric" / "ibnetdiscover.txt"
    broken = tmp_path / "duplicate.txt"
    broken.write_text(dump.read_text().replace('# "sim02 mlx5_0"', '# "sim01 mlx5_0"'))
    result = run_cli("topology", "audit", str(spec), "--observed", str(broken))
    assert result.returncode == 2
    assert "node description 'sim01 mlx5_0'" in result.stderr and "(line " in result.stderr
    truncated = tmp_path / "truncated.txt"
    truncated.write_text(dump.read_text()[: len(dump.read_text()) // 4])  # cut mid-dump, mid-line
    partial = run_cli("topology", "audit", "--json", str(spec), "--observed", str(truncated))
    assert partial.returncode == 1 and json.loads(partial.stdout)["counts"]["missing"] > 0


def test_a_guid_map_names_hcas_that_kept_the_vendor_description(tmp_path: Path) -> None:
    """Without rdma-ndd every HCA says 'MT4129 ConnectX7 Mellanox Technologies'; a node-name map names them."""
    import re

    from provision.sim import cluster

    spec = write_spec(tmp_path, [], hosts="sim[01-16]")
    assert run_cli("sim", "up", str(spec)).returncode == 0
    dump = (cluster.sim_dir(tmp_path / ".provision" / "sim16") / "fabric" / "ibnetdiscover.txt").read_text()
    named = dict(re.findall(r'^Ca\s+\d+\s+"H-([0-9a-f]{16})"\s+# "([^"]+)"', dump, flags=re.M))
    assert len(named) == 16 * 8
    anonymous = tmp_path / "vendor-descriptions.txt"
    anonymous.write_text(re.sub(r'# "sim\d\d mlx5_\d+"', '# "MT4129 ConnectX7   Mellanox Technologies"', dump))
    guid_map = tmp_path / "node-name-map"
    guid_map.write_text("# ibnetdiscover --node-name-map\n" + "".join(
        f'0x{guid} "{name}"\n' for guid, name in named.items()))
    unnamed = run_cli("topology", "audit", "--json", str(spec), "--observed", str(anonymous))
    assert unnamed.returncode == 1
    assert "128 HCAs share the node description 'MT4129 ConnectX7   Mellanox Technologies'" in unnamed.stderr
    assert json.loads(unnamed.stdout)["counts"]["miswired"] == 16 * 8  # every leaf reaches an unknown HCA
    mapped = run_cli("topology", "audit", "--json", str(spec), "--observed", str(anonymous),
                     "--guid-map", str(guid_map))
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr
    assert "share the node description" not in mapped.stderr
    assert sum(json.loads(mapped.stdout)["counts"].values()) == 0
    empty = tmp_path / "empty.map"
    empty.write_text("# nothing here\n")
    refused = run_cli("topology", "audit", str(spec), "--observed", str(anonymous), "--guid-map", str(empty))
    assert refused.returncode == 2 and "no GUID map entries" in refused.stderr
