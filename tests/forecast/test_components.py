"""Which series are forecast and which forecasts flag their node (issue 54): the soak's InfiniBand error counters
against their allowance over the soak; a degrading link flagged hours before its count gets there, a flat or
steady one never; the store keeps each component's newest forecast and the hour it first flagged its node."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from provision.forecast.components import Series, judge, soak_series
from provision.sim.develop import COUNTER_MAX, counted
from provision.state import StateStore
from provision.state.store import ForecastRecord

pytestmark = pytest.mark.fast

ALLOWED = {"symbol_error": 10.0, "link_downed": 0.0, "port_rcv_errors": 10.0}


def _degrading(hours: int, *, start_h: float = 5.0) -> list[tuple[float, float]]:
    """Hourly reads (seconds into the soak) of a counter whose rate, 1/h at injection, doubles every 4 h."""
    return [(3600.0 * hour, float(counted(1.0, 4.0, start_h + hour))) for hour in range(hours + 1)]


def test_the_soak_forecasts_the_counters_it_allows_some_of() -> None:
    series = {"mlx5_0/symbol_error": [(0.0, 3.0), (3600.0, 5.0)], "mlx5_0/link_downed": [(0.0, 0.0)],
              "gpu0/temperature_c": [(0.0, 40.0)], "mlx5_1/port_rcv_errors": []}
    found = soak_series("n1", series, ALLOWED, 24.0)
    # a link that went down once fails it: nothing to forecast; a GPU's temperature is not a count
    assert [(one.component, one.threshold, one.samples) for one in found] == [
        ("mlx5_0/symbol_error", 240.0, ((0.0, 3.0), (1.0, 5.0)))]


def test_a_degrading_link_is_flagged_before_its_count_passes_the_allowance() -> None:
    flagged_at = crossed_at = None
    for hour in range(1, 25):
        samples = _degrading(hour)
        (one,) = judge(soak_series("n1", {"mlx5_0/symbol_error": samples}, ALLOWED, 24.0), horizon_h=72,
                       window_h=48)
        if crossed_at is None and samples[-1][1] - samples[0][1] > 240:
            crossed_at = hour
        if flagged_at is None and one.flagged:
            flagged_at = hour
            assert one.forecast.hours is not None and 0 < one.forecast.hours <= 72, one
            assert one.forecast.low is not None and one.forecast.low <= one.forecast.hours, one
    assert flagged_at is not None and crossed_at is not None and crossed_at - flagged_at >= 4, (flagged_at, crossed_at)


def test_a_flat_or_steady_counter_is_never_flagged() -> None:
    flat = [(3600.0 * hour, 7.0) for hour in range(25)]
    steady = [(3600.0 * hour, 9.0 * hour) for hour in range(25)]  # just under the 10/h allowed: the check's, not ours
    judged = judge(soak_series("n1", {"mlx5_0/symbol_error": flat, "mlx5_1/symbol_error": steady}, ALLOWED, 24.0),
                   horizon_h=72, window_h=48)
    assert [one.flagged for one in judged] == [False, False] and all(one.forecast.hours is None for one in judged)


def test_the_horizon_decides_what_flags() -> None:
    series = [Series("n1", "mlx5_0/symbol_error", tuple((float(h), float(counted(1.0, 4.0, 5 + h)) - 2)
                                                          for h in range(13)), 240.0)]
    (wide,) = judge(series, horizon_h=72, window_h=48)
    (narrow,) = judge(series, horizon_h=1, window_h=48)
    assert wide.flagged and wide.forecast.hours is not None and wide.forecast.hours > 1 and not narrow.flagged


def test_a_series_younger_than_the_window_is_read_over_its_own_span() -> None:
    """A soak of 12 hours read with a 48-hour window would have no earlier half to compare with: no trend, ever."""
    (one,) = judge(soak_series("n1", {"mlx5_0/symbol_error": _degrading(12)}, ALLOWED, 24.0), horizon_h=72,
                   window_h=48)
    assert one.forecast.trending, one.forecast


def test_the_simulated_counter_grows_as_the_fault_says_and_saturates() -> None:
    assert counted(200.0, 0.0, 3.0) == 600  # steady
    # doubling every 4 h from 1/h: the integral of 2^(t/4) over 8 h
    assert counted(1.0, 4.0, 8.0) == int(4 / math.log(2) * 3)
    assert counted(1e6, 1.0, 5000.0) > COUNTER_MAX  # what the simulator then writes is capped at COUNTER_MAX


def test_the_store_keeps_the_newest_forecast_and_when_it_first_flagged(tmp_path: Path) -> None:
    def record(at_h: float, hours: float | None, flagged: bool) -> ForecastRecord:
        return ForecastRecord("n1", "mlx5_0/symbol_error", at_h, hours, None, None, 2.0, 50.0, 240.0, flagged, "why")

    with StateStore(tmp_path) as store:
        first, _ = store.open_campaign("run-1", ["soak"], "sha")
        store.record_soak(first, "n1", 0.0, {"mlx5_0/symbol_error": 0.0})
        for at_h, hours, flagged in ((3.0, None, False), (9.0, 20.0, True), (12.0, 4.0, True)):
            store.record_forecasts(f"soak:{first}", [record(at_h, hours, flagged)], run_id=None)
        (row,) = store.forecasts()
        assert (row["at_h"], row["hours"], row["first_flagged_h"], row["flagged"]) == (12.0, 4.0, 9.0, 1)
        # a soak resumed on another node judges only that one: the first node's forecast stays
        other = ForecastRecord("n2", "mlx5_0/symbol_error", 1.0, None, None, None, 0.0, 0.0, 240.0, False, "none")
        store.record_soak(first, "n2", 0.0, {"mlx5_0/symbol_error": 0.0})
        store.record_forecasts(f"soak:{first}", [other], run_id=None, nodes=["n2"])
        assert [row["node"] for row in store.forecasts()] == ["n1", "n2"]
        # a newer soak of the node: the older campaign's projection is history, not a warning
        second, _ = store.open_campaign("run-2", ["soak"], "sha2")
        store.record_soak(second, "n1", 0.0, {"mlx5_0/symbol_error": 0.0})
        assert [row["node"] for row in store.forecasts()] == ["n2"]  # n2 soaked last in the first campaign
        store.record_forecasts(f"soak:{second}", [record(1.0, None, False)], run_id=None, nodes=["n1"])
        assert [(row["source"], row["first_flagged_h"]) for row in store.forecasts() if row["node"] == "n1"] == [
            (f"soak:{second}", None)]
