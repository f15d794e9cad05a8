"""The burn-in phase: the spec's stages in order, cheap to expensive; a node is admitted only after passing all.

Progress lives in the state store as a *campaign*: each stage a node passes is recorded, so a burn-in that is
interrupted (Ctrl-C, kill -9 of the controller) continues where it stopped when started again with the same
spec and stages, and a node is admitted only with a pass for every stage in that one campaign. A node that fails
is quarantined with the stage, the check, the evidence and the remediation, and is skipped by later stages.

A quarantined node re-enters at the stage it failed: after repair it runs preflight again (cheap, and a repair
touches hardware) and then the stages from the one it failed, the stages in between carried from the campaign
in which it passed them.

When more than ``admission.max_failure_percent.burnin`` of the burn-in's nodes fail one stage, the failure looks
systemic (a
threshold, the fabric, the spec) rather than a set of bad nodes: nobody is quarantined for it, the phase stops,
and the nodes stay in burning-in at that stage for the operator to look at.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from provision.burnin import collectives, dcgm, domains, node_stage, pairs, records, soak, training
from provision.burnin.launch import free_port, run_seed
from provision.burnin.preflight import check_runtimes, run_preflight
from provision.burnin.verdict import NodeVerdict
from provision.fleet import baselines, history
from provision.fleet.capacity import capacity
from provision.fleet.domains import held_trays
from provision.hosts import remote as observe
from provision.run.phases import PhaseContext, PhaseReport, PlannedStore, SystemicFailure
from provision.sinks import slurm
from provision.spec import LoadedSpec, acceptance
from provision.spec.semantics import ResolvedNode
from provision.state import NodeState, StateStore
from provision.state.lifecycle import REVALIDATE_STAGE
from topology import hostlist

StageRunner = Callable[[PhaseContext, list[ResolvedNode]], list[NodeVerdict]]


def _preflight(context: PhaseContext, nodes: list[ResolvedNode]) -> list[NodeVerdict]:
    return run_preflight(context.loaded, nodes, context.store.state_dir, context.forks)


def _seed(context: PhaseContext) -> int:
    return run_seed(context.run.id)


def _node(context: PhaseContext, nodes: list[ResolvedNode]) -> list[NodeVerdict]:
    """Each node alone, judged against its node-mates, the catalogue and the fleet's baseline; a whole delivery
    below its baseline is systemic (a setting every node shares), nobody's quarantine."""
    against = baselines.Judge(context.store, context.loaded, context.campaign)
    verdicts = node_stage.run_node_stage(context.loaded, nodes, context.store.state_dir, seed=_seed(context),
                                        evidence_dir=context.run.path / "workers", against=against)
    measured = [verdict for verdict in verdicts if verdict.figures]
    below = against.delivery(nodes, {verdict.node: verdict.figures for verdict in measured},
                             on_gpu=bool(measured) and all(verdict.measured_on == "gpu" for verdict in measured))
    if below:
        context.run.event("burnin.baseline.systemic", stage="node", findings=below)
        raise SystemicFailure(
            f"the whole delivery measures below the fleet's baseline: {'; '.join(below)}. Every node alike is a "
            "setting the delivery shares (firmware, BIOS, power cap, driver), not a node's fault, so no node was "
            "quarantined for it")
    return verdicts


def _dcgm(context: PhaseContext, nodes: list[ResolvedNode]) -> list[NodeVerdict]:
    return dcgm.run_dcgm_stage(context.loaded, nodes, context.store.state_dir, forks=context.forks,
                               evidence_dir=context.run.path / "dcgm")


def _soak(context: PhaseContext, nodes: list[ResolvedNode]) -> list[NodeVerdict]:
    return soak.SoakStage(context.loaded, nodes, context.store, context.campaign, seed=_seed(context),
                          evidence_dir=context.run.path / "soak", forks=context.forks).run()


