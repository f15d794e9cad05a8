"""Slow rails: each rail's bus bandwidth judged, and the node behind a slow rail found by pairing.

A rail is GPU *i* of every node with its HCA *i*; the collectives stage measures it as a communicator of its own,
as nccl-tests' ``NCCL_TESTS_SPLIT="MOD n"`` does. A degraded HCA port (link-level retries at full signalled rate),
or a bad PCIe path between a GPU and its HCA, slows every collective of that rail for *all* its members: the
rail is slow and no rank is a straggler (they all wait on the wire). So the figure names the rail, never the node.

Two judgements, both per rail:

- against the node's other rails measured in the same launch: below ``rail_peer_fraction`` of their median,
  size by size (the median of those ratios decides, so one noisy size does not). Holds on any device; on CPU
  workers, which share cores, only below :data:`CPU_PEER_FRACTION`.
- on GPUs, against ``rail_busbw_gbps`` (0.8 x the link's GB/s by default) at the largest size measured, when
  that size is large enough for a healthy rail to reach it (nccl-tests #232: 2 nodes x 1 H100 over NDR give
  36.2 GB/s at 8 MiB, 39.9 at 16 MiB, 41.3 at 32 MiB — still climbing).

The node is found by pairing, the "second pass" of Google's cluster health scanner and nccl-tests #106's advice
(one slow node halves a 2-node busbw; test pairs and suspect the common node): all nodes in disjoint pairs,
measured at once, rails only. A pair whose rails are fine clears both; each member of a slow pair is then paired
with a cleared node, and slow beside a healthy partner is confirmed. When no pair is fine the slowness is on
every node: systemic (a plane of the fabric, a setting, the thresholds), and nobody is quarantined for it.

Pure: measuring a round is the caller's function.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: On CPU workers (the simulated cluster, CI) rails share two cores with everything else: a healthy rail measured
#: at 0.64 of its peers on a loaded machine; a rail behind a port at 0.1 of its speed at 0.14-0.19 in the fleet's
#: launch and 0.02-0.06 paired, beside another test module's load or not.
CPU_PEER_FRACTION = 0.4
#: Paired, the same port measured 0.02-0.06 and a healthy pair once 0.39 (beside the other worker's provisioning):
#: a pair is slow on CPU workers only below this. The fleet's launch keeps the higher bar, where a false alarm
#: costs a pairing round, while a pair judged slow in error clears nobody and makes the slowness look systemic.
CPU_PAIR_FRACTION = 0.2

#: Below this size a healthy rail has not reached its bandwidth, so the absolute floor is not judged there.
FLOOR_MIN_BYTES = 64 * 2**20


@dataclass(frozen=True)
class RailJudgement:
    """One rail's figures in one launch, and whether they are slow."""

    rail: int
    #: Median over (operation, size) of this rail's busbw over the median of the other rails', None with one rail.
    peer_ratio: float | None
    #: busbw at the largest size measured (all_reduce where measured), GB/s.
    busbw_gbps: float
    nbytes: int
    slow: bool
    reason: str


def rail_of(scope: str) -> int | None:
    return int(scope[4:]) if scope.startswith("rail") and scope[4:].isdigit() else None


def judge_rails(rows: Iterable[Mapping[str, Any]], *, peer_fraction: float,
                floor_gbps: float | None) -> dict[int, RailJudgement]:
    """Every rail of one launch (rows as the collectives stage's ``bus_bandwidth``), judged against its peers and,
    when ``floor_gbps`` is given (GPUs), against the floor."""
    figures: dict[int, dict[tuple[str, int], float]] = {}
    for row in rows:
        rail = rail_of(str(row["scope"]))
        if rail is not None:
            figures.setdefault(rail, {})[(str(row["op"]), int(row["bytes"]))] = float(row["busbw_gbps"])
    judged = {}
    for rail, mine in sorted(figures.items()):
        ratios = []
        for key, value in mine.items():
            others = [other[key] for peer, other in figures.items() if peer != rail and key in other]
            if others and statistics.median(others) > 0:
                ratios.append(value / statistics.median(others))
        ratio = statistics.median(ratios) if ratios else None
        largest = max(nbytes for _op, nbytes in mine)
        at_largest = {op: value for (op, nbytes), value in mine.items() if nbytes == largest}
        busbw = at_largest.get("all_reduce", min(at_largest.values()))
        reasons = []
        if ratio is not None and ratio < peer_fraction:
            reasons.append(f"{ratio:.2f} x the median of the other rails (below {peer_fraction:g})")
        if floor_gbps is not None and largest >= FLOOR_MIN_BYTES and busbw < floor_gbps:
            reasons.append(f"{busbw:g} GB/s at {largest} B, below rail_busbw_gbps {floor_gbps:g}")
        shown = f"{ratio:.2f} x the other rails" if ratio is not None else "no other rail to compare"
        judged[rail] = RailJudgement(rail, None if ratio is None else round(ratio, 3), busbw, largest, bool(reasons),
                                     "; ".join(reasons) or f"{busbw:g} GB/s at {largest} B, {shown}")
    return judged


