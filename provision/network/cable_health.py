"""``provision topology flaps``: read the evidence files, name the bad cables, write what to do about them.

The pure work (parsing, scoring, tomography) is in ``topology``; this module finds the files, maps
names onto the spec's fabric, keeps each cable's history in the state store and writes the action
files. Nothing here touches a switch: the disable list is written, never run.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provision import evidence
from provision.errors import UsageProblem
from provision.evidence import EvidenceError
from provision.network.routes import routing_for
from provision.network.sources import design_endpoint, read_observed
from provision.network.view import FabricView
from provision.spec.model import LinkHealth
from provision.state.layout import fabric_dir
from provision.state.store import StateStore
from topology import (
    cabling,
    carrier,
    counters,
    ibdiagnet,
    ibnetdiscover,
    linkhealth,
    netdev,
    routes,
    tomography,
    ufm_events,
)
from topology.model import HCA, Cable, Fabric, Port
from topology.smroutes import TableRouter

LADDER = ("reseat", "clean", "replace transceiver", "replace cable")
_IB = re.compile(r"ib(\d+)$")


@dataclass
class Inputs:
    events: list[Path] = field(default_factory=list)
    syslogs: list[Path] = field(default_factory=list)
    counters: list[Path] = field(default_factory=list)  # snapshot directories, in any order
    results: list[Path] = field(default_factory=list)
    observed: Path | None = None
    year: int | None = None
    netdev_map: Path | None = None  # host netdev hca; without it the hosts' own sysfs is asked (``ask_hosts``)
    state_dir: Path | None = None
    #: hosts -> {(host, netdev): hca}, read from the hosts themselves; handed in by the command that may reach
    #: them (``topology flaps``): without it and without a map, carrier lines stay unmatched, never guessed
    ask_hosts: Callable[[set[str]], dict[tuple[str, str], str]] | None = None


@dataclass
class Report:
    suspects: list[linkhealth.CableHealth]
    storms: list[linkhealth.Storm]
    explained_by_reboots: int
    ingestion: dict[str, Any]
    unmatched: list[linkhealth.Unmatched]
    tomography: dict[str, Any] | None
    history: dict[str, dict[str, Any]]
    readings: list[evidence.Reading]  # how much of each evidence file was understood
    window_hours: float
    guids: dict[str, str]  # switch name -> 0x GUID, from the dump (empty without one)


def policy_of(health: LinkHealth) -> linkhealth.Policy:
    return linkhealth.Policy(flaps=health.flaps, window_s=health.window_hours * 3600, storm_gap_s=health.storm_gap_s,
                             storm_events=health.storm_events, storm_cables=health.storm_cables,
                             reboot_margin_s=health.reboot_margin_s,
                             counter_thresholds={**counters.THRESHOLDS, **health.counter_thresholds})


def hca_resolver(view: FabricView, mapping: dict[tuple[str, str], str]) -> Callable[[str, str], str | None]:
    """The HCA behind a host's IPoIB netdev, from ``mapping`` (a map file, or what the hosts' sysfs said), if it
    is one of the host's HCAs in the fabric; anything else is unmatched, never guessed from the netdev's number."""
    rails = view.rails()

    def resolve(host: str, device: str) -> str | None:
        name = netdev.lookup(mapping, host, device)
        return name if name and name in rails.get(host, set()) else None

    return resolve


def cable_key(cable: Cable) -> str:
    """A cable's name that does not depend on which end is written first."""
    return " - ".join(sorted(f"{node}/{port}" for node, port in (cable.a, cable.b)))


def _read(path: Path) -> str:
    return evidence.read_text(path)


