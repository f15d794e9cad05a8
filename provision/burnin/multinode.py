"""The torch stages: ``node`` (each node alone, one worker per GPU) and ``collectives`` (all nodes together).

Each stage launches the workers, reads back what every rank said, and judges per node. Absolute figures
(TFLOPS, GB/s) are judged only on a GPU, against thresholds derived from the GPU model; on the CPU backend (CI,
the simulated cluster) they are recorded and the judgement rests on the comparisons that hold on any device:
a GPU against its node-mates, a rank against the fleet, a result against the known answer.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from provision.burnin import rails, world
from provision.burnin.isolation import Isolation, isolate, lower_bound
from provision.burnin.launch import Launcher, LaunchResult, NodeRun, launch
from provision.burnin.verdict import NodeVerdict, judge, waits
from provision.checks import baseline
from provision.checks.node_stage import judge_nccl_transport, judge_node_records, on_gpu
from provision.checks.outcome import CheckResult, Outcome
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from provision.spec.thresholds import stage_limits

NODE_DEADLINE_S = 300.0
Verdict = TypeVar("Verdict")


def unfinished_workers(run: NodeRun, expected: int) -> list[str]:
    """Why some of this node's workers gave no result (connection, killed, exited without a word, error), one
    line each, the likeliest cause first: a worker that stopped or vanished, then errors of its own, then the
    errors that are only the :data:`CONSEQUENCE` of another's (its peers timing out)."""
    if run.connect_error:
        return [f"cannot reach the node: {run.connect_error}"]
    reported = {record["local_rank"] for record in run.of("result")}
    errored = {record["local_rank"] for record in run.of("error")}
    problems = []
    killed: set[int] = set()
    agent = run.agent
    if agent is None:
        problems.append(f"the test agent did not report ({run.command.problem() if run.command else 'not run'})")
    else:
        for local, outcome in agent["workers"].items():
            if outcome["killed"]:
                killed.add(int(local))
                problems.append(f"GPU {local}: stopped making progress and was killed at the deadline")
    silent = [local for local in range(expected) if local not in reported | errored | killed]
    if silent and agent is not None:
        problems.append(f"GPUs {silent} gave no result")
    errors = [f"GPU {record['local_rank']}: {record['error']}" for record in run.of("error")]
    problems += sorted(errors, key=lambda line: bool(CONSEQUENCE.search(line)))
    return problems


# -- node stage -------------------------------------------------------------------------------------------


def node_params(loaded: LoadedSpec, seed: int) -> dict[str, Any]:
    work = loaded.spec.burnin.workload
    return {"matmul_n": work.matmul_n, "matmul_iters": work.matmul_iters, "repeats": work.repeats,
            "memory_bytes": work.memory_bytes, "allreduce_bytes": work.allreduce_bytes,
            "allreduce_iters": work.iters, "seed": seed,
            "timeout_s": stage_limits(loaded, loaded.nodes[0])["collective_timeout_s"]}


def judge_node(run: NodeRun, gpus: int, limits: dict[str, float]) -> list[CheckResult]:
    problems = unfinished_workers(run, gpus)
    if problems:
        return [CheckResult("node_test", Outcome.FAILED, problems[0], "look at the worker's stack dump in the run "
                            "directory; reset the GPU, reboot if it repeats", problems)]
    return judge_node_records(run.of("result"), gpus, limits)


#: The baseline check of one node: its node, its figures and whether they were measured on GPUs.
AgainstBaseline = Callable[[ResolvedNode, baseline.NodeFigures, bool], CheckResult]


