"""``examples/sim-nvl72.yaml`` is ``examples/gb200-nvl72.yaml`` on the simulator, and only that: what `make
demo-nvl72` applies is the site's example with the keys a simulated cluster needs in place of a site's. A change to
the racks, domains, policies, hardware, software pins, fabric or stages of one without the other fails here, so the
demo keeps showing the example."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from provision.spec import load_spec
from tests.conftest import ROOT

pytestmark = pytest.mark.fast

#: What the simulated twin may say differently: where the trays are and how they are reached, the simulator's
#: repositories in place of a site image's, CPU workers' sizes and the soak's clock, the failure budget its faults
#: need, the metrics folder, and the simulation itself. Paths of dicts; a list (the groups) is walked by index.
SIMULATED = (("nodes", "groups", 0, "address_start"), ("nodes", "groups", 1, "address_start"),
             ("software", "repositories"), ("software", "runtime"), ("burnin", "ranks_per_node"),
             ("burnin", "nccl_env"), ("burnin", "thresholds", "matmul_peer_fraction"),
             ("burnin", "thresholds", "collective_timeout_s"), ("burnin", "workload"), ("burnin", "soak"),
             ("admission", "max_failure_percent"), ("connection",), ("metrics",), ("simulation",))


def _without_simulated(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each ``SIMULATED`` key taken out, and a section that leaves empty taken out with it (the example
    has no ``admission`` or ``burnin.thresholds`` of its own)."""
    for path in SIMULATED:
        trail: list[Any] = [data]  # the containers down to the key's parent
        for key in path[:-1]:
            node = trail[-1]
            if not (isinstance(node, list) or key in node):
                break
            trail.append(node[key])
        else:
            trail[-1].pop(path[-1], None)
            for parent, key in reversed(list(zip(trail, path[:-1], strict=False))):
                if parent[key] == {}:
                    del parent[key]
    return data


def test_the_simulated_twin_is_the_example_but_for_the_simulators_keys() -> None:
    example = yaml.safe_load((ROOT / "examples" / "gb200-nvl72.yaml").read_text())
    twin = yaml.safe_load((ROOT / "examples" / "sim-nvl72.yaml").read_text())
    assert _without_simulated(twin) == _without_simulated(example)


def test_the_twin_injects_each_fault_a_racks_burn_in_must_catch() -> None:
    """A fault of each kind issue 53 lists, each on a tray of the racks the example describes."""
    loaded = load_spec(ROOT / "examples" / "sim-nvl72.yaml")
    assert loaded.spec.simulation is not None
    kinds = {fault.kind for fault in loaded.spec.simulation.faults}
    assert kinds == {"fabric_insufficient_resources", "fabric_unhealthy", "foreign_partition", "imex_down",
                     "nvlink_xid149", "degraded_switch_tray", "nvlink_recovery_growing"}
    assert {node.name for node in loaded.nodes} == {f"gb{index:03d}" for index in range(1, 37)}
