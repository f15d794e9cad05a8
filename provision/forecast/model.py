"""Forecasts for counters that reset and jump: how long until a component's error count reaches the spec's threshold,
with an interval, or "no trend" (issue 54, item 2; pure functions).

A hardware counter (corrected ECC, row remaps, a port's symbol errors, an NVLink's recovery events) is read now and
then; a reboot or a driver reload resets it to zero, and a cable reseat or a noisy hour adds a burst. So:

- the samples become increments (a value below the previous one is a reset: the new value is what was counted
  since), their sum the series' own cumulative count;
- the rate is robust: a trimmed mean of the per-interval rates over the recent window, the largest tenth of the
  intervals left out, so one burst is not a trend;
- a trend is growth that holds: the recent half-window's rate above the earlier half's by the factor
  ``GROWTH`` and above the floor ``MIN_RATE``, on at least ``MIN_EVENTS`` counted events, and more than a steady
  rate's noise could give: the recent half's count among both halves' (bursts left out as above) is a one-sided
  binomial test at ``SIGNIFICANCE`` (at a few events an hour, Poisson noise alone doubles a half-window's count
  often enough to cry wolf weekly on a fleet); otherwise "no trend", however high the count (a high steady count is
  the threshold alarm's to judge, not a forecast's);
- the time to the threshold extrapolates the recent rate growing as it grew (the half-window's growth factor
  compounding each half-window), with the interval from the rates of the window's lower and upper quartiles.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

#: The recent half-window's rate must be this many times the earlier half's for a trend.
GROWTH = 1.5
#: Events per hour below which nothing is trending (a quiet counter's noise).
MIN_RATE = 0.2
#: Counted events in the window below which nothing is judged.
MIN_EVENTS = 8
#: The longest a forecast looks ahead (hours): past it, "no trend" in practice.
MAX_HOURS = 24 * 90
#: How unlikely the recent half's count must be under one steady rate before it is growth (one-sided).
SIGNIFICANCE = 1e-4


@dataclass(frozen=True)
class Forecast:
    """``hours`` until the threshold (``None``: no trend), with its interval; the rates it rests on (events/h)."""

    hours: float | None
    low: float | None
    high: float | None
    rate: float
    earlier_rate: float
    count: float
    why: str

    @property
    def trending(self) -> bool:
        return self.hours is not None


def increments(samples: Sequence[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """(start, end, counted) per interval; a value below the previous one is a reset (counted: the new value)."""
    out = []
    for (t0, v0), (t1, v1) in itertools.pairwise(samples):
        if t1 <= t0:
            continue
        out.append((t0, t1, v1 - v0 if v1 >= v0 else v1))
    return out


def _robust_rate(steps: list[tuple[float, float, float]]) -> float:
    """Events per hour over the steps, the largest tenth of the per-interval rates left out (bursts)."""
    if not steps:
        return 0.0
    rates = sorted(count / (t1 - t0) for t0, t1, count in steps)
    keep = rates[: max(1, len(rates) - len(rates) // 10)]
    return sum(keep) / len(keep)


def _trimmed(steps: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Events and hours of the steps, the largest tenth of the per-interval rates left out (as the rate is)."""
    ordered = sorted(steps, key=lambda step: step[2] / (step[1] - step[0]))
    kept = ordered[: max(1, len(ordered) - len(ordered) // 10)] if ordered else []
    return sum(step[2] for step in kept), sum(step[1] - step[0] for step in kept)


def upper_tail(k: float, n: float, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): exact to 200 trials, the normal approximation (continuity corrected)
    beyond, where it is close and the exact sum would cost a watch pass too much."""
    k, n = math.ceil(k), round(n)
    if k <= 0:
        return 1.0
    if k > n or p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    if n > 200:
        mean, spread = n * p, math.sqrt(n * p * (1 - p))
        return 0.5 * math.erfc((k - 0.5 - mean) / (spread * math.sqrt(2)))
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
             for i in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(term - top) for term in terms))


def _significant(recent: list[tuple[float, float, float]], earlier: list[tuple[float, float, float]]) -> float:
    """The one-sided p-value of the recent half's events under one steady rate over both halves."""
    (now, now_h), (then, then_h) = _trimmed(recent), _trimmed(earlier)
    if now_h <= 0 or then_h <= 0:
        return 1.0
    return upper_tail(now, now + then, now_h / (now_h + then_h))


def _quartile_rates(steps: list[tuple[float, float, float]]) -> tuple[float, float]:
    rates = sorted(count / (t1 - t0) for t0, t1, count in steps)
    if not rates:
        return 0.0, 0.0
    return rates[len(rates) // 4], rates[min(len(rates) - 1, (3 * len(rates)) // 4)]


def _hours_to(remaining: float, rate: float, growth: float, half_window: float) -> float | None:
    """Hours until ``remaining`` events at ``rate`` now, the rate multiplied by ``growth`` every ``half_window``
    hours (continuous compounding); None past :data:`MAX_HOURS` or with no rate."""
    if remaining <= 0:
        return 0.0
    if rate <= 0:
        return None
    k = math.log(growth) / half_window if growth > 1 else 0.0
    hours = remaining / rate if k == 0 else math.log1p(remaining * k / rate) / k
    return hours if hours <= MAX_HOURS else None


def forecast(samples: Sequence[tuple[float, float]], threshold: float, *, window_h: float = 48.0,
             counted_before: float = 0.0) -> Forecast:
    """``samples``: (hours, counter value), oldest first; ``threshold``: the count (since ``counted_before``
    was counted, e.g. since the node was admitted) at which the component fails the spec."""
    steps = increments(samples)
    count = counted_before + sum(step[2] for step in steps)
    if not steps:
        return Forecast(None, None, None, 0.0, 0.0, count, "no samples to judge")
    end = steps[-1][1]
    window = [step for step in steps if step[0] >= end - window_h]
    half = end - window_h / 2
    earlier = [step for step in window if step[1] <= half]
    recent = [step for step in window if step[0] >= half]
    rate, before = _robust_rate(recent), _robust_rate(earlier)
    events = sum(step[2] for step in window)
    if count >= threshold:
        return Forecast(0.0, 0.0, 0.0, rate, before, count, f"at the threshold already ({count:g} >= {threshold:g})")
    if events < MIN_EVENTS or rate < MIN_RATE:
        return Forecast(None, None, None, rate, before, count, f"no trend: {events:g} events in {window_h:g} h")
    if rate < GROWTH * max(before, MIN_RATE / GROWTH):
        return Forecast(None, None, None, rate, before, count,
                        f"no trend: {rate:.2f}/h now against {before:.2f}/h before (steady)")
    chance = _significant(recent, earlier)
    if chance > SIGNIFICANCE:
        return Forecast(None, None, None, rate, before, count, f"no trend: {rate:.2f}/h now against {before:.2f}/h "
                        f"before, which a steady rate gives by chance ({chance:.1g})")
    growth = min(rate / max(before, MIN_RATE / GROWTH), 8.0)
    low_rate, high_rate = _quartile_rates(recent)
    remaining = threshold - count
    hours = _hours_to(remaining, rate, growth, window_h / 2)
    if hours is None:
        return Forecast(None, None, None, rate, before, count, "growing, but not to the threshold within 90 days")
    soonest = _hours_to(remaining, max(high_rate, rate), growth, window_h / 2)
    latest = _hours_to(remaining, min(low_rate, rate) if low_rate > 0 else rate / growth, growth, window_h / 2)
    return Forecast(hours, soonest if soonest is not None else hours, latest, rate, before, count,
                    f"{rate:.2f}/h, {growth:.1f}x the earlier {window_h / 2:g} h: {remaining:g} events to go")
