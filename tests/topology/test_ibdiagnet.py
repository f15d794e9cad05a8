"""ibdiagnet's ``ibdiagnet2.db_csv`` as the observed fabric and as counter snapshots.

Our fixtures follow the file's published shape (``START_X``/``END_X`` tables, each a CSV with a header row,
columns found by name); ``two_leaves.db_csv`` is written by hand, the larger ones by ``_write_db_csv`` below
from the simulated example's design, so an audit of a db_csv can be checked against the same fabric's dump.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from provision.network.sources import design_fabric
from provision.spec import load_spec
from tests.conftest import run_cli
from topology.audit import discovered_links
from topology.ibdiagnet import DbCsvError, cable_serials, parse_db_csv, port_counters
from topology.ibnetdiscover import NOT_REPORTED
from topology.model import HCA, Fabric
from topology.writer import switch_guid

DATA = Path(__file__).parents[1] / "data" / "ibdiagnet"


@pytest.mark.fast
def test_nodes_and_links_become_a_discovery() -> None:
    discovery = parse_db_csv((DATA / "two_leaves.db_csv").read_text())
    kinds = {node.description: node.kind for node in discovery.nodes.values()}
    assert kinds == {"MF0;leaf-a:MQM9790/U1": "switch", "MF0;leaf-b:MQM9790/U1": "switch",
                     "MF0;spine-1:MQM9790/U1": "switch", "gpu01 mlx5_0": "ca", "gpu02 mlx5_0": "ca"}
    assert discovery.nodes["S-fc6a1c0300000001"].line == 7, "each node keeps the line it was read from"
    cables = {frozenset((link.a, link.b)) for link in discovered_links(discovery)}
    assert cables == {frozenset((("leaf-a", "1"), ("gpu01", "gpu01 mlx5_0"))),
                      frozenset((("leaf-b", "1"), ("gpu02", "gpu02 mlx5_0"))),
                      frozenset((("leaf-a", "33"), ("spine-1", "1"))),
                      frozenset((("leaf-b", "33"), ("spine-1", "2")))}
    assert all(link.speed == NOT_REPORTED and link.width is None for link in discovery.links.values())


@pytest.mark.fast
def test_counters_and_serials_by_column_name() -> None:
    text = (DATA / "two_leaves.db_csv").read_text()
    counters = port_counters(text)
    uplink = counters["fc6a1c0300000001", 33]
    assert uplink["LinkDownedCounter"] == 3 and uplink["PortXmitData"] == 987654321
    assert "PortXmitWait" not in uplink, "N/A is no reading, not zero"
    assert cable_serials(text) == {("fc6a1c0300000001", 33): "MT2412FT01234"}


@pytest.mark.fast
def test_a_truncated_file_is_refused_with_its_line() -> None:
    text = (DATA / "two_leaves.db_csv").read_text()
    with pytest.raises(DbCsvError) as caught:
        parse_db_csv(text[: text.index("END_LINKS")])
    assert caught.value.line == 19 and "table LINKS is never closed" in caught.value.message
    with pytest.raises(DbCsvError) as caught:
        parse_db_csv(text.replace("NodeGuid2", "Guid2"))
    assert "table LINKS has no NodeGuid2 column" in caught.value.message


def _write_db_csv(fabric: Fabric, *, leave_out: tuple[str, int] | None = None,
                  counters: dict[tuple[str, int], int] | None = None,
                  serials: dict[tuple[str, int], str] | None = None) -> str:
    """The fabric as ibdiagnet would write it: every cable but the one at ``leave_out``; ``counters`` gives a
    switch port's LinkDownedCounterExt."""
    guid = {node: (switch_guid(node) if data["kind"] != HCA else f"946dae03{abs(hash(node)) % 16**8:08x}")
            for node, data in fabric.graph.nodes(data=True)}
    lines = ["START_NODES", "NodeDesc,NumPorts,NodeType,SystemImageGUID,NodeGUID"]
    for node, data in sorted(fabric.graph.nodes(data=True)):
        description = f"{data['host']} {data['hca']}" if data["kind"] == HCA else f"MF0;{node}:MQM9790/U1"
        kind = 1 if data["kind"] == HCA else 2
        lines.append(f'"{description}",{1 if kind == 1 else 64},{kind},0x{guid[node]},0x{guid[node]}')
    lines += ["END_NODES", "", "START_LINKS", "NodeGuid1,PortNum1,NodeGuid2,PortNum2"]
    for cable in fabric.cables():
        if leave_out in (cable.a, cable.b):
            continue
        lines.append(f"0x{guid[cable.a[0]]},{cable.a[1]},0x{guid[cable.b[0]]},{cable.b[1]}")
    lines += ["END_LINKS", "", "START_PM_INFO", "NodeGUID,PortNumber,SymbolErrorCounterExt,LinkDownedCounterExt"]
    lines += [f"0x{guid[node]},{port},0,{value}" for (node, port), value in (counters or {}).items()]
    lines += ["END_PM_INFO", "", "START_CABLE_INFO", "NodeGuid,PortNum,Vendor,PN,SN"]
    lines += [f"0x{guid[node]},{port},Mellanox,MFA7U10-H003,{serial}"
              for (node, port), serial in (serials or {}).items()]
    lines += ["END_CABLE_INFO"]
    return "\r\n".join(lines) + "\r\n"


def test_audit_and_flaps_read_a_db_csv(sim_spec: Path, tmp_path: Path) -> None:
    design = design_fabric(load_spec(sim_spec))
    uplink = ("leaf-su01-r0", 5)  # the leaf's first uplink in the example (4 hosts per SU)
    cable = design.cable_at(uplink)
    assert cable is not None and design.kind(cable.other(uplink)[0]) == "spine"
    observed = tmp_path / "ibdiagnet2.db_csv"
    observed.write_text(_write_db_csv(design, leave_out=uplink))
    audit = run_cli("topology", "audit", str(sim_spec), "--observed", str(observed), "--json")
    assert audit.returncode == 1, audit.stderr
    found = json.loads(audit.stdout)["cables"]
    assert [(row["category"], row["expected"]) for row in found] == [("missing", cable.label())]

    before, after = tmp_path / "before.db_csv", tmp_path / "after.db_csv"
    before.write_text(_write_db_csv(design, counters={uplink: 2}))
    after.write_text(_write_db_csv(design, counters={uplink: 19}, serials={uplink: "MT2430FT00042"}))
    os.utime(before, (1_790_000_000, 1_790_000_000))
    os.utime(after, (1_790_003_600, 1_790_003_600))
    flaps = run_cli("topology", "flaps", str(sim_spec), "--counters", str(before), "--counters", str(after),
                    "--json")
    assert flaps.returncode == 1, flaps.stderr
    suspects = json.loads(flaps.stdout)["suspects"]
    assert [(row["cable"], row["serial"]) for row in suspects] == [
        (" - ".join(sorted(f"{node}/{port}" for node, port in (cable.a, cable.b))), "MT2430FT00042")]
    assert "LinkDownedCounter" in " ".join(suspects[0]["evidence"])


def test_a_file_that_is_neither_is_refused(sim_spec: Path, tmp_path: Path) -> None:
    broken = tmp_path / "ibdiagnet2.db_csv"
    broken.write_text("START_NODES\nNodeDesc,NodeType,NodeGUID\n\"x\",2,0x1\nEND_NODES\nSTART_LINKS\n")
    result = run_cli("topology", "audit", str(sim_spec), "--observed", str(broken))
    assert result.returncode == 2
    assert "line 5: table LINKS is never closed" in result.stderr
