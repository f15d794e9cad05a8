"""The fabric a cabling plan describes, for fabrics this tool did not design.

Without fat-tree parameters there is no design to derive, so the fabric is whatever the plan says: every
endpoint device a node, every planned cable an edge. An endpoint written as an HCA's node description
(``("sat111092710037", "sat111092710037 ibp213s0f0")``) is an HCA node ``host/ibp213s0f0`` with its host and
device, named back exactly as plans and dumps name it; every other device is a switch. Tiers are read from
the graph, not guessed from names: a switch cabled to an HCA is a leaf, a switch one hop further a spine,
anything further a core; a switch no HCA reaches is a spine by default (it can only be above the leaves).
Rules that need the design's intent (rail alignment, even uplinks, non-blocking ratios) have nothing to
check against here and are reported as not applicable by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable

from topology.cabling import Endpoint, PlanError, PlannedCable
from topology.model import CORE, HCA, LEAF, SPINE, Cable, Fabric

TIER_BY_DISTANCE = {1: LEAF, 2: SPINE}


def is_hca_endpoint(end: Endpoint) -> bool:
    """Plans name a switch port by number and an HCA by its node description (``host device``)."""
    return not end[1].isdigit()


def node_of(end: Endpoint) -> tuple[str, int]:
    """The fabric node and port number of a plan endpoint."""
    device, port = end
    if is_hca_endpoint(end):
        rest = port[len(device):].strip() if port.startswith(device + " ") else port
        return f"{device}/{rest}", 1
    return device, int(port)


class PlanConflict(PlanError):
    """A planned cable into a port another row already plans for."""

    def __init__(self, message: str, line: int, cable: tuple[Endpoint, Endpoint, int]) -> None:
        super().__init__(message, line)
        self.cable = cable  # (a, b, line) of the refused row


def fabric_from_plan(cables: Iterable[PlannedCable], rate: str = "") -> tuple[Fabric, list[PlanConflict]]:
    """Every planned cable, on nodes typed by their distance from the hosts (``rate`` unknown by default: a plan
    rarely says, and nothing downstream of a plan fabric judges bandwidth), and a located problem for each row
    that plugs a second cable into a port already planned (the first row keeps the port)."""
    fabric = Fabric()
    planned = list(cables)
    hcas: dict[str, Endpoint] = {}
    neighbours: dict[str, set[str]] = {}
    for cable in planned:
        ends = []
        for end in (cable.a, cable.b):
            node, _port = node_of(end)
            if is_hca_endpoint(end):
                hcas[node] = end
            neighbours.setdefault(node, set())
            ends.append(node)
        neighbours[ends[0]].add(ends[1])
        neighbours[ends[1]].add(ends[0])
    distance = _distance_from_hosts(hcas, neighbours)
    for node in neighbours:
        if node in hcas:
            endpoint = hcas[node]  # kept: the name plans and dumps give this HCA port, whatever its spelling
            fabric.add_node(node, HCA, host=endpoint[0], hca=node.split("/", 1)[1], tier=0, endpoint=endpoint)
        else:
            hops = distance.get(node)
            kind = TIER_BY_DISTANCE.get(hops, CORE) if hops is not None else SPINE
            fabric.add_node(node, kind, tier={LEAF: 1, SPINE: 2, CORE: 3}[kind])
    conflicts: list[PlanConflict] = []
    _number_for_drawing(fabric, neighbours)
    for cable in planned:
        a, b = node_of(cable.a), node_of(cable.b)
        taken = next((fabric.cable_at(end) for end in (a, b) if fabric.cable_at(end) is not None), None)
        if taken is not None:
            conflicts.append(PlanConflict(f"{cable.a[0]}/{cable.a[1]} - {cable.b[0]}/{cable.b[1]} plugs into a "
                                          f"port already planned for {taken.label()} ({taken.cable_id}); the "
                                          "first row keeps it", cable.line, (cable.a, cable.b, cable.line)))
            continue
        fabric.add_cable(Cable(a, b, rate, 4 if rate else 0, cable_id=f"plan line {cable.line}"))
    return fabric, conflicts


def _distance_from_hosts(hcas: dict[str, Endpoint], neighbours: dict[str, set[str]]) -> dict[str, int]:
    """Hops from the nearest HCA, by one breadth-first search from all of them."""
    distance = dict.fromkeys(hcas, 0)
    frontier = list(hcas)
    while frontier:
        grown = []
        for node in frontier:
            for other in neighbours[node]:
                if other not in distance:
                    distance[other] = distance[node] + 1
                    grown.append(other)
        frontier = grown
    return distance


def _number_for_drawing(fabric: Fabric, neighbours: dict[str, set[str]]) -> None:
    """The drawing groups leaves by scalable unit, spines by group and cores by plane. A plan has none of those,
    so each switch is its own unit (numbered in name order; the drawing folds long runs into ranges) and each
    HCA goes with the leaf it is cabled to."""
    nodes = fabric.graph.nodes
    for kind, attribute in ((LEAF, "su"), (SPINE, "group"), (CORE, "plane")):
        for number, node in enumerate(sorted(fabric.nodes_of(kind)), start=1):
            nodes[node][attribute] = number
    for hca in fabric.nodes_of(HCA):
        leaf = next((other for other in sorted(neighbours[hca]) if nodes[other]["kind"] == LEAF), None)
        nodes[hca]["su"] = nodes[leaf]["su"] if leaf is not None else 0
