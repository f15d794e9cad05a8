"""Which trays that passed every stage their NVLink domain's policy admits (issue 53, item 4): ``hold`` none of a
domain that is not whole, ``shrink`` the rest down to ``min_trays``; a whole domain, and a tray of an HGX fleet, as
the burn-in found them."""

from __future__ import annotations

import pytest

from provision.fleet.domains import held_trays
from provision.spec import load_spec
from tests.conftest import EXAMPLES
from topology.hostlist import expand

pytestmark = pytest.mark.fast
LOADED = load_spec(EXAMPLES / "gb200-nvl72.yaml")  # rack1 (gb001-018) shrinks to 16 trays; rack2 (gb019-036) holds
RACK1, RACK2 = expand("gb[001-018]"), expand("gb[019-036]")


def test_a_whole_domain_is_admitted_from_passing_and_admitted_trays() -> None:
    states = dict.fromkeys(RACK2[:9], "admitted")
    assert held_trays(LOADED, states, RACK1 + RACK2[9:]) == {}


def test_a_holding_domain_keeps_every_passing_tray_out_and_names_the_missing_one() -> None:
    held = held_trays(LOADED, {"gb020": "quarantined"}, [tray for tray in RACK2 if tray != "gb020"] + RACK1)
    assert set(held) == set(RACK2) - {"gb020"}
    assert "17 of 18 trays; not: gb020 (quarantined)" in held["gb019"] and "on_tray_failure: hold" in held["gb019"]


def test_a_shrinking_domain_admits_down_to_min_trays_and_no_further() -> None:
    assert held_trays(LOADED, {"gb005": "quarantined", "gb006": "quarantined"},
                      [tray for tray in RACK1 if tray not in ("gb005", "gb006")]) == {}
    short = held_trays(LOADED, {}, RACK1[:13])
    assert set(short) == set(RACK1[:13]) and "would shrink to 13 trays" in short["gb001"]
    assert "under its min_trays 14" in short["gb001"]
