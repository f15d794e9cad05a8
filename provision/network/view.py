"""The fabric the topology commands work on, wherever it comes from.

* a cluster spec with fat-tree parameters: the design, every design rule applies;
* a cluster spec, or a spec of only ``cluster`` and ``fabric``, with a ``cabling_file``: the plan's fabric;
* no spec at all: the cabling plans named on the command line (``--design PLAN``).

A plan's fabric is whatever the plan says (``topology.planfabric``): its tiers are read from the graph and the
rules that need the design's intent are not applicable. Hosts are reachable (for the IPoIB map from their sysfs,
or to send port disables) only when a cluster spec names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from provision.errors import UsageProblem
from provision.network.sources import (
    AuditReport,
    Plans,
    audit_against_plans,
    audit_against_spec,
    design_fabric,
    read_plans,
)
from provision.spec import LoadedFabricSpec, LoadedSpec
from provision.spec.model import FabricSpec, LinkHealth
from topology.ibnetdiscover import Discovery
from topology.model import HCA, Fabric
from topology.planfabric import fabric_from_plan


@dataclass
class FabricView:
    name: str
    fabric: Fabric
    link_health: LinkHealth
    #: The spec that names the hosts, when there is one (sessions to hosts need it).
    cluster_spec: LoadedSpec | None
    #: The plans the fabric was read from; None when it is the spec's fat-tree design.
    plans: Plans | None
    #: Where relative paths and the default state directory are anchored.
    base_dir: Path

    @property
    def designed(self) -> bool:
        return self.plans is None

    @property
    def plan_problems(self) -> list[str]:
        return self.plans.unread if self.plans is not None else []

    def audit(self, discovery: Discovery) -> AuditReport:
        if self.plans is None:
            assert self.cluster_spec is not None
            return audit_against_spec(self.cluster_spec, discovery, self.fabric)
        return audit_against_plans(self.plans.cables, discovery)

    def rails(self) -> dict[str, set[str]]:
        """Host → its HCAs: the spec's rails, or the plan's HCAs."""
        if self.cluster_spec is not None:
            loaded = self.cluster_spec
            return {node.name: set(loaded.spec.hardware[node.hardware].rails) for node in loaded.nodes}
        found: dict[str, set[str]] = {}
        for _node, data in self.fabric.graph.nodes(data=True):
            if data["kind"] == HCA:
                found.setdefault(data["host"], set()).add(data["hca"])
        return found


def view_of_spec(loaded: LoadedFabricSpec) -> FabricView:
    """A cluster spec's design, or the cabling file of any spec."""
    health = loaded.spec.fabric.link_health
    cabling_file = loaded.cabling_file
    if cabling_file is None:
        assert loaded.cluster_spec is not None  # a fabric-only spec always names a cabling file
        return FabricView(loaded.spec.cluster.name, design_fabric(loaded.cluster_spec), health, loaded.cluster_spec,
                          None, loaded.path.parent)
    return _view_of_plans(loaded.spec.cluster.name, [cabling_file], health, loaded.cluster_spec, loaded.path.parent)


def view_of_cluster(loaded: LoadedSpec) -> FabricView:
    """A cluster spec already loaded (by a command that also needs its nodes)."""
    return view_of_spec(LoadedFabricSpec(FabricSpec(cluster=loaded.spec.cluster, fabric=loaded.spec.fabric),
                                         loaded.path, loaded.sha256, loaded))


def view_of_plans(paths: Sequence[Path]) -> FabricView:
    """No spec: the fabric of the plans given, with the default link-health policy."""
    if not paths:
        raise UsageProblem("give a spec, or the cabling plan(s) with --design")
    return _view_of_plans(paths[0].stem, list(paths), LinkHealth(), None, Path.cwd())


def _view_of_plans(name: str, paths: list[Path], health: LinkHealth, cluster_spec: LoadedSpec | None,
                   base_dir: Path) -> FabricView:
    each = [read_plans([path]) for path in paths]
    plans = Plans([cable for plan in each for cable in plan.cables], [line for plan in each for line in plan.unread])
    fabric, conflicts = fabric_from_plan(plans.cables)
    origin = {(cable.a, cable.b, cable.line): path for path, plan in zip(paths, each, strict=True)
              for cable in plan.cables}
    for problem in conflicts:
        plans.unread.append(f"{origin.get(problem.cable, paths[0])}:{problem.line}: {problem.message}")
    return FabricView(name, fabric, health, cluster_spec, plans, base_dir)
