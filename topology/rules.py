"""Design rules of a rail-optimized fat tree, each a named check that says which switch and port break it.

They run on any fabric whose switches carry the design's attributes (tier,
SU, rail, group): the generated design itself (``provision topology check``),
or an as-built fabric whose switches were matched to the design by name.

* ``rail_alignment``: the rail-*i* HCA of a host lands on the rail-*i* leaf of its SU;
* ``no_leaf_to_leaf``: cables only join adjacent tiers;
* ``even_uplinks``: each leaf's uplinks are spread evenly over the spines of its group, and only those;
* ``non_blocking``: on every switch, uplink bandwidth >= downlink bandwidth / oversubscription;
* ``disjoint_paths``: every two same-rail leaves are joined by as many edge-disjoint paths as a leaf has
  uplinks, i.e. every host pair on a rail keeps the designed path diversity (a per-plane lower bound settles
  the intact pairs, exact min cuts the rest); a leaf short of its own uplinks is named once, a pair only when
  the middle tiers are what limits it;
* ``bisection``: the max flow between the two halves of the hosts equals half the hosts' injection bandwidth.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

import networkx as nx

from topology.bulk import bulk
from topology.design import LINK_RATES_GBPS
from topology.maxflow import ResidualNetwork, max_flow_value
from topology.model import CORE, HCA, LEAF, SPINE, TIER_RANK, Fabric
from topology.pathbound import PlaneBounds

RULES = ("rail_alignment", "no_leaf_to_leaf", "even_uplinks", "non_blocking", "disjoint_paths", "bisection")


@dataclass(frozen=True)
class Violation:
    rule: str
    switch: str
    port: int | None
    message: str

    def as_dict(self) -> dict[str, object]:
        return {"rule": self.rule, "switch": self.switch, "port": self.port, "message": self.message}


def _gbps(rate: str, width: int) -> float:
    return LINK_RATES_GBPS.get(rate, 0) * width / 4


def rail_alignment(fabric: Fabric) -> list[Violation]:
    found = []
    graph = fabric.graph
    nodes = graph.nodes
    for hca, mine in nodes(data=True):
        if mine["kind"] != HCA:
            continue
        far_ends = sorted((cable.a[1], cable.b) if cable.a[0] == hca else (cable.b[1], cable.a)
                          for _hca, _peer, cable in graph.edges(hca, data="cable"))
        for _port, (peer, peer_port) in far_ends:
            leaf = nodes[peer]
            if leaf.get("kind") != LEAF:
                found.append(Violation("rail_alignment", peer, peer_port,
                                       f"{hca} is cabled to {peer} port {peer_port}, which is not a leaf"))
            elif leaf["su"] != mine["su"] or leaf["rail"] != mine["rail"]:
                found.append(Violation("rail_alignment", peer, peer_port,
                                       f"{hca} (rail {mine['rail']}, SU {mine['su']}) lands on {peer} port "
                                       f"{peer_port}, the rail-{leaf['rail']} leaf of SU {leaf['su']}"))
    return found


def no_leaf_to_leaf(fabric: Fabric) -> list[Violation]:
    found = []
    kind = fabric.kinds()
    rank = {node: TIER_RANK.get(of, -9) for node, of in kind.items()}
    for cable in fabric.each_cable():
        a, b = cable.a[0], cable.b[0]
        if abs(rank[a] - rank[b]) != 1:
            switch, port = cable.a if kind[a] != HCA else cable.b
            found.append(Violation("no_leaf_to_leaf", switch, port,
                                   f"{cable.label()} joins a {kind[a]} to a {kind[b]}: cables may only "
                                   "join adjacent tiers"))
    return found


def even_uplinks(fabric: Fabric) -> list[Violation]:
    found = []
    nodes = fabric.graph.nodes
    spines_by_group: dict[int, set[str]] = {}
    for spine in fabric.nodes_of(SPINE):
        spines_by_group.setdefault(nodes[spine]["group"], set()).add(spine)
    for leaf in fabric.nodes_of(LEAF):
        group = nodes[leaf]["group"]
        uplinks = {port: peer for port, (peer, _p) in fabric.ports_of(leaf).items() if fabric.kind(peer) == SPINE}
        for port, spine in uplinks.items():
            if nodes[spine]["group"] != group:
                found.append(Violation("even_uplinks", leaf, port, f"{leaf} port {port} goes to {spine} of spine "
                                       f"group {nodes[spine]['group']}, not its own group {group}"))
        counts = Counter(spine for spine in uplinks.values() if spine in spines_by_group.get(group, ()))
        expected = spines_by_group.get(group, set())
        if not expected:
            continue
        per_spine = len(uplinks) / len(expected)
        for spine in sorted(expected):
            if counts.get(spine, 0) != per_spine and len(uplinks) % len(expected) == 0:
                found.append(Violation("even_uplinks", leaf, None, f"{leaf} has {counts.get(spine, 0)} uplink(s) to "
                                       f"{spine} but {per_spine:g} to each spine of group {group} is even"))
        if len(uplinks) % len(expected):
            found.append(Violation("even_uplinks", leaf, None, f"{leaf} has {len(uplinks)} uplinks, which cannot be "
                                   f"spread evenly over the {len(expected)} spines of group {group}"))
    return found


def non_blocking(fabric: Fabric, oversubscription: Fraction = Fraction(1)) -> list[Violation]:
    found = []
    kind = fabric.kinds()
    rank = {node: TIER_RANK.get(of, 0) for node, of in kind.items()}
    below_top = [*fabric.nodes_of(LEAF), *(fabric.nodes_of(SPINE) if fabric.nodes_of(CORE) else [])]
    for switch in below_top:  # the top tier has no uplinks by design
        mine = rank[switch]
        up = down = 0.0
        for _a, peer, data in fabric.graph.edges(switch, data=True):
            bandwidth = _gbps(data["rate"], data["width"])
            if rank[peer] > mine:
                up += bandwidth
            else:
                down += bandwidth
        ratio = oversubscription if kind[switch] == LEAF else Fraction(1)
        if up * ratio < down:
            found.append(Violation("non_blocking", switch, None, f"{switch} has {up:g} Gb/s up for {down:g} Gb/s "
                                   f"down (allowed {ratio}:1)"))
    return found


def _switch_capacity_graph(fabric: Fabric) -> nx.Graph:
    """Switches only, parallel cables summed into one capacity (Gb/s)."""
    kind = fabric.kinds()
    summed: dict[tuple[str, str], float] = {}
    for cable in fabric.each_cable():
        a, b = cable.a[0], cable.b[0]
        if kind[a] == HCA or kind[b] == HCA:
            continue
        key = (a, b) if a <= b else (b, a)
        summed[key] = summed.get(key, 0.0) + (_gbps(cable.rate, cable.width) if cable.width else 0.0)
    graph = nx.Graph()
    graph.add_edges_from((a, b, {"capacity": capacity}) for (a, b), capacity in summed.items())
    return graph


@bulk
def disjoint_paths(fabric: Fabric, designed_uplinks: int | None = None, *, bounds: bool = True) -> list[Violation]:
    """Same-rail leaves joined by fewer edge-disjoint paths than a leaf has uplinks, each named once.

    A pair is settled by the per-plane lower bound of :mod:`topology.pathbound` when it reaches the pair's
    threshold (the design, or the smaller of the two leaves' own uplinks): on an intact fabric every pair is.
    The pairs it cannot settle get exact min cuts, one max flow each, or, when more pairs of a rail are
    unsettled than it has leaves, from one flow-equivalent tree over the rail's leaves
    (:func:`flow_equivalent_tree`: a max flow per leaf); every flow starts from the bound's routes.
    ``bounds=False`` takes the tree, from scratch, for every rail: the reference the bound is tested against.
    A leaf whose *own* uplinks fall short is reported once, for its own uplinks, not again by every same-rail
    leaf that reaches it; a pair of leaves is reported for the middle tiers only when their cut is smaller than
    both leaves' own uplinks.
    """
    leaves = fabric.nodes_of(LEAF)
    nodes = fabric.graph.nodes
    if len(leaves) < 2 or not fabric.nodes_of(SPINE):
        return []
    graph = _switch_capacity_graph(fabric)
    link = max((_gbps(rate, 4) for rate in {cable.rate for cable in fabric.each_cable()}),
               default=1.0) or 1.0
    # without the design's figure, the most common uplink count stands for it (a miswire must not redefine it)
    designed = designed_uplinks or Counter(
        sum(fabric.graph.number_of_edges(leaf, peer) for peer in fabric.graph.neighbors(leaf)
            if fabric.kind(peer) == SPINE) for leaf in leaves).most_common(1)[0][0]
    needed = designed * link
    own = {leaf: graph.degree(leaf, weight="capacity") for leaf in leaves if leaf in graph}
    found = [Violation("disjoint_paths", leaf, None, f"{leaf}'s own uplinks carry {own[leaf] / link:g} link(s), "
                       f"designed {designed}: every same-rail path from it is limited to that")
             for leaf in sorted(own) if own[leaf] < needed]
    rails: dict[object, list[str]] = {}
    for leaf in sorted(own):
        rails.setdefault(nodes[leaf]["rail"], []).append(leaf)
    plane_bounds = PlaneBounds(fabric, graph) if bounds else None
    network = ResidualNetwork(graph) if graph.number_of_edges() else None
    pairs: list[Violation] = []
    component_of: dict[str, int] = {}
    for number, component in enumerate(nx.connected_components(graph)):
        component_of.update(dict.fromkeys(component, number))
    for rail_leaves in rails.values():
        for group in _connected_groups(component_of, rail_leaves):
            if len(group) < 2 or network is None:
                continue
            cuts = _unsettled_cuts(group, own, needed, network, plane_bounds)
            for leaf in group:
                worst = _weakest_pair(cuts.get(leaf, {}), leaf, own, needed)
                if worst is not None:
                    pairs.append(Violation("disjoint_paths", leaf, None,
                                           f"{leaf} reaches same-rail leaf {worst[0]} over {worst[1] / link:g} "
                                           f"edge-disjoint path(s), designed {designed}, though both leaves' own "
                                           "uplinks carry more: the spine or core tier is short"))
    found += sorted(pairs, key=lambda violation: violation.switch)
    for leaf in sorted(set(leaves) - own.keys()):
        found.append(Violation("disjoint_paths", leaf, None, f"{leaf} has no uplink at all"))
    return found


def _unsettled_cuts(group: list[str], own: dict[str, float], needed: float, network: ResidualNetwork,
                    plane_bounds: PlaneBounds | None) -> dict[str, dict[str, float]]:
    """Min cuts of the pairs of ``group`` the bound could not settle, both ways round (all pairs without it)."""
    unsettled = None if plane_bounds is None else [
        (a, b) for index, a in enumerate(group) for b in group[index + 1:]
        if plane_bounds.bound(a, b) < min(needed, own[a], own[b])]
    cuts: dict[str, dict[str, float]] = {}
    if unsettled is not None and len(unsettled) <= len(group) - 1:
        for a, b in unsettled:
            cuts.setdefault(a, {})[b] = cuts.setdefault(b, {})[a] = _max_flow(network, a, b, plane_bounds)
            network.reset()
        return cuts
    tree = flow_equivalent_tree(network, group, plane_bounds)
    wanted = None if unsettled is None else {frozenset(pair) for pair in unsettled}
    for leaf in group:
        for other, cut in _tree_cuts(tree, leaf).items():
            if other != leaf and (wanted is None or frozenset((leaf, other)) in wanted):
                cuts.setdefault(leaf, {})[other] = cut
    return cuts


def _max_flow(network: ResidualNetwork, source: str, target: str, plane_bounds: PlaneBounds | None) -> float:
    """The bound's routes pushed first (when there is a bound), so the search only finds what they miss."""
    pushed = 0.0
    if plane_bounds is not None:
        pushed = sum(network.push_path(path, amount) for path, amount in plane_bounds.routes(source, target))
    return network.max_flow(source, target, start=pushed)


def flow_equivalent_tree(graph: nx.Graph | ResidualNetwork, terminals: list[str],
                         plane_bounds: PlaneBounds | None = None) -> nx.Graph:
    """Gusfield's flow-equivalent tree over ``terminals`` only: the min cut between any two of them is the
    lightest edge on their tree path, from ``len(terminals) - 1`` max flows in ``graph`` (edge ``capacity``).

    Flow-equivalent, not cut-equivalent (it gives the values, not the cuts), which is all a bound on
    disjoint paths needs; and over the terminals alone, where a Gomory-Hu tree takes a flow per node.
    """
    network = graph if isinstance(graph, ResidualNetwork) else ResidualNetwork(graph)
    parent = dict.fromkeys(terminals[1:], terminals[0])
    tree = nx.Graph()
    tree.add_nodes_from(terminals)
    for index, source in enumerate(terminals[1:], start=1):
        target = parent[source]
        tree.add_edge(source, target, weight=_max_flow(network, source, target, plane_bounds))
        side = network.source_side(source)
        network.reset()
        for later in terminals[index + 1:]:
            if later in side and parent[later] == target:
                parent[later] = source
    return tree


def _tree_cuts(tree: nx.Graph, leaf: str) -> dict[str, float]:
    """Every terminal's min cut from ``leaf``: the lightest edge on their tree path."""
    bottleneck = {leaf: float("inf")}
    for parent, child in nx.bfs_edges(tree, leaf):
        bottleneck[child] = min(bottleneck[parent], tree[parent][child]["weight"])
    return bottleneck


def _connected_groups(component_of: dict[str, int], members: list[str]) -> list[list[str]]:
    """``members`` split by the connected component they are in (a flow between components is 0)."""
    groups: dict[int, list[str]] = {}
    for member in members:
        groups.setdefault(component_of[member], []).append(member)
    return list(groups.values())


def _weakest_pair(cuts: dict[str, float], leaf: str, own: dict[str, float],
                  needed: float) -> tuple[str, float] | None:
    """The partner with the smallest min cut from ``leaf``, among those whose cut is below what both leaves' own
    uplinks allow and below the design (the first by name among equals)."""
    best: tuple[str, float] | None = None
    for other, cut in sorted(cuts.items()):
        if other != leaf and cut < min(needed, own[leaf], own.get(other, 0.0)) and (best is None or cut < best[1]):
            best = (other, cut)
    return best


@bulk
def bisection_gbps(fabric: Fabric) -> tuple[float, float]:
    """(max flow between the first and second half of the hosts, what full bisection needs), in Gb/s.

    Each HCA hangs off one switch by its own cable, so the HCAs fold into their switch: the source feeds every
    switch with the capacity of its first-half hosts' cables, every switch drains its second-half hosts' cables
    into the sink. Same cut, a graph of switches only (2,560 nodes instead of 35,000 at 32,768 GPUs).
    """
    host_of = {node: data["host"] for node, data in fabric.graph.nodes(data=True) if data["kind"] == HCA}
    hosts = list(dict.fromkeys(host_of.values()))
    half = set(hosts[: len(hosts) // 2])
    if not half or len(half) == len(hosts):
        return 0.0, 0.0
    undirected: dict[tuple[str, str], float] = {}
    terminal: dict[tuple[str, str], float] = {}  # source -> switch and switch -> sink arcs
    needed = 0.0
    for cable in fabric.each_cable():
        a, b = cable.a[0], cable.b[0]
        capacity = _gbps(cable.rate, cable.width)
        host = host_of.get(a) or host_of.get(b)
        if host is not None:
            switch = b if a in host_of else a
            key = ("\0source", switch) if host in half else (switch, "\0sink")
            terminal[key] = terminal.get(key, 0.0) + capacity
            needed += capacity if key[0] == "\0source" else 0.0
            continue
        key = (a, b) if a <= b else (b, a)
        undirected[key] = undirected.get(key, 0.0) + capacity
    return max_flow_value(undirected, terminal, "\0source", "\0sink"), needed


def bisection(fabric: Fabric) -> list[Violation]:
    value, needed = bisection_gbps(fabric)
    if value + 1e-6 < needed:
        return [Violation("bisection", "*", None, f"bisection bandwidth is {value / 1000:g} Tb/s between the two "
                          f"halves of the hosts, full bisection needs {needed / 1000:g} Tb/s")]
    return []


def check_all(fabric: Fabric, *, oversubscription: Fraction = Fraction(1),
              designed_uplinks: int | None = None) -> dict[str, list[Violation]]:
    results = {
        "rail_alignment": rail_alignment(fabric),
        "no_leaf_to_leaf": no_leaf_to_leaf(fabric),
        "even_uplinks": even_uplinks(fabric),
        "non_blocking": non_blocking(fabric, oversubscription),
        "disjoint_paths": disjoint_paths(fabric, designed_uplinks),
    }
    results["bisection"] = [] if oversubscription > 1 else bisection(fabric)
    return results



