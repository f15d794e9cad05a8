"""Routes through the fabric, the one routing module: the subnet manager's D-mod-K up*/down* paths as cable
indexes (:class:`Router`, what the pair tests, the tomography, the simulator and rechecks route by), and
adaptive routing's shortest up*/down* paths with ECMP multiplicity (:func:`route`), hop distances, pairings.

Adaptive routing may use any shortest up*/down* path, so a test between two
HCAs exercises all of them; what the burn-in and the link tomography need is
how many there are and what share of the traffic each cable carries when it is
spread evenly. Counting paths (multiplying parallel cables) on the shortest-path
DAG gives both without enumerating paths, which can number in the thousands.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import networkx as nx

from topology.model import HCA, LEAF, TIER_RANK, Cable, Fabric

Flow = tuple[str, str]  # (source HCA node, destination HCA node)


@dataclass(frozen=True)
class Route:
    hops: int
    paths: int  # ECMP multiplicity, parallel cables counted separately
    link_share: dict[frozenset[str], float]  # node pair -> fraction of the traffic crossing those cables


def hop_distances(graph: nx.Graph, sources: list[str]) -> dict[str, dict[str, int]]:
    """Shortest hop counts from each source to every node (BFS; parallel cables do not matter)."""
    return {source: dict(nx.single_source_shortest_path_length(graph, source)) for source in sources}


def route(fabric: Fabric, source: str, target: str) -> Route | None:  # noqa: C901 - D-mod-K's up and down phases, read as the algorithm is written
    """Shortest up*/down* route between two nodes, or None when they are not connected that way."""
    graph, nodes = fabric.graph, fabric.graph.nodes

    def moves(state: tuple[str, bool]) -> Iterator[tuple[tuple[str, bool], int]]:
        """Legal next states (up to a higher tier, or down; never up again once going down) and cable counts."""
        node, down = state
        rank = TIER_RANK.get(nodes[node].get("kind", ""), 0)
        for peer in graph.neighbors(node):
            climbing = TIER_RANK.get(nodes[peer].get("kind", ""), 0) > rank
            if not (down and climbing):
                yield (peer, down or not climbing), graph.number_of_edges(node, peer)

    start = (source, False)
    distance, ways, order = {start: 0}, {start: 1}, [start]
    queue = deque([start])
    while queue:
        state = queue.popleft()
        for following, multiplicity in moves(state):
            if following not in distance:
                distance[following], ways[following] = distance[state] + 1, 0
                order.append(following)
                queue.append(following)
            if distance[following] == distance[state] + 1:
                ways[following] += ways[state] * multiplicity
    ends = [state for state in ((target, True), (target, False)) if state in distance]
    if not ends:
        return None
    best = min(distance[state] for state in ends)
    finals = [state for state in ends if distance[state] == best]
    total = sum(ways[state] for state in finals)

    def onward(state: tuple[str, bool]) -> Iterator[tuple[tuple[str, bool], int]]:
        """Next states on a shortest path to the target, with their cable counts."""
        for following, multiplicity in moves(state):
            if distance.get(following) == distance[state] + 1 and following in to_target:
                yield following, multiplicity

    to_target = {state: 1 for state in finals}  # paths from each state to the target, walking the DAG backwards
    for state in reversed(order):
        if state not in finals:
            count = sum(to_target[following] * multiplicity for following, multiplicity in onward(state))
            if count:
                to_target[state] = count
    share: dict[frozenset[str], float] = {}
    for state in order:
        if state in to_target:
            for following, multiplicity in onward(state):
                key = frozenset((state[0], following[0]))
                share[key] = share.get(key, 0.0) + ways[state] * multiplicity * to_target[following] / total
    return Route(best, total, share)


def pairings_by_distance(hosts: list[str], distance: dict[str, dict[str, int]], distances: list[int]) -> list[
        list[tuple[int, int]]]:
    """One round per hop distance: greedily pair each host, in order, with the first free host that far away
    (the rule SuperBench's topology-aware pairing uses, reproduced exactly on its fixture)."""
    rounds = []
    for hops in distances:
        taken: set[int] = set()
        pairs = []
        for first in range(len(hosts)):
            if first in taken:
                continue
            for second in range(first + 1, len(hosts)):
                if second not in taken and distance[hosts[first]].get(hosts[second]) == hops:
                    pairs.append((first, second))
                    taken |= {first, second}
                    break
        if pairs:
            rounds.append(pairs)
    return rounds


class Router:
    """Routes of a fat tree as cable indexes, for both routing models."""

    #: Whether :meth:`path` is the set of cables a flow may cross (adaptive routing), not the one path it takes.
    adaptive = False

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.cables: list[Cable] = list(fabric.cables())
        self.index = {cable: number for number, cable in enumerate(self.cables)}
        graph = fabric.graph
        rank = {node: TIER_RANK.get(data.get("kind", ""), 0) for node, data in graph.nodes(data=True)}
        self.hcas = sorted(node for node, data in graph.nodes(data=True) if data.get("kind") == HCA)
        self.up: dict[str, list[tuple[int, str]]] = {}
        self.down: dict[str, list[tuple[int, str]]] = {}
        for node in graph.nodes:
            ups: list[tuple[int, int, str]] = []
            downs: list[tuple[int, int, str]] = []
            for _a, other, data in graph.edges(node, data=True):
                cable: Cable = data["cable"]
                mine = cable.a if cable.a[0] == node else cable.b
                entry = (mine[1], self.index[cable], other)
                (ups if rank[other] > rank[node] else downs).append(entry)
            self.up[node] = [(cable, other) for _port, cable, other in sorted(ups)]
            self.down[node] = [(cable, other) for _port, cable, other in sorted(downs)]
        self.leaf_of: dict[str, str] = {hca: self.up[hca][0][1] for hca in self.hcas if self.up[hca]}
        # destinations numbered leaf by leaf, in leaf-port order, as the SM's fat-tree routing numbers them:
        # then "d mod K" spreads one leaf's hosts over all of a switch's uplinks
        leaf_port = {hca: self.cables[self.up[hca][0][0]].other((hca, 1))[1] for hca in self.leaf_of}
        ordered = sorted(self.leaf_of, key=lambda hca: (self.leaf_of[hca], leaf_port[hca]))
        self.number = {hca: position for position, hca in enumerate(ordered)}
        self.rank = rank
        self.hcas_on: dict[str, list[str]] = {}
        for hca in ordered:
            self.hcas_on.setdefault(self.leaf_of[hca], []).append(hca)
        # destinations by their first two up-choices, to aim flows at a given uplink (see aimed_flows)
        leaves = [node for node in graph.nodes if rank[node] == 1]
        spines = [node for node in graph.nodes if rank[node] == 2]
        self._k1 = len(self.up[leaves[0]]) if leaves else 0
        self._k2 = len(self.up[spines[0]]) if spines else 0
        self._by_digits: dict[tuple[int, ...], list[str]] = {}
        for hca, d in self.number.items():
            if self._k1:
                self._by_digits.setdefault((d % self._k1,), []).append(hca)
                if self._k2:
                    self._by_digits.setdefault((d % self._k1, (d // self._k1) % self._k2), []).append(hca)
        self.leaves_below: dict[str, frozenset[str]] = {}
        for node in sorted(graph.nodes, key=lambda name: rank[name]):
            if fabric.kind(node) == LEAF:
                self.leaves_below[node] = frozenset((node,))
            elif rank[node] > 1:
                below: set[str] = set()
                for _cable, child in self.down[node]:
                    below |= self.leaves_below.get(child, frozenset())
                self.leaves_below[node] = frozenset(below)

    def path(self, source: str, target: str) -> list[int]:
        """The single D-mod-K path from one HCA to another, as cable indexes."""
        d = self.number[target]
        target_leaf = self.leaf_of[target]
        first_cable, node = self.up[source][0]
        cables = [first_cable]
        below = 1
        while target_leaf not in self.leaves_below.get(node, ()):
            ups = self.up[node]
            cable, node = ups[(d // below) % len(ups)]
            below *= len(ups)
            cables.append(cable)
        while node != target_leaf:
            choices = [(cable, child) for cable, child in self.down[node]
                       if target_leaf in self.leaves_below.get(child, ())]
            cable, node = choices[d % len(choices)]
            cables.append(cable)
        cables.append(self.up[target][0][0])
        return cables

    def aimed_flows(self, cable: int, rng: random.Random, count: int, tries: int = 40,
                    allowed: Callable[[Flow], bool] | None = None) -> list[Flow]:
        """Up to ``count`` flows whose D-mod-K path climbs through ``cable``.

        Inverts the routing: the uplink a switch picks is a digit of the destination's number, so the
        destinations that climb through a given uplink are looked up, not searched for.
        """
        ends = self.cables[cable].a[0], self.cables[cable].b[0]
        lower = min(ends, key=lambda node: self.rank[node])
        level = self.rank[lower]
        sources: list[str] = []
        targets: list[str] = []
        below: frozenset[str] = frozenset()
        if level == 0:
            sources, targets = [lower], self.hcas
        elif level == 1:
            position = [index for index, (up_cable, _other) in enumerate(self.up[lower]) if up_cable == cable]
            sources, targets, below = self.hcas_on.get(lower, []), self._by_digits.get((position[0],), []), \
                frozenset((lower,))
        elif level == 2 and self.leaves_below.get(lower):
            position = [index for index, (up_cable, _other) in enumerate(self.up[lower]) if up_cable == cable]
            below = self.leaves_below[lower]
            leaf = rng.choice(sorted(below))
            climbs = [index for index, (_cable, other) in enumerate(self.up[leaf]) if other == lower]
            if climbs:
                sources = self.hcas_on.get(leaf, [])
                targets = self._by_digits.get((rng.choice(climbs), position[0]), [])
        flows: list[Flow] = []
        for _ in range(tries if sources and targets else 0):
            source, target = rng.choice(sources), rng.choice(targets)
            if target != source and self.leaf_of[target] not in below and cable in self.path(source, target) \
                    and (allowed is None or allowed((source, target))):
                flows.append((source, target))
                if len(flows) >= count:
                    break
        return flows

    def ecmp_cables(self, source: str, target: str) -> list[int]:
        """Every cable on any shortest up*/down* path (adaptive routing may use each of them)."""
        source_leaf, target_leaf = self.leaf_of[source], self.leaf_of[target]
        found = {self.up[source][0][0], self.up[target][0][0]}
        if source_leaf == target_leaf:
            return sorted(found)
        level, tops = {source_leaf}, set[str]()
        climbed: list[set[str]] = [level]
        while not tops:
            tops = {node for node in level if target_leaf in self.leaves_below.get(node, ())}
            if tops:
                break
            level = {other for node in level for _cable, other in self.up[node]}
            climbed.append(level)
        wanted = tops
        for layer in reversed(climbed[:-1]):  # up-cables from the layer below that lead into wanted tops
            reached = set()
            for node in layer:
                for cable, other in self.up[node]:
                    if other in wanted:
                        found.add(cable)
                        reached.add(node)
            wanted = reached
        frontier = tops
        while frontier and target_leaf not in frontier:
            following = set()
            for node in frontier:
                for cable, child in self.down[node]:
                    if target_leaf in self.leaves_below.get(child, ()):
                        found.add(cable)
                        following.add(child)
            frontier = following
        return sorted(found)

    def ecmp_shares(self, source: str, target: str) -> dict[int, float]:
        """Every cable of :meth:`ecmp_cables` with the share of the flow's shortest paths that cross it (parallel
        cables counted apart): the chance that a flow placed on one of those paths at random uses that cable.

        Each cable is oriented from the source's side to the target's (a cable whose lower end has the source's
        leaf below it and not the target's is climbed, any other is descended), then paths are counted from the
        source to each cable's near end and from its far end to the target."""
        source_leaf, target_leaf = self.leaf_of[source], self.leaf_of[target]
        onward: dict[str, list[tuple[int, str]]] = {}
        for number in self.ecmp_cables(source, target):
            a, b = self.cables[number].a[0], self.cables[number].b[0]
            low, high = (a, b) if self.rank[a] < self.rank[b] else (b, a)
            below = self.leaves_below.get(low, frozenset())
            climbs = low == source or (low != target and source_leaf in below and target_leaf not in below)
            start, end = (low, high) if climbs else (high, low)
            onward.setdefault(start, []).append((number, end))
        to_target: dict[str, int] = {target: 1}

        def ways(node: str) -> int:  # paths from node to the target (the graph is a DAG a few tiers deep)
            if node not in to_target:
                to_target[node] = sum(ways(end) for _number, end in onward.get(node, ()))
            return to_target[node]

        total = ways(source)
        from_source: dict[str, int] = {source: 1}
        for node in sorted(onward, key=lambda name: self._order(name, source_leaf)):
            for _number, end in onward[node]:
                from_source[end] = from_source.get(end, 0) + from_source.get(node, 0)
        return {number: from_source.get(node, 0) * ways(end) / total if total else 0.0
                for node, leaving in onward.items() for number, end in leaving}

    def _order(self, node: str, source_leaf: str) -> tuple[int, int]:
        """Where a node comes on the way from a source: climbing tiers first (those with the source's leaf below
        them), then descending; what counting paths forward needs."""
        climbing = self.rank[node] == 0 or source_leaf in self.leaves_below.get(node, frozenset())
        return (0, self.rank[node]) if climbing else (1, -self.rank[node])

    def cables_of(self, flows: Iterable[Flow], routing: str = "dmodk") -> frozenset[int]:
        route = self.path if routing == "dmodk" else self.ecmp_cables
        covered: set[int] = set()
        for source, target in flows:
            covered.update(route(source, target))
        return frozenset(covered)


class AdaptiveRouter(Router):
    """Adaptive routing declared (``fabric.adaptive_routing``): the switches may send a flow down any shortest
    up*/down* path, so what a flow is known to cross is every cable of those paths (:meth:`ecmp_cables`), and
    each of them only with the share :meth:`ecmp_shares` gives. The tomography then weighs a slow test against
    every cable its flows might have used, and a passing one clears them only in part (see
    :class:`topology.tomography.Localizer`)."""

    adaptive = True

    def path(self, source: str, target: str) -> list[int]:
        return self.ecmp_cables(source, target)
