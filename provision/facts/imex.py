"""IMEX, the daemon that joins the trays of a GB200/GB300 NVLink domain (field guide 8.3): its status, its view of
the domain, its configuration and its peers.

``nvidia-imex-ctl -q`` prints one word (``READY`` when the daemon can serve); ``-N`` lists every node of the domain
(``Node #k - <address> - <STATE> - Version: <driver>``), an N x N matrix of connection states and ``Domain State:
UP``. The daemon reads ``/etc/nvidia-imex/config.cfg`` (``KEY=value`` lines, ``#`` comments) and its peers from the
file ``IMEX_NODE_CONFIG_FILE`` names (``nodes_config.cfg``: one address per line, identical on every tray; a tray
whose list differs shows ``!M!`` in every other tray's matrix).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provision.facts import fact

#: The matrix's cell codes, as the tool's own legend gives them.
CONNECTION_STATES = {"C": "connected", "I": "invalid (not reachable)", "N": "never connected",
                     "R": "recovering", "D": "disconnected", "A": "authenticating",
                     "!V!": "version mismatch", "!M!": "node map mismatch"}
_NODE = re.compile(r"^Node #(\d+)\s+-\s+(\S+)\s+-\s+(\S+)\s+-\s+Version:\s*(\S*)\s*$")
_MATRIX_HEADER = re.compile(r"^\s*Nodes From\\To((?:\s+\d+)+)\s*$")
_MATRIX_ROW = re.compile(r"^\s*(\d+)((?:\s+(?:C|I|N|R|D|A|!V!|!M!))+)\s*$")
_DOMAIN = re.compile(r"^Domain State:\s*(\S+)\s*$")


@dataclass(frozen=True)
class ImexNode:
    index: int
    address: str
    state: str
    version: str


@dataclass
class ImexDomain:
    """``nvidia-imex-ctl -N``: the nodes, who is connected to whom (``matrix[from][to]``) and the domain's state."""

    nodes: list[ImexNode] = field(default_factory=list)
    matrix: dict[int, dict[int, str]] = field(default_factory=dict)
    domain_state: str = ""


def parse_imex_status(text: str) -> str:
    """``nvidia-imex-ctl -q``: the one word it prints. Nothing, or more than a word, is not a status."""
    words = text.split()
    if len(words) != 1:
        raise ValueError(f"nvidia-imex-ctl -q prints one word (READY when serving); got {text.strip()[:80]!r}")
    return words[0]


def parse_imex_nodes(text: str) -> ImexDomain:
    """``nvidia-imex-ctl -N``. Refused when it lists no node, when its matrix is missing or not N x N over the
    listed nodes, or when it ends before ``Domain State`` (a cut output says nothing about the domain)."""
    domain = ImexDomain()
    columns: list[int] | None = None
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.rstrip()
        if match := _NODE.match(line):
            domain.nodes.append(ImexNode(int(match.group(1)), match.group(2), match.group(3), match.group(4)))
        elif match := _MATRIX_HEADER.match(line):
            columns = [int(column) for column in match.group(1).split()]
        elif columns is not None and (match := _MATRIX_ROW.match(line)):
            cells = match.group(2).split()
            if len(cells) != len(columns):
                raise ValueError(f"nvidia-imex-ctl -N: matrix row {match.group(1)} has {len(cells)} cells for "
                                 f"{len(columns)} nodes")
            domain.matrix[int(match.group(1))] = dict(zip(columns, cells, strict=True))
        elif match := _DOMAIN.match(line.strip()):
            domain.domain_state = match.group(1)
    if not domain.nodes:
        raise ValueError("nvidia-imex-ctl -N lists no 'Node #k - <address> - <state>' line")
    listed = sorted(node.index for node in domain.nodes)
    if columns is None or sorted(columns) != listed or sorted(domain.matrix) != listed:
        raise ValueError(f"nvidia-imex-ctl -N: the connectivity matrix does not cover the {len(listed)} listed "
                         "nodes (cut short?)")
    if not domain.domain_state:
        raise ValueError("nvidia-imex-ctl -N ends without 'Domain State:' (cut short?)")
    return domain


def parse_imex_config(text: str) -> dict[str, str]:
    """``/etc/nvidia-imex/config.cfg``: ``KEY=value`` per line, ``#`` comments. A file with no setting is no
    configuration."""
    settings = {}
    for number, raw in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, equals, value = line.partition("=")
        if not equals or not re.fullmatch(r"[A-Z][A-Z0-9_]*", key.strip()):
            raise ValueError(f"config.cfg line {number} is not KEY=value: {line[:80]!r}")
        settings[key.strip()] = value.strip()
    if not settings:
        raise ValueError("config.cfg holds no KEY=value setting")
    return settings


def parse_imex_peers(text: str) -> list[str]:
    """``nodes_config.cfg``: one peer address per line, in the order every tray must share."""
    peers = [line.strip() for line in text.replace("\r\n", "\n").split("\n")
             if line.strip() and not line.strip().startswith("#")]
    for peer in peers:
        if len(peer.split()) != 1:
            raise ValueError(f"nodes_config.cfg holds one address per line; got {peer[:80]!r}")
    if not peers:
        raise ValueError("nodes_config.cfg lists no peer")
    return peers


IMEX_STATUS = fact.command("imex_status", ["nvidia-imex-ctl", "-q"], parse_imex_status)
IMEX_NODES = fact.command("imex_nodes", ["nvidia-imex-ctl", "-N"], parse_imex_nodes)
IMEX_CONFIG = fact.file("imex_config", "/etc/nvidia-imex/config.cfg", parse_imex_config)
IMEX_PEERS = fact.file("imex_peers", "/etc/nvidia-imex/nodes_config.cfg", parse_imex_peers)
#: The channel device NCCL's multi-node NVLink needs; created at boot (``NVreg_CreateImexChannel0=1``), else
#: MNNVL fails with "unhandled system error".
IMEX_CHANNELS = fact.links("imex_channels", "/dev/nvidia-caps-imex-channels", dict)
