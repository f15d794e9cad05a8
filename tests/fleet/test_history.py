"""A node's story and the recent runs, read back from the store (what `provision history` and `runs` print)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.errors import UsageProblem
from provision.fleet.history import node_story, recent_runs
from provision.state import NodeState, StateStore
from tests.stores import recorded_run

pytestmark = pytest.mark.fast


def test_a_nodes_story_names_every_move_its_run_and_who_made_it(tmp_path: Path) -> None:
    with StateStore(tmp_path / "state") as store:
        store.register([("sim01", "h100")], "r0")
        apply = recorded_run(store, "apply")
        store.transition("sim01", NodeState.PROVISIONED, run_id=apply)
        drain = recorded_run(store, "drain")
        store.transition("sim01", NodeState.DRAINED, run_id=drain, reason="rack work", evidence={"operator": True})
        (store.state_dir / "runs" / drain).mkdir(parents=True)
        (store.state_dir / "runs" / drain / "manifest.json").write_text(json.dumps({"argv": ["drain"], "user": "ops"}))
        story = node_story(store, "sim01")
        runs = recent_runs(store)
        with pytest.raises(UsageProblem, match="no node named 'sim99'"):
            node_story(store, "sim99")
    assert story["state"] == "drained" and [move["to"] for move in story["moves"]] == ["new", "provisioned", "drained"]
    assert story["moves"][-1]["command"] == "drain" and story["moves"][-1]["reason"] == "rack work"
    assert runs[0]["command"] == "drain" and runs[0]["user"] == "ops"
    assert runs[-1]["user"] is None, "a run whose record is gone is still listed, without what it held"
