"""A lower bound on the edge-disjoint paths between two leaves, read off the fabric's planes, so that the
disjoint-path rule runs exact max flows only around damage.

Spine ``i`` of every group sits in core plane ``i``. For leaves ``A`` and ``B`` and a plane ``p`` in which
they have spines ``s`` and ``t``, the paths A-s-B (when ``s == t``) or A-s-x-t-B through distinct cores ``x``
carry

    min(c(A, s), c(s, B))                  when s == t (both leaves in one group),
    min(c(A, s), M(s, t), c(t, B))         otherwise, with M(s, t) = sum over cores x of min(c(s, x), c(x, t)).

Every edge on those paths has plane ``p``'s spine at one end, so the planes' flows share no edge and their
sum is a flow from A to B: a lower bound on the min cut. On an intact fabric it is the leaf's uplinks, which is
what the rule asks, so a pair whose bound reaches its threshold is settled without a flow. The bound never
overstates (a stray cable only makes it weaker), so whatever it cannot settle goes to an exact flow, and the
per-plane routes it found are pushed first so the flow only searches for the rest.

A plane is *usual* for a leaf when its spine there is reached by the usual capacity and reaches the plane's
cores exactly as most spines of the plane do; such a plane adds ``unit`` for any two leaves usual in it, so
a pair costs arithmetic only for the planes unusual to one of its leaves (on an intact fabric, none).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable

import networkx as nx

from topology.model import CORE, LEAF, SPINE, Fabric

Route = tuple[list[Hashable], float]


class PlaneBounds:
    """Per-plane lower bounds on same-rail leaf pairs of one switch capacity graph."""

    def __init__(self, fabric: Fabric, graph: nx.Graph) -> None:
        nodes = fabric.graph.nodes
        spines = [node for node in graph if nodes[node].get("kind") == SPINE]
        plane = {spine: nodes[spine].get("plane", spine) for spine in spines}
        self.middle: dict[Hashable, dict[Hashable, float]] = {
            spine: {other: data["capacity"] for other, data in graph[spine].items()
                    if nodes[other].get("kind") == CORE} for spine in spines}
        self.spine_in: dict[Hashable, dict[Hashable, tuple[Hashable, float]]] = {}
        unit_count: Counter[float] = Counter()
        for leaf in graph:
            if nodes[leaf].get("kind") != LEAF:
                continue
            chosen: dict[Hashable, tuple[Hashable, float]] = {}
            for other, data in graph[leaf].items():
                if other not in plane:
                    continue  # a cable to a core, a leaf or an unknown switch: no plane route
                unit_count[data["capacity"]] += 1
                key = plane[other]
                if key in chosen and (data["capacity"], str(other)) <= (chosen[key][1], str(chosen[key][0])):
                    continue  # two spines in one plane: the bound uses the stronger
                chosen[key] = (other, data["capacity"])
            self.spine_in[leaf] = chosen
        self.unit = unit_count.most_common(1)[0][0] if unit_count else 0.0
        self.planes = set(plane.values())
        signature = {spine: frozenset(self.middle[spine].items()) for spine in spines}  # its cores, by capacity
        usual: dict[Hashable, Counter[frozenset[tuple[Hashable, float]]]] = {}
        for spine in spines:
            usual.setdefault(plane[spine], Counter())[signature[spine]] += 1
        typical = {key: counts.most_common(1)[0][0] for key, counts in usual.items()}
        # two leaves usual in a plane meet at its one spine, or cross between two usual spines through M(s, t)
        alone = {key for key, counts in usual.items() if sum(counts.values()) == 1}
        clean_spines = {spine for spine in spines if signature[spine] == typical[plane[spine]]
                        and (plane[spine] in alone
                             or sum(capacity for _core, capacity in typical[plane[spine]]) >= self.unit)}
        #: per leaf, the planes where its route is not the usual one (missing, slower, or via an unusual spine)
        self.unusual = {leaf: frozenset(key for key in self.planes if key not in chosen
                                        or chosen[key][1] != self.unit or chosen[key][0] not in clean_spines)
                        for leaf, chosen in self.spine_in.items()}
        self._between: dict[tuple[Hashable, Hashable], float] = {}
        self._cores_in_order = {spine: sorted(cores, key=str) for spine, cores in self.middle.items()}

    def _across(self, s: Hashable, t: Hashable) -> float:
        """M(s, t): the flow from spine s to spine t through distinct cores."""
        key = (s, t) if str(s) <= str(t) else (t, s)
        if key not in self._between:
            near, far = self.middle[s], self.middle[t]
            if len(far) < len(near):
                near, far = far, near
            self._between[key] = sum(min(capacity, far[core]) for core, capacity in near.items() if core in far)
        return self._between[key]

    def bound(self, a: Hashable, b: Hashable) -> float:
        """In a plane usual for both leaves the term is ``unit`` (one spine, or two spines that reach the same
        cores as most of the plane's do); only the other planes are added up."""
        unusual = self.unusual.get(a, self.planes) | self.unusual.get(b, self.planes)
        total = self.unit * (len(self.planes) - len(unusual))
        mine, theirs = self.spine_in.get(a, {}), self.spine_in.get(b, {})
        for key in unusual:
            if key in mine and key in theirs:
                (s, up), (t, down) = mine[key], theirs[key]
                total += min(up, down) if s == t else min(up, self._across(s, t), down)
        return total

    def routes(self, a: Hashable, b: Hashable) -> list[Route]:
        """The paths behind :meth:`bound`, each with the flow it carries (pushed before an exact flow)."""
        found: list[Route] = []
        mine, theirs = self.spine_in.get(a, {}), self.spine_in.get(b, {})
        for key, (s, up) in mine.items():
            if key not in theirs:
                continue
            t, down = theirs[key]
            left = min(up, down)
            if s == t:
                found.append(([a, s, b], left))
                continue
            near, far = self.middle[s], self.middle[t]
            for core in self._cores_in_order[s]:
                if left <= 0:
                    break
                if core in far:
                    amount = min(left, near[core], far[core])
                    found.append(([a, s, core, t, b], amount))
                    left -= amount
        return found
