"""The watch reads Slurm back into the store (issue 56, item 2), on recorded ``scontrol -o show node`` output: a
node node-check drained is quarantined with its check; an administrator's drain or resume is recorded as the
operator's move; our own drains, a node down without a drain and every node while a sync is pending are left
alone; and only a watch's run may record what an operator did in Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.facts.slurm import parse_nodes
from provision.state import NodeState, StateStore
from provision.state.lifecycle import TransitionError
from provision.watch.reconcile import node_check_failure, plan_reconcile
from tests.stores import recorded_run

pytestmark = pytest.mark.fast
CASES = Path(__file__).parents[1] / "facts" / "slurm_nodes"


def _slurm(case: str) -> dict:
    return {node.name: node for node in parse_nodes(json.loads((CASES / f"{case}.json").read_text())["output"])}


def _store(tmp_path: Path, states: dict[str, NodeState]) -> StateStore:
    store = StateStore(tmp_path / "state")
    apply = recorded_run(store, "apply")
    store.register([(name, "compute") for name in states], apply)
    for name, state in states.items():
        store.transition(name, NodeState.PROVISIONED, run_id=apply)
        if state is NodeState.PROVISIONED:
            continue
        store.transition(name, NodeState.BURNING_IN, run_id=apply, stage="node")
        store.transition(name, state, run_id=apply, reason="" if state is NodeState.ADMITTED else "node/matmul: slow")
    return store


def test_the_drains_of_admitted_nodes_read_back(tmp_path: Path) -> None:
    slurm = _slurm("drained_by_node_check")
    with _store(tmp_path, dict.fromkeys(("gpu01", "gpu02", "gpu03", "gpu04"), NodeState.ADMITTED)) as store:
        moves = {move.node: move for move in plan_reconcile(store.nodes(), slurm, sync_pending=False)}
        assert sorted(moves) == ["gpu02", "gpu03"], moves  # gpu01 serves; gpu04 is down, not drained: Slurm's
        checked = moves["gpu02"]
        assert (checked.target, checked.stage, checked.seen_operator) == (NodeState.QUARANTINED, "node-check", None)
        assert checked.reason == "node-check/xid: Xid 79 on GPU 0000:18:00: GPU has fallen off the bus."
        assert checked.evidence["slurm_reason_user"] == "root"
        admin = moves["gpu03"]
        assert (admin.target, admin.seen_operator) == (NodeState.DRAINED, "drain")
        assert admin.reason == "drained in Slurm by root: fan failure, ticket 4711"
        watch = recorded_run(store, "watch")
        for move in moves.values():
            store.transition(move.node, move.target, run_id=watch, stage=move.stage, reason=move.reason,
                             evidence=move.evidence, seen_operator=move.seen_operator)
        assert store.node("gpu02").state is NodeState.QUARANTINED and not store.node("gpu02").by_operator
        assert store.node("gpu03").state is NodeState.DRAINED and store.node("gpu03").by_operator
        assert store.history("gpu03")[-1]["evidence"]["slurm_reason"] == "fan failure, ticket 4711"
        # read back once: the next pass finds the store agreeing with Slurm
        assert plan_reconcile(store.nodes(), slurm, sync_pending=False) == []


def test_our_own_drains_and_a_pending_sync_are_left_alone(tmp_path: Path) -> None:
    ours = _slurm("drained_ours_admins_and_down")  # gpu02 drained by our sync ("provision: ..."), stale
    with _store(tmp_path, dict.fromkeys(("gpu01", "gpu02"), NodeState.ADMITTED)) as store:
        assert plan_reconcile(store.nodes(), ours, sync_pending=False) == []
        assert plan_reconcile(store.nodes(), _slurm("drained_by_node_check"), sync_pending=True) == []


def test_a_node_an_administrator_resumed_is_the_operators_admit(tmp_path: Path) -> None:
    slurm = _slurm("drained_by_node_check")  # gpu01 idle, no drain
    with _store(tmp_path, {"gpu01": NodeState.QUARANTINED, "gpu04": NodeState.QUARANTINED}) as store:
        moves = plan_reconcile(store.nodes(), slurm, sync_pending=False)
        assert [(move.node, move.target, move.seen_operator) for move in moves] == [
            ("gpu01", NodeState.ADMITTED, "admit")]  # gpu04 is down: nobody resumed it
        assert moves[0].reason == "resumed in Slurm while quarantined: node/matmul: slow"


def test_only_a_watch_records_what_an_operator_did_in_slurm(tmp_path: Path) -> None:
    with _store(tmp_path, {"gpu01": NodeState.ADMITTED}) as store:
        with pytest.raises(TransitionError, match="only `provision watch` records an operator's move"):
            store.transition("gpu01", NodeState.DRAINED, run_id=recorded_run(store, "apply"), reason="x",
                             seen_operator="drain")
        with pytest.raises(TransitionError, match="only `provision watch`"):
            store.transition("gpu01", NodeState.DRAINED, run_id=recorded_run(store, "watch"), reason="x",
                             seen_operator="apply")
        with pytest.raises(TransitionError, match="`provision watch` cannot move a node from admitted to drained"):
            store.transition("gpu01", NodeState.DRAINED, run_id=recorded_run(store, "watch"), reason="x")
        assert store.node("gpu01").state is NodeState.ADMITTED


def test_a_node_check_reason_names_its_check() -> None:
    assert node_check_failure("provision node-check: gpu07: pcie_link: GPU 3 at Gen4 x16") == (
        "pcie_link", "GPU 3 at Gen4 x16")
    assert node_check_failure("provision: node/matmul: slow") is None
    assert node_check_failure("fan failure") is None
