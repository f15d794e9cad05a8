"""Slow rails judged from per-rail bus bandwidth, and the node behind one found by pairing (pure parts).

Healthy figures are nccl-tests' all_reduce_perf between two nodes with one H100 each over NDR (NVIDIA/nccl-tests
issue #232, out-of-place busbw): 18.53 GB/s at 2 MiB, 27.16 at 4 MiB, 36.24 at 8 MiB, 39.90 at 16 MiB, 41.31 at
32 MiB, "busbw is 50" at the largest sizes. A degraded rail is the field guide's "60-80 % from the start, flat"
(one GPU's NIC on a degraded link) at its low end, or a port trained at HDR, whose 200 Gb/s caps it at 25 GB/s.
"""

from __future__ import annotations

import itertools

import pytest

from provision.burnin.rails import FLOOR_MIN_BYTES, RailJudgement, attribute, first_pairs, judge_rails, slow

MIB = 2**20
H100_NDR_RAIL = {2 * MIB: 18.53, 4 * MIB: 27.16, 8 * MIB: 36.24, 16 * MIB: 39.90, 32 * MIB: 41.31}
LARGE = 8 * 2**30

pytestmark = pytest.mark.fast  # pure: part of make test-fast


def rows(rails: dict[int, dict[int, float]], op: str = "all_reduce") -> list[dict]:
    return [{"scope": f"rail{rail}", "op": op, "bytes": nbytes, "ranks": 2, "busbw_gbps": value}
            for rail, figures in rails.items() for nbytes, value in figures.items()]


def fleet(scale: dict[int, float], rails: int = 8) -> dict[int, dict[int, float]]:
    jitter = itertools.cycle([1.0, 0.98, 1.02, 0.99, 1.01])  # healthy rails differ by a few percent
    return {rail: {nbytes: value * scale.get(rail, 1.0) * next(jitter) for nbytes, value in H100_NDR_RAIL.items()}
            for rail in range(rails)}


def test_healthy_rails_agree() -> None:
    judged = judge_rails(rows(fleet({})), peer_fraction=0.7, floor_gbps=40.0)
    assert sorted(judged) == list(range(8))
    assert not slow(judged)
    for judgement in judged.values():
        assert judgement.peer_ratio is not None and 0.95 < judgement.peer_ratio < 1.05
        assert judgement.busbw_gbps > 40 and judgement.nbytes == 32 * MIB


def test_a_rail_at_sixty_percent_is_slow_beside_its_peers() -> None:
    judged = judge_rails(rows(fleet({5: 0.6})), peer_fraction=0.7, floor_gbps=None)
    assert list(slow(judged)) == [5]
    assert judged[5].peer_ratio is not None and 0.55 < judged[5].peer_ratio < 0.65
    assert "below 0.7" in judged[5].reason
    assert judged[0].peer_ratio is not None and judged[0].peer_ratio > 0.95  # one slow rail moves no median


def test_a_rail_at_eighty_percent_passes_the_peer_check() -> None:
    assert not slow(judge_rails(rows(fleet({2: 0.8})), peer_fraction=0.7, floor_gbps=None))


def test_the_floor_is_not_judged_where_a_healthy_rail_is_still_climbing() -> None:
    # 32 MiB is below FLOOR_MIN_BYTES: 41.31 GB/s there says nothing against a 45 GB/s floor
    assert 32 * MIB < FLOOR_MIN_BYTES
    assert not slow(judge_rails(rows(fleet({})), peer_fraction=0.7, floor_gbps=45.0))


def test_the_floor_catches_every_rail_at_hdr_rate() -> None:
    # a node whose eight ports all trained at HDR: the peers agree, only the floor sees it
    figures = {rail: {**H100_NDR_RAIL, LARGE: 25.0} for rail in range(8)}
    judged = judge_rails(rows(figures), peer_fraction=0.7, floor_gbps=40.0)
    assert sorted(slow(judged)) == list(range(8))
    assert "25 GB/s at 8589934592 B, below rail_busbw_gbps 40" in judged[3].reason
    healthy = {rail: {**H100_NDR_RAIL, LARGE: 50.0} for rail in range(8)}
    assert not slow(judge_rails(rows(healthy), peer_fraction=0.7, floor_gbps=40.0))


