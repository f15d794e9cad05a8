"""The ``collectives`` stage: every node together, world and per rail; what stopped a launch found by group
testing, wrong sums isolated, slow rails located; a stage that cannot conclude stops as systemic rather than
blame a node on another's measurement."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from provision.burnin import rails, world
from provision.burnin.isolation import Isolation, isolate, lower_bound
from provision.burnin.launch import Launcher, LaunchResult, NodeRun, launch
from provision.burnin.records import (
    FailedEverywhere,
    StageSystemic,
    bus_bandwidth,
    culprits,
    expected_measurements,
    finished,
    keep_logs,
    lost_nodes,
    raised_errors,
    stragglers,
    worker_problems,
    wrong_results,
)
from provision.burnin.verdict import NodeVerdict, judge, waits
from provision.checks.node_stage import judge_nccl_transport, on_gpu
from provision.checks.outcome import CheckResult, Outcome
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from provision.spec.thresholds import stage_limits

Verdict = TypeVar("Verdict")


MAX_ATTEMPTS = 6


def collective_params(loaded: LoadedSpec) -> dict[str, Any]:
    work = loaded.spec.burnin.workload
    return {"ops": list(work.collective_ops), "sizes": list(work.collective_sizes), "warmup": work.warmup,
            "iters": work.iters, "timeout_s": stage_limits(loaded, loaded.nodes[0])["collective_timeout_s"]}


def judge_transport(run: NodeRun, *, gpudirect: bool) -> CheckResult:
    """NCCL's transport on this node (see :func:`provision.checks.node_stage.judge_nccl_transport`)."""
    devices = {str(record.get("device", "")) for record in run.of("result")}
    return judge_nccl_transport(run.output, devices, gpudirect=gpudirect)


class CollectivesUnresolved(StageSystemic):
    """The collectives returned wrong results and group testing confirmed no node as the cause."""


class GroupRounds:
    """Rounds of re-tests on groups of nodes, for the searches that find a culprit the first run cannot name:
    the groups of a round launched at once, each its own world on its own port, each launch's logs kept in
    ``<label>-<n>`` and its result turned into the search's verdict by ``verdict``."""

    def __init__(self, loaded: LoadedSpec, state_dir: Path, nodes: list[ResolvedNode], nproc: int,
                 params: dict[str, Any], *, port: int, evidence_dir: Path, label: str, launcher: Launcher) -> None:
        self.loaded, self.state_dir, self.nproc, self.params = loaded, state_dir, nproc, params
        self.launcher = launcher
        self.by_name = {node.name: node for node in nodes}
        self.port, self.evidence_dir, self.label = port, evidence_dir, label
        self.deadline = max(60.0, 5 * params["timeout_s"])
        self.launched = 0

    def run(self, groups: list[list[str]], verdict: Callable[[LaunchResult], Verdict]) -> list[Verdict]:
        first = self.launched

        def one(index_group: tuple[int, list[str]]) -> Verdict:
            index, group = index_group
            result = self.launcher(self.loaded, self.state_dir, [self.by_name[name] for name in group],
                                   test="collectives",
                            nproc=self.nproc, params=self.params, deadline_s=self.deadline,
                            port=self.port + first + index)
            keep_logs(result, self.evidence_dir / f"{self.label}-{first + index + 1}")
            return verdict(result)

        with ThreadPoolExecutor(max_workers=max(1, len(groups))) as pool:
            verdicts = list(pool.map(one, enumerate(groups)))
        self.launched += len(groups)
        return verdicts


