"""Which routes the burn-in's pair tests, tomography and rechecks follow, and the words that say which.

A flow's path is the subnet manager's to choose: with its forwarding tables (``fabric.routing_tables``, or on a
simulated cluster the tables its subnet manager programmed, kept beside its ``ibnetdiscover`` dump as an operator
would copy them off the SM host) every flow is routed by them (:class:`topology.smroutes.TableRouter`); without,
by the design's D-mod-K, which is what a fat-tree engine would choose only with the LIDs in the design's order.
With ``fabric.adaptive_routing`` no single path is known: a flow may take any min-hop path
(:class:`topology.routes.AdaptiveRouter`), whatever the tables say.
Tables that cannot be read, or name none of the design's switches, fall back to D-mod-K, saying why; a flow they
do not carry (a port down at the sweep) is routed by D-mod-K alone and counted. A tomography that names a cable
says which routing it assumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from provision.spec import LoadedSpec
from provision.state.layout import fabric_dir
from topology import ibnetdiscover, lfts
from topology.errors import LineError
from topology.model import Fabric
from topology.routes import AdaptiveRouter, Router
from topology.smroutes import RouteError, TableRouter, TableRoutes, design_tables

#: The simulated fabric's dumps, under its state directory's fabric folder.
SIMULATED = ("opensm-lfts.dump", "ibnetdiscover.txt")


@dataclass(frozen=True)
class Routing:
    router: Router
    basis: str  # what the routes were read from, for reports and tickets

    @property
    def mode(self) -> str:
        """How a results file names this routing (what ``topology flaps --results`` reads back)."""
        if self.router.adaptive:
            return "ecmp"
        return "tables" if isinstance(self.router, TableRouter) else "dmodk"


ADAPTIVE = "adaptive routing (fabric.adaptive_routing: any min-hop path, each cable weighed by its share of them)"


def routing_for(loaded: LoadedSpec, fabric: Fabric, state_dir: Path) -> Routing:
    if loaded.spec.fabric is not None and loaded.spec.fabric.adaptive_routing:
        return Routing(AdaptiveRouter(fabric), ADAPTIVE)
    given = loaded.spec.fabric.routing_tables if loaded.spec.fabric is not None else None
    if given is not None:
        base = loaded.path.parent
        tables, discovery = (base / given.lfts).expanduser(), (base / given.discovery).expanduser()
    else:
        tables, discovery = (fabric_dir(state_dir) / name for name in SIMULATED)
        if not (tables.is_file() and discovery.is_file()):
            return Routing(Router(fabric), "the design's D-mod-K (no forwarding tables given)")
    try:
        routes = TableRoutes(lfts.parse_lfts(tables.read_text()), ibnetdiscover.parse(discovery.read_text()))
        router = TableRouter(fabric, design_tables(routes, fabric))
        if not router.tables:
            raise RouteError("no switch of the design has a table in the dump")
    except (OSError, LineError, RouteError) as error:
        return Routing(Router(fabric), f"the design's D-mod-K (the forwarding tables in {tables.name} could not "
                                       f"be used: {error})")
    return Routing(router, f"the subnet manager's forwarding tables ({tables.name})")
