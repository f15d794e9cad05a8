"""``lspci`` and ``setpci`` over a hardware root: decode and edit the sysfs config spaces.

Output follows pciutils 3.x for the lines our checks read (device line, NUMA
node, bus numbers, Express LnkCap/LnkSta with ``(downgraded)``, AER and ACS
capabilities, kernel driver); decoration lines are reproduced where cheap.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from provision.hostmodel import pciconfig, vpd
from provision.hostmodel.pciconfig import CAP_EXP, ECAP_ACS, ECAP_AER, SPEEDS
from provision.sim.files import replace_file
from provision.sim.tools.common import ToolError, not_simulated, privileged

VENDORS = {0x10DE: "NVIDIA Corporation", 0x15B3: "Mellanox Technologies", 0x1000: "Broadcom / LSI",
           0x8086: "Intel Corporation"}
DEVICES = {
    (0x10DE, 0x2330): "GH100 [H100 SXM5 80GB]", (0x10DE, 0x2335): "GH100 [H200 SXM 141GB]",
    (0x10DE, 0x20B2): "GA100 [A100 SXM4 80GB]", (0x10DE, 0x2901): "GB100 [B200]",
    (0x10DE, 0x22A3): "GH100 [H100 NVSwitch]", (0x15B3, 0x1021): "MT2910 Family [ConnectX-7]",
    (0x1000, 0xC030): "PEX890xx PCIe Gen 5 Switch",
}
CLASSES = {0x0604: "PCI bridge", 0x0302: "3D controller", 0x0207: "Infiniband controller", 0x0680: "Bridge",
           0x0200: "Ethernet controller"}
PORT_TYPES = {0x0: "Endpoint", 0x4: "Root Port (Slot-)", 0x5: "Upstream Port", 0x6: "Downstream Port (Slot+)"}
NAMED_CAPS = {"EXP": (False, CAP_EXP), "PM": (False, pciconfig.CAP_PM), "ACS": (True, ECAP_ACS),
              "AER": (True, ECAP_AER)}
WIDTHS = {"b": 1, "w": 2, "l": 4}


def devices(root: Path) -> list[tuple[str, Path]]:
    base = root / "sys" / "bus" / "pci" / "devices"
    if not base.is_dir():
        return []
    return sorted((name, base / name) for name in os.listdir(base) if (base / name / "config").exists())


def _speed(code: int) -> str:
    value = SPEEDS.get(code, 0)
    return f"{value:g}GT/s"


def describe(bdf: str, directory: Path, verbosity: int, *, domains: bool) -> list[str]:
    space = (directory / "config").read_bytes()
    vendor, device = pciconfig.read(space, 0, 2), pciconfig.read(space, 2, 2)
    class_code = pciconfig.read(space, 0x09, 3)
    revision = space[0x08]
    bridge = space[0x0E] & 0x7F == 1
    name = DEVICES.get((vendor, device), f"Device {device:04x}")
    address = bdf if domains else bdf[5:]
    class_name = CLASSES.get(class_code >> 8, f"Class {class_code >> 8:04x}")
    vendor_name = VENDORS.get(vendor, f"Vendor {vendor:04x}")
    head = f"{address} {class_name}: {vendor_name} {name} (rev {revision:02x})"
    if bridge:
        head += " (prog-if 00 [Normal decode])"
    lines = [head]
    if verbosity == 0:
        return lines
    lines += [
        "\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- FastB2B- DisINTx+",
        "\tStatus: Cap+ 66MHz- UDF- FastB2B- ParErr- DEVSEL=fast >TAbort- <TAbort- <MAbort- >SERR- <PERR- INTx-",
        "\tLatency: 0",
    ]
    numa = (directory / "numa_node").read_text().strip() if (directory / "numa_node").exists() else "-1"
    lines.append(f"\tNUMA node: {numa}")
    if bridge:
        lines.append(f"\tBus: primary={space[0x18]:02x}, secondary={space[0x19]:02x}, "
                     f"subordinate={space[0x1A]:02x}, sec-latency=0")
    if not privileged():  # only root may read past the first 64 bytes of config space, where capabilities live
        lines.append("\tCapabilities: <access denied>")
        return _with_driver(lines, directory)
    caps = pciconfig.capabilities(space)
    for cap_id, offset in sorted(caps.items(), key=lambda item: item[1]):
        if cap_id == pciconfig.CAP_PM:
            lines.append(f"\tCapabilities: [{offset:02x}] Power Management version 3")
        elif cap_id == CAP_EXP:
            port_type = (pciconfig.read(space, offset + 2, 2) >> 4) & 0xF
            lines.append(f"\tCapabilities: [{offset:02x}] Express (v2) {PORT_TYPES.get(port_type, 'Unknown')}, MSI 00")
            if verbosity >= 2:
                lines += _link_lines(space, offset)
        elif cap_id == pciconfig.CAP_VPD:
            lines.append(f"\tCapabilities: [{offset:02x}] Vital Product Data")
            if verbosity >= 2:
                lines += _vpd_lines(directory)
    for cap_id, (offset, version) in sorted(pciconfig.extended_capabilities(space).items(), key=lambda item: item[1]):
        if cap_id == ECAP_AER:
            lines.append(f"\tCapabilities: [{offset:03x} v{version}] Advanced Error Reporting")
        elif cap_id == ECAP_ACS:
            lines.append(f"\tCapabilities: [{offset:03x} v{version}] Access Control Services")
            if verbosity >= 2:
                capability, control = pciconfig.read(space, offset + 4, 2), pciconfig.read(space, offset + 6, 2)
                lines.append("\t\tACSCap:\t" + _flags(capability))
                lines.append("\t\tACSCtl:\t" + _flags(control))
    return _with_driver(lines, directory)


#: How lspci names a VPD keyword (its ls-vpd.c table; the V* and Y* ranges are vendor's and system's own).
VPD_KEYWORDS = {"PN": "Part number", "EC": "Engineering changes", "MN": "Manufacture ID", "SN": "Serial number"}


def _vpd_lines(directory: Path) -> list[str]:
    """The card's product data as lspci -vv prints it from sysfs ``vpd``."""
    try:
        product, fields, checksum_good = vpd.decode((directory / "vpd").read_bytes())
    except (OSError, ValueError):
        return ["\t\tNot readable"]
    lines = [f"\t\tProduct Name: {product}", "\t\tRead-only fields:"]
    for keyword, value in fields:
        name = VPD_KEYWORDS.get(keyword, {"V": "Vendor specific", "Y": "System specific"}.get(keyword[0], "Unknown"))
        lines.append(f"\t\t\t[{keyword}] {name}: {value}")
    lines += [f"\t\t\t[RV] Reserved: checksum {'good' if checksum_good else 'bad'}, 1 byte(s) reserved", "\t\tEnd"]
    return lines


