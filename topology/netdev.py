"""Which HCA is behind an IPoIB netdev (``ib0``, or a predictable name such as ``ibp12s0``), from what the host
says — never guessed from the number (``ib3`` is not ``mlx5_3`` on a host whose HCAs are mlx5_0 and mlx5_3..11,
and predictable names carry no number at all).

Two sources: the host's own sysfs, where ``/sys/class/net/<netdev>`` and ``/sys/class/infiniband/<hca>`` both
resolve into the PCI function they belong to, and a map file an operator writes (``host netdev hca`` per line;
``* netdev hca`` for every host; ``#`` comments).
"""

from __future__ import annotations

import re

from topology.errors import LineError

_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


class NetdevMapError(LineError):
    """A netdev map that cannot be read."""


def _function(path: str, marker: str) -> str | None:
    """The PCI function a sysfs class path resolves into: the part right before ``/net/`` or ``/infiniband/``."""
    parts = path.rstrip("/").split("/")
    for index in range(len(parts) - 1, 0, -1):
        if parts[index] == marker and _BDF.match(parts[index - 1]):
            return parts[index - 1].lower()
    return None


def netdevs_from_sysfs(net_links: dict[str, str], ib_links: dict[str, str]) -> dict[str, str]:
    """netdev -> HCA, for the netdevs and HCAs that sit on the same PCI function.

    >>> netdevs_from_sysfs({"ibp12s0": "/sys/devices/pci0000:00/0000:00:01.1/0000:0c:00.0/net/ibp12s0"},
    ...                    {"mlx5_2": "/sys/devices/pci0000:00/0000:00:01.1/0000:0c:00.0/infiniband/mlx5_2"})
    {'ibp12s0': 'mlx5_2'}
    """
    hca_at = {function: hca for hca, path in ib_links.items() if (function := _function(path, "infiniband"))}
    return {netdev: hca_at[function] for netdev, path in net_links.items()
            if (function := _function(path, "net")) in hca_at}


def parse_netdev_map(text: str) -> dict[tuple[str, str], str]:
    """``(host, netdev) -> hca``; host ``*`` stands for every host.

    >>> parse_netdev_map("# host netdev hca\\ngpu-a17 ibp12s0 mlx5_2\\n* ib0 mlx5_0\\n")
    {('gpu-a17', 'ibp12s0'): 'mlx5_2', ('*', 'ib0'): 'mlx5_0'}
    """
    found: dict[tuple[str, str], str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        cells = line.split()
        if len(cells) != 3:
            raise NetdevMapError(f"expected 'host netdev hca', got {raw.strip()!r}", number)
        found[(cells[0], cells[1])] = cells[2]
    return found


def lookup(mapping: dict[tuple[str, str], str], host: str, netdev: str) -> str | None:
    return mapping.get((host, netdev)) or mapping.get(("*", netdev))
