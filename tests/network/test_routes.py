"""Tomography on the routes the subnet manager chose: the simulated SM numbers LIDs by GUID and programs min-hop
tables of its own, so the example's degraded spine-core cable is slow for the flows *its* tables send through it.
Routed by those tables (read back from the dumps the simulator writes, as an operator would copy them off the SM
host) the tomography names the cable; routed by our design's D-mod-K over the same fabric it names another one.
That second half is what makes the first mean something: the simulator can disagree with our routing model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.network.routes import routing_for
from provision.network.sources import design_fabric
from provision.sim import fabric as sim_fabric
from provision.spec import load_spec
from provision.state.layout import fabric_dir
from tests.conftest import example_text
from topology import tomography
from topology.routes import Router
from topology.smroutes import TableRouter
from topology.tomography import Localizer, localize

pytestmark = pytest.mark.fast
DEGRADED = ("spine-g03-02", 6)  # the example's degraded_link fault


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory):
    directory = tmp_path_factory.mktemp("routes")
    spec = directory / "spec.yaml"
    spec.write_text(example_text())
    loaded = load_spec(spec)
    state = directory / ".provision" / "sim16"
    sim_fabric.write_dump(loaded, [], fabric_dir(state))
    fabric = design_fabric(loaded)
    return loaded, fabric, state


def _named(router: Router, truth: TableRouter, bad: int) -> set[int]:
    """What the tomography names when a test fails exactly when the SM's tables send one of its flows through
    ``bad`` (no noise: the disagreement below is the routing's alone)."""
    def run(test: tomography.Test) -> bool:
        return any(bad in truth.path(source, target) for source, target in test.flows)

    localizer = Localizer(router, seed=3)
    localize(localizer, run, budget=120)
    return set(localizer.found)


def test_the_sms_own_routes_name_the_degraded_cable_and_d_mod_k_names_another(simulated) -> None:
    loaded, fabric, state = simulated
    routing = routing_for(loaded, fabric, state)
    assert isinstance(routing.router, TableRouter), routing.basis
    assert routing.basis == "the subnet manager's forwarding tables (opensm-lfts.dump)"
    truth = routing.router
    bad = truth.index[fabric.cable_at(DEGRADED)]
    assert _named(truth, truth, bad) == {bad}
    wrong = _named(Router(fabric), truth, bad)
    assert bad not in wrong, "D-mod-K agreed with the SM's tables here: the simulator could not disagree"
    assert not truth.unrouted  # every flow the tests used, the tables carried


def test_the_sms_tables_are_not_d_mod_k(simulated) -> None:
    """Most flows between two leaves take another spine or core by the SM's tables than by D-mod-K."""
    _loaded, fabric, _state = simulated
    truth = routing_for(*simulated).router
    ours = Router(fabric)
    pairs = [(source, target) for source in ours.hcas[::7] for target in ours.hcas[::5] if source != target]
    differ = sum(truth.path(source, target) != ours.path(source, target) for source, target in pairs)
    assert differ > len(pairs) // 2, (differ, len(pairs))


def test_without_tables_the_design_routes_and_says_so(tmp_path: Path, simulated) -> None:
    loaded, fabric, _state = simulated
    routing = routing_for(loaded, fabric, tmp_path)
    assert type(routing.router) is Router and routing.basis == "the design's D-mod-K (no forwarding tables given)"
    data = yaml.safe_load(example_text())
    data["fabric"]["routing_tables"] = {"lfts": "lfts.dump", "discovery": "ibnetdiscover.txt"}
    (tmp_path / "lfts.dump").write_text("not a table\n")
    (tmp_path / "ibnetdiscover.txt").write_text((fabric_dir(_state) / "ibnetdiscover.txt").read_text())
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    routing = routing_for(load_spec(spec), fabric, tmp_path)
    assert type(routing.router) is Router
    assert routing.basis.startswith("the design's D-mod-K (the forwarding tables in lfts.dump could not be used: "
                                    "line 1: not a forwarding-table line"), routing.basis


# -- adaptive routing ----------------------------------------------------------------------------------------------
# With fabric.adaptive_routing the switches spray each flow over all its min-hop paths: the simulator does so over
# its own SM's AR groups, hop by hop (provision/sim/subnet_manager.py), and a degraded cable slows a flow to
# factor / share. The tomography knows only that a flow may cross every cable of its min-hop paths, each with the
# share path counting gives (topology.routes.AdaptiveRouter), and not how degraded a bad cable is.

def _adaptive(factor: float, directory: Path, targets: tuple[str, ...] = (f"{DEGRADED[0]}/{DEGRADED[1]}",)):
    """The example's fabric with adaptive routing declared and its spine-core cable (or ``targets``) degraded to
    ``factor``: the simulator's link-quality file (what its ib_write_bw reads) decides which tests are slow."""
    from provision.sim.linkquality import flow_factors

    data = yaml.safe_load(example_text())
    data["fabric"]["adaptive_routing"] = True
    spec = directory / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    adaptive = load_spec(spec)
    faults = [{"kind": "degraded_link", "target": target, "params": {"factor": factor}} for target in targets]
    sim_fabric.write_link_quality(adaptive, faults, directory)
    cache: dict[tuple[str, str], float] = {}

    def run(test: tomography.Test) -> bool:
        missing = [flow for flow in test.flows if flow not in cache]
        cache.update(zip(missing, flow_factors(directory, missing), strict=True))
        return any(cache[flow] < 0.9 for flow in test.flows)

    return adaptive, run


def test_our_shares_of_a_sprayed_flow_are_the_simulators(simulated) -> None:
    """Two implementations, one answer: path counting on the design (ours) and the simulated SM spraying hop by
    hop over its AR groups give every cable the same share of a flow; and per node pair, route()'s link shares."""
    import random

    from provision.hostmodel.devices import hca_guid
    from provision.sim import subnet_manager
    from topology.routes import AdaptiveRouter, route

    loaded, fabric, _state = simulated
    seed = loaded.spec.simulation.seed
    manager = subnet_manager.program(fabric, lambda node: hca_guid(seed, *node.split("/", 1)))
    router = AdaptiveRouter(fabric)
    rng = random.Random(4)
    for _ in range(40):
        source, target = rng.sample(router.hcas, 2)
        ours = router.ecmp_shares(source, target)
        theirs: dict[int, float] = {}
        for hop, share in manager.adaptive_shares(fabric, source, target).items():
            cable = fabric.cable_at(hop)
            theirs[router.index[cable]] = theirs.get(router.index[cable], 0.0) + share
        assert ours.keys() == theirs.keys() == set(router.path(source, target))
        assert all(ours[cable] == pytest.approx(theirs[cable]) for cable in ours)
        by_pair: dict[frozenset[str], float] = {}
        for cable, share in ours.items():
            key = frozenset((router.cables[cable].a[0], router.cables[cable].b[0]))
            by_pair[key] = by_pair.get(key, 0.0) + share
        expected = route(fabric, source, target)
        assert expected is not None and by_pair == pytest.approx(expected.link_share)
        assert sum(ours.values()) == pytest.approx(expected.hops)


def test_under_adaptive_routing_a_badly_degraded_cable_is_named_in_its_group_and_static_routes_blame_others(
        simulated, tmp_path: Path) -> None:
    """Every cross-rail flow of rail 2 crosses all 16 of its spine-core cables, each with a sixteenth of it: the
    degraded one cannot be told from the other 15, and the tomography says so (one suspect, 15 indistinguishable,
    confidence 1/16). Assuming one static path per flow instead, it names cables that are healthy."""
    from topology.routes import AdaptiveRouter

    adaptive, run = _adaptive(0.02, tmp_path)
    _loaded, fabric, state = simulated
    routing = routing_for(adaptive, fabric, state)
    assert isinstance(routing.router, AdaptiveRouter) and routing.mode == "ecmp"
    assert routing.basis.startswith("adaptive routing")
    router = routing.router
    bad = router.index[fabric.cable_at(DEGRADED)]
    localizer = Localizer(router, seed=3)
    used = localize(localizer, run, budget=60)
    [suspect] = localizer.suspects()
    group = {router.index[suspect.cable], *(router.index[cable] for cable in suspect.indistinguishable)}
    assert bad in group and len(group) == 16, used
    assert {router.cables[cable].a[0].rsplit("-", 1)[0] for cable in group} == {"spine-g03"}
    assert suspect.confidence == pytest.approx(1 / 16)
    assert used < 30  # no test asked for ever once nothing is left to learn
    static = Localizer(Router(fabric), seed=3)
    localize(static, run, budget=60)
    assert set(static.found) - group, "static routes named only the group: the simulator could not disagree"


def test_under_adaptive_routing_a_mildly_degraded_cable_slows_no_flow_and_nothing_is_blamed(
        simulated, tmp_path: Path) -> None:
    """At half its rate the cable carries a sixteenth of any flow with room to spare: no pair test is slow, and
    the tomography names nothing (its counters are what can find it), rather than some healthy cable."""
    from topology.routes import AdaptiveRouter

    _adaptive_spec, run = _adaptive(0.5, tmp_path)
    _loaded, fabric, _state = simulated
    localizer = Localizer(AdaptiveRouter(fabric), seed=3)
    used = localize(localizer, run, budget=60)
    assert localizer.found == [] and used < 10
    assert not localizer.done()  # nor does it call the fabric clean: a cable no flow leans on can hide there


def test_under_adaptive_routing_three_bad_cables_are_each_named_in_their_group_and_nothing_else(
        tmp_path: Path) -> None:
    """Two leaf uplinks and a host's cable: each uplink comes out with its leaf's other three (every flow leaving
    the leaf crosses all four), the host cable alone, and no group holds none of them."""
    from topology.routes import AdaptiveRouter

    targets = ("leaf-su03-r1/5", "leaf-su02-r0/5", "leaf-su03-r0/2")
    _adaptive_spec, run = _adaptive(0.02, tmp_path, targets)
    fabric = design_fabric(_adaptive_spec)
    router = AdaptiveRouter(fabric)
    bad = {router.index[fabric.cable_at((name, int(port)))] for name, port in (t.split("/") for t in targets)}
    localizer = Localizer(router, seed=1)
    used = localize(localizer, run, budget=80)
    groups = [{cable, *localizer.twins.get(cable, ())} for cable in localizer.found]
    assert sorted(len(group) for group in groups) == [1, 4, 4], (used, groups)
    assert all(len(group & bad) == 1 for group in groups) and set().union(*groups) >= bad


def test_a_recheck_under_adaptive_routing_clears_only_a_cable_a_flow_leant_on_wholly() -> None:
    from provision.burnin.pairs import Measurement
    from provision.burnin.recheck import CableRecheck
    from topology.model import Cable

    cable = Cable(("spine-g03-02", 6), ("core-p02-02", 3))
    flows = [("sim01/mlx5_4", "sim05/mlx5_0"), ("sim02/mlx5_4", "sim09/mlx5_3")]
    at_rate = [Measurement(client, server, 360.0, "recheck", bidirectional=False, gbps=392.0)
               for client, server in flows]
    sprayed = CableRecheck(cable, flows, at_rate, {flow: 1 / 16 for flow in flows})
    assert sprayed.verdict == "untested" and sprayed.as_dict("x")["largest_share"] == 0.062
    assert CableRecheck(cable, flows, at_rate).verdict == "healthy"  # static routes: the flows crossed it
    whole = CableRecheck(cable, flows, at_rate, {flows[0]: 1.0, flows[1]: 1 / 16})
    assert whole.verdict == "healthy"
    slow = [Measurement(*flows[0], 360.0, "recheck", bidirectional=False, gbps=120.0)]
    # a slow flow that put a sixteenth of itself on the cable may have been slowed by any of its other 15
    assert CableRecheck(cable, flows[:1], slow, {flows[0]: 1 / 16}).verdict == "untested"
    assert CableRecheck(cable, flows[:1], slow, {flows[0]: 1.0}).verdict == "still_bad"
    assert CableRecheck(cable, flows[:1], slow).verdict == "still_bad"  # static routes: it crossed this cable


def test_the_pairs_report_says_what_adaptive_routing_costs_the_naming(simulated) -> None:
    from provision.burnin.pairs import Measurement, _adaptive_naming
    from topology.routes import AdaptiveRouter

    _loaded, fabric, _state = simulated
    cross_rail = [Measurement("sim01/mlx5_4", "sim05/mlx5_0", 360.0, "sweep 1", gbps=390.0),
                  Measurement("sim02/mlx5_4", "sim10/mlx5_3", 360.0, "sweep 1", gbps=391.0),
                  Measurement("sim03/mlx5_4", "sim04/mlx5_4", 360.0, "sweep 1", gbps=392.0)]
    text = _adaptive_naming(AdaptiveRouter(fabric), cross_rail)
    assert text.startswith("adaptive routing: a measured flow could take any of a median 16 min-hop paths")
    assert "named as one group" in text and "cannot be seen" in text
    assert _adaptive_naming(AdaptiveRouter(fabric), []) == "adaptive routing: no flow was measured"
