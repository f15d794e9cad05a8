"""Which series are forecast, against which threshold, and which forecasts flag their node (issue 54, item 2;
pure functions over what the store holds).

A forecast needs a count that grows towards a limit the spec already sets: the soak's allowance of InfiniBand errors
per hour, over the soak's length, is such a limit (the check fails the node when the soak's growth passes it); so is
``fabric.link_health``'s threshold of a port's error counter over its window, which the watch judges every pass (a
cable is erroring once the window's count reaches it). A counter whose limit is zero (a link that went down once
fails it) has nothing to forecast: the first event is the failure. A flag is a warning, never a verdict: the checks
still judge the node on what happened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from provision.forecast.model import Forecast, forecast


@dataclass(frozen=True)
class Series:
    """One component's counter, (hours on the series' clock, value) oldest first, and the count (from the first
    sample) at which it fails the spec."""

    node: str
    component: str
    samples: tuple[tuple[float, float], ...]
    threshold: float


@dataclass(frozen=True)
class ComponentForecast:
    node: str
    component: str
    threshold: float
    at_h: float
    forecast: Forecast
    flagged: bool

    def record(self) -> tuple[str, str, float, float | None, float | None, float | None, float, float, float, bool,
                              str]:
        """The fields of the store's ``ForecastRecord``, in its order."""
        made = self.forecast
        return (self.node, self.component, self.at_h, made.hours, made.low, made.high, made.rate, made.count,
                self.threshold, self.flagged, made.why)

    def as_dict(self) -> dict[str, object]:
        made = self.forecast
        return {"node": self.node, "component": self.component, "threshold": self.threshold, "at_h": self.at_h,
                "hours": made.hours, "low": made.low, "high": made.high, "rate_per_h": round(made.rate, 3),
                "count": made.count, "flagged": self.flagged, "why": made.why}


def soak_series(node: str, series: Mapping[str, Sequence[tuple[float, float]]],
                errors_per_hour: Mapping[str, float], soak_hours: float) -> list[Series]:
    """The soak's forecastable series of one node: each InfiniBand error counter (``<hca>/<counter>``, sampled at
    seconds into the soak) whose allowance is above zero, its threshold the allowance over the whole soak."""
    found = []
    for name, samples in sorted(series.items()):
        port, _, counter = name.partition("/")
        allowed = errors_per_hour.get(counter)
        if not port or allowed is None or allowed <= 0 or not samples:
            continue
        found.append(Series(node, name, tuple((at_s / 3600, value) for at_s, value in samples), allowed * soak_hours))
    return found


def counted_series(node: str, component: str, changes: Sequence[tuple[float, float, float]],
                   threshold: float) -> Series:
    """A counter kept as its changes between reads (start and end in seconds, what it counted: resets and
    saturation already read), as its running count from the first read, in hours: what the watch's snapshots
    keep of a port's error counter."""
    ordered = sorted(changes)
    if not ordered:
        return Series(node, component, (), threshold)
    total, samples = 0.0, [(ordered[0][0] / 3600, 0.0)]
    for _start, end, count in ordered:
        total += count
        samples.append((end / 3600, total))
    return Series(node, component, tuple(samples), threshold)


def judge(series: Sequence[Series], *, horizon_h: float, window_h: float) -> list[ComponentForecast]:
    """Each series' forecast over the recent ``window_h`` (a series younger than that, a soak's, over its own span:
    a trend is its recent half against its earlier half); flagged when its threshold is ``horizon_h`` or less away
    (the count counted from the series' first sample, as the check counts it)."""
    judged = []
    for one in series:
        if not one.samples:
            continue
        span = one.samples[-1][0] - one.samples[0][0]
        made = forecast(one.samples, one.threshold, window_h=min(window_h, span) if span > 0 else window_h)
        flagged = made.hours is not None and made.hours <= horizon_h
        judged.append(ComponentForecast(one.node, one.component, one.threshold, one.samples[-1][0], made, flagged))
    return judged
