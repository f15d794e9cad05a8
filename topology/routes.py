"""Routes through the fabric: hop distances, up*/down* shortest paths with ECMP multiplicity, pairings.

Adaptive routing may use any shortest up*/down* path, so a test between two
HCAs exercises all of them; what the burn-in and the link tomography need is
how many there are and what share of the traffic each cable carries when it is
spread evenly. Counting paths (multiplying parallel cables) on the shortest-path
DAG gives both without enumerating paths, which can number in the thousands.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import networkx as nx

from topology.model import TIER_RANK, Fabric


@dataclass(frozen=True)
class Route:
    hops: int
    paths: int  # ECMP multiplicity, parallel cables counted separately
    link_share: dict[frozenset[str], float]  # node pair -> fraction of the traffic crossing those cables


def hop_distances(graph: nx.Graph, sources: list[str]) -> dict[str, dict[str, int]]:
    """Shortest hop counts from each source to every node (BFS; parallel cables do not matter)."""
    return {source: dict(nx.single_source_shortest_path_length(graph, source)) for source in sources}


def route(fabric: Fabric, source: str, target: str) -> Route | None:
    """Shortest up*/down* route between two nodes, or None when they are not connected that way."""
    graph, nodes = fabric.graph, fabric.graph.nodes

    def moves(state: tuple[str, bool]):
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

    def onward(state: tuple[str, bool]):
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
