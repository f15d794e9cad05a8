"""Tomography on the routes the subnet manager chose: the simulated SM numbers LIDs by GUID and programs min-hop
tables of its own, so the example's degraded spine-core cable is slow for the flows *its* tables send through it.
Routed by those tables (read back from the dumps the simulator writes, as an operator would copy them off the SM
host) the tomography names the cable; routed by our design's D-mod-K over the same fabric it names another one.
That second half is what makes the first mean something: the simulator can disagree with our routing model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.fabric_routes import routing_for
from provision.ib_fabric import design_fabric
from provision.sim import fabric as sim_fabric
from provision.sim.paths import fabric_dir
from provision.spec import load_spec
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
