"""The forecast model (issue 54): counters that reset at reboots and jump in bursts are read as what they counted;
a burst or a steady count is no trend; growth that holds gives the hours to the threshold with an interval."""

from __future__ import annotations

import pytest

from provision.forecast.model import forecast, increments, upper_tail

pytestmark = pytest.mark.fast


def _hourly(counts: list[float], resets: tuple[int, ...] = ()) -> list[tuple[float, float]]:
    value, samples = 0.0, []
    for hour, counted in enumerate(counts):
        value = counted if hour in resets else value + counted
        samples.append((float(hour), value))
    return samples


def test_a_reset_is_what_was_counted_since() -> None:
    assert [step[2] for step in increments([(0, 10), (1, 15), (2, 3), (3, 4)])] == [5, 3, 1]


def test_a_quiet_counter_and_a_burst_are_no_trend() -> None:
    quiet = forecast(_hourly([0.3] * 96), 2000)
    assert not quiet.trending and quiet.why.startswith("no trend")
    burst = forecast(_hourly([1.0] * 95 + [400.0]), 2000)  # a reseat's burst in the last hour
    assert not burst.trending, burst


def test_a_steady_high_count_is_no_trend_however_high() -> None:
    steady = forecast(_hourly([20.0] * 96), 100_000)
    assert not steady.trending and "steady" in steady.why


def test_growth_that_holds_gives_hours_to_the_threshold_with_an_interval() -> None:
    growing = [0.5 * 2 ** (hour / 24) for hour in range(120)]  # doubling daily, as a failing link's recovery events
    samples = _hourly(growing, resets=(60,))  # a reboot on the way: counted on, not lost
    result = forecast(samples, 2000)
    assert result.trending and result.low is not None and result.high is not None
    assert result.low <= result.hours <= result.high, result
    # the truth: the cumulative count keeps doubling daily from ~350 at hour 120; 2000 is about 2.5 days away
    assert 24 <= result.hours <= 96, result
    assert result.rate > result.earlier_rate * 1.5


def test_at_the_threshold_already_is_zero_hours() -> None:
    assert forecast(_hourly([30.0] * 80), 2000).hours == 0.0


def test_growth_a_steady_rates_noise_gives_is_no_trend() -> None:
    """5 events in a day, then 12: 2.4 times the rate, and a steady rate gives as much one time in fourteen; 5 then
    40 is growth no noise explains."""
    noisy = [0.0] * 48 + [1.0 if hour % 5 == 0 else 0.0 for hour in range(24)] + \
        [1.0 if hour % 2 == 0 else 0.0 for hour in range(24)]
    result = forecast(_hourly(noisy), 2000)
    assert not result.trending and "by chance" in result.why, result
    grown = [0.0] * 48 + [1.0 if hour % 5 == 0 else 0.0 for hour in range(24)] + [2.0] * 20 + [0.0] * 4
    assert forecast(_hourly(grown), 2000).trending


def test_the_binomial_tail_is_exact_where_small_and_close_where_large() -> None:
    assert upper_tail(8, 10, 0.5) == pytest.approx(56 / 1024)
    assert upper_tail(12, 17, 0.5) == pytest.approx(9402 / 131072)
    assert upper_tail(0, 10, 0.3) == 1.0 and upper_tail(11, 10, 0.3) == 0.0
    assert upper_tail(540, 1000, 0.5) == pytest.approx(0.0062, abs=0.0008)  # z = 2.5 with continuity
