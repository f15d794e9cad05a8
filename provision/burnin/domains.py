"""The ``nvlink_domain`` stage: each GB200/GB300 NVLink domain's trays together, one world over the rack's NVLink
(MNNVL), before the world over InfiniBand (issue 53, item 4).

A domain is measured as NCCL runs it for a job placed inside it: every rank of its trays in one all_reduce. What
stops the launch, a wrong sum or a straggler is a tray's own (the collectives stage's machinery, on the domain's
trays alone); what each tray's NCCL said of its GPUs (fabric state, clique, health mask, MNNVL) is that tray's;
the domain's busbw, NVLS on or off and MNNVL off everywhere are the domain's, and no tray is quarantined for them:
a degraded switch tray slows the whole domain alike. Its trays then wait in burning-in, named with the domain's
finding, for the operator (the switch trays are NVIDIA's NMX to read, not a node's to repair).

Domains are measured one after another, so on CPU workers (the simulator) one domain's figure can be held against
the others' measured under the same load; GPUs are judged against the published figure of the domain's size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.burnin.collectives import CollectivesStage, collective_params
from provision.burnin.launch import Launcher, launch
from provision.burnin.records import StageSystemic
from provision.burnin.verdict import NodeVerdict, judge, waits
from provision.checks.domain_collectives import DomainJudgement, judge_domain_collectives
from provision.checks.node_stage import on_gpu
from provision.checks.outcome import CheckResult, Outcome
from provision.facts.nccl_debug import NcclDomain, parse_nccl_domain
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from provision.spec.thresholds import stage_limits
from topology.hostlist import expand

STAGE = "nvlink_domain"
#: CPU workers share this machine's cores: a domain is slow only below this share of the best other domain
#: measured beside it (the simulator's degraded switch tray runs at 0.2; healthy domains measured within 0.6).
CPU_DOMAIN_FRACTION = 0.4


class DomainCollectives(CollectivesStage):
    """The collectives stage's attempts over one domain's trays: the world scope only (no IB rail is in an NVLink
    domain's path), and no judgement against the IB fabric's design (the domain's figure is judged by the stage)."""

    def _judge_world(self, result: Any) -> None:
        self.report[-1]["world"] = "judged against the domain's figure by the nvlink_domain stage"


@dataclass
class DomainRun:
    name: str
    trays: list[ResolvedNode]
    verdicts: list[NodeVerdict] = field(default_factory=list)
    busbw: dict[int, float] = field(default_factory=dict)
    said: dict[str, NcclDomain | None] = field(default_factory=dict)
    gpu: bool = False
    stopped: str = ""  # the collectives' own stop (a systemic finding inside the domain)


def domain_params(loaded: LoadedSpec, domain: str) -> dict[str, Any]:
    """The all_reduce at the spec's sizes, the world scope only; ``nvlink_domain`` names the domain the world is
    (recorded in the workers' log, and what NCCL's MNNVL would make of it)."""
    return {**collective_params(loaded), "ops": ["all_reduce"], "scopes": ["all"], "nvlink_domain": domain}


def _measure(loaded: LoadedSpec, name: str, trays: list[ResolvedNode], state_dir: Path, *, port: int,
             evidence_dir: Path, launcher: Launcher) -> DomainRun:
    run = DomainRun(name, trays)
    stage = DomainCollectives(loaded, trays, state_dir, port=port, evidence_dir=evidence_dir / name,
                              launcher=launcher)
    stage.params = domain_params(loaded, name)
    try:
        run.verdicts = stage.run()
    except StageSystemic as stopped:
        run.stopped = str(stopped)
        failed = {verdict.node for verdict in stopped.established}
        run.verdicts = [*stopped.established, *(waits(node.name, STAGE, f"domain {name}: {stopped}")
                                                 for node in trays if node.name not in failed)]
    for verdict in run.verdicts:
        verdict.stage = STAGE
    finished = stage.report[-1] if stage.report else {}
    run.busbw = {int(row["bytes"]): float(row["busbw_gbps"]) for row in finished.get("busbw", [])
                 if row["scope"] == "all" and row["op"] == "all_reduce"}
    runs = stage.finished_runs
    run.gpu = on_gpu([record for node_run in runs.values() for record in node_run.of("result")])
    # what NCCL said on each tray's ranks; None: nothing came back from it
    run.said = {node.name: parse_nccl_domain(runs[node.name].output) if node.name in runs and runs[node.name].command
                else None for node in trays}
    return run


def _concluded(loaded: LoadedSpec, run: DomainRun, judged: DomainJudgement | None) -> list[NodeVerdict]:
    """Each tray's verdict: its own failures stand; the domain's finding makes the rest wait; else each passes with
    its own NCCL finding beside the collectives'."""
    if judged is None:
        return run.verdicts
    verdicts = []
    for verdict in run.verdicts:
        if not verdict.passed:
            verdicts.append(verdict)
            continue
        own = judged.trays.get(verdict.node)
        results = [*verdict.results, *([own] if own else []), CheckResult(
            "domain_busbw", Outcome.OK if not judged.slow else Outcome.UNKNOWN,
            f"domain {run.name}: {judged.reason}; {judged.algorithm}")]
        if own is not None and own.outcome is not Outcome.OK and own.outcome is not Outcome.SILENCED:
            tray = judge(loaded.spec.admission, verdict.node, STAGE, results)
            if tray.failed:
                verdicts.append(tray)
                continue
        if judged.slow:
            verdicts.append(waits(verdict.node, STAGE, f"its NVLink domain is slow with no tray to blame: "
                                  f"{judged.slow} (a switch tray or the rack's NVLink cabling: read the NMX)"))
            continue
        verdicts.append(judge(loaded.spec.admission, verdict.node, STAGE, results))
        verdicts[-1].figures = {f"domain_busbw_gbps.all_reduce.{size}": [(run.name, value)]
                                for size, value in run.busbw.items()}
        verdicts[-1].measured_on = "gpu" if run.gpu else "cpu"
    return verdicts


#: How far apart two domains' largest messages may be and their busbw still be compared: each domain's sizes are
#: rounded down to a multiple of its ranks (65,520 B over 15 ranks, 65,536 over 16), not the same bytes.
COMPARABLE_SIZES = 0.9


def _comparable(size: int, other: int) -> bool:
    return min(size, other) >= COMPARABLE_SIZES * max(size, other)


def run_domain_stage(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, *, port: int,
                     evidence_dir: Path, launcher: Launcher = launch) -> list[NodeVerdict]:
    """Every NVLink domain among ``nodes``, one after another; an HGX node is its own NVLink domain (the node
    stage measured it) and a tray alone in this burn-in has nobody of its domain to be measured beside: it waits."""
    by_name = {node.name: node for node in nodes}
    verdicts: list[NodeVerdict] = []
    placed: set[str] = set()
    runs: list[DomainRun] = []
    for index, domain in enumerate(loaded.spec.nvlink_domains):
        trays = [by_name[name] for name in expand(domain.hosts) if name in by_name]
        placed.update(node.name for node in trays)
        if len(trays) == 1:
            verdicts.append(waits(trays[0].name, STAGE, f"the only tray of domain {domain.name} in this burn-in: "
                                  "nobody of its domain to measure it beside"))
        elif trays:
            runs.append(_measure(loaded, domain.name, trays, state_dir, port=port + 10 * index,
                                 evidence_dir=evidence_dir, launcher=launcher))
    for node in nodes:
        if node.name not in placed:
            verdicts.append(judge(loaded.spec.admission, node.name, STAGE, [CheckResult(
                STAGE, Outcome.SILENCED, "an HGX node is its own NVLink domain: the node stage measured it")]))
    report = []
    for run in runs:
        judged = None
        if not run.stopped and run.busbw:
            first = run.trays[0]
            limits = stage_limits(loaded, first)
            peers = [max(other.busbw.items())[1] for other in runs if other is not run and other.busbw
                     and _comparable(max(other.busbw), max(run.busbw)) and not other.stopped]
            judged = judge_domain_collectives(
                run.name, run.busbw, run.said, model=loaded.spec.hardware[first.hardware].gpu.model,
                gpus=len(run.trays) * (loaded.spec.burnin.ranks_per_node
                                       or loaded.spec.hardware[first.hardware].gpu.count),
                on_gpu=run.gpu, fraction=limits["domain_busbw_fraction"], peers_gbps=peers,
                peer_fraction=CPU_DOMAIN_FRACTION)
        verdicts.extend(_concluded(loaded, run, judged))
        report.append({"domain": run.name, "trays": [node.name for node in run.trays],
                       "busbw": {str(size): value for size, value in sorted(run.busbw.items())},
                       "on_gpu": run.gpu, "stopped": run.stopped,
                       "algorithm": judged.algorithm if judged else "", "reason": judged.reason if judged else "",
                       "slow": judged.slow if judged else ""})
    evidence_dir.mkdir(parents=True, exist_ok=True)
    (evidence_dir / "nvlink-domains.json").write_text(json.dumps(report, indent=2))
    return verdicts
