"""The repair loop for one cable: find the suspects (``topology flaps``), disable their ports, record the
repair, re-test the routes through it. Each mutating step runs inside the one run lifecycle and leaves its
mark in the cable's history, which is what moves the repair ladder on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision import cable_health
from provision.burnin import pairs as pairs_stage
from provision.burnin.launch import run_seed
from provision.burnin.recheck import recheck_cables
from provision.errors import EXIT_OK, EXIT_PROBLEMS, UsageProblem
from provision.fabric_view import FabricView
from provision.ib_fabric import cable_at_port, design_endpoint, design_fabric
from provision.observe import open_session
from provision.run_context import SpecIdentity, mutating_run
from provision.sim.paths import fabric_dir
from provision.spec import LoadedSpec
from provision.state import NodeState, StateStore
from topology import ibnetdiscover

IN_SERVICE = (NodeState.PROVISIONED, NodeState.BURNING_IN, NodeState.ADMITTED)


def _identity(loaded: LoadedSpec) -> SpecIdentity:
    return SpecIdentity(loaded.path.resolve(), loaded.sha256)


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


@dataclass
class FlapsOutcome:
    report: cable_health.Report
    suspects: list[dict[str, Any]]
    written: list[Path]
    executed: list[dict[str, Any]]


def _default_evidence(view: FabricView, directory: Path | None, request: FlapsRequest) -> None:
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
        latest = pairs_stage.latest_results(directory)
        if latest is None and not request.events:
            raise UsageProblem(f"no burn-in under {directory} has run the pairs stage yet")
        request.results = [latest] if latest else []
    if not (request.events or request.syslogs or request.counter_dirs or request.results):
        raise UsageProblem("give at least one of --events, --syslog, --counters, --results")


def investigate(view: FabricView, directory: Path | None, request: FlapsRequest, argv: list[str]) -> FlapsOutcome:
    """Name the suspect cables from the evidence; write the actions and, with ``execute``, disable the ports.

    ``directory``: the state directory whose store holds each cable's repair history (None: no history, as for
    a fabric given by its plans alone)."""
    loaded = view.cluster_spec
    if request.execute and request.actions_dir is None:
        raise UsageProblem("--execute runs the disable list that --actions DIR writes: give --actions too")
    if request.execute and (loaded is None or directory is None):
        raise UsageProblem("--execute sends the disables from one of the cluster's hosts: give the cluster spec "
                           "(a fabric-only spec or --design names no host)")
    if request.via is not None and (loaded is None or request.via not in loaded.node_names):
        raise UsageProblem(f"--via {request.via}: no node named {request.via!r}"
                           + (f" in {loaded.path}" if loaded is not None else " (no cluster spec given)"))
    fabric = view.fabric
    _default_evidence(view, directory, request)
    inputs = cable_health.Inputs(request.events, request.syslogs, request.counter_dirs, request.results,
                                 request.observed, request.year, request.netdev_map, directory)
    store = StateStore.open_readonly(directory) if directory is not None else None
    try:
        report = cable_health.analyse(view, inputs, store)
    except ibnetdiscover.DumpError as error:
        raise UsageProblem(str(error)) from None
    finally:
        if store is not None:
            store.close()
    suspects = [cable_health.suspect_dict(item, fabric, report.history[cable_health.cable_key(item.cable)])
                for item in report.suspects]
    if view.plans is not None:  # the plan's other columns (rack, location, length, S/N) go with each suspect
        attributes = view.plans.attributes()
        for row, item in zip(suspects, report.suspects, strict=True):
            ends = frozenset(design_endpoint(fabric, *end) for end in (item.cable.a, item.cable.b))
            row["attributes"] = attributes.get(ends, {})
    written: list[Path] = []
    executed: list[dict[str, Any]] = []
    if request.actions_dir is not None:
        written = cable_health.write_actions(
            request.actions_dir, report, fabric, routable=view.designed,
            attributes={row["cable"]: row.get("attributes", {}) for row in suspects})
        if request.execute and loaded is not None and directory is not None:
            executed = disable_ports(loaded, directory, cable_health.port_disables(report, fabric), request.via,
                                     argv)
    return FlapsOutcome(report, suspects, written, executed)


def disable_ports(loaded: LoadedSpec, directory: Path, disables: list[cable_health.PortDisable],
                  via: str | None, argv: list[str]) -> list[dict[str, Any]]:
    """``--execute``: disable each port with ``ibportstate`` from one host and read it back, as a recorded run."""
    node = next(node for node in loaded.nodes if node.name == (via or loaded.node_names[0]))
    with mutating_run(directory, "disable-ports", argv, spec=_identity(loaded)) as run:
        session = open_session(loaded, node, directory)
        try:
            rows = cable_health.execute_disables(disables, session, timeout_s=60.0)
        finally:
            session.close()
        run.note("disable-ports", {"via": node.name, "ports": rows})
        run.conclude(EXIT_PROBLEMS if any(row["result"] != "disabled" for row in rows) else EXIT_OK)
    return rows


def record_repair(view: FabricView, identity: SpecIdentity, directory: Path, port: str, action: str, note: str,
                  argv: list[str]) -> dict[str, str]:
    """Keep a repair of the cable at SWITCH/PORT in its history; what was recorded, and in which run. The fabric
    is the spec's design or its cabling file (a fabric-only spec keeps a history too)."""
    cable = cable_at_port(view.fabric, port)
    key = cable_health.cable_key(cable)
    with mutating_run(directory, "repaired", argv, spec=identity) as run:
        run.note("cable_repair", {"cable": key, "action": action, "note": note})
        run.store.record_cable(key, "repair", {"action": action, "note": note}, run_id=run.id)
    return {"cable": key, "action": action, "note": note, "run_id": run.id, "record": str(run.path)}


@dataclass
class RecheckOutcome:
    run_dir: Path
    rows: list[dict[str, Any]]
    exit_code: int


def recheck(loaded: LoadedSpec, directory: Path, ports: list[str], argv: list[str]) -> RecheckOutcome:
    """Re-test only the routes through the cables at ``ports`` between hosts in service; verdict per cable."""
    fabric = design_fabric(loaded)
    cables = [cable_at_port(fabric, port) for port in ports]
    with mutating_run(directory, "recheck", argv, spec=_identity(loaded)) as run:
        states = {record.name: record.state for record in run.store.nodes()}
        nodes = [node for node in loaded.nodes if states.get(node.name) in IN_SERVICE]
        if len(nodes) < 2:
            raise UsageProblem(f"{len(nodes)} node(s) in service under {directory}: a recheck needs two "
                               "provisioned hosts whose routes cross the cable")
        rechecks = recheck_cables(loaded, fabric, nodes, directory, cables, seed=run_seed(run.id))
        rows = [item.as_dict(cable_health.cable_key(item.cable)) for item in rechecks]
        for row in rows:
            run.store.record_cable(row["cable"], "recheck", {"verdict": row["verdict"], "evidence": row["evidence"]},
                                   run_id=run.id)
        run.note("recheck", rows)
        code = EXIT_OK if all(row["verdict"] == "healthy" for row in rows) else EXIT_PROBLEMS
        run.conclude(code)
    return RecheckOutcome(run.path, rows, code)
