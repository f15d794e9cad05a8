"""Finding the bad nodes behind a failed multi-node test, by adaptive group testing.

Some failures cannot be pinned on a rank from the test's own output: in an all_reduce one rank's corrupted
contribution makes *everyone's* sum wrong. The only way to find it is to run the test again on subsets of the
nodes. Imbue's scheme runs a fixed grid (6 groups of 8, then 8 groups of 6: 14 launches for one bad host in
48); the information-theoretic floor for ``d`` bad nodes among ``n`` is about ``d·log2(n/d)`` launches.

This search is adaptive binary splitting. A group known to hold a bad node is split in two and only the first
half is tested: if it passes, the second half must hold the bad node, with no launch spent on it; if it fails,
the second half is *unknown* and is tested in the next round alongside the first half's own halves. Groups in one
round are node-disjoint and run in parallel. A group smaller than the test needs is padded with nodes already
known good, and a node is only reported once it has failed in a group whose other members are known good — a
suspect inferred by elimination is confirmed against a healthy partner before anyone is quarantined.

A node tested alone proves nothing by passing: the faults group testing hunts (a corrupting HCA, a bad cable)
live on the path *between* nodes, which a one-node world never uses — a one-node pass once made a corrupting node
"good" and then blamed the healthy partners it padded. So while no node is known good and a group would have to
run alone, the search first looks for a healthy pair: disjoint pairs of the open nodes, each pair tried once,
until one passes. Only when every pair has failed is a node run alone, where a failure is its own and a pass is
listed as ``untestable``.

The search is pure: running a round of tests is the caller's function, so the same code drives the real burn-in
and the isolation benchmark's simulated oracle.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Runs one round: each group (its nodes, padding included) is tested at once; returns per group "it failed".
RoundRunner = Callable[[list[list[str]]], list[bool]]


@dataclass
class Isolation:
    """What the search concluded and what it cost."""

    confirmed: list[str] = field(default_factory=list)
    #: Inferred bad by elimination, then passed beside a healthy partner: flaky, or a fault between nodes.
    unconfirmed: list[str] = field(default_factory=list)
    #: Nodes this search proved healthy (those passed in as already known good not repeated).
    known_good: list[str] = field(default_factory=list)
    launches: int = 0
    rounds: int = 0
    log: list[dict[str, Any]] = field(default_factory=list)
    #: The search stopped at its round limit with these groups still open.
    unresolved: list[list[str]] = field(default_factory=list)
    #: Passed only when run alone (no healthy partner anywhere): neither cleared nor blamed.
    untestable: list[str] = field(default_factory=list)


@dataclass
class _Group:
    nodes: list[str]
    #: True: known to hold a bad node (tested, or inferred); False: not known either way.
    positive: bool


def isolate(failing: Sequence[str], run_round: RoundRunner, *, known_good: Sequence[str] = (),
            min_group: int = 2, max_rounds: int = 64) -> Isolation:
    """The bad nodes among ``failing``, a set on which the test failed as a whole.

    ``known_good`` nodes (passed before, outside ``failing``) may pad small groups; ``min_group`` is the smallest
    group the test can run on (a multi-node collective needs two nodes)."""
    result = Isolation()
    good = list(known_good)
    open_groups = [_Group(list(failing), True)] if failing else []
    # the pairs already run while no partner was known (a failing pair is one already)
    tried: set[frozenset[str]] = {frozenset(failing)} if len(failing) == 2 else set()
    while open_groups and result.rounds < max_rounds:
        known_bad = [group for group in open_groups if group.positive]
        # the halves left untested are set aside until every known-bad group is resolved, then tested at once
        aside = [node for group in open_groups if not group.positive for node in group.nodes]
        tests: list[_Test] = []
        for group in known_bad or [_Group(aside, False)]:
            if group.positive and len(group.nodes) > 1:
                half = len(group.nodes) // 2
                tests.append(_Test(_Group(group.nodes[:half], False), group, _Group(group.nodes[half:], False)))
            else:  # the set-aside pool, or a single node known (or inferred) bad: tested as it stands
                tests.append(_Test(group, group))
        if not known_bad:
            aside = []
        carried: list[_Group] = []
        spare = list(good)
        # a test that may still prove nodes healthy: the partners a too-small group waits for
        finds_partners = bool(good or aside) or any(len(test.group.nodes) >= min_group for test in tests)
        for test in tests:
            test.padding = [spare.pop() for _ in range(min(len(spare), max(0, min_group - len(test.group.nodes))))]
            if len(test.group.nodes) + len(test.padding) >= min_group or not finds_partners:
                continue  # runnable (alone, where no healthy partner can be had)
            test.deferred = True
            carried.append(test.origin)  # no healthy partner free: next round, once this one has found some
        if aside and any(test.deferred for test in tests):  # partners are needed now: test the pool this round
            tests.append(_Test(_Group(aside, False), _Group(aside, False)))
            aside = []
        carried += [_Group(aside, False)] if aside else []
        runnable = [test for test in tests if not test.deferred]
        if not runnable:
            open_groups = carried
            break
        if any(len(test.group.nodes) + len(test.padding) < min_group for test in runnable):
            # no healthy partner known: a group run now would run alone, and a pass alone clears nobody
            open_nodes = [node for group in open_groups for node in group.nodes]
            pairs = _untried_pairs(open_nodes, tried) if min_group == 2 else []
            if pairs:
                failed = run_round(pairs)
                _record(result, [(pair, [], verdict) for pair, verdict in zip(pairs, failed, strict=True)])
                tried.update(frozenset(pair) for pair in pairs)
                good.extend(node for pair, verdict in zip(pairs, failed, strict=True) if not verdict for node in pair)
                open_groups = _without(open_groups, set(good))
                continue
        failed = run_round([test.group.nodes + test.padding for test in runnable])
        _record(result, [(test.group.nodes, test.padding, verdict)
                         for test, verdict in zip(runnable, failed, strict=True)])
        open_groups = carried + [group for test, verdict in zip(runnable, failed, strict=True)
                                 for group in _conclude(test, verdict, result, good, min_group)]
    result.unresolved = [group.nodes for group in open_groups]
    result.known_good = sorted(set(good) - set(known_good))
    return result


@dataclass
class _Test:
    group: _Group
    #: The known-bad group this test splits (itself when not split); what is re-queued if the test waits.
    origin: _Group
    #: The half of ``origin`` not tested: holds the bad node if ``group`` passes.
    twin: _Group | None = None
    padding: list[str] = field(default_factory=list)
    deferred: bool = False


def _record(result: Isolation, groups: list[tuple[list[str], list[str], bool]]) -> None:
    result.rounds += 1
    result.launches += len(groups)
    result.log.append({"round": result.rounds, "groups": [
        {"nodes": nodes, "padding": padding, "failed": verdict} for nodes, padding, verdict in groups]})


def _untried_pairs(nodes: list[str], tried: set[frozenset[str]]) -> list[list[str]]:
    """Node-disjoint pairs of ``nodes`` not run before, greedily: one round of the search for a healthy pair."""
    pairs: list[list[str]] = []
    free = list(nodes)
    while free:
        first = free.pop(0)
        partner = next((node for node in free if frozenset((first, node)) not in tried), None)
        if partner is not None:
            free.remove(partner)
            pairs.append([first, partner])
    return pairs


def _without(groups: list[_Group], good: set[str]) -> list[_Group]:
    """The open groups once ``good`` nodes are known: a known-bad group keeps its bad node among the rest."""
    kept = [_Group([node for node in group.nodes if node not in good], group.positive) for group in groups]
    return [group for group in kept if group.nodes]


def _conclude(test: _Test, failed: bool, result: Isolation, good: list[str], min_group: int) -> list[_Group]:
    """What one test's outcome leaves open."""
    if not failed and len(test.group.nodes) + len(test.padding) < min_group:
        result.untestable.extend(test.group.nodes)  # passed alone: the path between nodes was never used
        return [_Group(test.twin.nodes, test.twin.positive)] if test.twin else []
    if not failed:
        if test.group.positive and len(test.group.nodes) == 1:
            result.unconfirmed.extend(test.group.nodes)  # inferred bad, yet fine beside a healthy partner
            return []
        good.extend(test.group.nodes)
        return [_Group(test.twin.nodes, True)] if test.twin else []  # the bad node is in the untested half
    if len(test.group.nodes) == 1:
        result.confirmed.extend(test.group.nodes)  # failed in healthy company (or alone, none to be had)
        opened = []
    else:
        opened = [_Group(test.group.nodes, True)]
    return opened + ([test.twin] if test.twin else [])  # the twin is set aside, unknown


def lower_bound(n: int, d: int) -> float:
    """The ``d·log2(n/d)`` launches the issue compares against (for d ≥ 1)."""
    return d * math.log2(n / d) if d else 0.0


def imbue_two_stage(n: int, d: int) -> int:
    """Launches of Imbue's non-adaptive grid: rows then columns (6×8 then 8×6 for 48 nodes), plus a
    confirmation launch per candidate when several bad nodes leave row×column ambiguity."""
    rows = math.ceil(math.sqrt(n))
    columns = math.ceil(n / rows)
    candidates = min(d, rows) * min(d, columns)
    return rows + columns + (candidates if d > 1 else 0)
