"""A quarantine holds until a repair, and ``plan`` names what ``apply`` takes (issue 55).

A second ``apply`` used to move every node the burn-in had quarantined back to ``provisioned`` and test it again:
a node nobody repaired could pass on an intermittent fault and be admitted. Here a store holds a node in every
standing the table of moves knows, and ``plan`` names the hosts each phase of ``apply`` will take; that ``apply``
takes exactly those and moves no node the burn-in holds is test_burnin_resume's (a kill -9, then ``apply``), and
which command may make each move is tests/state/test_store.py's walk of the table.
"""

from __future__ import annotations

import json
from pathlib import Path

from provision.state import NodeState, StateStore
from tests.conftest import run_cli
from tests.simhelpers import write_spec
from tests.stores import recorded_run

STAGES = ["preflight"]


def _every_standing(state: Path) -> dict[str, str]:
    """sim01 as provisioning left it; the others moved to each standing by the commands that make those moves."""
    with StateStore(state) as store:
        apply = recorded_run(store, "apply")
        for name in ("sim02", "sim03", "sim04", "sim05"):
            if store.node(name).state is NodeState.NEW:
                store.transition(name, NodeState.PROVISIONED, run_id=apply)
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


def test_plan_names_the_hosts_each_phase_takes_for_every_standing(tmp_path: Path) -> None:
    """A store holding a node in every standing the table of moves knows (the hosts not built yet, so the plan's
    playbooks need no check-mode run): the play takes the provisioned, the admitted and the one provisioning
    quarantined; the burn-in takes those provisioning will hand it and the one a killed burn-in left mid-stage, and
    never a node the burn-in or an operator holds, or a drained one. `apply` takes the same (test_burnin_resume)."""
    spec = write_spec(tmp_path, [], hosts="sim[01-07]", stages=STAGES)
    assert run_cli("apply", str(spec), "--phases", "register", cwd=tmp_path).returncode == 0
    state = tmp_path / ".provision" / "sim16"
    with StateStore(state) as store:
        setup = recorded_run(store, "apply")
        store.transition("sim01", NodeState.PROVISIONED, run_id=setup)
    _every_standing(state)
    planned = run_cli("plan", str(spec), "--json", cwd=tmp_path)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan = {phase["phase"]: phase for phase in json.loads(planned.stdout)["phases"]}
    assert sorted(plan["provision"]["hosts"]) == ["sim01", "sim03", "sim05"], plan["provision"]
    # the admitted host: its play could not be checked (nothing built), so plan counts it as changed, the most
    # the burn-in may take
    assert sorted(plan["burnin"]["nodes"]) == ["sim01", "sim02", "sim03", "sim05"], plan["burnin"]


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
