"""Slurm's view of the nodes: ``scontrol -o show node``, one line per node, and its pure parser.

Read on the controller (or wherever ``scontrol`` reaches slurmctld), not on a cluster host. Slurm 22.05's
scontrol has no JSON output, so the one-line form is parsed: ``Key=value`` pairs separated by spaces, where two
values may hold spaces themselves — ``OS=Linux 6.1.0 #1 SMP ...`` and ``Reason=...``, which Slurm always writes
last, followed by `` [user@timestamp]``. The keys read here are taken by name; everything after ``Reason=`` is the
reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provision.facts.fact import command

_KEY = re.compile(r"(?:^|\s)(NodeName|State|AvailableFeatures|ActiveFeatures|Partitions)=(\S*)")
_REASON = re.compile(r"\sReason=(?P<reason>.*?)(?:\s\[(?P<user>[^@\]]+)@(?P<at>[^\]]+)\])?\s*$")


class SlurmOutputError(ValueError):
    """scontrol's output is not the node listing (an error message, a truncated line)."""


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # the base state, lower case: idle, allocated, mixed, down, ...
    flags: frozenset[str]  # drain, not_responding, maint, reserved, ... (lower case)
    reason: str = ""
    reason_user: str = ""
    available_features: tuple[str, ...] = ()
    active_features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = field(default=())

    @property
    def drained(self) -> bool:
        """Drained or draining: Slurm starts no new job on it."""
        return "drain" in self.flags or self.state in ("drained", "draining")

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "state": self.state, "flags": sorted(self.flags), "reason": self.reason,
                "reason_user": self.reason_user, "available_features": list(self.available_features),
                "active_features": list(self.active_features), "partitions": list(self.partitions)}


def _features(value: str) -> tuple[str, ...]:
    return () if value in ("", "(null)") else tuple(item for item in value.split(",") if item)


def parse_nodes(text: str) -> list[SlurmNode]:
    """Every node of ``scontrol -o show node``; a line that is not a node is an error, never skipped."""
    nodes = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if not line.startswith("NodeName="):
            raise SlurmOutputError(f"line {number}: not a node: {line[:200]!r}")
        head, reason, user = line, "", ""
        found = _REASON.search(line)
        if found:
            head, reason, user = line[:found.start()], found["reason"].strip(), found["user"] or ""
        keys = dict(_KEY.findall(head))
        if "State" not in keys:
            raise SlurmOutputError(f"line {number}: node {keys.get('NodeName', '?')} has no State=")
        base, *flags = keys["State"].lower().split("+")
        nodes.append(SlurmNode(keys["NodeName"], base.rstrip("*~#!%$@^-"), frozenset(flags), reason, user,
                               _features(keys.get("AvailableFeatures", "")),
                               _features(keys.get("ActiveFeatures", "")), _features(keys.get("Partitions", ""))))
    return nodes


def parse_listing(text: str) -> list[dict[str, object]]:
    """The fact's JSON-friendly form (what the data-driven fact tests compare)."""
    return [node.as_dict() for node in parse_nodes(text)]


SLURM_NODES = command("slurm_nodes", ["scontrol", "-o", "show", "node"], parse_listing)
