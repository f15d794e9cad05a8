"""Pair-test scheduling and reading perftest outcomes: pure functions, on the example fabrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.burnin.pairs import Measurement, read_outcome
from provision.network.sources import design_fabric
from provision.spec import load_spec
from tests.simhelpers import write_spec
from topology import pairing
from topology.model import CORE, SPINE
from topology.routes import Router

pytestmark = pytest.mark.fast  # pure: part of make test-fast


def _rails(tmp_path: Path, hosts: str) -> tuple[Router, dict[str, list[str]]]:
    loaded = load_spec(write_spec(tmp_path, [], hosts=hosts))
    router = Router(design_fabric(loaded))
    order = list(loaded.spec.hardware["hgx-h100"].rails)
    rails = {node.name: [f"{node.name}/{hca}" for hca in order] for node in loaded.nodes}
    return router, rails


@pytest.mark.parametrize("hosts", ["sim[01-16]", "sim[01-07]", "sim[01-02]"])
def test_rounds_are_matchings_that_cover_every_coverable_switch_cable(tmp_path: Path, hosts: str) -> None:
    router, rails = _rails(tmp_path, hosts)
    plan = pairing.schedule(router, rails, seed=1)
    assert plan.covered == plan.coverable and plan.coverable
    assert len(plan.rounds) <= 3
    for tests in plan.rounds:
        busy = [host for test in tests for host in test[:2]]
        assert len(busy) == len(set(busy)), "a host is in two tests of one round"
        assert len(rails) - len(busy) <= 1, "a round leaves more than the odd host idle"
    assert {host for tests in plan.rounds for test in tests for host in test[:2]} == set(rails)


def test_core_cables_are_covered_by_cross_rail_tests(tmp_path: Path) -> None:
    router, rails = _rails(tmp_path, "sim[01-16]")
    plan = pairing.schedule(router, rails, seed=1)
    kind = router.fabric.kind
    core = {number for number in plan.coverable
            if {kind(router.cables[number].a[0]), kind(router.cables[number].b[0])} == {SPINE, CORE}}
    assert core and core <= plan.covered
    same_rail = frozenset().union(*(plan.cables_of[test] for tests in plan.rounds for test in tests if test[2] == 0))
    assert not core & same_rail, "same-rail traffic turns at the spines in a rail-optimized fabric"
    assert pairing.switch_cables(router) == plan.coverable


def test_hca_pairs_shift_rails() -> None:
    rails = {"a": ["a/0", "a/1", "a/2"], "b": ["b/0", "b/1", "b/2"]}
    assert pairing.hca_pairs(rails, ("a", "b", 0)) == [("a/0", "b/0"), ("a/1", "b/1"), ("a/2", "b/2")]
    assert pairing.hca_pairs(rails, ("a", "b", 2)) == [("a/0", "b/2"), ("a/1", "b/0"), ("a/2", "b/1")]
    assert pairing.rail_flows(rails, ("a", "b", 1))[:2] == [("a/0", "b/1"), ("b/1", "a/0")]


TABLE = """---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 1048576    20               772.11            771.40\t\t   0.091970
---------------------------------------------------------------------------------------
"""


def _side(rc: int = 0, stdout: str = "", stderr: str = "", timed_out: bool = False) -> dict:
    return {"rc": rc, "stdout": stdout, "stderr": stderr, "timed_out": timed_out}


def _read(server: dict | str, client: dict | str) -> Measurement:
    outcomes = {"h1": client if isinstance(client, str) else {("mlx5_0", "client"): client},
                "h2": server if isinstance(server, str) else {("mlx5_3", "server"): server}}
    return read_outcome(Measurement("h1/mlx5_0", "h2/mlx5_3", 720.0, "sweep 1"), outcomes)


def test_a_measured_pair_carries_the_client_figure() -> None:
    measured = _read(_side(stdout=TABLE), _side(stdout=TABLE))
    assert measured.gbps == pytest.approx(771.4) and measured.passed and measured.at_fault is None
    slow = _read(_side(), _side(stdout=TABLE.replace("771.40", "401.00")))
    assert slow.measured and not slow.passed and slow.at_fault is None


def test_a_side_that_fails_on_its_own_is_at_fault_not_its_partner() -> None:
    port_down = _read(_side(1, stderr=" Port number 1 state is Down\n Couldn't set up local port"),
                      _side(1, stderr=" Couldn't connect to 127.0.0.12:19000\n Unable to open file descriptor"))
    assert port_down.at_fault == "h2" and port_down.error == (
        "h2/mlx5_3 (server): Port number 1 state is Down / Couldn't set up local port")
    no_cuda = _read(_side(stdout=TABLE), _side(1, stderr=" Couldn't allocate MR with CUDA memory"))
    assert no_cuda.at_fault == "h1" and "CUDA" in no_cuda.error
    unreachable = _read(_side(stdout=TABLE), "cannot reach the node: TimeoutError: timed out")
    assert unreachable.at_fault == "h1"


def test_a_client_whose_server_was_stopped_under_it_is_not_at_fault() -> None:
    """Issue 55's healthy bench, seed 2: a server stopped mid-test (its deadline, or by the helper as never
    reached), and its client's writes then failed; neither host failed on its own, so neither is blamed (the
    path is re-measured by the localizer like any unmet pair)."""
    dropped = _read(_side(-9, stderr=" No client connected within 12 s (stopped by fabric_tests)\n"),
                    _side(1, stderr=" Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x81\n"))
    assert dropped.at_fault is None and not dropped.passed
    assert "its server h2/mlx5_3 was stopped" in dropped.error
    deadline = _read(_side(-9, timed_out=True), _side(1, stderr=" Completion with error at client\n"))
    assert deadline.at_fault is None
    own = _read(_side(stdout=TABLE), _side(1, stderr=" Completion with error at client\n"))
    assert own.at_fault == "h1", "a server that finished: the client's failure is its own"


def test_a_pair_that_never_met_is_the_paths_problem() -> None:
    hung = _read(_side(-9, timed_out=True), _side(-9, stderr=" Couldn't connect", timed_out=True))
    assert hung.at_fault is None and not hung.measured and not hung.passed and hung.error == "timed out"