def test_other_scopes_and_a_single_rail() -> None:
    mixed = [{"scope": "all", "op": "all_reduce", "bytes": MIB, "ranks": 16, "busbw_gbps": 1.0},
             *rows({0: dict(H100_NDR_RAIL)})]
    judged = judge_rails(mixed, peer_fraction=0.7, floor_gbps=None)
    assert list(judged) == [0] and judged[0].peer_ratio is None and not judged[0].slow
    assert "no other rail to compare" in judged[0].reason


def test_every_operation_counts_and_the_median_ratio_decides() -> None:
    figures = fleet({1: 0.4}, rails=4)
    both = rows(figures) + rows(figures, op="all_gather")
    noisy = [dict(row, busbw_gbps=row["busbw_gbps"] * 3) if row["scope"] == "rail1" and row["bytes"] == 2 * MIB
             else row for row in both]  # one size disturbed on the slow rail does not clear it
    assert list(slow(judge_rails(noisy, peer_fraction=0.7, floor_gbps=None))) == [1]


def test_pairs_leave_an_odd_node_out() -> None:
    assert first_pairs(["a", "b", "c", "d", "e"]) == ([["a", "b"], ["c", "d"]], "e")
    assert first_pairs(["a", "b"]) == ([["a", "b"]], None)
    assert first_pairs(["a", "b", "c"]) == ([["a", "b"]], "c")


def oracle(bad: dict[str, set[int]], calls: list[list[list[str]]]):
    """Measures a round: a group is slow on the rails of any bad node in it."""
    def run_round(groups: list[list[str]]) -> list[dict[int, RailJudgement]]:
        calls.append(groups)
        return [{rail: RailJudgement(rail, 0.3, 10.0, 1, True, "slow") for name in group
                 for rail in bad.get(name, set())} for group in groups]
    return run_round


def test_one_bad_node_is_confirmed_beside_a_healthy_partner() -> None:
    nodes = [f"n{index:02d}" for index in range(1, 11)]
    calls: list[list[list[str]]] = []
    found = attribute(nodes, [3], oracle({"n06": {3}}, calls))
    assert list(found.confirmed) == ["n06"] and list(found.confirmed["n06"]) == [3]
    assert found.unconfirmed == ["n05"] and not found.systemic
    assert found.rounds == 2 and found.launches == 5 + 2
    for group in calls[1]:  # every second-round group pairs a suspect with a cleared node
        assert len(group) == 2 and group[1] in found.cleared


def test_a_rail_slow_on_every_node_is_systemic_and_names_nobody() -> None:
    nodes = ["a", "b", "c", "d", "e"]
    found = attribute(nodes, [1], oracle({name: {1} for name in nodes}, []))
    assert found.systemic and not found.confirmed
    assert found.launches == 2 + 2  # the pairs, then the odd node beside each member of the first slow pair


def test_three_nodes_find_the_bad_one_wherever_it_is() -> None:
    for bad in ("a", "b", "c"):
        found = attribute(["a", "b", "c"], [1], oracle({bad: {1}}, []))
        assert list(found.confirmed) == [bad] and not found.systemic, (bad, found)
        assert found.launches <= 4


def test_two_bad_nodes_among_five() -> None:
    found = attribute(["a", "b", "c", "d", "e"], [0], oracle({"a": {0}, "c": {0}}, []))
    assert sorted(found.confirmed) == ["a", "c"] and not found.systemic


def test_two_nodes_alone_cannot_name_one() -> None:
    found = attribute(["a", "b"], [0], oracle({"a": {0}}, []))
    assert found.systemic and not found.confirmed


def test_only_the_asked_rails_count() -> None:
    found = attribute(["a", "b", "c", "d"], [0], oracle({"c": {2}}, []))
    assert not found.confirmed and found.cleared == ["a", "b", "c", "d"]


def test_more_suspects_than_partners_are_confirmed_in_batches() -> None:
    nodes = ["a", "b", "c", "d", "e", "f"]
    found = attribute(nodes, [0], oracle({"a": {0}, "c": {0}}, []))
    assert sorted(found.confirmed) == ["a", "c"] and sorted(found.unconfirmed) == ["b", "d"]
    assert found.cleared == ["e", "f", "b", "d"] and found.rounds == 3  # two partners for four suspects
