"""After a repair: a targeted burn-in of only the routes through the repaired cables.

A full pairs stage re-tests every cable of the fabric; after a reseat the operator wants one answer about one
cable, in seconds, without taking the rest of the cluster out of service. The routes are inverted (the
destinations whose D-mod-K path climbs through the cable are looked up, as the tomography does), a few one-way
flows are measured on hosts that are in service, and the cable passes only when every flow through it runs at
the designed rate. A flow that could not be measured (a host's own side failed) proves nothing either way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.burnin.pairs import Measurement, PairRunner, pack_rounds
from provision.fabric_routes import routing_for
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from topology.model import Cable, Fabric

FLOWS_PER_CABLE = 3


@dataclass
class CableRecheck:
    cable: Cable
    flows: list[tuple[str, str]] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """``healthy`` (every flow at rate), ``still_bad`` (any flow slow), ``untested`` (no flow measured)."""
        measured = [measurement for measurement in self.measurements if measurement.measured]
        if not measured:
            return "untested"
        return "healthy" if all(measurement.passed for measurement in measured) else "still_bad"

    def as_dict(self, key: str) -> dict[str, Any]:
        return {"cable": key, "verdict": self.verdict,
                "evidence": [measurement.describe() for measurement in self.measurements]}


def recheck_cables(loaded: LoadedSpec, fabric: Fabric, nodes: list[ResolvedNode], state_dir: Path,
                   cables: list[Cable], *, seed: int) -> list[CableRecheck]:
    """Measure ``FLOWS_PER_CABLE`` one-way flows through each of ``fabric``'s ``cables`` between the in-service
    ``nodes``."""
    router = routing_for(loaded, fabric, state_dir).router  # aimed through the cable by the SM's own tables
    runner = PairRunner(loaded, nodes, state_dir, seed=seed)
    live = {hca for hcas in runner.rails.values() for hca in hcas}
    rng = random.Random(seed)
    rechecks = []
    for cable in cables:
        flows = router.aimed_flows(router.index[cable], rng, FLOWS_PER_CABLE,
                                   allowed=lambda flow: flow[0] in live and flow[1] in live
                                   and flow[0].split("/")[0] != flow[1].split("/")[0])
        rechecks.append(CableRecheck(cable, list(dict.fromkeys(flows))))
    owners: dict[tuple[str, str], list[CableRecheck]] = {}
    for recheck in rechecks:
        for flow in recheck.flows:
            owners.setdefault(flow, []).append(recheck)
    for batch in pack_rounds(list(owners)):  # each HCA in one test at a time, every cable's flows together
        for measurement in runner.measure(batch, "recheck", bidirectional=False):
            for recheck in owners[(measurement.client, measurement.server)]:
                recheck.measurements.append(measurement)
    return rechecks