def _with_driver(lines: list[str], directory: Path) -> list[str]:
    driver = directory / "driver"
    if driver.is_symlink():
        lines.append(f"\tKernel driver in use: {os.path.basename(os.readlink(driver))}")
    return lines


def _link_lines(space: bytes, offset: int) -> list[str]:
    lnkcap = pciconfig.read(space, offset + 0x0C, 4)
    lnksta = pciconfig.read(space, offset + 0x12, 2)
    max_speed, max_width, port = lnkcap & 0xF, (lnkcap >> 4) & 0x3F, lnkcap >> 24
    speed, width = lnksta & 0xF, (lnksta >> 4) & 0x3F
    speed_note = "downgraded" if speed < max_speed else "ok"
    width_note = "downgraded" if width < max_width else "ok"
    return [
        f"\t\tLnkCap:\tPort #{port}, Speed {_speed(max_speed)}, Width x{max_width}, ASPM not supported",
        "\t\t\tClockPM- Surprise- LLActRep+ BwNot- ASPMOptComp+",
        f"\t\tLnkSta:\tSpeed {_speed(speed)} ({speed_note}), Width x{width} ({width_note})",
        f"\t\t\tTrErr- Train- SlotClk+ DLActive{'+' if lnksta & (1 << 13) else '-'} BWMgmt- ABWMgmt-",
    ]


