"""Backtest of the forecasts (issue 54, item 3): how early they warn of a component that fails, and how often they
cry wolf on healthy ones, beside a plain threshold alarm on the same series.

The corpus is simulated and seeded: hourly reads of an error counter per component over ``--days`` days.
- Healthy components: a background rate of 0 to 0.5 events/h (Poisson), a burst of 10-60 events on about one day in
  ten (a reseat, a noisy hour), and reboots every 3-14 days that reset the counter to zero.
- Degrading components: the same, and from a random hour on a rate that doubles every 12-48 h (the shape of the GB200
  NVLink whose recovery events grew for five days before its Xid 149 took down a domain: marin-community/marin
  #8934, #9086) until the count since the first read reaches the failure threshold: that hour is the failure.
Each hour every component is judged as a watch pass would: the forecast flags it when the threshold is less than
``--horizon`` hours away; the threshold alarm (NVSentinel's kind, tuned to this corpus) when the last 24 h hold at
least ``--alarm`` events. Reported per method: precision, recall, median lead time, false alarms per 1,000 node-days.
No public trace of real counters over time was found to add (the marin threads give the shape, not the series).

Run: python -m bench.forecast [--quick] --json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from provision.forecast.model import forecast, increments

THRESHOLD = 2000.0


@dataclass
class Series:
    samples: list[tuple[float, float]] = field(default_factory=list)
    failure_h: float | None = None  # the hour the count reached the threshold (degrading only)
    degrading: bool = False  # a degrading one that had not failed by the end is censored: neither kind


def _poisson(rng: random.Random, mean: float) -> int:
    if mean <= 0:
        return 0
    if mean > 50:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def simulate(rng: random.Random, hours: int, degrading: bool) -> Series:
    base = rng.uniform(0.0, 0.5)
    start = rng.uniform(0.2, 0.8) * hours if degrading else math.inf
    doubling = rng.uniform(12.0, 48.0)
    next_reboot = rng.uniform(72, 336)
    value, total = 0.0, 0.0
    series = Series(degrading=degrading)
    for hour in range(hours + 1):
        rate = base + (0.5 * 2 ** ((hour - start) / doubling) if hour >= start else 0.0)
        counted = _poisson(rng, rate) + (rng.randint(10, 60) if rng.random() < 1 / 240 else 0)
        total += counted
        value += counted
        if hour >= next_reboot:
            value, next_reboot = float(_poisson(rng, base)), hour + rng.uniform(72, 336)
        series.samples.append((float(hour), value))
        if degrading and total >= THRESHOLD:
            series.failure_h = float(hour)
            break
    return series


def judge(series: Series, horizon: float, alarm: int) -> dict[str, list[float]]:
    """The hours each method flagged the component, judging as a watch pass would, each hour, on what was read."""
    flags: dict[str, list[float]] = {"forecast": [], "threshold": []}
    samples = series.samples
    for index in range(2, len(samples)):
        now = samples[index][0]
        if series.failure_h is not None and now >= series.failure_h:
            break
        seen = samples[: index + 1]
        result = forecast(seen, THRESHOLD)
        if result.hours is not None and result.hours <= horizon:
            flags["forecast"].append(now)
        day = [step for step in seen if step[0] >= now - 24]
        counted = sum(step[2] for step in increments(day))  # as the forecast reads resets
        if counted >= alarm:
            flags["threshold"].append(now)
    return flags


def _episodes(hours: list[float]) -> int:
    return sum(1 for i, hour in enumerate(hours) if i == 0 or hour - hours[i - 1] > 1.0)


def measure(components: int, days: int, horizon: float, alarm: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    started = time.perf_counter()
    degrading = components // 4
    corpus = [simulate(rng, days * 24, index < degrading) for index in range(components)]
    corpus = [series for series in corpus if series.samples]
    results: dict[str, Any] = {}
    judged = [(series, judge(series, horizon, alarm)) for series in corpus]
    for method in ("forecast", "threshold"):
        caught, leads, false_episodes, flagged_healthy, healthy_days = 0, [], 0, 0, 0.0
        failures = 0
        for series, flags in judged:
            hours = flags[method]
            if series.failure_h is not None:
                failures += 1
                if hours:
                    caught += 1
                    leads.append(series.failure_h - hours[0])
            elif not series.degrading:
                healthy_days += series.samples[-1][0] / 24
                false_episodes += _episodes(hours)
                flagged_healthy += bool(hours)
        flagged = caught + flagged_healthy
        results[method] = {
            "precision": round(caught / flagged, 3) if flagged else None,
            "recall": round(caught / failures, 3) if failures else None,
            "median_lead_hours": round(statistics.median(leads), 1) if leads else None,
            "false_alarms_per_1000_node_days": round(1000 * false_episodes / healthy_days, 2) if healthy_days else None,
        }
    failed = sum(1 for series in corpus if series.failure_h is not None)
    censored = sum(1 for series in corpus if series.degrading and series.failure_h is None)
    return {"components": len(corpus), "degrading_that_failed": failed, "degrading_censored": censored,
            "days": days, "horizon_hours": horizon,
            "threshold_alarm_events_per_24h": alarm, "seed": seed, **results,
            "seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.forecast")
    parser.add_argument("--quick", action="store_true", help="120 components over 14 days (400 over 21 without)")
    parser.add_argument("--horizon", type=float, default=72.0, help="flag when the threshold is this near (hours)")
    parser.add_argument("--alarm", type=int, default=60, help="the threshold alarm's events per 24 h")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    components, days = (120, 14) if args.quick else (400, 21)
    result = measure(components, days, args.horizon, args.alarm, args.seed)
    if not args.json:
        for method in ("forecast", "threshold"):
            print(f"{method}: {result[method]}", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
