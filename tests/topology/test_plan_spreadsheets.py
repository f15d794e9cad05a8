"""Cabling plans exported from a spreadsheet: the header found wherever it sits, columns by name, every other
column kept as the cable's attributes (shown in findings), a row that cannot be read reported with its line while
the rest is still audited."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from tests.conftest import SHARED_FIXTURES, run_cli
from topology.cabling import PlanError, parse_plan, read_plan

pytestmark = pytest.mark.fast

DATA = Path(__file__).parents[1] / "data" / "plans"
OTHER = SHARED_FIXTURES / "ufm_ndt" / "other_ndts"
UFM = SHARED_FIXTURES / "ufm_ndt"
needs_shared = pytest.mark.skipif(not UFM.is_dir(), reason="../shared/fixtures absent in this clone")


def test_our_spreadsheet_export() -> None:
    reading = read_plan((DATA / "spreadsheet_export.csv").read_text())
    # four readable rows, one of them the same cable written backwards
    assert sorted((cable.a, cable.b) for cable in reading.cables) == [
        (("leaf-su01-r0", "33"), ("spine-g01-01", "1")), (("leaf-su01-r0", "34"), ("spine-g01-02", "1")),
        (("leaf-su01-r1", "33"), ("spine-g01-01", "2"))]
    assert [(problem.line, problem.message) for problem in reading.problems] == [
        (8, "cannot read port 'Prt 34' of 'leaf-su01-r1' (expected 'Port N', 'Blade B_Port U/N', a number, or an "
            "HCA's node description)")]
    first = dict(reading.cables[0].attributes)
    assert first == {"rack #": "R12", "U height": "U41", "Cable Length": "3", "Cable type": "400G NDR OSFP",
                     "S/N": "MT2431FT0A11"}
    assert dict(reading.cables[1].attributes)["column 11"] == "spare cell"  # a stray cell is kept, not lost


def test_a_header_that_lacks_a_key_column_is_refused() -> None:
    with pytest.raises(PlanError, match="names start device, end device, end port but not start port"):
        parse_plan("#StartDevice,EndDevice,EndPort,LinkType\nsw1,sw2,Port 1,Data\n")


@needs_shared
@pytest.mark.parametrize(("name", "cables"), [("ndt.csv", 400), ("ndth2s.csv", 320)])
def test_the_real_spreadsheet_plans_read_whole(name: str, cables: int) -> None:
    reading = read_plan((OTHER / name).read_text())
    assert len(reading.cables) == cables and reading.problems == []
    attributes = dict(reading.cables[0].attributes)
    assert attributes["Speed"] == "200000" and "200G HDR cable" in attributes.values()
    assert "Cable Length" in attributes


@needs_shared
def test_a_spreadsheet_export_audits_like_the_ndt_it_came_from(tmp_path: Path) -> None:
    """The UFM positive-flow plan rewritten the way a spreadsheet exports it (title row, empty first column,
    ``#Fields:`` inside a cell, extra columns) plus one unreadable row: the same findings, the row reported."""
    source = UFM / "positive_flow_ndts" / "switch_to_switch_topo2.ndt"
    rows = [row for row in csv.reader(io.StringIO(source.read_text())) if row]
    export = io.StringIO()
    writer = csv.writer(export)
    writer.writerow(["Switch to switch plan", "", "", "", "", "", ""])
    writer.writerow(["", "rack #", "#Fields:StartDevice", "StartPort", "EndDevice", "EndPort", "Cable Length"])
    for number, row in enumerate(rows[1:]):
        writer.writerow(["", f"R{number % 7}", row[0], row[1], row[2], row[3], "3"])
    writer.writerow(["", "R9", "SAT11-0101-0927-20IB0", "Port x", "SAT11-0101-0903-01IB1-A", "Port 1", "3"])
    writer.writerow(["", "R9", "SAT11-0101-9999-01IB0", "Port 1", "SAT11-0101-9999-02IB0", "Port 1", "7"])
    spreadsheet = tmp_path / "plan.csv"
    spreadsheet.write_text(export.getvalue())
    dump = UFM / "positive_flow_ibnetdiscover" / "ibnetdiscover_director.txt"
    original = run_cli("topology", "audit", "--json", "--design", str(source), "--observed", str(dump), timeout=120)
    exported = run_cli("topology", "audit", "--json", "--design", str(spreadsheet), "--observed", str(dump),
                       timeout=120)
    assert original.returncode == exported.returncode == 1, exported.stderr
    before, after = json.loads(original.stdout), json.loads(exported.stdout)
    assert after["counts"] == {**before["counts"], "missing": before["counts"]["missing"] + 1}
    assert after["unread_plan_rows"] == [f"{spreadsheet}:{len(rows) + 2}: cannot read port 'Port x' of "
                                         "'SAT11-0101-0927-20IB0' (expected 'Port N', 'Blade B_Port U/N', a number, or "
                                         "an HCA's node description)"]
    missing = [cable for cable in after["cables"] if cable["category"] == "missing"]
    assert [cable["attributes"] for cable in missing] == [{"rack #": "R9", "Cable Length": "7"}]
