"""The watch's forecasts (issue 54): a host cable's switch port whose symbol errors grow faster and faster, read
from counter snapshots arriving hourly as the passes read them, is flagged for its host while its window's count
is still far under the link-health threshold; a port erring at a steady rate is not; the store keeps both, and
status's reader shows only the one with a trend."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.network.sources import design_fabric
from provision.sim.develop import counted
from provision.sim.ufm import write_perfquery
from provision.spec import load_spec
from provision.spec.model import Forecasting, LinkHealth
from provision.state.store import StateStore
from provision.watch.forecasts import SOURCE, forecast_pass
from provision.watch.signals import Sources, watch_pass
from tests.conftest import EXAMPLES
from topology.counters import THRESHOLDS
from topology.model import Fabric, Port

HOUR = 3600.0
START = 1_795_000_000.0  # 2026-11-18, as a watch's wall clock would read


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return design_fabric(load_spec(EXAMPLES / "sim-cluster.yaml"))


def _switch_ends(fabric: Fabric, count: int) -> list[tuple[str, Port]]:
    """The switch end of the first ``count`` host cables, with the host."""
    found = []
    for cable in fabric.cables():
        host_end = fabric.host_end(cable)
        if host_end is not None:
            found.append((str(fabric.graph.nodes[host_end[0]]["host"]), cable.other(host_end)))
        if len(found) == count:
            return found
    raise AssertionError("the example has too few host cables")


def _snapshot(fabric: Fabric, directory: Path, captured: float, symbol_errors: dict[Port, int]) -> None:
    readings = {}
    for cable in fabric.cables():
        for end in (cable.a, cable.b):
            if fabric.graph.nodes[end[0]].get("kind") != "hca":
                readings[end] = {name: 0 for name in THRESHOLDS} | {"SymbolErrorCounter": symbol_errors.get(end, 0)}
    write_perfquery(readings, directory, captured, {})


def test_a_port_erring_faster_and_faster_is_flagged_long_before_its_threshold(fabric: Fabric, tmp_path: Path) -> None:
    (degrading_host, degrading), (steady_host, steady) = _switch_ends(fabric, 2)
    health = LinkHealth(counter_thresholds={"SymbolErrorCounter": 1000})
    snapshots = tmp_path / "counters"
    with StateStore(tmp_path / "state") as store:
        for hour in range(25):  # a snapshot an hour, read by a pass every six
            _snapshot(fabric, snapshots / f"{hour:04d}", START + hour * HOUR,
                      {degrading: counted(2.0, 6.0, hour), steady: 9 * hour})
            if hour and hour % 6 == 0:
                seen = watch_pass(store, fabric, Sources(counters=snapshots), health, now=START + hour * HOUR,
                                  run_id=f"pass-{hour}")
                assert seen.problems == [] and not seen.judgement.suspects  # under the threshold all along
        judged = forecast_pass(store, fabric, health, Forecasting(), until=START + 24 * HOUR, run_id="pass-24")
        rows = store.forecasts()
    flagged = [one for one in judged if one.flagged]
    assert [(one.node, one.component) for one in flagged] == [
        (degrading_host, f"{degrading[0]}/{degrading[1]} SymbolErrorCounter")], judged
    (one,) = flagged
    assert one.forecast.count < 300 and one.forecast.hours is not None and 0 < one.forecast.hours < 72
    steady_row = next(row for row in rows if row["node"] == steady_host
                      and row["component"] == f"{steady[0]}/{steady[1]} SymbolErrorCounter")
    assert steady_row["hours"] is None and not steady_row["flagged"] and steady_row["source"] == SOURCE
    assert [row["node"] for row in rows if row["flagged"]] == [degrading_host]


def test_a_narrow_horizon_flags_nothing_and_no_snapshot_forecasts_nothing(fabric: Fabric, tmp_path: Path) -> None:
    health = LinkHealth(counter_thresholds={"SymbolErrorCounter": 1000})
    with StateStore(tmp_path / "state") as store:
        assert forecast_pass(store, fabric, health, Forecasting(), until=START, run_id=None) == []
        (_, port), = _switch_ends(fabric, 1)
        snapshots = tmp_path / "counters"
        for hour in range(25):
            _snapshot(fabric, snapshots / f"{hour:04d}", START + hour * HOUR, {port: counted(2.0, 6.0, hour)})
        watch_pass(store, fabric, Sources(counters=snapshots), health, now=START + 24 * HOUR, run_id="pass")
        judged = forecast_pass(store, fabric, health, Forecasting(horizon="1h"), until=START + 24 * HOUR,
                               run_id="pass")
    assert not any(one.flagged for one in judged) and any(one.forecast.trending for one in judged)


def test_a_port_whose_changes_left_the_window_is_no_longer_forecast(fabric: Fabric, tmp_path: Path) -> None:
    health = LinkHealth(counter_thresholds={"SymbolErrorCounter": 1000})
    (_, port), = _switch_ends(fabric, 1)
    snapshots = tmp_path / "counters"
    with StateStore(tmp_path / "state") as store:
        for hour in range(25):
            _snapshot(fabric, snapshots / f"{hour:04d}", START + hour * HOUR, {port: counted(2.0, 6.0, hour)})
        watch_pass(store, fabric, Sources(counters=snapshots), health, now=START + 24 * HOUR, run_id="pass")
        forecast_pass(store, fabric, health, Forecasting(), until=START + 24 * HOUR, run_id="pass")
        assert any(row["flagged"] for row in store.forecasts())
        # two days on, nothing new: the window holds none of those changes, and no stale warning stays behind
        forecast_pass(store, fabric, health, Forecasting(), until=START + 72 * HOUR, run_id="later")
        assert store.forecasts() == []


def test_the_report_plots_a_watch_forecast_with_the_series_it_was_made_from(fabric: Fabric, tmp_path: Path) -> None:
    from provision.report.gather import forecast_rows

    health = LinkHealth(counter_thresholds={"SymbolErrorCounter": 1000})
    (_, port), = _switch_ends(fabric, 1)
    snapshots = tmp_path / "counters"
    with StateStore(tmp_path / "state") as store:
        for hour in range(25):
            _snapshot(fabric, snapshots / f"{hour:04d}", START + hour * HOUR, {port: counted(2.0, 6.0, hour)})
        watch_pass(store, fabric, Sources(counters=snapshots), health, now=START + 24 * HOUR, run_id="pass")
        forecast_pass(store, fabric, health, Forecasting(), until=START + 24 * HOUR, run_id="pass")
        (row,) = forecast_rows(store, health.window_hours)
    assert row["flagged"] and row["points"][0] == (0.0, 0.0) and row["points"][-1] == (24.0, counted(2.0, 6.0, 24))
    assert row["at_h"] == 24.0  # hours into the window, as the points are
