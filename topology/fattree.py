"""The designed fabric of a rail-optimized fat tree: which port of which switch meets which.

The port plan is deterministic, so the design can be audited against an
as-built dump cable by cable:

* leaf ``(su, rail)``: ports ``1..hosts_per_su`` go to the rail-``rail`` HCA of the
  SU's hosts in order; uplinks follow, uplink ``j`` going to spine ``j mod S`` of
  the leaf's group (``S`` spines per group), so each spine gets ``uplinks/S``;
* spine ``(group, i)``: down ports in the order of the group's leaves, then up
  ports; spine ``i`` of every group is in core plane ``i`` and spreads its
  uplinks evenly over that plane's cores;
* core ``(plane, c)``: ports in the order of the spine groups.

Names come from the spec's ``fabric.naming`` patterns; SUs, groups, indexes and
planes count from 1, rails from 0 (rail *i* is GPU *i*'s rail).
"""

from __future__ import annotations

from dataclasses import dataclass

from topology.bulk import bulk
from topology.design import FabricDimensions
from topology.model import CORE, HCA, LEAF, SPINE, Cable, Fabric


@dataclass(frozen=True)
class HostRails:
    """A host and its compute HCAs in rail order (``hcas[i]`` is on rail ``i``)."""

    host: str
    hcas: tuple[str, ...]


@dataclass(frozen=True)
class Naming:
    leaf: str = "leaf-su{su:02d}-r{rail}"
    spine: str = "spine-g{group:02d}-{index:02d}"
    core: str = "core-p{plane:02d}-{index:02d}"


def leaf_name(naming: Naming, su: int, rail: int) -> str:
    return naming.leaf.format(su=su, rail=rail, group=0, index=0, plane=0)


@bulk
def build_design(  # noqa: C901 - one dimensioning read top to bottom: tiers, then each tier's switches and cables
    dims: FabricDimensions, hosts: list[HostRails], hosts_per_su: int, rails: int, *, naming: Naming = Naming(),
    rate: str = "NDR",
) -> Fabric:
    fabric = Fabric()
    leaves = _leaves(dims, rails, naming)
    for su, rail, name in leaves:
        fabric.add_node(name, LEAF, tier=1, su=su, rail=rail, group=_group_of(dims, su, rail, rails))
    for position, host in enumerate(hosts):
        su, slot = position // hosts_per_su + 1, position % hosts_per_su + 1
        for rail, hca in enumerate(host.hcas):
            node = f"{host.host}/{hca}"
            fabric.add_node(node, HCA, host=host.host, hca=hca, rail=rail, gpu=rail, su=su)
            fabric.add_cable(Cable((node, 1), (leaf_name(naming, su, rail), slot), rate))
    if dims.tiers < 2:
        return fabric
    spines = {}
    for group in range(1, dims.spine_groups + 1):
        for index in range(1, dims.spines_per_group + 1):
            name = naming.spine.format(su=0, rail=0, group=group, index=index, plane=index)
            spines[group, index] = name
            fabric.add_node(name, SPINE, tier=2, group=group, index=index, plane=index)
    per_spine = dims.leaf_uplinks // dims.spines_per_group
    members: dict[int, list[str]] = {}
    for su, rail, name in leaves:
        members.setdefault(_group_of(dims, su, rail, rails), []).append(name)
    for group, names in members.items():
        for position, leaf in enumerate(names):
            for uplink in range(dims.leaf_uplinks):
                index = uplink % dims.spines_per_group + 1
                link = uplink // dims.spines_per_group
                fabric.add_cable(Cable((leaf, dims.leaf_host_ports + uplink + 1),
                                       (spines[group, index], position * per_spine + link + 1), rate))
    if dims.tiers < 3:
        return fabric
    per_core = dims.spine_uplinks // dims.cores_per_plane
    for plane in range(1, dims.core_planes + 1):
        for index in range(1, dims.cores_per_plane + 1):
            fabric.add_node(naming.core.format(su=0, rail=0, group=0, index=index, plane=plane), CORE, tier=3,
                            plane=plane, index=index)
    for (group, index), spine in spines.items():
        for uplink in range(dims.spine_uplinks):
            core_index = uplink % dims.cores_per_plane + 1
            link = uplink // dims.cores_per_plane
            core = naming.core.format(su=0, rail=0, group=0, index=core_index, plane=index)
            fabric.add_cable(Cable((spine, dims.spine_downlinks + uplink + 1),
                                   (core, (group - 1) * per_core + link + 1), rate))
    return fabric


def _leaves(dims: FabricDimensions, rails: int, naming: Naming) -> list[tuple[int, int, str]]:
    return [(su, rail, leaf_name(naming, su, rail)) for su in range(1, dims.scalable_units + 1)
            for rail in range(rails)]


def _group_of(dims: FabricDimensions, su: int, rail: int, rails: int) -> int:
    """The spine group a leaf belongs to (1-based)."""
    if dims.tiers < 3:
        return 1
    if dims.spine_grouping == "su_block":
        return (su - 1) // (dims.leaves_per_group // rails) + 1
    blocks = -(-dims.scalable_units // dims.leaves_per_group)  # groups per rail
    return rail * blocks + (su - 1) // dims.leaves_per_group + 1
