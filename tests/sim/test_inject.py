"""The simulator's fault injectors against the spec's fault catalogue: every node and rank fault a spec may name
has the injector that puts it into a host, and no injector puts in a fault no spec can name. (Each fault caught at
its stage and check is the burn-in's and the bench's: tests/burnin/, bench/faulty_runs.py.)"""

from __future__ import annotations

import pytest

from provision.sim.inject import INJECTORS
from provision.spec.faults import CATALOG

pytestmark = pytest.mark.fast


def test_every_node_and_rank_fault_has_its_injector_and_no_other() -> None:
    on_hosts = {name for name, kind in CATALOG.items() if kind.layer in ("node", "rank")}
    assert set(INJECTORS) == on_hosts
    fabric = {name for name, kind in CATALOG.items() if kind.layer == "fabric"}
    assert fabric and not fabric & set(INJECTORS), "a cable's faults live in the simulated fabric, not on a host"
    assert all(callable(injector) for injector in INJECTORS.values())
