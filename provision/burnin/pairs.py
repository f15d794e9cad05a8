"""The ``pairs`` stage: pairwise RDMA bandwidth between hosts, every HCA, and the cable that explains a slow one.

A sweep of rounds (``topology.pairing``: every switch cable these hosts' routes can use is crossed, each
host in one test per round) measures each HCA pair both ways at once (``ib_write_bw -b``) through the
nodes' sessions. A
measurement that fails on one side before any traffic (port down, no such device, GPUDirect unavailable) is
that host's own fault and says so. Slow measurements go to the link tomography: every measurement is a test
over the cables of its routes; the localizer proposes further flows that split the remaining suspects, and
each is measured one way (client writes to server: exactly the route the localizer reasoned about), a few
rounds at most, until it is confident or out of budget.

A cable named between a host and its leaf is that host's cable: the node fails with the evidence. A cable
between two switches is nobody's node: the nodes pass and the cable is reported as a fabric finding (the phase
records it in the state store's cable history, and ``provision topology flaps`` reads this run's results).
"""

from __future__ import annotations

import contextlib
import json
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabric_tests.protocol import parse
from provision.burnin.launch import free_port
from provision.burnin.verdict import NodeVerdict, judge
from provision.checks.outcome import CheckResult, Outcome
from provision.facts.perftest import largest_message_average_gbps, parse_bandwidth
from provision.hosts.remote import HostSession, open_session
from provision.hosts.runtime import node_python
from provision.network.cable_health import RESULTS_FILE, cable_key
from provision.network.routes import Routing, routing_for
from provision.network.sources import design_fabric
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from provision.spec.thresholds import effective_thresholds
from topology import pairing, routes, tomography
from topology.model import Cable, Fabric

ROUND_DEADLINE_S = 120.0
SESSION_MARGIN_S = 30.0
#: The adaptive loop's budget: proposals (each one question of the localizer, its flows measured side by side in
#: as few rounds as HCA exclusivity allows) and measurements in all.
ADAPTIVE_PROPOSALS = 24
ADAPTIVE_MEASUREMENTS = 256
#: perftest messages that mean the two sides never met (the other side's problem, or the path's), not a
#: fault of the host that printed them.
NOT_MET = ("Couldn't connect", "Unable to open file descriptor", "No client connected", "Client went away",
           "Server did not confirm")
#: What ``fabric_tests.perftest`` adds to a server it stopped because no client reached it in time.
STOPPED_UNMET = "(stopped by fabric_tests)"

Flow = routes.Flow


@dataclass
class Measurement:
    """One HCA pair measured, the client writing to the server, or both ways at once (``-b``)."""

    client: str  # HCA, "host/mlx5_0"
    server: str
    threshold_gbps: float
    label: str
    bidirectional: bool = True
    gbps: float | None = None
    error: str = ""
    at_fault: str | None = None  # the host whose own side failed before any traffic
    cables: frozenset[int] = frozenset()  # the cables of its routes, once it counts as a test of them

    @property
    def measured(self) -> bool:
        return self.gbps is not None

    @property
    def passed(self) -> bool:
        return self.gbps is not None and self.gbps >= self.threshold_gbps

    @property
    def flows(self) -> list[Flow]:
        there = (self.client, self.server)
        return [there, (self.server, self.client)] if self.bidirectional else [there]

    def describe(self) -> str:
        shown = f"{self.gbps:.0f} Gb/s" if self.gbps is not None else self.error
        arrow = "<->" if self.bidirectional else "->"
        return f"{self.label}: {self.client} {arrow} {self.server}: {shown} (threshold {self.threshold_gbps:g})"


@dataclass
class PairsReport:
    verdicts: list[NodeVerdict]
    fabric_suspects: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def _host(hca: str) -> str:
    return hca.split("/", 1)[0]


def _device(hca: str) -> str:
    return hca.split("/", 1)[1]