def _node_batches(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, *, seed: int,
                  evidence_dir: Path, batch: int, launcher: Launcher, hold_s: float = 0.0,
                  against: AgainstBaseline | None = None,
                  figures: dict[str, tuple[str, baseline.NodeFigures]] | None = None) -> dict[str, list[CheckResult]]:
    """Each node's checks; ``figures`` gets each node's figures and the device they were measured on ("gpu" or
    "cpu"), where its workers ran on what they were meant to (a CPU's figures of a GPU node are nobody's baseline);
    ``against`` judges them as one more check."""
    checks = {}
    records: list[dict[str, Any]] = []
    by_count: dict[int, list[ResolvedNode]] = {}
    for node in nodes:  # one launch starts the same number of workers on every node it takes
        by_count.setdefault(loaded.spec.hardware[node.hardware].gpu.count, []).append(node)
    for gpus, alike in by_count.items():
        for start in range(0, len(alike), batch):
            chunk = alike[start:start + batch]
            params = {**node_params(loaded, seed), **({"hold_s": hold_s} if hold_s > 0 else {})}
            result = launcher(loaded, state_dir, chunk, test="node", nproc=gpus, params=params,
                              deadline_s=NODE_DEADLINE_S + hold_s, separate=True)
            keep_logs(result, evidence_dir)
            for node, run in zip(chunk, result.nodes, strict=True):
                checks[node.name] = judge_node(run, gpus, stage_limits(loaded, node))
                measured = checks[node.name][0].check == "gpu_runtime" and len(checks[node.name]) > 1
                found = baseline.node_figures(run.of("result")) if measured else {}
                gpu = on_gpu(run.of("result"))
                if figures is not None and found:
                    figures[node.name] = ("gpu" if gpu else "cpu", found)
                if against is not None and found:
                    checks[node.name].append(against(node, found, gpu))
                records += [{"node": node.name, **{key: value for key, value in record.items() if key != "type"}}
                            for record in sorted(run.of("result"), key=lambda record: record["local_rank"])]
    # per rank: device, matmul dtype, shapes swept and best, TF32, TFLOPS, copy GB/s, all_reduce busbw
    evidence_dir.mkdir(parents=True, exist_ok=True)
    (evidence_dir / "node.json").write_text(json.dumps(records, indent=1, default=str))
    return checks


def run_node_stage(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, *, seed: int,
                   evidence_dir: Path, launcher: Launcher = launch, hold_s: float = 0.0,
                   batch: int | None = None, against: AgainstBaseline | None = None) -> list[NodeVerdict]:
    """All nodes, ``connection.forks`` at a time (or ``batch``); a node that is slow on matmul, or whose test did not
    finish (workers that never met at rendezvous, or stopped), is run again, alone, before it fails: a slow or hung
    GPU is so every time, a busy machine is not. ``hold_s``: each GPU is kept under matmul that long (a soak's
    round, every node at once; the repeat does not hold). ``against``: the fleet's baseline check, confirmed alone
    like matmul; each verdict carries the figures it was judged on."""
    figures: dict[str, tuple[str, baseline.NodeFigures]] = {}
    checks = _node_batches(loaded, nodes, state_dir, seed=seed, evidence_dir=evidence_dir,
                           batch=max(1, batch or loaded.spec.connection.forks), launcher=launcher, hold_s=hold_s,
                           against=against, figures=figures)
    confirm = {"matmul", "node_test", "baseline"}
    again_nodes = [node for node in nodes if (failed := {result.check for result in checks[node.name]
                                                         if result.outcome is Outcome.FAILED}) and failed <= confirm]
    if again_nodes:
        for node in again_nodes:  # the repeat's figures stand for the node, or none do
            figures.pop(node.name, None)
        again = _node_batches(loaded, again_nodes, state_dir, seed=seed, evidence_dir=evidence_dir / "repeat",
                              batch=1, launcher=launcher, against=against, figures=figures)
        for node in again_nodes:
            first = next(result for result in checks[node.name] if result.outcome is Outcome.FAILED)
            second = next((result for result in again[node.name] if result.check == first.check), None)
            checks[node.name] = again[node.name]  # the repeat's result is the verdict, whatever it says
            if not any(result.outcome is Outcome.FAILED for result in again[node.name]):
                passed = second or again[node.name][0]
                passed.evidence = [f"first run: {first.message}; not confirmed alone", *passed.evidence]
            elif second is not None and second.outcome is Outcome.FAILED:
                second.message += " (confirmed on a repeat)"
    verdicts = [judge(loaded.spec.admission, node.name, "node", checks[node.name]) for node in nodes]
    for verdict in verdicts:
        device, found = figures.get(verdict.node, ("", {}))
        verdict.measured_on, verdict.figures = device, {name: list(items) for name, items in found.items()}
    return verdicts


def keep_logs(result: LaunchResult, directory: Path) -> None:
    """Each node's agent stderr (stack dumps live there) beside the run's other evidence."""
    directory.mkdir(parents=True, exist_ok=True)
    for run in result.nodes:
        if run.command and run.command.stderr.strip():
            (directory / f"{result.test}-{run.node}.stderr").write_text(run.command.stderr)


