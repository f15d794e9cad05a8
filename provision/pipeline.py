"""The ``apply`` pipeline: an ordered list of phases run under the cluster lock.

Each phase can say what it *would* do (``plan``, read-only) and do it (``run``),
recording per-host results in the state store and events in the run directory.
The phases: ``simulate`` (only with a ``simulation:`` section), ``register``
(the store's node table in line with the spec), ``provision`` (the playbooks)
and ``burnin`` (the staged burn-in that admits or quarantines each node).
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from provision.burnin.phase import BurninPhase
from provision.errors import UsageProblem
from provision.hosts import ansible, inventory, recovery, runtime
from provision.hosts.connection import connection_model, jump_master
from provision.node_check import check_file as node_check_file
from provision.run.context import SpecIdentity, mutating_run
from provision.run.phases import Phase, PhaseContext, PhaseReport, PlannedStore, SystemicFailure
from provision.run.record import RunRecord
from provision.sim import cluster as sim_cluster
from provision.spec import LoadedSpec
from provision.spec.secrets import resolve as resolve_secret
from provision.spec.semantics import ResolvedNode
from provision.state import NodeRecord, NodeState, StateStore, lifecycle
from provision.state.store import DB_NAME, Registration
from topology import hostlist

STATE_DIR_NAME = ".provision"

__all__ = ["PHASES", "ApplyResult", "Phase", "PhaseContext", "PhaseReport", "UsageProblem", "apply", "plan"]


def default_state_dir(spec_path: Path, cluster_name: str) -> Path:
    """State lives next to the spec, one folder per cluster, so the spec and its state travel together."""
    return spec_path.resolve().parent / STATE_DIR_NAME / cluster_name


def find_state_dir(start: Path) -> Path:
    """For ``provision status`` without a spec: the one cluster under ``./.provision``."""
    candidates = sorted(path.parent for path in (start / STATE_DIR_NAME).glob("*/state.db"))
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise UsageProblem(f"no cluster state under {start / STATE_DIR_NAME}; give the spec file or --state-dir")
    names = ", ".join(path.name for path in candidates)
    raise UsageProblem(f"several clusters under {start / STATE_DIR_NAME} ({names}); give the spec file or --state-dir")


class RegisterPhase:
    """Every spec node gets a lifecycle row; nodes dropped from the spec keep their history."""

    name = "register"
    description = "record the spec's nodes in the state store"

    def plan(self, loaded: LoadedSpec, store: PlannedStore | None, targets: list[ResolvedNode],
             forks: int) -> PhaseReport:
        pairs = [(node.name, node.group) for node in loaded.nodes]
        change = store.compare(pairs) if store else Registration([name for name, _ in pairs], [], [])
        return self._report(change, "would ")

    def run(self, context: PhaseContext) -> PhaseReport:
        pairs = [(node.name, node.group) for node in context.loaded.nodes]
        change = context.store.register(pairs, context.run.id)
        added, returning = set(change.added), set(change.returning)
        context.store.record_results(context.run.id, self.name, [
            (node.name, "in-spec", "added" if node.name in added else "returned" if node.name in returning
             else "unchanged", {"group": node.group, "address": node.address}) for node in context.targets])
        context.run.event("phase.register", added=change.added, returning=change.returning, removed=change.removed)
        return self._report(change, "")

    def _report(self, change: Registration, mood: str) -> PhaseReport:
        parts = []
        if change.added:
            parts.append(f"{mood}add {len(change.added)} new node(s): {hostlist.compress(change.added)}")
        if change.returning:
            parts.append(f"{mood}bring back {len(change.returning)}: {hostlist.compress(change.returning)}")
        if change.removed:
            parts.append(f"{mood}mark {len(change.removed)} no longer in the spec (history kept): "
                         f"{hostlist.compress(change.removed)}")
        summary = "; ".join(parts) if parts else "node list matches the store"
        return PhaseReport(self.name, summary, {"added": change.added, "returning": change.returning,
                                                "removed": change.removed})


class SimulatePhase:
    """With a ``simulation:`` section, the simulated hosts must exist before anything talks to them."""

    name = "simulate"
    description = "bring up the simulated cluster"

    def plan(self, loaded: LoadedSpec, store: PlannedStore | None, targets: list[ResolvedNode],
             forks: int) -> PhaseReport:
        if loaded.spec.simulation is None:
            return PhaseReport(self.name, "no simulation section", {})
        state_dir = store.state_dir if store else None
        current = sim_cluster.read_manifest(state_dir) if state_dir else None
        if current is not None and current["spec_sha256"] == loaded.sha256:
            return PhaseReport(self.name, "simulated cluster is up", {})
        return PhaseReport(self.name, f"would bring up {len(loaded.nodes)} simulated nodes with "
                           f"{len(loaded.spec.simulation.faults)} fault(s)", {"nodes": loaded.node_names})

    def run(self, context: PhaseContext) -> PhaseReport:
        if context.loaded.spec.simulation is None:
            return PhaseReport(self.name, "no simulation section", {})
        manifest = sim_cluster.up(context.loaded, context.store.state_dir)
        for node in context.targets:  # the hosts this run will touch are built now, not mid-playbook
            sim_cluster.materialize(context.store.state_dir, [node.name])
        context.run.event("phase.simulate", changed=manifest["changed"], faults=manifest["faults"])
        return PhaseReport(self.name, sim_cluster.summary(manifest), {"faults": manifest["faults"]})


def runtime_wheel(loaded: LoadedSpec, directory: Path) -> dict[str, str]:
    """This controller's fabric_tests wheel for the node_runtime role, when the spec names a runtime."""
    if loaded.spec.software.runtime is None:
        return {}
    version = runtime.wheel_version()
    return {"node_runtime_wheel": str(runtime.build_wheel(directory, version)), "node_runtime_wheel_version": version}


