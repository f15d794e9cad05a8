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
from dataclasses import dataclass
from pathlib import Path

from provision import ansible, inventory, node_check_file, recovery, runtime
from provision.burnin.phase import BurninPhase
from provision.connection import connection_model, jump_master
from provision.errors import UsageProblem
from provision.phases import Phase, PhaseContext, PhaseReport, SystemicFailure
from provision.run_context import SpecIdentity, mutating_run
from provision.runs import RunRecord
from provision.secrets import resolve as resolve_secret
from provision.sim import cluster as sim_cluster
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from provision.state import NodeState, StateStore
from provision.state.store import Registration
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

    def plan(self, loaded: LoadedSpec, store: StateStore | None, targets: list[ResolvedNode],
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

    def plan(self, loaded: LoadedSpec, store: StateStore | None, targets: list[ResolvedNode],
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
    the failing task, and later phases skip it."""

    name = "provision"
    description = "converge hosts with the playbooks"
    eligible = (NodeState.NEW, NodeState.PROVISIONED, NodeState.QUARANTINED, NodeState.ADMITTED)

    def _hosts(self, context_targets: list[ResolvedNode], store: StateStore | None) -> list[str]:
        hosts = []
        for node in context_targets:
            record = store.node(node.name) if store else None
            if record is None or record.state in self.eligible:
                hosts.append(node.name)
        return hosts

    def plan(self, loaded: LoadedSpec, store: StateStore | None, targets: list[ResolvedNode],
             forks: int) -> PhaseReport:
        state_dir = store.state_dir if store else None
        if state_dir is None or (loaded.spec.simulation is not None and sim_cluster.read_manifest(state_dir) is None):
            return PhaseReport(self.name, f"would converge {len(targets)} host(s) (nothing known about them "
                               "yet: run apply)", {"hosts": [node.name for node in targets]})
        hosts = self._hosts(targets, store)
        unbuilt: list[str] = []
        if loaded.spec.simulation is not None:  # plan writes nothing: a host not built yet is not built by it
            unbuilt = [host for host in hosts if not sim_cluster.is_built(state_dir, host)]
            hosts = [host for host in hosts if host not in unbuilt]
        if not hosts:
            return PhaseReport(self.name, f"would converge {len(unbuilt)} host(s) (not built yet: run apply)",
                               {"hosts": unbuilt})
        with tempfile.TemporaryDirectory() as scratch:
            path = inventory.write(loaded, state_dir, Path(scratch) / "inventory.yml")
            checks = node_check_file.write_check_files(loaded, Path(scratch) / "node-check")
            with jump_master(connection_model(loaded)):
                result = ansible.run_playbook(path, hosts, check=True, forks=forks,
                                              extravars={"node_check_dir": str(checks),
                                                         **runtime_wheel(loaded, Path(scratch) / "runtime"),
                                                         **_secrets_for(loaded, [self])})  # check mode sudoes too
        changes = {host: outcome.changes for host, outcome in result.hosts.items() if outcome.changes}
        failures = {host: f"{outcome.failed_task}: {outcome.message}" for host, outcome in result.hosts.items()
                    if not outcome.succeeded}
        if not changes and not failures:
            return PhaseReport(self.name, "no changes", {})
        summary = f"would change {len(changes)} host(s): {hostlist.compress(list(changes))}" if changes else ""
        if failures:
            summary += ("; " if summary else "") + f"{len(failures)} host(s) fail: {hostlist.compress(list(failures))}"
        return PhaseReport(self.name, summary, {"changes": changes, "failures": failures})

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
        return PhaseReport(self.name, summary, {"failed": failed, "changed": changed, "stopped": stopped})


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
    """What ``apply`` would do; reads the store if there is one and never writes."""
    chosen = select_phases(phases)
    targets = select_targets(loaded, limit)  # the same usage errors as apply
    store = StateStore.open_readonly(state_dir)
    try:
        return [phase.plan(loaded, store, targets, forks or loaded.spec.connection.forks) for phase in chosen]
    finally:
        if store:
            store.close()
