"""Per-cable health from every kind of evidence: one time-ordered stream, noise removed, then scored.

Evidence arrives per *port* from four places (UFM events, host syslog, counter deltas, discovery);
a cable has two ports and often both report the same flap. So every observation is first mapped
onto its cable in the fabric model, and only then counted:

* storms: observations chained by gaps under ``storm_gap_s`` form a burst; a burst of at least
  ``storm_events`` that touches at least ``storm_cables`` cables is a switch, UFM or mass host reboot,
  not a cable, and is suppressed (Imbue's burst rule, with the last chain flushed and the cable count
  added so that one cable flapping fast is never mistaken for a reboot);
* reboots: UFM's node/switch down..up events open a window on that device's cables;
* ends: the two ends (or two sources) reporting one flap within ``end_merge_s`` are one flap.

Classes, worst first: ``down``, ``flapping``, ``erroring``, ``degraded``, ``healthy``; each
suspect carries the evidence lines that put it there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from topology.carrier import CarrierEvent
from topology.counters import THRESHOLDS, CounterDelta
from topology.model import HCA, Cable, Fabric, Port
from topology.ufm_events import EventLog, PortEvent, label_ports

CLASSES = ("down", "flapping", "erroring", "degraded", "healthy")
_DELTA = re.compile(r"delta is (\d+)")


@dataclass(frozen=True)
class Policy:
    flaps: int = 5  # flaps within the window that make a cable ``flapping`` (AzNHC, field guide 7.4)
    window_s: float = 86400.0
    storm_gap_s: float = 1.0
    storm_events: int = 50
    storm_cables: int = 8
    reboot_margin_s: float = 300.0
    end_merge_s: float = 2.0
    counter_thresholds: dict[str, int] = field(default_factory=lambda: dict(THRESHOLDS))


@dataclass(frozen=True)
class Observation:
    time: float
    cable: Cable
    kind: str  # down | flapping | errors | up
    source: str  # ufm | syslog | counters | discovery | tomography
    end: Port | None
    text: str
    weight: int = 1  # flaps (or errors) it stands for
    code: str = ""  # what reported it, e.g. "ufm 110"


@dataclass(frozen=True)
class Unmatched:
    source: str
    where: str
    text: str


@dataclass(frozen=True)
class Storm:
    start: float
    end: float
    events: int
    cables: int


@dataclass
class CableHealth:
    cable: Cable
    klass: str
    score: float  # how far past its threshold (1.0 = at it); suspects sort by class, then score
    flaps: int  # the most flaps in any window
    errors: dict[str, int] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)
    suppressed: int = 0
    serial: str = ""
    first_seen: float | None = None
    last_seen: float | None = None
    flap_times: list[float] = field(default_factory=list)


@dataclass
class Evidence:
    observations: list[Observation] = field(default_factory=list)
    counter_deltas: list[tuple[Cable, Port, float, float, CounterDelta]] = field(default_factory=list)
    unmatched: list[Unmatched] = field(default_factory=list)
    reboots: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    serials: dict[Cable, str] = field(default_factory=dict)


#: Rates of switch generations whose cages carry one port each (unless split, which more than 40 ports show).
UNSPLIT_RATES = frozenset({"HDR", "EDR", "FDR", "QDR"})
UNSPLIT_MAX_PORTS = 40


def cage_layout(fabric: Fabric, device: str) -> tuple[bool, int | None]:
    """Whether ``device``'s cages are split (two ports each), and its port count when the model has one
    (``ports``): by that count, else by its cables — HDR and older carry one port a cage unless a port above 40
    shows the switch split; NDR and unknown switches are split."""
    if device not in fabric.graph:
        return True, None
    ports = fabric.graph.nodes[device].get("ports")
    if ports:
        return ports > UNSPLIT_MAX_PORTS, ports
    cabled = fabric.ports_of(device)
    rates = {cable.rate for port in cabled if (cable := fabric.cable_at((device, port))) is not None}
    return not (rates and rates <= UNSPLIT_RATES and max(cabled, default=0) <= UNSPLIT_MAX_PORTS), None


def resolve_label(fabric: Fabric, device: str, label: str,
                  layout: tuple[bool, int | None] | None = None) -> int | None:
    """The port a UFM label names on ``device``, by the switch's generation as the fabric describes it
    (:func:`cage_layout`, or ``layout`` when the caller has it). None when the label names no port the switch can
    have (reported with its line, never guessed)."""
    unsplit, split = label_ports(label)
    if unsplit is None or split is None or unsplit == split:
        return unsplit if split is None else split
    is_split, ports = layout or cage_layout(fabric, device)
    chosen = split if is_split else unsplit
    return chosen if ports is None or chosen <= ports else None


def add_event_log(evidence: Evidence, fabric: Fabric, log: EventLog) -> None:
    """UFM port events onto cables; a port the model lacks is unmatched, never guessed. A line's own port
    number for the reporting end is used first; its label is read by the switch's generation, worked out once
    per switch (a log has a million lines and a few hundred switches)."""
    layouts: dict[str, tuple[bool, int | None]] = {}

    def event_port(event: PortEvent, device: str) -> int | None:
        if event.explicit or not event.label:
            return event.port
        if device not in layouts:
            layouts[device] = cage_layout(fabric, device)
        return resolve_label(fabric, device, event.label, layouts[device])

    for event in log.events:
        port = event_port(event, event.device)
        cable = fabric.cable_at((event.device, port)) if port is not None else None
        if cable is None and event.peer is not None:
            cable = fabric.cable_at(event.peer)
        if cable is None:  # a plan's fabric is named in lower case; UFM writes names as the switches report them
            port = event_port(event, event.device.lower())
            cable = fabric.cable_at((event.device.lower(), port)) if port is not None else None
        if cable is None:
            where = (f"{event.device}/{port}" if port is not None
                     else f"{event.device} {event.label}: a port the switch does not have")
            evidence.unmatched.append(Unmatched("ufm", where, event.line))
            continue
        weight = 1
        if event.code == 112:
            found = _DELTA.search(event.line)
            weight = max(1, int(found.group(1))) if found else 1
        evidence.observations.append(Observation(event.time, cable, event.kind, "ufm",
                                                 (event.device, port if port is not None else event.port),
                                                 event.line, weight, f"ufm {event.code}"))
        if event.serial:
            evidence.serials[cable] = event.serial
    add_reboots(evidence, ((reboot.time, reboot.device, reboot.up) for reboot in log.reboots))


def add_reboots(evidence: Evidence, events: Iterable[tuple[float, str, bool]]) -> None:
    """Switch reboots as (time, device, up) in time order, paired into windows; a device seen going down and never
    up again gets a window of the margin's length."""
    opened: dict[str, float] = {}
    for time, device, up in events:
        if not up:
            opened[device] = time
        else:
            evidence.reboots.setdefault(device, []).append((opened.pop(device, time), time))
    for device, start in opened.items():
        evidence.reboots.setdefault(device, []).append((start, start))


