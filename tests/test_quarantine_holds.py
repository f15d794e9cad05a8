"""A quarantine holds until a repair, and ``plan`` names what ``apply`` takes (issue 55).

A second ``apply`` used to move every node the burn-in had quarantined back to ``provisioned`` and test it again:
a node nobody repaired could pass on an intermittent fault and be admitted. Here a provisioned cluster's store
holds a node in every standing the table of moves knows; ``plan`` names the hosts each phase of ``apply`` will
take, ``apply`` takes exactly those, and no node the burn-in or an operator holds is moved by it.
"""

from __future__ import annotations

import json
from pathlib import Path

from provision.state import NodeState, StateStore
from tests.conftest import run_cli
from tests.simhelpers import provision, write_spec
from tests.stores import recorded_run

STAGES = ["preflight"]


def _every_standing(state: Path) -> dict[str, str]:
    """sim01 as provisioning left it; the others moved to each standing by the commands that make those moves."""
    with StateStore(state) as store:
        apply = recorded_run(store, "apply")
        store.transition("sim02", NodeState.BURNING_IN, run_id=apply, stage="preflight")  # a burn-in killed mid-stage
        for name in ("sim03", "sim04"):
            store.transition(name, NodeState.BURNING_IN, run_id=apply, stage="preflight")
        store.transition("sim03", NodeState.ADMITTED, run_id=apply)
        store.transition("sim04", NodeState.QUARANTINED, run_id=apply, stage="preflight",
                         reason="preflight/xid: Xid 79 on GPU 3")
        store.transition("sim05", NodeState.QUARANTINED, run_id=apply, stage="provision",
                         reason="task failed: nvidia_driver: Install the driver: dpkg lock held")
        store.transition("sim06", NodeState.QUARANTINED, run_id=recorded_run(store, "quarantine"),
                         stage="provision", reason="operator: smoke from the PSU")
        store.transition("sim07", NodeState.DRAINED, run_id=recorded_run(store, "drain"), reason="rack move")
        return {record.name: str(record.state) for record in store.nodes()}


def test_plan_names_what_apply_takes_and_apply_moves_no_quarantine_it_did_not_make(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [], hosts="sim[01-07]", stages=STAGES)
    provision(spec)
    state = tmp_path / ".provision" / "sim16"
    _every_standing(state)
    with StateStore(state) as store:
        held = {name: store.history(name) for name in ("sim04", "sim06", "sim07")}

    planned = run_cli("plan", str(spec), "--json", timeout=600)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan = {phase["phase"]: phase for phase in json.loads(planned.stdout)["phases"]}
    # the play runs on provisioned and admitted hosts and on one provisioning quarantined (its task failed); the
    # burn-in takes the provisioned, the one killed mid-stage, the one provisioning will have recovered, and the
    # admitted one because this spec changes it (its node-check file: the cluster was provisioned from another)
    assert sorted(plan["provision"]["hosts"]) == ["sim01", "sim03", "sim05"], plan["provision"]
    assert "sim03" in plan["provision"]["changes"], plan["provision"]
    assert sorted(plan["burnin"]["nodes"]) == ["sim01", "sim02", "sim03", "sim05"], plan["burnin"]

    applied = run_cli("apply", str(spec), "--json", timeout=600)
    assert applied.returncode == 1, applied.stdout + applied.stderr  # 1: quarantined nodes (the held ones) remain
    done = {phase["phase"]: phase for phase in json.loads(applied.stdout)["phases"]}
    assert sorted(done["provision"]["hosts"]) == sorted(plan["provision"]["hosts"])
    assert sorted(done["burnin"]["nodes"]) == sorted(plan["burnin"]["nodes"])
    assert sorted(done["burnin"]["admitted"]) == ["sim01", "sim02", "sim03", "sim05"]

    with StateStore(state) as store:
        for name, before in held.items():
            assert store.history(name) == before, f"{name} was moved by the apply"
        states = {record.name: record.state for record in store.nodes()}
    assert states["sim04"] is states["sim06"] is NodeState.QUARANTINED and states["sim07"] is NodeState.DRAINED
    assert states["sim03"] is NodeState.ADMITTED


def test_on_a_new_cluster_plan_burns_in_every_node_provisioning_will_hand_over(tmp_path: Path) -> None:
    """Nothing recorded yet: provisioning would converge every host, so the burn-in would take every node (it
    used to say it would take none, 'not provisioned yet')."""
    from provision import pipeline
    from provision.spec import load_spec

    loaded = load_spec(write_spec(tmp_path, [], hosts="sim[01-03]", stages=STAGES))
    reports = {report.name: report for report in pipeline.plan(loaded, tmp_path / "state")}
    assert reports["provision"].details["hosts"] == ["sim01", "sim02", "sim03"]
    assert reports["burnin"].details["nodes"] == ["sim01", "sim02", "sim03"]
    assert not (tmp_path / "state").exists(), "plan writes nothing"
