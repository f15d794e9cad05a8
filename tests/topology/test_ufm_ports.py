"""UFM names a port by its cage (``1/36/1``), and what number that is depends on the switch: one port a cage on
HDR (MQM8700 leaves, MCS8500 director ASICs: 40 ports), two on NDR and HDR100 split. A label read the NDR way on
an HDR leaf named port 71 (no such port: the event was dropped as unmatched) or, worse, another real cable. The
line's own ``<guid>:<port>`` comes first; a label is read by the switch's generation as the fabric shows it."""

from __future__ import annotations

import pytest

from provision.network.cable_health import add_port_counts
from tests.conftest import SHARED_FIXTURES
from topology.cabling import node_device
from topology.ibnetdiscover import parse
from topology.linkhealth import Evidence, add_event_log, resolve_label
from topology.model import HCA, LEAF, SPINE, Cable, Fabric
from topology.ufm_events import label_ports, parse_event_log

pytestmark = pytest.mark.fast


def _fabric() -> Fabric:
    """An HDR leaf (40 ports, one a cage) with a host on port 18 and a spine on port 35 and 36; an NDR leaf."""
    fabric = Fabric()
    fabric.add_node("hdr-leaf", LEAF, tier=1)
    fabric.add_node("hdr-spine", SPINE, tier=2)
    fabric.add_node("ndr-leaf", LEAF, tier=1)
    fabric.add_node("gpu01/mlx5_0", HCA, host="gpu01", hca="mlx5_0")
    fabric.add_node("gpu02/mlx5_0", HCA, host="gpu02", hca="mlx5_0")
    fabric.add_cable(Cable(("gpu01/mlx5_0", 1), ("hdr-leaf", 18), "HDR"))
    fabric.add_cable(Cable(("hdr-leaf", 35), ("hdr-spine", 3), "HDR"))
    fabric.add_cable(Cable(("hdr-leaf", 36), ("hdr-spine", 4), "HDR"))
    fabric.add_cable(Cable(("gpu02/mlx5_0", 1), ("ndr-leaf", 36), "NDR"))
    return fabric


def _line(code: int, device: str, label: str, message: str) -> str:
    return (f"2026-11-02 13:45:01.123 [101] [{code}] WARNING [Hardware] IB Port [Default / Switch: {device} / "
            f"{label}] [dev_id: 0x98039b0300a1b2c3]: {message}")


def _matched(fabric: Fabric, *lines: str) -> tuple[list[str], list[str]]:
    evidence = Evidence()
    add_event_log(evidence, fabric, parse_event_log("\n".join(lines) + "\n"))
    return [observation.cable.label() for observation in evidence.observations], [u.where for u in evidence.unmatched]


def test_a_label_means_one_port_a_cage_on_hdr_and_two_on_ndr() -> None:
    assert label_ports("1/36/1") == (36, 71) and label_ports("1/18/2") == (None, 36) and label_ports("7") == (7, 7)
    fabric = _fabric()
    assert resolve_label(fabric, "hdr-leaf", "1/18/1") == 18  # not 35, the spine cable beside it
    assert resolve_label(fabric, "ndr-leaf", "1/18/2") == 36 and resolve_label(fabric, "ndr-leaf", "1/18/1") == 35
    fabric.graph.nodes["hdr-leaf"]["ports"] = 40  # a port count from the dump settles it, and bounds it
    assert resolve_label(fabric, "hdr-leaf", "1/36/1") == 36 and resolve_label(fabric, "hdr-leaf", "1/41/1") is None


def test_a_threshold_event_on_an_hdr_leaf_names_the_hosts_cable_not_its_neighbour() -> None:
    found, unmatched = _matched(_fabric(), _line(112, "hdr-leaf", "1/18/1",
                                                 "Link Downed counter delta threshold exceeded."))
    assert (found, unmatched) == (["gpu01/mlx5_0/1 - hdr-leaf/18"], [])


@pytest.mark.parametrize("reporter", ["leaf", "spine"])
def test_a_link_down_is_named_whichever_end_reports_it(reporter: str) -> None:
    # UFM's 329 carries both ends as (Switch:<name>:<label>)<guid>:<port>: the numbers are the line's own
    ends = ("(Switch:hdr-leaf:1/36/1)0x98039b0300a1b2c3:36 - (Switch:hdr-spine:1/4/1)0x98039b0300d4e5f6:4, "
            "cable S/N: MT2233VS01234")
    device, label = ("hdr-leaf", "1/36/1") if reporter == "leaf" else ("hdr-spine", "1/4/1")
    found, unmatched = _matched(_fabric(), _line(329, device, label, f"Link went down: {ends}"))
    assert (found, unmatched) == (["hdr-leaf/36 - hdr-spine/4"], [])


def test_a_label_naming_no_port_of_the_switch_is_reported_with_its_line() -> None:
    fabric = _fabric()
    fabric.graph.nodes["hdr-leaf"]["ports"] = 40
    line = _line(702, "hdr-leaf", "1/41/1", "Peer Port hdr-leaf:1/41/1 is considered by SM as unhealthy due to "
                                            "FLAPPING.")
    found, unmatched = _matched(fabric, line)
    assert found == [] and unmatched == ["hdr-leaf 1/41/1: a port the switch does not have"]


@pytest.mark.skipif(not SHARED_FIXTURES.is_dir(), reason="the real-output fixtures live in ../shared/fixtures")
def test_the_director_dumps_hdr_switches_read_one_port_a_cage() -> None:
    """The sat11 director fabric (UFM's NDT test data): MQM8700 leaves and MCS8500 ASICs, ``Switch41`` headers.
    Given the dump, a leaf's ``1/36/1`` is its port 36, whatever the plan fabric's cables say of their rate."""
    discovery = parse((SHARED_FIXTURES / "ufm_ndt/positive_flow_ibnetdiscover/ibnetdiscover_director.txt").read_text())
    leaf = next(node for node in discovery.nodes.values() if node.kind == "switch" and "MQM8700" in node.asic)
    asic = next(node for node in discovery.nodes.values() if node.kind == "switch" and "MCS8500" in node.asic)
    fabric = Fabric()
    for node in (leaf, asic):
        fabric.add_node(node_device(node), LEAF, tier=1)
        fabric.add_cable(Cable((node_device(node), 35), (f"peer-of-{node_device(node)}", 1), ""))  # a plan: no rate
    assert resolve_label(fabric, node_device(leaf), "1/36/1") == 71  # no rate, no port count: read the NDR way
    add_port_counts(fabric, discovery)
    for node in (leaf, asic):
        assert fabric.graph.nodes[node_device(node)]["ports"] == 40
        assert resolve_label(fabric, node_device(node), "1/36/1") == 36
        assert resolve_label(fabric, node_device(node), "1/41/1") is None