class ProvisionPhase:
    """The playbooks: every targeted host converged to the spec; a host that cannot be is quarantined with
    the failing task, and later phases skip it.

    It takes the nodes the table of moves lets ``apply`` provision (:func:`lifecycle.retried_by_provisioning`):
    new, provisioned and admitted ones, and those a failed task quarantined here; never a node the burn-in or an
    operator quarantined (that quarantine holds until a repair), one in the middle of its burn-in, or a drained one.
    """

    name = "provision"
    description = "converge hosts with the playbooks"

    @staticmethod
    def _hosts(context_targets: list[ResolvedNode], store: PlannedStore | None) -> list[str]:
        hosts = []
        for node in context_targets:
            record = store.node(node.name) if store else None
            if record is None or lifecycle.retried_by_provisioning(record.state, record.stage, record.by_operator):
                hosts.append(node.name)
        return hosts

    def plan(self, loaded: LoadedSpec, store: PlannedStore | None, targets: list[ResolvedNode],
             forks: int) -> PhaseReport:
        hosts = self._hosts(targets, store)
        state_dir = store.state_dir if store else None
        if state_dir is None or not (state_dir / DB_NAME).exists() or (
                loaded.spec.simulation is not None and sim_cluster.read_manifest(state_dir) is None):
            return PhaseReport(self.name, f"would converge {len(hosts)} host(s) (nothing known about them "
                               "yet: run apply)", {"hosts": hosts, "unchecked": hosts})
        if not hosts:
            return PhaseReport(self.name, "no host to provision", {})
        unbuilt: list[str] = []
        if loaded.spec.simulation is not None:  # plan writes nothing: a host not built yet is not built by it
            unbuilt = [host for host in hosts if not sim_cluster.is_built(state_dir, host)]
        built = [host for host in hosts if host not in unbuilt]
        if not built:
            return PhaseReport(self.name, f"would converge {len(unbuilt)} host(s) (not built yet: run apply)",
                               {"hosts": hosts, "unchecked": unbuilt})
        with tempfile.TemporaryDirectory() as scratch:
            path = inventory.write(loaded, state_dir, Path(scratch) / "inventory.yml")
            checks = node_check_file.write_check_files(loaded, Path(scratch) / "node-check")
            with jump_master(connection_model(loaded)):
                result = ansible.run_playbook(path, built, check=True, forks=forks,
                                              extravars={"node_check_dir": str(checks),
                                                         **runtime_wheel(loaded, Path(scratch) / "runtime"),
                                                         **_secrets_for(loaded, [self])})  # check mode sudoes too
        changes = {host: outcome.changes for host, outcome in result.hosts.items() if outcome.changes}
        failures = {host: f"{outcome.failed_task}: {outcome.message}" for host, outcome in result.hosts.items()
                    if not outcome.succeeded}
        if not changes and not failures and not unbuilt:
            # the play runs on them all the same (and takes a quarantine provisioning made back to provisioned)
            return PhaseReport(self.name, "no changes", {"hosts": hosts} if self._moved(store, hosts) else {})
        parts = [f"would change {len(changes)} host(s): {hostlist.compress(list(changes))}"] if changes else []
        if unbuilt:
            parts.append(f"would converge {len(unbuilt)} host(s) not built yet: {hostlist.compress(unbuilt)}")
        if failures:
            parts.append(f"{len(failures)} host(s) fail: {hostlist.compress(list(failures))}")
        return PhaseReport(self.name, "; ".join(parts), {"hosts": hosts, "changes": changes, "failures": failures,
                                                          "unchecked": unbuilt})

    @staticmethod
    def _moved(store: PlannedStore | None, hosts: list[str]) -> bool:
        """Whether converging ``hosts`` with no change moves any of them to another state: a new one, or one a
        failed task had quarantined, goes to provisioned (a provisioned or an admitted one stays as it is)."""
        return any((record := store.node(host) if store else None) is None
                   or record.state in (NodeState.NEW, NodeState.QUARANTINED) for host in hosts)

    def run(self, context: PhaseContext) -> PhaseReport:
        hosts = self._hosts(context.targets, context.store)
        if not hosts:
            return PhaseReport(self.name, "no host to provision", {})
        path = inventory.write(context.loaded, context.store.state_dir, context.run.path / "inventory.yml")
        # play keywords (max_fail_percentage) see extra vars, not inventory vars: the budget goes here
        budget = {"provision_max_fail_percentage": context.loaded.spec.admission.max_failure_percent.provision}
        checks = node_check_file.write_check_files(context.loaded, context.run.path / "node-check")
        wheel = runtime_wheel(context.loaded, context.run.path / "runtime")

        def play(on: list[str]) -> ansible.PlaybookResult:
            with jump_master(connection_model(context.loaded)):  # the forks through one bastion connection
                return ansible.run_playbook(path, on, forks=context.forks,
                                            extravars={**budget, "node_check_dir": str(checks), **wheel,
                                                       **context.secrets},
                                            on_task=lambda host, task, outcome: context.run.event(
                                                "task", host=host, task=task, outcome=outcome))

        result = play(hosts)
        if result.status in ("canceled", "timeout"):
            # an interrupted play proves nothing about any host: leave every node as it was
            context.run.event("phase.provision.interrupted", status=result.status)
            raise KeyboardInterrupt(f"the playbook run was {result.status}")
        hung = [host for host in hosts if recovery.hung_in_reboot(result.hosts[host].failed_task)]
        cycled = recovery.power_cycle_hung(context.loaded, context.store.state_dir, hung) if hung else None
        if cycled is not None:
            for host, cycle in cycled.cycles.items():
                context.run.event("provision.power_cycle", node=host, ok=cycle["ok"], detail=cycle["detail"],
                                  steps=cycle["steps"])
            if cycled.back:  # the play again, for them alone: it picks up after the reboot
                result.hosts.update(play(cycled.back).hosts)
        rows, failed, changed, stopped = [], [], [], []
        for host in hosts:
            outcome = result.hosts[host]
            rows.append((host, "playbook", "ok" if outcome.succeeded else "stopped" if outcome.stopped else "failed",
                         outcome.as_dict()))
            context.run.event("provision.node", node=host, passed=outcome.succeeded, stopped=outcome.stopped,
                              changed=outcome.changed,
                              failed_task=outcome.failed_task or None, message=outcome.message or None)
            record = context.store.node(host)
            if outcome.stopped:  # stays where it was: the next apply picks it up
                stopped.append(host)
            elif outcome.succeeded:
                changed += [host] if outcome.changed else []
                if record is None or record.state is not NodeState.ADMITTED or outcome.changed:
                    recovered = {"power_cycled": cycled.cycles[host]} if cycled and host in cycled.back else {}
                    context.store.transition(host, NodeState.PROVISIONED, run_id=context.run.id,
                                             evidence={"changed_tasks": outcome.changed, **recovered})
            else:
                failed.append(host)
                reason = f"{'unreachable' if outcome.unreachable else 'task failed'}: {outcome.failed_task}: " \
                         f"{outcome.message}"
                evidence = outcome.as_dict()
                if cycled is not None and host in cycled.still_down:  # both facts: the reboot's and the BMC's
                    reason = (f"unreachable: did not come back from its reboot within "
                              f"{context.loaded.spec.host.reboot_timeout_s} s ({outcome.failed_task}); "
                              f"{cycled.still_down[host]}")
                    evidence = {**evidence, "bmc": cycled.cycles.get(host, {"detail": cycled.still_down[host]})}
                context.store.transition(host, NodeState.QUARANTINED, run_id=context.run.id, stage="provision",
                                         reason=reason, evidence=evidence)
        context.store.record_results(context.run.id, self.name, rows)
        (context.run.path / "provision.json").write_text(json.dumps([row[3] for row in rows], indent=2))
        summary = f"{len(hosts) - len(failed) - len(stopped)} host(s) converged ({len(changed)} changed)"
        if failed:
            summary += f"; {len(failed)} failed: " + "; ".join(
                f"{host}: {result.hosts[host].failed_task}" for host in failed)
        if stopped:
            summary += (f"; {len(stopped)} not finished ({hostlist.compress(stopped)}): the failures exceeded the "
                        f"{context.loaded.spec.admission.max_failure_percent.provision:g}% provisioning failure "
                        "budget, so the play stopped; they stay as they were and the next apply takes them")
        return PhaseReport(self.name, summary, {"hosts": hosts, "failed": failed, "changed": changed,
                                                "stopped": stopped})


