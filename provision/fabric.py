"""From a loaded spec to the fabric design the topology package works on."""

from __future__ import annotations

from provision.spec import LoadedSpec
from topology.fattree import HostRails, Naming, build_design
from topology.model import Fabric


def host_rails(loaded: LoadedSpec) -> list[HostRails]:
    """Each host's compute HCAs ordered by rail (rail i is the HCA paired with GPU i)."""
    hosts = []
    for node in loaded.nodes:
        rails = loaded.spec.hardware[node.hardware].rails
        hosts.append(HostRails(node.name, tuple(hca for hca, _gpu in sorted(rails.items(), key=lambda item: item[1]))))
    return hosts


def design_fabric(loaded: LoadedSpec) -> Fabric:
    """The designed fabric of a spec with fat-tree parameters (validation guarantees they build)."""
    fabric = loaded.spec.fabric
    if loaded.fabric is None or fabric.rails is None or fabric.hosts_per_su is None:
        raise ValueError("this spec gives a cabling file, not fat-tree parameters, so there is no design to derive")
    naming = Naming(fabric.naming.leaf, fabric.naming.spine, fabric.naming.core)
    return build_design(loaded.fabric, host_rails(loaded), fabric.hosts_per_su, fabric.rails, naming=naming,
                        rate=fabric.link_rate)
