"""Installed packages (``/var/lib/dpkg/status``), loaded kernel modules (``/proc/modules``) and a systemd unit's
state (``systemctl show``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from provision.facts import fact


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    installed: bool
    held: bool


def parse_dpkg_status(text: str) -> dict[str, Package]:
    packages = {}
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if ": " in line and not line.startswith((" ", "\t")):
                key, value = line.split(": ", 1)
                fields[key] = value
        if "Package" not in fields:
            continue
        want, _flag, status = [*fields.get("Status", "unknown ok not-installed").split(), "", ""][:3]
        packages[fields["Package"]] = Package(fields["Package"], fields.get("Version", ""), status == "installed",
                                              want == "hold")
    return packages


@dataclass(frozen=True)
class Module:
    name: str
    size: int
    users: tuple[str, ...]
    state: str


def parse_proc_modules(text: str) -> dict[str, Module]:
    modules = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 5:
            continue
        users = tuple(user for user in parts[3].split(",") if user and user != "-")
        modules[parts[0]] = Module(parts[0], int(parts[1]), users, parts[4])
    return modules


MODULES = fact.file("modules", "/proc/modules", parse_proc_modules)
#: Present only once nvidia-peermem has registered with ib_core as a peer-memory client (a module that loads but
#: never registers leaves it absent; its own /sys/module/nvidia_peermem/version proves nothing).
PEERMEM_REGISTRATION = fact.file("nv_mem", "/sys/kernel/mm/memory_peers/nv_mem/version", str.strip)


@dataclass(frozen=True)
class UnitState:
    """A systemd unit as ``systemctl show`` states it: loaded (``not-found`` for a unit it does not know), active
    (``active``, ``failed``, ``inactive``...) and the sub-state (``running``, ``dead``...; empty when not asked)."""

    load_state: str
    active_state: str
    sub_state: str


def parse_unit_properties(text: str) -> UnitState:
    """``systemctl show UNIT --property=...``: ``Key=Value`` lines. A unit systemd does not know still answers
    (``LoadState=not-found``); output without ``LoadState`` is refused."""
    properties = dict(line.split("=", 1) for line in text.replace("\r\n", "\n").split("\n") if "=" in line)
    if "LoadState" not in properties or "ActiveState" not in properties:
        raise ValueError(f"not systemctl show's properties: {text.strip()[:120]!r}")
    return UnitState(properties["LoadState"], properties["ActiveState"], properties.get("SubState", ""))


#: The NVSwitch fabric manager's state: on an HGX board CUDA does not start without it (error 802).
FABRIC_MANAGER = fact.command("fabric_manager", ["systemctl", "show", "nvidia-fabricmanager",
                                                 "--property=LoadState,ActiveState,SubState"], parse_unit_properties)

@dataclass(frozen=True)
class NvlsmStart:
    """What the fabric manager's start says on an HGX B200/B300 (field guide 8.1): the ConnectX bridge ports it
    found to the NVSwitches (``NVSwitch LPF``, device and GUID: in ``ibstat`` but no compute rail), the one it
    manages them through, and NVLSM (the NVSwitch subnet manager) started with its version."""

    bridge_ports: dict[str, str]
    management_guid: str
    nvlsm_command: str
    opensm_version: str


_LPF = re.compile(r"found NVSwitch LPF: device=(\S+) guid=(0x[0-9a-fA-F]+)")
_MANAGEMENT = re.compile(r"using NVSwitch management port GUID: (0x[0-9a-fA-F]+)")
_NVLSM_COMMAND = re.compile(r"running command: (\S*nvlsm\b.*)$")
_OPENSM = re.compile(r"nvlsm: OpenSM (\S+)")


def parse_nvlsm_start(text: str) -> NvlsmStart:
    """The fabric manager's journal (its wrapper's lines and NVLSM's, whatever prefix the log collector put before
    them). A journal that names no bridge port and no NVLSM start says nothing about NVLSM: refused."""
    ports: dict[str, str] = {}
    management = command = version = ""
    for line in text.replace("\r\n", "\n").split("\n"):
        if match := _LPF.search(line):
            ports[match.group(1)] = match.group(2).lower()
        elif match := _MANAGEMENT.search(line):
            management = match.group(1).lower()
        elif match := _NVLSM_COMMAND.search(line):
            command = match.group(1).strip()
        elif match := _OPENSM.search(line):
            version = match.group(1)
    if not ports and not command:
        raise ValueError("the fabric manager's journal names no NVSwitch bridge port (LPF) and no NVLSM start")
    return NvlsmStart(ports, management, command, version)


#: The fabric manager's journal this boot: on Blackwell HGX it starts NVLSM through the bridge ports.
NVLSM_START = fact.command("nvlsm_start", ["journalctl", "-u", "nvidia-fabricmanager", "-b", "-o", "cat",
                                           "--no-pager"], parse_nvlsm_start)
#: What dpkg has installed, and at which version (the fabric manager must be at the driver's).
DPKG_STATUS = fact.file("dpkg_status", "/var/lib/dpkg/status", parse_dpkg_status)