PHASES: tuple[Phase, ...] = (SimulatePhase(), RegisterPhase(), ProvisionPhase(), BurninPhase())


def select_phases(names: str | None) -> list[Phase]:
    if not names:
        return list(PHASES)
    known = {phase.name: phase for phase in PHASES}
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise UsageProblem(f"unknown phase(s) {', '.join(unknown)}; this release has: {', '.join(known)}")
    return [phase for phase in PHASES if phase.name in wanted]


def select_targets(loaded: LoadedSpec, limit: str | None) -> list[ResolvedNode]:
    if not limit:
        return list(loaded.nodes)
    try:
        wanted = hostlist.expand(limit)
    except hostlist.HostlistError as error:
        raise UsageProblem(f"--limit: {error}") from None
    known = {node.name for node in loaded.nodes}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise UsageProblem(f"--limit names hosts that are not in the spec: {hostlist.compress(unknown)}")
    chosen = set(wanted)
    return [node for node in loaded.nodes if node.name in chosen]


def refuse_unjudged_trays(loaded: LoadedSpec, targets: list[ResolvedNode], phases: list[Phase]) -> None:
    """NVL72 compute trays are burned in as racks: without the ``nvlink_domain`` stage in ``burnin.stages`` a tray
    passed on an HGX host's stages would be admitted with its NVLink domain never measured (issue 53)."""
    trays = [node.name for node in targets if loaded.spec.hardware[node.hardware].platform == "nvl72"]
    if trays and any(phase.name == "burnin" for phase in phases) \
            and "nvlink_domain" not in loaded.spec.burnin.stages:
        raise UsageProblem(f"{hostlist.compress(trays)}: NVL72 compute trays are burned in with their NVLink domain: "
                           "add nvlink_domain to burnin.stages (after pairs; docs/blackwell.md)")


