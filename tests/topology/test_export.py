"""Slurm topology.conf and the fabric picture."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from provision.spec import load_spec
from tests.conftest import EXAMPLES, run_cli
from tests.simhelpers import write_spec
from topology.hostlist import expand

pytestmark = pytest.mark.fast  # pure: part of make test-fast


def _parse_topology(text: str) -> dict[str, dict[str, list[str]]]:
    switches = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fields = dict(part.split("=", 1) for part in line.split())
        switches[fields["SwitchName"]] = {key: expand(value) for key, value in fields.items() if key != "SwitchName"}
    return switches


def test_slurm_topology_places_every_host_once_under_one_root(tmp_path: Path) -> None:
    for spec in (EXAMPLES / "h100-511.yaml", EXAMPLES / "sim-cluster.yaml"):
        result = run_cli("topology", "slurm", str(spec), "-o", str(tmp_path / "topology.conf"))
        assert result.returncode == 0, result.stderr
        switches = _parse_topology((tmp_path / "topology.conf").read_text())
        hosts = [host for fields in switches.values() for host in fields.get("Nodes", [])]
        assert sorted(hosts) == sorted(load_spec(spec).node_names)
        children = {child for fields in switches.values() for child in fields.get("Switches", [])}
        roots = [name for name in switches if name not in children]
        assert roots == ["fabric"]
        assert all(child in switches for child in children)
    reference = _parse_topology(run_cli("topology", "slurm", str(EXAMPLES / "h100-511.yaml")).stdout)
    assert reference["group01"]["Switches"] == ["su01", "su02", "su03", "su04"]
    assert reference["su16"]["Nodes"][-1] == "gpu511"


@pytest.mark.slow  # 2 s: a simulated fabric brought up and drawn: left out of make test-fast
def test_draw_marks_the_problems_an_audit_finds(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [{"kind": "missing_cable", "target": "spine-g03-02/4"},
                                 {"kind": "miswired_cable", "target": "leaf-su01-r0/1",
                                  "params": {"partner": "leaf-su01-r1/1"}}], hosts="sim[01-16]")
    assert run_cli("sim", "up", str(spec)).returncode == 0
    picture = tmp_path / "fabric.svg"
    assert run_cli("topology", "draw", str(spec), "-o", str(picture)).returncode == 0
    svg = ElementTree.parse(picture).getroot()
    namespace = "{http://www.w3.org/2000/svg}"
    boxes = [g for g in svg.iter(f"{namespace}g") if "box" in g.get("class", "")]
    assert len(boxes) == 4 + 8 + 4  # SUs, rail-plane spine groups, core planes
    bad_boxes = [g for g in boxes if "problem" in g.get("class", "")]
    assert [g.find(f"{namespace}text").text for g in bad_boxes] == ["SU 1"]
    bad_lines = [line for line in svg.iter(f"{namespace}line") if "problem" in line.get("class", "")]
    assert len(bad_lines) == 1 and "group 3" in bad_lines[0].find(f"{namespace}title").text
    reference = tmp_path / "reference.svg"
    assert run_cli("topology", "draw", str(EXAMPLES / "h100-511.yaml"), "-o", str(reference)).returncode == 0
    labels = [t.text for t in ElementTree.parse(reference).getroot().iter(f"{namespace}text")]
    assert "plane 1-2" in labels and "SU 16" in labels  # 32 core planes drawn as 16 ranges
