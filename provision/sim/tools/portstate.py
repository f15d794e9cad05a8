"""``ibportstate`` against the simulated fabric: query, disable and enable a switch port.

The fabric is one for the whole cluster, so any host's stand-in acts on it, the way an SMP sent from any
host reaches any switch. A disabled port's cable leaves the simulated ``ibnetdiscover`` dump, as a real
sweep stops seeing the link: both ends' lines are commented out in place, and come back unchanged when the
port is enabled; the port states are kept in ``port_states.json`` beside the dump. Output follows
infiniband-diags: the ``Initial Switch PortInfo`` block, then ``After PortInfo set`` for a change, or the
``Switch PortInfo`` block for a query.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path
from typing import Any

from provision.sim.files import replace_file
from provision.sim.linkquality import fabric_dir_of
from provision.sim.tools.common import ToolError, not_simulated, privileged

DUMP = "ibnetdiscover.txt"
STATES = "port_states.json"
#: Per-lane signalling of each rate, as ibportstate prints LinkSpeedExtActive.
EXT_SPEED = {"EDR": "25.78125 Gbps", "HDR": "53.125 Gbps", "NDR": "106.25 Gbps", "XDR": "212.5 Gbps"}
_SWITCH = re.compile(r'^Switch\s+\d+\s+"S-([0-9a-f]{16})".*\blid (\d+)\b')
#: A port line of a node's block, or one taken out of the sweep by a disable.
PORT_LINES = ("[", "#[")
_PORT = re.compile(r'^\[(\d+)\](?:\([0-9a-f]+\))?\s+"([SH]-[0-9a-f]{16})"\[(\d+)\]')


def ibportstate(root: Path, args: list[str]) -> int:
    usage = "usage: ibportstate -G <guid> <portnum> [query|enable|disable]"
    if not args or args[0] != "-G" or len(args) not in (3, 4):
        not_simulated("ibportstate", " ".join(args) + f" ({usage})")
    guid_text, port_text = args[1], args[2]
    operation = args[3] if len(args) == 4 else "query"
    if operation not in ("query", "enable", "disable"):
        not_simulated("ibportstate", f"op {operation}")
    if not re.fullmatch(r"(?:0x)?[0-9a-fA-F]{1,16}", guid_text) or not port_text.isdigit():
        raise ToolError(f"ibportstate: bad port id {guid_text} {port_text}\n{usage}", 255)
    if not privileged():  # the umad devices are root's
        raise ToolError(f"ibwarn: [{os.getpid()}] mad_rpc_open_port: can't open UMAD port ((null):0)\n"
                        "ibportstate: iberror: failed: Failed to open '(null)' port '0'", 255)
    guid, port = f"{int(guid_text, 16):016x}", int(port_text)
    directory = fabric_dir_of(root)
    with (directory / ".ports.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        states = json.loads((directory / STATES).read_text()) if (directory / STATES).exists() else {}
        lines = (directory / DUMP).read_text().split("\n")
        switch = _find_switch(lines, guid)
        if switch is None:
            raise ToolError(f"ibwarn: [ibportstate] ib_resolve_portid_str_via: can't resolve destination port "
                            f"0x{guid}\nibportstate: iberror: failed: can't resolve destination port 0x{guid}", 255)
        lid, first, last = switch
        key = f"{guid}/{port}"
        rate = _port_rate(lines[first:last], port) or states.get(key, {}).get("rate", "NDR")
        before = "disabled" if key in states else "up"
        if operation == "query":
            print(_block("Switch PortInfo", lid, port, before, rate))
            return 0
        print(_block("Initial Switch PortInfo", lid, port, before, rate))
        if operation == "disable" and before == "up":
            removed = _remove_link(lines, first, last, port)
            states[key] = {"rate": rate, "removed": removed}
        elif operation == "enable" and before == "disabled":
            _restore_link(lines, states.pop(key)["removed"])
        replace_file(directory / DUMP, "\n".join(lines))
        replace_file(directory / STATES, json.dumps(states, indent=1))
    print("\n" + _block("After PortInfo set", lid, port, "disabled" if operation == "disable" else "up", rate))
    return 0


def _find_switch(lines: list[str], guid: str) -> tuple[int, int, int] | None:
    """The switch's LID and the line span of its block in the dump."""
    for index, line in enumerate(lines):
        match = _SWITCH.match(line)
        if match and match.group(1) == guid:
            end = next((later for later in range(index + 1, len(lines)) if not lines[later].startswith(PORT_LINES)),
                       len(lines))
            return int(match.group(2)), index + 1, end
    return None


def _port_rate(block: list[str], port: int) -> str | None:
    for line in block:
        if line.startswith(f"[{port}]"):
            match = re.search(r"\b\d+x(\w+)\s*$", line)
            return match.group(1) if match else None
    return None


def _remove_link(lines: list[str], first: int, last: int, port: int) -> list[list[Any]]:
    """Take the port's line and its peer's reciprocal line out of the dump; return them with their places."""
    removed: list[list[Any]] = []
    for index in range(first, last):
        match = _PORT.match(lines[index])
        if match and int(match.group(1)) == port:
            peer, peer_port = match.group(2), match.group(3)
            switch_id = _block_id(lines, first)
            for other, line in enumerate(lines):
                back = _PORT.match(line)
                if back and back.group(2) == switch_id and back.group(3) == str(port) \
                        and back.group(1) == peer_port and _block_id_at(lines, other) == peer:
                    removed.append([other, line])
            removed.append([index, lines[index]])
    for index, line in removed:
        lines[index] = "#" + line  # out of the sweep, kept in place so the block stays whole
    return removed


def _restore_link(lines: list[str], removed: list[list[Any]]) -> None:
    for index, line in removed:
        lines[index] = line


def _block_id(lines: list[str], first: int) -> str:
    return re.search(r'"([SH]-[0-9a-f]{16})"', lines[first - 1]).group(1)  # type: ignore[union-attr]


def _block_id_at(lines: list[str], index: int) -> str | None:
    """The node whose block holds line ``index`` (the nearest header above it)."""
    for above in range(index - 1, -1, -1):
        if lines[above].startswith(("Switch", "Ca", "Hca", "Rt")):
            match = re.search(r'"([SH]-[0-9a-f]{16})"', lines[above])
            return match.group(1) if match else None
        if not lines[above].startswith(PORT_LINES):
            return None
    return None


def _block(title: str, lid: int, port: int, state: str, rate: str) -> str:
    down = state == "disabled"
    fields = [("LinkState", "Down" if down else "Active"), ("PhysLinkState", "Disabled" if down else "LinkUp"),
              ("LinkWidthSupported", "1X or 2X or 4X"), ("LinkWidthEnabled", "1X or 2X or 4X"),
              ("LinkWidthActive", "4X"), ("LinkSpeedSupported", "2.5 Gbps or 5.0 Gbps or 10.0 Gbps"),
              ("LinkSpeedEnabled", "2.5 Gbps or 5.0 Gbps or 10.0 Gbps"), ("LinkSpeedActive", "Extended speed"),
              ("LinkSpeedExtSupported", " or ".join(EXT_SPEED.values())),
              ("LinkSpeedExtEnabled", " or ".join(EXT_SPEED.values())),
              ("LinkSpeedExtActive", EXT_SPEED.get(rate, "No Extended Speed")),
              ("Mkey", "<not displayed>"), ("MkeyLeasePeriod", "0"), ("ProtectBits", "0")]
    return "\n".join([f"{title}:", f"# Port info: Lid {lid} port {port}",
                      *[f"{name}:{'.' * (32 - len(name))}{value}" for name, value in fields]])