def add_carrier(evidence: Evidence, fabric: Fabric, events: Iterable[CarrierEvent],
                hca_of: Callable[[str, str], str | None]) -> None:
    """Host syslog carrier changes onto host cables; ``hca_of(host, "ib6")`` names the HCA behind a netdev."""
    for event in events:
        hca = hca_of(event.host, event.device)
        port = (f"{event.host}/{hca}", 1) if hca else None
        cable = fabric.cable_at(port) if port else None
        if cable is None or port is None:
            evidence.unmatched.append(Unmatched("syslog", f"{event.host} {event.device}", event.line))
            continue
        evidence.observations.append(Observation(event.time, cable, "up" if event.up else "down", "syslog", port,
                                                 event.line))


def add_counter_deltas(evidence: Evidence, fabric: Fabric, start: float, end: float,
                       readings: Iterable[tuple[Port, list[CounterDelta]]]) -> None:
    """Counter changes of one snapshot interval; the interval's end stands as their time."""
    for port, changes in readings:
        cable = fabric.cable_at(port)
        if cable is None:
            if changes:
                evidence.unmatched.append(Unmatched("counters", f"{port[0]}/{port[1]}",
                                                    "; ".join(change.describe() for change in changes)))
            continue
        for change in changes:
            evidence.counter_deltas.append((cable, port, start, end, change))


