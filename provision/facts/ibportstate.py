"""``ibportstate`` output: the PortInfo blocks it prints, and the state a port is left in.

A query prints ``Switch PortInfo:`` (or ``CA/RT PortInfo:``; ``CA PortInfo:`` and plain ``PortInfo:`` from older
infiniband-diags), possibly followed by ``Peer PortInfo:``; a change
prints ``Initial ... PortInfo:`` and then ``After PortInfo set:``. Each block starts with
``# Port info: Lid N port P`` and lists ``Field:.....value`` lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: The block titles infiniband-diags has printed: plain ``PortInfo:`` (before 2009), ``CA``/``Switch PortInfo:``
#: (2009-2016), ``CA/RT``/``Switch PortInfo:`` (since), each with ``Initial`` before a change.
_TITLE = re.compile(r"^((?:Initial )?(?:(?:Switch|CA/RT|CA) )?PortInfo|Peer PortInfo|After PortInfo set):\s*$")
_WHERE = re.compile(r"^# (MLNX ext )?Port info: (.+) port (\d+)\s*$")
_FIELD = re.compile(r"^(\w+):\.*(.*)$")


@dataclass
class PortInfo:
    title: str
    where: str = ""
    port: int | None = None
    fields: dict[str, str] = field(default_factory=dict)


def parse_port_info(text: str) -> list[PortInfo]:
    """Every PortInfo block, in order; lines outside blocks (warnings) are left out."""
    blocks: list[PortInfo] = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if title := _TITLE.match(line):
            blocks.append(PortInfo(title.group(1)))
        elif blocks and (where := _WHERE.match(line)):
            if where.group(1):  # Mellanox's extended PortInfo: its fields (LinkSpeedActive 0x..) are not the port's
                blocks.append(PortInfo("MLNX ext PortInfo"))
            elif blocks[-1].where:
                blocks.append(PortInfo(blocks[-1].title))
            blocks[-1].where, blocks[-1].port = where.group(2), int(where.group(3))
        elif blocks and (found := _FIELD.match(line)):
            blocks[-1].fields.setdefault(found.group(1), found.group(2).strip())
    return blocks


def final_state(text: str) -> tuple[str, str] | None:
    """(LinkState, PhysLinkState) the port was left in: the last block that is not the peer's."""
    for block in reversed(parse_port_info(text)):
        if block.title != "Peer PortInfo" and "PhysLinkState" in block.fields:
            return block.fields.get("LinkState", ""), block.fields["PhysLinkState"]
    return None
