"""Slurm's topology.conf and the SVG drawing, straight from a designed fabric (the commands that write them are
tests/topology/test_export.py's)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from topology.design import FabricParameters, dimension
from topology.export import draw_svg, slurm_topology
from topology.fattree import HostRails, build_design
from topology.hostlist import expand

pytestmark = pytest.mark.fast


def _fabric(hosts: int, hosts_per_su: int):  # type: ignore[no-untyped-def]
    dims = dimension(FabricParameters(hosts=hosts, rails=2, hosts_per_su=hosts_per_su, switch_radix=64))
    return build_design(dims, [HostRails(f"n{i:03d}", ("mlx5_0", "mlx5_1")) for i in range(hosts)], hosts_per_su, 2)


def test_each_scalable_unit_is_one_switch_and_every_host_is_placed_once() -> None:
    text = slurm_topology(_fabric(64, 32), grouping="auto", title="t1")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines[0] == "SwitchName=su01 Nodes=n[000-031]" and lines[1] == "SwitchName=su02 Nodes=n[032-063]"
    assert lines[-1] == "SwitchName=fabric Switches=su[01-02]"
    placed = [host for line in lines if "Nodes=" in line for host in expand(line.split("Nodes=")[1])]
    assert sorted(placed) == [f"n{i:03d}" for i in range(64)]


def test_the_drawing_marks_a_problem_on_its_scalable_unit_only() -> None:
    fabric = _fabric(64, 32)
    clean, marked = draw_svg(fabric, title="t1"), draw_svg(fabric, title="t1", problems={"SU 1": 2})
    ET.fromstring(marked)
    assert "problem" not in clean.replace("Red: problems found", "")
    assert marked.count('class="box problem"') == 1 and "32 hosts, 2 switches, 2 problem(s)" in marked