def _pairs(context: PhaseContext, nodes: list[ResolvedNode]) -> list[NodeVerdict]:
    if context.loaded.fabric is None:
        raise SystemicFailure("the pairs stage routes its tests through the fabric design: the spec has none")
    report = pairs.run_pairs_stage(context.loaded, nodes, context.store.state_dir, seed=_seed(context),
                                   evidence_dir=context.run.path)
    for finding in report.fabric_suspects:  # a cable is nobody's node: it goes to the cable's history
        context.store.record_cable(finding["cable"], "finding", {"source": "burnin.pairs", **finding},
                                   run_id=context.run.id)
    summary = report.summary  # the whole of it is in the run directory's pairs-report.json
    context.run.event("burnin.pairs", rounds=summary.get("rounds", 0), measurements=summary.get("measurements", 0),
                      adaptive_measurements=summary.get("adaptive_measurements", 0),
                      coverage=summary.get("coverage", {}).get("covered", 0),
                      coverable=summary.get("coverage", {}).get("switch_cables_coverable", 0),
                      fabric_findings=[finding["cable"] for finding in report.fabric_suspects],
                      unexplained=len(summary.get("unexplained", [])))
    return report.verdicts


class StageStopped(SystemicFailure):
    """A stage stopped as systemic after it had failed some nodes on their own measurements (``established``):
    the stop quarantines nobody, and those nodes stay failed for what they showed."""

    def __init__(self, message: str, established: list[NodeVerdict]) -> None:
        super().__init__(message)
        self.established = established


def _collectives(context: PhaseContext, nodes: list[ResolvedNode]) -> list[NodeVerdict]:
    try:
        verdicts = collectives.run_collectives_stage(context.loaded, nodes, context.store.state_dir,
                                                   port=free_port(_seed(context)),
                                                   evidence_dir=context.run.path / "workers")
    except collectives.SYSTEMIC as problem:
        raise StageStopped(str(problem), problem.established) from None
    return verdicts


def _nvlink_domain(context: PhaseContext, nodes: list[ResolvedNode]) -> list[NodeVerdict]:
    return domains.run_domain_stage(context.loaded, nodes, context.store.state_dir, port=free_port(_seed(context) + 2),
                                    evidence_dir=context.run.path / "workers" / "nvlink-domains")


def _training(context: PhaseContext, nodes: list[ResolvedNode]) -> list[NodeVerdict]:
    try:
        verdicts = training.run_training_stage(context.loaded, nodes, context.store.state_dir, seed=_seed(context),
                                               port=free_port(_seed(context) + 1), run_id=context.run.id,
                                               evidence_dir=context.run.path / "workers")
    except records.FailedEverywhere as problem:
        raise SystemicFailure(str(problem)) from None
    return verdicts


#: Stage name -> runner; the spec's stage names (``provision.spec.model.BURNIN_STAGES``) are all here.
STAGES: dict[str, StageRunner] = {"preflight": _preflight, "node": _node, "dcgm": _dcgm, "pairs": _pairs,
                                  "nvlink_domain": _nvlink_domain, "collectives": _collectives,
                                  "training": _training, "soak": _soak}


#: Stages that start no worker of ours on the nodes, so need no runtime there (DCGM's diagnostic is DCGM's).
WITHOUT_WORKERS = {"preflight", "dcgm"}
#: Stages that measure a node against others: a few nodes burning in alone (back from repair) run them beside
#: admitted partners, up to this many nodes in all (a pair needs a partner; a straggler, a fleet of three).
WITH_PARTNERS = {"pairs", "nvlink_domain", "collectives", "training"}
PARTNERED_NODES = 4


