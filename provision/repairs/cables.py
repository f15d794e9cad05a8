"""The repair loop for one cable: find the suspects (``topology flaps``), disable their ports, record the
repair, re-test the routes through it. Each mutating step runs inside the one run lifecycle and leaves its
mark in the cable's history, which is what moves the repair ladder on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.burnin.launch import run_seed
from provision.burnin.recheck import recheck_cables
from provision.errors import EXIT_OK, EXIT_PROBLEMS, UsageProblem
from provision.facts.ibportstate import final_state
from provision.hosts.remote import HostSession, ReadFailed, open_session
from provision.network import cable_health
from provision.network.cable_health import FlapsRequest
from provision.network.sources import cable_at_port, design_fabric
from provision.network.view import FabricView
from provision.run.context import SpecIdentity, mutating_run
from provision.spec import LoadedSpec
from provision.state import NodeState
from topology import netdev

IN_SERVICE = (NodeState.PROVISIONED, NodeState.BURNING_IN, NodeState.ADMITTED)


def _identity(loaded: LoadedSpec) -> SpecIdentity:
    return SpecIdentity(loaded.path.resolve(), loaded.sha256)


@dataclass
class FlapsOutcome:
    report: cable_health.Report
    suspects: list[dict[str, Any]]
    written: list[Path]
    executed: list[dict[str, Any]]


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
    report, suspects = cable_health.findings(
        view, directory, request, ask_hosts=lambda hosts: netdevs_of_hosts(view, hosts, directory or view.base_dir))
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
            rows = execute_disables(disables, session, timeout_s=60.0)
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


def netdevs_of_hosts(view: FabricView, hosts: set[str], state_dir: Path) -> dict[tuple[str, str], str]:
    """Ask each host which HCA each of its IPoIB netdevs belongs to (``/sys/class/net`` and
    ``/sys/class/infiniband`` resolve into the same PCI function). A host that cannot be asked adds nothing:
    its carrier lines stay unmatched; without a cluster spec no host can be asked."""
    found: dict[tuple[str, str], str] = {}
    loaded = view.cluster_spec
    if loaded is None:
        return found
    for node in loaded.nodes:
        if node.name not in hosts:
            continue
        try:
            session = open_session(loaded, node, state_dir)
        except Exception:  # unreachable: its lines are reported unmatched, not guessed
            continue
        try:
            pairs = netdev.netdevs_from_sysfs(session.resolve_links("/sys/class/net"),
                                              session.resolve_links("/sys/class/infiniband"))
        except ReadFailed:  # not read: its lines are reported unmatched, not guessed
            continue
        finally:
            session.close()
        found.update({(node.name, name): hca for name, hca in pairs.items()})
    return found


def execute_disables(disables: list[cable_health.PortDisable], session: HostSession,
                     timeout_s: float) -> list[dict[str, Any]]:
    """Disable each port from ``session``'s host (an SMP reaches any switch from any HCA), then query it back:
    a port counts as disabled only when it reads ``PhysLinkState Disabled``. A port whose GUID is unknown is
    reported, never guessed; one failure does not stop the others."""
    rows = []
    for item in disables:
        row: dict[str, Any] = {"cable": item.cable, "switch": item.switch, "port": item.port, "guid": item.guid}
        if item.guid is None:
            rows.append({**row, "result": "skipped", "detail": "GUID unknown: pass --observed DUMP"})
            continue
        change = session.run(item.command(), timeout_s, become=True)
        query = session.run(["ibportstate", "-G", item.guid, str(item.port), "query"], timeout_s, become=True) \
            if change.ok else change
        state = final_state(query.stdout) if query.ok else None
        if state is not None and state[1] == "Disabled":
            rows.append({**row, "result": "disabled", "detail": f"LinkState {state[0]}, PhysLinkState {state[1]}"})
        else:
            detail = query.problem() if not query.ok else \
                f"still PhysLinkState {state[1]}" if state else "no PortInfo in ibportstate's output"
            rows.append({**row, "result": "failed", "detail": detail})
    return rows
