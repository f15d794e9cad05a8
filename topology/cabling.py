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
from topology.ibnetdiscover import DiscoveredNode

Endpoint = tuple[str, str]


class PlanError(LineError):
    """A cabling plan that cannot be read."""


@dataclass(frozen=True)
class PlannedCable:
    a: Endpoint
    b: Endpoint
    line: int
    #: the plan's other columns for this cable, by header name (rack, U height, location, length, cable type,
    #: S/N...), shown in findings and tickets; unnamed columns as ``column N``
    attributes: tuple[tuple[str, str], ...] = ()

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
    lowered, named = port.lower(), device.lower()
    if " " in port and (lowered.startswith(named + " ") or named.endswith(" " + lowered)):
        # an HCA by its node description ("host ibp11s0f0"), or a host-side spreadsheet's "Server 1 IB Port 1"
        return _norm(device), _norm(port)
    raise PlanError(f"cannot read port {port!r} of {device!r} (expected 'Port N', 'Blade B_Port U/N', a number, "
                    "or an HCA's node description)", line)


#: Header names (lower case, no spaces, ``#``, ``_`` or ``-``) of the four columns a cable needs, with the
#: aliases spreadsheet exports use.
KEY_COLUMNS = {
    "start_device": {"startdevice", "sourcedevice", "srcdevice", "fromdevice", "adevice", "devicea", "source"},
    "start_port": {"startport", "sourceport", "srcport", "fromport", "aport", "porta"},
    "end_device": {"enddevice", "destinationdevice", "destdevice", "dstdevice", "todevice", "bdevice", "deviceb",
                   "destination"},
    "end_port": {"endport", "destinationport", "destport", "dstport", "toport", "bport", "portb"},
}
HEADER_SEARCH_ROWS = 20


def _header_key(cell: str) -> str:
    text = cell.strip().lower()
    text = re.sub(r"^#?\s*fields\s*:", "", text)  # "#Fields:StartDevice" inside a spreadsheet cell
    return re.sub(r"[\s#_\-]", "", text)


def _find_header(rows: list[list[str]]) -> tuple[int, dict[str, int]] | None:
    """The row that names the columns, wherever it sits (a spreadsheet export may put it below a title, after an
    empty first column, with the ``#Fields:`` marker inside a cell), and the index of each key column."""
    for number, row in enumerate(rows[:HEADER_SEARCH_ROWS]):
        keys = [_header_key(cell) for cell in row]
        found = {name: keys.index(next(key for key in keys if key in aliases))
                 for name, aliases in KEY_COLUMNS.items() if any(key in aliases for key in keys)}
        if found and len(found) < len(KEY_COLUMNS):
            missing = [name.replace("_", " ") for name in KEY_COLUMNS if name not in found]
            raise PlanError(f"the header names {', '.join(n.replace('_', ' ') for n in found)} but not "
                            f"{', '.join(missing)}: {','.join(row)}", number + 1)
        if found:
            return number, found
    return None


def _attribute_names(header: list[str], used: set[int]) -> dict[int, str]:
    names: dict[int, str] = {}
    seen: dict[str, int] = {}
    for index, cell in enumerate(header):
        if index in used:
            continue
        name = re.sub(r"^#?\s*fields\s*:", "", cell.strip(), flags=re.IGNORECASE).strip()
        if not name:
            continue
        seen[name] = seen.get(name, 0) + 1
        names[index] = name if seen[name] == 1 else f"{name} ({seen[name]})"
    return names


@dataclass
class PlanReading:
    cables: list[PlannedCable]
    problems: list[PlanError]  # rows that could not be read, each with its line; the rest is still a plan


def read_plan(text: str) -> PlanReading:
    """A UFM NDT file (``#StartDevice,StartPort,EndDevice,EndPort,LinkType``), a CSV with those four columns
    first (header optional), or a spreadsheet export whose header sits anywhere in its first rows, with columns
    found by name (and common aliases) and every other column kept as the cable's attributes. A row that cannot
    be read is a located problem; the other rows are still read. Every cable once, whichever direction rows
    list it in."""
    rows = list(csv.reader(io.StringIO(text.replace("\r\n", "\n"))))
    if not rows or not any("".join(row).strip() for row in rows):
        raise PlanError("the cabling plan is empty", 1)
    header = _find_header(rows)
    if header is None:
        start, columns, names = 0, {"start_device": 0, "start_port": 1, "end_device": 2, "end_port": 3}, {}
    else:
        start, columns = header[0] + 1, header[1]
        names = _attribute_names(rows[header[0]], set(columns.values()))
    width = max(columns.values()) + 1
    cables: dict[frozenset[Endpoint], PlannedCable] = {}
    problems: list[PlanError] = []
    for index, row in enumerate(rows[start:], start=start + 1):
        cells = [cell.strip() for cell in row]
        if not "".join(cells) or next(cell for cell in cells if cell).startswith("#"):
            continue
        if len(cells) < width or not any(cells[column] for column in columns.values()):
            problems.append(PlanError(f"a cable needs {width} columns with the two devices and their ports, this "
                                      f"row has {len(cells)}", index))
            continue
        try:
            a = plan_endpoint(cells[columns["start_device"]], cells[columns["start_port"]], index)
            b = plan_endpoint(cells[columns["end_device"]], cells[columns["end_port"]], index)
        except PlanError as problem:
            problems.append(problem)
            continue
        attributes = tuple((names.get(position, f"column {position + 1}"), cell)
                           for position, cell in enumerate(cells)
                           if cell and position not in columns.values() and (names or position >= 4))
        cable = PlannedCable(a, b, index, attributes)
        cables.setdefault(cable.ends, cable)
    return PlanReading(list(cables.values()), problems)


def parse_plan(text: str) -> list[PlannedCable]:
    """Every cable of a plan; a plan with no readable cable is refused with its first problem's line."""
    reading = read_plan(text)
    if not reading.cables:
        raise reading.problems[0] if reading.problems else PlanError("the cabling plan lists no cable", 1)
    return reading.cables


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
