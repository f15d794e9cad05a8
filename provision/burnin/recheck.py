"""After a repair: a targeted burn-in of only the routes through the repaired cables.

A full pairs stage re-tests every cable of the fabric; after a reseat the operator wants one answer about one
cable, in seconds, without taking the rest of the cluster out of service. The routes are inverted (the
destinations whose D-mod-K path climbs through the cable are looked up, as the tomography does), a few one-way
flows are measured on hosts that are in service, and the cable passes only when every flow through it runs at
the designed rate. A flow that could not be measured (a host's own side failed) proves nothing either way.

Under adaptive routing (``fabric.adaptive_routing``) the switches spread a flow over all its min-hop paths, so a
cable carries only a share of any flow through it, and a degraded cable slows a flow only when its share outweighs
what the cable still carries. The flows that lean on the cable most are measured, and a cable passes only where
one of them put at least ``EXPOSURE`` of itself on it (a host's own cable); otherwise every flow at rate still
leaves it ``untested``, with the share said, and its counters (``topology flaps``) are what can clear it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.burnin.pairs import Measurement, PairRunner, pack_rounds
from provision.network.routes import routing_for
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from topology.model import Cable, Fabric

FLOWS_PER_CABLE = 3
#: Under adaptive routing: the share of a measured flow the cable must carry before flows at rate clear it
EXPOSURE = 0.95


@dataclass
class CableRecheck:
    cable: Cable
    flows: list[tuple[str, str]] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    #: Per flow, the share of it the cable carries (empty: all of it, unless the fabric routes adaptively)
    shares: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def exposure(self) -> float:
        """The largest share of a measured flow the cable carried."""
        return max((self.shares.get((measurement.client, measurement.server), 1.0)
                    for measurement in self.measurements if measurement.measured), default=0.0)

    @property
    def verdict(self) -> str:
        """``healthy`` (every flow at rate, and one leant on the cable wholly), ``still_bad`` (a flow that leant on
        it wholly was slow: any slow flow, unless the fabric routes adaptively), ``untested`` (no flow measured, or
        under adaptive routing none put enough of itself on the cable to clear or condemn it)."""
        measured = [measurement for measurement in self.measurements if measurement.measured]
        if not measured:
            return "untested"
        slow = [measurement for measurement in measured if not measurement.passed]
        # under adaptive routing a slow flow that put little of itself on the cable may have been slowed by any
        # other cable of its paths: it condemns this one only if it leant on it wholly
        if any(self.shares.get((m.client, m.server), 1.0) >= EXPOSURE - 1e-9 for m in slow):
            return "still_bad"
        if slow:
            return "untested"
        return "healthy" if self.exposure >= EXPOSURE - 1e-9 else "untested"

    def as_dict(self, key: str) -> dict[str, Any]:
        found: dict[str, Any] = {"cable": key, "verdict": self.verdict,
                 "evidence": [measurement.describe() for measurement in self.measurements]}
        if self.shares:
            found["largest_share"] = round(self.exposure, 3)  # adaptive routing: how much of a flow it carried
        return found


def recheck_cables(loaded: LoadedSpec, fabric: Fabric, nodes: list[ResolvedNode], state_dir: Path,
                   cables: list[Cable], *, seed: int) -> list[CableRecheck]:
    """Measure ``FLOWS_PER_CABLE`` one-way flows through each of ``fabric``'s ``cables`` between the in-service
    ``nodes``."""
    router = routing_for(loaded, fabric, state_dir).router  # aimed through the cable as the fabric routes
    runner = PairRunner(loaded, nodes, state_dir, seed=seed)
    live = {hca for hcas in runner.rails.values() for hca in hcas}
    rng = random.Random(seed)
    rechecks = []
    for cable in cables:
        number = router.index[cable]
        wanted = 4 * FLOWS_PER_CABLE if router.adaptive else FLOWS_PER_CABLE
        flows = list(dict.fromkeys(router.aimed_flows(
            number, rng, wanted, tries=40 * wanted // FLOWS_PER_CABLE, allowed=lambda flow: flow[0] in live
            and flow[1] in live and flow[0].split("/")[0] != flow[1].split("/")[0])))
        recheck = CableRecheck(cable, flows)
        if router.adaptive:  # the flows that lean on the cable most
            recheck.shares = {flow: router.ecmp_shares(*flow).get(number, 0.0) for flow in flows}
            recheck.flows = sorted(flows, key=lambda flow: -recheck.shares[flow])[:FLOWS_PER_CABLE]
        rechecks.append(recheck)
    owners: dict[tuple[str, str], list[CableRecheck]] = {}
    for recheck in rechecks:
        for flow in recheck.flows:
            owners.setdefault(flow, []).append(recheck)
    for batch in pack_rounds(list(owners)):  # each HCA in one test at a time, every cable's flows together
        for measurement in runner.measure(batch, "recheck", bidirectional=False):
            for recheck in owners[(measurement.client, measurement.server)]:
                recheck.measurements.append(measurement)
    return rechecks

