"""Explicit cabling plans (UFM ``.ndt`` and CSV) and the endpoint names plans and dumps share.

An endpoint is ``(device, port)`` normalised so a plan and a discovered fabric
name the same port the same way, whatever their spelling:

* a switch port: ``("sat11-0101-0927-20ib0", "16")`` -- plans write ``Port 16``;
* a director port: ``("sat11-0101-0903-01ib1-a/l16/u2", "20")`` -- plans write
  ``Blade 16_Port 2/20`` for ASIC ``L16/U2`` port 20 (checked against every
  director cable of the UFM fixture);
* an HCA port: ``("sat111092710037", "sat111092710037 ibp213s0f0")`` -- the host and
  the HCA's node description, as UFM names them.

Names compare case-insensitively (real plans and fabrics disagree on case).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

from topology.errors import LineError
from topology.ibnetdiscover import DiscoveredNode, Discovery

Endpoint = tuple[str, str]


class PlanError(LineError):
    """A cabling plan that cannot be read."""


@dataclass(frozen=True)
class PlannedCable:
    a: Endpoint
    b: Endpoint
    line: int

    @property
    def ends(self) -> frozenset[Endpoint]:
        return frozenset((self.a, self.b))


def _norm(text: str) -> str:
    return text.strip().lower()


def plan_endpoint(device: str, port: str, line: int) -> Endpoint:
    device, port = device.strip(), port.strip()
    if match := re.fullmatch(r"Port\s*(\d+)", port, re.IGNORECASE):
        return _norm(device), match.group(1)
    if match := re.fullmatch(r"Blade\s*(\d+)_Port\s*(\d+)/(\d+)", port, re.IGNORECASE):
        blade, unit, number = match.groups()
        return f"{_norm(device)}/l{int(blade):02d}/u{int(unit)}", str(int(number))
    if port.isdigit():
        return _norm(device), str(int(port))
    if port.lower().startswith(device.lower() + " ") or (port and " " in port):
        return _norm(device), _norm(port)
    raise PlanError(f"cannot read port {port!r} of {device!r} (expected 'Port N', 'Blade B_Port U/N', a number, "
                    "or an HCA's node description)", line)


def parse_plan(text: str) -> list[PlannedCable]:
    """A UFM NDT file (``#StartDevice,StartPort,EndDevice,EndPort,LinkType``) or a CSV with the same four
    leading columns (header optional). Every cable once, whichever direction rows list it in."""
    rows = list(csv.reader(io.StringIO(text.replace("\r\n", "\n"))))
    if not rows or not any(rows):
        raise PlanError("the cabling plan is empty", 1)
    header = [cell.strip().lstrip("#").lower() for cell in rows[0]]
    start = 0
    if header and header[0] in ("startdevice", "start_device", "a", "device_a"):
        expected = ["startdevice", "startport", "enddevice", "endport"]
        if [cell.replace("_", "") for cell in header[:4]] != expected:
            raise PlanError(f"header must begin with StartDevice,StartPort,EndDevice,EndPort, not {','.join(rows[0])}",
                            1)
        start = 1
    cables: dict[frozenset[Endpoint], PlannedCable] = {}
    for index, row in enumerate(rows[start:], start=start + 1):
        if not row or not "".join(row).strip() or row[0].strip().startswith("#"):
            continue
        if len(row) < 4:
            raise PlanError(f"a cable needs 4 columns (device, port, device, port), this row has {len(row)}", index)
        cable = PlannedCable(plan_endpoint(row[0], row[1], index), plan_endpoint(row[2], row[3], index), index)
        cables.setdefault(cable.ends, cable)
    if not cables:
        raise PlanError("the cabling plan lists no cable", 1)
    return list(cables.values())


def node_device(node: DiscoveredNode) -> str:
    """The device part of an endpoint for a discovered node (see the module docstring)."""
    if node.kind == "ca":
        return _norm(node.description.split()[0]) if node.description.strip() else node.node_id.lower()
    parts = node.asic.split("/")
    if len(parts) >= 3:  # a director ASIC: MCS8500/L16/U2
        return f"{_norm(node.system_name)}/{'/'.join(part.lower() for part in parts[1:])}"
    return _norm(node.system_name) if node.system_name else node.node_id.lower()


def discovered_endpoint(node: DiscoveredNode, port: int) -> Endpoint:
    if node.kind == "ca":
        return node_device(node), _norm(node.description) or str(port)
    return node_device(node), str(port)


def is_internal(discovery: Discovery, a: str, b: str) -> bool:
    """Links between ASICs of one director chassis are backplane, not cables: same system image GUID."""
    first, second = discovery.nodes[a], discovery.nodes[b]
    return bool(first.system_guid) and first.system_guid == second.system_guid and first.kind == second.kind == "switch"

