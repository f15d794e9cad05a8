"""The watch's passive signals over passes: UFM lines and counter snapshots as they arrive, each read once, kept
in the store, and judged over the link-health window as ``topology flaps`` judges a whole file (issue 56, item 3).

The UFM lines are written by the simulator's UFM (``provision.sim.ufm``: UFM's own line format, checked against
real event logs in tests/sim); the fabric is the example cluster's design.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from provision.network.sources import design_fabric
from provision.sim.ufm import EventWriter, write_perfquery
from provision.spec import load_spec
from provision.spec.model import LinkHealth
from provision.state.store import StateStore
from provision.watch.signals import Sources, watch_pass
from tests.conftest import EXAMPLES
from topology.counters import THRESHOLDS
from topology.model import Cable, Fabric

HOUR = 3600.0
START = 1_795_000_000.0  # 2026-11-18: the passes' clock, as a watch's wall clock would read


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return design_fabric(load_spec(EXAMPLES / "sim-cluster.yaml"))


def _leaf_to_spine(fabric: Fabric) -> Cable:
    return next(cable for cable in fabric.cables() if fabric.host_end(cable) is None)


def _flaps(fabric: Fabric, path: Path, cable: Cable, times: list[float], writer: EventWriter) -> None:
    writer.lines.clear()
    for when in times:
        writer.link_down(fabric, when, cable)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(writer.text())


def test_flaps_arriving_over_passes_are_judged_together_and_read_once(fabric: Fabric, tmp_path: Path) -> None:
    """Two flaps, then four more an hour later: the second pass judges all six (the policy's five within 24 h
    make a cable flapping), a watch restarted on the same store reads nothing twice, and the cable is healthy
    again once its flaps have left the window."""
    cable = _leaf_to_spine(fabric)
    log = tmp_path / "event.log"
    writer = EventWriter([])
    sources = Sources(ufm_events=[log])
    health = LinkHealth()
    _flaps(fabric, log, cable, [START + 60, START + 600], writer)
    with StateStore(tmp_path / "state") as store:
        first = watch_pass(store, fabric, sources, health, now=START + 900, run_id="pass-1")
        assert first.problems == []
        assert first.readings[0].observations >= 2 and not first.judgement.suspects
        _flaps(fabric, log, cable, [START + HOUR + offset for offset in (0, 300, 600, 900)], writer)
        second = watch_pass(store, fabric, sources, health, now=START + 2 * HOUR, run_id="pass-2")
    [suspect] = second.judgement.suspects
    assert suspect.cable == cable and suspect.klass == "flapping" and suspect.flaps == 6
    with StateStore(tmp_path / "state") as store:  # the watch restarted: its cursors and observations kept
        again = watch_pass(store, fabric, sources, health, now=START + 2 * HOUR + 60, run_id="pass-3")
        assert again.readings[0].lines == 0
        assert [(item.cable, item.flaps) for item in again.judgement.suspects] == [(cable, 6)]
        later = watch_pass(store, fabric, sources, health, now=START + 27 * HOUR, run_id="pass-4")
        assert later.judgement.suspects == []
        forgotten = watch_pass(store, fabric, sources, health, now=START + 50 * HOUR, run_id="pass-5")
        assert forgotten.pruned > 0 and store.watch_signals_since(0.0) == ([], [], [])


def test_a_rotated_log_loses_no_flap(fabric: Fabric, tmp_path: Path) -> None:
    cable = _leaf_to_spine(fabric)
    log = tmp_path / "event.log"
    writer = EventWriter([])
    sources = Sources(ufm_events=[log])
    with StateStore(tmp_path / "state") as store:
        _flaps(fabric, log, cable, [START + 60, START + 120, START + 180], writer)
        watch_pass(store, fabric, sources, LinkHealth(), now=START + 200, run_id="pass-1")
        _flaps(fabric, log, cable, [START + 240], writer)  # written, not yet read, when logrotate renames it
        log.rename(tmp_path / "event.log.1")
        _flaps(fabric, log, cable, [START + 300, START + 360], writer)
        rotated = watch_pass(store, fabric, sources, LinkHealth(), now=START + 400, run_id="pass-2")
    assert rotated.readings[0].notes and "renamed to event.log.1" in rotated.readings[0].notes[0]
    [suspect] = rotated.judgement.suspects
    assert suspect.flaps == 6


def test_a_missing_or_unreadable_source_is_a_problem_of_the_pass_not_health(fabric: Fabric, tmp_path: Path) -> None:
    log, garbage = tmp_path / "event.log", tmp_path / "other.log"
    garbage.write_text("this is not UFM's event log\nnor is this\n", encoding="utf-8")
    with StateStore(tmp_path / "state") as store:
        result = watch_pass(store, fabric, Sources(ufm_events=[log, garbage]), LinkHealth(), now=START,
                            run_id="pass-1")
    missing, unread = result.problems
    assert missing.startswith(f"ufm:{log}: missing")
    assert "2 new line(s), none of them a UFM event line" in unread


def _counters(fabric: Fabric, directory: Path, captured: float, symbol_errors: dict[tuple[str, int], int]) -> None:
    readings = {}
    for cable in fabric.cables():
        for end in (cable.a, cable.b):
            if fabric.graph.nodes[end[0]].get("kind") != "hca":
                readings[end] = {name: 0 for name in THRESHOLDS} | {"SymbolErrorCounter": symbol_errors.get(end, 0)}
    write_perfquery(readings, directory, captured, {})


def test_counter_snapshots_arriving_are_compared_with_the_one_before(fabric: Fabric, tmp_path: Path) -> None:
    """A port's symbol errors grow by 4 a snapshot: below the threshold (10) between two, past it over the
    window's three intervals; each new snapshot is compared with the last one read, kept by name."""
    cable = _leaf_to_spine(fabric)
    port = cable.a if fabric.graph.nodes[cable.a[0]].get("kind") != "hca" else cable.b
    snapshots = tmp_path / "counters"
    sources = Sources(counters=snapshots)
    with StateStore(tmp_path / "state") as store:
        _counters(fabric, snapshots / "0000", START, {})
        _counters(fabric, snapshots / "0001", START + HOUR, {port: 4})
        first = watch_pass(store, fabric, sources, LinkHealth(), now=START + HOUR, run_id="pass-1")
        assert first.problems == [] and first.readings[0].observations == 1
        assert not first.judgement.suspects
        _counters(fabric, snapshots / "0002", START + 2 * HOUR, {port: 8})
        _counters(fabric, snapshots / "0003", START + 3 * HOUR, {port: 12})
        second = watch_pass(store, fabric, sources, LinkHealth(), now=START + 3 * HOUR, run_id="pass-2")
    assert second.readings[0].lines == 2  # 0002 and 0003; 0001 was the last read
    [suspect] = second.judgement.suspects
    assert suspect.cable == cable and suspect.klass == "erroring"
    assert suspect.errors.get("SymbolErrorCounter") == 12


