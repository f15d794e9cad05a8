"""Many max flows on one undirected capacity graph, each paying only for the arcs its own paths touch.

networkx's ``edmonds_karp`` resets every arc of the residual network at the start of each call; on the
2,560-switch graph of a 32,768-GPU fabric that reset, not the augmenting, is most of a flow's cost, and the
disjoint-path rule needs hundreds of flows there. Here the residual network lives in plain lists (arc ``e``
and its reverse ``e ^ 1``), a flow records the arcs it pushed on, and :meth:`ResidualNetwork.reset` undoes
exactly those. Augmenting paths are shortest paths found by a bidirectional breadth-first search, which in
a fat tree meets in the middle tier after a few hundred arcs. A caller that knows most of the paths already
(the per-plane routes of :mod:`topology.pathbound`) pushes them with :meth:`push_path` first, and the search
only finds what they miss.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from typing import TypeVar

import networkx as nx

EPSILON = 1e-9
N = TypeVar("N", bound=Hashable)


class ResidualNetwork:
    """The residual network of an undirected graph with edge attribute ``capacity``."""

    def __init__(self, graph: nx.Graph) -> None:
        self.names: list[Hashable] = list(graph)
        self.index = {name: number for number, name in enumerate(self.names)}
        self.arcs_of: list[list[int]] = [[] for _ in self.names]
        self.head: list[int] = []
        self.capacity: list[float] = []
        self.arc: dict[tuple[int, int], int] = {}
        for u, v, capacity in graph.edges(data="capacity", default=0.0):
            a, b = self.index[u], self.index[v]
            for tail, head in ((a, b), (b, a)):
                self.arc[tail, head] = len(self.head)
                self.arcs_of[tail].append(len(self.head))
                self.head.append(head)
                self.capacity.append(float(capacity))
        self.flow = [0.0] * len(self.head)
        self._touched: list[int] = []

    def reset(self) -> None:
        for arc in self._touched:
            self.flow[arc] = self.flow[arc ^ 1] = 0.0
        self._touched.clear()

    def _push(self, arc: int, amount: float) -> None:
        self.flow[arc] += amount
        self.flow[arc ^ 1] -= amount
        self._touched.append(arc)

    def push_path(self, nodes: Sequence[Hashable], amount: float) -> float:
        """Push up to ``amount`` along a known path of node names; returns what fitted."""
        arcs = [self.arc[self.index[u], self.index[v]] for u, v in itertools.pairwise(nodes)]
        amount = min([amount, *(self.capacity[arc] - self.flow[arc] for arc in arcs)])
        if amount > EPSILON:
            for arc in arcs:
                self._push(arc, amount)
            return amount
        return 0.0

    def augment(self, source: int, target: int) -> float:
        """Push along one shortest augmenting path; 0 when there is none (the flow is then maximum)."""
        before: dict[int, int] = {source: -1}  # node -> arc that reached it from the source side
        after: dict[int, int] = {target: -1}  # node -> arc that leaves it towards the target
        forward, backward = [source], [target]
        meet = -1
        while forward and backward and meet < 0:
            if len(forward) <= len(backward):
                forward, meet = self._grow(forward, before, after, inward=False)
            else:
                backward, meet = self._grow(backward, after, before, inward=True)
        if meet < 0:
            return 0.0
        head, capacity, flow = self.head, self.capacity, self.flow
        path: list[int] = []
        node = meet
        while before[node] >= 0:
            path.append(before[node])
            node = head[before[node] ^ 1]
        node = meet
        while after[node] >= 0:
            path.append(after[node])
            node = head[after[node]]
        amount = min(capacity[arc] - flow[arc] for arc in path)
        for arc in path:
            self._push(arc, amount)
        return amount

    def _grow(self, frontier: list[int], reached: dict[int, int], other_side: dict[int, int], *,
              inward: bool) -> tuple[list[int], int]:
        """One level of one side of the search: the next frontier, and the node where it met the other side
        (-1 if it did not). The source side follows arcs out of a node; the target side (``inward``) the
        reverse arcs, into it, and records those."""
        capacity, flow, head = self.capacity, self.flow, self.head
        grown: list[int] = []
        for node in frontier:
            for arc in self.arcs_of[node]:
                other, step = head[arc], arc ^ 1 if inward else arc
                if other not in reached and capacity[step] - flow[step] > EPSILON:
                    reached[other] = step
                    if other in other_side:
                        return grown, other
                    grown.append(other)
        return grown, -1

    def max_flow(self, source: Hashable, target: Hashable, start: float = 0.0) -> float:
        """The maximum flow, counting ``start`` already pushed (by :meth:`push_path`) since the last reset."""
        total = start
        a, b = self.index[source], self.index[target]
        while (pushed := self.augment(a, b)) > 0:
            total += pushed
        return total

    def source_side(self, source: Hashable) -> set[Hashable]:
        """After a maximum flow: the nodes the source still reaches through unsaturated arcs (the smallest
        source side of a minimum cut)."""
        start = self.index[source]
        seen, stack = {start}, [start]
        while stack:
            node = stack.pop()
            for arc in self.arcs_of[node]:
                other = self.head[arc]
                if other not in seen and self.capacity[arc] - self.flow[arc] > EPSILON:
                    seen.add(other)
                    stack.append(other)
        return {self.names[node] for node in seen}



def max_flow_value(edges: dict[tuple[N, N], float], arcs: dict[tuple[N, N], float], source: N, target: N) -> float:
    """One maximum flow's value, by Dinic's blocking flows, for a single flow on a large graph.

    ``edges`` are undirected (their two arcs are each other's reverse, each starting with the full capacity),
    ``arcs`` directed (the reverse starts empty). A fat tree's augmenting paths all have the same few lengths, so
    a handful of phases (a breadth-first level graph each, then every shortest path of that length found by
    one depth-first walk that never revisits a dead arc) replace the tens of thousands of separate searches
    that augmenting one path at a time would take.
    """
    index: dict[N, int] = {}
    head: list[int] = []
    residual: list[float] = []
    arcs_of: list[list[int]] = []

    def number(node: N) -> int:
        found = index.get(node)
        if found is None:
            found = index[node] = len(arcs_of)
            arcs_of.append([])
        return found

    for pairs, undirected in ((edges, True), (arcs, False)):
        for (u, v), capacity in pairs.items():
            a, b = number(u), number(v)
            arcs_of[a].append(len(head))
            head.append(b)
            residual.append(float(capacity))
            arcs_of[b].append(len(head))
            head.append(a)
            residual.append(float(capacity) if undirected else 0.0)
    if source not in index or target not in index:
        return 0.0
    s, t = index[source], index[target]
    total = 0.0
    while True:
        level = [-1] * len(arcs_of)
        level[s] = 0
        queue = [s]
        for node in queue:
            deeper = level[node] + 1
            for arc in arcs_of[node]:
                other = head[arc]
                if level[other] < 0 and residual[arc] > EPSILON:
                    level[other] = deeper
                    queue.append(other)
        if level[t] < 0:
            return total
        total += _blocking_flow(arcs_of, head, residual, level, s, t)


def _blocking_flow(arcs_of: list[list[int]], head: list[int], residual: list[float], level: list[int], s: int,
                   t: int) -> float:
    """Every augmenting path of the level graph, by one walk with a current-arc pointer per node."""
    pointer = [0] * len(arcs_of)
    path: list[int] = []
    node, total = s, 0.0
    while True:
        if node == t:
            amount = min(residual[arc] for arc in path)
            for arc in path:
                residual[arc] -= amount
                residual[arc ^ 1] += amount
            total += amount
            path.clear()
            node = s
            continue
        arcs, position, deeper = arcs_of[node], pointer[node], level[node] + 1
        while position < len(arcs):
            arc = arcs[position]
            if residual[arc] > EPSILON and level[head[arc]] == deeper:
                break
            position += 1
        pointer[node] = position
        if position < len(arcs):
            path.append(arcs[position])
            node = head[arcs[position]]
            continue
        if not path:
            return total
        level[node] = -1  # a dead end: nothing from it reaches the target in this phase
        arc = path.pop()
        node = head[arc ^ 1]
        pointer[node] += 1
