"""Which cables are bad, from end-to-end test results alone; and which tests to run next.

A *test* is a set of flows (HCA to HCA) run together that passes or fails as one: a pair
bandwidth test, a rail group's collective, a burn-in stage. It exercises every cable its flows'
routes cross. Two routing models give those cables:

* ``dmodk``: the subnet manager's destination-based up*/down* routing (fat-tree D-mod-K): going up,
  a switch picks its ``(d // K_below) mod K``-th uplink for destination index ``d``; going down, the
  only switch above the destination, parallel cables again by ``d``. Each flow is one path, so tests
  can separate two uplinks of one leaf;
* ``ecmp``: adaptive routing (or a :class:`topology.routes.AdaptiveRouter`), any shortest up*/down*
  path; the switches spray a flow over all of them, so each cable carries only its share of the flow. A
  slow test implicates every cable its flows crossed, weighted by the largest share one of them put on it
  (a degraded cable slows a flow only where that share outweighs what it still carries), and a passing
  test clears them only as far: more tests to the same confidence. Cables that every test crosses
  together (a leaf's uplinks) are indistinguishable, and are reported as a group rather than guessed apart.

Inference is noisy group testing (a test fails when it crosses a bad cable; a healthy test fails
with probability ``false_fail``, a bad one passes with ``false_pass``). The bad cables are found
one at a time: within a round, a Bayesian posterior over "this cable is the next bad one" or "no
more bad cables" is updated by every test that does not cross a cable already found (those say
nothing more). The next test is built to put half the posterior mass inside it (an even split is
the most informative binary question), from flows whose routes reach the heaviest suspects.
Fusion: a prior weight per cable (from UFM events and counters) tilts the start.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from topology.model import Cable
from topology.routes import Flow, Router

#: Under adaptive routing, how degraded a bad cable may be, as the smallest share of a flow it must carry to slow
#: it past the pass mark (a cable left with a fraction f of its rate slows the flows putting more than about f of
#: themselves on it); equally likely a priori.
SEVERITIES = tuple(2.0 ** -power for power in range(11))
#: Under adaptive routing, how many of the flows leaning on a suspect most are weighed for the one added to a test.
TIES = 8
#: Under adaptive routing, the information (bits) below which a proposed test is not worth running.
EXHAUSTED = 0.01


@dataclass(frozen=True)
class Test:
    flows: tuple[Flow, ...]
    cables: frozenset[int]


@dataclass(frozen=True)
class Result:
    test: Test
    failed: bool


@dataclass
class Suspect:
    cable: Cable
    confidence: float
    indistinguishable: list[Cable] = field(default_factory=list)


@dataclass
class Localizer:
    """The sequential noisy group-testing loop over one fabric (see the module docstring)."""

    router: Router
    false_fail: float = 0.02
    false_pass: float = 0.05  # a flapping cable may stay up through a short test
    confidence: float = 0.99
    routing: str = "dmodk"
    first_round_clean: float = 0.05  # prior that nothing is bad when the loop starts (a failure started it)
    later_round_clean: float = 0.5
    prior: dict[int, float] = field(default_factory=dict)  # relative weights (fusion with events/counters)
    seed: int = 0
    results: list[Result] = field(default_factory=list)
    found: list[int] = field(default_factory=list)
    pool_per_hca: int = 6
    twins: dict[int, list[int]] = field(default_factory=dict)  # found cable -> cables no test can tell from it
    min_flows: int = 3
    #: A flow joins a test only if its new cables hold at least this share of their cost (see propose).
    worth: float = 0.5
    #: Flows a test may use (the burn-in's own HCAs only, say); None: any pair of HCAs of the fabric.
    allowed: Callable[[Flow], bool] | None = None

    def __post_init__(self) -> None:
        count = len(self.router.cables)
        self._base = [math.log(self.prior.get(cable, 1.0)) for cable in range(count)]
        self._prior_mass = sum(self.prior.get(cable, 1.0) for cable in range(count))
        self._fail_in = math.log(1 - self.false_pass) - math.log(self.false_fail)
        self._pass_in = math.log(self.false_pass) - math.log(1 - self.false_fail)
        self._flows_through: dict[int, list[tuple[Flow, list[int]]]] | None = None
        #: Under adaptive routing a cable carries only a share of each flow through it, and slows the flows whose
        #: share outweighs what it still carries: how degraded it is (a threshold share) is unknown but the same for
        #: every test, so each cable's evidence is kept per threshold in ``SEVERITIES`` and summed over them.
        self._spread = self.routing == "ecmp" or self.router.adaptive
        self._levels = SEVERITIES if self._spread else (1.0,)
        self._shares: dict[Flow, dict[int, float]] = {}
        self._exposures: dict[Test, dict[int, float]] = {}
        self._reset_round()

    # -- posterior -------------------------------------------------------------------------------
    def _reset_round(self) -> None:
        """A new round: every result that crosses no found cable still speaks about the remaining ones."""
        self.log_weight = list(self._base)
        self.log_cleared = [0.0] * len(self._base)  # evidence from passing tests alone: true exoneration
        self._by_level: dict[int, list[float]] = {}  # adaptive routing: a cable's evidence per severity
        self._tails: dict[int, list[float]] = {}
        clean = self.first_round_clean if not self.found else self.later_round_clean
        self.log_clean = math.log(clean / (1 - clean) * self._prior_mass)
        found = self._excluded()
        for cable in found:
            self.log_weight[cable] = -math.inf
        for result in self.results:
            if not (result.test.cables & found):
                self._absorb(result)

    def _absorb(self, result: Result) -> None:
        """Likelihood ratios relative to "the bad cable is outside this test" (which includes "none left")."""
        inside = self._fail_in if result.failed else self._pass_in
        if not self._spread:
            for cable in result.test.cables:
                self.log_weight[cable] += inside
                if not result.failed:
                    self.log_cleared[cable] += inside
            return
        exposure = self.exposure(result.test)
        for cable in result.test.cables:
            if self.log_weight[cable] == -math.inf:
                continue
            levels = self._by_level.setdefault(cable, [0.0] * len(self._levels))
            self._tails.pop(cable, None)
            for number in range(self._first_level(exposure.get(cable, 0.0)), len(levels)):
                levels[number] += inside  # each severity that slows a flow leaning on it this much
            top = max(levels)
            self.log_weight[cable] = self._base[cable] + top + math.log(
                sum(math.exp(value - top) for value in levels) / len(levels))
            # (log_cleared is the cost of collateral in D-mod-K's test design; the spread design does not use it)

    def exposure(self, test: Test) -> dict[int, float]:
        """Per cable of the test, the largest share of one of its flows that the cable carries (adaptive routing
        sprays a flow over all its shortest paths, :meth:`topology.routes.Router.ecmp_shares`): a degraded cable
        slows the test if it slows the flow leaning on it most."""
        if test not in self._exposures:
            found: dict[int, float] = {}
            for flow in test.flows:
                for cable, share in self.shares_of(flow).items():
                    found[cable] = max(found.get(cable, 0.0), share)
            self._exposures[test] = found
        return self._exposures[test]

    def _slows(self, cable: int, share: float) -> float:
        """The chance that ``cable``, if it is the bad one, slows a flow it carries ``share`` of: over the
        severities its evidence so far allows (the weights of every severity at or above the share's, worked out
        once per round of evidence)."""
        tails = self._tails.get(cable)
        if tails is None:
            levels = self._by_level.get(cable, [0.0] * len(self._levels))
            top = max(levels)
            weights = [math.exp(value - top) for value in levels]
            total = sum(weights)
            tails = [sum(weights[number:]) / total for number in range(len(weights))] + [0.0]
            self._tails[cable] = tails
        return tails[self._first_level(share)]

    def _first_level(self, share: float) -> int:
        """The first severity (they fall by halves from 1) that slows a flow putting ``share`` of itself on the
        cable; every one after it does too. ``len(SEVERITIES)``: none does."""
        if share <= 0:
            return len(self._levels)
        return 0 if share >= 1 else min(len(self._levels), math.ceil(-math.log2(share) - 1e-9))

    def shares_of(self, flow: Flow) -> dict[int, float]:
        """:meth:`topology.routes.Router.ecmp_shares` of a flow, worked out once for this localizer."""
        if flow not in self._shares:
            self._shares[flow] = self.router.ecmp_shares(*flow)
        return self._shares[flow]

    def posterior(self) -> tuple[list[float], float]:
        top = max(max(self.log_weight), self.log_clean)
        weights = [math.exp(value - top) for value in self.log_weight]
        clean = math.exp(self.log_clean - top)
        total = sum(weights) + clean
        return [weight / total for weight in weights], clean / total

    def record(self, test: Test, failed: bool) -> None:
        result = Result(test, failed)
        self.results.append(result)
        if not (test.cables & self._excluded()):  # as _reset_round will count it: the same posterior either way
            self._absorb(result)
        self._settle()

    def _excluded(self) -> set[int]:
        """The found cables and the cables no test can tell from them: a result crossing any says nothing more."""
        return set(self.found) | {twin for cable in self.found for twin in self.twins.get(cable, ())}

    def _settle(self) -> None:
        """Promote a cable past the confidence bar to found, and start the next round."""
        while True:
            probabilities, _clean = self.posterior()
            best = max(range(len(probabilities)), key=probabilities.__getitem__)
            twins = self._twins(best, probabilities) if probabilities[best] < self.confidence else []
            if probabilities[best] + sum(probabilities[twin] for twin in twins) < self.confidence:
                return
            self.found.append(best)
            self.twins[best] = twins
            self._reset_round()

    def _twins(self, best: int, probabilities: list[float]) -> list[int]:
        """Cables no available flow can separate from ``best`` (under adaptive routing, a leaf's uplinks): they
        share its posterior exactly, and every pooled flow through any of them crosses all of them."""
        level = probabilities[best]
        group = [cable for cable, value in enumerate(probabilities)
                 if cable != best and value > 0 and abs(value - level) <= 1e-9 * level]
        if not group:
            return []
        members = {best, *group}
        through = self._pool()
        for cable in members:
            for _flow, cables in through.get(cable, ()):
                if not members <= set(cables):
                    return []
        return group

    def prune(self) -> list[int]:
        """Drop found cables that no failing test needs: every failure they are in is explained by another found
        cable (a cable named early in a round can be the shadow of one named later). Returns those dropped."""
        dropped = []
        changed = True
        while changed:
            changed = False
            for cable in list(self.found):
                others = set(self.found) - {cable}
                needed = any(result.failed and cable in result.test.cables and not (result.test.cables & others)
                             for result in self.results)
                if not needed:
                    self.found.remove(cable)
                    dropped.append(cable)
                    changed = True
        if dropped:
            self._reset_round()
        return dropped

    def done(self) -> bool:
        return self.posterior()[1] >= self.confidence

    # -- test design -----------------------------------------------------------------------------
    def _pool(self) -> dict[int, list[tuple[Flow, list[int]]]]:
        """Candidate flows indexed by the cables they cross: every HCA to a few random peers, plus flows
        aimed at each cable that random peers left with fewer than ``min_flows`` (a cable with a single flow
        could never be told apart from that flow's other cables)."""
        if self._flows_through is None:
            through: dict[int, list[tuple[Flow, list[int]]]] = {}
            rng = random.Random(self.seed + 1)
            route = self.router.path if self.routing == "dmodk" else self.router.ecmp_cables
            hcas = self.router.hcas

            def add(flow: Flow) -> None:
                cables = route(*flow)
                for cable in cables:
                    through.setdefault(cable, []).append((flow, cables))

            usable = self.allowed or (lambda flow: True)
            for source in hcas if len(hcas) > 1 else ():
                for _ in range(self.pool_per_hca):
                    target = rng.choice(hcas)
                    if target != source and usable((source, target)):
                        add((source, target))
            for cable in range(len(self.router.cables)):
                missing = self.min_flows - len(through.get(cable, ()))
                if missing > 0:
                    for flow in self.router.aimed_flows(cable, rng, missing, allowed=self.allowed):
                        add(flow)
            self._flows_through = through
        return self._flows_through

    def propose(self) -> Test:
        """The test that splits the posterior mass most evenly, built from pooled flows around the heaviest
        suspects (an even split is the most informative yes/no question)."""
        probabilities, _clean = self.posterior()
        if self._spread:
            return self._propose_spread(probabilities)
        # Collateral (a cable a flow crosses besides the one it is for) costs what the cable would weigh if
        # only passing tests counted: a cable is not cleared merely because a failing test left it out, since
        # more than one cable may be bad. Tests then avoid dragging in cables nothing has exonerated.
        scale = (1 - self.first_round_clean) / self._prior_mass
        cost = [max(probability, math.exp(base + cleared) * scale)
                for probability, base, cleared in zip(probabilities, self._base, self.log_cleared, strict=True)]
        order = sorted(range(len(probabilities)), key=probabilities.__getitem__, reverse=True)
        test = self._build(probabilities, cost, order, set())
        if self._information(sum(probabilities[cable] for cable in test.cables)) >= 0.1:
            return test
        # One suspect holds nearly all the mass and every flow through it drags the same companions along:
        # ask about the companions instead (only cables that still carry weight, so no fresh cable that
        # might be another bad one is dragged in).
        # While one more failure of the leader alone would settle it, only its companions are asked about: a side
        # question about another suspect that fails hands that one the lead, and two bad cables failing in turn
        # would trade it for ever (a single-fault round lets neither cross the bar).
        settles = self._settles(probabilities[order[0]])
        heavy = [cable for cable in order[1:] if probabilities[cable] >= 1e-4
                 and (cable in test.cables or not settles)]
        alternative = self._build(probabilities, cost, heavy, {order[0]})
        alternative_mass = sum(probabilities[cable] for cable in alternative.cables)
        if alternative.flows and self._information(alternative_mass) > self._information(
                sum(probabilities[cable] for cable in test.cables)):
            return alternative
        return test

    def _propose_spread(self, probabilities: list[float]) -> Test:
        """Under adaptive routing a flow leans on each suspect only with its share, so the posterior mass inside
        a test is weighed by the largest share of a flow each cable carries, and each suspect gets the flow that
        leans on it most."""
        order = sorted(range(len(probabilities)), key=probabilities.__getitem__, reverse=True)
        test, mass = self._build_spread(probabilities, order, set())
        if self._information(mass) < 0.1 and order:
            # as in the static design: while one more failure of the leader could settle it, ask only about the
            # companions its test drags along, so two bad cables do not trade the lead for ever
            settles = self._settles(probabilities[order[0]])
            heavy = [cable for cable in order[1:] if probabilities[cable] >= 1e-4
                     and (cable in test.cables or not settles)]
            alternative, alternative_mass = self._build_spread(probabilities, heavy, {order[0]})
            if alternative.flows and self._information(alternative_mass) > self._information(mass):
                test, mass = alternative, alternative_mass
        # What is left may be a cable degraded less than its share of any flow we can send: no pair test can
        # show it, so once a test would tell almost nothing, there is no test to propose (never one that cannot
        # fail, asked for ever).
        return test if self._information(mass) >= EXHAUSTED else Test((), frozenset())

    def _build_spread(self, probabilities: list[float], order: list[int], without: set[int]) -> tuple[Test, float]:
        through = self._pool()
        avoid = self._excluded() | without
        exposure: dict[int, float] = {}
        flows: list[Flow] = []
        chosen: set[Flow] = set()
        mass = 0.0  # by the posterior, the chance that the test holds the next bad cable and it slows a flow
        for cable in order:
            if mass >= 0.5 - 1e-3 or probabilities[cable] <= 0:
                break
            if cable in avoid:
                continue
            # the flows that lean on this cable most; of those (a few), the one that adds least elsewhere
            leaning: list[tuple[float, Flow]] = []
            for flow, cables in through.get(cable, ()):
                if flow not in chosen and not avoid.intersection(cables):
                    leaning.append((self.shares_of(flow).get(cable, 0.0), flow))
            most = max((share for share, _flow in leaning), default=0.0)
            if most <= exposure.get(cable, 0.0):
                continue
            best, best_gain = None, 0.0
            for _share, flow in [item for item in leaning if item[0] >= most * (1 - 1e-9)][:TIES]:
                gain = sum(probabilities[other] * (self._slows(other, share) - self._slows(
                    other, exposure.get(other, 0.0))) for other, share in self._shares[flow].items()
                    if share > exposure.get(other, 0.0) and probabilities[other] > 0)
                if (not flows or mass + gain <= 0.75 + 1e-12) and (best is None or gain < best_gain):
                    best, best_gain = flow, gain
            if best is None:
                continue
            flows.append(best)
            chosen.add(best)
            mass += best_gain
            for other, share in self._shares[best].items():
                exposure[other] = max(exposure.get(other, 0.0), share)
        return Test(tuple(flows), frozenset(exposure)), mass

    def _settles(self, leader: float) -> bool:
        """Whether one more failure of the leading suspect (posterior ``leader``) would carry it past the bar."""
        return leader >= 1 or leader / (1 - leader) * math.exp(self._fail_in) >= self.confidence / (
            1 - self.confidence)

    def _information(self, mass: float) -> float:
        return outcome_information(mass, self.false_fail, self.false_pass)

    def _build(self, probabilities: list[float], cost: list[float], order: list[int], without: set[int]) -> Test:
        through = self._pool()
        avoid = set(self.found) | without
        target = 0.5
        covered: set[int] = set()
        flows: list[Flow] = []
        mass = 0.0
        for cable in order:
            if mass >= target - 1e-3 or probabilities[cable] <= 0:
                break
            if cable in covered or cable in avoid:
                continue
            room = target - mass
            best, best_extra = None, math.inf
            for flow, cables in through.get(cable, ()):
                if avoid.intersection(cables):
                    continue
                extra = sum(cost[other] for other in cables if other not in covered and other != cable)
                fits = not flows or probabilities[cable] + extra <= room * 1.5 + 1e-12  # the heaviest always goes in
                # A flow whose new cables carry less mass than they cost is left out: they were "cleared" only
                # because some other test failed, which is no clearance when more than one cable may be bad.
                # Without this, a test one heavy suspect short of half the mass sweeps in every other cable of
                # the fabric, fails on the next bad cable, and undoes what the round had learnt.
                new = [other for other in cables if other not in covered]
                useful = not flows or sum(probabilities[other] for other in new) >= self.worth * sum(
                    cost[other] for other in new)
                if fits and useful and extra < best_extra:
                    best, best_extra = (flow, cables), extra
            if best is None:
                continue
            flows.append(best[0])
            mass += sum(probabilities[other] for other in best[1] if other not in covered)
            covered.update(best[1])
        return Test(tuple(flows), frozenset(covered))

    def suspects(self) -> list[Suspect]:
        """The found cables, each with the cables no test told apart from it (same membership in every test so
        far, or no flow that separates them), its confidence shared among them."""
        membership: dict[int, list[int]] = {}
        for number, result in enumerate(self.results):
            for cable in result.test.cables:
                membership.setdefault(cable, []).append(number)
        groups: dict[tuple[int, ...], list[int]] = {}
        for cable, tests in membership.items():
            groups.setdefault(tuple(tests), []).append(cable)
        out = []
        for cable in self.found:
            alike = groups.get(tuple(membership.get(cable, ())), [])
            twins = sorted({*self.twins.get(cable, ()), *(other for other in alike if other != cable)})
            out.append(Suspect(self.router.cables[cable], 1.0 / (1 + len(twins)),
                               [self.router.cables[other] for other in twins[:16]]))
        return out


def test_of(router: Router, flows: Sequence[Flow], routing: str = "dmodk") -> Test:
    return Test(tuple(flows), router.cables_of(flows, routing))


def localize(localizer: Localizer, run: Callable[[Test], bool], *, budget: int = 200) -> int:
    """Propose, run and record tests until no bad cable is left (or the budget is spent); returns tests run."""
    used = 0
    while used < budget:
        if localizer.done() and not localizer.prune():
            break
        test = localizer.propose()
        if not test.flows:
            break
        localizer.record(test, run(test))
        used += 1
    return used


def information_bound(links: int, bad: int) -> float:
    """log2 C(links, bad): the fewest binary tests that could tell every set of ``bad`` cables apart."""
    return (math.lgamma(links + 1) - math.lgamma(bad + 1) - math.lgamma(links - bad + 1)) / math.log(2)


def _entropy(p: float) -> float:
    return 0.0 if p <= 0 or p >= 1 else -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def outcome_information(inside: float, false_fail: float, false_pass: float) -> float:
    """Mutual information (bits) between a test's outcome and "a bad cable is inside", when ``inside`` is the
    chance that one is."""
    failing = inside * (1 - false_pass) + (1 - inside) * false_fail
    return _entropy(failing) - inside * _entropy(false_pass) - (1 - inside) * _entropy(false_fail)


def channel_capacity(false_fail: float, false_pass: float) -> float:
    """Bits one pass/fail test can carry at most: the capacity of that binary channel, by scanning the chance
    that a test holds a bad cable (the information is concave in it, so a fine grid is exact enough)."""
    return max(outcome_information(step / 1000, false_fail, false_pass) for step in range(1, 1000))
