"""The fabric's passive signals, followed pass by pass (issue 56, item 3): UFM's event log and the hosts' IB
syslog lines as they grow, and counter snapshots as they arrive, judged as ``topology flaps`` judges them.

Each pass reads only what is new (:mod:`provision.watch.follow`), turns it into observations of cables with the
same readers ``topology flaps`` uses (``topology.ufm_events``, ``topology.carrier``, ``topology.counters``, mapped
onto the spec's fabric by ``topology.linkhealth``), keeps those observations in the store, and scores every cable
over the spec's link-health window (``fabric.link_health``) from what the store holds. So the judgement is the
same whether the evidence arrived in one file or over a week of passes, and a watch killed and restarted neither
reads a line twice nor forgets one.

Silence is not health: a source that is missing, or that grew by lines none of which could be read, is reported
as a problem of the pass, and lines that rotation may have lost are said to be lost.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provision.evidence import EvidenceError
from provision.network import cable_health
from provision.spec import LoadedSpec
from provision.spec.model import LinkHealth, WatchSignals
from provision.state.layout import fabric_dir
from provision.state.store import StateStore, WatchCounterDelta, WatchObservation
from provision.watch.follow import Cursor, follow
from topology import carrier, counters, linkhealth, netdev, ufm_events
from topology.model import Fabric, Port

#: What the watch keeps beyond the window: a window that grows in a changed spec still finds its evidence.
KEEP_WINDOWS = 2
#: The simulated fabric's files, followed when a simulated cluster's spec names no source.
SIM_EVENT_LOG = "ufm/event.log"
SIM_COUNTERS = "counters"


@dataclass(frozen=True)
class Sources:
    """The files the watch follows, resolved against the spec's directory."""

    ufm_events: list[Path] = field(default_factory=list)
    syslogs: list[Path] = field(default_factory=list)
    counters: Path | None = None
    netdev_map: Path | None = None

    def __bool__(self) -> bool:
        return bool(self.ufm_events or self.syslogs or self.counters)


def sources_of(loaded: LoadedSpec, state_dir: Path) -> Sources:
    """The spec's ``watch.signals``; a simulated cluster that names none follows its simulated fabric's own files
    (where an operator's UFM and syslog server would write), so the same watch runs on both."""
    given: WatchSignals = loaded.spec.watch.signals
    base = loaded.path.parent

    def resolve(path: Path) -> Path:
        return path if path.is_absolute() else base / path

    sources = Sources([resolve(path) for path in given.ufm_events], [resolve(path) for path in given.syslogs],
                      resolve(given.counters) if given.counters else None,
                      resolve(given.netdev_map) if given.netdev_map else None)
    if sources or loaded.spec.simulation is None:
        return sources
    simulated = fabric_dir(state_dir)
    return Sources([simulated / SIM_EVENT_LOG], [], simulated / SIM_COUNTERS)


@dataclass
class SourceReading:
    """What one pass read from one source, and what is wrong with that (empty: nothing)."""

    source: str
    lines: int = 0
    understood: int = 0
    observations: int = 0
    unmatched: int = 0
    notes: list[str] = field(default_factory=list)
    problem: str = ""
    lost: bool = False
    behind: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "lines": self.lines, "understood": self.understood,
                "observations": self.observations, "unmatched": self.unmatched, "notes": self.notes,
                "problem": self.problem, "lost": self.lost, "behind": self.behind}


@dataclass
class Judgement:
    """Every cable with evidence in the window, scored; the suspects are those not healthy."""

    since: float
    until: float
    health: list[linkhealth.CableHealth]
    storms: list[linkhealth.Storm]
    explained_by_reboots: int

    @property
    def suspects(self) -> list[linkhealth.CableHealth]:
        return [item for item in self.health if item.klass != "healthy"]


@dataclass
class SignalsPass:
    readings: list[SourceReading]
    judgement: Judgement
    pruned: int = 0

    @property
    def problems(self) -> list[str]:
        return [f"{reading.source}: {reading.problem}" for reading in self.readings if reading.problem]

    def as_dict(self) -> dict[str, Any]:
        judged = self.judgement
        return {"sources": [reading.as_dict() for reading in self.readings], "problems": self.problems,
                "window": {"since": _iso(judged.since), "until": _iso(judged.until)},
                "suspects": [{"cable": item.cable.label(), "class": item.klass, "score": round(item.score, 2),
                              "flaps": item.flaps, "errors": item.errors, "evidence": item.evidence[:5]}
                             for item in judged.suspects],
                "storms": len(judged.storms), "explained_by_reboots": judged.explained_by_reboots,
                "pruned": self.pruned}


