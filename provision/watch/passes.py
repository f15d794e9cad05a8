"""One pass of ``provision watch``, in the run the command opened: Slurm read back (:mod:`.reconcile`), the
fabric's passive signals followed and judged (:mod:`.signals`), and what the suspects call for done
(:mod:`.cables`): tickets written into the pass's run directory, ports disabled where the policy allows, the
nodes a cable cut off taken out of service through the breaker. Every action is in the run's record and the
store (the cable's history, the node's), so a watch killed between two actions repeats neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.network import cable_health
from provision.network.sources import read_observed, simulated_dump
from provision.network.view import FabricView, view_of_cluster
from provision.repairs.cables import execute_disables, netdevs_of_hosts
from provision.run.context import ActiveRun
from provision.sinks.slurm import client_for
from provision.spec import LoadedSpec
from provision.state import NodeState
from provision.watch import cables as cable_actions
from provision.watch.climb import Climbed, HostSteps, Steps, climb
from provision.watch.forecasts import forecast_pass
from provision.watch.reconcile import FABRIC_STAGE, Move, ReconcileResult, make_moves, reconcile
from provision.watch.revalidation import RevalidationPass, revalidation_pass
from provision.watch.signals import SignalsPass, sources_of, watch_pass
from topology.linkhealth import CableHealth

#: How long one ``ibportstate`` may take from the host that sends it.
DISABLE_TIMEOUT_S = 60.0

#: A host that can send SMPs (``ibportstate``): given the node, it runs the disables and returns their rows.
Disabler = Callable[[list[cable_health.PortDisable]], list[dict[str, Any]]]


@dataclass
class PassResult:
    reconciled: ReconcileResult
    signals: SignalsPass | None = None
    cables: list[cable_actions.CableAction] = field(default_factory=list)
    tickets: list[str] = field(default_factory=list)
    disabled: list[dict[str, Any]] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    held: list[Move] = field(default_factory=list)
    breaker: str = ""
    climbed: list[Climbed] = field(default_factory=list)
    ladder_held: str = ""  # why the ladder did nothing this pass (the breaker is tripped)
    disables_held: list[dict[str, Any]] = field(default_factory=list)  # what the breaker kept from being disabled
    forecasts: list[dict[str, Any]] = field(default_factory=list)  # port counters forecast inside the horizon
    revalidation: RevalidationPass | None = None

    @property
    def problems(self) -> list[str]:
        """What kept this pass from seeing or acting: Slurm unreadable, a source silent, a disable that failed."""
        found = [f"slurm: {self.reconciled.unreachable}"] if self.reconciled.unreachable else []
        found += self.signals.problems if self.signals else []
        found += [f"disable {row['switch']}/{row['port']}: {row['result']}: {row.get('detail', '')}"
                  for row in self.disabled if row["result"] != "disabled"]
        found += self.revalidation.problems if self.revalidation else []
        return found

    def as_dict(self) -> dict[str, Any]:
        return {**self.reconciled.as_dict(), "signals": self.signals.as_dict() if self.signals else None,
                "cable_actions": [action.as_dict() for action in self.cables], "tickets": self.tickets,
                "forecasts": self.forecasts,
                "revalidation": self.revalidation.as_dict() if self.revalidation else None,
                "disabled": self.disabled, "fabric_moves": [move.as_dict() for move in self.moves],
                "fabric_held_by_breaker": [move.as_dict() for move in self.held],
                "breaker": self.breaker or self.reconciled.breaker, "ladder": [item.as_dict() for item in self.climbed],
                "ladder_held": self.ladder_held, "disables_held": self.disables_held, "problems": self.problems}


def one_pass(loaded: LoadedSpec, run: ActiveRun, state_dir: Path, *, now: float,
             disabler: Disabler | None = None, steps: Steps | None = None) -> PassResult:
    """Slurm, then the fabric, then the repair ladder of every node the watch holds; ``now`` is the pass's clock
    (the window the signals are judged over ends there). ``disabler``: how ports are disabled (default:
    ``ibportstate`` from an admitted node); ``steps``: how the ladder's rungs are done (default: the hosts and
    their BMCs)."""
    result = PassResult(reconcile(loaded, run.store, run_id=run.id, now=now))
    _fabric(loaded, run, state_dir, result, now=now, disabler=disabler)
    if loaded.spec.watch.revalidate is not None and loaded.spec.slurm is not None:
        result.revalidation = revalidation_pass(loaded, run, client_for(loaded), now=now)
    state = run.store.breaker()
    if state is not None and state["tripped"]:  # a cause common to many nodes: no power cycle, no reset, no RMA
        result.ladder_held = f"breaker tripped: {state['detail'].get('why', 'tripped')}"
        return result
    result.climbed = climb(loaded, run, now=now, steps=steps or HostSteps(loaded, state_dir))
    return result


def _fabric(loaded: LoadedSpec, run: ActiveRun, state_dir: Path, result: PassResult, *, now: float,
            disabler: Disabler | None) -> None:
    """The fabric's signals read and judged, and what the suspects call for done, into ``result``."""
    view = view_of_cluster(loaded)
    sources = sources_of(loaded, state_dir)
    if not sources:
        return
    result.signals = watch_pass(run.store, view.fabric, sources, view.link_health, now=now, run_id=run.id,
                                ask_hosts=lambda hosts: netdevs_of_hosts(view, hosts, state_dir))
    # what is still under its threshold but growing towards it: a warning kept in the store, no action
    result.forecasts = [one.as_dict() for one in forecast_pass(run.store, view.fabric, view.link_health,
                                                               loaded.spec.forecast, until=now, run_id=run.id)
                        if one.flagged]
    suspects = result.signals.judgement.suspects
    if not suspects:
        return
    history = {cable_health.cable_key(item.cable): run.store.cable_history(cable_health.cable_key(item.cable))
               for item in suspects}
    actions = cable_actions.plan(suspects, view.fabric, history,
                                 disable_ports=loaded.spec.watch.signals.disable_ports)
    result.cables = actions
    by_key = {cable_health.cable_key(item.cable): item for item in suspects}
    result.tickets = _ticket(run, view, [by_key[action.cable] for action in actions if action.ticket], history)
    to_disable = [by_key[action.cable] for action in actions if action.disable]
    state = run.store.breaker()
    if to_disable and state is not None and state["tripped"]:  # listed, not done: the breaker holds every action
        result.disables_held = [{"cable": cable_health.cable_key(item.cable), "class": item.klass}
                                for item in to_disable]
        to_disable = []
    if to_disable:
        report = _report(to_disable, _guids(loaded, state_dir), view.link_health.window_hours)
        disables = cable_health.port_disables(report, view.fabric)
        result.disabled = (disabler or _disabler(loaded, run, state_dir))(disables)
        for row in result.disabled:
            if row["result"] == "disabled":
                run.store.record_cable(row["cable"], cable_actions.DISABLED,
                                       {"switch": row["switch"], "port": row["port"], "source": cable_actions.SOURCE},
                                       run_id=run.id)
    disabled_cables = {row["cable"] for row in result.disabled if row["result"] == "disabled"}
    moves = _cut_off(loaded, run, actions, disabled_cables)
    result.moves, result.held, result.breaker = make_moves(loaded, run.store, moves, run_id=run.id, now=now)


