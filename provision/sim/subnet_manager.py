"""The simulated fabric's subnet manager: its own LIDs and its own forwarding tables, as OpenSM would program them.

The simulator must be able to disagree with our routing model, or tomography's tests cannot fail: a flow's path is
decided here, not by :class:`topology.routes.Router`. Like OpenSM's defaults, LIDs are handed out in GUID order
(not the leaf-by-leaf numbering a fat-tree engine's D-mod-K assumes) and the tables are min-hop's: for every
destination, each switch sends it out of a port on a shortest path, choosing among the shortest the port that
carries the fewest destinations so far (lowest port number on a tie), as OpenSM's minhop engine balances them.

The tables are written as OpenSM's ``opensm-lfts.dump`` beside the simulated ``ibnetdiscover.txt``: what an
operator would copy off the SM host, and what the controller reads back (:mod:`topology.lfts`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from topology.model import HCA, Fabric
from topology.writer import SWITCH_MODEL, switch_guid

DUMP = "opensm-lfts.dump"


@dataclass
class SubnetManager:
    lids: dict[str, int]  # node -> LID (a switch's port 0, an HCA's port 1)
    tables: dict[str, dict[int, int]]  # switch -> LID -> out port (0: the switch itself)
    #: Adaptive routing's groups: per destination leaf (or switch), per switch, every port on a shortest path
    groups: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    def path(self, fabric: Fabric, source: str, target: str) -> list[tuple[str, int]]:
        """The ports a packet leaves by, from HCA ``source`` to HCA ``target``, by the tables."""
        lid, hops = self.lids[target], [(source, 1)]
        node = fabric.peer((source, 1))
        for _ in range(len(self.tables) + 1):
            if node is None:
                break
            if node[0] == target:
                return hops
            out = self.tables[node[0]][lid]
            hops.append((node[0], out))
            node = fabric.peer((node[0], out))
        raise ValueError(f"the simulated SM's tables do not take {source} to {target}")

    def adaptive_shares(self, fabric: Fabric, source: str, target: str) -> dict[tuple[str, int], float]:
        """The share of a stream from ``source`` to ``target`` that leaves by each port under adaptive routing:
        every switch sprays its packets evenly over its group of ports toward the target (what AR does while no
        port is congested), so the shares split at each hop and add where paths meet again."""
        leaf = fabric.peer((target, 1))
        if leaf is None:
            raise ValueError(f"{target}'s port is down: the SM routes nothing to it")
        first = fabric.peer((source, 1))
        shares: dict[tuple[str, int], float] = {(source, 1): 1.0}
        arriving: dict[str, float] = {first[0]: 1.0} if first else {}
        for _ in range(len(self.tables) + 1):
            if not arriving:
                break
            following: dict[str, float] = {}
            for node, share in arriving.items():
                if node == target:
                    continue
                group = [leaf[1]] if node == leaf[0] else self.groups[leaf[0]][node]
                for out in group:
                    shares[(node, out)] = shares.get((node, out), 0.0) + share / len(group)
                    peer = fabric.peer((node, out))
                    if peer is not None:
                        following[peer[0]] = following.get(peer[0], 0.0) + share / len(group)
            arriving = following
            if set(arriving) == {target}:
                return shares
        raise ValueError(f"the simulated SM's adaptive groups do not take {source} to {target}")


def program(fabric: Fabric, hca_guid: Callable[[str], str]) -> SubnetManager:
    """LIDs by GUID, then min-hop tables balanced by how many destinations each port already carries."""
    guid = {node: (hca_guid(node) if data["kind"] == HCA else switch_guid(node))
            for node, data in fabric.graph.nodes(data=True)}
    lids = {node: number for number, node in enumerate(sorted(guid, key=lambda node: int(guid[node], 16)), start=1)}
    switches = sorted(node for node, data in fabric.graph.nodes(data=True) if data["kind"] != HCA)
    ports = {switch: fabric.ports_of(switch) for switch in switches}
    load = {switch: dict.fromkeys(ports[switch], 0) for switch in switches}
    tables: dict[str, dict[int, int]] = {switch: {} for switch in switches}
    # the ports on a shortest path to a destination depend only on the switch it hangs off (an HCA's leaf) at
    # every switch but that leaf: worked out once per such switch, then each destination balanced over them
    toward: dict[str, dict[str, list[int]]] = {}
    for target in sorted(lids, key=lids.__getitem__):
        anchor = target
        if fabric.kind(target) == HCA:
            leaf = fabric.peer((target, 1))
            if leaf is None:
                continue  # its port is down: the SM routes nothing to it
            anchor = leaf[0]
        if anchor not in toward:
            distance = _hops_from(fabric, anchor)
            toward[anchor] = {switch: [port for port, (peer, _p) in ports[switch].items()
                                       if fabric.kind(peer) != HCA and distance.get(peer, -2) == distance[switch] - 1]
                              for switch in switches if switch != anchor and switch in distance}
        for switch, closer in toward[anchor].items():
            if closer:
                port = min(closer, key=lambda number: (load[switch][number], number))
                load[switch][port] += 1
                tables[switch][lids[target]] = port
        if anchor != target:  # the leaf sends its own HCA down its cable
            tables[anchor][lids[target]] = fabric.peer((target, 1))[1]  # type: ignore[index]
        else:
            tables[target][lids[target]] = 0
    return SubnetManager(lids, tables, toward)


def by_design_names(fabric: Fabric, manager: SubnetManager) -> dict[str, dict[str, int]]:
    """The tables with each HCA's LID replaced by its name: what :class:`topology.smroutes.TableRouter` routes by
    (the controller gets the same from the dumps, through :func:`topology.smroutes.design_tables`)."""
    hcas = {node: manager.lids[node] for node, data in fabric.graph.nodes(data=True) if data["kind"] == HCA}
    return {switch: {hca: table[lid] for hca, lid in hcas.items() if lid in table}
            for switch, table in manager.tables.items()}


def _hops_from(fabric: Fabric, start: str) -> dict[str, int]:
    """Hops from ``start`` to every node, through switches only (a packet never transits an HCA)."""
    found = {start: 0}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for _port, (peer, _peer_port) in fabric.ports_of(node).items():
            if peer not in found:
                found[peer] = found[node] + 1
                if fabric.kind(peer) != HCA:
                    queue.append(peer)
    return found


def write_lfts(fabric: Fabric, manager: SubnetManager, hca_guid: Callable[[str], str]) -> str:
    """The tables as OpenSM's ``dump_ucast_lfts`` writes them (each destination resolved)."""
    by_lid = {lid: node for node, lid in manager.lids.items()}
    top = max(by_lid, default=0)
    lines = []
    for switch in sorted(manager.tables, key=manager.lids.__getitem__):
        lines.append(f"Unicast lids [0-{top}] of switch Lid {manager.lids[switch]} guid 0x{switch_guid(switch)} "
                     f"('MF0;{switch}:{SWITCH_MODEL}'):")
        for lid, port in sorted(manager.tables[switch].items()):
            node = by_lid[lid]
            if fabric.kind(node) == HCA:
                data = fabric.graph.nodes[node]
                what = f"Channel Adapter portguid 0x{hca_guid(node)}: '{data['host']} {data['hca']}'"
            else:
                what = f"Switch portguid 0x{switch_guid(node)}: 'MF0;{node}:{SWITCH_MODEL}'"
            lines.append(f"0x{lid:04x} {port:03d} # {what}")
        lines.append(f"{top} lids dumped")
    return "\n".join(lines) + "\n"
