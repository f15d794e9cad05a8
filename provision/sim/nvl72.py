"""Where each simulated GB200/GB300 compute tray sits in its rack, as its GPUs' Platform Info and Fabric block and
its IMEX daemon would show it.

A tray learns its place from hardware outside it: the rack's chassis serial and its own slot from the rack's
management, its NVLink partition (ClusterUUID and CliqueId) from the switch trays' NMX, its IMEX peers from the
``nodes_config.cfg`` that provisioning writes. The simulator stands in for the rack: each tray of a domain in the
spec is given its tray index (its position in the domain's ``hosts``), the rack's serial (the spec's
``chassis_serial``, or one derived from the seed), one ClusterUUID and CliqueId per domain, and the addresses and
host names of its domain's trays (to answer for them in ``nvidia-imex-ctl -N``). Faults then make the tray disagree
(a tray cabled into another rack's partition shows that rack's ClusterUUID).
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from provision.spec import LoadedSpec
from provision.spec.semantics import domain_trays


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("\x1f".join(str(part) for part in parts).encode()).digest()


def partition_of(seed: int, domain: str) -> tuple[str, str]:
    """A domain's ClusterUUID and CliqueId (non-zero, as NMX assigns them), the same at every ``sim up``."""
    digest = _digest(seed, "nvlink-domain", domain)
    return str(uuid.UUID(bytes=digest[:16])), str(1 + int.from_bytes(digest[16:18], "big") % 32766)


def chassis_serial_of(seed: int, domain: str) -> str:
    """A rack's 13-digit chassis serial (the real tray prints ``1820625880038``), when the spec names none."""
    return "18206" + f"{int.from_bytes(_digest(seed, 'chassis', domain)[:8], 'big') % 10**8:08d}"


def tray_places(loaded: LoadedSpec, seed: int) -> dict[str, dict[str, Any]]:
    """Per tray host: its domain, tray index (1-based, the domain's ``hosts`` order), slot, chassis serial,
    partition and peers (``{address: host}`` of every tray of the domain, itself included, in tray order).

    The slot is the tray index plus one (the real tray: index 2 in slot 3); the switch trays' slots between the
    compute trays are not modelled, and nothing judges a slot the spec cannot name."""
    addresses = {node.name: node.address for node in loaded.nodes}
    places: dict[str, dict[str, Any]] = {}
    for domain in loaded.spec.nvlink_domains or []:
        hosts = domain_trays(domain)
        cluster_uuid, clique_id = partition_of(seed, domain.name)
        serial = domain.chassis_serial or chassis_serial_of(seed, domain.name)
        peers = {addresses[host]: host for host in hosts if host in addresses}
        for index, host in enumerate(hosts, start=1):
            places[host] = {"domain": domain.name, "tray_index": index, "slot": index + 1, "host_id": 1,
                            "chassis_serial": serial, "cluster_uuid": cluster_uuid, "clique_id": clique_id,
                            "peers": peers}
    return places