def read_snapshot(directory: Path, names: dict[str, str]) -> tuple[float, dict[Port, dict[str, int]]]:
    """A counter snapshot: ``<node>.out`` files of ``perfquery -x``/``-l -x`` output (the node by name, or by
    GUID resolved through ``names``) and a ``captured_at`` file holding an ISO 8601 time. (An ibdiagnet db_csv
    file is the other kind of snapshot: :func:`read_db_csv_snapshot`.)"""
    stamp_file = directory / "captured_at"
    if not directory.is_dir() or not stamp_file.exists():
        raise EvidenceError(f"{directory}: a counter snapshot is a directory with a captured_at file "
                            "(ISO 8601 time) and one perfquery output per node")
    try:
        captured = datetime.fromisoformat(stamp_file.read_text().strip())
    except ValueError:
        raise EvidenceError(f"{stamp_file}: not an ISO 8601 time: {stamp_file.read_text()[:40]!r}") from None
    if captured.tzinfo is None:
        captured = captured.replace(tzinfo=UTC)
    readings: dict[Port, dict[str, int]] = {}
    for path in sorted(directory.glob("*.out")):
        node = names.get(path.stem.lower(), path.stem)  # a GUID-named file; otherwise the file names the node
        try:
            blocks = counters.parse_perfquery(_read(path))
        except counters.CounterError as error:
            raise EvidenceError(f"{path}: {error}") from None
        for block in blocks:
            readings[node, block.port] = block.values
    if not readings:
        raise EvidenceError(f"{directory}: no perfquery counters in its *.out files (a snapshot is one "
                            "`perfquery -x` output per node beside its captured_at)")
    return captured.timestamp(), readings


def read_db_csv_snapshot(path: Path) -> tuple[float, dict[Port, dict[str, int]], dict[Port, str]]:
    """An ibdiagnet db_csv as a counter snapshot: its PM_INFO counters and CABLE_INFO serials, switch ports named
    by its own NODES table, taken at the file's modification time (ibdiagnet writes it as its run ends, so copy
    it with ``cp -p``). The file is read and its tables parsed once."""
    try:
        found = ibdiagnet.read_db_csv(_read(path))
    except ibdiagnet.DbCsvError as error:
        raise EvidenceError(f"{path}: {error}") from None
    if not found.counters:
        raise EvidenceError(f"{path}: no PM_INFO table: run ibdiagnet with its performance counters (--pc)")
    by_guid, _ = guid_names(found.discovery)
    readings = {(by_guid[guid], port): values for (guid, port), values in found.counters.items() if guid in by_guid}
    serials = {(by_guid[guid], port): serial for (guid, port), serial in found.serials.items() if guid in by_guid}
    return path.stat().st_mtime, readings, serials


def guid_names(discovery: ibnetdiscover.Discovery) -> tuple[dict[str, str], dict[str, str]]:
    """Switch GUID -> switch name (``0x``-prefixed and bare, lower case), and name -> ``0x`` GUID, from a dump."""
    by_guid: dict[str, str] = {}
    by_name: dict[str, str] = {}
    for node in discovery.nodes.values():
        if node.kind != "switch":
            continue
        guid = node.node_id.split("-", 1)[-1].lower()
        name = cabling.node_device(node)
        by_guid[guid] = by_guid[f"0x{guid}"] = name
        by_name[name] = f"0x{guid}"
    return by_guid, by_name


def add_port_counts(fabric: Fabric, discovery: ibnetdiscover.Discovery) -> None:
    """Each switch's external ports, as the dump gives them (its header counts port 0, the switch itself), on
    the fabric's node: how many ports a cage carries follows (:func:`topology.linkhealth.resolve_label`)."""
    for node in discovery.nodes.values():
        name = cabling.node_device(node)
        if node.kind == "switch" and node.ports > 1:
            for known in (name, name.lower()):
                if known in fabric.graph:
                    fabric.graph.nodes[known]["ports"] = node.ports - 1


def add_port_states(evidence: linkhealth.Evidence, view: FabricView, discovery: ibnetdiscover.Discovery,
                    path: Path) -> None:
    """The dump's view as of its file time: designed cables it shows down or cannot see at all, and
    cables trained below the design rate, from the cabling audit."""
    fabric = view.fabric
    by_endpoint = {}
    for cable in fabric.cables():
        for node, port in (cable.a, cable.b):
            by_endpoint[design_endpoint(fabric, node, port)] = (node, port)
    down: list[tuple[Port, str]] = []
    slow: list[tuple[Port, str]] = []
    for finding in view.audit(discovery).findings:
        if finding.category not in ("port_down", "missing", "degraded") or finding.expected is None:
            continue
        end = next((by_endpoint[e] for e in finding.expected if e in by_endpoint), None)
        if end is not None:
            text = f"{path.name}: {finding.category}: {finding.detail or 'designed cable not up'}"
            (slow if finding.category == "degraded" else down).append((end, text))
    linkhealth.add_discovery(evidence, fabric, path.stat().st_mtime, down, slow)