def isolate_wrong_results(loaded: LoadedSpec, state_dir: Path, nodes: list[ResolvedNode], nproc: int, *,
                          port: int, evidence_dir: Path, launcher: Launcher = launch) -> Isolation:
    """Which nodes make the collectives' sums wrong: group testing with the cheapest test that shows it (one
    all_reduce of the smallest size), the groups of a round launched in parallel, each its own world."""
    params = {**collective_params(loaded), "ops": ["all_reduce"],
              "sizes": [min(loaded.spec.burnin.workload.collective_sizes)], "warmup": 0, "iters": 1}
    rounds = GroupRounds(loaded, state_dir, nodes, nproc, params, port=port, evidence_dir=evidence_dir,
                         label="isolation", launcher=launcher)

    def failed(result: LaunchResult) -> bool:
        return bool(wrong_results(result) or not finished(result, params))

    return isolate([node.name for node in nodes], lambda groups: rounds.run(groups, failed), min_group=2)


class WorldSystemic(StageSystemic):
    """The fleet's world collectives far below what its rails carry: nobody's node."""


class RailsSystemic(StageSystemic):
    """Slow rails in every pair of nodes: the fabric's or the configuration's, not any node's."""


def judge_launch_rails(result: LaunchResult, limits: dict[str, float], *,
                       cpu_fraction: float = rails.CPU_PEER_FRACTION) -> dict[int, rails.RailJudgement]:
    """Every rail of one launch, against its peers and, on GPUs, against ``rail_busbw_gbps``. CPU workers share
    cores, so there a rail is called slow only below ``cpu_fraction`` of its peers (:data:`rails.CPU_PEER_FRACTION`
    in the fleet's launch, :data:`rails.CPU_PAIR_FRACTION` in a pair)."""
    gpu = on_gpu([record for run in result.nodes for record in run.of("result")])
    fraction = limits["rail_peer_fraction"] if gpu else min(limits["rail_peer_fraction"], cpu_fraction)
    return rails.judge_rails(bus_bandwidth(result), peer_fraction=fraction,
                             floor_gbps=limits["rail_busbw_gbps"] if gpu else None)


def locate_slow_rails(loaded: LoadedSpec, state_dir: Path, nodes: list[ResolvedNode], nproc: int,
                      slow_rails: list[int], *, port: int, evidence_dir: Path,
                      launcher: Launcher = launch) -> rails.RailAttribution:
    """Which nodes make ``slow_rails`` slow: pairs measured at once, rails only (see :mod:`provision.burnin.rails`)."""
    limits = stage_limits(loaded, nodes[0])
    rounds = GroupRounds(loaded, state_dir, nodes, nproc, {**collective_params(loaded), "scopes": ["rails"]},
                         port=port, evidence_dir=evidence_dir, label="rails", launcher=launcher)

    def judged(result: LaunchResult) -> dict[int, rails.RailJudgement]:
        if not finished(result, rounds.params) or wrong_results(result):
            # a pair that could not measure proves nothing healthy: judged slow on every rail asked about
            return {rail: rails.RailJudgement(rail, None, 0.0, 0, True, "the pair's test did not finish")
                    for rail in slow_rails}
        return judge_launch_rails(result, limits, cpu_fraction=rails.CPU_PAIR_FRACTION)

    return rails.attribute([node.name for node in nodes], slow_rails, lambda groups: rounds.run(groups, judged))


def rail_names(loaded: LoadedSpec, node: ResolvedNode) -> dict[int, str]:
    """GPU index -> its rail's HCA, from the node's hardware profile."""
    return {gpu: hca for hca, gpu in loaded.spec.hardware[node.hardware].rails.items()}


def pairing_lines(attribution: rails.RailAttribution) -> list[str]:
    """One evidence line per pairing round: each group and what was slow in it."""
    return [f"round {round_['round']}: " + "; ".join(
        f"{'+'.join(group['nodes'])} " + (f"slow {group['slow']}" if group["slow"] else "ok")
        for group in round_["groups"]) for round_ in attribution.log]