@dataclass
class ApplyResult:
    run: RunRecord
    reports: list[PhaseReport]
    targets: list[ResolvedNode]
    quarantined: list[str]
    stopped: str = ""  # why a phase stopped the run early (a systemic burn-in failure)

    @property
    def exit_code(self) -> int:
        return 1 if self.quarantined or self.stopped else 0


def apply(
    loaded: LoadedSpec,
    state_dir: Path,
    *,
    argv: list[str],
    limit: str | None = None,
    phases: str | None = None,
    wait_lock_s: float = 0.0,
    forks: int | None = None,
    command: str = "apply",
    retest_quarantined: bool = False,
) -> ApplyResult:
    """Run the selected phases against the spec inside one mutating run (``command`` names the run)."""
    chosen = select_phases(phases)
    targets = select_targets(loaded, limit)
    refuse_unjudged_trays(loaded, targets, chosen)
    secrets = _secrets_for(loaded, chosen)  # before anything changes: a missing secret is a usage error
    identity = SpecIdentity(loaded.path.resolve(), loaded.sha256)
    with mutating_run(state_dir, command, argv, spec=identity, wait_lock_s=wait_lock_s) as active:
        run, store = active.record, active.store
        seed = random.SystemRandom().randrange(2**31)
        sim_seed = loaded.spec.simulation.seed if loaded.spec.simulation else None
        run.describe_spec(loaded.path, loaded.sha256, hosts=[node.name for node in targets],
                          rank_order=[node.name for node in targets],
                          seeds={"run": seed, **({"simulation": sim_seed} if sim_seed is not None else {})})
        run.note("phases", [phase.name for phase in chosen])
        reports, stopped = [], ""
        for phase in chosen:
            run.event("phase.started", phase=phase.name, hosts=[node.name for node in targets])
            context = PhaseContext(loaded, store, run, targets, forks or loaded.spec.connection.forks,
                                   secrets, retest_quarantined)
            try:
                report = phase.run(context)
            except SystemicFailure as failure:
                stopped = str(failure)
                reports.append(PhaseReport(phase.name, f"stopped: {failure}", {"stopped": True}))
                run.event("phase.stopped", phase=phase.name, reason=stopped)
                break
            run.event("phase.finished", phase=phase.name, summary=report.summary)
            reports.append(report)
        target_names = {node.name for node in targets}
        quarantined = [record.name for record in store.nodes()
                       if record.name in target_names and record.state is NodeState.QUARANTINED]
        result = ApplyResult(run, reports, targets, quarantined, stopped)
        active.conclude(result.exit_code)
    return result