#: What each evidence option must hold, as the refusal of a file that holds none of it says.
UFM_EVENT_LOG = "UFM event.log lines ('2026-11-28 01:02:03.456 [id] [code] LEVEL [topic] ...')"
SYSLOG = "syslog lines ('Nov 28 01:02:03 host ...' or an ISO 8601 time, then the host)"


#: The pairs stage's end-to-end results in a burn-in's run directory: tomography's input, written by the stage.
RESULTS_FILE = "pairs-results.json"


def latest_results(state_dir: Path) -> Path | None:
    """The pair-test results of the most recent burn-in run that measured any (run ids sort by time)."""
    runs = state_dir / "runs"
    found = sorted(runs.glob(f"*/{RESULTS_FILE}")) if runs.is_dir() else []
    return found[-1] if found else None


@dataclass
class FlapsRequest:
    """What ``topology flaps`` was given: evidence files, and what to do about the suspects."""

    events: list[Path] = field(default_factory=list)
    syslogs: list[Path] = field(default_factory=list)
    counter_dirs: list[Path] = field(default_factory=list)
    results: list[Path] = field(default_factory=list)
    observed: Path | None = None
    year: int | None = None
    last_burnin: bool = False
    actions_dir: Path | None = None
    execute: bool = False
    via: str | None = None
    netdev_map: Path | None = None


def default_evidence(view: FabricView, directory: Path | None, request: FlapsRequest) -> None:
    """A simulated cluster's own day of events and counters, and the latest burn-in's pair results."""
    given = request.events or request.syslogs or request.counter_dirs or request.results
    simulated_cluster = view.cluster_spec is not None and view.cluster_spec.spec.simulation is not None
    if not given and simulated_cluster and directory is not None:
        simulated = fabric_dir(directory)
        if not (simulated / "ufm" / "event.log").exists():
            raise UsageProblem(f"no simulated fabric history under {simulated}: run `provision sim up` first")
        request.events = [simulated / "ufm" / "event.log"]
        request.counter_dirs = sorted((simulated / "counters").iterdir())
        request.observed = request.observed or simulated / "ibnetdiscover.txt"
        request.last_burnin = True
    if request.last_burnin and not request.results:
        if directory is None:
            raise UsageProblem("--burnin-results reads the latest burn-in of a cluster: give its spec")
        latest = latest_results(directory)
        if latest is None and not request.events:
            raise UsageProblem(f"no burn-in under {directory} has run the pairs stage yet")
        request.results = [latest] if latest else []
    if not (request.events or request.syslogs or request.counter_dirs or request.results):
        raise UsageProblem("give at least one of --events, --syslog, --counters, --results")


def findings(view: FabricView, directory: Path | None, request: FlapsRequest,
             ask_hosts: Callable[[set[str]], dict[tuple[str, str], str]] | None = None,
             ) -> tuple[Report, list[dict[str, Any]]]:
    """The suspect cables the evidence names, each with its cable's history: reading only (the report and the
    metrics read link health here; ``topology flaps`` then writes the actions and disables ports in
    :mod:`provision.repairs.cables`). ``directory``: the state directory whose store holds each cable's repair
    history (None: no history, as for a fabric given by its plans alone)."""
    fabric = view.fabric
    default_evidence(view, directory, request)
    inputs = Inputs(request.events, request.syslogs, request.counter_dirs, request.results, request.observed,
                    request.year, request.netdev_map, directory, ask_hosts)
    store = StateStore.open_readonly(directory) if directory is not None else None
    try:
        report = analyse(view, inputs, store)
    except ibnetdiscover.DumpError as error:
        raise UsageProblem(str(error)) from None
    finally:
        if store is not None:
            store.close()
    suspects = [suspect_dict(item, fabric, report.history[cable_key(item.cable)]) for item in report.suspects]
    if view.plans is not None:  # the plan's other columns (rack, location, length, S/N) go with each suspect
        attributes = view.plans.attributes()
        for row, item in zip(suspects, report.suspects, strict=True):
            ends = frozenset(design_endpoint(fabric, *end) for end in (item.cable.a, item.cable.b))
            row["attributes"] = attributes.get(ends, {})
    return report, suspects