# -- collectives stage ------------------------------------------------------------------------------------

#: nccl-tests' bus-bandwidth factors (doc/PERFORMANCE.md), with n the group size.
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}
MAX_ATTEMPTS = 6


def collective_params(loaded: LoadedSpec) -> dict[str, Any]:
    work = loaded.spec.burnin.workload
    return {"ops": list(work.collective_ops), "sizes": list(work.collective_sizes), "warmup": work.warmup,
            "iters": work.iters, "timeout_s": stage_limits(loaded, loaded.nodes[0])["collective_timeout_s"]}


def stopped_ranks(result: LaunchResult) -> dict[int, str]:
    """Ranks that stopped making progress: killed at the deadline, or behind everyone in posted calls.

    In a collective every member posts the same calls in the same order, so a rank whose last posted call is
    behind the others' is the one they are all waiting for; the ones that time out are its victims."""
    last: dict[int, int] = dict.fromkeys(result.ranks(), 0)
    killed: set[int] = set()
    for run in result.nodes:
        for record in run.of("posted"):
            last[record["rank"]] = max(last[record["rank"]], record["seq"])
        agent = run.agent
        for local, outcome in (agent or {}).get("workers", {}).items():
            if outcome["killed"]:
                killed.add(run.node_rank * result.nproc + int(local))
    hosts = result.ranks()
    behind = {rank for rank, seq in last.items() if seq < max(last.values())} if last else set()
    chosen = (behind & killed) or behind or killed
    return {rank: hosts[rank] for rank in sorted(chosen)}


def vanished_ranks(result: LaunchResult) -> dict[int, tuple[str, int]]:
    """Ranks whose process ended on its own (not killed by the agent) with neither a result nor an error: gone
    without a word, whatever its exit status said. The rest of the world then waits for it, errs, or is killed at
    the deadline; those are its victims, however far behind in posted calls they stopped."""
    gone: dict[int, tuple[str, int]] = {}
    for run in result.nodes:
        said = {record["local_rank"] for record in (*run.of("result"), *run.of("error"))}
        for local, outcome in ((run.agent or {}).get("workers") or {}).items():
            if not outcome["killed"] and int(local) not in said:
                gone[run.node_rank * result.nproc + int(local)] = (run.node, int(outcome.get("exit", 0)))
    return gone


def lost_nodes(result: LaunchResult, *, check: str, doing: str, timeout_s: float,
               when: str) -> dict[str, list[CheckResult]]:
    """The nodes a multi-node launch lost, and why: a rank that exited without a word (:func:`vanished_ranks`), else
    one that stopped (named by :func:`stopped_ranks`; the others waited for it until the timeout), or a node where
    the test could not run at all. Empty when all finished."""
    lost: dict[str, list[CheckResult]] = {}
    # a node whose connection dropped under its agent (on every attempt) said nothing we could read: its ranks'
    # silence is ours, not a rank that stopped or vanished
    ours = {run.node for run in result.nodes if run.unfinished and run.connection_lost}
    vanished = {rank: found for rank, found in vanished_ranks(result).items() if found[0] not in ours}
    said: dict[str, list[str]] = {}
    for rank, (host, status) in vanished.items():
        said.setdefault(host, []).append(f"rank {rank} ({host}, GPU {rank % result.nproc}) exited (status {status}) "
                                         f"{doing} and gave no result or error")
    for host in culprits(said, len(result.nodes), stage=check, when=when):  # all of them: FailedEverywhere
        lost[host] = [CheckResult(check, Outcome.FAILED, said[host][0], "read its stack dump and the kernel log (an "
                                  "OOM kill, a crash in the driver or in NCCL)",
                                  [*said[host], f"{when}: ranks gone without a word: {sorted(vanished)}"])]
    stopped = {} if vanished else {rank: host for rank, host in stopped_ranks(result).items() if host not in ours}
    for rank, host in stopped.items():
        lost.setdefault(host, []).append(CheckResult(
            "watchdog", Outcome.FAILED, f"rank {rank} ({host}, GPU {rank % result.nproc}) stopped {doing}; the "
            f"others waited for it until the {timeout_s:g} s timeout",
            "look at its stack dump and the kernel log; correlate with UFM link-down events",
            [f"{when}: ranks behind or killed: {sorted(stopped)}"]))
    for run in result.nodes:
        if run.node in ours:  # tried again already: still ours
            assert run.command is not None
            lost.setdefault(run.node, []).append(CheckResult(
                check, Outcome.UNKNOWN, f"the test could not be judged on {run.node}: {run.command.problem()}, "
                "on every attempt", "check the controller's network path to the node (bastion, jump host) and "
                "re-run the burn-in", run.stderr_tail(10)))
        elif run.unfinished:
            lost.setdefault(run.node, []).append(CheckResult(
                check, Outcome.FAILED, f"the test could not run on {run.node}: "
                f"{run.connect_error or (run.command.problem() if run.command else 'no report')}",
                "check that the node is reachable and its Python has torch", run.stderr_tail(10)))
    return lost