def add_discovery(evidence: Evidence, fabric: Fabric, at: float, down: Iterable[tuple[Port, str]],
                  slow: Iterable[tuple[Port, str]]) -> None:
    """Ports a fabric dump shows down, or trained below design, as of ``at``."""
    for kind, ports in (("down", down), ("degraded", slow)):
        for port, text in ports:
            cable = fabric.cable_at(port)
            if cable is None:
                evidence.unmatched.append(Unmatched("discovery", f"{port[0]}/{port[1]}", text))
            else:
                evidence.observations.append(Observation(at, cable, f"state_{kind}", "discovery", port, text))


def storms(observations: list[Observation], policy: Policy) -> tuple[list[Observation], list[Storm]]:
    """Split off bursts that look like reboots of many devices (observations must be time-sorted)."""
    kept: list[Observation] = []
    found: list[Storm] = []
    chain: list[Observation] = []

    def flush() -> None:
        cables = {observation.cable for observation in chain}
        if len(chain) >= policy.storm_events and len(cables) >= policy.storm_cables:
            found.append(Storm(chain[0].time, chain[-1].time, len(chain), len(cables)))
        else:
            kept.extend(chain)
        chain.clear()

    for observation in observations:
        if chain and observation.time - chain[-1].time >= policy.storm_gap_s:
            flush()
        chain.append(observation)
    flush()  # the last chain too: Imbue's loop never flushed it
    return kept, found


def _devices(fabric: Fabric, cable: Cable) -> list[str]:
    names = []
    for node, _port in (cable.a, cable.b):
        data = fabric.graph.nodes[node]
        names.append(data.get("host", node) if data.get("kind") == HCA else node)
    return names


def _in_reboot(fabric: Fabric, observation: Observation, reboots: dict[str, list[tuple[float, float]]],
               margin: float) -> bool:
    for device in _devices(fabric, observation.cable):
        for start, end in reboots.get(device, ()):
            if start - margin <= observation.time <= end + margin:
                return True
    return False


def _merge_ends(downs: list[Observation], merge_s: float) -> list[tuple[float, int]]:
    """One flap reported by both ends, or by several codes or sources, counts once; the same report repeated
    (``ib6: lost carrier`` six times in five seconds) is that many flaps. Returns (time, weight) per flap."""
    flaps: list[tuple[float, int]] = []
    reporters: set[tuple[Port | None, str]] = set()  # who reported the latest flap
    for down in downs:
        reporter = (down.end, f"{down.source} {down.code}")
        if flaps and down.time - flaps[-1][0] <= merge_s and reporter not in reporters:
            reporters.add(reporter)
            flaps[-1] = (flaps[-1][0], max(flaps[-1][1], down.weight))
            continue
        flaps.append((down.time, down.weight))
        reporters = {reporter}
    return flaps


def most_in_window(flaps: list[tuple[float, int]], window_s: float) -> int:
    """The largest total weight of flaps inside any window of ``window_s`` (flaps time-sorted)."""
    best, total, start = 0, 0, 0
    for when, weight in flaps:
        total += weight
        while flaps[start][0] < when - window_s:
            total -= flaps[start][1]
            start += 1
        best = max(best, total)
    return best


