"""The subnet manager's forwarding tables, read from the two dumps the field makes of them.

``tests/data/lfts/`` holds our own two-leaf, two-spine fabric in both formats, written as the tools print them:
``dump_fts.txt`` as rdma-core's infiniband-diags ``dump_fts`` (and ``ibroute``) prints a switch's unicast table
(``dump_fts.c``: the header with the switch's directed-route path, two column lines, ``0x%04x %03u : (...)`` and
``N valid lids dumped``), ``opensm-lfts.dump`` as OpenSM's ``dump_ucast_lfts`` writes it (``('desc')`` in the
header, ``#`` before the destination, the table's top LID as its count). The LIDs are in the order the SM met the
ports, and the routes send gpu03 through spine-2 and gpu04 through spine-1: not our D-mod-K's choice.
``ibnetdiscover.txt`` is the same fabric as ``ibnetdiscover`` prints it (default format: each CA port's GUID in
brackets, ``lid N`` in the comments), whose cables the flows are walked over.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from topology.lfts import Destination, LftError, parse_lfts

pytestmark = pytest.mark.fast
DATA = Path(__file__).parent / "data" / "lfts"
LEAF1, SPINE1 = "0x0002c90300a1b2c0", "0x0002c90300a1b3c0"


@pytest.mark.parametrize(("name", "form"), [("dump_fts.txt", "infiniband-diags"), ("opensm-lfts.dump", "opensm")])
def test_both_dumps_give_the_same_tables(name: str, form: str) -> None:
    tables = parse_lfts((DATA / name).read_text())
    assert tables.format == form and len(tables.switches) == 4
    leaf = tables.switches[LEAF1]
    assert leaf.description == "MF0;leaf-1:MQM9700/U1"
    assert leaf.out_port == {1: 1, 2: 0, 3: 3, 4: 4, 5: 3, 6: 2, 7: 4, 8: 3}  # LID 2 is the leaf itself: port 0
    assert leaf.destinations[7] == Destination("ca", "0x0002c90300d4e5f3", "gpu03 mlx5_0")
    assert tables.switches[SPINE1].out_port[7] == 2
    lids = tables.lid_of_port()
    assert lids["0x0002c90300d4e5f1"] == 1 and lids["0x0002c90300d4e5f4"] == 8 and lids[LEAF1] == 2


def test_a_dump_without_destinations_and_one_with_invalid_entries_still_route() -> None:
    brief = ("Unicast lids [0x0-0x3] of switch Lid 2 guid 0x2c90300a1b2c0 (leaf-1):\n  Lid  Out   Destination\n"
             "       Port     Info \n0x0001 001 \n0x0003 003 \n2 valid lids dumped \n")  # dump_fts -n
    table = parse_lfts(brief).switches[LEAF1]
    assert table.out_port == {1: 1, 3: 3} and table.destinations == {}
    every = ("Unicast lids [0x0-0x2] of switch Lid 2 guid 0x0002c90300a1b2c0 (leaf-1):\n"
             "0x0000 255 : (illegal port)\n0x0001 001 : (path #1 out of 2: portguid 0x0002c90300d4e5f1)\n"
             "0x0002 000 : (Switch portguid 0x0002c90300a1b2c0: 'leaf-1')\n3 lids dumped \n")  # dump_fts -a, LMC 1
    table = parse_lfts(every).switches[LEAF1]
    assert table.out_port == {1: 1, 2: 0} and set(table.destinations) == {2}


@pytest.mark.parametrize(("text", "line", "words"), [
    ("Unicast lids [0x0-0x2] of switch Lid 2 guid 0x0002c90300a1b2c0 (leaf-1):\n0x0001 001 : (x)\n", 1,
     "ends without its count of lids"),
    ("Unicast lids [0x0-0x2] of switch Lid 2 guid 0x0002c90300a1b2c0 (leaf-1):\n0x0001 001\n2 valid lids dumped\n",
     1, "counts 2 lids but it lists 1"),
    ("Unicast lids [0-8] of switch Lid 2 guid 0x0002c90300a1b2c0 ('leaf-1'):\n0x0001 001 # x\n7 lids dumped\n", 1,
     "counts 7 lids but its header's top is 8"),
    ("0x0001 001 : (Switch portguid 0x1: 'x')\n", 1, "before any switch's header"),
    ("Unicast lids [0x0-0x1] of switch Lid 2 guid 0x2 (leaf-1):\nLid 1 -> port 1\n", 2, "not a forwarding-table"),
    ("Switch 41 \"S-0002c90300a1b2c0\"\n", 1, "not a forwarding-table line"),
    ("", 1, "no switch's forwarding table"),
])
def test_a_table_cut_short_or_another_file_is_refused_where_it_is(text: str, line: int, words: str) -> None:
    with pytest.raises(LftError) as caught:
        parse_lfts(text)
    assert caught.value.line == line and words in caught.value.message, caught.value


def _routes(dump: str = "dump_fts.txt"):
    from topology import ibnetdiscover
    from topology.smroutes import TableRoutes

    return TableRoutes(parse_lfts((DATA / dump).read_text()),
                       ibnetdiscover.parse((DATA / "ibnetdiscover.txt").read_text()))


@pytest.mark.parametrize("dump", ["dump_fts.txt", "opensm-lfts.dump"])
def test_a_flow_crosses_the_cables_the_switch_tables_send_it_through(dump: str) -> None:
    """gpu01 to gpu03 climbs to spine-2 (leaf-1 sends LID 7 out of port 4), gpu03 to gpu02 through spine-1: the
    SM's choice, whichever dump says it, read with the discovery's cables (ibnetdiscover of the same fabric)."""
    routes = _routes(dump)
    there = routes.cables("0x0002c90300d4e5f1", "0x0002c90300d4e5f3")
    assert len(there) == 4 and {link.ends for link in there[1:3]} == {
        frozenset({("S-0002c90300a1b2c0", 4), ("S-0002c90300a1b4c0", 1)}),
        frozenset({("S-0002c90300a1b4c0", 2), ("S-0002c90300a1b5c0", 4)})}
    back = routes.cables("0x2c90300d4e5f3", "0x2c90300d4e5f2")
    assert ("S-0002c90300a1b3c0", 2) in back[1].ends and ("S-0002c90300a1b2c0", 3) in back[2].ends
    assert ("H-0002c90300d4e5e2", 1) in back[-1].ends
    assert routes.lid(("H-0002c90300d4e5e4", 1)) == 8  # the discovery's LID, the dump's agree


def test_a_walk_the_tables_cannot_finish_names_the_switch_and_the_lid() -> None:
    from topology.smroutes import RouteError

    text = (DATA / "dump_fts.txt").read_text()
    unrouted = text.replace("0x0007 004 : (Channel Adapter portguid 0x0002c90300d4e5f3: 'gpu03 mlx5_0')\n", "", 1)
    unrouted = unrouted.replace("8 valid lids dumped", "7 valid lids dumped", 1)
    routes = _routes()
    routes.tables = parse_lfts(unrouted)
    with pytest.raises(RouteError, match=r"leaf-1:MQM9700/U1 \(S-0002c90300a1b2c0\) has no route to LID 7"):
        routes.cables("0x0002c90300d4e5f1", "0x0002c90300d4e5f3")
    looping = text.replace("0x0007 002 : (Channel Adapter portguid 0x0002c90300d4e5f3: 'gpu03 mlx5_0')\n"
                           "0x0008 002", "0x0007 001 : (Channel Adapter portguid 0x0002c90300d4e5f3: 'gpu03 mlx5_0')\n"
                           "0x0008 002", 1)  # spine-1 sends LID 7 back down to leaf-1, which sends it up again
    routes = _routes()
    routes.tables = parse_lfts(looping.replace("0x0007 004 : (Channel", "0x0007 003 : (Channel", 1))
    with pytest.raises(RouteError, match="the tables loop: LID 7"):
        routes.cables("0x0002c90300d4e5f1", "0x0002c90300d4e5f3")
    with pytest.raises(RouteError, match="port GUID 0x00000000000000ff is not in the discovery"):
        routes.cables("0xff", "0x0002c90300d4e5f3")
