"""PCI configuration space, byte for byte, as the kernel exposes it in sysfs ``config``.

The simulated ``lspci`` decodes these bytes and the simulated ``setpci`` edits
them, so ACS is read and cleared exactly the way the real tools do it: through
the extended-capability list that starts at offset 0x100.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

CONFIG_SIZE = 4096

CAP_PM, CAP_VPD, CAP_EXP = 0x01, 0x03, 0x10
ECAP_AER, ECAP_ACS = 0x0001, 0x000D

#: PCIe port types (Express capability register bits 7:4).
ENDPOINT, ROOT_PORT, UPSTREAM, DOWNSTREAM = 0x0, 0x4, 0x5, 0x6

#: Link speed encodings (LnkCap/LnkSta bits 3:0) → GT/s.
SPEEDS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
GEN_OF_SPEED = {value: code for code, value in SPEEDS.items()}

ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
#: What firmware leaves on when an IOMMU is active: the redirect bits that break GPU<->NIC P2P.
ACS_ENABLED_DEFAULT = 0b0011101  # SrcValid ReqRedir CmpltRedir UpstreamFwd
ACS_CAPABLE = 0b1011111

EXP_OFFSET = 0x68
PM_OFFSET = 0x40
VPD_OFFSET = 0x48  # where ConnectX cards put theirs (lspci prints "Capabilities: [48] Vital Product Data")
AER_OFFSET = 0x100
ACS_OFFSET = 0x220


@dataclass(frozen=True)
class LinkConfig:
    max_gen: int
    max_width: int
    gen: int
    width: int


def build(
    *,
    vendor: int,
    device: int,
    class_code: int,
    bridge: bool,
    port_type: int,
    link: LinkConfig,
    port_number: int = 0,
    acs_control: int | None = None,
    secondary_bus: int = 0,
    subordinate_bus: int = 0,
    primary_bus: int = 0,
    vpd: bool = False,
) -> bytes:
    """A 4 KiB config space: header, PM, VPD (a card that has product data) and Express capabilities, AER, and ACS
    when given."""
    space = bytearray(CONFIG_SIZE)
    struct.pack_into("<HH", space, 0x00, vendor, device)
    struct.pack_into("<HH", space, 0x04, 0x0547, 0x0010)  # command; status: capability list present
    struct.pack_into("<I", space, 0x08, (class_code << 8) | 0xA1)  # class code and revision
    space[0x0E] = 0x01 if bridge else 0x00
    if bridge:
        space[0x18], space[0x19], space[0x1A] = primary_bus, secondary_bus, subordinate_bus
    space[0x34] = PM_OFFSET
    space[PM_OFFSET], space[PM_OFFSET + 1] = CAP_PM, VPD_OFFSET if vpd else EXP_OFFSET
    if vpd:  # the data itself is read through the VPD registers; the kernel serves it as sysfs ``vpd``
        space[VPD_OFFSET], space[VPD_OFFSET + 1] = CAP_VPD, EXP_OFFSET
    struct.pack_into("<H", space, PM_OFFSET + 2, 0x0003)
    space[EXP_OFFSET], space[EXP_OFFSET + 1] = CAP_EXP, 0x00
    struct.pack_into("<H", space, EXP_OFFSET + 2, 0x0002 | (port_type << 4))
    lnkcap = link.max_gen | (link.max_width << 4) | (port_number << 24)
    struct.pack_into("<I", space, EXP_OFFSET + 0x0C, lnkcap)
    struct.pack_into("<H", space, EXP_OFFSET + 0x12, link.gen | (link.width << 4) | (1 << 13))
    struct.pack_into("<I", space, EXP_OFFSET + 0x2C, ((1 << link.max_gen) - 1) << 1)  # LnkCap2 speeds vector
    next_ext = ACS_OFFSET if acs_control is not None else 0
    _ext_header(space, AER_OFFSET, ECAP_AER, 2, next_ext)
    if acs_control is not None:
        _ext_header(space, ACS_OFFSET, ECAP_ACS, 1, 0)
        struct.pack_into("<HH", space, ACS_OFFSET + 4, ACS_CAPABLE, acs_control)
    return bytes(space)


def _ext_header(space: bytearray, offset: int, cap_id: int, version: int, next_offset: int) -> None:
    struct.pack_into("<I", space, offset, cap_id | (version << 16) | (next_offset << 20))


def capabilities(space: bytes) -> dict[int, int]:
    """Standard capability id → offset, walking the list from 0x34."""
    found: dict[int, int] = {}
    offset = space[0x34] & 0xFC
    seen = 0
    while offset and seen < 48:
        found.setdefault(space[offset], offset)
        offset = space[offset + 1] & 0xFC
        seen += 1
    return found


def extended_capabilities(space: bytes) -> dict[int, tuple[int, int]]:
    """Extended capability id → (offset, version), walking from 0x100."""
    found: dict[int, tuple[int, int]] = {}
    offset = 0x100
    seen = 0
    while offset and len(space) >= offset + 4 and seen < 64:
        (header,) = struct.unpack_from("<I", space, offset)
        if header == 0:
            break
        found.setdefault(header & 0xFFFF, (offset, (header >> 16) & 0xF))
        offset = (header >> 20) & 0xFFC
        seen += 1
    return found


def read(space: bytes, offset: int, width: int) -> int:
    return int.from_bytes(space[offset : offset + width], "little")


def write(space: bytes, offset: int, width: int, value: int) -> bytes:
    changed = bytearray(space)
    changed[offset : offset + width] = value.to_bytes(width, "little")
    return bytes(changed)