def bus_bandwidth(result: LaunchResult) -> list[dict[str, Any]]:
    """Per (scope, op, size): time averaged over the ranks that measured it, algbw and busbw as nccl-tests."""
    grouped: dict[tuple[str, str, int, int], list[float]] = {}
    for run in result.nodes:
        for record in run.of("measurement"):
            key = (record["scope"], record["op"], record["bytes"], record["ranks"])
            grouped.setdefault(key, []).append(record["time_us"])
    rows = []
    for (scope, op, nbytes, ranks), times in sorted(grouped.items()):
        seconds = statistics.fmean(times) / 1e6
        algbw = nbytes / seconds / 1e9
        rows.append({"scope": scope, "op": op, "bytes": nbytes, "ranks": ranks, "time_us": round(seconds * 1e6, 3),
                     "algbw_gbps": float(f"{algbw:.6g}"),
                     "busbw_gbps": float(f"{algbw * BUS_FACTOR[op](ranks):.6g}")})
    return rows


#: The least spread a straggler is measured against, as a fraction of the fleet's median time outside collectives.
#: GPUs keep to their pace within a few percent. CPU workers (a CPU build, the simulator, CI) share the machine's
#: cores with everything else on it: healthy ranks were recorded at 2.4x and 3.6x the median (tests/data/launches:
#: rank 0's host serving the rendezvous store, a 4-rank launch), and healthy hosts quarantined twice in a row at
#: robust z 7.8 and 10.9 (2.95x and 3.7x the median) with a floor of 0.25 (issue 55). At 1.0 a CPU straggler must
#: spend over 6x the median outside collectives; the simulator's rank_slow (factor 0.2) was recorded at 69x and 74x.
SPREAD_FLOOR = {"gpu": 0.05, "cpu": 1.0}


def stragglers(result: LaunchResult, limit_mad: float) -> dict[str, float]:
    """Hosts with a rank that spends far more time outside collectives than the fleet (robust z-score)."""
    records = [record for run in result.nodes for record in run.of("result")]
    outside = {record["rank"]: record["outside_s"] for record in records}
    if len(outside) < 3 or len(result.nodes) < 3:  # with two hosts there is no fleet to be an outlier against
        return {}
    values = list(outside.values())
    median = statistics.median(values)
    spread = 1.4826 * statistics.median(abs(value - median) for value in values)
    spread = max(spread, SPREAD_FLOOR["gpu" if on_gpu(records) else "cpu"] * median, 1e-3)
    hosts = result.ranks()
    found: dict[str, float] = {}
    for rank, value in outside.items():
        score = (value - median) / spread
        if score > limit_mad:
            found[hosts[rank]] = max(found.get(hosts[rank], 0.0), round(score, 1))
    return found


def judge_transport(run: NodeRun, *, gpudirect: bool) -> CheckResult:
    """NCCL's transport on this node (see :func:`provision.checks.node_stage.judge_nccl_transport`)."""
    devices = {str(record.get("device", "")) for record in run.of("result")}
    text = (run.command.stdout + "\n" + run.command.stderr) if run.command else ""
    return judge_nccl_transport(text, devices, gpudirect=gpudirect)


def wrong_results(result: LaunchResult) -> list[str]:
    return sorted({f"{record['scope']}/{record['op']}/{record['bytes']}B" for run in result.nodes
                   for record in run.of("measurement") if not record["correct"]})


def finished(result: LaunchResult, params: dict[str, Any]) -> bool:
    """Every rank of a collectives launch ran to the end and measured all it was asked to."""
    return not (stopped_ranks(result) or any(run.unfinished for run in result.nodes) or worker_problems(
        result, expected_measurements(params, len(result.nodes), result.nproc)))


