"""Fabrics we did not design: the topology commands on a spec of only ``cluster`` and ``fabric``, or on cabling
plans with no spec at all. The fabric is then whatever the plan says (``topology.planfabric``).

The real data is UFM's own: the ``sat11`` director fabric's dump and its two NDT plans (host-switch and
switch-director). The event log is ours, in UFM's format, naming two flapping cables from their director ASIC
ports (``SAT11-...-A/L16/U2``, upper case as switches report their names) and one cable that flapped once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.network.view import view_of_plans
from provision.sim.ufm import EventWriter
from provision.spec import SpecError, load_fabric_spec, load_spec
from tests.conftest import SHARED_FIXTURES, run_cli
from topology.cabling import PlannedCable
from topology.model import HCA, LEAF, SPINE, Cable
from topology.planfabric import fabric_from_plan

UFM = SHARED_FIXTURES / "ufm_ndt"
HOST_PLAN = UFM / "positive_flow_ndts" / "switch_to_host_topo1.ndt"
DIRECTOR_PLAN = UFM / "positive_flow_ndts" / "switch_to_switch_topo2.ndt"
DUMP = UFM / "positive_flow_ibnetdiscover" / "ibnetdiscover_director.txt"
needs_shared = pytest.mark.skipif(not UFM.is_dir(), reason="../shared/fixtures absent in this clone")
START = 1_790_000_000.0


def _event_log(path: Path) -> tuple[set[str], str]:
    """Two director cables flapping 8 times in an hour, one flapping once; returns the two and the one."""
    fabric = view_of_plans([HOST_PLAN, DIRECTOR_PLAN]).fabric
    director = sorted((cable for cable in fabric.cables() if "/l" in cable.b[0]), key=lambda cable: cable.b)
    writer = EventWriter([])
    flapping, once = director[:2], director[7]
    for offset, cable in enumerate(flapping):
        from_director = Cable(cable.b, cable.a, cable.rate, cable.width)  # UFM names the director's port first
        for flap in range(8):
            writer.link_down(fabric, START + offset * 60 + flap * 400, from_director)
    writer.link_down(fabric, START + 5000, Cable(once.b, once.a))
    path.write_text(writer.text().replace("sat11-", "SAT11-"))
    return ({" - ".join(sorted(f"{node}/{port}" for node, port in (cable.a, cable.b))) for cable in flapping},
            " - ".join(sorted(f"{node}/{port}" for node, port in (once.a, once.b))))


@needs_shared
def test_plan_only_flaps_names_the_flapping_director_cables(tmp_path: Path) -> None:
    flapping, once = _event_log(tmp_path / "event.log")
    result = run_cli("topology", "flaps", "--design", str(HOST_PLAN), "--design", str(DIRECTOR_PLAN),
                     "--observed", str(DUMP), "--events", str(tmp_path / "event.log"), "--actions",
                     str(tmp_path / "actions"), "--json", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    classes = {row["cable"]: row["class"] for row in report["suspects"]}
    assert {cable for cable, klass in classes.items() if klass == "flapping"} == flapping
    assert once not in classes, "one flap in a day is below the default policy"
    # the rest are what the audit of the dump against the plans finds dark: UFM's two missing_in_ufm cables
    assert sorted(klass for cable, klass in classes.items() if cable not in flapping) == ["down", "down"]
    director_ends = [end for row in report["suspects"] if row["class"] == "flapping" for end in row["ends"]
                     if "/l" in end["node"]]
    assert {end["tier"] for end in director_ends} == {SPINE}, "director ASICs sit above the edge switches"
    assert report["ingestion"][str(tmp_path / "event.log")]["kept"] > 0
    assert not report["unmatched"], "every event names a port of the plan's fabric"
    assert not (tmp_path / ".provision").exists(), "a run without a spec keeps no state"
    tickets = sorted((tmp_path / "actions" / "tickets").glob("*.md"))
    assert len(tickets) == 4
    flapping_ticket = next(path.read_text() for path in tickets if "flapping" in path.read_text())
    assert "- LinkType: Data" in flapping_ticket, "the plan's own columns go on the ticket"
    assert "a cabling plan gives no routes" in flapping_ticket


@needs_shared
def test_fabric_only_spec_audits_and_watches_its_cabling_file(tmp_path: Path) -> None:
    """``cluster`` and ``fabric.cabling_file`` and nothing else: audit, flaps and draw work; the other commands
    say this spec describes only a fabric."""
    plan = tmp_path / "sat11.ndt"
    plan.write_text(HOST_PLAN.read_text() + "\n" + DIRECTOR_PLAN.read_text())  # the second header is a comment
    spec = tmp_path / "sat11.yaml"
    spec.write_text("cluster:\n  name: sat11\nfabric:\n  cabling_file: sat11.ndt\n  link_health:\n    flaps: 6\n")
    audit = run_cli("topology", "audit", str(spec), "--observed", str(DUMP), "--json", cwd=tmp_path)
    assert audit.returncode == 1, audit.stderr
    payload = json.loads(audit.stdout)
    assert payload["counts"] == {"miswired": 2, "missing": 2, "port_down": 0, "degraded": 0, "extra": 107}
    assert payload["rules"] == {} and "non_blocking" in payload["rules_not_applicable"]

    flapping, _once = _event_log(tmp_path / "event.log")
    flaps = run_cli("topology", "flaps", str(spec), "--events", str(tmp_path / "event.log"), "--json", cwd=tmp_path)
    assert flaps.returncode == 1, flaps.stderr
    rows = json.loads(flaps.stdout)["suspects"]
    assert {row["cable"] for row in rows} == flapping  # 8 flaps against the spec's policy of 6; no dump given
    assert all(row["history"]["next_step"] == "reseat" for row in rows)

    # the repair loop keeps its history for a fabric it did not design: the ladder moves on for that cable
    cable = sorted(flapping)[0]
    switch_end = next(end for end in cable.split(" - ") if "/l" not in end).upper()  # as a switch reports it
    repaired = run_cli("topology", "repaired", str(spec), switch_end, "--action", "reseat", "--json", cwd=tmp_path)
    assert repaired.returncode == 0, repaired.stderr
    assert json.loads(repaired.stdout)["cable"] == cable
    again = run_cli("topology", "flaps", str(spec), "--events", str(tmp_path / "event.log"), "--json", cwd=tmp_path)
    history = {row["cable"]: row["history"] for row in json.loads(again.stdout)["suspects"]}
    assert history[cable]["last_repair"]["action"] == "reseat" and history[cable]["next_step"] == "clean"

    drawn = run_cli("topology", "draw", str(spec), "--observed", str(DUMP), "-o", str(tmp_path / "f.svg"),
                    cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    assert "sat11: 111 problem cable(s) in ibnetdiscover_director.txt" in (tmp_path / "f.svg").read_text()

    refused = run_cli("plan", str(spec), cwd=tmp_path)
    assert refused.returncode == 2
    assert "describes only a fabric" in refused.stderr and "sat11.yaml:1:1" in refused.stderr


@pytest.mark.fast
def test_fabric_only_spec_needs_a_cabling_file(tmp_path: Path) -> None:
    spec = tmp_path / "fabric.yaml"
    spec.write_text("cluster:\n  name: f\nfabric:\n  rails: 8\n  hosts_per_su: 32\n  switch_radix: 64\n")
    with pytest.raises(SpecError) as caught:
        load_fabric_spec(spec)
    assert "fabric.yaml:4:3: fabric: a spec without nodes needs fabric.cabling_file" in str(caught.value)
    spec.write_text("cluster:\n  name: f\nfabric:\n  cabling_file: nowhere.csv\n")
    with pytest.raises(SpecError) as caught:
        load_fabric_spec(spec)
    assert "fabric.yaml:4:17: fabric.cabling_file: file 'nowhere.csv' not found" in str(caught.value)
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    assert "describes only a fabric" in str(caught.value)


@pytest.mark.fast
def test_tiers_come_from_the_graph_and_double_booked_ports_are_located() -> None:
    def cable(a: tuple[str, str], b: tuple[str, str], line: int) -> PlannedCable:
        return PlannedCable(a, b, line)

    plan = [cable(("h1", "h1 mlx5_0"), ("edge1", "1"), 2), cable(("h2", "h2 mlx5_0"), ("edge2", "1"), 3),
            cable(("edge1", "9"), ("top", "1"), 4), cable(("edge2", "9"), ("top", "2"), 5),
            cable(("edge2", "10"), ("top", "2"), 6)]  # top/2 planned twice
    fabric, conflicts = fabric_from_plan(plan)
    kinds = dict(fabric.graph.nodes(data="kind"))
    assert kinds == {"h1/mlx5_0": HCA, "h2/mlx5_0": HCA, "edge1": LEAF, "edge2": LEAF, "top": SPINE}
    assert [(conflict.line, conflict.message) for conflict in conflicts] == [
        (6, "edge2/10 - top/2 plugs into a port already planned for edge2/9 - top/2 (plan line 5); the first row "
            "keeps it")]
    assert fabric.graph.nodes["h1/mlx5_0"]["endpoint"] == ("h1", "h1 mlx5_0")
