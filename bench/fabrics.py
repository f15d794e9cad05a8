"""The reference fabric the benchmarks share: 8-GPU hosts on 8 rails, 32 hosts per SU, 64-port switches."""

from __future__ import annotations

from topology.design import FabricDimensions, FabricParameters, dimension
from topology.fattree import HostRails, build_design
from topology.model import Fabric

RAILS, HOSTS_PER_SU, RADIX = 8, 32, 64


def reference_hosts(gpus: int) -> tuple[FabricDimensions, list[HostRails]]:
    hosts = gpus // RAILS
    params = FabricParameters(hosts=hosts, rails=RAILS, hosts_per_su=HOSTS_PER_SU, switch_radix=RADIX)
    names = [HostRails(f"gpu{index:05d}", tuple(f"mlx5_{rail}" for rail in range(RAILS))) for index in range(hosts)]
    return dimension(params), names


def reference_fabric(gpus: int) -> Fabric:
    dims, names = reference_hosts(gpus)
    return build_design(dims, names, HOSTS_PER_SU, RAILS)
