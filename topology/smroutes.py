"""Which cables a flow crosses, read from the forwarding tables the subnet manager programmed.

Our design's D-mod-K (:class:`topology.routes.Router`) is what a fat-tree engine would choose with the LIDs in our
order; the subnet manager numbers LIDs its own way and may run another engine, so on a real fabric the truth is the
switches' tables. A flow from one HCA port to another is walked as a packet is forwarded: out of the source port's
cable to its leaf, then at each switch out of the port its table gives for the destination's LID, until the cable
that ends at the destination port. The cables come from the discovery (ibnetdiscover), the tables from the dump
(:mod:`topology.lfts`); the destination's LID from the discovery, or from the dump where it resolved the port.

A walk that cannot finish is an error naming the switch and the LID, never a guess: a switch without a table in the
dump, a LID its table does not hold (the SM has not routed it: a port that came up after the sweep), a port that
leads to no cable the discovery saw (down), or a loop.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from topology.cabling import node_device
from topology.ibnetdiscover import DiscoveredLink, Discovery
from topology.lfts import ForwardingTables
from topology.model import HCA, Fabric
from topology.routes import Flow, Router

Port = tuple[str, int]  # (discovery node id, port number)


class RouteError(ValueError):
    """A flow the tables do not carry to its destination, with the switch and LID where the walk stopped."""


@dataclass
class TableRoutes:
    tables: ForwardingTables
    discovery: Discovery
    _link_at: dict[Port, DiscoveredLink] = field(default_factory=dict, init=False, repr=False)
    _switch_guid: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    _lid_of_guid: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        for link in self.discovery.links.values():
            self._link_at[link.a] = link
            self._link_at[link.b] = link
        for guid, (node, port) in self.discovery.port_guids.items():
            if port == 0:
                self._switch_guid[node] = guid
        self._lid_of_guid = self.tables.lid_of_port()

    def lid(self, port: Port) -> int:
        """The destination LID of a port: as the discovery saw it, else as the dump resolved its GUID."""
        if port in self.discovery.lids:
            return self.discovery.lids[port]
        guid = next((guid for guid, where in self.discovery.port_guids.items() if where == port), None)
        if guid is not None and guid in self._lid_of_guid:
            return self._lid_of_guid[guid]
        raise RouteError(f"no LID known for {port[0]} port {port[1]}: neither the discovery nor the dump gives one")

    def port_of(self, guid: str) -> Port:
        """The port a port GUID names (``0x`` and 16 hex digits, or any spelling of the number)."""
        key = f"0x{int(guid, 16):016x}"
        if key not in self.discovery.port_guids:
            raise RouteError(f"port GUID {key} is not in the discovery")
        return self.discovery.port_guids[key]

    def path(self, source: Port, target: Port) -> list[DiscoveredLink]:
        """The cables from ``source`` to ``target``, in the order the packets cross them."""
        lid = self.lid(target)
        first = self._link_at.get(source)
        if first is None:
            raise RouteError(f"{source[0]} port {source[1]} has no cable in the discovery")
        hops = [first]
        here = _far(first, source)
        for _ in range(len(self.tables.switches) + 1):  # a path visits each switch at most once
            if here == target:
                return hops
            node = here[0]
            guid = self._switch_guid.get(node) or (f"0x{int(node[2:], 16):016x}" if node.startswith("S-") else "")
            table = self.tables.switches.get(guid)
            if table is None:
                raise RouteError(f"the flow reaches {self._name(node)}, whose forwarding table is not in the dump")
            out = table.out_port.get(lid)
            if out is None:
                raise RouteError(f"{self._name(node)} has no route to LID {lid} ({self._name(target[0])})")
            if out == 0:
                raise RouteError(f"{self._name(node)} keeps LID {lid} for itself: it is not {self._name(target[0])}")
            link = self._link_at.get((node, out))
            if link is None:
                raise RouteError(f"{self._name(node)} sends LID {lid} out of port {out}, which has no cable in the "
                                 "discovery (down?)")
            hops.append(link)
            here = _far(link, (node, out))
        raise RouteError(f"the tables loop: LID {lid} from {self._name(source[0])} never reaches "
                         f"{self._name(target[0])}")

    def cables(self, source_guid: str, target_guid: str) -> list[DiscoveredLink]:
        """:meth:`path` between two port GUIDs (how a dump's destinations and the fabric's HCAs are named)."""
        return self.path(self.port_of(source_guid), self.port_of(target_guid))

    def _name(self, node: str) -> str:
        found = self.discovery.nodes.get(node)
        return f"{found.description} ({node})" if found and found.description else node


def _far(link: DiscoveredLink, near: Port) -> Port:
    return link.b if link.a == near else link.a


def design_tables(routes: TableRoutes, fabric: Fabric) -> dict[str, dict[str, int]]:
    """The dump's tables in the design's names: per switch of ``fabric``, the port it sends each HCA's LID out of.

    A switch is matched by its system name (``MF0;leaf-su01-r1:MQM9790/U1`` → ``leaf-su01-r1``), an HCA by its
    description (``sim01 mlx5_0`` → ``sim01/mlx5_0``); what the design does not know is left out."""
    names: dict[str, str] = {}
    for node_id, node in routes.discovery.nodes.items():
        name = node_device(node) if node.kind == "switch" else node.description.strip().replace(" ", "/", 1)
        if name in fabric.graph:
            names[node_id] = name
    by_guid = {guid: names[node] for guid, (node, _port) in routes.discovery.port_guids.items() if node in names}
    hcas = {name: node_id for node_id, name in names.items() if fabric.kind(name) == HCA}
    lid_of = {}
    for name, node_id in hcas.items():
        try:
            lid_of[name] = routes.lid((node_id, 1))
        except RouteError:
            continue
    tables: dict[str, dict[str, int]] = {}
    for guid, table in routes.tables.switches.items():
        switch = by_guid.get(guid)
        if switch is not None:
            tables[switch] = {hca: table.out_port[lid] for hca, lid in lid_of.items() if lid in table.out_port}
    return tables


class TableRouter(Router):
    """The design's cables, routed by the subnet manager's tables (:func:`design_tables`) instead of D-mod-K: what
    the pair tests, the tomography and the rechecks route by when the fabric's tables are known."""

    def __init__(self, fabric: Fabric, tables: dict[str, dict[str, int]]) -> None:
        super().__init__(fabric)
        self.tables = tables
        self._crossing: dict[int, list[tuple[str, str]]] | None = None
        #: Flows the tables did not carry (a port down at the sweep, a cable not where the design has it), each
        #: routed by D-mod-K instead, with why: the report counts them
        self.unrouted: dict[Flow, str] = {}

    def path(self, source: str, target: str) -> list[int]:
        try:
            return self.table_path(source, target)
        except RouteError as error:
            self.unrouted[(source, target)] = str(error)
            return super().path(source, target)

    def table_path(self, source: str, target: str) -> list[int]:
        """The cables the tables send a flow through; :class:`RouteError` where they do not take it there."""
        cables = [self.up[source][0][0]]
        node = self.leaf_of[source]
        for _ in range(len(self.tables) + 1):
            if node == target:
                return cables
            out = self.tables.get(node, {}).get(target)
            if not out:
                raise RouteError(f"the subnet manager's table of {node} has no route to {target}")
            cable = self.fabric.cable_at((node, out))
            if cable is None:
                raise RouteError(f"the subnet manager's table of {node} sends {target} out of port {out}, which has "
                                 "no cable in the design")
            cables.append(self.index[cable])
            node = cable.other((node, out))[0]
        raise RouteError(f"the subnet manager's tables loop on the way from {source} to {target}")

    def aimed_flows(self, cable: int, rng: random.Random, count: int, tries: int = 40,
                    allowed: Callable[[Flow], bool] | None = None) -> list[Flow]:
        """Up to ``count`` flows whose path by the tables crosses ``cable``: from the flows known to cross it."""
        host = self.fabric.host_end(self.cables[cable])
        crossing = self.crossing().get(cable, []) if host is None else []
        known = len(self.hcas) if host is not None else len(crossing)
        flows: list[Flow] = []
        for pick in rng.sample(range(known), min(known, tries * count)):  # a sample, not the whole list shuffled
            if host is not None:
                flow = (host[0], self.hcas[pick])
            else:
                leaf, target = crossing[pick]
                flow = (rng.choice(self.hcas_on[leaf]), target)
            if flow[0] != flow[1] and (allowed is None or allowed(flow)):
                flows.append(flow)
                if len(flows) >= count:
                    break
        return flows

    def crossing(self) -> dict[int, list[tuple[str, str]]]:
        """Cable → the (source leaf, target HCA) whose path crosses it after the source's own cable (every HCA of
        a leaf routes alike from there); worked out once."""
        if self._crossing is None:
            found: dict[int, list[tuple[str, str]]] = {}
            for leaf, members in sorted(self.hcas_on.items()):
                for target in self.hcas:
                    if target != members[0]:
                        for cable in self.path(members[0], target)[1:]:
                            found.setdefault(cable, []).append((leaf, target))
            self._crossing = found
        return self._crossing
