"""Parse ``ibnetdiscover`` output, default and ``--ports`` formats, into nodes and links.

Real dumps are messy, and every quirk below is in the fixtures: a PuTTY banner
and a CLI prompt around the dump, CRLF line endings, tabs collapsed away
(``Switch41 "S-..."#``), node descriptions containing ``#`` or runs of spaces,
ibsim's ``Hca`` keyword and descriptionless headers, ``s= w= v= e=`` suffixes of
``--full``, ``4x ???`` and unquoted descriptions in the ports format. Lines that
are none of the known kinds are counted, never fatal; a file with no node at
all is not an ibnetdiscover dump and is refused with the first line that said so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from topology.bulk import bulk
from topology.errors import LineError

_HEADER = re.compile(r'^(Switch|Ca|Hca|Rt)\s*(\d+)\s*"([^"]+)"(.*)$')
_PORT = re.compile(r'^\[(\d+)\](?:\(([0-9a-fA-F]+)\))?\s*"([^"]+)"\[(\d+)\](?:\(([0-9a-fA-F]+)\))?(.*)$')
_RATE = re.compile(r"\b(\d+)x\s*([A-Z]{3}|\?\?\?)\b")
_QUOTED = re.compile(r'"([^"]*)"')
_PORTS_LINE = re.compile(
    r"^(CA|SW|RT)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]+)\s+(\d+)x\s*(\S+)"
    r"(?:\s+-\s+(CA|SW|RT)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]+)\s+\(\s*'(.*)'\s+-\s+'(.*)'\s*\)|\s*(.*))$")
_FAR_LID = re.compile(r"\blid (\d+)\s+\d+x")  # the far end's LID, just before its width (``lid 6 4xNDR``)
_OWN_LID = re.compile(r"#\s*lid (\d+) lmc")  # a CA port's own LID, first in its line's comment
_SWITCH_LID = re.compile(r"\bport 0 lid (\d+)")  # a switch header's ``enhanced port 0 lid 2 lmc 0``
_SYSTEM = re.compile(r"^MF0;([^:]+):(.*)$", re.S)  # a switch's system name and ASIC, from its description
NOT_REPORTED = ""  # a link's speed when its source does not report one (never judged degraded)
_KIND = {"Switch": "switch", "Ca": "ca", "Hca": "ca", "Rt": "router", "SW": "switch", "CA": "ca", "RT": "router"}


class DumpError(LineError):
    """Not an ibnetdiscover dump, or a line that breaks one."""


@dataclass
class DiscoveredNode:
    node_id: str  # "S-<guid>" / "H-<guid>" (or ibsim's free-form id)
    kind: str  # switch | ca | router
    ports: int
    description: str
    system_guid: str = ""
    line: int = 0  # where its header is in the dump (0: only seen as a peer)

    @property
    def system_name(self) -> str:
        """``MF0;sat11-0101-0927-20ib0:MQM8700/U1`` → ``sat11-0101-0927-20ib0``; otherwise the description."""
        match = _SYSTEM.match(self.description)
        return match.group(1) if match else self.description.strip()

    @property
    def asic(self) -> str:
        """The part after the system name: ``MCS8500/L01/U1`` for a director ASIC, ``MQM8700/U1`` for a box."""
        match = _SYSTEM.match(self.description)
        return match.group(2) if match else ""


class DiscoveredLink(NamedTuple):
    """One cable seen in the dump (a tuple: a large dump holds hundreds of thousands)."""

    a: tuple[str, int]
    b: tuple[str, int]
    width: int | None
    speed: str | None  # EDR HDR NDR ...; None when the port says unknown (???); NOT_REPORTED when the source
    # does not report rates at all (ibdiagnet's LINKS table)

    @property
    def ends(self) -> frozenset[tuple[str, int]]:
        return frozenset((self.a, self.b))


@dataclass
class Discovery:
    nodes: dict[str, DiscoveredNode] = field(default_factory=dict)
    links: dict[frozenset[tuple[str, int]], DiscoveredLink] = field(default_factory=dict)
    down_ports: list[tuple[str, int, str]] = field(default_factory=list)  # node, port, state text
    #: Each port the dump gave a GUID (a CA's ports; a switch answers on port 0 with its node GUID): 0x + 16 hex
    port_guids: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: The LID of each port the dump gave one (a switch's on its port 0)
    lids: dict[tuple[str, int], int] = field(default_factory=dict)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line number, text) of unknown lines

    def add_link(self, link: DiscoveredLink) -> None:
        self.links.setdefault(link.ends, link)


@bulk
def parse(text: str) -> Discovery:
    """Either format, detected per line, so a concatenation of both still parses."""
    discovery = Discovery()
    current: DiscoveredNode | None = None
    system_guid = ""
    first_unknown: tuple[int, str] | None = None
    peer_of: dict[tuple[str, int], tuple[str, int]] = {}  # every port of a link already added -> its far end
    for number, raw in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        if line[0] == "[" and (port := _PORT.match(line)):  # most lines are ports: try them first
            if current is None:
                raise DumpError("a port line before any node header (truncated or not ibnetdiscover output)", number)
            here, there = (current.node_id, int(port.group(1))), (port.group(3), int(port.group(4)))
            _addresses(discovery, current, here, there, port)
            if peer_of.get(here) == there:
                continue  # the far end's block already gave this link (a dump names every link twice)
            peer_of[here], peer_of[there] = there, here
            width, speed = _rate(port.group(6))
            discovery.add_link(DiscoveredLink(here, there, width, speed))
            continue
        if line.startswith(("vendid=", "devid=", "switchguid=", "caguid=", "rtrguid=")):
            continue
        if line.startswith("sysimgguid="):
            system_guid = line.split("=", 1)[1].strip().lower()
            continue
        if header := _HEADER.match(line):
            rest = header.group(4)
            quoted = _QUOTED.search(rest) if "#" in rest else None
            description = quoted.group(1) if quoted else header.group(3)
            current = DiscoveredNode(header.group(3), _KIND[header.group(1)], int(header.group(2)), description,
                                     system_guid, number)
            discovery.nodes[current.node_id] = current
            if current.kind == "switch" and (lid := _SWITCH_LID.search(rest)):
                discovery.lids[(current.node_id, 0)] = int(lid.group(1))
                if current.node_id.startswith("S-"):
                    discovery.port_guids[_guid(current.node_id[2:])] = (current.node_id, 0)
            system_guid = ""
            continue
        if ports_line := _PORTS_LINE.match(line):
            _ports_format(discovery, ports_line)
            continue
        discovery.skipped.append((number, raw))
        first_unknown = first_unknown or (number, raw)
    if not discovery.nodes:
        where, what = first_unknown or (1, "")
        raise DumpError(f"not ibnetdiscover output (no node found; first line not understood: {what.strip()[:80]!r})",
                        where)
    _add_peers_seen_only_from_links(discovery)
    return discovery


def _guid(digits: str) -> str:
    return f"0x{int(digits, 16):016x}"


def _addresses(discovery: Discovery, current: DiscoveredNode, here: tuple[str, int], there: tuple[str, int],
               port: re.Match[str]) -> None:
    """The port GUIDs and LIDs a port line gives: ``[1](guid)`` is this port's, ``"H-…"[1](guid)`` the far CA
    port's; in the comment, a CA's own LID (``# lid 1 lmc 0``) and the far end's, before its width."""
    if port.group(2):
        discovery.port_guids[_guid(port.group(2))] = here
    if port.group(5):
        discovery.port_guids[_guid(port.group(5))] = there
    tail = port.group(6)
    if current.kind != "switch" and (own := _OWN_LID.search(tail)):
        discovery.lids[here] = int(own.group(1))
    if far := _FAR_LID.search(tail):
        discovery.lids[(there[0], 0) if there[0].startswith("S-") else there] = int(far.group(1))


def _rate(tail: str) -> tuple[int | None, str | None]:
    match = _RATE.search(tail)
    if not match:
        return None, None
    return int(match.group(1)), None if match.group(2) == "???" else match.group(2)


def _ports_format(discovery: Discovery, match: re.Match[str]) -> None:
    kind, _lid, port, guid, width, speed = match.group(1, 2, 3, 4, 5, 6)
    node_id = f"{'S' if kind == 'SW' else 'H'}-{int(guid, 16):016x}"
    speed_value = None if speed == "???" else speed
    if match.group(7):
        peer_id = f"{'S' if match.group(7) == 'SW' else 'H'}-{int(match.group(10), 16):016x}"
        for identity, node_kind, description in ((node_id, kind, match.group(11)),
                                                 (peer_id, match.group(7), match.group(12))):
            discovery.nodes.setdefault(identity, DiscoveredNode(identity, _KIND[node_kind], 0, description.strip()))
        discovery.add_link(DiscoveredLink((node_id, int(port)), (peer_id, int(match.group(9))), int(width),
                                          speed_value))
    else:
        description = (match.group(13) or "").strip().strip("'").strip()
        discovery.nodes.setdefault(node_id, DiscoveredNode(node_id, _KIND[kind], 0, description))
        discovery.down_ports.append((node_id, int(port), f"{width}x {speed}"))


def _add_peers_seen_only_from_links(discovery: Discovery) -> None:
    """A truncated dump can name a peer whose own block is missing: keep it as an anonymous node."""
    for link in discovery.links.values():
        for node_id, _port in (link.a, link.b):
            if node_id not in discovery.nodes:
                kind = "switch" if node_id.startswith("S-") else "ca"
                discovery.nodes[node_id] = DiscoveredNode(node_id, kind, 0, "")


def parse_guid_map(text: str) -> dict[str, str]:
    """Node GUID → name: ibnetdiscover's ``--node-name-map`` (``0x<guid> "name"``), the same with ``H-``/``S-``
    node ids (hpc_toolset ``.map``), or alternating ``VM_hostname <host>`` / ``<guid>`` lines (SuperBench's
    ibstat export). The name is the rest of the line, unquoted: ``"gpu017 mlx5_3"`` names a host and its HCA."""
    mapping: dict[str, str] = {}
    pending_host: str | None = None
    for line in text.replace("\r\n", "\n").split("\n"):
        parts = line.split(None, 1)
        if not parts or parts[0].startswith("#"):
            continue
        name = parts[1].split("#", 1)[0].strip().strip('"').strip() if len(parts) == 2 else ""
        if parts[0] == "VM_hostname" and name:
            pending_host = name
        elif pending_host and len(parts) == 1 and re.fullmatch(r"(?:0x)?[0-9a-fA-F]{16}", parts[0]):
            mapping[f"{int(parts[0], 16):016x}"] = pending_host
            pending_host = None
        elif name and re.fullmatch(r"(?:[HS]-|0x)?[0-9a-fA-F]{16}", parts[0]):
            mapping[f"{int(parts[0].split('-')[-1], 16):016x}"] = name
    return mapping


def apply_names(discovery: Discovery, names: dict[str, str]) -> int:
    """Give each node named in ``names`` (by GUID) that description, as ibnetdiscover's ``--node-name-map`` would
    have: for fabrics whose HCAs still carry the vendor's default description. Returns how many were named."""
    named = 0
    for node in discovery.nodes.values():
        guid = node.node_id.split("-", 1)[-1].lower()
        if re.fullmatch(r"[0-9a-f]{16}", guid) and guid in names:
            node.description = names[guid]
            named += 1
    return named
