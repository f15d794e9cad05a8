"""The watch's circuit breaker (issue 56, item 6): more quarantines in a window than a share of the fleet is a
common cause, not as many bad nodes. Tripped, the watch makes none of its own moves, keeps listing what it would
have done, still records what an administrator did in Slurm, and acts again only after an operator clears it;
`status`, its JSON and the metrics say the fleet is systemic meanwhile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provision.sinks.metrics import exposition, families
from provision.spec import load_spec
from provision.spec.model import WatchBreaker
from provision.state import NodeState, StateStore
from provision.state.lifecycle import DRAIN
from provision.watch import breaker
from provision.watch.reconcile import Move, _through_breaker
from tests.conftest import run_cli
from tests.simhelpers import write_spec
from tests.stores import recorded_run
from tests.watch.test_reconcile import _store

pytestmark = pytest.mark.fast


def test_the_limit_is_a_share_of_the_fleet_and_never_below_its_floor() -> None:
    policy = WatchBreaker(share=0.1, min_nodes=2, window_minutes=60)
    assert breaker.limit_for(policy, 16) == 2 and breaker.limit_for(policy, 512) == 51
    assert not breaker.judge(policy, fleet=16, acted=1, proposed=1).tripped
    tripped = breaker.judge(policy, fleet=16, acted=1, proposed=2)
    assert tripped.tripped and "past 2 (0.1 of 16 admitted node(s), at least 2)" in tripped.why
    assert not breaker.judge(policy, fleet=16, acted=5, proposed=0).tripped, "nothing proposed: nothing to hold"
    assert breaker.judge(policy, fleet=512, acted=0, proposed=154).tripped  # a rollout failing 30% at once


def _quarantine(node: str) -> Move:
    return Move(node, NodeState.QUARANTINED, "node-check/xid: Xid 79", stage="node-check")


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    spec = write_spec(tmp_path, [], hosts="sim[01-16]")
    data = yaml.safe_load(spec.read_text())
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=test\n")
    data["slurm"] = {"conf": str(conf)}
    data["watch"] = {"breaker": {"share": 0.1, "min_nodes": 2, "window_minutes": 60}}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def test_tripped_it_holds_the_watchs_moves_and_records_the_operators(tmp_path: Path, spec: Path) -> None:
    loaded = load_spec(spec)
    nodes = {f"sim{index:02d}": NodeState.ADMITTED for index in range(1, 17)}
    with _store(tmp_path, nodes) as store:
        run = recorded_run(store, "watch")
        proposed = [_quarantine("sim01"), _quarantine("sim02"), _quarantine("sim03"),
                    Move("sim04", NodeState.DRAINED, "drained in Slurm by admin: rack work", seen_operator=DRAIN)]
        moves, held, why = _through_breaker(loaded, store, store.nodes(), proposed, run_id=run)
        assert [move.node for move in moves] == ["sim04"] and [move.node for move in held] == ["sim01", "sim02",
                                                                                                 "sim03"]
        assert "3 more proposed: past 2" in why
        state = store.breaker()
        assert state["tripped"] and [entry["node"] for entry in state["detail"]["held"]] == ["sim01", "sim02", "sim03"]
        # the next pass: still tripped, one more held, listed once however often it is seen
        moves, held, _ = _through_breaker(loaded, store, store.nodes(), [_quarantine("sim03"), _quarantine("sim05")],
                                          run_id=recorded_run(store, "watch"))
        assert moves == [] and [entry["node"] for entry in store.breaker()["detail"]["held"]] == [
            "sim01", "sim02", "sim03", "sim05"]
        text = exposition(families(loaded, store, store.state_dir))
        assert 'provision_watch_breaker_tripped{cluster="sim16"} 1' in text


def test_an_operator_clears_it_and_the_watch_acts_again(tmp_path: Path, spec: Path) -> None:
    loaded = load_spec(spec)
    nodes = {f"sim{index:02d}": NodeState.ADMITTED for index in range(1, 17)}
    state_dir = spec.parent / ".provision" / "sim16"
    with _store(state_dir.parent, nodes) as store:
        store.set_breaker(tripped=True, detail={"why": "a rollout", "held": [_quarantine("sim01").as_dict()]},
                          run_id=recorded_run(store, "watch"))
    (state_dir.parent / "state").rename(state_dir)
    status = json.loads(run_cli("status", "--json", str(spec)).stdout)
    assert status["watch_breaker"]["tripped"] is True
    shown = run_cli("status", str(spec)).stdout
    assert "systemic: the watch's breaker tripped" in shown and "holds 1 quarantine(s) (sim01)" in shown
    cleared = run_cli("watch", str(spec), "--clear-breaker")
    assert cleared.returncode == 0 and "breaker cleared; it had held 1 move(s): sim01" in cleared.stdout
    again = run_cli("watch", str(spec), "--clear-breaker", "--json")
    assert json.loads(again.stdout) == {"cleared": False, "held": []}
    with StateStore(state_dir) as store:
        assert store.breaker()["tripped"] is False
        moves, held, why = _through_breaker(loaded, store, store.nodes(), [_quarantine("sim01")],
                                            run_id=recorded_run(store, "watch"))
        assert [move.node for move in moves] == ["sim01"] and held == [] and why == ""