def _iso(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds")


HcaOf = Callable[[set[str]], dict[tuple[str, str], str]]


def watch_pass(store: StateStore, fabric: Fabric, sources: Sources, health: LinkHealth, *, now: float,
               run_id: str | None, ask_hosts: HcaOf | None = None) -> SignalsPass:
    """One pass: every source read on from its cursor into the store, every cable scored over the window that
    ends ``now`` (the pass's clock), and what left every window forgotten."""
    year = datetime.fromtimestamp(now, UTC).year
    readings = [ingest_ufm(store, fabric, path, health.ufm_timezone, run_id=run_id) for path in sources.ufm_events]
    if sources.syslogs:
        readings += ingest_syslogs(store, fabric, sources.syslogs, sources.netdev_map, health.ufm_timezone,
                                   year=year, run_id=run_id, ask_hosts=ask_hosts)
    if sources.counters is not None:
        readings.append(ingest_counters(store, fabric, sources.counters, run_id=run_id))
    judgement = judge(store, fabric, health, until=now)
    pruned = store.prune_watch_signals(now - KEEP_WINDOWS * health.window_hours * 3600.0)
    return SignalsPass(readings, judgement, pruned)


def _follow(store: StateStore, source: str, path: Path, run_id: str | None) -> tuple[list[str], SourceReading]:
    """The new lines of one file, its cursor kept; what the follower saw said in the reading."""
    kept = store.watch_cursor(source)
    chunk = follow(path, Cursor(**kept) if kept else None)
    reading = SourceReading(source, lines=len(chunk.lines), notes=list(chunk.notes), lost=chunk.lost,
                            behind=chunk.behind)
    if chunk.missing:
        reading.problem = "missing: nothing can be read from it"
    if chunk.cursor is not None and chunk.cursor != (Cursor(**kept) if kept else None):
        store.set_watch_cursor(source, chunk.cursor.__dict__, run_id=run_id)
    return chunk.lines, reading


def _nothing_understood(reading: SourceReading, expected: str, samples: list[str]) -> None:
    if reading.lines and not reading.understood:
        shown = "; ".join(sample[:120] for sample in samples[:2])
        reading.problem = f"{reading.lines} new line(s), none of them {expected}" + (f" (e.g. {shown})" if shown
                                                                                     else "")


def _flat(observations: list[linkhealth.Observation]) -> list[WatchObservation]:
    return [WatchObservation(item.time, item.cable.a[0], item.cable.a[1], item.kind, item.source,
                             item.end[0] if item.end else None, item.end[1] if item.end else None, item.text,
                             item.weight, item.code) for item in observations]


def ingest_ufm(store: StateStore, fabric: Fabric, path: Path, timezone: str, *, run_id: str | None) -> SourceReading:
    lines, reading = _follow(store, f"ufm:{path}", path, run_id)
    if not lines:
        return reading
    log = ufm_events.parse_event_log("\n".join(lines), timezone)
    reading.understood = log.lines - log.malformed
    _nothing_understood(reading, "a UFM event line", log.malformed_samples or lines)
    found = linkhealth.Evidence()
    linkhealth.add_event_log(found, fabric, log)
    reading.observations, reading.unmatched = len(found.observations), len(found.unmatched)
    store.add_watch_signals(observations=_flat(found.observations),
                            device_events=[(event.time, event.device, event.up) for event in log.reboots],
                            run_id=run_id)
    return reading


def ingest_syslogs(store: StateStore, fabric: Fabric, paths: list[Path], netdev_map: Path | None, timezone: str, *,
                   year: int, run_id: str | None, ask_hosts: HcaOf | None) -> list[SourceReading]:
    """The hosts' carrier lines; the HCA behind each netdev from the map, else asked of the hosts that logged."""
    parsed: list[tuple[SourceReading, list[carrier.CarrierEvent]]] = []
    for path in paths:
        lines, reading = _follow(store, f"syslog:{path}", path, run_id)
        text = "\n".join(lines)
        in_form = carrier.syslog_lines(text)[1] if lines else 0
        reading.understood = in_form
        _nothing_understood(reading, "a syslog line", lines)
        parsed.append((reading, carrier.parse_syslog(text, year=year, timezone=timezone) if lines else []))
    hosts = {event.host for _, events in parsed for event in events}
    mapping: dict[tuple[str, str], str] = {}
    if hosts and netdev_map is not None:
        try:
            mapping = netdev.parse_netdev_map(netdev_map.read_text(encoding="utf-8"))
        except (OSError, netdev.NetdevMapError) as error:
            for reading, _ in parsed:
                reading.problem = reading.problem or f"the netdev map {netdev_map} cannot be read: {error}"
    elif hosts and ask_hosts is not None:
        mapping = ask_hosts(hosts)
    for reading, events in parsed:
        found = linkhealth.Evidence()
        linkhealth.add_carrier(found, fabric, events, lambda host, device: netdev.lookup(mapping, host, device))
        reading.observations, reading.unmatched = len(found.observations), len(found.unmatched)
        store.add_watch_signals(observations=_flat(found.observations), run_id=run_id)
    return [reading for reading, _ in parsed]


def ingest_counters(store: StateStore, fabric: Fabric, directory: Path, *, run_id: str | None) -> SourceReading:
    """Each snapshot that arrived since the last pass, compared with the one before it (the last one read, kept
    by name; a snapshot that could not be read is named, and the next is compared with the last good one)."""
    source = f"counters:{directory}"
    reading = SourceReading(source)
    if not directory.is_dir():
        reading.problem = "missing: no directory of counter snapshots"
        return reading
    kept = store.watch_cursor(source) or {}
    last, last_mtime = kept.get("last"), float(kept.get("mtime", float("-inf")))
    # a snapshot is new when it arrived after the last one read (by its modification time: names need not sort)
    candidates = sorted(entry for entry in directory.iterdir() if entry.name != last and _is_snapshot(entry)
                        and _mtime(entry) >= last_mtime)
    snapshots: list[Snapshot] = []
    for entry in candidates:
        try:
            snapshots.append(_snapshot(entry))
        except EvidenceError as error:
            reading.notes.append(str(error))
    snapshots.sort(key=lambda shot: shot.captured)
    previous = None
    if last is not None and (directory / last).exists():
        try:
            previous = _last_read(directory / last)
        except EvidenceError as error:
            reading.notes.append(str(error))
    new = [shot for shot in snapshots if previous is None or shot.captured > previous.captured]
    reading.lines = len(new)
    reading.understood = len(new)
    if candidates and not snapshots:
        reading.problem = f"{len(candidates)} new snapshot(s), none readable"
    deltas: list[WatchCounterDelta] = []
    for before, after in itertools.pairwise([*([previous] if previous else []), *new]):
        for port, values in after.values.items():
            cable = fabric.cable_at(port)
            changes = counters.deltas(before.values.get(port, {}), values)
            if cable is None:
                reading.unmatched += bool(changes)
                continue
            deltas += [WatchCounterDelta(cable.a[0], cable.a[1], port[0], port[1], before.captured, after.captured,
                                         change.counter, change.delta, change.before, change.after, change.reset,
                                         change.saturated) for change in changes]
    reading.observations = len(deltas)
    store.add_watch_signals(counter_deltas=deltas, run_id=run_id)
    if new:
        mtime = _mtime(directory / new[-1].name)
        store.set_watch_cursor(source, {"last": new[-1].name, "mtime": mtime}, run_id=run_id)
        _LAST_READ[directory] = (mtime, new[-1])
    return reading


def _is_snapshot(entry: Path) -> bool:
    return (entry.is_dir() and (entry / "captured_at").exists()) or (entry.is_file() and entry.suffix == ".csv")


@dataclass(frozen=True)
class Snapshot:
    captured: float
    values: dict[Port, dict[str, int]]
    name: str


def _mtime(entry: Path) -> float:
    try:
        return entry.stat().st_mtime
    except OSError:
        return float("-inf")


#: The last snapshot read, by path and modification time: the next pass compares with it without reading 20,000
#: ports' counters again (a watch restarted reads it once).
_LAST_READ: dict[Path, tuple[float, Snapshot]] = {}


def _snapshot(entry: Path) -> Snapshot:
    if entry.is_file():
        captured, values, _serials = cable_health.read_db_csv_snapshot(entry)
    else:
        captured, values = cable_health.read_snapshot(entry, {})
    return Snapshot(captured, values, entry.name)


def _last_read(entry: Path) -> Snapshot:
    """The snapshot the last pass ended on: from memory when this process read it, else from its files."""
    cached = _LAST_READ.get(entry.parent)
    if cached is not None and cached[1].name == entry.name and cached[0] == _mtime(entry):
        return cached[1]
    return _snapshot(entry)


def judge(store: StateStore, fabric: Fabric, health: LinkHealth, *, until: float) -> Judgement:
    """Every cable scored on what the store holds of the window ending ``until``: the same scoring as
    ``topology flaps`` (storms set apart, flaps inside a switch's reboot explained by it)."""
    since = until - health.window_hours * 3600.0
    observations, devices, deltas = store.watch_signals_since(since)
    found = linkhealth.Evidence()
    for row in observations:
        if row.time > until:
            continue
        cable = fabric.cable_at((row.cable_node, row.cable_port))
        if cable is None:  # a cable the spec no longer has
            continue
        end = (row.end_node, row.end_port) if row.end_node is not None and row.end_port is not None else None
        found.observations.append(linkhealth.Observation(row.time, cable, row.kind, row.source, end, row.text,
                                                         row.weight, row.code))
    linkhealth.add_reboots(found, devices)
    # a counter's growth over the window, not per snapshot interval: snapshots every few minutes would each stay
    # under a threshold that a day's growth passes (``topology flaps`` compares two snapshots a day apart)
    grown: dict[tuple[str, int, str, int, str], list[WatchCounterDelta]] = {}
    for delta in deltas:
        if delta.end <= until:
            grown.setdefault((delta.cable_node, delta.cable_port, delta.port_node, delta.port, delta.counter),
                             []).append(delta)
    for (cable_node, cable_port, port_node, port, counter), changes in grown.items():
        cable = fabric.cable_at((cable_node, cable_port))
        if cable is None:
            continue
        found.counter_deltas.append((cable, (port_node, port), since, until, counters.CounterDelta(
            counter, sum(change.delta for change in changes), changes[0].before, changes[-1].after,
            any(change.reset for change in changes), any(change.saturated for change in changes))))
    scored, storms, explained = linkhealth.score(fabric, found, cable_health.policy_of(health))
    return Judgement(since, until, scored, storms, explained)
