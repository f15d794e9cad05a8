"""Parse NCCL's ``NCCL_DEBUG=INFO`` log for the transport a job actually used.

A job launched on an InfiniBand cluster can silently fall back to TCP sockets (no HCA found, ``NCCL_IB_HCA``
misspelt, the IB verbs library missing in the container) and still pass a correctness test at a fraction of the
bandwidth. NCCL says what it chose: ``NET/IB : Using [0]mlx5_0:1/IB …`` or ``NET/Socket : Using …``,
``Using network IB|Socket``, and per channel ``… [send] via NET/IB/0/GDRDMA`` (``GDRDMA``: GPUDirect RDMA, the
HCA reading GPU memory directly; without it data is staged through host memory).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
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


def _messages(text: str) -> Iterator[str]:
    """The message of each ``NCCL INFO`` line, whatever prefix (host:pid:tid [dev]) NCCL put before it."""
    for line in text.splitlines():
        if info := _INFO.search(line):
            yield info["message"].strip()


def parse_nccl_debug(text: str) -> NcclTransport:
    found = NcclTransport()
    for message in _messages(text):
        found.lines += 1
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


# --- An NVLink domain's communicator, as NCCL built it (GB200/GB300 NVL72, issue 53) -------------------------------
#
# The lines, as NCCL 2.19-2.27 print them at INFO (NCCL_DEBUG_SUBSYS INIT), and where they are seen in the wild:
#   ``comm 0x55b99fe024c0 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1 MNNVL 0`` (src/init.cc): ``MNNVL 1``
#   and ``nNodes 1`` across trays say NCCL fused the domain's trays into one NVLink node.
#   ``MNNVL busId 0x901000 fabric UUID 3143b15bc2cd192b.28cc9b5473fb5b93 cliqueId 0x7ffe state 3 healthMask 0xaa``
#   (a GB200 tray, NVIDIA/nccl#1769): the GPU's fabric registration as NVML gives it; ``fabric UUID 0.0
#   cliqueId 0x0`` a GPU in no partition (NVIDIA/nccl#1301: clique id and cluster UUID together name the clique).
#   ``NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 24)``, ``... is not available on dev 2
#   (NVLS_NCHANNELS 0)`` and, in 2.27, ``... is available on dev 0, transport enabled, symmetric multimem ...``.
_COMM = re.compile(r"^comm 0x[0-9a-f]+ rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
                   r"localRanks (?P<local>\d+) localRank \d+ MNNVL (?P<mnnvl>\d+)")
_MNNVL = re.compile(r"^MNNVL busId (?P<bus>0x[0-9a-f]+) fabric UUID (?P<uuid>[0-9a-f]+\.[0-9a-f]+) cliqueId "
                    r"(?P<clique>0x[0-9a-f]+) state (?P<state>\d+) healthMask (?P<mask>0x[0-9a-f]+)")
_NVLS = re.compile(r"^NVLS multicast support is (?P<not>not )?available on dev (?P<dev>\d+)"
                   r"(?: \(NVLS_NCHANNELS (?P<channels>\d+)\))?(?:, transport (?P<transport>enabled|disabled))?")

#: NVML's fabric health mask (nvml.h ``NVML_GPU_FABRIC_HEALTH_MASK_*``): two bits a field at these shifts, where 1
#: is TRUE (the trouble is there), 2 FALSE and 0 not supported. A healthy GB200 GPU prints 0xaa (every field FALSE).
FABRIC_HEALTH_FIELDS = {0: "degraded bandwidth", 2: "route recovery in progress", 4: "route unhealthy",
                        6: "access timeout recovery"}
#: NVML_GPU_FABRIC_STATE_COMPLETED: the GPU's registration with the NVLink fabric is done.
FABRIC_STATE_COMPLETED = 3


@dataclass(frozen=True)
class MnnvlGpu:
    """One GPU's fabric registration as NCCL read it from NVML."""

    bus_id: str
    fabric_uuid: str
    clique_id: int
    state: int
    health_mask: int

    @property
    def in_partition(self) -> bool:
        return self.state == FABRIC_STATE_COMPLETED and self.clique_id != 0 and self.fabric_uuid != "0.0"

    @property
    def troubles(self) -> list[str]:
        """The health fields NVML says are TRUE."""
        return [name for shift, name in FABRIC_HEALTH_FIELDS.items() if (self.health_mask >> shift) & 0x3 == 1]


@dataclass
class NcclDomain:
    """What NCCL said of the communicators one node's ranks built: whether the domain's trays were fused into one
    NVLink node (MNNVL), each GPU's fabric registration, and whether NVLS (NVLink SHARP) was on."""

    comms: list[dict[str, int]] = field(default_factory=list)  # rank, nranks, nnodes, local, mnnvl
    gpus: list[MnnvlGpu] = field(default_factory=list)
    nvls_available: list[bool] = field(default_factory=list)  # one per dev line
    nvls_channels: list[int] = field(default_factory=list)
    lines: int = 0

    @property
    def mnnvl(self) -> bool | None:
        """True when every communicator line says MNNVL 1; None when NCCL printed none."""
        return all(comm["mnnvl"] == 1 for comm in self.comms) if self.comms else None

    @property
    def nvls(self) -> bool | None:
        """NVLS on: every dev line says available (and any channel count given is above 0); None: no line."""
        if not self.nvls_available:
            return None
        return all(self.nvls_available) and all(channels > 0 for channels in self.nvls_channels)


def parse_nccl_domain(text: str) -> NcclDomain:
    """The NVLink domain's lines of one node's NCCL_DEBUG=INFO output (see the formats above)."""
    found = NcclDomain()
    for message in _messages(text):
        if comm := _COMM.match(message):
            found.lines += 1
            found.comms.append({key: int(comm[key]) for key in ("rank", "nranks", "nnodes", "local", "mnnvl")})
        elif gpu := _MNNVL.match(message):
            found.lines += 1
            found.gpus.append(MnnvlGpu(gpu["bus"], gpu["uuid"], int(gpu["clique"], 16), int(gpu["state"]),
                                       int(gpu["mask"], 16)))
        elif nvls := _NVLS.match(message):
            found.lines += 1
            found.nvls_available.append(not nvls["not"] and nvls["transport"] != "disabled")
            if nvls["channels"] is not None:
                found.nvls_channels.append(int(nvls["channels"]))
    return found