def _ticket(run: ActiveRun, view: FabricView, suspects: list[CableHealth],
            history: dict[str, list[dict[str, Any]]]) -> list[str]:
    """A ticket per new finding in the pass's run directory, and the finding in the cable's history (so the next
    pass knows it named it)."""
    if not suspects:
        return []
    report = _report(suspects, {}, view.link_health.window_hours)
    report.history = {cable_health.cable_key(item.cable): cable_health.history_of(
        item, history.get(cable_health.cable_key(item.cable), [])) for item in suspects}
    written = cable_health.write_actions(run.path / "actions", report, view.fabric, routable=view.designed)
    for item in suspects:
        run.store.record_cable(cable_health.cable_key(item.cable), cable_actions.FINDING,
                               {"source": cable_actions.SOURCE, "class": item.klass, "flaps": item.flaps,
                                "errors": item.errors, "evidence": item.evidence[:5]}, run_id=run.id)
    return [str(path) for path in written if path.parent.name == "tickets"]


def _report(suspects: list[CableHealth], guids: dict[str, str], window_hours: float) -> cable_health.Report:
    return cable_health.Report(suspects, [], 0, {}, [], None, {}, [], window_hours, guids)


def _guids(loaded: LoadedSpec, state_dir: Path) -> dict[str, str]:
    """Switch name -> GUID, from the SM's sweep the spec names, else a simulated fabric's own dump; without
    either, a disable is skipped with the reason (a GUID is never guessed)."""
    tables = loaded.spec.fabric.routing_tables
    path = None
    if tables is not None:
        path = tables.discovery if tables.discovery.is_absolute() else loaded.path.parent / tables.discovery
    path = path or simulated_dump(loaded, state_dir, required=False)
    if path is None:
        return {}
    discovery, _reading = read_observed(path)
    return cable_health.guid_names(discovery)[1]


def _disabler(loaded: LoadedSpec, run: ActiveRun, state_dir: Path) -> Disabler:
    """``ibportstate`` sent from the first admitted node (an SMP reaches any switch from any HCA)."""
    from provision.hosts.remote import ReadFailed, open_session

    def disable(disables: list[cable_health.PortDisable]) -> list[dict[str, Any]]:
        admitted = {record.name for record in run.store.nodes() if record.state is NodeState.ADMITTED}
        node = next((node for node in loaded.nodes if node.name in admitted), None)
        if node is None:
            return [{"cable": item.cable, "switch": item.switch, "port": item.port, "guid": item.guid,
                     "result": "skipped", "detail": "no admitted node to send the disable from"}
                    for item in disables]
        try:
            session = open_session(loaded, node, state_dir)
        except (OSError, ReadFailed) as error:
            return [{"cable": item.cable, "switch": item.switch, "port": item.port, "guid": item.guid,
                     "result": "failed", "detail": f"{node.name} unreachable: {error}"} for item in disables]
        try:
            rows = execute_disables(disables, session, timeout_s=DISABLE_TIMEOUT_S)
        finally:
            session.close()
        run.note("watch.disable_ports", {"via": node.name, "ports": rows})
        return rows

    return disable


def _cut_off(loaded: LoadedSpec, run: ActiveRun, actions: list[cable_actions.CableAction],
             disabled: set[str]) -> list[Move]:
    """An admitted node whose rail's only cable this pass found down, or whose port this pass disabled, goes out of
    service: once per finding (an operator who admits it afterwards has decided, and is not overruled)."""
    states = {record.name: record.state for record in run.store.nodes()}
    moves = []
    for action in actions:
        if not ((action.ticket and action.klass == "down") or action.cable in disabled):
            continue
        for host, hca in action.cut:
            if states.get(host) is NodeState.ADMITTED and host in loaded.node_names:
                why = "down" if action.klass == "down" else f"{action.klass}, its port disabled"
                moves.append(Move(host, NodeState.QUARANTINED,
                                  f"fabric: {hca} lost its only link: cable {action.cable} {why}",
                                  stage=FABRIC_STAGE, evidence={"cable": action.cable, "class": action.klass,
                                                                "hca": hca}))
                states[host] = NodeState.QUARANTINED
    return moves