def _flags(value: int) -> str:
    return " ".join(f"{name}{'+' if value & (1 << bit) else '-'}" for bit, name in enumerate(pciconfig.ACS_BITS))


def _normalise_slot(slot: str) -> str:
    if re.fullmatch(r"[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", slot):
        slot = "0000:" + slot
    if not re.fullmatch(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", slot):
        raise ToolError(f"lspci: -s: Invalid slot number {slot!r}", 1)
    return slot.lower()


def lspci(root: Path, args: list[str]) -> int:
    verbosity, slot, domains = 0, None, False
    index = 0
    while index < len(args):
        arg = args[index]
        if re.fullmatch(r"-v+", arg):
            verbosity = len(arg) - 1
        elif arg == "-s":
            index += 1
            slot = _normalise_slot(args[index]) if index < len(args) else None
        elif arg == "-D":
            domains = True
        else:
            not_simulated("lspci", arg)
        index += 1
    blocks = []
    found = list(devices(root))
    # lspci names domains only where some device is outside domain 0000 (a GB200 tray), unless -D asks always
    domains = domains or any(not bdf.startswith("0000:") for bdf, _directory in found)
    for bdf, directory in found:
        if slot is None or bdf == slot:
            blocks.append("\n".join(describe(bdf, directory, verbosity, domains=domains)))
    separator = "\n\n" if verbosity else "\n"
    if blocks:
        print(separator.join(blocks) + ("\n" if verbosity else ""))
    return 0


_REGISTER = re.compile(r"^(?:(?P<cap>E?CAP)_(?P<name>[A-Z0-9]+)(?:\+(?P<plus>0x[0-9a-fA-F]+|\d+))?|"
                       r"(?P<offset>0x[0-9a-fA-F]+|[0-9a-fA-F]+))\.(?P<width>[bwl])(?:=(?P<value>[0-9a-fA-F]+))?$")


def setpci(root: Path, args: list[str]) -> int:
    """``setpci -s BDF REG[.w][=VALUE] ...``; reads print hex, writes edit the config file in place."""
    if len(args) < 3 or args[0] != "-s":
        not_simulated("setpci", " ".join(args))
    bdf = _normalise_slot(args[1])
    directory = root / "sys" / "bus" / "pci" / "devices" / bdf
    if not (directory / "config").exists():
        raise ToolError(f"setpci: Warning: No devices selected for \"{args[1]}\".", 1)
    if not privileged():  # setpci opens the config file for writing, and reads past 64 bytes need root too
        raise ToolError(f"setpci: Unable to open /sys/bus/pci/devices/{bdf}/config: Operation not permitted", 1)
    space = (directory / "config").read_bytes()
    for register in args[2:]:
        match = _REGISTER.match(register)
        if not match:
            raise ToolError(f"setpci: Invalid register \"{register}\".", 1)
        width = WIDTHS[match["width"]]
        if match["cap"]:
            extended, cap_id = NAMED_CAPS.get(match["name"], (None, None))
            if cap_id is None:
                raise ToolError(f"setpci: Unknown capability \"{match['name']}\".", 1)
            found = (pciconfig.extended_capabilities(space).get(cap_id, (None,))[0] if extended
                     else pciconfig.capabilities(space).get(cap_id))
            if found is None:
                raise ToolError(f"setpci: Capability {match['name']} not found on {bdf[5:]}.", 1)
            offset = found + int(match["plus"] or "0", 0)
        else:
            offset = int(match["offset"], 16)
        if offset + width > len(space):
            raise ToolError(f"setpci: Register {register} out of range.", 1)
        if match["value"] is None:
            print(f"{pciconfig.read(space, offset, width):0{width * 2}x}")
        else:
            space = pciconfig.write(space, offset, width, int(match["value"], 16) & ((1 << (8 * width)) - 1))
            replace_file(directory / "config", space)
    return 0
