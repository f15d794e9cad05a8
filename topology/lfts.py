"""Parse the unicast forwarding tables (LFTs) the subnet manager programmed into each switch, as the tools dump them.

Which cables a flow crosses is decided by these tables, not by our design's D-mod-K: OpenSM or UFM numbers the LIDs
in its own order and fills each switch's table by its routing engine. Three dumps say the same thing:

- ``dump_fts`` (every switch of an ibnetdiscover scan) and ``ibroute <switch>`` from infiniband-diags::

      Unicast lids [0x1-0x6] of switch DR path slid 0; dlid 0; 0,1 guid 0x0002c90300a1b2c0 (leaf-1):
        Lid  Out   Destination
             Port     Info
      0x0001 001 : (Channel Adapter portguid 0x0002c90300d4e5f1: 'gpu01 mlx5_0')
      2 valid lids dumped

- OpenSM's own ``opensm-lfts.dump`` (``-U`` loads it back; also per engine, ``opensm-lfts.2.ftree.dump``)::

      Unicast lids [0-6] of switch Lid 2 guid 0x0002c90300a1b2c0 ('leaf-1'):
      0x0001 001 # Channel Adapter portguid 0x0002c90300d4e5f1: 'gpu01 mlx5_0'
      6 lids dumped

- ibdiagnet's ``ibdiagnet2.fdbs`` (``ibdiagnet -r``)::

      osm_ucast_mgr_dump_ucast_routes: Switch 0x0002c90300a1b2c0
      LID    : Port : Hops : Optimal
      0x0001 : 001  : 01   : yes
      0x0009 : UNREACHABLE

  No destination is resolved (the LIDs are read from the discovery) and no count closes a table, so a table cut
  short cannot be told from a short one; newer releases put a ``PLFT_NUM: n`` line before each private LFT of a
  split NDR switch, and only table 0 (the one the SM routes by) is kept. Whether such a switch's header repeats
  before each of its tables is not documented where we looked: a repeated header is taken as the same switch's
  next table when a ``PLFT_NUM`` line follows it, and refused otherwise.

The destination of each LID is kept when the dump resolved it (``-n`` dumps none): it names the port GUID, and so
the LID of every port the dump reached. A table cut short (no closing count, or fewer entries than it counts) is
refused at its header's line: half a table routes nothing, and guessing the rest would route wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from topology.errors import LineError

_HEADER = re.compile(r"^Unicast lids \[(0x[0-9a-fA-F]+|\d+)-(0x[0-9a-fA-F]+|\d+)\] of switch (.*?) "
                     r"guid (0x[0-9a-fA-F]+) \((.*)\):$")
_ENTRY = re.compile(r"^(0x[0-9a-fA-F]{1,4}) (\d{1,3})(?: ([:#]) ?(.*))?$")
_RESOLVED = re.compile(r"^\(?(Channel Adapter|Switch|Router) portguid (0x[0-9a-fA-F]+): '(.*)'\)?$")
_FOOTER = re.compile(r"^(\d+) (?:valid )?lids dumped\s*$")
_COLUMNS = ("Lid  Out   Destination", "Port     Info")
_KIND = {"Channel Adapter": "ca", "Switch": "switch", "Router": "router"}


_IBDIAG_HEADER = re.compile(r"^osm_ucast_mgr_dump_ucast_routes:\s+Switch\s+(0x[0-9a-fA-F]+)$")
_IBDIAG_COLUMNS = re.compile(r"^LID\s*:\s*Port\b")
_IBDIAG_ENTRY = re.compile(r"^(0x[0-9a-fA-F]{1,4})\s*:\s*(?:(\d{1,3})\s*:\s*\d+\s*:\s*(?:yes|no)|(UNREACHABLE))$")
_PLFT = re.compile(r"^PLFT_NUM:\s*(\d+)$")


class LftError(LineError):
    """A forwarding-table dump we cannot read, located."""


@dataclass(frozen=True)
class Destination:
    """What a LID leads to, as the dump resolved it."""

    kind: str  # ca | switch | router
    port_guid: str  # 0x + 16 lowercase hex digits
    description: str


@dataclass
class SwitchTable:
    """One switch's LFT: the port each destination LID leaves by (port 0: the switch itself)."""

    guid: str
    description: str
    line: int
    out_port: dict[int, int] = field(default_factory=dict)
    destinations: dict[int, Destination] = field(default_factory=dict)


@dataclass
class ForwardingTables:
    switches: dict[str, SwitchTable] = field(default_factory=dict)  # by node GUID
    format: str = ""  # infiniband-diags | opensm | ibdiagnet

    def lid_of_port(self) -> dict[str, int]:
        """Every port GUID the dump resolved, and its LID (the base LID: LMC's extra LIDs name paths, not ports)."""
        lids: dict[str, int] = {}
        for table in self.switches.values():
            for lid, destination in table.destinations.items():
                lids[destination.port_guid] = min(lid, lids.get(destination.port_guid, lid))
        return lids


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """The file's non-blank lines, stripped, with their numbers (counted over every line)."""
    for number, raw in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if line := raw.strip():
            yield number, line