def gather(view: FabricView, inputs: Inputs) -> tuple[linkhealth.Evidence, dict[str, Any], dict[str, str],
                                                      list[evidence.Reading]]:
    """The evidence, what each input contributed, switch name -> GUID from the dump (for the disable list), and
    how much of each file was understood (a file of which nothing was is refused: :mod:`provision.evidence`)."""
    found = linkhealth.Evidence()
    ingestion: dict[str, Any] = {}
    fabric = view.fabric
    zone = view.link_health.ufm_timezone
    names: dict[str, str] = {}
    guids: dict[str, str] = {}
    readings: list[evidence.Reading] = []
    if inputs.observed is not None:  # first: its switches' port counts say how UFM's labels read
        discovery, read = read_observed(inputs.observed)
        readings.append(read)
        names, guids = guid_names(discovery)
        add_port_counts(fabric, discovery)
        add_port_states(found, view, discovery, inputs.observed)
    for path in inputs.events:
        text = _read(path)
        log = ufm_events.parse_event_log(text, zone)
        readings.append(evidence.reading(path, UFM_EVENT_LOG, text, understood=log.lines - log.malformed,
                                         lines=log.lines, samples=log.malformed_samples, log=True))
        linkhealth.add_event_log(found, fabric, log)
        ingestion[str(path)] = log.summary()
    year = inputs.year or datetime.now(UTC).year
    carrier_logs = {}
    for path in inputs.syslogs:
        text = _read(path)
        lines, in_form, others = carrier.syslog_lines(text)
        readings.append(evidence.reading(path, SYSLOG, text, understood=in_form, lines=lines, samples=others,
                                         log=True))
        carrier_logs[path] = carrier.parse_syslog(text, year=year)
    if carrier_logs:
        if inputs.netdev_map is not None:
            text = _read(inputs.netdev_map)
            try:
                mapping = netdev.parse_netdev_map(text)
            except netdev.NetdevMapError as error:
                raise EvidenceError(f"{inputs.netdev_map}: {error}") from None
            readings.append(evidence.reading(inputs.netdev_map, "'host netdev hca' lines", text,
                                             understood=len(mapping), lines=len(mapping)))
        else:
            hosts = {event.host for events in carrier_logs.values() for event in events}
            mapping = inputs.ask_hosts(hosts) if inputs.ask_hosts is not None else {}
        for path, events in carrier_logs.items():
            linkhealth.add_carrier(found, fabric, events, hca_resolver(view, mapping))
            ingestion[str(path)] = {"carrier_events": len(events)}
    snapshots: list[tuple[float, dict[Port, dict[str, int]]]] = []
    for path in inputs.counters:
        if path.is_file():  # an ibdiagnet db_csv: its CABLE_INFO also names the cables' serials
            captured, values, serials = read_db_csv_snapshot(path)
            for port, serial in serials.items():
                cable = fabric.cable_at(port)
                if cable is not None:
                    found.serials.setdefault(cable, serial)
            snapshots.append((captured, values))
        else:
            snapshots.append(read_snapshot(path, names))
    snapshots.sort(key=lambda shot: shot[0])
    if len(inputs.counters) == 1:
        raise EvidenceError(f"{inputs.counters[0]}: counters need two snapshots to give a delta")
    for (start, before), (end, after) in itertools.pairwise(snapshots):
        deltas = [(port, counters.deltas(before.get(port, {}), values)) for port, values in after.items()]
        linkhealth.add_counter_deltas(found, fabric, start, end, deltas)
        ingestion[f"counters {datetime.fromtimestamp(start, UTC):%Y-%m-%d %H:%M} .. "
                  f"{datetime.fromtimestamp(end, UTC):%Y-%m-%d %H:%M}"] = {"ports": len(after)}
    return found, ingestion, guids, readings