def score(fabric: Fabric, evidence: Evidence, policy: Policy = Policy(),
          tomography: dict[Cable, tuple[float, str]] | None = None) -> tuple[list[CableHealth], list[Storm], int]:
    """Every cable with any evidence, classified; with the storms found and how many observations reboots explain."""
    ordered = sorted(evidence.observations, key=lambda observation: observation.time)
    events = [observation for observation in ordered if observation.source in ("ufm", "syslog")]
    others = [observation for observation in ordered if observation.source not in ("ufm", "syslog")]
    kept, found_storms = storms(events, policy)
    by_cable: dict[Cable, list[Observation]] = {}
    rebooted: dict[Cable, int] = {}
    explained = 0
    for observation in kept:
        if observation.kind in ("down", "flapping") and _in_reboot(fabric, observation, evidence.reboots,
                                                                   policy.reboot_margin_s):
            rebooted[observation.cable] = rebooted.get(observation.cable, 0) + 1
            explained += 1
            continue
        by_cable.setdefault(observation.cable, []).append(observation)
    for observation in others:
        by_cable.setdefault(observation.cable, []).append(observation)
    counters: dict[Cable, list[tuple[Port, float, float, CounterDelta]]] = {}
    for cable, port, start, end, change in evidence.counter_deltas:
        counters.setdefault(cable, []).append((port, start, end, change))
    results = []
    for cable in {*by_cable, *counters, *(tomography or {})}:
        results.append(_judge(cable, by_cable.get(cable, []), counters.get(cable, []), policy,
                              (tomography or {}).get(cable), rebooted.get(cable, 0), evidence.serials.get(cable, "")))
    results.sort(key=lambda health: (CLASSES.index(health.klass), -health.score, health.cable.label()))
    return results, found_storms, explained


def _judge(cable: Cable, observations: list[Observation], counters: list[tuple[Port, float, float, CounterDelta]],
           policy: Policy, suspicion: tuple[float, str] | None, suppressed: int, serial: str) -> CableHealth:
    flaps = _merge_ends([o for o in observations if o.kind == "down"], policy.end_merge_s)
    event_flaps = most_in_window(flaps, policy.window_s)
    flagged = [o for o in observations if o.kind == "flapping"]
    # LinkDowned deltas: both ends count the same flaps, so a cable's interval count is the larger end's
    downed: dict[tuple[float, float], int] = {}
    errors: dict[str, int] = {}
    error_lines: list[str] = []
    for port, start, end, change in counters:
        if change.counter == "LinkDownedCounter":
            if end - start <= policy.window_s:
                downed[start, end] = max(downed.get((start, end), 0), change.delta)
            error_lines.append(f"counters {port[0]}/{port[1]}: {change.describe()}")
            continue
        if change.delta >= policy.counter_thresholds.get(change.counter, change.threshold) or change.saturated:
            errors[change.counter] = max(errors.get(change.counter, 0), change.delta)
            error_lines.append(f"counters {port[0]}/{port[1]}: {change.describe()}")
    counter_flaps = max(downed.values(), default=0)
    flap_count = max(event_flaps, counter_flaps)
    error_events = [o for o in observations if o.kind == "errors"]
    for observation in error_events:
        errors[observation.code] = errors.get(observation.code, 0) + 1
    state_down = [o for o in observations if o.kind == "state_down"]
    state_slow = [o for o in observations if o.kind == "state_degraded"]
    carrier = [o for o in observations if o.source == "syslog"]
    still_down = bool(carrier) and carrier[-1].kind == "down"
    ratio = flap_count / policy.flaps
    error_ratio = max((value / max(1, policy.counter_thresholds.get(name, 1)) for name, value in errors.items()
                       if not name.startswith("ufm ")), default=0.0)
    error_ratio = max(error_ratio, float(len(error_events)))
    if state_down or still_down:
        klass, value = "down", 1.0 + ratio
    elif flagged or flap_count >= policy.flaps:
        klass, value = "flapping", max(ratio, 1.0 if flagged else 0.0)
    elif errors:
        klass, value = "erroring", error_ratio
    elif state_slow or suspicion:
        klass, value = "degraded", suspicion[0] if suspicion else 1.0
    else:
        klass, value = "healthy", ratio
    lines = [o.text for o in observations if o.kind in ("down", "flapping", "state_down", "state_degraded")]
    lines += [o.text for o in error_events] + error_lines
    if suspicion:
        lines.append(suspicion[1])
    times = [o.time for o in observations]
    return CableHealth(cable, klass, round(value, 3), flap_count, errors, _sample(lines), suppressed, serial,
                       min(times, default=None), max(times, default=None), [when for when, _weight in flaps])


def _sample(lines: list[str], limit: int = 12) -> list[str]:
    """Evidence for a person: the first and the latest lines when there are many."""
    if len(lines) <= limit:
        return lines
    half = limit // 2
    return [*lines[:half], f"... {len(lines) - limit} more ...", *lines[-half:]]