def test_the_hosts_carrier_lines_are_mapped_to_their_rail_cable(fabric: Fabric, tmp_path: Path) -> None:
    """systemd-networkd's ``ibN: lost carrier`` lines as a syslog server keeps them, each netdev mapped to its
    HCA by the spec's netdev map (``*`` for every host): a host cable left down is ``down``; a line of a netdev
    the map does not name is unmatched, never guessed."""
    syslog, mapping = tmp_path / "ib.log", tmp_path / "netdev.map"
    mapping.write_text("# host netdev hca\n* ib0 mlx5_0\n", encoding="utf-8")
    moment = datetime.fromtimestamp(START, UTC)
    stamp = f"{moment:%b} {moment.day:2d} {moment:%H:%M:%S}"
    syslog.write_text(f"{stamp} sim03 systemd-networkd[812]: ib0: lost carrier\n"
                      f"{stamp} sim03 systemd-networkd[812]: ib7: lost carrier\n"
                      f"{stamp} sim03 kernel: an unrelated line\n", encoding="utf-8")
    with StateStore(tmp_path / "state") as store:
        result = watch_pass(store, fabric, Sources(syslogs=[syslog], netdev_map=mapping), LinkHealth(),
                            now=START + 60, run_id="pass-1")
    [reading] = result.readings
    assert reading.problem == "" and reading.observations == 1 and reading.unmatched == 1
    [suspect] = result.judgement.suspects
    assert suspect.cable == fabric.cable_at(("sim03/mlx5_0", 1)) and suspect.klass == "down"


def test_the_specs_sources_are_followed_relative_to_it_and_a_simulated_cluster_follows_its_own(tmp_path: Path) -> None:
    """``watch.signals``' paths act: resolved against the spec's folder; without any, a simulated cluster's own
    UFM log and counter snapshots are followed."""
    import yaml

    from provision.watch.signals import sources_of
    from tests.simhelpers import write_spec

    spec = write_spec(tmp_path, [])
    state = tmp_path / "state"
    default = sources_of(load_spec(spec), state)
    assert default.ufm_events == [state / "sim" / "fabric" / "ufm" / "event.log"]
    assert default.counters == state / "sim" / "fabric" / "counters" and default.syslogs == []
    data = yaml.safe_load(spec.read_text())
    data["watch"] = {"signals": {"ufm_events": ["ufm/event.log"], "syslogs": ["/var/log/ib.log"],
                                 "counters": "snapshots", "netdev_map": "netdev.map"}}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    given = sources_of(load_spec(spec), state)
    assert given.ufm_events == [tmp_path / "ufm" / "event.log"] and given.syslogs == [Path("/var/log/ib.log")]
    assert (given.counters, given.netdev_map) == (tmp_path / "snapshots", tmp_path / "netdev.map")