def read_results(paths: list[Path], router: routes.Router) -> tuple[str, list[tuple[tomography.Test, bool]]]:
    """End-to-end results: ``{"routing": "dmodk"|"ecmp", "tests": [{"flows": [[src, dst], ...], "passed": bool}
    ...]}``, or ``{"gbps": measured, "expected_gbps": designed}`` in place of ``passed`` (passed at >= 90%)."""
    routing = "dmodk"
    tests = []
    for path in paths:
        try:
            document = json.loads(_read(path))
        except json.JSONDecodeError as error:
            raise EvidenceError(f"{path}: not JSON: {error}") from None
        routing = document.get("routing", routing)
        if routing not in ("dmodk", "ecmp", "tables"):
            raise EvidenceError(f"{path}: routing must be dmodk, ecmp or tables, not {routing!r}")
        for number, entry in enumerate(document.get("tests", [])):
            where = f"{path}: tests[{number}]"
            flows = [tuple(flow) for flow in entry.get("flows", [])]
            unknown = [end for flow in flows for end in flow if end not in router.number]
            if not flows or unknown or any(len(flow) != 2 for flow in flows):
                named = f"; unknown: {', '.join(map(str, unknown[:3]))}" if unknown else ""
                raise EvidenceError(f"{where}: flows must be [source HCA, target HCA] pairs of the fabric "
                                    f"(like 'sim01/mlx5_0'){named}")
            if "passed" in entry:
                passed = bool(entry["passed"])
            elif "gbps" in entry and "expected_gbps" in entry:
                passed = float(entry["gbps"]) >= 0.9 * float(entry["expected_gbps"])
            else:
                raise EvidenceError(f"{where}: needs 'passed', or 'gbps' and 'expected_gbps'")
            tests.append((tomography.test_of(router, flows, "ecmp" if routing == "ecmp" else "dmodk"), not passed))
        if not document.get("tests"):
            raise EvidenceError(f"{path}: no tests in it (expected {{\"tests\": [{{\"flows\": [[source, target]], "
                                "\"passed\": true}}]}})")
    return routing, tests


def run_tomography(fabric: Fabric, paths: list[Path], health: list[linkhealth.CableHealth],
                   router: routes.Router | None = None) -> dict[str, Any]:
    """Suspects from end-to-end results, with the event/counter evidence as the prior, and the next tests. Flows
    are routed as the results file says they were: ``tables`` by ``router`` (the subnet manager's tables, where
    the cluster has them), ``dmodk`` and ``ecmp`` by the design."""
    design = routes.Router(fabric)
    routing, tests = read_results(paths, design)
    if routing == "tables" and isinstance(router, TableRouter):
        routing, tests = read_results(paths, router)
    else:
        router = design
        if routing == "tables":
            routing = "tables (not available here: the flows were routed by D-mod-K)"
    localizer_routing = "ecmp" if routing == "ecmp" else "dmodk"
    prior = {router.index[item.cable]: 1.0 + 50.0 * min(item.score, 4.0)
             for item in health if item.klass != "healthy" and item.cable in router.index}
    localizer = tomography.Localizer(router, routing=localizer_routing, prior=prior)
    for test, failed in tests:
        localizer.record(test, failed)
    probabilities, clean = localizer.posterior()
    leading = sorted(range(len(probabilities)), key=probabilities.__getitem__, reverse=True)[:5]
    proposal = localizer.propose() if not localizer.done() else None
    return {
        "routing": routing, "tests": len(tests), "failed": sum(1 for _test, failed in tests if failed),
        "found": [{"cable": cable_key(suspect.cable), "confidence": round(suspect.confidence, 3),
                   "indistinguishable_from": [cable_key(twin) for twin in suspect.indistinguishable]}
                  for suspect in localizer.suspects()],
        "found_cables": [router.cables[number] for number in localizer.found],
        "leading": [{"cable": cable_key(router.cables[number]), "probability": round(probabilities[number], 4)}
                    for number in leading if probabilities[number] > 0.001],
        "no_more_bad": round(clean, 4),
        "next_test": [list(flow) for flow in proposal.flows] if proposal else [],
    }


