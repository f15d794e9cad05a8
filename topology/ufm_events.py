"""Parse UFM's ``event.log`` into port events, fast enough for a million lines.

A line reads ``YYYY-MM-DD HH:MM:SS.mmm [id] [code] LEVEL [Site [name]] [topic] DevType [description] [dev_id: guid]:
message`` (the site segment only on a multi-site UFM),
with the description ``Default / Switch: <name> / 1/<cage>/<sub>``. Only a dozen codes say anything
about a cable (``ACTED``); UFM's own housekeeping codes are listed in ``IGNORED`` so that a code in
neither list is reported as unknown instead of vanishing. Node and switch down/up codes are kept
too: a reboot takes its links down, and those link-downs are the reboot's, not the cables'.

Speed: the whole file is matched by one regex that starts with a literal newline (so the engine
jumps between line starts) and only accepts the codes we keep; a second, cheaper pass tallies every
well-formed line's code, which is how malformed lines are counted without a per-line Python loop.
Lines are never dropped silently: malformed ones are counted with samples, unknown codes tallied.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

#: code -> (evidence kind, what UFM means). ``down`` and ``flapping`` count flaps; ``errors`` is an error rate.
ACTED: dict[int, tuple[str, str]] = {
    110: ("errors", "symbol error rate threshold exceeded"),
    112: ("down", "link downed counter threshold exceeded"),
    113: ("errors", "port receive errors threshold exceeded"),
    115: ("errors", "receive switch relay errors threshold exceeded"),
    116: ("errors", "transmit discards threshold exceeded"),
    329: ("down", "link went down"),
    702: ("flapping", "peer port unhealthy due to FLAPPING"),
    915: ("errors", "critical BER"),
    916: ("errors", "high BER"),
    917: ("errors", "symbol bit error rate"),
    918: ("errors", "symbol bit error rate warning"),
}
#: Device down/up: the start and end of a reboot window for every cable of that device.
REBOOTS: dict[int, tuple[str, bool]] = {331: ("node", False), 332: ("node", True), 907: ("switch", False),
                                        908: ("switch", True)}
#: Housekeeping and notices that say nothing about a cable's health (see the field guide, section 7.3).
IGNORED = frozenset({64, 65, 66, 67, 328, 336, 394, 395, 517, 527, 603, 604, 920, 1500, 1502, 1503})
SKIPPED_DEVICES = ("Computer", "Aggregation Node")

_KEPT = "|".join(str(code) for code in sorted({*ACTED, *REBOOTS}))
#: After the level, UFM may write ``Site [name] `` (multi-site UFM; NVIDIA's own log analyzer accepts it).
_EVENT = re.compile(
    r"\n((\d{4}-\d\d-\d\d \d\d:\d\d):(\d\d(?:\.\d+)?) \[\d+\] \[(" + _KEPT + r")\] [^\[\n]*?"
    r"(?:Site \[[^\]\n]*\] )?\[[^\]\n]*\] "
    r"[^\[\n]*\[([^\]\n]*)\][^:\n]*:([^\n]*))")
_WELL_FORMED = re.compile(r"\n\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[\d+\] \[(\d+)\] ")
_LINK_DOWN = re.compile(r"\((\w[\w ]*):([^:()]+):([\d/]+)\)[^:]*:(\d+) - \((\w[\w ]*):([^:()]+):([\d/]+)\)[^:]*:(\d+)"
                        r"(?:, cable S/N: ?(\S+))?")
#: UFM 5.x's link events: ``[Source ... TO Dest: ...]: Link went down: <guid> (Switch: <name>) : <port> - <guid>
#: (Computer: <host> HCA-1) : <port>`` (the layout IBM CAST's Mellanox grok patterns read).
_OLD_LINK = re.compile(r"(?:0x)?[0-9a-fA-F]+ \((Switch|Computer): ([^)]+?)\) : (\d+) - (?:0x)?[0-9a-fA-F]+ "
                       r"\((Switch|Computer): ([^)]+?)\) : (\d+)")
_MALFORMED = re.compile(r"\n(?!\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[\d+\] \[\d+\] )([^\n]*\S[^\n]*)")
SAMPLES = 5


@dataclass(frozen=True)
class PortEvent:
    time: float  # seconds since the epoch
    code: int
    kind: str  # down | flapping | errors
    device: str  # switch name, as in the fabric model
    port: int  # flat port number
    peer: tuple[str, int] | None  # the far end when the message names it (329)
    serial: str  # cable S/N when the message gives it
    line: str
    #: The reporting end's port as UFM labels it (``1/36/1``): its number depends on the switch's generation
    #: (:func:`label_ports`), so it is resolved against the fabric unless the line gave the number itself.
    label: str = ""
    #: ``port`` is the line's own number for the reporting end (a link-down's ``<guid>:36``), not read from the label.
    explicit: bool = False


@dataclass(frozen=True)
class DeviceEvent:
    time: float
    device: str
    up: bool
    line: str


@dataclass
class EventLog:
    events: list[PortEvent] = field(default_factory=list)
    reboots: list[DeviceEvent] = field(default_factory=list)
    lines: int = 0
    codes: Counter[int] = field(default_factory=Counter)
    malformed: int = 0
    malformed_samples: list[str] = field(default_factory=list)
    unknown_codes: Counter[int] = field(default_factory=Counter)
    skipped_devices: int = 0  # host-side and SHARP events, by policy
    backwards_steps: int = 0  # times the clock went backwards between consecutive kept lines

    def summary(self) -> dict[str, object]:
        return {"lines": self.lines, "kept": len(self.events), "reboot_events": len(self.reboots),
                "ignored": sum(count for code, count in self.codes.items() if code in IGNORED),
                "skipped_host_side": self.skipped_devices, "unknown_codes": dict(self.unknown_codes),
                "malformed": self.malformed, "malformed_samples": self.malformed_samples,
                "clock_went_backwards": self.backwards_steps}


def flat_port(path: str) -> int | None:
    """UFM's ``1/<cage>/<sub>`` (or ``<cage>/<sub>``, or a bare number) as the flat port number of a split switch.

    Split cages hold two ports: cage *c* sub-port 1 is port 2c-1, sub-port 2 is port 2c.
    """
    return label_ports(path)[1]


def label_ports(label: str) -> tuple[int | None, int | None]:
    """The port a UFM label names on an unsplit switch and on a split one: ``(unsplit, split)``.

    An unsplit cage is one port (HDR's MQM8700 and the MCS8500's ASICs, 40 a switch: ``1/36/1`` is
    port 36); a split cage is two (NDR's two-port OSFP cages, HDR100 split: ``1/18/2`` is port 36). Which one a
    label means is the switch's, not the label's: see :func:`topology.linkhealth.resolve_label`."""
    parts = label.strip().split("/")
    if len(parts) == 3:
        parts = parts[1:]  # the leading "1/" is the chassis slot
    try:
        numbers = [int(part) for part in parts]
    except ValueError:
        return None, None
    if len(numbers) == 1:
        return numbers[0], numbers[0]
    if len(numbers) != 2:
        return None, None
    cage, sub = numbers
    return (cage if sub == 1 else None), (2 * cage - 2 + sub if sub in (1, 2) else None)


def ufm_port_path(port: int) -> str:
    """The inverse of ``flat_port``: how UFM writes a flat port number."""
    return f"1/{(port + 1) // 2}/{1 if port % 2 else 2}"


def parse_description(description: str) -> tuple[str, str, int | None, str]:
    """``Default / Switch: leaf-1 / 1/17/1`` -> ("Switch", "leaf-1", 33, "1/17/1"): the port read the split way,
    and the label as written (its number on an unsplit switch is the fabric's to say)."""
    parts = [part.strip() for part in description.split(" / ")]
    device_part = next((part for part in parts if ":" in part), "")
    kind, _, name = device_part.partition(":")
    label = parts[-1] if len(parts) >= 3 else ""
    return kind.strip(), name.strip(), flat_port(label) if label else None, label


class _Clock:
    """Local wall-clock minutes to epoch seconds, memoised: a log has few distinct minutes."""

    def __init__(self, timezone: str) -> None:
        self.zone = ZoneInfo(timezone)
        self.minutes: dict[str, float] = {}

    def __call__(self, minute: str, seconds: str) -> float:
        base = self.minutes.get(minute)
        if base is None:
            base = self.minutes[minute] = datetime.strptime(minute, "%Y-%m-%d %H:%M").replace(
                tzinfo=self.zone).timestamp()
        return base + float(seconds)


def parse_event_log(text: str, timezone: str = "UTC") -> EventLog:
    """Every kept event of an ``event.log`` text, in time order (clock steps backwards are sorted out)."""
    text = "\n" + text.replace("\r\n", "\n")
    log = EventLog()
    clock = _Clock(timezone)
    descriptions: dict[str, tuple[str, str, int | None, str]] = {}
    last = float("-inf")
    for line, minute, seconds, code_text, description, message in _EVENT.findall(text):
        when = clock(minute, seconds)
        if when < last:
            log.backwards_steps += 1
        last = when
        parsed = descriptions.get(description)
        if parsed is None:
            parsed = descriptions[description] = parse_description(description)
        kind, device, port, label = parsed
        explicit = False
        code = int(code_text)
        if code in REBOOTS:
            log.reboots.append(DeviceEvent(when, device, REBOOTS[code][1], line))
            continue
        if kind in SKIPPED_DEVICES:
            log.skipped_devices += 1
            continue
        peer, serial = None, ""
        found = _LINK_DOWN.search(message) if code == 329 else None
        old = _OLD_LINK.search(message) if code == 329 and found is None else None
        if found:
            ends = [(found.group(2), int(found.group(4))), (found.group(6), int(found.group(8)))]
            mine = [end for end in ends if end[0] == device]
            peer = next((end for end in ends if end[0] != device), ends[1]) if mine else ends[1]
            # the line's own number for the reporting end first: its label's meaning depends on the switch
            explicit = bool(mine) or port is None
            port = mine[0][1] if mine else (port if port is not None else ends[0][1])
            serial = found.group(9) or ""
        elif old:  # UFM 5.x: the object is "Source ... TO Dest", the switch end is in the message
            first_switch = old.group(1) == "Switch" or old.group(4) != "Switch"
            near, far = (old.group(2, 3), old.group(5, 6)) if first_switch else (old.group(5, 6), old.group(2, 3))
            device, port, peer = near[0], int(near[1]), (far[0], int(far[1]))
            explicit, label = True, ""
        elif code == 702 and "MANUAL" in message:
            continue  # an operator's manual isolation, not a flap
        if port is None:
            log.malformed += 1
            if len(log.malformed_samples) < SAMPLES:
                log.malformed_samples.append(line)
            continue
        log.events.append(PortEvent(when, code, ACTED[code][0], device, port, peer, serial, line, label, explicit))
    well_formed = _WELL_FORMED.findall(text)
    odd = _MALFORMED.findall(text)
    log.lines = len(well_formed) + len(odd)
    log.codes = Counter({int(code): count for code, count in Counter(well_formed).items()})
    log.unknown_codes = Counter({code: count for code, count in log.codes.items()
                                 if code not in ACTED and code not in REBOOTS and code not in IGNORED})
    log.malformed += len(odd)
    log.malformed_samples += [line[:200] for line in odd[:SAMPLES - len(log.malformed_samples)]]
    if log.backwards_steps:
        log.events.sort(key=lambda event: event.time)
        log.reboots.sort(key=lambda event: event.time)
    return log