def domain_partners(store: StateStore, loaded: LoadedSpec, taken: list[ResolvedNode], stages: Sequence[str],
                    idle: Callable[[list[str]], list[str]] | None = None) -> list[ResolvedNode]:
    """The admitted trays of the NVLink domains the burn-in's trays belong to: a tray back from repair is measured
    in its own domain, beside the trays that stayed, which are judged by nobody (their state does not change)."""
    if "nvlink_domain" not in stages:
        return []
    names = {node.name for node in taken}
    wanted = {name for domain in loaded.spec.nvlink_domains if names & set(hostlist.expand(domain.hosts))
              for name in hostlist.expand(domain.hosts)} - names
    admitted = [node for node in loaded.nodes if node.name in wanted
                and (record := store.node(node.name)) is not None and record.state is NodeState.ADMITTED]
    if idle is not None:
        free = set(idle([node.name for node in admitted]))
        admitted = [node for node in admitted if node.name in free]
    return admitted


def partners_for(store: StateStore, loaded: LoadedSpec, taken: list[ResolvedNode], stages: Sequence[str],
                 idle: Callable[[list[str]], list[str]] | None = None) -> list[ResolvedNode]:
    """Admitted nodes of the same hardware lent to a burn-in too small for its multi-node stages: they take part
    and are judged by nobody (a node passes only on its own measurements), and their own state does not change.
    ``idle``: which of them may be taken now (under the Slurm launcher, the ones Slurm has idle: a partner is
    borrowed through the burn-in's reservation, never from under a running job)."""
    if not taken or len(taken) >= PARTNERED_NODES or not WITH_PARTNERS & set(stages):
        return []
    names = {node.name for node in taken}
    profiles = {node.hardware for node in taken}
    admitted = [node for node in loaded.nodes if node.name not in names and node.hardware in profiles
                and (record := store.node(node.name)) is not None and record.state is NodeState.ADMITTED]
    if idle is not None:
        free = set(idle([node.name for node in admitted]))
        admitted = [node for node in admitted if node.name in free]
    return admitted[:PARTNERED_NODES - len(taken)]


def eligible(store: PlannedStore | StateStore | None, nodes: list[ResolvedNode], stages: Sequence[str], *,
             retest_quarantined: bool) -> tuple[list[ResolvedNode], dict[str, str]]:
    """Nodes the burn-in takes, and why the others are left out.

    ``apply`` leaves quarantined nodes alone (re-testing a node nobody repaired proves nothing and costs the
    fabric); ``provision burnin`` takes them back in at the stage they failed, which is what an operator runs
    after a repair."""
    taken, skipped = [], {}
    for node in nodes:
        record = store.node(node.name) if store else None
        if record is None or record.state is NodeState.NEW:
            skipped[node.name] = "not provisioned yet"
        elif record.state is NodeState.DRAINED:
            skipped[node.name] = "drained by an operator"
        elif record.state is NodeState.ADMITTED:
            skipped[node.name] = "already admitted"
        elif record.state is NodeState.BURNING_IN and record.stage == REVALIDATE_STAGE:
            skipped[node.name] = "being re-validated by the watch"
        elif record.state is NodeState.QUARANTINED and (record.stage not in stages or not retest_quarantined):
            skipped[node.name] = f"quarantined in {record.stage or 'an earlier phase'}: {record.reason}"
        else:
            taken.append(node)
    return taken, skipped


@dataclass
class _Progress:
    """A campaign's state as its stages run: each node's passes, the verdicts, who failed and who waits."""

    campaign: str
    #: every node the campaign took: the burn-in's failure budget is a share of them
    fleet: list[ResolvedNode]
    passed: dict[str, set[str]]
    verdicts: dict[str, NodeVerdict] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)
    #: node -> why its stage could not judge it (it stays burning-in at that stage)
    waiting: dict[str, str] = field(default_factory=dict)
    measured: dict[str, dict[str, list[tuple[str, float]]]] = field(default_factory=dict)
    demonstrated: str = ""
    #: tray -> why its NVLink domain's policy keeps it out although it passed every stage
    held: dict[str, str] = field(default_factory=dict)

    def on_rack(self, name: str) -> bool:
        """A waiting node that waits on its NVLink domain's finding (slow with no tray to blame), not on partners."""
        return self.verdicts[name].stage == "nvlink_domain"


