"""What the watch does about a cable its signals name (issue 56, item 3): graded by the cable's class, once per
finding, the port disabled where the policy allows, and a node whose rail the cable cut taken out of service;
end to end on a simulated cluster whose UFM keeps writing."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

from provision.network.cable_health import cable_key
from provision.network.sources import design_fabric
from provision.sim.ufm import EventWriter
from provision.spec import load_spec
from provision.state import NodeState, StateStore
from provision.watch import cables
from tests import promstack
from tests.conftest import EXAMPLES, run_cli
from tests.simhelpers import write_spec
from tests.watch.test_reconcile import _store
from topology.linkhealth import CableHealth

FABRIC = design_fabric(load_spec(EXAMPLES / "sim-cluster.yaml"))
HOST_CABLE = FABRIC.cable_at(("sim01/mlx5_0", 1))
SWITCH_CABLE = next(cable for cable in FABRIC.cables() if FABRIC.host_end(cable) is None)


def _suspect(cable, klass: str) -> CableHealth:
    return CableHealth(cable, klass, 1.2, 6 if klass == "flapping" else 0,
                       last_seen=datetime(2026, 11, 22, tzinfo=UTC).timestamp())


def test_each_class_gets_what_it_calls_for_once_per_finding() -> None:
    suspects = [_suspect(HOST_CABLE, "flapping"), _suspect(SWITCH_CABLE, "erroring")]
    fresh = cables.plan(suspects, FABRIC, {}, disable_ports=True)
    assert [(action.klass, action.ticket, action.disable, action.cut) for action in fresh] == [
        ("flapping", True, True, [("sim01", "mlx5_0")]),  # the host's rail has no other cable
        ("erroring", True, False, [])]  # still carries traffic: a ticket, a person's repair
    assert cables.plan(suspects[:1], FABRIC, {}, disable_ports=False)[0].cut == [], "left up: still a path"
    key = cable_key(HOST_CABLE)
    named = {key: [{"kind": "finding", "at": "2026-11-20T00:00:00", "detail": {"source": "watch"}},
                   {"kind": "disabled", "at": "2026-11-20T00:00:01", "detail": {"source": "watch"}}]}
    [again] = cables.plan(suspects[:1], FABRIC, named, disable_ports=True)
    assert (again.ticket, again.disable) == (False, False)
    assert again.already == "named since its last repair; its port disabled already"
    repaired = {key: [*named[key], {"kind": "repair", "at": "2026-11-21T00:00:00", "detail": {"action": "reseat"}}]}
    [after_repair] = cables.plan(suspects[:1], FABRIC, repaired, disable_ports=True)
    assert (after_repair.ticket, after_repair.disable) == (True, True), "flapping again after a repair: new finding"
    stale = CableHealth(HOST_CABLE, "flapping", 1.2, 6, last_seen=datetime(2026, 11, 20, 23, tzinfo=UTC).timestamp())
    assert cables.plan([stale], FABRIC, repaired, disable_ports=True) == [], "the window's flaps predate the repair"
    burnin = {key: [{"kind": "finding", "at": "2026-11-20T00:00:00", "detail": {"source": "burnin.pairs"}}]}
    assert cables.plan(suspects[:1], FABRIC, burnin, disable_ports=True)[0].ticket, "the burn-in's is not ours"


def test_a_flapping_host_cable_is_ticketed_disabled_and_its_node_taken_out_once(tmp_path: Path) -> None:
    """UFM keeps writing the simulated fabric's event log; six flaps of sim01's rail-0 cable within the hour
    make it flapping: the pass writes its ticket, disables the leaf's port from an admitted node (read back
    through the simulated fabric), and quarantines sim01 (its rail lost its only cable). Slurm cannot be read
    (no controller): the pass says so and still does the fabric's work. The next pass repeats nothing."""
    spec = write_spec(tmp_path, [], hosts="sim[01-16]")
    data = yaml.safe_load(spec.read_text())
    (tmp_path / "slurm.conf").write_text("ClusterName=test\n")
    data["slurm"] = {"conf": str(tmp_path / "slurm.conf")}
    data["watch"] = {"signals": {"disable_ports": True}}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    state = tmp_path / "state"
    assert run_cli("sim", "up", str(spec), "--state-dir", str(state)).returncode == 0
    _store(tmp_path, {f"sim{index:02d}": NodeState.ADMITTED for index in range(1, 17)}).close()
    fabric = design_fabric(load_spec(spec))
    cable = fabric.cable_at(("sim01/mlx5_0", 1))
    writer = EventWriter([], seed=data["simulation"]["seed"])
    now = time.time()
    for minute in range(6):
        writer.link_down(fabric, now - 3600 + minute * 300, cable)
    with (state / "sim" / "fabric" / "ufm" / "event.log").open("a", encoding="utf-8") as log:
        log.write(writer.text())

    first = run_cli("watch", str(spec), "--once", "--json", "--state-dir", str(state))
    assert first.returncode == 1, first.stderr  # Slurm could not be read: a problem of the pass
    report = json.loads(first.stdout)
    assert report["problems"][0].startswith("slurm: ")
    [suspect] = report["signals"]["suspects"]
    assert suspect["cable"] == cable.label() and suspect["class"] == "flapping" and suspect["flaps"] == 6
    [action] = report["cable_actions"]
    assert action["ticket"] and action["disable"] and action["cut"] == ["sim01 mlx5_0"]
    [ticket] = report["tickets"]
    assert "flapping" in Path(ticket).read_text()
    [disabled] = report["disabled"]  # the leaf's end: a host's port goes with its node
    assert disabled["result"] == "disabled" and disabled["switch"].startswith("leaf-")
    [move] = report["fabric_moves"]
    assert move["node"] == "sim01" and move["to"] == "quarantined" and "lost its only link" in move["reason"]

    second = json.loads(run_cli("watch", str(spec), "--once", "--json", "--state-dir", str(state)).stdout)
    [again] = second["cable_actions"]
    assert not again["ticket"] and not again["disable"] and "disabled already" in again["already"]
    assert second["tickets"] == [] and second["disabled"] == [] and second["fabric_moves"] == []
    [waiting] = second["ladder"]  # its ladder waits for the cable, not for a node repair of its own
    assert waiting["node"] == "sim01" and waiting["action"] == "wait" and "no repair recorded" in waiting["why"]
    # an operator admits sim01 (it runs on its other rails): the watch does not overrule them
    admitted = run_cli("admit", "sim01", "--reason", "runs on 7 rails until the cable is replaced", "--spec",
                       str(spec), "--state-dir", str(state))
    assert admitted.returncode == 0, admitted.stderr
    third = json.loads(run_cli("watch", str(spec), "--once", "--json", "--state-dir", str(state)).stdout)
    assert third["fabric_moves"] == [] and third["ladder"] == []
    textfile = spec.parent / ".provision" / "metrics" / "provision_sim16.prom"  # rewritten after each pass
    metrics = set(textfile.read_text().splitlines())
    for kind, count in (("quarantine_fabric", 1), ("ticket", 1), ("port_disabled", 1), ("quarantine_node-check", 0)):
        assert f'provision_watch_actions{{cluster="sim16",kind="{kind}"}} {count}' in metrics
    assert 'provision_watch_pass_problems{cluster="sim16"} 1' in metrics  # Slurm
    assert 'provision_watch_suspect_cables{class="flapping",cluster="sim16"} 1' in metrics
    ufm_source = f"ufm:{state / 'sim' / 'fabric' / 'ufm' / 'event.log'}"
    assert f'provision_watch_source_ok{{cluster="sim16",source="{ufm_source}"}} 1' in metrics
    if promstack.PROMTOOL:
        linted = subprocess.run([promstack.PROMTOOL, "check", "metrics"], input=textfile.read_text(), text=True,
                                capture_output=True, timeout=30)
        assert linted.returncode == 0 and not linted.stdout.strip(), linted.stdout + linted.stderr
    with StateStore(state) as store:
        kinds = [record["kind"] for record in store.cable_history(cable_key(cable))]
        assert kinds == ["finding", "disabled"]
        moves = [(row["to_state"], row["stage"], bool(row["by_operator"])) for row in store.history("sim01")][-2:]
        assert moves == [("quarantined", "fabric", False), ("admitted", None, True)]
        assert [node.name for node in store.nodes() if node.state is NodeState.QUARANTINED] == []