def _guid(text: str) -> str:
    return f"0x{int(text, 16):016x}"


def _unfinished(table: SwitchTable) -> LftError:
    """A table that another header or the file's end interrupted before its count of lids."""
    return LftError(f"the table of switch {table.guid} ends without its count of lids (cut short?)", table.line)


def parse_lfts(text: str) -> ForwardingTables:  # noqa: C901 - one pass over three dump formats whose lines interleave
    """Any of the three dumps: ibdiagnet's by its stanza headers, the other two by their header's description
    (``(desc)`` or ``('desc')``) and entries (``:`` or ``#``)."""
    if re.search(r"^\s*osm_ucast_mgr_dump_ucast_routes:", text, re.MULTILINE):
        return _parse_ibdiagnet(text)
    tables = ForwardingTables()
    current: SwitchTable | None = None
    entries = top = 0
    for number, line in _lines(text):
        if line in _COLUMNS:
            continue
        if header := _HEADER.match(line):
            if current is not None:
                raise _unfinished(current)
            description = header.group(5)
            opensm = description.startswith("'") and description.endswith("'")
            tables.format = tables.format or ("opensm" if opensm else "infiniband-diags")
            current = SwitchTable(_guid(header.group(4)), description[1:-1] if opensm else description, number)
            if current.guid in tables.switches:
                raise LftError(f"switch {current.guid} has a second table", number)
            entries, top = 0, int(header.group(2), 0)
            continue
        if footer := _FOOTER.match(line):
            if current is None:
                raise LftError("a count of lids outside any switch's table", number)
            # infiniband-diags counts the entries it printed; OpenSM prints its table's top LID (the header's
            # upper bound), whatever it left out
            expected = top if tables.format == "opensm" else entries
            if int(footer.group(1)) != expected:
                listed = f"its header's top is {top}" if tables.format == "opensm" else f"it lists {entries}"
                raise LftError(f"the table of switch {current.guid} counts {footer.group(1)} lids but {listed} "
                               "(cut short?)", current.line)
            tables.switches[current.guid] = current
            current = None
            continue
        entry = _ENTRY.match(line)
        if entry is None:
            raise LftError(f"not a forwarding-table line: {line[:80]!r}", number)
        if current is None:
            raise LftError("an LFT entry before any switch's header (not dump_fts, ibroute or OpenSM's dump?)",
                           number)
        entries += 1
        info = (entry.group(4) or "").strip()
        if "illegal port" in info:  # dump_fts -a lists LIDs the switch cannot forward: no route
            continue
        lid = int(entry.group(1), 16)
        current.out_port[lid] = int(entry.group(2))
        if resolved := _RESOLVED.match(info):
            current.destinations[lid] = Destination(_KIND[resolved.group(1)], _guid(resolved.group(2)),
                                                    resolved.group(3))
    if current is not None:
        raise _unfinished(current)
    if not tables.switches:
        raise LftError("no switch's forwarding table in the file (not dump_fts, ibroute or OpenSM's LFT dump)", 1)
    return tables


def _parse_ibdiagnet(text: str) -> ForwardingTables:
    tables = ForwardingTables(format="ibdiagnet")
    current: SwitchTable | None = None
    plft = 0
    repeated_at: int | None = None  # the line of a header seen before, until a PLFT_NUM says which table follows
    for number, line in _lines(text):
        if line.startswith("#") or _IBDIAG_COLUMNS.match(line):
            continue
        if header := _IBDIAG_HEADER.match(line):
            guid = _guid(header.group(1))
            repeated_at = number if guid in tables.switches else None
            current, plft = tables.switches.setdefault(guid, SwitchTable(guid, "", number)), 0
            continue
        if plft_line := _PLFT.match(line):
            plft, repeated_at = int(plft_line.group(1)), None
            continue
        if repeated_at is not None and current is not None:
            raise LftError(f"switch {current.guid} has a second table", repeated_at)
        entry = _IBDIAG_ENTRY.match(line)
        if entry is None:
            raise LftError(f"not an ibdiagnet forwarding-table line: {line[:80]!r}", number)
        if current is None:
            raise LftError("an LFT entry before any switch's header (osm_ucast_mgr_dump_ucast_routes: Switch ...)",
                           number)
        if plft == 0 and entry.group(2) is not None:  # UNREACHABLE: the SM has no route to the LID
            current.out_port[int(entry.group(1), 16)] = int(entry.group(2))
    if not tables.switches:
        raise LftError("no switch's forwarding table in the file", 1)
    return tables
