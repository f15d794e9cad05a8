"""Which hosts to pair, round by round, so the pair tests cross every switch-to-switch cable they can.

A pair test runs every HCA of two hosts at once, in both directions: host A's i-th HCA with host B's
(i + shift)-th. With shift 0 each flow stays on its rail, and in a rail-optimized fabric same-rail traffic
turns at the spines; only a cross-rail flow (a shift) climbs to the core, so covering the spine-core cables
needs those tests. A round is a matching: each host is in at most one test, so no HCA is measured while it
also carries another test.

Rounds are chosen greedily: each takes the tests that cross the most cables not yet crossed, then pairs
everyone left over (same-rail, hosts not yet tested first), so every round keeps every host busy and every
host is tested at least once. Greedy set cover is within a log factor of the fewest tests; on the fat tree's
regular routes it reaches full cover in a few rounds (``tests/topology/test_pairing.py``). A cable no test among these
hosts can cross (one only traffic to hosts outside the burn-in would use) is reported as not coverable
rather than counted as tested.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from topology.routes import Flow, Router

#: Above this many hosts the candidate pairs are sampled (each host with this many partners), not all n²/2.
ALL_PAIRS_UP_TO = 256
SAMPLED_PARTNERS = 48

#: (host A, host B, shift): A's i-th HCA is measured against B's ((i + shift) mod HCAs)-th.
PairTest = tuple[str, str, int]


@dataclass
class Schedule:
    rounds: list[list[PairTest]]
    coverable: frozenset[int]
    covered: frozenset[int]
    cables_of: dict[PairTest, frozenset[int]] = field(repr=False)

    @property
    def uncovered(self) -> frozenset[int]:
        return self.coverable - self.covered


def hca_pairs(rails: Mapping[str, Sequence[str]], test: PairTest) -> list[tuple[str, str]]:
    """The HCA of A and the HCA of B measured against each other, one pair per HCA of A."""
    first, second = rails[test[0]], rails[test[1]]
    count = min(len(first), len(second))
    return [(first[index], second[(index + test[2]) % count]) for index in range(count)]


def rail_flows(rails: Mapping[str, Sequence[str]], test: PairTest) -> list[Flow]:
    """Both directions of every HCA pair of the test."""
    flows: list[Flow] = []
    for source, target in hca_pairs(rails, test):
        flows += [(source, target), (target, source)]
    return flows


def switch_cables(router: Router) -> frozenset[int]:
    """Cables between two switches (a host's own cables are crossed by any test of that host)."""
    return frozenset(number for number, cable in enumerate(router.cables) if router.fabric.host_end(cable) is None)


def _host_pairs(hosts: Sequence[str], rng: random.Random) -> list[tuple[str, str]]:
    if len(hosts) <= ALL_PAIRS_UP_TO:
        return [(a, b) for index, a in enumerate(hosts) for b in hosts[index + 1:]]
    chosen: set[tuple[str, str]] = set()
    for host in hosts:
        for partner in rng.sample(hosts, SAMPLED_PARTNERS + 1):
            if partner != host:
                chosen.add((min(host, partner), max(host, partner)))
    return sorted(chosen)


def schedule(router: Router, rails: Mapping[str, Sequence[str]], *, max_rounds: int = 16, seed: int = 0) -> Schedule:
    """Rounds of pair tests covering every switch cable the hosts' tests can cross."""
    hosts = sorted(rails)
    rng = random.Random(seed)
    interesting = switch_cables(router)
    shifts = min((len(hcas) for hcas in rails.values()), default=1)
    cables_of = {(a, b, shift): router.cables_of(rail_flows(rails, (a, b, shift)))
                 for a, b in _host_pairs(hosts, rng) for shift in range(shifts)}
    coverable = frozenset().union(*(cables & interesting for cables in cables_of.values()))
    uncovered = set(coverable)
    tested: set[str] = set()
    used: set[tuple[str, str]] = set()  # host pairs already measured: a repeat teaches little
    rounds: list[list[PairTest]] = []
    while (uncovered or len(tested) < len(hosts)) and len(rounds) < max_rounds and len(hosts) > 1:
        free = set(hosts)
        chosen: list[PairTest] = []
        ranked = sorted(cables_of, key=lambda test: (-len(cables_of[test] & uncovered), test))
        for test in ranked:
            if not uncovered:
                break
            if test[0] in free and test[1] in free and test[:2] not in used and cables_of[test] & uncovered:
                chosen.append(test)
                free -= set(test[:2])
                uncovered -= cables_of[test]
        for test in _fill(sorted(free), tested, used, rng):
            if test not in cables_of:  # a sampled candidate list may not hold it
                cables_of[test] = router.cables_of(rail_flows(rails, test))
            uncovered -= cables_of[test]
            chosen.append(test)
        for test in chosen:
            tested.update(test[:2])
            used.add(test[:2])
        rounds.append(chosen)
    return Schedule(rounds, coverable, frozenset(coverable - uncovered), cables_of)


def _fill(free: list[str], tested: set[str], used: set[tuple[str, str]], rng: random.Random) -> list[PairTest]:
    """Same-rail tests for the hosts no covering test took: untested hosts first, new partners if possible."""
    rng.shuffle(free)
    free.sort(key=lambda host: host in tested)
    tests = []
    while len(free) > 1:
        host = free.pop(0)
        partner = next((other for other in free if (min(host, other), max(host, other)) not in used), free[0])
        free.remove(partner)
        tests.append((min(host, partner), max(host, partner), 0))
    return tests