def judge_slow_rails(loaded: LoadedSpec, state_dir: Path, nodes: list[ResolvedNode], nproc: int,
                     result: LaunchResult, *, port: int, evidence_dir: Path, entry: dict[str, Any],
                     launcher: Launcher = launch) -> dict[str, CheckResult]:
    """Per node, its ``rail_busbw`` result; what was measured goes into the report's ``entry``. A slow rail in the
    fleet's run sends the nodes to pairing; a node slow beside a healthy partner fails, the others pass with their
    figures; slow rails in every pair raise :class:`RailsSystemic`."""
    limits = stage_limits(loaded, nodes[0])
    judged = judge_launch_rails(result, limits)
    fleet = {f"rail{rail}": judgement.reason for rail, judgement in judged.items()}
    found = rails.slow(judged)
    names = rail_names(loaded, nodes[0])
    label = {rail: f"rail {rail} ({names.get(rail, '?')}, GPU {rail})" for rail in judged}
    if not judged:
        entry["rails"] = "not measured (one node or one rank a node)"
        return {}
    checks = {}
    entry["rails"] = fleet
    attribution = None
    if found:
        attribution = locate_slow_rails(loaded, state_dir, nodes, nproc, sorted(found), port=port, launcher=launcher,
                                        evidence_dir=evidence_dir)
        entry["rail_pairing"] = {"slow": sorted(found), "confirmed": {
            host: sorted(bad) for host, bad in attribution.confirmed.items()}, "unconfirmed": attribution.unconfirmed,
            "systemic": attribution.systemic, "launches": attribution.launches, "rounds": attribution.rounds,
            "log": attribution.log}
        if attribution.systemic:
            raise RailsSystemic(
                f"{', '.join(label[rail] for rail in sorted(found))} slow in every pair of nodes measured "
                f"({'; '.join(found[rail].reason for rail in sorted(found))}): a rail slow on every node is the "
                "fabric's or the configuration's (that rail's leaves or spine plane, NCCL or GPUDirect settings), "
                "not a node's, so no node was quarantined for it")
    for node in nodes:
        bad = attribution.confirmed.get(node.name) if attribution else None
        if bad and attribution:
            checks[node.name] = CheckResult(
                "rail_busbw", Outcome.FAILED, f"{' and '.join(label[rail] for rail in sorted(bad))} on {node.name} "
                f"is slow beside a healthy partner: {'; '.join(bad[rail].reason for rail in sorted(bad))}",
                "check that HCA's port counters (symbol and link-recovery errors), reseat or replace its cable and "
                "transceiver, and check the GPU-HCA PCIe path (lspci link status, ACS); then run the pair tests on "
                "that rail", [f"whole fleet: {'; '.join(f'{label[rail]}: {found[rail].reason}' for rail in found)}",
                              *pairing_lines(attribution)])
            continue
        note = [f"{label[rail]}: {judgement.reason}" for rail, judgement in judged.items()]
        if attribution and node.name in attribution.unconfirmed:
            note.insert(0, "in a slow pair at first, fine beside a healthy partner")
        checks[node.name] = CheckResult(
            "rail_busbw", Outcome.OK, f"{len(judged)} rails within {limits['rail_peer_fraction']:g} of each other"
            + (f" ({', '.join(label[rail] for rail in found)} slow on other nodes only)" if found else ""),
            evidence=note)
    return checks