class PairRunner:
    """Measures lists of HCA pairs, one round at a time, through the nodes' sessions."""

    def __init__(self, loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, *, seed: int) -> None:
        self.loaded, self.state_dir = loaded, state_dir
        self.nodes = {node.name: node for node in nodes}
        spec = loaded.spec
        self.rails = {node.name: [f"{node.name}/{hca}" for hca in spec.hardware[node.hardware].rails]
                      for node in nodes}
        self.gpu_of = {f"{node.name}/{hca}": gpu for node in nodes
                       for hca, gpu in spec.hardware[node.hardware].rails.items()}
        limits = effective_thresholds(spec.hardware[nodes[0].hardware], spec.fabric, spec.burnin.thresholds)
        self.one_way_gbps = limits["ib_write_bw_gbps"].value
        self.base_port = free_port(seed + 1)
        self.rounds = 0
        # one connection per host for the whole stage, not one per round: at a delivery's size a handshake per
        # host per round is what a bastion's MaxStartups drops
        self.sessions: dict[str, HostSession] = {}

    def _session(self, host: str) -> HostSession:
        if host not in self.sessions:
            self.sessions[host] = open_session(self.loaded, self.nodes[host], self.state_dir)
        return self.sessions[host]

    def close(self) -> None:
        for session in self.sessions.values():
            with contextlib.suppress(Exception):
                session.close()
        self.sessions.clear()

    def _args(self, hca: str, bidirectional: bool) -> list[str]:
        work = self.loaded.spec.burnin.workload
        args = ["--report_gbits", "-F", "-s", str(work.pair_message_bytes), "-n", str(work.pair_iters)]
        if bidirectional:
            args.append("-b")
        if self.loaded.spec.host.gpudirect != "off":
            args.append(f"--use_cuda={self.gpu_of[hca]}")
        return args

    def _port(self, hca: str) -> int:
        return self.base_port + self.rails[_host(hca)].index(hca)

    def measure(self, pairs: list[tuple[str, str]], label: str, *, bidirectional: bool = True) -> list[Measurement]:
        """``pairs`` (client HCA, server HCA) with no HCA twice; all of them at once."""
        self.rounds += 1
        legs: dict[str, list[dict[str, Any]]] = {}
        for client, server in pairs:
            legs.setdefault(_host(server), []).append(
                {"device": _device(server), "port": self._port(server), "args": self._args(server, bidirectional)})
            legs.setdefault(_host(client), []).append(
                {"device": _device(client), "port": self._port(server), "args": self._args(client, bidirectional),
                 "peer": self.nodes[_host(server)].address})
        with ThreadPoolExecutor(max_workers=max(1, len(legs))) as pool:
            outcomes = dict(zip(legs, pool.map(self._run_host, legs.items()), strict=True))
        threshold = self.one_way_gbps * (2 if bidirectional else 1)  # -b reports both directions summed
        return [read_outcome(Measurement(client, server, threshold, label, bidirectional), outcomes)
                for client, server in pairs]

    def _run_host(self, host_legs: tuple[str, list[dict[str, Any]]]) -> dict[tuple[str, str], dict[str, Any]] | str:
        host, legs = host_legs
        argv = [node_python(self.loaded.spec), "-m", "fabric_tests.perftest", "--deadline", f"{ROUND_DEADLINE_S:g}",
                "--legs", json.dumps(legs, separators=(",", ":"))]
        try:
            session = self._session(host)
        except Exception as error:
            return f"cannot reach the node: {type(error).__name__}: {error}"
        command = session.run(argv, ROUND_DEADLINE_S + SESSION_MARGIN_S)
        if command.lost:  # the connection itself failed: the next round opens anew
            with contextlib.suppress(Exception):
                self.sessions.pop(host).close()
        records = [record for record in parse(command.stdout) if record.get("type") == "perftest"]
        if not records:
            return f"the pair-test helper did not report ({command.problem()})"
        return {(record["device"], record["role"]): record for record in records}


