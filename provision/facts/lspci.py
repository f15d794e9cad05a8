"""Parse ``lspci -vvv``: per device, its class, NUMA node, PCIe link and ACS state.

Pure: text in, records out. Tolerates both LnkSta styles (``Speed 16GT/s
(downgraded)`` in pciutils >= 3.7, bare ``Speed 8GT/s,`` before), addresses with
or without a domain, and devices whose capabilities lspci could not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provision.facts import fact

_HEAD = re.compile(r"^(?P<addr>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) "
                   r"(?P<kind>[^:]+): (?P<desc>.*)$")
_SPEED = re.compile(r"Speed (?P<speed>[\d.]+)GT/s(?: \((?P<speed_note>ok|downgraded)\))?")
_WIDTH = re.compile(r"Width x(?P<width>\d+)(?: \((?P<width_note>ok|downgraded)\))?")
_EXPRESS = re.compile(r"Express \(v\d\) (?P<type>Endpoint|Root Port|Upstream Port|Downstream Port|Legacy Endpoint|"
                      r"Root Complex Integrated Endpoint|PCI-Express to PCI/PCI-X Bridge)")


@dataclass(frozen=True)
class Link:
    speed_gts: float
    width: int


@dataclass
class PciDeviceFacts:
    address: str  # always with the domain: 0000:19:00.0
    kind: str  # lspci's class name: "PCI bridge", "3D controller", ...
    description: str
    numa_node: int | None = None
    express_type: str | None = None
    link_capability: Link | None = None
    link_status: Link | None = None
    speed_downgraded: bool = False
    width_downgraded: bool = False
    acs_capability: dict[str, bool] | None = None
    acs_control: dict[str, bool] | None = None
    driver: str | None = None
    capabilities: list[str] = field(default_factory=list)
    #: The card's Vital Product Data as lspci -vv prints it (needs root): ``Product Name`` and each read-only
    #: field by its keyword (``PN``, ``SN``, ``VA``...); empty where the device has none.
    vpd: dict[str, str] = field(default_factory=dict)

    @property
    def slot(self) -> str:
        """The card's slot (domain, bus, device): the functions of one card share it."""
        return self.address.rsplit(".", 1)[0]

    @property
    def access_denied(self) -> bool:
        """lspci run without root: the capability blocks (link, ACS) were not read, not absent."""
        return "<access denied>" in self.capabilities

    @property
    def is_bridge(self) -> bool:
        return self.kind == "PCI bridge"

    @property
    def acs_redirects(self) -> list[str]:
        """ACS control bits that force peer-to-peer traffic up to the root complex."""
        control = self.acs_control or {}
        return [bit for bit in ("ReqRedir", "CmpltRedir", "UpstreamFwd") if control.get(bit)]


_VPD_FIELD = re.compile(r"^\[(?P<keyword>[A-Z0-9]{2})\] [^:]+: ?(?P<value>.*)$")


def parse_lspci_verbose(text: str) -> list[PciDeviceFacts]:
    devices: list[PciDeviceFacts] = []
    current: PciDeviceFacts | None = None
    for raw in text.replace("\r\n", "\n").split("\n"):
        head = _HEAD.match(raw)
        if head:
            address = head["addr"].lower()
            address = address if address.count(":") == 2 else "0000:" + address
            current = PciDeviceFacts(address, head["kind"], head["desc"])
            devices.append(current)
            continue
        if current is None or not raw.strip():
            continue
        _read_line(current, raw.strip())
    if not devices:
        raise ValueError("no PCI device in lspci's output")
    if not text.replace("\r\n", "\n").endswith("\n\n"):  # -v ends every device, the last one too, with a blank line
        raise ValueError(f"lspci's output ends inside the block of {devices[-1].address}: cut short")
    return devices


def _read_line(current: PciDeviceFacts, line: str) -> None:
    """One line of a device's block: the fields preflight reads, the rest passed over."""
    key, _, value = line.partition(":")
    value = value.strip()
    if key == "NUMA node":
        current.numa_node = int(value) if value.lstrip("-").isdigit() else None
    elif key == "Capabilities":
        current.capabilities.append(value)
        express = _EXPRESS.search(value)
        if express:
            current.express_type = express["type"]
    elif key == "LnkCap":
        current.link_capability = _link(value)
    elif key == "LnkSta":
        current.link_status = _link(value)
        speed, width = _SPEED.search(value), _WIDTH.search(value)
        current.speed_downgraded = bool(speed and speed["speed_note"] == "downgraded")
        current.width_downgraded = bool(width and width["width_note"] == "downgraded")
        if speed and speed["speed_note"] is None and current.link_capability and current.link_status:
            current.speed_downgraded = current.link_status.speed_gts < current.link_capability.speed_gts
            current.width_downgraded = current.link_status.width < current.link_capability.width
    elif key == "ACSCap":
        current.acs_capability = _flags(value)
    elif key == "ACSCtl":
        current.acs_control = _flags(value)
    elif key == "Kernel driver in use":
        current.driver = value
    elif key == "Product Name":
        current.vpd[key] = value
    elif (vpd_field := _VPD_FIELD.match(line)) and vpd_field["keyword"] != "RV":  # RV: a checksum
        current.vpd[vpd_field["keyword"]] = vpd_field["value"].strip()


def _link(value: str) -> Link | None:
    speed, width = _SPEED.search(value), _WIDTH.search(value)
    if not speed or not width:
        return None
    return Link(float(speed["speed"]), int(width["width"]))


def _flags(value: str) -> dict[str, bool]:
    return {match[1]: match[2] == "+" for match in re.finditer(r"([A-Za-z]+)([+-])", value)}


#: Without root, lspci prints ``Capabilities: <access denied>`` in place of every capability block.
LSPCI = fact.command("lspci", ["lspci", "-vvv"], parse_lspci_verbose, needs_root=True)
#: Each PCI device's sysfs path, which names every bridge between it and its root port.
PCI_DEVICES = fact.links("pci_devices", "/sys/bus/pci/devices", dict)
