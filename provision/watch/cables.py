"""What the watch does about a cable its signals name (issue 56, item 3), graded by what the cable does:

- **erroring or degraded**: a ticket, once (the cable still carries traffic; the next repair is a person's);
- **flapping or down**: a ticket, once, and the switch end's port disabled when ``watch.signals.disable_ports``
  allows it (the subnet manager then routes around the cable; a flapping link left up kills every job whose
  traffic crosses it at the moment it drops);
- **a host's cable** down, or disabled by us: that HCA has lost its only path (a rail-optimised fabric gives each
  rail one cable to its leaf), so the node is taken out of service with the reason; a switch-to-switch cable leaves
  every node in service (the other spines still route around it).

"Once" is per finding: a cable the watch already named since its last recorded repair (``provision topology
repaired``) gets no second ticket, no second disable and cuts no node off again (an operator who admits that node
has decided), however many passes still see it; after a repair, only evidence newer than the repair counts (the
window still holds the flaps that led to it), and a cable that flaps again is a new finding and moves the cable's
ladder on (``network.cable_health.LADDER``).

Pure here: the plan from the suspects, the fabric and each cable's history; the watch's pass carries it out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from provision.network.cable_health import cable_key
from topology.linkhealth import CableHealth
from topology.model import HCA, Fabric

#: Classes whose cable is taken out of the fabric when the policy allows it.
DISABLED_CLASSES = ("down", "flapping")
#: The history kinds the watch writes: a finding it ticketed, a port it disabled.
FINDING, DISABLED = "finding", "disabled"
#: The source the watch's findings carry in the cable's history (the burn-in's carry ``burnin.pairs``).
SOURCE = "watch"


@dataclass(frozen=True)
class CableAction:
    """What one pass does about one suspect cable."""

    cable: str
    klass: str
    ticket: bool  # a new finding: ticketed and recorded
    disable: bool  # its switch end's port to disable now
    cut: list[tuple[str, str]] = field(default_factory=list)  # (host, hca) left without a path: out of service
    already: str = ""  # why nothing new is done (named before, already disabled)

    def as_dict(self) -> dict[str, Any]:
        return {"cable": self.cable, "class": self.klass, "ticket": self.ticket, "disable": self.disable,
                "cut": [f"{host} {hca}" for host, hca in self.cut], "already": self.already}


def _last_repair_at(records: Sequence[dict[str, Any]]) -> float | None:
    """When the cable's last repair was recorded (seconds since the epoch), None if never."""
    repairs = [record["at"] for record in records if record["kind"] == "repair"]
    if not repairs:
        return None
    stamp = datetime.fromisoformat(repairs[-1])
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


def _since_repair(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A cable's history after its last repair (all of it, if never repaired)."""
    last = max((index for index, record in enumerate(records) if record["kind"] == "repair"), default=-1)
    return list(records[last + 1:])


def plan(suspects: Sequence[CableHealth], fabric: Fabric, history: dict[str, list[dict[str, Any]]], *,
         disable_ports: bool) -> list[CableAction]:
    """One action per suspect, from its class, the policy and what the watch already did since its repair."""
    actions = []
    for item in suspects:
        key = cable_key(item.cable)
        records = history.get(key, [])
        repaired = _last_repair_at(records)
        if repaired is not None and (item.last_seen is None or item.last_seen < repaired):
            continue  # every flap and error in the window came before the cable's repair: nothing new to act on
        since = _since_repair(records)
        named = any(record["kind"] == FINDING and record["detail"].get("source") == SOURCE for record in since)
        disabled = any(record["kind"] == DISABLED for record in since)
        disable = disable_ports and item.klass in DISABLED_CLASSES and not disabled
        host_end = fabric.host_end(item.cable)
        cut: list[tuple[str, str]] = []
        if host_end is not None and (item.klass == "down" or disable or disabled):
            data = fabric.graph.nodes[host_end[0]]
            if data.get("kind") == HCA:
                cut.append((str(data["host"]), str(data["hca"])))
        already = "; ".join(part for part in ("named since its last repair" if named else "",
                                              "its port disabled already" if disabled else "") if part)
        actions.append(CableAction(key, item.klass, not named, disable, cut, already))
    return actions
