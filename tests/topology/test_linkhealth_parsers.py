"""UFM event.log, syslog carrier and perfquery parsers: recorded real output where it exists, our own lines
in the documented formats where no fixture does (there is no raw UFM event.log fixture)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import SHARED_FIXTURES
from topology import carrier, counters, ufm_events

pytestmark = pytest.mark.fast  # pure: part of make test-fast

AZURE = SHARED_FIXTURES / "azurehpc" / "data"
PERFQUERY = SHARED_FIXTURES / "infiniband_exporter" / "perfquery"
needs_fixtures = pytest.mark.skipif(not SHARED_FIXTURES.is_dir(), reason="needs ../shared/fixtures")

LINK_DOWN = ("2026-11-02 13:45:01.123 [101] [329] WARNING [Hardware] IB Port [Default / Switch: leaf-a / 1/17/1] "
             "[dev_id: 0x1]: Link went down: (Switch:leaf-a:1/17/1)0x1:33 - (Switch:spine-b:1/4/2)0x2:8, "
             "cable S/N: MT2330FT01234")


def test_link_down_names_both_ends_the_flat_ports_and_the_serial():
    log = ufm_events.parse_event_log(LINK_DOWN + "\n")
    [event] = log.events
    assert (event.device, event.port, event.peer, event.serial) == ("leaf-a", 33, ("spine-b", 8), "MT2330FT01234")
    assert event.kind == "down" and event.code == 329
    assert event.time == datetime(2026, 11, 2, 13, 45, 1, 123000, tzinfo=UTC).timestamp()


def test_a_multi_site_ufm_line_carries_its_site_after_the_level():
    """UFM writes ``Site [name] `` between the level and the topic on a multi-site install (the optional segment
    of the event.log regex in Mellanox/ufm_sdk_3.0's log analyzer): the same event, read the same way."""
    with_site = LINK_DOWN.replace("WARNING [Hardware]", "WARNING Site [dc-west-2] [Hardware]")
    log = ufm_events.parse_event_log(with_site + "\n")
    [event] = log.events
    assert (event.device, event.port, event.peer, event.serial) == ("leaf-a", 33, ("spine-b", 8), "MT2330FT01234")
    assert log.malformed == 0


def test_ufm_port_numbers_follow_cage_and_sub_port():
    assert ufm_events.flat_port("1/17/1") == 33 and ufm_events.flat_port("1/17/2") == 34
    assert ufm_events.flat_port("17/2") == 34 and ufm_events.flat_port("5") == 5
    assert ufm_events.flat_port("1/x/1") is None
    assert all(ufm_events.flat_port(ufm_events.ufm_port_path(port)) == port for port in range(1, 129))


def test_every_line_is_accounted_for_ignored_unknown_malformed_and_host_side():
    text = "\n".join([
        LINK_DOWN,
        "2026-11-02 13:45:02.000 [102] [64] INFO [Fabric] Grid [Default / Grid] [dev_id: 0x0]: GID out of service",
        "2026-11-02 13:45:03.000 [103] [4242] INFO [Fabric] Grid [Default / Grid] [dev_id: 0x0]: brand new code",
        "half a line [329",
        "",
        "2026-11-02 13:45:04.000 [104] [112] MINOR [Hardware] IB Port [Default / Computer: node1 mlx5_0 / 1] "
        "[dev_id: 0x3]: Link Downed counter delta threshold exceeded.",
        "2026-11-02 13:45:05.000 [105] [702] WARNING [Hardware] IB Port [Default / Switch: spine-b / 1/4/2] "
        "[dev_id: 0x2]: Peer Port leaf-a:1/17/1 is considered by SM as unhealthy due to MANUAL.",
        "2026-11-02 13:45:06.000 [106] [702] WARNING [Hardware] IB Port [Default / Switch: spine-b / 1/4/2] "
        "[dev_id: 0x2]: Peer Port leaf-a:1/17/1 is considered by SM as unhealthy due to FLAPPING.",
    ])
    log = ufm_events.parse_event_log(text)
    assert [event.code for event in log.events] == [329, 702]  # MANUAL isolation is not a flap
    assert log.lines == 7 and log.malformed == 1 and log.malformed_samples == ["half a line [329"]
    assert log.unknown_codes == {4242: 1} and log.skipped_devices == 1
    assert log.summary()["ignored"] == 1


def test_local_time_is_read_in_the_configured_zone_and_backward_clocks_are_sorted():
    late = LINK_DOWN.replace("13:45:01.123", "13:50:00.000")
    log = ufm_events.parse_event_log(late + "\n" + LINK_DOWN + "\n", "America/Los_Angeles")
    assert log.backwards_steps == 1
    assert [event.time for event in log.events] == sorted(event.time for event in log.events)
    assert log.events[0].time == datetime(2026, 11, 2, 21, 45, 1, 123000, tzinfo=UTC).timestamp()  # PST = UTC-8


@needs_fixtures
def test_azure_syslogs_give_six_flaps_on_ib6_and_none():
    six = carrier.parse_syslog((AZURE / "1dev_6flap_syslog").read_text(), year=2024)
    assert sum(1 for event in six if not event.up) == 6 and {event.device for event in six} == {"ib6"}
    assert {event.host for event in six} == {"jplc7eb7-vm-0"}
    assert carrier.parse_syslog((AZURE / "0flap_syslog").read_text(), year=2024) == []


def test_syslog_without_a_year_rolls_over_at_new_year():
    text = ("Dec 31 23:59:58 h1 systemd-networkd[1]: ib0: lost carrier\n"
            "Jan  1 00:00:03 h1 systemd-networkd[1]: ib0: Gained carrier\n")
    lost, gained = carrier.parse_syslog(text, year=2027)
    assert datetime.fromtimestamp(lost.time, UTC).year == 2026 and datetime.fromtimestamp(gained.time, UTC).year == 2027
    assert gained.time - lost.time == 5 and gained.up and not lost.up


@needs_fixtures
def test_perfquery_fixtures_single_port_concatenated_blocks_and_empty_output():
    [switch] = counters.parse_perfquery((PERFQUERY / "0x506b4b03005c2740.out").read_text())
    assert (switch.lid, switch.port) == (2052, 1)
    assert switch.values["LinkDownedCounter"] == 1 and switch.values["PortXmitDiscards"] == 20046
    blocks = counters.parse_perfquery((PERFQUERY / "0x7cfe9003009ce5b0.out").read_text())
    assert [block.port for block in blocks] == [1, 2]
    assert counters.parse_perfquery((PERFQUERY / "0x506b4b0300cc02a6.out").read_text()) == []


def test_perfquery_garbage_is_refused_with_its_line():
    with pytest.raises(counters.CounterError, match="line 2"):
        counters.parse_perfquery("# Port extended counters: Lid 1 port 1 (CapMask: 0x5300)\nthis is not a counter\n")


def test_counter_deltas_handle_resets_and_saturation():
    before = {"LinkDownedCounter": 250, "SymbolErrorCounter": 40, "PortXmitWait": 5}
    after = {"LinkDownedCounter": 255, "SymbolErrorCounter": 3, "PortXmitWait": 900}
    changes = {change.counter: change for change in counters.deltas(before, after)}
    assert set(changes) == {"LinkDownedCounter", "SymbolErrorCounter"}  # PortXmitWait is congestion, not errors
    assert changes["LinkDownedCounter"].saturated and changes["LinkDownedCounter"].delta == 5
    assert changes["SymbolErrorCounter"].reset and changes["SymbolErrorCounter"].delta == 3


def test_ibportstate_blocks_and_the_state_a_port_is_left_in() -> None:
    """Our recording of a switch-port disable (infiniband-diags' layout, Mellanox's extended block included)."""
    from provision.facts.ibportstate import final_state, parse_port_info

    text = (Path(__file__).parents[1] / "data" / "ibportstate_switch_disable.txt").read_text()
    blocks = parse_port_info(text)
    assert [(block.title, block.where, block.port) for block in blocks] == [
        ("Initial Switch PortInfo", "Lid 41", 23), ("MLNX ext PortInfo", "Lid 41", 23),
        ("After PortInfo set", "Lid 41", 23)]
    assert blocks[0].fields["PhysLinkState"] == "LinkUp" and blocks[0].fields["LinkSpeedExtActive"] == "53.125 Gbps"
    assert blocks[1].fields["LinkSpeedActive"] == "0x00"  # not mistaken for the port's own speed
    assert final_state(text) == ("Down", "Disabled")
    assert final_state("ibwarn: can't resolve destination port\n") is None


def test_ibportstate_before_2009_titles_its_block_plain_portinfo() -> None:
    """infiniband-diags before the 1.5 series printed ``PortInfo:`` with no Lid/SMLid/LMC lines (format:
    tuananh0788/Exadata issue 2, a Sun QDR switch): a port left Disabled reads as disabled, not as a failed disable."""
    from provision.facts.ibportstate import final_state, parse_port_info

    text = (Path(__file__).parents[1] / "data" / "ibportstate_old_title_disabled.txt").read_text()
    (block,) = parse_port_info(text)
    assert (block.title, block.where, block.port) == ("PortInfo", "Lid 7", 31)
    assert final_state(text) == ("Down", "Disabled")
    assert final_state("PortInfo:\nibportstate: iberror: failed: smp query portinfo failed\n") is None


def test_error_detail_blocks_join_their_port_counters():
    """``perfquery -x -E``: the PortRcvErrorDetails block (format: treydock/infiniband_exporter's perfquery-rcv-error
    fixtures) adds which receive errors grew to the same port's counters."""
    text = ("# Port extended counters: Lid 2052 port 1 (CapMask: 0x5A00)\nPortSelect:......................1\n"
            "SymbolErrorCounter:..............12\nPortRcvErrors:...................7\n"
            "# PortRcvErrorDetails counters: Lid 2052 port 1\nPortSelect:......................1\n"
            "CounterSelect:...................0x0000\nPortLocalPhysicalErrors:.........7\n"
            "PortMalformedPktErrors:..........0\n")
    [block] = counters.parse_perfquery(text)
    assert (block.lid, block.port) == (2052, 1)
    assert block.values["PortRcvErrors"] == 7 and block.values["PortLocalPhysicalErrors"] == 7


@needs_fixtures
def test_the_recorded_rcv_error_details_parse():
    for path in sorted((SHARED_FIXTURES / "infiniband_exporter" / "perfquery-rcv-error").glob("*.out")):
        blocks = counters.parse_perfquery(path.read_text())
        assert blocks and "PortLocalPhysicalErrors" in blocks[0].values, path


def test_ufm_5_link_events_name_their_switch_end():
    """UFM 5.x wrote link events with a ``[Source ... TO Dest: ...]`` object and ``<guid> (Switch: name) : port``
    ends (our line, in the layout IBM/CAST's csm_big_data/logstash/patterns/mellanox_grok.conf reads)."""
    line = ("2019-03-04 10:12:45.301 [12031] [329] WARNING [Fabric_Topology] Link [Source 248a0703007d2a40_7 TO Dest: "
            "506b4b0300a7b3e2_1]: Link went down: 248a0703007d2a40 (Switch: leaf-07) : 7 - 506b4b0300a7b3e2 "
            "(Computer: node113 HCA-1) : 1")
    log = ufm_events.parse_event_log(line + "\n")
    [event] = log.events
    assert (event.device, event.port, event.peer, event.kind) == ("leaf-07", 7, ("node113 HCA-1", 1), "down")
    assert log.malformed == 0