class StageSystemic(RuntimeError):
    """A multi-node stage stopped as systemic: the cause is not a node, and nobody is quarantined for *it*.
    ``established``: the verdicts of the nodes the stage had already failed on their own measurements in an earlier
    attempt (a rank named behind everyone, a corrupting node confirmed beside a healthy partner), which the later
    stop does not undo; set by the stage as the stop passes through it."""

    established: list[NodeVerdict]

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.established = []


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


#: What a rank prints when it failed because another one did (a peer gone, the rendezvous or a collective timed
#: out, NCCL's watchdog aborting the communicator): the consequence of someone's fault, not a fault of its own.
CONSEQUENCE = re.compile(r"time[ds]? ?out|timeout|connection (?:closed|reset|refused)|broken pipe|by peer|"
                         r"remote process exited|communicator was aborted|watchdog|DistStoreError|"
                         # torch's store client when the other end went away: "Failed to recv, got 0 bytes.
                         # Connection was likely closed. Did the remote server shutdown or crash?"
                         r"connection was likely closed|remote server shutdown",
                         re.IGNORECASE)


def expected_measurements(params: dict[str, Any], nodes: int, nproc: int) -> int:
    """How many (scope, op, size) measurements every rank of a collectives launch reports when it finishes."""
    wanted = params.get("scopes", ["all", "rails"])
    scopes = ("all" in wanted) + ("rails" in wanted and nodes > 1 and nproc > 1)
    return scopes * len(params["ops"]) * len(params["sizes"])


def worker_problems(result: LaunchResult, measurements: int | None = None) -> dict[str, list[str]]:
    """Per node, why its workers did not all finish (errors, exits without a result) or, given ``measurements``,
    measured less than every rank was asked to. A node missing here finished everything it was asked to."""
    found: dict[str, list[str]] = {}
    for run in result.nodes:
        problems = unfinished_workers(run, result.nproc)
        if not problems and measurements is not None:
            counted: dict[int, int] = {}
            for record in run.of("measurement"):
                local = record["rank"] - run.node_rank * result.nproc
                counted[local] = counted.get(local, 0) + 1
            problems = [f"GPU {local}: {counted.get(local, 0)} of {measurements} measurements"
                        for local in range(result.nproc) if counted.get(local, 0) < measurements]
        if problems:
            found[run.node] = problems
    return found


def raised_errors(result: LaunchResult) -> dict[str, list[str]]:
    """Per node, the errors its workers raised of their own (an NCCL init failure, a CUDA error), not the
    :data:`CONSEQUENCE` of another rank's: these name their node before any count of calls or results does (a
    rank that raised at init leaves its node-mates waiting, and the agent kills them: they look stopped)."""
    found: dict[str, list[str]] = {}
    for run in result.nodes:
        lines = [f"GPU {record['local_rank']}: {record['error']}" for record in run.of("error")
                 if not CONSEQUENCE.search(record["error"])]
        if lines:
            found[run.node] = lines
    return found


class FailedEverywhere(StageSystemic):
    """Every node's workers failed a multi-node stage (init, exit, no report): a setting, the rendezvous or the
    fabric, not a node; nobody is quarantined for it."""


def culprits(problems: dict[str, list[str]], nodes: int, *, stage: str, when: str) -> dict[str, list[str]]:
    """Of the nodes with :func:`worker_problems`, those whose problem is their own, not only :data:`CONSEQUENCE`
    of another's: a rank that raised at init makes every other rank time out, and only the first is the cause.
    With no such node, every node that had a problem is its own cause. When the causes are every one of the
    launch's ``nodes`` (more than one), nobody can be told from anybody: :class:`FailedEverywhere`."""
    own = {node: lines for node, lines in problems.items() if any(not CONSEQUENCE.search(line) for line in lines)}
    own = own or problems
    if nodes > 1 and len(own) == nodes:
        shown = "; ".join(f"{host}: {lines[0]}" for host, lines in sorted(own.items())[:4])
        raise FailedEverywhere(
            f"the {stage} failed on every node ({len(own)} of {nodes}) in {when}: {shown}. A failure everywhere "
            "is a setting, the rendezvous or the fabric (NCCL environment, a blocked port, the subnet manager), not "
            "a node, so no node was quarantined for it")
    return own


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
