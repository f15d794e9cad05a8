"""``ibdiagnet2.db_csv``: what sites without UFM run after a cable replacement, read as the observed fabric.

The file is a series of tables, each between a ``START_<NAME>`` and an ``END_<NAME>`` line, each a CSV table
with a header row naming its columns (NVIDIA's own NDT generator and the common exporters read it this way).
Columns are found by name, never by position, because ibdiagnet versions add columns:

* ``NODES``: ``NodeGUID``, ``NodeType`` (1 a channel adapter, 2 a switch, 3 a router), ``NodeDesc``, and the
  ``SystemImageGUID`` that ties the ASICs of a director chassis together when the version writes it;
* ``LINKS``: ``NodeGuid1``, ``PortNum1``, ``NodeGuid2``, ``PortNum2``, one row per link;
* ``PM_INFO``: ``NodeGUID``, ``PortNumber`` and one column per counter, named as ``perfquery`` names them, with
  an ``Ext`` or ``Extended`` suffix for the extended (64-bit) ones: the counter snapshot of ``topology flaps``;
* ``CABLE_INFO``: ``NodeGuid``, ``PortNum``, ``SN`` (and vendor, part number, temperature...): cable serials.

The nodes and links become the same :class:`~topology.ibnetdiscover.Discovery` an ``ibnetdiscover`` dump gives
(node ids ``S-<guid>`` / ``H-<guid>``), so the audit, the drawing and ``topology flaps`` take either. Link speed
and width are not in ``LINKS``; a link read from here is never called degraded.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

from topology.bulk import bulk
from topology.errors import LineError
from topology.ibnetdiscover import NOT_REPORTED, DiscoveredLink, DiscoveredNode, Discovery

_START = re.compile(r"^START_(\w+)\s*$")
_KIND = {"1": "ca", "2": "switch", "3": "router"}
_SUFFIXES = ("Extended", "Ext")


class DbCsvError(LineError):
    """Not an ibdiagnet db_csv file, or a table in it that cannot be read."""


@dataclass
class Table:
    name: str
    header: list[str]
    rows: list[tuple[int, list[str]]]  # (line number, cells)
    line: int  # where its START_ line is

    def column(self, *names: str) -> int | None:
        wanted = {name.lower() for name in names}
        return next((index for index, cell in enumerate(self.header) if cell.strip().lower() in wanted), None)

    def require(self, *names: str) -> int:
        found = self.column(*names)
        if found is None:
            raise DbCsvError(f"table {self.name} has no {names[0]} column (its header: {','.join(self.header)})",
                             self.line + 1)
        return found


def looks_like_db_csv(text: str) -> bool:
    return "START_NODES" in text[:1_000_000] and "START_LINKS" in text


def tables(text: str) -> dict[str, Table]:
    """Every ``START_X`` .. ``END_X`` table; an unterminated table is refused with its line."""
    found: dict[str, Table] = {}
    current: Table | None = None
    lines = text.replace("\r\n", "\n").split("\n")
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if current is None:
            if match := _START.match(stripped):
                current = Table(match.group(1), [], [], number)
            continue
        if stripped == f"END_{current.name}":
            found[current.name] = current
            current = None
        elif not stripped:
            continue
        elif not current.header:
            current.header = next(csv.reader([stripped]))
        else:
            current.rows.append((number, next(csv.reader(io.StringIO(stripped)))))
    if current is not None:
        raise DbCsvError(f"table {current.name} is never closed (no END_{current.name}): a truncated file?",
                         current.line)
    return found


def _guid(text: str) -> str:
    return f"{int(text.strip(), 16):016x}"


@dataclass
class DbCsv:
    """Everything this tool reads from one db_csv file, its tables parsed once."""

    discovery: Discovery
    counters: dict[tuple[str, int], dict[str, int]]
    serials: dict[tuple[str, int], str]


def read_db_csv(text: str) -> DbCsv:
    found = tables(text)
    return DbCsv(_discovery(found), _counters(found), _serials(found))


def parse_db_csv(text: str) -> Discovery:
    """The nodes and links of a db_csv file as a discovery (see the module docstring)."""
    return _discovery(tables(text))


@bulk
def _discovery(found: dict[str, Table]) -> Discovery:
    for needed in ("NODES", "LINKS"):
        if needed not in found:
            raise DbCsvError(f"no {needed} table (START_{needed}): not an ibdiagnet db_csv file", 1)
    discovery = Discovery()
    nodes, links = found["NODES"], found["LINKS"]
    guid_at, type_at, desc_at = (nodes.require("NodeGUID"), nodes.require("NodeType"), nodes.require("NodeDesc"))
    system_at = nodes.column("SystemImageGUID", "SysImageGUID")
    ports_at = nodes.column("NumPorts")
    ids: dict[str, str] = {}
    for number, cells in nodes.rows:
        try:
            guid = _guid(cells[guid_at])
            kind = _KIND[cells[type_at].strip()]
        except (IndexError, ValueError, KeyError):
            raise DbCsvError(f"NODES row not understood: {','.join(cells)[:120]!r}", number) from None
        node_id = f"{'S' if kind == 'switch' else 'H'}-{guid}"
        ids[guid] = node_id
        system = _guid(cells[system_at]) if system_at is not None and cells[system_at].strip() else ""
        count = int(cells[ports_at]) if ports_at is not None and cells[ports_at].strip().isdigit() else 0
        discovery.nodes[node_id] = DiscoveredNode(node_id, kind, count, cells[desc_at].strip(), system, number)
    columns = [links.require(name) for name in ("NodeGuid1", "PortNum1", "NodeGuid2", "PortNum2")]
    for number, cells in links.rows:
        try:
            first, port1, second, port2 = (cells[column] for column in columns)
            a = (ids[_guid(first)], int(port1))
            b = (ids[_guid(second)], int(port2))
        except (IndexError, ValueError):
            raise DbCsvError(f"LINKS row not understood: {','.join(cells)[:120]!r}", number) from None
        except KeyError as missing:
            raise DbCsvError(f"LINKS names node {missing} that the NODES table does not list", number) from None
        discovery.add_link(DiscoveredLink(a, b, None, NOT_REPORTED))
    return discovery


def counter_name(column: str) -> str:
    """``SymbolErrorCounterExt`` → ``SymbolErrorCounter``, ``PortXmitDataExtended`` → ``PortXmitData``: the
    names the thresholds use (perfquery's)."""
    for suffix in _SUFFIXES:
        if column.endswith(suffix):
            return column[: -len(suffix)]
    return column


def port_counters(text: str) -> dict[tuple[str, int], dict[str, int]]:
    """(GUID, port) → counter → value, from ``PM_INFO`` (empty without the table). A cell that is not a number
    (``N/A`` where a port does not support a counter) is left out, never read as zero."""
    return _counters(tables(text))


def _counters(tables_found: dict[str, Table]) -> dict[tuple[str, int], dict[str, int]]:
    found = tables_found.get("PM_INFO")
    if found is None:
        return {}
    guid_at, port_at = found.require("NodeGUID", "NodeGuid"), found.require("PortNumber", "PortNum")
    names = {index: counter_name(cell.strip()) for index, cell in enumerate(found.header)
             if index not in (guid_at, port_at) and cell.strip()}
    readings: dict[tuple[str, int], dict[str, int]] = {}
    for number, cells in found.rows:
        try:
            key = (_guid(cells[guid_at]), int(cells[port_at]))
        except (IndexError, ValueError):
            raise DbCsvError(f"PM_INFO row not understood: {','.join(cells)[:120]!r}", number) from None
        values = {}
        for index, name in names.items():
            cell = cells[index].strip() if index < len(cells) else ""
            if re.fullmatch(r"\d+|0x[0-9a-fA-F]+", cell):
                values[name] = int(cell, 0)
        readings[key] = values
    return readings


def cable_serials(text: str) -> dict[tuple[str, int], str]:
    """(GUID, port) → the cable's serial number, from ``CABLE_INFO`` (empty without the table)."""
    return _serials(tables(text))


def _serials(tables_found: dict[str, Table]) -> dict[tuple[str, int], str]:
    found = tables_found.get("CABLE_INFO")
    if found is None:
        return {}
    guid_at, port_at = found.require("NodeGuid", "NodeGUID"), found.require("PortNum", "PortNumber")
    serial_at = found.column("SN", "SerialNumber")
    if serial_at is None:
        return {}
    serials = {}
    for _number, cells in found.rows:
        try:
            serial = cells[serial_at].strip()
            if serial and serial.upper() != "N/A":
                serials[_guid(cells[guid_at]), int(cells[port_at])] = serial
        except (IndexError, ValueError):
            continue
    return serials
