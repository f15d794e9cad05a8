"""Routes and hop distances: SuperBench's topology-aware pairing is an independent oracle."""

from __future__ import annotations

import networkx as nx
import pytest

from tests.conftest import SHARED_FIXTURES
from topology.design import FabricParameters, dimension
from topology.fattree import HostRails, build_design
from topology.ibnetdiscover import parse, parse_guid_map
from topology.routes import hop_distances, pairings_by_distance, route

pytestmark = pytest.mark.fast  # pure: part of make test-fast

SUPERBENCH = SHARED_FIXTURES / "superbench"


@pytest.mark.skipif(not SHARED_FIXTURES.is_dir(), reason="needs ../shared/fixtures")
def test_superbench_topology_aware_pairing() -> None:
    discovery = parse((SUPERBENCH / "ib_traffic_topo_aware_ibnetdiscover.txt").read_text())
    guid_to_host = parse_guid_map((SUPERBENCH / "ib_traffic_topo_aware_ibstat.txt").read_text())
    hosts = (SUPERBENCH / "ib_traffic_topo_aware_hostfile").read_text().split()
    graph = nx.Graph()
    graph.add_edges_from((link.a[0], link.b[0]) for link in discovery.links.values())
    node_of = {host: f"H-{guid}" for guid, host in guid_to_host.items()}
    by_node = hop_distances(graph, [node_of[host] for host in hosts])
    distance = {host: {other: by_node[node_of[host]][node_of[other]] for other in hosts} for host in hosts}
    assert sorted({d for row in distance.values() for d in row.values()}) == [0, 2, 4, 6]
    rounds = pairings_by_distance(hosts, distance, [2, 4, 6])
    expected = [[tuple(int(x) for x in pair.split(",")) for pair in line.split(";")]
                for line in (SUPERBENCH / "ib_traffic_topo_aware_expected_config").read_text().split()]
    assert rounds == expected


def _fabric(hosts: int, per_su: int, radix: int):
    dims = dimension(FabricParameters(hosts=hosts, rails=8, hosts_per_su=per_su, switch_radix=radix))
    return build_design(dims, [HostRails(f"h{i:04d}", tuple(f"mlx5_{r}" for r in range(8))) for i in range(hosts)],
                        per_su, 8)


def test_route_multiplicity_and_shares_in_a_three_tier_tree() -> None:
    fabric = _fabric(16, 4, 8)  # rail planes: 4 spines per group, 4 cores per plane
    same_leaf = route(fabric, "h0000/mlx5_0", "h0001/mlx5_0")
    assert (same_leaf.hops, same_leaf.paths) == (2, 1)
    cross_su = route(fabric, "h0000/mlx5_0", "h0004/mlx5_0")
    assert cross_su.hops == 4 and cross_su.paths == 4  # up to any of the 4 spines of the rail group
    assert sum(share for pair, share in cross_su.link_share.items() if "leaf-su01-r0" in pair) == pytest.approx(2.0)
    cross_rail = route(fabric, "h0000/mlx5_0", "h0004/mlx5_1")
    assert cross_rail.hops == 6 and cross_rail.paths == 16  # 4 spines x 4 cores of each plane
    for pair, share in cross_rail.link_share.items():
        assert 0 < share <= 1.0 + 1e-9, pair


def test_parallel_cables_multiply_the_paths() -> None:
    fabric = _fabric(128, 32, 64)  # two tiers: 16 spines, 2 parallel cables from every leaf to each
    result = route(fabric, "h0000/mlx5_0", "h0100/mlx5_0")
    assert result.hops == 4 and result.paths == 16 * 2 * 2
    spine_bundles = [share for pair, share in result.link_share.items() if any("spine" in end for end in pair)]
    assert len(spine_bundles) == 32 and all(share == pytest.approx(1 / 16) for share in spine_bundles)


def test_no_route_between_disconnected_nodes() -> None:
    fabric = _fabric(16, 4, 8)
    for port in range(5, 9):
        fabric.remove_cable(fabric.cable_at(("leaf-su01-r0", port)))
    assert route(fabric, "h0000/mlx5_0", "h0004/mlx5_0") is None
    assert route(fabric, "h0000/mlx5_0", "h0001/mlx5_0").hops == 2
