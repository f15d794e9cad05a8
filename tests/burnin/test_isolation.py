"""Adaptive group testing (provision.burnin.isolation) against an oracle: a group fails when it holds a bad node."""

from __future__ import annotations

import random

import pytest

from provision.burnin.isolation import imbue_two_stage, isolate, lower_bound

pytestmark = pytest.mark.fast  # pure: part of make test-fast


def _oracle(bad: set[str], seen: list[list[list[str]]], min_group: int = 2):
    def run_round(groups: list[list[str]]) -> list[bool]:
        members = [node for group in groups for node in group]
        assert len(members) == len(set(members)), f"a node in two parallel groups: {groups}"
        assert all(len(group) >= min_group for group in groups), f"a group too small to run: {groups}"
        seen.append(groups)
        return [bool(bad & set(group)) for group in groups]
    return run_round


@pytest.mark.parametrize("n,d", [(16, 1), (16, 2), (48, 1), (48, 3), (128, 2)])
def test_finds_exactly_the_bad_nodes_in_disjoint_runnable_groups(n: int, d: int) -> None:
    nodes = [f"gpu{index:03d}" for index in range(n)]
    for seed in range(40):
        bad = set(random.Random(seed).sample(nodes, d))
        rounds: list[list[list[str]]] = []
        found = isolate(nodes, _oracle(bad, rounds))
        assert sorted(found.confirmed) == sorted(bad)
        assert not found.unconfirmed and not found.unresolved
        assert found.launches == sum(len(groups) for groups in rounds)
        assert set(found.known_good) == set(nodes) - bad


def test_one_bad_node_in_48_takes_fewer_launches_than_imbues_grid() -> None:
    nodes = [f"n{index:02d}" for index in range(48)]
    worst = max(isolate(nodes, _oracle({bad}, [])).launches for bad in nodes)
    assert imbue_two_stage(48, 1) == 14
    assert lower_bound(48, 1) < worst <= 8


def test_a_suspect_is_confirmed_beside_a_healthy_partner() -> None:
    rounds: list[list[list[str]]] = []
    found = isolate(["a", "b", "c", "d"], _oracle({"d"}, rounds))
    assert found.confirmed == ["d"]
    last = rounds[-1]
    assert len(last) == 1 and "d" in last[0] and set(last[0]) - {"d"} <= set(found.known_good)


def test_a_node_bad_only_by_elimination_is_reported_unconfirmed() -> None:
    calls = {"n": 0}

    def flaky(groups: list[list[str]]) -> list[bool]:  # the whole failed once; nobody fails again
        calls["n"] += 1
        return [False for _ in groups]

    found = isolate(["a", "b", "c", "d"], flaky)
    assert found.confirmed == []
    assert found.unconfirmed  # the half left untested was inferred bad, then passed: not quarantined


def test_known_good_nodes_pad_and_all_bad_nodes_are_still_found() -> None:
    found = isolate(["x", "y"], _oracle({"x", "y"}, []), known_good=["ok1", "ok2"])
    assert sorted(found.confirmed) == ["x", "y"]
    alone = isolate(["x", "y"], _oracle({"x", "y"}, [], min_group=1))
    assert sorted(alone.confirmed) == ["x", "y"]  # no healthy partner anywhere: each tested alone


def test_the_round_limit_leaves_the_open_groups_listed() -> None:
    found = isolate([f"n{index}" for index in range(32)], _oracle({"n5"}, []), max_rounds=2)
    assert found.rounds == 2 and not found.confirmed
    assert any("n5" in group for group in found.unresolved)


def _between_nodes(bad: set[str], seen: list[list[list[str]]]):
    """A fault on the path between nodes (a corrupting HCA, a bad cable): a node alone never shows it."""
    def run_round(groups: list[list[str]]) -> list[bool]:
        members = [node for group in groups for node in group]
        assert len(members) == len(set(members)), f"a node in two parallel groups: {groups}"
        seen.append(groups)
        return [len(group) >= 2 and bool(bad & set(group)) for group in groups]
    return run_round


@pytest.mark.parametrize("n", range(2, 8))
def test_a_fault_between_nodes_never_blames_a_healthy_node(n: int) -> None:
    # every bad set of every small fleet: a pass alone clears nobody, so nobody healthy is padded into blame
    # (six hosts with one healthy partner once quarantined two healthy nodes for a corrupting one)
    nodes = [f"sim{index:02d}" for index in range(1, n + 1)]
    for mask in range(1, 2 ** n):
        bad = {node for index, node in enumerate(nodes) if mask >> index & 1}
        rounds: list[list[list[str]]] = []
        found = isolate(nodes, _between_nodes(bad, rounds))
        assert set(found.confirmed) <= bad, (bad, found)
        assert not set(found.known_good) & bad, (bad, found)
        assert found.launches == sum(len(groups) for groups in rounds)
        if n - len(bad) >= 2:  # a healthy pair exists: every bad node is found beside a healthy partner
            assert sorted(found.confirmed) == sorted(bad), (bad, found.log)
            assert set(found.known_good) == set(nodes) - bad


def test_three_nodes_one_corrupting_finds_it_without_running_anyone_alone() -> None:
    rounds: list[list[list[str]]] = []
    found = isolate(["sim04", "sim05", "sim06"], _between_nodes({"sim04"}, rounds))
    assert found.confirmed == ["sim04"] and sorted(found.known_good) == ["sim05", "sim06"]
    assert all(len(group) >= 2 for groups in rounds for group in groups)


def test_a_node_that_passes_only_alone_is_untestable_not_good() -> None:
    # one healthy node beside one whose fault shows only between nodes: no healthy pair exists
    found = isolate(["a", "b"], _between_nodes({"a"}, []))
    assert found.confirmed == [] and found.known_good == []
    assert sorted(found.untestable) == ["a", "b"] and not found.unresolved
    assert found.launches == 2  # each alone once: the failing pair itself is not run again
