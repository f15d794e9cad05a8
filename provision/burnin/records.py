"""Reading what a launch's workers said: who finished, who stopped or vanished and where, the bus bandwidth
measured, stragglers, wrong sums, raised errors, and the culprits of a launch that failed; pure functions of the
records (and the logs kept as evidence), shared by every torch stage."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

from provision.burnin.launch import LaunchResult, NodeRun
from provision.burnin.verdict import NodeVerdict
from provision.checks.node_stage import on_gpu
from provision.checks.outcome import CheckResult, Outcome


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


def keep_logs(result: LaunchResult, directory: Path) -> None:
    """Each node's agent stderr (stack dumps live there) and its workers' errors, each with the frames it was
    raised in, beside the run's other evidence: a launch that failed everywhere is judged on the first four
    nodes' first lines, and the rank that started it may be on none of them."""
    directory.mkdir(parents=True, exist_ok=True)
    for run in result.nodes:
        if run.command and run.command.stderr.strip():
            (directory / f"{result.test}-{run.node}.stderr").write_text(run.command.stderr)
        errors = run.of("error")
        if errors:
            (directory / f"{result.test}-{run.node}.errors.json").write_text(json.dumps(errors, indent=2))


#: nccl-tests' bus-bandwidth factors (doc/PERFORMANCE.md), with n the group size.
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}


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


#: What a rank prints when a peer went away: a step further from the cause than a rank that timed out waiting.
PEER_GONE = re.compile(r"connection (?:closed|reset|refused)|broken pipe|by peer|remote process exited|"
                       r"connection was likely closed|remote server shutdown", re.IGNORECASE)


def _nearest(lines: list[str]) -> str:
    """The line of a node's problems nearest the cause: the first that is not only a peer gone away."""
    return next((line for line in lines if not PEER_GONE.search(line)), lines[0])


def _nearest_first(item: tuple[str, list[str]]) -> tuple[bool, str]:
    """Nodes with a line other than a peer gone away first (a rank that timed out waiting was there when its wait
    began; the ones whose peer closed the connection are what followed), then by name."""
    host, lines = item
    return bool(PEER_GONE.search(_nearest(lines))), host


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
        shown = "; ".join(f"{host}: {_nearest(lines)}" for host, lines in sorted(own.items(), key=_nearest_first)[:4])
        raise FailedEverywhere(
            f"the {stage} failed on every node ({len(own)} of {nodes}) in {when}: {shown}. A failure everywhere "
            "is a setting, the rendezvous or the fabric (NCCL environment, a blocked port, the subnet manager), not "
            "a node, so no node was quarantined for it")
    return own