def read_outcome(measurement: Measurement, outcomes: dict[str, Any]) -> Measurement:
    """Fill ``measurement`` from what each host's helper reported (or why it could not run): the figure, or
    the error and whose side it was. A side that failed on its own (not because the other never came) is at
    fault; the server is looked at first, since its failure is what the client then reports."""
    client, server = measurement.client, measurement.server
    sides = {}
    for hca, role in ((server, "server"), (client, "client")):
        outcome = outcomes[_host(hca)]
        if isinstance(outcome, str):
            measurement.error, measurement.at_fault = f"{hca}: {outcome}", _host(hca)
            return measurement
        sides[role] = outcome.get((_device(hca), role), {"rc": -1, "stderr": "no outcome", "timed_out": False,
                                                         "stdout": ""})
    for hca, role in ((server, "server"), (client, "client")):  # the server's own failure explains the client's
        side = sides[role]
        text = side["stderr"].strip()
        if role == "client" and side["rc"] != 0 and not side["timed_out"] and _stopped(sides["server"]) \
                and not any(marker in text for marker in NOT_MET):
            # the server was stopped under it (its deadline, or by fabric_tests as never reached): what the client
            # then says (its writes' retries ran out, the peer reset) is the stop's, not either host's own
            measurement.error = (f"{hca} (client): {_said(text) or 'exit ' + str(side['rc'])}; its server "
                                 f"{server} was stopped ({_said(sides['server']['stderr']) or 'timed out'})")
            return measurement
        if side["rc"] != 0 and not side["timed_out"] and not any(marker in text for marker in NOT_MET):
            said = _said(text) or f"exit {side['rc']}"
            measurement.error = f"{hca} ({role}): {said}"
            measurement.at_fault = _host(hca)
            return measurement
    rows = parse_bandwidth(sides["client"]["stdout"])
    measurement.gbps = largest_message_average_gbps(rows)
    if measurement.gbps is None:
        text = (sides["client"]["stderr"] or sides["server"]["stderr"]).strip()
        measurement.error = "timed out" if sides["client"]["timed_out"] else \
            (_said(text) or "no bandwidth row in the output")
    return measurement


def _stopped(side: dict[str, Any]) -> bool:
    """A side the helper stopped: at the round's deadline, or as a server no client reached in time."""
    return bool(side["timed_out"]) or STOPPED_UNMET in side["stderr"]


def _said(text: str) -> str:
    """A tool's complaint on one line (perftest spreads one error over several indented lines)."""
    return " / ".join(line.strip() for line in text.splitlines() if line.strip())[-300:]


