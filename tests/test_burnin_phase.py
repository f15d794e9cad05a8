"""Burn-in bookkeeping without running any test: where a quarantined node re-enters, and what it carries."""

from __future__ import annotations

from pathlib import Path

from provision.burnin.phase import BurninPhase
from provision.spec.semantics import ResolvedNode
from provision.state import NodeState, StateStore


def _node(name: str) -> ResolvedNode:
    return ResolvedNode(name, "compute", "hgx", "127.0.0.11", None, 0, 1)


def _quarantined_at(store: StateStore, name: str, stage: str) -> None:
    store.register([(name, "compute")], "r0")
    store.transition(name, NodeState.PROVISIONED, run_id="r0")
    store.transition(name, NodeState.BURNING_IN, run_id="r0", stage=stage)
    store.transition(name, NodeState.QUARANTINED, run_id="r0", stage=stage, reason="failed")


def test_reentry_carries_the_stages_before_the_failed_one(tmp_path: Path) -> None:
    with StateStore(tmp_path) as store:
        _quarantined_at(store, "n1", "collectives")
        campaign, _ = store.open_campaign("r1", ["preflight", "node", "collectives"], "sha")
        passed: dict[str, set[str]] = {}
        start = BurninPhase()._entry_points(store, campaign, [_node("n1")], ["preflight", "node", "collectives"],
                                            passed, "r1")
        assert start == {"n1": 2}
        assert passed == {"n1": {"node"}}  # preflight is re-run, never carried
        assert store.passes(campaign) == {"n1": {"node"}}


def test_reentry_without_preflight_still_carries_the_first_stage(tmp_path: Path) -> None:
    with StateStore(tmp_path) as store:
        _quarantined_at(store, "n1", "collectives")
        campaign, _ = store.open_campaign("r1", ["node", "collectives"], "sha")
        passed: dict[str, set[str]] = {}
        start = BurninPhase()._entry_points(store, campaign, [_node("n1")], ["node", "collectives"], passed, "r1")
        assert start == {"n1": 1}
        assert passed == {"n1": {"node"}}