def _secrets_for(loaded: LoadedSpec, chosen: list[Phase]) -> dict[str, str]:
    connection = loaded.spec.connection
    if connection.become_password is None or not any(phase.name == "provision" for phase in chosen):
        return {}
    return {"ansible_become_password": resolve_secret(connection.become_password, what="connection.become_password",
                                                      spec_dir=loaded.path.parent)}


def plan(loaded: LoadedSpec, state_dir: Path, *, limit: str | None = None,
         phases: str | None = None, forks: int | None = None) -> list[PhaseReport]:
    """What ``apply`` would do; reads the store if there is one and never writes.

    Each phase plans against the store as the phases before it would leave it (:class:`Projection`): the burn-in
    names the nodes provisioning would hand it, so ``plan`` names exactly the nodes ``apply`` takes."""
    chosen = select_phases(phases)
    targets = select_targets(loaded, limit)  # the same usage errors as apply
    refuse_unjudged_trays(loaded, targets, chosen)
    store = StateStore.open_readonly(state_dir)
    try:
        projection = Projection(store, state_dir)
        reports = []
        for phase in chosen:
            reports.append(phase.plan(loaded, projection, targets, forks or loaded.spec.connection.forks))
            projection.follow(reports[-1])
        return reports
    finally:
        if store:
            store.close()


class Projection:
    """The store as ``apply``'s phases would leave it, phase by phase: what ``plan`` reads (see
    :class:`PlannedStore`). Only the provision phase moves nodes before the burn-in: each host it would converge
    goes to ``provisioned`` (an admitted host only when the play would change it, or when the play could not be
    checked on it: a host not built yet), each it would fail to ``quarantined`` in provisioning."""

    def __init__(self, store: StateStore | None, state_dir: Path) -> None:
        self.store, self._state_dir = store, state_dir
        self.moved: dict[str, NodeRecord] = {}

    @property
    def state_dir(self) -> Path:
        return self.store.state_dir if self.store else self._state_dir

    def node(self, name: str) -> NodeRecord | None:
        return self.moved.get(name) or (self.store.node(name) if self.store else None)

    def compare(self, spec_nodes: Iterable[tuple[str, str]]) -> Registration:
        pairs = list(spec_nodes)
        return self.store.compare(pairs) if self.store else Registration([name for name, _ in pairs], [], [])

    def follow(self, report: PhaseReport) -> None:
        if report.name != ProvisionPhase.name:
            return
        changes, failures = report.details.get("changes", {}), report.details.get("failures", {})
        unchecked = set(report.details.get("unchecked", []))  # not checked: counted as changed, the most it may be
        for host in report.details.get("hosts", []):
            record = self.node(host)
            if host in failures:
                self.moved[host] = _planned(host, record, NodeState.QUARANTINED, "provision",
                                            f"would fail: {failures[host]}")
            elif record is None or record.state is not NodeState.ADMITTED or host in changes or host in unchecked:
                self.moved[host] = _planned(host, record, NodeState.PROVISIONED, None, "")


def _planned(name: str, record: NodeRecord | None, state: NodeState, stage: str | None, reason: str) -> NodeRecord:
    return NodeRecord(name, record.group if record else "", state, stage, reason, True,
                      record.position if record else 0, "", None, False)