def pack_rounds(pairs: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Pack HCA pairs into rounds where no HCA appears twice."""
    rounds: list[tuple[set[str], list[tuple[str, str]]]] = []
    for pair in pairs:
        for busy, chosen in rounds:
            if not busy & set(pair):
                busy.update(pair)
                chosen.append(pair)
                break
        else:
            rounds.append((set(pair), [pair]))
    return [chosen for _busy, chosen in rounds]


def _routed(router: routes.Router, measurements: list[Measurement]) -> list[Measurement]:
    """Each measurement that tested the path (not one a host's own failure stopped) with its routes' cables."""
    for measurement in measurements:
        if measurement.at_fault is None:
            measurement.cables = router.cables_of(measurement.flows)
    return measurements


def _record(localizer: tomography.Localizer, measurements: list[Measurement]) -> None:
    for measurement in measurements:
        if measurement.at_fault is None:
            localizer.record(tomography.Test(tuple(measurement.flows), measurement.cables), not measurement.passed)


def run_pairs_stage(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, *, seed: int,
                    evidence_dir: Path) -> PairsReport:
    if len(nodes) < 2:
        return PairsReport([judge(loaded.spec.admission, node.name, "pairs", [CheckResult(
            "pair_bandwidth", Outcome.SILENCED, "a single node has no partner for pair tests")]) for node in nodes])
    routing = routing_for(loaded, design_fabric(loaded), state_dir)
    runner = PairRunner(loaded, nodes, state_dir, seed=seed)
    try:
        return _run(loaded, nodes, runner, routing, seed=seed, evidence_dir=evidence_dir)
    finally:
        runner.close()


def _run(loaded: LoadedSpec, nodes: list[ResolvedNode], runner: PairRunner, routing: Routing, *, seed: int,
         evidence_dir: Path) -> PairsReport:
    router, basis = routing.router, routing.basis
    plan = pairing.schedule(router, runner.rails, seed=seed)
    measurements: list[Measurement] = []
    for number, tests in enumerate(plan.rounds, 1):
        pairs = [pair for test in tests for pair in pairing.hca_pairs(runner.rails, test)]
        measurements += _routed(router, runner.measure(pairs, f"sweep {number}"))
    at_fault = {measurement.at_fault for measurement in measurements if measurement.at_fault}
    live = {hca for host, hcas in runner.rails.items() if host not in at_fault for hca in hcas}
    localizer = tomography.Localizer(router, seed=seed,
                                     allowed=lambda flow: flow[0] in live and flow[1] in live
                                     and _host(flow[0]) != _host(flow[1]))
    adaptive = proposals = 0
    if any(not measurement.passed for measurement in measurements if measurement.at_fault is None):
        _record(localizer, measurements)
        for proposal_number in range(1, ADAPTIVE_PROPOSALS + 1):
            if (localizer.done() and not localizer.prune()) or adaptive >= ADAPTIVE_MEASUREMENTS \
                    or _settled(localizer, measurements):
                break
            proposal = localizer.propose()
            flows = list(dict.fromkeys(proposal.flows))[:ADAPTIVE_MEASUREMENTS - adaptive]
            if not flows:
                break
            proposals += 1
            for batch in pack_rounds(flows):
                found = _routed(router, runner.measure(batch, f"adaptive {proposal_number}", bidirectional=False))
                measurements += found
                _record(localizer, found)
                adaptive += len(found)
    suspects = localizer.suspects() if localizer.results else []
    report = _verdicts(loaded, nodes, measurements, suspects, router, runner.rails)
    unrouted = getattr(router, "unrouted", {})
    basis += f"; {len(unrouted)} flow(s) the tables did not carry, routed by D-mod-K" if unrouted else ""
    for suspect in report.fabric_suspects:  # a cable named by tomography says which routes it assumed
        suspect["routing"] = basis
    report.summary = {
        "routing": basis, "routing_mode": routing.mode,
        "rounds": runner.rounds, "sweep_rounds_count": len(plan.rounds), "measurements": len(measurements),
        "adaptive_proposals": proposals, "adaptive_measurements": adaptive,
        "localizer_done": bool(localizer.results) and localizer.done(),
        "threshold_gbps": {"one_way": runner.one_way_gbps, "both_ways": 2 * runner.one_way_gbps},
        "coverage": {"switch_cables_coverable": len(plan.coverable), "covered": len(plan.covered),
                     "not_covered": sorted(cable_key(router.cables[number]) for number in plan.uncovered)},
        "sweep_rounds": [[list(test) for test in tests] for tests in plan.rounds],
        **({"naming": _adaptive_naming(router, measurements)} if router.adaptive else {}),
        "fabric_suspects": report.fabric_suspects,
        "unexplained": [measurement.describe() for measurement in measurements
                        if measurement.at_fault is None and not measurement.passed
                        and not _explained(measurement, router, suspects)]}
    _write(evidence_dir, measurements, report.summary)
    return report


#: Flows whose min-hop paths are counted for the report's sentence on adaptive routing (a BFS each).
NAMING_SAMPLE = 64


def _adaptive_naming(router: routes.Router, measurements: list[Measurement]) -> str:
    """What adaptive routing costs the naming, in figures of this run: how many paths a measured flow could take,
    and how little a single flow says about any one cable of them."""
    flows = list(dict.fromkeys(flow for measurement in measurements if measurement.at_fault is None
                               for flow in measurement.flows))
    if not flows:
        return "adaptive routing: no flow was measured"
    counted = [found.paths for flow in flows[:NAMING_SAMPLE] if (found := routes.route(router.fabric, *flow))]
    paths = statistics.median(counted) if counted else 1
    return (f"adaptive routing: a measured flow could take any of a median {paths:g} min-hop paths, so a slow "
            "test implicates every cable of them, each as far as a flow leant on it, and a passing test clears "
            "them only as far; a cable is named only once slow tests agree on it, cables that every flow crosses "
            "together are named as one group, and one degraded less than its share of every flow cannot be seen")


def _settled(localizer: tomography.Localizer, measurements: list[Measurement]) -> bool:
    """Every slow measurement crosses a named cable, and every other cable a slow one crossed has since carried
    a measurement at full speed: nothing the evidence implicates is left unnamed or uncleared.

    The localizer's own stop ("no bad cable left" at 99%) also wants cables no measurement ever implicated to be
    re-measured; after a sweep that crossed every cable, that costs rounds and tells the burn-in nothing new.
    """
    named = {cable for found in localizer.found for cable in (found, *localizer.twins.get(found, ()))}
    if not named:
        return False
    implicated: set[int] = set()
    cleared: set[int] = set()
    for measurement in measurements:
        if measurement.at_fault is not None:
            continue
        if measurement.passed and localizer.router.adaptive:  # it clears only what it put itself wholly on
            cleared |= {cable for flow in measurement.flows
                        for cable, share in localizer.shares_of(flow).items() if share >= 1.0 - 1e-9}
        elif measurement.passed:
            cleared |= measurement.cables
        elif not measurement.cables & named:
            return False
        else:
            implicated |= measurement.cables
    return implicated <= cleared | named


def _explained(measurement: Measurement, router: routes.Router, suspects: list[tomography.Suspect]) -> bool:
    return any(router.index[cable] in measurement.cables for suspect in suspects
               for cable in (suspect.cable, *suspect.indistinguishable))


def _host_of(cable: Cable, fabric: Fabric) -> str | None:
    """The host whose own cable this is, or None for a cable between two switches."""
    end = fabric.host_end(cable)
    return str(fabric.graph.nodes[end[0]].get("host")) if end else None


def _verdicts(loaded: LoadedSpec, nodes: list[ResolvedNode], measurements: list[Measurement],
              suspects: list[tomography.Suspect], router: routes.Router,
              rails: dict[str, list[str]]) -> PairsReport:
    checks: dict[str, list[CheckResult]] = {node.name: [] for node in nodes}
    for measurement in measurements:
        if measurement.at_fault in checks and _without_cuda(measurement.error):
            checks[measurement.at_fault].append(CheckResult(
                "perftest", Outcome.FAILED, f"ib_write_bw on {measurement.at_fault} was built without CUDA (it "
                f"refuses --use_cuda): the pair tests cannot measure GPU memory, so GPUDirect RDMA goes untested "
                f"({measurement.error})", "install a perftest built with CUDA (perftest's --use_cuda needs "
                "CUDA_H_PATH at build time; the OFED/DOCA packages with GPUDirect support ship one)",
                [measurement.describe()]))
        elif measurement.at_fault in checks:
            checks[measurement.at_fault].append(CheckResult(
                "perftest", Outcome.FAILED, f"ib_write_bw could not run: {measurement.error}",
                "check the HCA port (ibstat), its cable and, with GPUDirect, nvidia-peermem",
                [measurement.describe()]))
    slow = [measurement for measurement in measurements if measurement.measured and not measurement.passed]
    fabric_suspects = []
    for suspect in suspects:
        through = [measurement.describe() for measurement in slow if router.index[suspect.cable] in measurement.cables]
        host = _host_of(suspect.cable, router.fabric)
        if host in checks:
            checks[host].append(CheckResult(
                "pair_bandwidth", Outcome.FAILED, f"its cable {cable_key(suspect.cable)} is degraded: named by "
                f"tomography (confidence {suspect.confidence:.2f}) from {len(through)} slow pair test(s)",
                "reseat the cable and transceiver at both ends, then re-run the burn-in; replace the cable if it "
                "repeats", through[:8]))
        elif host is None:
            fabric_suspects.append({
                "cable": cable_key(suspect.cable), "confidence": round(suspect.confidence, 3),
                "indistinguishable_from": [cable_key(other) for other in suspect.indistinguishable],
                "evidence": through[:8]})
    shared = [str(suspect["cable"]) for suspect in fabric_suspects]
    verdicts = []
    for node in nodes:
        if not checks[node.name]:
            checks[node.name].append(_healthy(node.name, rails.get(node.name, []), measurements, shared))
        verdicts.append(judge(loaded.spec.admission, node.name, "pairs", checks[node.name]))
    return PairsReport(verdicts, fabric_suspects)


def _without_cuda(error: str) -> bool:
    """perftest built without CUDA does not know ``--use_cuda``: getopt's 'unrecognized option' (or 'invalid
    option' from older builds) names it."""
    return "--use_cuda" in error and ("unrecognized option" in error or "invalid option" in error)


def _healthy(host: str, hcas: list[str], measurements: list[Measurement], fabric_cables: list[str]) -> CheckResult:
    """The node's sweep figures (both ways at once; the adaptive one-way tests are about cables). Every one of its
    rail HCAs must have been measured: a pass rests on this node's own figures, never on silence."""
    sweep = [m for m in measurements
             if m.gbps is not None and m.bidirectional and host in (_host(m.client), _host(m.server))]
    measured = {hca for m in sweep for hca in (m.client, m.server)}
    unmeasured = [hca for hca in hcas if hca not in measured]
    if not sweep or unmeasured:
        errors = [m.describe() for m in measurements if m.gbps is None and host in (_host(m.client), _host(m.server))]
        what = f"HCAs {', '.join(_device(hca) for hca in unmeasured)} of" if sweep else "no pair test measured"
        return CheckResult("pair_bandwidth", Outcome.UNKNOWN, f"{what} this node" + (" were never measured"
                           if sweep else "") + (f" ({errors[0]})" if errors else ""), "re-run the burn-in", errors[:8])
    rates = [m.gbps for m in sweep if m.gbps is not None]
    message = (f"{len(rates)} HCA pair test(s), slowest {min(rates):.0f} Gb/s, median "
               f"{statistics.median(rates):.0f} Gb/s (threshold {sweep[0].threshold_gbps:g}, both directions)")
    if fabric_cables:
        message += f"; slow tests explained by fabric cable(s) {', '.join(fabric_cables)}, not by this node"
    return CheckResult("pair_bandwidth", Outcome.OK, message)


def _write(directory: Path, measurements: list[Measurement], summary: dict[str, Any]) -> None:
    """The measurements in the format ``provision topology flaps --results`` reads, and the stage's report."""
    directory.mkdir(parents=True, exist_ok=True)
    tests: list[dict[str, Any]] = [{"flows": [list(flow) for flow in measurement.flows], "passed": measurement.passed,
              "gbps": measurement.gbps, "threshold_gbps": measurement.threshold_gbps, "round": measurement.label}
             for measurement in measurements if measurement.at_fault is None]
    (directory / RESULTS_FILE).write_text(json.dumps({"routing": summary["routing_mode"], "tests": tests}, indent=1))
    (directory / "pairs-report.json").write_text(json.dumps(
        {**summary, "measured": [measurement.describe() for measurement in measurements]}, indent=1))
