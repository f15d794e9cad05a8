"""Conformance with UFM's cabling-check oracle, and every real ibnetdiscover dump parses.

UFM's own test data: the two positive NDT plans (host-switch and switch-switch, the latter full of director
ports) against the ``sat11`` director fabric must give exactly the oracle's miss-wired, missing-in-fabric and
missing-in-plan sets. Compared as sets of unordered cables, case-insensitively: the oracle's order is
arbitrary and its expected/actual labels are not consistent between entries.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SHARED_FIXTURES
from topology.audit import Link, compare, discovered_links
from topology.cabling import PlanError, parse_plan
from topology.ibnetdiscover import DumpError, parse

pytestmark = [pytest.mark.fast, pytest.mark.skipif(not SHARED_FIXTURES.is_dir(),
                                reason="the real-output fixtures live in ../shared/fixtures, absent in this clone")]
UFM = SHARED_FIXTURES / "ufm_ndt"


def _oracle_cable(text: str) -> frozenset[tuple[str, str]]:
    def endpoint(side: str) -> tuple[str, str]:
        node, port = side.split("/", 1)
        return node.strip().lower(), port.strip().lower()

    first, second = text.split(" - ")
    return frozenset((endpoint(first), endpoint(second)))


def test_ufm_cabling_check_oracle() -> None:
    discovery = parse((UFM / "positive_flow_ibnetdiscover/ibnetdiscover_director.txt").read_text())
    plan = [*parse_plan((UFM / "positive_flow_ndts/switch_to_host_topo1.ndt").read_text()),
            *parse_plan((UFM / "positive_flow_ndts/switch_to_switch_topo2.ndt").read_text())]
    assert len(plan) == 2223 + 3195  # the switch-switch plan lists every cable in both directions
    findings = compare([Link(cable.a, cable.b) for cable in plan], discovered_links(discovery))
    oracle = json.loads((UFM / "expected_report.json").read_text())["report"]

    got_miswired = {frozenset((frozenset(f.expected), frozenset(f.actual))) for f in findings
                    if f.category == "miswired"}
    want_miswired = {frozenset((_oracle_cable(entry["expected"]), _oracle_cable(entry["actual"])))
                     for entry in oracle["miss_wired"]}
    assert got_miswired == want_miswired
    assert {frozenset(f.expected) for f in findings if f.category == "missing"} == \
        {_oracle_cable(entry) for entry in oracle["missing_in_ufm"]}
    assert {frozenset(f.actual) for f in findings if f.category == "extra"} == \
        {_oracle_cable(entry) for entry in oracle["missing_in_ndt"]}
    assert not [f for f in findings if f.category not in ("miswired", "missing", "extra")]


@pytest.mark.parametrize("name", ["garbage.ndt", "incorrect_columns.ndt", "incorrect_ports.ndt"])
def test_broken_plans_are_refused_with_a_line(name: str) -> None:
    with pytest.raises(PlanError) as caught:
        parse_plan((UFM / "negative_flow_ndts" / name).read_text())
    assert caught.value.line >= 1


ALL_DUMPS = sorted([*SHARED_FIXTURES.glob("ibsim/net-examples/net*"),
                    *SHARED_FIXTURES.glob("infiniband_exporter/ibnetdiscover/*.out"),
                    SHARED_FIXTURES / "hpc_toolset/infiniband/X5.topofile",
                    SHARED_FIXTURES / "superbench/ib_traffic_topo_aware_ibnetdiscover.txt",
                    UFM / "positive_flow_ibnetdiscover/ibnetdiscover_director.txt"]) if SHARED_FIXTURES.is_dir() else []


@pytest.mark.parametrize("path", ALL_DUMPS, ids=lambda p: p.name)
def test_every_real_dump_parses(path: Path) -> None:
    discovery = parse(path.read_text(errors="replace"))
    assert discovery.nodes
    for link in discovery.links.values():
        assert {link.a[0], link.b[0]} <= set(discovery.nodes)
    assert len(discovery.skipped) <= 2  # at most the PuTTY banner and the CLI prompt


def test_director_dump_facts() -> None:
    discovery = parse((UFM / "positive_flow_ibnetdiscover/ibnetdiscover_director.txt").read_text())
    kinds = [node.kind for node in discovery.nodes.values()]
    assert (kinds.count("switch"), kinds.count("ca")) == (400, 2328)
    speeds = [link.speed for link in discovery.links.values()]
    assert (speeds.count("HDR"), speeds.count("EDR")) == (8719, 4)
    directors = {node.system_name.lower() for node in discovery.nodes.values() if "MCS8500" in node.asic}
    assert len(directors) == 4
    assert sum(1 for n in discovery.nodes.values() if "  " in n.description and n.kind == "ca") == 103


def test_ports_format_quirks() -> None:
    discovery = parse((SHARED_FIXTURES / "infiniband_exporter/ibnetdiscover/test2.out").read_text())
    padded = [node.description for node in discovery.nodes.values() if "spine-IB02" in node.description]
    assert padded == ["5FB0406-spine-IB02"]
    assert any(state == "4x ???" or state.endswith("SDR") for _n, _p, state in discovery.down_ports)


@pytest.mark.parametrize("text", ["", "hello world\n", "[1] \"S-01\"[2]\n"])
def test_non_dumps_are_refused(text: str) -> None:
    with pytest.raises(DumpError):
        parse(text)
