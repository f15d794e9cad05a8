"""The simulated fabric as built: the spec's design with the cabling faults applied.

Written out as an ``ibnetdiscover`` dump (``sim/fabric/ibnetdiscover.txt``), the
file an operator would capture on the UFM host, so the audit reads the
simulated fabric through the same parser as a real one. Node faults that show
on cables show here too: an HCA port trained at HDR is an HDR cable, a port
that is down is a cable ibnetdiscover cannot see.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from provision.hostmodel.devices import hca_guid
from provision.network.sources import design_fabric
from provision.sim import subnet_manager
from provision.sim.linkquality import FORMAT, LINK_QUALITY
from provision.spec import LoadedSpec
from topology.model import HCA, Cable, Fabric
from topology.writer import write_ibnetdiscover

CABLE_FAULTS = ("miswired_cable", "missing_cable")
DUMP = "ibnetdiscover.txt"


def parse_port(text: str) -> tuple[str, int]:
    switch, _, port = text.rpartition("/")
    return switch, int(port)


def partner_of(fabric: Fabric, target: tuple[str, int]) -> tuple[str, int]:
    """Without a named partner, the next cabled port of the same switch: the plug beside it."""
    ports = sorted(fabric.ports_of(target[0]))
    after = [port for port in ports if port > target[1]] or [port for port in ports if port != target[1]]
    return target[0], after[0]


def as_built(loaded: LoadedSpec, faults: list[dict[str, Any]]) -> Fabric:
    fabric = design_fabric(loaded)
    for fault in faults:
        if fault["kind"] == "missing_cable":
            fabric.remove_cable(_cable(fabric, parse_port(fault["target"])))
        elif fault["kind"] == "miswired_cable":
            here = parse_port(fault["target"])
            there = parse_port(fault["params"]["partner"]) if fault["params"].get("partner") else partner_of(fabric,
                                                                                                              here)
            first, second = _cable(fabric, here), _cable(fabric, there)
            fabric.remove_cable(first)
            fabric.remove_cable(second)
            fabric.add_cable(Cable(here, second.other(there), first.rate, first.width))
            fabric.add_cable(Cable(there, first.other(here), second.rate, second.width))
        elif fault["kind"] == "ib_link_low_rate":
            cable = _cable(fabric, (f"{fault['node']}/{fault['target']}", 1))
            fabric.remove_cable(cable)
            fabric.add_cable(Cable(cable.a, cable.b, fault["params"]["rate"], cable.width))
        elif fault["kind"] == "hca_port_down":
            fabric.remove_cable(_cable(fabric, (f"{fault['node']}/{fault['target']}", 1)))
    return fabric


def _cable(fabric: Fabric, port: tuple[str, int]) -> Cable:
    cable = fabric.cable_at(port)
    if cable is None:
        raise ValueError(f"no cable at {port[0]}/{port[1]} in the design")
    return cable


def write_dump(loaded: LoadedSpec, faults: list[dict[str, Any]], directory: Path) -> Path:
    seed = loaded.spec.simulation.seed if loaded.spec.simulation else 0
    fabric = as_built(loaded, faults)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / DUMP

    def guid(node: str) -> str:
        host, hca = node.split("/", 1)
        return hca_guid(seed, host, hca)

    manager = subnet_manager.program(fabric, guid)  # the LIDs the dump shows are the SM's
    path.write_text(write_ibnetdiscover(fabric, guid, title=loaded.spec.cluster.name, lids=manager.lids))
    (directory / subnet_manager.DUMP).write_text(subnet_manager.write_lfts(fabric, manager, guid))
    return path


def write_link_quality(loaded: LoadedSpec, faults: list[dict[str, Any]], directory: Path) -> Path:
    """What share of its bandwidth each degraded cable carries, and which flows cross it.

    ``ib_write_bw`` on a simulated host looks its flow up here (``provision.sim.linkquality``): the route the
    simulated subnet manager's own tables give through the as-built fabric (:mod:`provision.sim.subnet_manager`:
    LIDs by GUID, min-hop), not our D-mod-K, so a tomography that assumed the wrong routes blames the wrong cable.
    After its own cable a route depends only on the source's leaf and the target, so crossings are listed as
    (source leaf, target HCA). A host's own cable is crossed by every flow from or to that HCA. With
    ``fabric.adaptive_routing`` the switches spray each stream over their adaptive-routing groups
    (:meth:`provision.sim.subnet_manager.SubnetManager.adaptive_shares`): every pair of leaves whose flows put a
    share on the cable is listed with that share, and such a flow runs at ``factor / share`` of the rate (a
    degraded cable carrying a sixteenth of a stream at half rate slows it not at all; one at 2% slows every flow
    it carries).
    """
    degraded = [fault for fault in faults if fault["kind"] == "degraded_link"]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LINK_QUALITY
    if not degraded:
        path.write_text(json.dumps({"format": FORMAT, "leaf_of": {}, "degraded": []}))
        return path
    fabric = as_built(loaded, [fault for fault in faults if fault["kind"] in CABLE_FAULTS])
    seed = loaded.spec.simulation.seed if loaded.spec.simulation else 0
    adaptive = loaded.spec.fabric is not None and loaded.spec.fabric.adaptive_routing
    manager = subnet_manager.program(fabric, lambda node: hca_guid(seed, *node.split("/", 1)))
    hcas = sorted(node for node, data in fabric.graph.nodes(data=True) if data["kind"] == HCA)
    leaf_of = {hca: peer[0] for hca in hcas if (peer := fabric.peer((hca, 1)))}
    entries: list[dict[str, Any]] = []
    for fault in degraded:
        cable = _cable(fabric, parse_port(fault["target"]))
        entry: dict[str, Any] = {"cable": cable.label(), "factor": fault["params"]["factor"]}
        host = fabric.host_end(cable)
        if host:
            entry["hca"] = host[0]
        elif adaptive:
            entry["leaf_pairs"] = _adaptive_crossings(fabric, manager, leaf_of, cable)
        else:
            entry["from_leaf_to"] = _crossings(fabric, manager, leaf_of, cable)
        entries.append(entry)
    path.write_text(json.dumps({"format": FORMAT, "leaf_of": leaf_of, "degraded": entries}, indent=1))
    return path


def _crossings(fabric: Fabric, manager: subnet_manager.SubnetManager, leaf_of: dict[str, str],
               cable: Cable) -> list[list[str]]:
    """(source leaf, target HCA) whose route by the SM's tables crosses ``cable``, a cable between two switches."""
    first_of = _first_hca_of_each_leaf(leaf_of)
    found = []
    for leaf, source in sorted(first_of.items()):
        for target in sorted(leaf_of):
            if target == source:
                continue
            hops = manager.path(fabric, source, target)[1:]
            if any(fabric.cable_at(hop) == cable for hop in hops):
                found.append([leaf, target])
    return found


def _adaptive_crossings(fabric: Fabric, manager: subnet_manager.SubnetManager, leaf_of: dict[str, str],
                        cable: Cable) -> list[list[str | float]]:
    """(source leaf, target leaf, share) for every pair of leaves whose flows adaptive routing sprays partly over
    ``cable``, a cable between two switches: past its own cable a flow's spray depends only on the two leaves."""
    first_of = _first_hca_of_each_leaf(leaf_of)
    found: list[list[str | float]] = []
    for source_leaf, source in sorted(first_of.items()):
        for target_leaf, target in sorted(first_of.items()):
            if target_leaf != source_leaf:
                share = sum(value for hop, value in manager.adaptive_shares(fabric, source, target).items()
                            if fabric.cable_at(hop) == cable)
                if share > 0:
                    found.append([source_leaf, target_leaf, round(share, 6)])
    return found


def _first_hca_of_each_leaf(leaf_of: dict[str, str]) -> dict[str, str]:
    """One HCA per leaf (the first by name) to stand for them all: every HCA of a leaf is routed alike after its
    own cable, by the tables as by adaptive routing."""
    first_of: dict[str, str] = {}
    for hca, leaf in sorted(leaf_of.items()):
        first_of.setdefault(leaf, hca)
    return first_of
