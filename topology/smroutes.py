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

from dataclasses import dataclass, field

from topology.ibnetdiscover import DiscoveredLink, Discovery
from topology.lfts import ForwardingTables

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