def analyse(view: FabricView, inputs: Inputs, store: StateStore | None) -> Report:
    fabric = view.fabric
    found, ingestion, guids, readings = gather(view, inputs)
    policy = policy_of(view.link_health)
    health, storms, explained = linkhealth.score(fabric, found, policy)
    result = None
    if inputs.results:
        router = None
        if view.cluster_spec is not None and view.designed and inputs.state_dir is not None:
            router = routing_for(view.cluster_spec, fabric, inputs.state_dir).router
        result = run_tomography(fabric, inputs.results, health, router)
        named = {cable: (1.0, f"tomography: {len(result['found'])} cable(s) named by {result['tests']} end-to-end "
                              f"tests ({result['failed']} failed)") for cable in result.pop("found_cables")}
        health, storms, explained = linkhealth.score(fabric, found, policy, named)
    suspects = [item for item in health if item.klass != "healthy"]
    history = {cable_key(item.cable): _history(item, store) for item in suspects}
    return Report(suspects, storms, explained, ingestion, found.unmatched, result, history, readings,
                  view.link_health.window_hours, guids)


def _history(item: linkhealth.CableHealth, store: StateStore | None) -> dict[str, Any]:
    return history_of(item, store.cable_history(cable_key(item.cable)) if store else [])


def history_of(item: linkhealth.CableHealth, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The cable's last repair, the flaps seen since, and the next rung of the repair ladder, from its history
    (``StateStore.cable_history``)."""
    repairs = [record for record in records if record["kind"] == "repair"]
    earlier = [record for record in records if record["kind"] == "finding"]
    if not repairs:
        return {"last_repair": None, "next_step": LADDER[0], "earlier_findings": len(earlier)}
    last = repairs[-1]
    since = datetime.fromisoformat(last["at"]).timestamp()
    done = last["detail"].get("action", LADDER[0])
    rung = LADDER.index(done) + 1 if done in LADDER else 0
    return {"last_repair": {"action": done, "at": last["at"]},
            "flaps_since_repair": sum(1 for when in item.flap_times if when >= since),
            "next_step": LADDER[rung] if rung < len(LADDER) else "replace the switch or HCA",
            "earlier_findings": len(earlier)}


def suspect_dict(item: linkhealth.CableHealth, fabric: Fabric, history: dict[str, Any]) -> dict[str, Any]:
    return {"cable": cable_key(item.cable), "ends": [_end(fabric, end) for end in (item.cable.a, item.cable.b)],
            "class": item.klass, "score": item.score, "flaps_in_window": item.flaps, "errors": item.errors,
            "serial": item.serial or None, "evidence": item.evidence, "suppressed_by_reboots": item.suppressed,
            "history": history}


def _end(fabric: Fabric, end: Port) -> dict[str, Any]:
    node, port = end
    data = fabric.graph.nodes[node]
    if data.get("kind") == HCA:
        return {"node": node, "port": port, "host": data.get("host"), "hca": data.get("hca")}
    return {"node": node, "port": port, "ufm_port": ufm_events.ufm_port_path(port)[2:], "tier": data.get("kind")}


@dataclass(frozen=True)
class PortDisable:
    """One switch port to take out of service: an end of a suspect cable (hosts' ports go with their node)."""

    cable: str
    klass: str
    switch: str
    port: int
    guid: str | None  # 0x GUID from the dump; None without one

    def command(self) -> list[str]:
        return ["ibportstate", "-G", self.guid or "<guid>", str(self.port), "disable"]


def port_disables(report: Report, fabric: Fabric) -> list[PortDisable]:
    disables = []
    for item in report.suspects:
        if item.klass not in ("down", "flapping", "erroring", "degraded"):
            continue
        for node, port in (item.cable.a, item.cable.b):
            if fabric.graph.nodes[node].get("kind") != HCA:
                disables.append(PortDisable(cable_key(item.cable), item.klass, node, port,
                                            report.guids.get(node.lower())))
    return disables


def write_actions(directory: Path, report: Report, fabric: Fabric, *,
                  attributes: dict[str, dict[str, str]] | None = None, routable: bool = True) -> list[Path]:
    """The port-disable list (UFM REST payloads and ibportstate commands) and a ticket per cable; nothing runs.

    ``attributes``: cable key → the plan's columns for it (rack, location, length...), written on its ticket.
    ``routable``: the fabric is a fat-tree design, whose routes give the flows that re-test a cable; a plan's
    fabric has no routing model, so its tickets say so instead."""
    directory.mkdir(parents=True, exist_ok=True)
    to_disable = [item for item in report.suspects if item.klass in ("down", "flapping", "erroring", "degraded")]
    payloads, commands = [], ["#!/bin/sh", "# Written by provision topology flaps; review before running.",
                              "# Disables both ends of each suspect cable (the SM then routes around it).", "set -e"]
    router = routes.Router(fabric) if routable else None
    for disable in port_disables(report, fabric):
        ufm_id = disable.guid.removeprefix("0x") if disable.guid else disable.switch  # UFM: systems by bare GUID
        payloads.append({"action": "disable", "identifier": "id", "object_type": "System",
                         "object_ids": [ufm_id], "params": {"port_id": f"{ufm_id}_{disable.port}"},
                         "description": f"provision: {disable.klass} cable {disable.cable}"})
        commands.append(" ".join(disable.command()) if disable.guid else
                        f"# {disable.switch} port {disable.port}: GUID unknown (pass --observed DUMP); "
                        + " ".join(disable.command()))
    written = [directory / "disable_ports.ufm.json", directory / "disable_ports.sh"]
    written[0].write_text(json.dumps(payloads, indent=2) + "\n")
    written[1].write_text("\n".join(commands) + "\n")
    tickets = directory / "tickets"
    tickets.mkdir(exist_ok=True)
    recheck = {}
    for item in to_disable:
        key = cable_key(item.cable)
        history = report.history.get(key, {})
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", key)
        flows = router.aimed_flows(router.index[item.cable], random.Random(0), 3) \
            if router is not None and item.cable in router.index else []
        recheck[key] = [list(flow) for flow in flows]
        lines = [f"# Cable {key}: {item.klass}", "",
                 *[f"- end: {_describe_end(fabric, end)}" for end in (item.cable.a, item.cable.b)],
                 *[f"- {name}: {value}" for name, value in (attributes or {}).get(key, {}).items()],
                 f"- cable S/N: {item.serial or 'not reported'}",
                 f"- flaps in the worst {report.window_hours:g} h window: {item.flaps}",
                 f"- errors: {json.dumps(item.errors) if item.errors else 'none'}"]
        if history.get("last_repair"):
            lines.append(f"- last repair: {history['last_repair']['action']} at {history['last_repair']['at']}; "
                         f"flaps since: {history.get('flaps_since_repair', 0)}")
        lines += [f"- next step: **{history.get('next_step', LADDER[0])}** (ladder: {' -> '.join(LADDER)})",
                  "- after the repair: re-enable both ports, record it with `provision topology repaired`, and "
                  + (f"re-test only the routes through this cable with `provision topology recheck SPEC "
                     f"{_switch_end(fabric, item.cable)}` (recheck.json lists such flows)" if router is not None else
                     "re-test the hosts behind this cable (a cabling plan gives no routes to aim flows with)"),
                  "", "## Evidence", "",
                  *[f"    {line}" for line in item.evidence]]
        (tickets / f"{name}.md").write_text("\n".join(lines) + "\n")
        written.append(tickets / f"{name}.md")
    written.append(directory / "recheck.json")
    written[-1].write_text(json.dumps(recheck, indent=2) + "\n")
    return written


def _switch_end(fabric: Fabric, cable: Cable) -> str:
    """SWITCH/PORT of a cable's upper end (a host cable's leaf end), as the repair commands take it."""
    node, port = max((cable.a, cable.b), key=lambda end: fabric.graph.nodes[end[0]].get("kind") != HCA)
    return f"{node}/{port}"


def _describe_end(fabric: Fabric, end: Port) -> str:
    node, port = end
    data = fabric.graph.nodes[node]
    if data.get("kind") == HCA:
        return f"host {data.get('host')} HCA {data.get('hca')} port {port}"
    return f"{data.get('kind')} {node} port {port} (UFM {ufm_events.ufm_port_path(port)[2:]})"
