"""InfiniBand HCA facts from ``/sys/class/infiniband`` and from ``ibstat``.

The sysfs parser takes a mapping of relative path → file content (what a
collector read), so it stays pure and is tested on the real gpud tree. Values
may or may not end in a newline (real sysfs adds one; fixture copies do not).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from provision.facts import fact


@dataclass
class IbPort:
    state: str  # ACTIVE, DOWN, INIT, ARMED
    physical_state: str  # LinkUp, Polling, Disabled, ...
    rate_gbps: float | None
    rate_text: str
    link_layer: str
    counters: dict[str, int] = field(default_factory=dict)


@dataclass
class IbDevice:
    name: str
    hca_type: str
    firmware: str
    board_id: str = ""
    node_guid: str = ""
    ports: dict[int, IbPort] = field(default_factory=dict)


def read_tree(base: Path) -> dict[str, str]:
    """Every regular file under ``base`` (following device symlinks), as relative path → text."""
    files: dict[str, str] = {}
    for directory, _dirs, names in os.walk(base, followlinks=True):
        for name in names:
            path = Path(directory) / name
            try:
                files[str(path.relative_to(base))] = path.read_text()
            except (OSError, UnicodeDecodeError):
                continue
    return files


def parse_infiniband_class(files: Mapping[str, str]) -> dict[str, IbDevice]:
    """``{"mlx5_0/fw_ver": "28.41.1000", "mlx5_0/ports/1/state": "4: ACTIVE", ...}`` → devices."""
    devices: dict[str, IbDevice] = {}

    def value(path: str) -> str:
        return files.get(path, "").strip()

    for name in sorted({path.split("/", 1)[0] for path in files}):
        device = IbDevice(name, value(f"{name}/hca_type"), value(f"{name}/fw_ver"), value(f"{name}/board_id"),
                          value(f"{name}/node_guid"))
        port_numbers = {int(match.group(1)) for path in files
                        if (match := re.match(rf"^{re.escape(name)}/ports/(\d+)/", path))}
        for number in sorted(port_numbers):
            prefix = f"{name}/ports/{number}"
            rate = value(f"{prefix}/rate")
            rate_match = re.match(r"^([\d.]+) Gb/sec", rate)
            counters = {path.rsplit("/", 1)[1]: int(text.strip()) for path, text in files.items()
                        if path.startswith(f"{prefix}/counters/") and text.strip().isdigit()}
            device.ports[number] = IbPort(
                state=value(f"{prefix}/state").partition(": ")[2] or value(f"{prefix}/state"),
                physical_state=value(f"{prefix}/phys_state").partition(": ")[2] or value(f"{prefix}/phys_state"),
                rate_gbps=float(rate_match.group(1)) if rate_match else None,
                rate_text=rate,
                link_layer=value(f"{prefix}/link_layer"),
                counters=counters,
            )
        devices[name] = device
    return devices


_IBSTAT_STATES = {"Active": "ACTIVE", "Down": "DOWN", "Initializing": "INIT", "Armed": "ARMED"}


def parse_ibstat(text: str) -> dict[str, IbDevice]:
    devices: dict[str, IbDevice] = {}
    device: IbDevice | None = None
    port: dict[str, str] | None = None
    ports: dict[str, dict[int, dict[str, str]]] = {}
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        head = re.match(r"^CA '([^']+)'$", line)
        if head:
            device = IbDevice(head.group(1), "", "")
            devices[device.name] = device
            ports[device.name] = {}
            port = None
            continue
        if device is None or ":" not in line:
            continue
        key, _, value = line.partition(":")
        value = value.strip()
        port_header = re.match(r"^Port (\d+)$", key)
        if port_header:
            port = ports[device.name].setdefault(int(port_header.group(1)), {})
        elif port is not None:
            port[key] = value
        elif key == "CA type":
            device.hca_type = value
        elif key == "Firmware version":
            device.firmware = value
        elif key == "Node GUID":
            device.node_guid = value
    if not devices:
        raise ValueError("no CA in ibstat's output")
    for name, numbered in ports.items():
        for number, fields in numbered.items():
            lacking = [key for key in ("State", "Physical state", "Rate", "Link layer") if key not in fields]
            if lacking:
                raise ValueError(f"ibstat's CA '{name}' port {number} has no {', '.join(lacking)}: cut short")
            rate = fields.get("Rate", "")
            devices[name].ports[number] = IbPort(
                state=_IBSTAT_STATES.get(fields.get("State", ""), fields.get("State", "").upper()),
                physical_state=fields.get("Physical state", ""),
                rate_gbps=float(rate) if re.fullmatch(r"[\d.]+", rate) else None,
                rate_text=rate,
                link_layer=fields.get("Link layer", ""),
            )
    return devices


IBSTAT = fact.command("ibstat", ["ibstat"], parse_ibstat)
#: ``mlx5_N`` -> its sysfs path, which names the HCA's PCI address.
INFINIBAND = fact.links("infiniband", "/sys/class/infiniband", dict)