def slow(judged: Mapping[int, RailJudgement], rails: Iterable[int] | None = None) -> dict[int, RailJudgement]:
    """The slow ones among ``rails`` (all when None)."""
    wanted = set(judged) if rails is None else set(rails)
    return {rail: judgement for rail, judgement in judged.items() if judgement.slow and rail in wanted}


#: Measures one round: each group (node names) launched at once, rails only; per group, its rails judged.
RoundRunner = Callable[[list[list[str]]], list[dict[int, RailJudgement]]]


@dataclass
class RailAttribution:
    """Who is behind the slow rails, and what it cost."""

    #: node -> its rails slow beside a healthy partner (with that launch's judgement).
    confirmed: dict[str, dict[int, RailJudgement]] = field(default_factory=dict)
    #: In a slow pair, but fine beside a healthy partner: noise, or a fault between the two.
    unconfirmed: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    #: No group was fine: the slowness is everywhere, nobody is to blame for it.
    systemic: bool = False
    launches: int = 0
    rounds: int = 0
    log: list[dict[str, Any]] = field(default_factory=list)


def first_pairs(nodes: list[str]) -> tuple[list[list[str]], str | None]:
    """Disjoint pairs, and the odd node out (measured later, beside a node a pair cleared)."""
    pairs = [nodes[index:index + 2] for index in range(0, len(nodes) - 1, 2)]
    return pairs, (nodes[-1] if len(nodes) % 2 else None)


def attribute(nodes: list[str], rails: Iterable[int], run_round: RoundRunner) -> RailAttribution:
    """The nodes behind slow ``rails`` among ``nodes`` (at least two)."""
    wanted = sorted(set(rails))
    result = RailAttribution()
    slow_groups: list[tuple[list[str], dict[int, RailJudgement]]] = []

    def measure(groups: list[list[str]]) -> list[dict[int, RailJudgement]]:
        judged = [slow(one, wanted) for one in run_round(groups)]
        result.rounds += 1
        result.launches += len(groups)
        result.log.append({"round": result.rounds, "groups": [
            {"nodes": group, "slow": {f"rail{rail}": judgement.reason for rail, judgement in bad.items()}}
            for group, bad in zip(groups, judged, strict=True)]})
        for group, bad in zip(groups, judged, strict=True):
            if bad:
                slow_groups.append((group, bad))
            else:
                result.cleared.extend(node for node in group if node not in result.cleared)
        return judged

    pairs, odd = first_pairs(nodes)
    measure(pairs)
    if not result.cleared and odd is not None and slow_groups:
        for partner in list(slow_groups[0][0]):  # three nodes, or every pair slow: the odd one may clear two
            if not measure([[odd, partner]])[0]:
                break
    if not result.cleared:
        result.systemic = True
        return result
    suspects = [node for node in nodes if node not in result.cleared]
    while suspects:
        for suspect in list(suspects):  # slow already beside nodes since cleared: confirmed without a launch
            beside = next((bad for group, bad in slow_groups if suspect in group
                           and all(other in result.cleared for other in group if other != suspect)), None)
            if beside:
                result.confirmed[suspect] = beside
                suspects.remove(suspect)
        batch, suspects = suspects[:len(result.cleared)], suspects[len(result.cleared):]
        if batch:
            measure([[suspect, partner] for suspect, partner in zip(batch, result.cleared, strict=False)])
        for suspect in batch:
            if suspect in result.cleared:
                if any(suspect in group for group, _bad in slow_groups):
                    result.unconfirmed.append(suspect)
            else:
                suspects.append(suspect)  # slow beside a cleared partner: confirmed at the top of the loop
    return result