class CollectivesStage:
    """The collectives stage as a few attempts: launch the nodes still in, then act on the one outcome that
    launch had. Each outcome is its own method; those that remove nodes ask for another attempt."""

    def __init__(self, loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, *, port: int,
                 evidence_dir: Path, launcher: Launcher = launch) -> None:
        self.launcher = launcher
        self.loaded, self.nodes, self.state_dir, self.port, self.evidence_dir = (loaded, nodes, state_dir, port,
                                                                                 evidence_dir)
        self.nproc = loaded.spec.burnin.ranks_per_node or loaded.spec.hardware[nodes[0].hardware].gpu.count
        self.limits = stage_limits(loaded, nodes[0])
        self.params = collective_params(loaded)
        self.deadline = max(120.0, 10 * self.params["timeout_s"])
        self.failed: dict[str, list[CheckResult]] = {}
        self.remaining = list(nodes)
        self.finished_runs: dict[str, NodeRun] = {}
        self.suspects: dict[str, float] = {}
        self.report: list[dict[str, Any]] = []
        self.rail_checks: dict[str, CheckResult] = {}
        self.waiting: dict[str, str] = {}  # node -> why the stage could not judge it (see NodeVerdict.waiting)

    def run(self) -> list[NodeVerdict]:
        try:
            for attempt in range(1, MAX_ATTEMPTS + 1):
                if len(self.remaining) < 2:
                    break
                result = self.launcher(self.loaded, self.state_dir, self.remaining, test="collectives",
                                       nproc=self.nproc, params=self.params, deadline_s=self.deadline,
                                       port=self.port + attempt)
                keep_logs(result, self.evidence_dir / f"collectives-attempt{attempt}")
                again = (self._incomplete(result, attempt, raised_errors(result)) or self._lost(result, attempt)
                         or self._incomplete(result, attempt, self._unmeasured(result))
                         or self._wrong(result, attempt) or self._measured(result, attempt))
                if not again:
                    break
        except StageSystemic as stopped:
            stopped.established = [self._failed_verdict(node.name) for node in self.nodes if node.name in self.failed]
            raise
        finally:  # what was measured is kept, also when the stage stops as systemic
            self.evidence_dir.mkdir(parents=True, exist_ok=True)
            (self.evidence_dir / "collectives.json").write_text(json.dumps(self.report, indent=2))
        return self._verdicts()

    def _fail(self, host: str, result: CheckResult) -> None:
        self.failed.setdefault(host, []).append(result)
        self.remaining = [node for node in self.remaining if node.name not in self.failed]

    def _lost(self, result: LaunchResult, attempt: int) -> bool:
        """A rank stopped (the others waited for it) or a node's agent never reported: fail it, run the rest."""
        lost = lost_nodes(result, check="collectives", doing="inside a collective",
                          timeout_s=self.params["timeout_s"], when=f"attempt {attempt}")
        for host, results in lost.items():
            for check in results:
                self._fail(host, check)
        if lost:
            self.report.append({"attempt": attempt, "lost": {host: [check.message for check in results]
                                                             for host, results in lost.items()}})
        return bool(lost)

    def _unmeasured(self, result: LaunchResult) -> dict[str, list[str]]:
        return worker_problems(result, expected_measurements(self.params, len(self.remaining), self.nproc))

    def _incomplete(self, result: LaunchResult, attempt: int, problems: dict[str, list[str]]) -> bool:
        """Workers that raised, errored, exited without a result or measured less than asked: a node passes only on
        its own measurements. The nodes with a problem of their own fail and the rest run again (see
        :func:`culprits`; every node at once stops the stage as systemic)."""
        if not problems:
            return False
        self.report.append({"attempt": attempt, "incomplete": problems})
        causes = culprits(problems, len(self.remaining), stage="collectives", when=f"attempt {attempt}")
        self.report[-1]["culprits"] = sorted(causes)
        for host, lines in causes.items():
            self._fail(host, CheckResult(
                "collectives", Outcome.FAILED, f"its workers did not finish the collectives: {lines[0]}",
                "read the worker's error and stack dump in the run directory (NCCL_DEBUG=INFO shows init "
                "failures); check the node's HCAs, nvidia-peermem and its NCCL environment", lines[:8]))
        return True

    def _wrong(self, result: LaunchResult, attempt: int) -> bool:
        """Everyone's sum is wrong, so the output names nobody: find the cause by group testing."""
        wrong = wrong_results(result)
        if not wrong:
            return False
        isolation = isolate_wrong_results(self.loaded, self.state_dir, self.remaining, self.nproc,
                                          port=self.port + 100 * attempt, launcher=self.launcher,
                                          evidence_dir=self.evidence_dir / f"collectives-attempt{attempt}")
        bound = lower_bound(len(self.remaining), max(1, len(isolation.confirmed)))
        self.report.append({"attempt": attempt, "wrong": wrong, "isolation": {
            "confirmed": isolation.confirmed, "unconfirmed": isolation.unconfirmed,
            "launches": isolation.launches, "rounds": isolation.rounds, "bound": round(bound, 2),
            "log": isolation.log, "unresolved": isolation.unresolved, "untestable": isolation.untestable}})
        if not isolation.confirmed and len(self.remaining) == 2 and not isolation.known_good:
            # two nodes whose wrong sums group testing cannot split: neither has a healthy partner to be tested
            # beside, so neither is judged (nor the burn-in stopped for two nodes): both wait for admitted partners
            for node in self.remaining:
                self.waiting[node.name] = (
                    f"wrong all_reduce sums in a group of two that group testing could not split ({isolation.launches}"
                    f" launches; passed alone: {', '.join(isolation.untestable) or 'none'}): no healthy partner "
                    "to test each beside")
            self.remaining = []
            return True  # handled: nobody is left to launch
        if not isolation.confirmed:
            raise CollectivesUnresolved(
                f"collectives returned wrong results ({', '.join(wrong[:3])}) but group testing confirmed no "
                f"node in {isolation.launches} launches (unconfirmed: {isolation.unconfirmed or 'none'}; passed "
                f"only alone, with no healthy partner to test beside: {isolation.untestable or 'none'}): "
                "no node was quarantined for it")
        for host in isolation.confirmed:
            self._fail(host, CheckResult(
                "correctness", Outcome.FAILED, f"every group holding {host} gets wrong all_reduce sums, "
                f"confirmed beside a healthy partner (group testing: {isolation.launches} launches in "
                f"{isolation.rounds} rounds, bound d·log2(n/d) = {bound:.1f})",
                "run dcgmi diag -r 3 and the HCA's self-test; reseat or RMA the GPU or HCA on the data path",
                [f"first run: wrong {', '.join(wrong[:4])}",
                 *[f"round {entry['round']}: " + "; ".join(
                     f"{'+'.join(group['nodes'] + group['padding'])} {'FAILED' if group['failed'] else 'ok'}"
                     for group in entry["groups"]) for entry in isolation.log]]))
        return True  # the rest measured again, without the culprits

    def _measured(self, result: LaunchResult, attempt: int) -> bool:
        """Everyone measured everything: stragglers against the fleet (repeated before anyone fails), then
        the rails."""
        found = stragglers(result, self.limits["outlier_mad"])
        self.finished_runs = {run.node: run for run in result.nodes}
        self.report.append({"attempt": attempt, "busbw": bus_bandwidth(result), "stragglers": found,
                            "nccl_env": {run.node: (run.agent or {}).get("nccl_env") for run in result.nodes}})
        confirmed = {host: score for host, score in found.items() if host in self.suspects}
        if found and not confirmed and attempt < MAX_ATTEMPTS and not self.suspects:
            self.suspects = found  # judged against the fleet, then repeated before anyone is failed
            # the repeat gives node rank 0, whose host serves the rendezvous store, to a host not under suspicion:
            # a role must not pass for a slow host (seen on a loaded 2-core CI machine: rank 0's host a straggler
            # twice in a row at robust z 7.7)
            self.remaining = sorted(self.remaining, key=lambda node: node.name in found)
            return True
        for host, score in confirmed.items():
            self._fail(host, CheckResult(
                "outliers", Outcome.FAILED, f"a rank on {host} is a straggler in collectives twice in a row "
                f"(robust z {score:g} > {self.limits['outlier_mad']:g})", "check that GPU's clocks and its HCA; "
                "run the pair tests on its rail", [f"first run z {self.suspects[host]:g}, repeat z {score:g}"]))
        if confirmed and attempt < MAX_ATTEMPTS:  # a straggler slows its rail too: judge the rails without it
            self.suspects = {}
            return True
        if not confirmed:
            self._judge_world(result)
        if not confirmed and len(self.remaining) >= 2:
            self.rail_checks = judge_slow_rails(self.loaded, self.state_dir, self.remaining, self.nproc, result,
                                                port=self.port + 100 * (MAX_ATTEMPTS + 1), entry=self.report[-1],
                                                launcher=self.launcher,
                                                evidence_dir=self.evidence_dir / f"collectives-attempt{attempt}")
            for host, check in list(self.rail_checks.items()):
                if check.outcome is Outcome.FAILED:
                    self._fail(host, self.rail_checks.pop(host))
        return False

    def _judge_world(self, result: LaunchResult) -> None:
        """The fleet against its design (see :mod:`provision.burnin.world`): far below it stops the stage."""
        gpu = on_gpu([record for run in result.nodes for record in run.of("result")])
        judged = world.judge_world(self.report[-1]["busbw"], floor_gbps=self.limits["world_busbw_gbps"] if gpu
                                   else None)
        self.report[-1]["world"] = judged.reason
        if judged.slow:
            raise WorldSystemic(
                f"the whole fleet is slow in its collectives: {judged.reason}. Every node alike is the fabric's or "
                "the configuration's (a spine plane, NCCL on sockets, GPUDirect off, NCCL_IB_HCA), not a node's, "
                "so no node was quarantined for it")

    def _failed_verdict(self, host: str) -> NodeVerdict:
        return judge(self.loaded.spec.admission, host, "collectives", self.failed[host])

    def _verdicts(self) -> list[NodeVerdict]:
        finished = self.report[-1] if self.report else {}
        gpudirect = self.loaded.spec.host.gpudirect != "off"
        admission = self.loaded.spec.admission
        verdicts = []
        for node in self.nodes:
            if node.name in self.failed:
                verdicts.append(self._failed_verdict(node.name))
            elif "busbw" in finished and node.name in self.finished_runs:
                verdicts.append(judge(admission, node.name, "collectives", [CheckResult(
                    "collectives", Outcome.OK, f"{len(finished['busbw'])} measurements correct on "
                    f"{len(self.remaining)} nodes; no straggler"),
                    *([self.rail_checks[node.name]] if node.name in self.rail_checks else []),
                    judge_transport(self.finished_runs[node.name], gpudirect=gpudirect)]))
                # the world's busbw per (op, size) of the launch the node took part in: its baseline's figures
                gpu = on_gpu(self.finished_runs[node.name].of("result"))
                verdicts[-1].measured_on = "gpu" if gpu else "cpu"
                verdicts[-1].figures = {f"busbw_gbps.{row['op']}.{row['bytes']}": [("world", row["busbw_gbps"])]
                                        for row in finished["busbw"] if row["scope"] == "all"}
            elif node.name in self.waiting:
                verdicts.append(waits(node.name, "collectives", self.waiting[node.name]))
            elif len(self.remaining) < 2 and node in self.remaining:
                # alone once the nodes that stopped the launch were removed: nobody to measure it beside
                verdicts.append(waits(node.name, "collectives", "the only node left once the nodes that stopped "
                                      "the collectives were removed: nobody to measure it beside"))
            else:
                verdicts.append(judge(admission, node.name, "collectives", [CheckResult(
                    "collectives", Outcome.UNKNOWN, "the collectives never completed after removing the nodes that "
                    "stopped them", "re-run the burn-in")]))
        return verdicts


def run_collectives_stage(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, *, port: int,
                          evidence_dir: Path, launcher: Launcher = launch) -> list[NodeVerdict]:
    """Every node together: the fleet's busbw per (scope, op, size), its sums checked, stragglers and slow rails
    named, and whoever stopped, errored or measured nothing removed before the rest are judged."""
    return CollectivesStage(loaded, nodes, state_dir, port=port, evidence_dir=evidence_dir, launcher=launcher).run()


#: What stops the collectives stage as systemic: no node is quarantined for any of these.
SYSTEMIC = (CollectivesUnresolved, RailsSystemic, FailedEverywhere, WorldSystemic)
