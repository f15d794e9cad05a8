"""Port counters from ``perfquery -x`` (one port) and ``perfquery -l -x`` (all ports), and their deltas.

The error-detail blocks (``perfquery -E``: PortRcvErrorDetails, ``-D``: PortXmitDiscardDetails) are read into the
same port's counters, so a snapshot taken with ``-x -E`` carries which kind of receive error grew.

A snapshot is only half a fact: error counters count since the last reset, saturate at their width
(LinkDownedCounter at 255 in the gpud fixture) and go back to zero when someone clears them or the
port resets. So the tool always works on the delta between two timestamped snapshots:

* after < before: the counter was cleared (or the port reset) in between; the delta is the new value,
  a lower bound, and the port is flagged ``reset``;
* either value at the counter's maximum: it saturated; the delta is a lower bound, flagged ``saturated``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from topology.errors import LineError

_HEADER = re.compile(r"^#\s*(?:Port (?:extended )?counters|Port\w*Details counters):\s*Lid\s+(\d+)\s+port\s+(\d+)",
                     re.IGNORECASE)
_FIELD = re.compile(r"^(\w+):\.*\s*(0x[0-9a-fA-F]+|\d+)\s*$")

#: Error counters judged on deltas, with infiniband-diags' default thresholds (field guide 7.4).
THRESHOLDS: dict[str, int] = {
    "SymbolErrorCounter": 10, "LinkErrorRecoveryCounter": 10, "LinkDownedCounter": 10, "PortRcvErrors": 10,
    "PortRcvRemotePhysicalErrors": 100, "PortRcvSwitchRelayErrors": 100, "PortXmitDiscards": 100,
    "PortXmitConstraintErrors": 100, "PortRcvConstraintErrors": 100, "LocalLinkIntegrityErrors": 10,
    "ExcessiveBufferOverrunErrors": 10, "VL15Dropped": 100,
}
#: Saturation values of the narrow PortCounters fields (IBA PortCounters attribute widths).
WIDTH_MAX: dict[str, int] = {
    "SymbolErrorCounter": 0xFFFF, "LinkErrorRecoveryCounter": 0xFF, "LinkDownedCounter": 0xFF,
    "PortRcvErrors": 0xFFFF, "PortRcvRemotePhysicalErrors": 0xFFFF, "PortRcvSwitchRelayErrors": 0xFFFF,
    "PortXmitDiscards": 0xFFFF, "PortXmitConstraintErrors": 0xFF, "PortRcvConstraintErrors": 0xFF,
    "LocalLinkIntegrityErrors": 0xF, "ExcessiveBufferOverrunErrors": 0xF, "VL15Dropped": 0xFFFF,
}


class CounterError(LineError):
    """A perfquery text that is not perfquery output."""


@dataclass
class PortCounters:
    lid: int
    port: int
    values: dict[str, int] = field(default_factory=dict)


def parse_perfquery(text: str) -> list[PortCounters]:
    """Every port block of a perfquery text; empty output (an unreachable port) is no blocks, not an error."""
    blocks: dict[tuple[int, int], PortCounters] = {}  # in the order last seen: a switch's file has 64 ports
    current: PortCounters | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        header = _HEADER.match(line)
        if header:
            key = (int(header.group(1)), int(header.group(2)))
            # another block of the same port (-x then -E): one set of counters, in the order they came
            current = blocks.pop(key, None) or PortCounters(*key)
            blocks[key] = current
            continue
        found = _FIELD.match(line)
        if found is None:
            raise CounterError(f"not a perfquery counter line: {line[:80]!r}", number)
        if current is None:
            raise CounterError("counters before any '# Port counters' header", number)
        current.values[found.group(1)] = int(found.group(2), 0)
    return list(blocks.values())


@dataclass(frozen=True)
class CounterDelta:
    counter: str
    delta: int
    before: int
    after: int
    reset: bool = False
    saturated: bool = False

    @property
    def threshold(self) -> int:
        return THRESHOLDS.get(self.counter, 0)

    def describe(self) -> str:
        notes = [note for flag, note in ((self.reset, "counter reset in between"),
                                         (self.saturated, "saturated: at least")) if flag]
        return f"{self.counter} +{self.delta} ({self.before} -> {self.after}{'; ' + '; '.join(notes) if notes else ''})"


def deltas(before: dict[str, int], after: dict[str, int]) -> list[CounterDelta]:
    """The non-zero error-counter changes between two readings of one port."""
    changes = []
    for counter in THRESHOLDS:
        if counter not in after:
            continue
        old, new = before.get(counter, 0), after[counter]
        reset = new < old
        delta = new if reset else new - old
        limit = WIDTH_MAX.get(counter)
        saturated = limit is not None and (new >= limit or old >= limit)
        if delta or saturated:
            changes.append(CounterDelta(counter, delta, old, new, reset, saturated))
    return changes
