"""Parse NCCL's ``NCCL_DEBUG=INFO`` log for the transport a job actually used.

A job launched on an InfiniBand cluster can silently fall back to TCP sockets (no HCA found, ``NCCL_IB_HCA``
misspelt, the IB verbs library missing in the container) and still pass a correctness test at a fraction of the
bandwidth. NCCL says what it chose: ``NET/IB : Using [0]mlx5_0:1/IB …`` or ``NET/Socket : Using …``,
``Using network IB|Socket``, and per channel ``… [send] via NET/IB/0/GDRDMA`` (``GDRDMA``: GPUDirect RDMA, the
HCA reading GPU memory directly; without it data is staged through host memory).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_INFO = re.compile(r"NCCL INFO (?P<message>.*)$")
_NETWORK = re.compile(r"^Using network (?P<name>\S+)")
_IB_DEVICES = re.compile(r"^NET/IB : Using (?P<devices>.*?)(?: ;|$)")
_DEVICE = re.compile(r"\[\d+\](?P<name>[\w.-]+):\d+/(?P<layer>IB|RoCE)")
_CHANNEL = re.compile(r"^Channel \S+ : .* via NET/(?P<net>[A-Za-z]+)(?P<rest>/\S*)?")


@dataclass
class NcclTransport:
    networks: set[str] = field(default_factory=set)
    ib_devices: list[str] = field(default_factory=list)
    channels_ib: int = 0
    channels_ib_gdr: int = 0
    channels_socket: int = 0
    lines: int = 0


def parse_nccl_debug(text: str) -> NcclTransport:
    found = NcclTransport()
    for line in text.splitlines():
        info = _INFO.search(line)
        if not info:
            continue
        found.lines += 1
        message = info["message"].strip()
        if network := _NETWORK.match(message):
            found.networks.add(network["name"])
        elif devices := _IB_DEVICES.match(message):
            for device in _DEVICE.finditer(devices["devices"]):
                if device["name"] not in found.ib_devices:
                    found.ib_devices.append(device["name"])
        elif channel := _CHANNEL.match(message):
            if channel["net"] == "IB":
                found.channels_ib += 1
                found.channels_ib_gdr += "GDRDMA" in (channel["rest"] or "")
            elif channel["net"] == "Socket":
                found.channels_socket += 1
    return found