class BurninPhase:
    name = "burnin"
    description = "burn in and admit"

    def plan(self, loaded: LoadedSpec, store: PlannedStore | None, targets: list[ResolvedNode],
             forks: int) -> PhaseReport:
        stages = list(loaded.spec.burnin.stages)
        taken, skipped = eligible(store, targets, stages, retest_quarantined=False)
        if not taken:
            return PhaseReport(self.name, f"no node to burn in ({len(skipped)} left as they are)", {})
        names = hostlist.compress([node.name for node in taken])
        summary = f"would burn in {len(taken)} node(s) through {', '.join(stages)}: {names}"
        return PhaseReport(self.name, summary, {"nodes": [node.name for node in taken]})

    def run(self, context: PhaseContext) -> PhaseReport:
        loaded, store, run = context.loaded, context.store, context.run
        stages = list(loaded.spec.burnin.stages)
        taken, skipped = eligible(store, context.targets, stages, retest_quarantined=context.retest_quarantined)
        if not taken:
            return PhaseReport(self.name, "no node to burn in", {"nodes": [], "skipped": skipped})
        on_slurm = loaded.spec.burnin.launcher == "slurm"
        idle = (lambda names: slurm.idle_nodes(loaded, names)) if on_slurm else None
        partners = partners_for(store, loaded, taken, stages, idle=idle)
        partners += [node for node in domain_partners(store, loaded, taken, stages, idle=idle) if node not in partners]
        window = (slurm.burnin_window(loaded, store, run.id, [node.name for node in taken + partners])
                  if on_slurm else contextlib.nullcontext())
        # one SSH connection per host for every stage of the campaign (observe.shared_sessions)
        with window, observe.shared_sessions(store.state_dir):
            return self._campaign(context, taken, skipped, stages, partners, idle)

    def _campaign(self, context: PhaseContext, taken: list[ResolvedNode], skipped: dict[str, str],
                  stages: Sequence[str], partners: list[ResolvedNode],
                  idle: Callable[[list[str]], list[str]] | None) -> PhaseReport:
        """Every stage over the nodes taken; then the nodes a stage could not judge alone (their group too small
        once the nodes that stopped it were removed) once more, beside the nodes this campaign has just admitted;
        then the campaign concluded."""
        loaded, store, run = context.loaded, context.store, context.run
        campaign, resumed = store.open_campaign(run.id, stages, loaded.sha256)
        context.campaign = campaign
        run.event("burnin.campaign", campaign=campaign, resumed=resumed, nodes=[node.name for node in taken],
                  partners=[node.name for node in partners])
        returned = history.returned_nodes(store, [node.name for node in taken])  # before any of them moves
        progress = _Progress(campaign, taken, store.passes(campaign))
        start = self._entry_points(store, campaign, taken, stages, progress.passed, run.id)
        for index, stage in enumerate(stages):
            self._stage(context, progress, stage, index, taken, start, partners)
        admitted = self._admit(context, progress, taken, stages)
        # a tray waiting on its domain's finding (slow with no tray to blame) waits on the rack, not on partners
        if any(not progress.on_rack(name) for name in progress.waiting):
            waiting = [node for node in taken if node.name in progress.waiting and not progress.on_rack(node.name)]
            lent = partners_for(store, loaded, waiting, stages, idle=idle)
            run.event("burnin.waiting", nodes=sorted(progress.waiting), partners=[node.name for node in lent])
            if lent:  # a second chance in this campaign, beside partners it has just admitted
                progress.waiting = {name: why for name, why in progress.waiting.items()  # the rack's stay
                                    if progress.on_rack(name)}
                for index, stage in enumerate(stages):
                    self._stage(context, progress, stage, index, waiting, start, lent)
                admitted += self._admit(context, progress, waiting, stages)
        return self._conclude(context, progress, taken, skipped, partners, admitted, returned, resumed)

    def _stage(self, context: PhaseContext, progress: _Progress, stage: str, index: int,
               nodes: list[ResolvedNode], start: dict[str, int], partners: list[ResolvedNode]) -> None:
        """One stage over the ``nodes`` due for it: each passes, fails (quarantined) or waits; too many failures
        stop the burn-in as systemic (:class:`SystemicFailure`)."""
        loaded, store, run = context.loaded, context.store, context.run
        # re-entering nodes start at the stage they failed, but always pass preflight again
        due = [node for node in nodes if node.name not in progress.failed and node.name not in progress.waiting
               and stage not in progress.passed.get(node.name, set())
               and (start[node.name] <= index or stage == "preflight")]
        if not due:
            return
        for node in due:
            store.transition(node.name, NodeState.BURNING_IN, run_id=run.id, stage=stage)
        run.event("burnin.stage.started", stage=stage, nodes=[node.name for node in due])
        lacking = {} if stage in WITHOUT_WORKERS else check_runtimes(loaded, due, store.state_dir, stage,
                                                                 context.forks)
        ready = [node for node in due if node.name not in lacking]
        lent = {node.name: node for node in partners} if stage in WITH_PARTNERS and ready else {}
        budget = loaded.spec.admission.max_failure_percent.burnin
        try:
            ran = [*lacking.values(), *(STAGES[stage](context, ready + list(lent.values())) if ready else [])]
        except StageStopped as stopped:
            established = [verdict for verdict in stopped.established if verdict.node not in lent]
            if not established or self._over_budget(established, progress.fleet, budget):
                raise
            self._record(context, stage, established)
            for verdict in established:
                run.event("burnin.node", node=verdict.node, stage=stage, passed=False, check=verdict.check,
                          reason=verdict.reason)
                self._quarantine(context, progress.campaign, stage, verdict)
            raise SystemicFailure(f"{stopped}; the nodes the stage had failed on their own measurements before "
                                  "it stopped are quarantined: " + ", ".join(
                                      f"{verdict.node} ({verdict.check})" for verdict in established)) from None
        stage_verdicts = [verdict for verdict in ran if verdict.node not in lent]
        if lent:  # what the partners showed is said, and judges nobody
            run.event("burnin.partners", stage=stage,
                      partners=[verdict.as_dict() for verdict in ran if verdict.node in lent])
        self._record(context, stage, stage_verdicts)
        failing = [verdict for verdict in stage_verdicts if verdict.failed]
        if self._over_budget(failing, progress.fleet, budget):
            names = hostlist.compress([verdict.node for verdict in failing])
            run.event("burnin.systemic", stage=stage, failing=[verdict.node for verdict in failing])
            raise SystemicFailure(
                f"{len(failing)} of {len(progress.fleet)} nodes failed {stage} ({names}), more than the "
                f"{budget:g}% burn-in failure budget: that looks systemic (thresholds, fabric or spec), so no "
                f"node was quarantined for it; first reason: {failing[0].reason}")
        for verdict in stage_verdicts:
            self._conclude_node(context, progress, stage, verdict)
        run.event("burnin.stage.finished", stage=stage, failed=[v.node for v in failing],
                  waiting=[v.node for v in stage_verdicts if v.waiting])
        if stage == "soak":
            progress.demonstrated = self._acceptance(context, stage_verdicts)

    def _conclude_node(self, context: PhaseContext, progress: _Progress, stage: str, verdict: NodeVerdict) -> None:
        """One node's verdict of one stage: a pass kept in the campaign, a failure quarantined, a node the stage
        could not judge left in burning-in at that stage with the reason it waits."""
        store, run = context.store, context.run
        progress.verdicts[verdict.node] = verdict
        progress.measured.setdefault(verdict.node, {}).update(verdict.figures)
        run.event("burnin.node", node=verdict.node, stage=stage, passed=verdict.passed,
                  check=None if verdict.passed else verdict.check,
                  reason=None if verdict.passed else verdict.reason, waiting=verdict.waiting or None)
        figures = {"figures": verdict.figures, "measured_on": verdict.measured_on} if verdict.figures else {}
        if verdict.passed:
            store.record_pass(progress.campaign, verdict.node, stage, run.id, {"checks": len(verdict.results),
                                                                                **figures})
            progress.passed.setdefault(verdict.node, set()).add(stage)
        elif verdict.waiting:
            progress.waiting[verdict.node] = verdict.reason
            store.transition(verdict.node, NodeState.BURNING_IN, run_id=run.id, stage=stage, reason=verdict.reason)
        else:
            progress.failed.add(verdict.node)
            self._quarantine(context, progress.campaign, stage, verdict, figures)

    @staticmethod
    def _admit(context: PhaseContext, progress: _Progress, nodes: list[ResolvedNode],
               stages: Sequence[str]) -> list[str]:
        """The ``nodes`` that passed every stage of the campaign, admitted; a tray whose NVLink domain is not whole
        only as its domain's policy allows (:func:`held_trays`), else held in burning-in with the reason."""
        store = context.store
        passed = [node.name for node in nodes if node.name not in progress.failed
                  and node.name not in progress.waiting and set(stages) <= progress.passed.get(node.name, set())]
        states = {record.name: record.state.value for record in store.nodes()}
        held = held_trays(context.loaded, states, passed)
        admitted = []
        for name in passed:
            if name in held:
                progress.held[name] = held[name]
                store.transition(name, NodeState.BURNING_IN, run_id=context.run.id, stage="nvlink_domain",
                                 reason=f"nvlink_domain: held with its domain: {held[name]}")
                context.run.event("burnin.domain_held", node=name, reason=held[name])
                continue
            store.transition(name, NodeState.ADMITTED, run_id=context.run.id, stage=None,
                             evidence={"campaign": progress.campaign, "stages": list(stages)})
            admitted.append(name)
        return admitted

    def _conclude(self, context: PhaseContext, progress: _Progress, taken: list[ResolvedNode],
                  skipped: dict[str, str], partners: list[ResolvedNode], admitted: list[str],
                  returned: dict[str, Any], resumed: bool) -> PhaseReport:
        """The campaign's end: its admitted nodes' figures kept in the baseline, the campaign closed, the summary."""
        loaded, store, run = context.loaded, context.store, context.run
        campaign, failed, verdicts = progress.campaign, progress.failed, progress.verdicts
        kept = baselines.keep_campaign(store, loaded, campaign, admitted)
        store.finish_campaign(campaign)
        summary = f"{len(admitted)} admitted"
        if failed:
            summary += f"; {len(failed)} quarantined: " + "; ".join(
                f"{name}: {verdicts[name].reason}" for name in sorted(failed))
        on_domain = {name: why for name, why in progress.waiting.items() if progress.on_rack(name)}
        on_partners = {name: why for name, why in progress.waiting.items() if name not in on_domain}
        if on_partners:
            summary += (f"; {len(on_partners)} not judged, waiting in burning-in for admitted partners "
                        "(the next apply takes them): " + "; ".join(
                            f"{name}: {why}" for name, why in sorted(on_partners.items())))
        if on_domain or progress.held:
            summary += (f"; {len(on_domain) + len(progress.held)} held in burning-in with their NVLink domain, "
                        "none quarantined for it: " + "; ".join(
                            f"{name}: {why}" for name, why in sorted({**on_domain, **progress.held}.items())))
        in_spec = [record for record in store.nodes() if record.in_spec]
        enough = capacity(len(in_spec), sum(1 for record in in_spec if record.state is NodeState.ADMITTED),
                          loaded.spec.admission.spare_fraction)
        summary += f"; {enough.line()}"
        if progress.demonstrated:
            summary += f"; {progress.demonstrated}"
        stories = [history.story(name, found, store, progress.measured.get(name, {}))
                   for name, found in returned.items()]
        if stories:
            summary += "; back from repair: " + ", ".join(f"{entry['node']} {entry['after']}" for entry in stories)
        cables = store.cables_found(run.id)
        if cables:
            summary += (f"; {len(cables)} fabric cable(s) named by the pair tests (no node's fault): "
                        f"{', '.join(cables)} — see `provision topology flaps`")
        return PhaseReport(self.name, summary, {"nodes": [node.name for node in taken],
                                                "admitted": admitted, "quarantined": sorted(failed),
                                                "waiting": dict(sorted(progress.waiting.items())),
                                                "held": dict(sorted(progress.held.items())),
                                                "skipped": skipped, "campaign": campaign, "resumed": resumed,
                                                "fabric_findings": cables, "capacity": enough.as_dict(),
                                                "acceptance": progress.demonstrated, "baseline_samples_kept": kept,
                                                "returned": stories,
                                                "partners": [node.name for node in partners]})

    @staticmethod
    def _acceptance(context: PhaseContext, verdicts: list[NodeVerdict]) -> str:
        """What the soak demonstrated against admission.acceptance's MTBF: every soaked node's hours, no failure
        among them or the count of those that failed."""
        target, settings = context.loaded.spec.admission.acceptance, context.loaded.spec.burnin.soak
        if target is None or settings is None or not verdicts:
            return ""
        node_hours = settings.hours * len(verdicts)
        failures = sum(not verdict.passed for verdict in verdicts)
        line = acceptance.statement(node_hours, failures, target.mtbf_hours)
        context.run.event("burnin.acceptance", node_hours=node_hours, failures=failures,
                          mtbf_hours=target.mtbf_hours, confidence=target.confidence, statement=line)
        return line

    def _entry_points(self, store: StateStore, campaign: str, taken: list[ResolvedNode], stages: Sequence[str],
                      passed: dict[str, set[str]], run_id: str) -> dict[str, int]:
        """Index of the first stage each node runs: quarantined nodes re-enter at the stage they failed, and nodes
        an earlier campaign could not judge (burning-in with the reason they wait) at the stage they wait in."""
        start = {}
        for node in taken:
            record = store.node(node.name)
            start[node.name] = 0
            reentering = record is not None and (record.state is NodeState.QUARANTINED or (
                record.state is NodeState.BURNING_IN and bool(record.reason)))
            if record is not None and reentering and record.stage in stages:
                start[node.name] = stages.index(record.stage)
                carried = {stage for stage in stages[:start[node.name]] if stage != "preflight"}
                for stage in carried - passed.get(node.name, set()):
                    store.record_pass(campaign, node.name, stage, run_id, {"carried": True, "reentered_at":
                                                                           record.stage})
                passed.setdefault(node.name, set()).update(carried)
        return start

    @staticmethod
    def _over_budget(failing: list[NodeVerdict], taken: list[ResolvedNode], budget: float) -> bool:
        """More nodes failed one stage than the burn-in's failure budget allows (and more than one): systemic."""
        return len(failing) > 1 and len(failing) * 100 > budget * len(taken)

    @staticmethod
    def _quarantine(context: PhaseContext, campaign: str, stage: str, verdict: NodeVerdict,
                    figures: dict[str, Any] | None = None) -> None:
        """A node failed ``stage`` on its own measurements: its passes of this campaign forgotten, quarantined."""
        context.store.forget_passes(campaign, verdict.node)
        context.store.transition(verdict.node, NodeState.QUARANTINED, run_id=context.run.id, stage=stage,
                                 reason=verdict.reason, evidence={
                                     "check": verdict.check, "remediation": verdict.remediation,
                                     "results": [result.as_dict() for result in verdict.blockers],
                                     **(figures or {})})

    def _record(self, context: PhaseContext, stage: str, verdicts: list[NodeVerdict]) -> None:
        rows = []
        for verdict in verdicts:
            for result in verdict.results:
                rows.append((verdict.node, f"{stage}.{result.check}", str(result.outcome), result.as_dict()))
        context.store.record_results(context.run.id, f"burnin.{stage}", rows)
        path = context.run.path / f"burnin-{stage}.json"
        path.write_text(json.dumps([verdict.as_dict() for verdict in verdicts], indent=2))
