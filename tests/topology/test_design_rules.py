"""The generated fat tree and its design rules: clean designs pass, each broken rule is named with its switch."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from tests.conftest import EXAMPLES, run_cli
from topology.design import FabricParameters, dimension
from topology.fattree import HostRails, build_design
from topology.model import HCA, LEAF, SPINE, Cable, Fabric
from topology.rules import bisection_gbps, check_all

pytestmark = pytest.mark.fast  # pure: part of make test-fast


def _design(hosts: int, hosts_per_su: int, radix: int, rails: int = 8) -> Fabric:
    dims = dimension(FabricParameters(hosts=hosts, rails=rails, hosts_per_su=hosts_per_su, switch_radix=radix))
    names = [HostRails(f"h{index:04d}", tuple(f"mlx5_{rail}" for rail in range(rails))) for index in range(hosts)]
    return build_design(dims, names, hosts_per_su, rails)


@pytest.mark.parametrize(("hosts", "per_su", "radix"), [(16, 4, 8), (128, 32, 64), (512, 32, 64)])
def test_designs_use_every_port_once_and_pass_every_rule(hosts: int, per_su: int, radix: int) -> None:
    fabric = _design(hosts, per_su, radix)
    for kind in (LEAF, SPINE):
        for switch in fabric.nodes_of(kind):
            ports = fabric.ports_of(switch)
            assert sorted(ports) == list(range(1, radix + 1)) or (kind == SPINE and len(ports) <= radix)
    assert all(violations == [] for violations in check_all(fabric).values())


def test_port_plan_host_ports_first_then_uplinks() -> None:
    fabric = _design(16, 4, 8)
    leaf = fabric.ports_of("leaf-su02-r3")
    assert [leaf[port] for port in range(1, 5)] == [(f"h{index:04d}/mlx5_3", 1) for index in range(4, 8)]
    assert {fabric.kind(peer) for port, (peer, _p) in leaf.items() if port > 4} == {SPINE}
    assert fabric.peer(("h0005/mlx5_3", 1)) == ("leaf-su02-r3", 2)


def _swap_ends(fabric: Fabric, first: Cable, second: Cable) -> None:
    """Cross two cables at their A ends, as a technician who swapped two plugs would."""
    fabric.remove_cable(first)
    fabric.remove_cable(second)
    fabric.add_cable(Cable(first.a, second.b))
    fabric.add_cable(Cable(second.a, first.b))


def test_rail_alignment_names_the_leaf_and_port() -> None:
    fabric = _design(16, 4, 8)
    _swap_ends(fabric, fabric.cable_at(("h0001/mlx5_0", 1)), fabric.cable_at(("h0001/mlx5_1", 1)))
    messages = [v.message for v in check_all(fabric)["rail_alignment"]]
    assert "h0001/mlx5_0 (rail 0, SU 1) lands on leaf-su01-r1 port 2, the rail-1 leaf of SU 1" in messages
    assert len(messages) == 2


def test_leaf_to_leaf_cables_are_refused() -> None:
    fabric = _design(16, 4, 8)
    spine_end = fabric.cable_at(("leaf-su01-r0", 5))
    fabric.remove_cable(spine_end)
    other = fabric.cable_at(("leaf-su02-r0", 5))
    fabric.remove_cable(other)
    fabric.add_cable(Cable(("leaf-su01-r0", 5), ("leaf-su02-r0", 5)))
    violations = check_all(fabric)
    assert [(v.switch, v.port) for v in violations["no_leaf_to_leaf"]] == [("leaf-su01-r0", 5)]
    assert violations["non_blocking"]  # the leaf-leaf cable replaced an uplink
    assert not violations["disjoint_paths"]  # ... but it is itself a path, so diversity holds


def test_uneven_uplinks_are_named() -> None:
    fabric = _design(128, 32, 64)  # 2 tiers: 16 spines, 2 uplinks from each leaf to each
    mine = fabric.cable_at(("leaf-su01-r0", 33))
    spine_a = mine.other(("leaf-su01-r0", 33))
    theirs = next(c for c in fabric.cables() if c.a[0] == "leaf-su02-r0" and c.b[0] != spine_a[0])
    spine_b = theirs.other(theirs.a)
    fabric.remove_cable(mine)
    fabric.remove_cable(theirs)
    fabric.add_cable(Cable(("leaf-su01-r0", 33), spine_b))  # now 3 to spine B, 1 to spine A
    fabric.add_cable(Cable(theirs.a, spine_a))
    uneven = [v.message for v in check_all(fabric)["even_uplinks"]]
    assert f"leaf-su01-r0 has 1 uplink(s) to {spine_a[0]} but 2 to each spine of group 1 is even" in uneven
    assert f"leaf-su01-r0 has 3 uplink(s) to {spine_b[0]} but 2 to each spine of group 1 is even" in uneven
    assert len(uneven) == 4  # and the mirror image on leaf-su02-r0


def test_bisection_is_computed_and_falls_with_missing_cables() -> None:
    fabric = _design(16, 4, 8)
    value, needed = bisection_gbps(fabric)
    assert value == needed == 8 * 400 * 8  # 8 hosts a side, 8 rails, 400 Gb/s
    for port in (5, 6, 7, 8):
        fabric.remove_cable(fabric.cable_at(("leaf-su01-r0", port)))
    value, needed = bisection_gbps(fabric)
    assert value == needed - 4 * 400
    assert check_all(fabric)["bisection"][0].rule == "bisection"


def test_oversubscribed_leaves_are_allowed_their_ratio() -> None:
    dims = dimension(FabricParameters(hosts=80, rails=2, hosts_per_su=40, switch_radix=64,
                                      oversubscription=Fraction(2)))
    fabric = build_design(dims, [HostRails(f"n{i}", ("mlx5_0", "mlx5_1")) for i in range(80)], 40, 2)
    assert check_all(fabric, oversubscription=Fraction(2))["non_blocking"] == []
    assert check_all(fabric)["non_blocking"], "at 1:1 the same leaves are blocking"
    assert not [n for n in fabric.nodes_of(HCA) if fabric.graph.degree(n) != 1]


def test_topology_check_cli() -> None:
    result = run_cli("topology", "check", "--json", str(EXAMPLES / "sim-cluster.yaml"))
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["cables"] == 384 and payload["bisection_gbps"] == payload["full_bisection_gbps"] == 25600
    assert all(not violations for violations in payload["rules"].values())


def test_a_leaf_short_of_an_uplink_is_named_once_for_its_own_uplinks() -> None:
    fabric = _design(16, 4, 8)
    uplink = next(port for port, (peer, _p) in fabric.ports_of("leaf-su02-r3").items() if fabric.kind(peer) == SPINE)
    fabric.remove_cable(fabric.cable_at(("leaf-su02-r3", uplink)))
    violations = check_all(fabric)["disjoint_paths"]
    assert [(v.switch, v.message) for v in violations] == [
        ("leaf-su02-r3", "leaf-su02-r3's own uplinks carry 3 link(s), designed 4: every same-rail path from it is "
                         "limited to that")], "the other rail-3 leaves reach it over 3 paths too, but it is its fault"


def test_a_short_middle_tier_is_named_on_the_leaves_it_limits() -> None:
    fabric = _design(32, 4, 8, rails=4)  # su_block groups: same-rail leaves of different groups meet at the cores
    group = fabric.graph.nodes["leaf-su01-r0"]["group"]
    spines = [node for node in fabric.nodes_of(SPINE) if fabric.graph.nodes[node]["group"] == group]
    upward = [cable for spine in spines for port, (peer, _p) in sorted(fabric.ports_of(spine).items())
              if fabric.kind(peer) not in (LEAF, SPINE) for cable in [fabric.cable_at((spine, port))]]
    for cable in upward[2:]:  # the group keeps two links to the cores; its leaves each have four uplinks
        fabric.remove_cable(cable)
    violations = check_all(fabric)["disjoint_paths"]
    assert violations and all("the spine or core tier is short" in v.message for v in violations)
    named = {v.switch for v in violations}
    assert "leaf-su01-r0" in named
    inside = {leaf for leaf in fabric.nodes_of(LEAF) if fabric.graph.nodes[leaf]["group"] == group}
    assert named == set(fabric.nodes_of(LEAF)), "every leaf has a same-rail partner across the short group"
    for violation in (v for v in violations if v.switch not in inside):  # outside, the partner named is inside
        assert any(f"same-rail leaf {leaf} " in violation.message for leaf in inside), violation.message


def test_the_flow_equivalent_tree_gives_every_same_rail_min_cut() -> None:
    """Gusfield over one rail's leaves only: each pair's min cut (the lightest edge on its tree path) equals a
    direct max flow between them, on a fabric with middle-tier cables removed at random."""
    import itertools
    import random

    import networkx as nx

    from topology.rules import _switch_capacity_graph, flow_equivalent_tree

    rng = random.Random(7)
    fabric = _design(32, 4, 8, rails=4)
    middle = [cable for cable in fabric.cables() if LEAF not in (fabric.kind(cable.a[0]), fabric.kind(cable.b[0]))
              and HCA not in (fabric.kind(cable.a[0]), fabric.kind(cable.b[0]))]
    for cable in rng.sample(middle, 2 * len(middle) // 3):
        fabric.remove_cable(cable)
    for missing, leaf in enumerate(rng.sample(fabric.nodes_of(LEAF), 6)):  # leaves short of 0..3 uplinks
        uplinks = [port for port, (peer, _p) in sorted(fabric.ports_of(leaf).items()) if fabric.kind(peer) == SPINE]
        for port in uplinks[: missing % 4]:
            fabric.remove_cable(fabric.cable_at((leaf, port)))
    graph = _switch_capacity_graph(fabric)
    cuts = set()
    for rail in {fabric.graph.nodes[node]["rail"] for node in fabric.nodes_of(LEAF)}:
        leaves = sorted(node for node in fabric.nodes_of(LEAF) if fabric.graph.nodes[node]["rail"] == rail)
        tree = flow_equivalent_tree(graph, leaves)
        for a, b in ((a, b) for index, a in enumerate(leaves) for b in leaves[index + 1:]):
            path = nx.shortest_path(tree, a, b)
            via_tree = min(tree[u][v]["weight"] for u, v in itertools.pairwise(path))
            direct = nx.maximum_flow_value(graph, a, b, capacity="capacity")
            assert via_tree == direct, (a, b)
            cuts.add(direct)
    assert len(cuts) > 2, "the removed cables must make pairs differ, or the test proves little"


def _damage(fabric: Fabric, rng, crossed: int, missing: int, slow: int, *, tiers=None) -> None:
    """Cabling faults as a delivery has them: crossed pairs, missing and slow (HDR) cables among switch cables."""
    cables = sorted((cable for cable in fabric.cables() if HCA not in (fabric.kind(cable.a[0]),
                                                                        fabric.kind(cable.b[0]))),
                    key=lambda cable: (cable.a, cable.b))
    if tiers is not None:
        cables = [cable for cable in cables if {fabric.kind(cable.a[0]), fabric.kind(cable.b[0])} == tiers]
    chosen = rng.sample(cables, 2 * crossed + missing + slow)
    for index in range(crossed):
        first, second = chosen[2 * index], chosen[2 * index + 1]
        fabric.remove_cable(first)
        fabric.remove_cable(second)
        fabric.add_cable(Cable(first.a, second.b, first.rate, first.width))
        fabric.add_cable(Cable(second.a, first.b, second.rate, second.width))
    for cable in chosen[2 * crossed:2 * crossed + missing]:
        fabric.remove_cable(cable)
    for cable in chosen[2 * crossed + missing:]:
        fabric.remove_cable(cable)
        fabric.add_cable(Cable(cable.a, cable.b, "HDR", cable.width))


@pytest.mark.parametrize("seed", range(6))
def test_the_plane_bound_settles_exactly_what_the_flow_tree_would(seed: int) -> None:
    """The disjoint-path rule with the per-plane bound (exact flows only for the pairs it cannot settle) names
    the same leaves, partners and path counts as the flow-equivalent tree over every rail, on fabrics damaged
    lightly (flows per pair) and heavily (the tree for the rail)."""
    import random

    from topology.rules import disjoint_paths

    rng = random.Random(seed)
    fabric = _design(32, 4, 8, rails=4)
    if seed % 3 == 0:
        _damage(fabric, rng, crossed=12, missing=30, slow=10)
    else:
        _damage(fabric, rng, crossed=2, missing=2, slow=2, tiers={LEAF, SPINE})
        _damage(fabric, rng, crossed=1, missing=3, slow=1, tiers={SPINE, "core"})
    if seed % 3 == 2:  # one group keeps a few links to the cores: pairs across it are short in the middle
        spines = [node for node in fabric.nodes_of(SPINE) if fabric.graph.nodes[node]["group"] == 1 + seed % 4]
        upward = [fabric.cable_at((spine, port)) for spine in spines
                  for port, (peer, _p) in sorted(fabric.ports_of(spine).items()) if fabric.kind(peer) == "core"]
        for cable in rng.sample(upward, len(upward) - 3):
            fabric.remove_cable(cable)
    settled = [(v.switch, v.message) for v in disjoint_paths(fabric)]
    reference = [(v.switch, v.message) for v in disjoint_paths(fabric, bounds=False)]
    assert settled == reference
    assert seed % 3 != 2 or any("the spine or core tier is short" in message for _leaf, message in reference)


@pytest.mark.parametrize(("hosts", "per_su", "radix", "rails"), [(16, 4, 8, 8), (128, 32, 64, 8), (512, 32, 64, 8),
                                                               (32, 4, 8, 4)])
def test_the_plane_bound_settles_every_pair_of_an_intact_fabric(hosts: int, per_su: int, radix: int,
                                                                 rails: int) -> None:
    from topology.pathbound import PlaneBounds
    from topology.rules import _switch_capacity_graph

    fabric = _design(hosts, per_su, radix, rails)
    graph = _switch_capacity_graph(fabric)
    bounds = PlaneBounds(fabric, graph)
    leaves = fabric.nodes_of(LEAF)
    assert not any(bounds.unusual.values())
    uplinks = {graph.degree(leaf, weight="capacity") for leaf in leaves}
    assert len(uplinks) == 1, "every leaf of a design has the same uplinks"
    assert {bounds.bound(a, b) for a in leaves for b in leaves if a != b} == uplinks


def test_max_flows_on_one_residual_network_match_networkx() -> None:
    import random

    import networkx as nx

    from topology.maxflow import ResidualNetwork

    rng = random.Random(3)
    graph = nx.gnm_random_graph(60, 240, seed=3)
    for u, v in graph.edges:
        graph[u][v]["capacity"] = float(rng.choice([100, 200, 400, 800]))
    network = ResidualNetwork(graph)
    for _ in range(40):
        a, b = rng.sample(range(60), 2)
        value = network.max_flow(a, b)
        assert value == nx.maximum_flow_value(graph, a, b, capacity="capacity")
        side = network.source_side(a)  # a minimum cut: its edges carry exactly the flow
        assert a in side and b not in side
        assert sum(data["capacity"] for u, v, data in graph.edges(data=True) if (u in side) != (v in side)) == value
        network.reset()
    assert not any(network.flow), "reset undoes every push"


def test_dinic_flow_value_matches_networkx_with_directed_terminal_arcs() -> None:
    """The bisection's single flow: undirected switch edges plus directed source and sink arcs."""
    import random

    import networkx as nx

    from topology.maxflow import max_flow_value

    rng = random.Random(5)
    for seed in range(12):
        graph = nx.gnm_random_graph(50, 160, seed=seed)
        edges = {(u, v): float(rng.choice([50, 100, 200, 400])) for u, v in graph.edges}
        arcs = {("s", node): float(rng.choice([100, 400])) for node in rng.sample(range(50), 10)}
        arcs.update({(node, "t"): float(rng.choice([100, 400])) for node in rng.sample(range(50), 10)})
        reference = nx.DiGraph()
        for (u, v), capacity in edges.items():
            reference.add_edge(u, v, capacity=capacity)
            reference.add_edge(v, u, capacity=capacity)
        for (u, v), capacity in arcs.items():
            reference.add_edge(u, v, capacity=capacity)
        assert max_flow_value(edges, arcs, "s", "t") == nx.maximum_flow_value(reference, "s", "t")
    assert max_flow_value({(1, 2): 5.0}, {}, 1, "absent") == 0.0
