"""Plots for the acceptance report, drawn as inline SVG.

Why hand-drawn SVG rather than a plotting library: the report is one file that a vendor opens offline and that is
signed and archived, so every plot must be vector (it prints), need no script (nothing to load, nothing to block),
and add no dependency to the controller. matplotlib would add ~40 MB of wheels and fonts to draw three chart
kinds; plotly would embed ~3.5 MB of JavaScript in every report. Four small, pure functions cover what the
report needs: lines over message size, dots per GPU grouped by node, a heatmap of pairs by rail, and lines over
the soak's hours.

Every data point is an element with class ``point`` (and its value in a ``<title>`` tooltip), and every plot
declares how many it drew in ``data-points``, so a browser test can check that each plot rendered all its data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
FLAG = "#d62728"
WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 30, 44


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]


@dataclass(frozen=True)
class Dot:
    label: str  # the tooltip: which GPU, which value
    value: float
    flagged: bool = False


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= step * factor:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.2g}"
    return f"{value:.4g}"


def _bytes(value: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:g} {unit}"
    return f"{value:g} B"


def _frame(title: str, points: int, body: list[str], *, height: int = HEIGHT) -> str:
    return (f'<svg class="plot" data-points="{points}" role="img" aria-label="{escape(title)}" '
            f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
            f'<text x="{LEFT}" y="18" class="plot-title">{escape(title)}</text>' + "".join(body) + "</svg>")


def _y_axis(low: float, high: float, label: str, y_of: Callable[[float], float], height: int = HEIGHT) -> list[str]:
    body = [f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{height - BOTTOM}" class="axis"/>']
    for tick in _ticks(low, high):
        y = y_of(tick)
        body.append(f'<line x1="{LEFT - 4}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" class="grid"/>'
                    f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{_fmt(tick)}</text>')
    body.append(f'<text x="14" y="{(TOP + height - BOTTOM) / 2:.0f}" class="axis-label" '
                f'transform="rotate(-90 14 {(TOP + height - BOTTOM) / 2:.0f})" text-anchor="middle">'
                f"{escape(label)}</text>")
    return body


def _threshold(value: float | None, label: str, y_of: Callable[[float], float], low: float, high: float) -> list[str]:
    if value is None or not low <= value <= high:
        return []
    y = y_of(value)
    return [f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" class="threshold"/>'
            f'<text x="{WIDTH - RIGHT + 4}" y="{y + 4:.1f}" class="threshold-label">{escape(label)}</text>']


def _span(values: Sequence[float], threshold: float | None) -> tuple[float, float]:
    candidates = [*values, *([threshold] if threshold is not None else [])]
    high = max(candidates) if candidates else 1.0
    return 0.0, (high * 1.1 if high > 0 else 1.0)


def lines(title: str, series: Sequence[Series], *, y_label: str, threshold: float | None = None,
          threshold_label: str = "") -> str:
    """Lines over message size (log2 x axis, in bytes), one per series, a dashed threshold line."""
    xs = [x for item in series for x, _ in item.points if x > 0]
    ys = [y for item in series for _, y in item.points]
    if not xs:
        return _frame(title, 0, [f'<text x="{LEFT}" y="60" class="empty">no measurements</text>'])
    x_low, x_high = math.floor(math.log2(min(xs))), math.ceil(math.log2(max(xs)))
    x_high = max(x_high, x_low + 1)
    y_low, y_high = _span(ys, threshold)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(value: float) -> float:
        span = x_high - x_low or 1.0
        return LEFT + (math.log2(value) - x_low) / span * plot_w

    def y_of(value: float) -> float:
        return TOP + plot_h - (value - y_low) / (y_high - y_low) * plot_h

    body = _y_axis(y_low, y_high, y_label, y_of)
    body.append(f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" class="axis"/>')
    stride = max(1, math.ceil((x_high - x_low) / 8))
    for power in range(x_low, x_high + 1, stride):
        body.append(f'<text x="{x_of(2.0 ** power):.1f}" y="{HEIGHT - BOTTOM + 16}" class="tick" '
                    f'text-anchor="middle">{_bytes(2 ** power)}</text>')
    body.append(f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 8}" class="axis-label" text-anchor="middle">'
                "message size</text>")
    body += _threshold(threshold, threshold_label, y_of, y_low, y_high)
    count = 0
    for index, item in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        ordered = sorted((x, y) for x, y in item.points if x > 0)
        path = " ".join(f"{x_of(x):.1f},{y_of(y):.1f}" for x, y in ordered)
        body.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        for x, y in ordered:
            low = threshold is not None and y < threshold
            body.append(f'<circle class="point" cx="{x_of(x):.1f}" cy="{y_of(y):.1f}" r="3.5" '
                        f'fill="{FLAG if low else colour}"><title>{escape(item.name)}: {_bytes(x)}: '
                        f"{_fmt(y)} {escape(y_label)}</title></circle>")
            count += 1
        legend_y = TOP + 14 * index
        body.append(f'<rect x="{WIDTH - RIGHT + 8}" y="{legend_y + 30}" width="10" height="10" fill="{colour}"/>'
                    f'<text x="{WIDTH - RIGHT + 22}" y="{legend_y + 39}" class="legend">{escape(item.name)}</text>')
    return _frame(title, count, body)


def dots(title: str, groups: Sequence[tuple[str, Sequence[Dot]]], *, y_label: str,
         threshold: float | None = None, threshold_label: str = "",
         band: tuple[float, float] | None = None, zoom: bool = False) -> str:
    """One column per group (a node), one dot per member (a GPU); flagged dots in red. ``band``: a shaded range
    behind the dots (a baseline's 5th to 95th percentile); ``zoom``: the y axis spans the values, not from zero
    (a ratio near 1 would be a flat line)."""
    values = [dot.value for _, members in groups for dot in members]
    if not values:
        return _frame(title, 0, [f'<text x="{LEFT}" y="60" class="empty">no measurements</text>'])
    y_low, y_high = _span(values, threshold)
    if zoom:
        every = [*values, *([threshold] if threshold is not None else []), *(band or ())]
        pad = (max(every) - min(every)) * 0.1 or abs(max(every)) * 0.01 or 1.0
        y_low, y_high = min(every) - pad, max(every) + pad
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def y_of(value: float) -> float:
        return TOP + plot_h - (value - y_low) / (y_high - y_low) * plot_h

    body = _y_axis(y_low, y_high, y_label, y_of)
    if band is not None:
        top, bottom = y_of(min(max(band), y_high)), y_of(max(min(band), y_low))
        body.append(f'<rect x="{LEFT}" y="{top:.1f}" width="{plot_w}" height="{max(bottom - top, 1):.1f}" '
                    f'class="band"><title>baseline {_fmt(min(band))} to {_fmt(max(band))}</title></rect>')
    body.append(f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" class="axis"/>')
    body += _threshold(threshold, threshold_label, y_of, y_low, y_high)
    column = plot_w / max(len(groups), 1)
    count = 0
    for index, (name, members) in enumerate(groups):
        centre = LEFT + column * (index + 0.5)
        if len(groups) <= 32 or index % math.ceil(len(groups) / 32) == 0:
            body.append(f'<text x="{centre:.1f}" y="{HEIGHT - BOTTOM + 14}" class="tick" text-anchor="end" '
                        f'transform="rotate(-45 {centre:.1f} {HEIGHT - BOTTOM + 14})">{escape(name)}</text>')
        spread = min(column * 0.7, 40.0)
        for position, dot in enumerate(members):
            offset = (position / max(len(members) - 1, 1) - 0.5) * spread if len(members) > 1 else 0.0
            colour = FLAG if dot.flagged else PALETTE[0]
            body.append(f'<circle class="point{" flagged" if dot.flagged else ""}" cx="{centre + offset:.1f}" '
                        f'cy="{y_of(dot.value):.1f}" r="3" fill="{colour}"><title>{escape(name)} '
                        f"{escape(dot.label)}: {_fmt(dot.value)} {escape(y_label)}</title></circle>")
            count += 1
    return _frame(title, count, body)


def heatmap(title: str, rows: Sequence[str], columns: Sequence[str],
            cells: dict[tuple[str, str], tuple[float, bool]], *, unit: str) -> str:
    """Rows by columns, colour by value (darker is faster), flagged cells outlined in red and marked."""
    if not cells:
        return _frame(title, 0, [f'<text x="{LEFT}" y="60" class="empty">no measurements</text>'])
    cell_h = 14 if len(rows) <= 60 else 8
    label_w = 150
    cell_w = min(48.0, (WIDTH - label_w - 20) / max(len(columns), 1))
    height = TOP + 30 + cell_h * len(rows) + 20
    values = [value for value, _ in cells.values()]
    low, high = min(values), max(values)
    body = []
    for col_index, column in enumerate(columns):
        x = label_w + col_index * cell_w + cell_w / 2
        body.append(f'<text x="{x:.1f}" y="{TOP + 20}" class="tick" text-anchor="middle">{escape(column)}</text>')
    count = 0
    for row_index, row in enumerate(rows):
        y = TOP + 28 + row_index * cell_h
        body.append(f'<text x="{label_w - 6}" y="{y + cell_h - 3}" class="tick" text-anchor="end">{escape(row)}'
                    "</text>")
        for col_index, column in enumerate(columns):
            if (row, column) not in cells:
                continue
            value, flagged = cells[(row, column)]
            share = (value - low) / (high - low) if high > low else 1.0
            lightness = 88 - share * 50
            x = label_w + col_index * cell_w
            stroke = f' stroke="{FLAG}" stroke-width="2"' if flagged else ""
            body.append(f'<rect class="point{" flagged" if flagged else ""}" x="{x + 1:.1f}" y="{y:.1f}" '
                        f'width="{cell_w - 2:.1f}" height="{cell_h - 1}" fill="hsl(210,60%,{lightness:.0f}%)"{stroke}>'
                        f"<title>{escape(row)} {escape(column)}: {_fmt(value)} {escape(unit)}"
                        f"{' (below threshold)' if flagged else ''}</title></rect>")
            count += 1
    body.append(f'<text x="{label_w}" y="{height - 4}" class="legend">light {_fmt(low)} to dark {_fmt(high)} '
                f"{escape(unit)}; red outline: below threshold</text>")
    return _frame(title, count, body, height=height)


def timeline(title: str, series: Sequence[Series], *, y_label: str, flagged: frozenset[str] = frozenset()) -> str:
    """Lines over the soak's clock (x in hours), one per series (a GPU, a port's counter); a flagged series (the
    one a finding names) drawn in red and its points marked ``flagged``. Each series should arrive thinned
    (:func:`thin`): a week's poll every minute is far more points than a plot can show."""
    xs = [x for item in series for x, _ in item.points]
    ys = [y for item in series for _, y in item.points]
    if not xs:
        return _frame(title, 0, [f'<text x="{LEFT}" y="60" class="empty">no measurements</text>'])
    x_low, x_high = min(xs), max(max(xs), min(xs) + 1e-9)
    y_low, y_high = _span(ys, None)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(value: float) -> float:
        return LEFT + (value - x_low) / (x_high - x_low) * plot_w

    def y_of(value: float) -> float:
        return TOP + plot_h - (value - y_low) / (y_high - y_low) * plot_h

    body = _y_axis(y_low, y_high, y_label, y_of)
    body.append(f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" class="axis"/>')
    for tick in _ticks(x_low, x_high):
        body.append(f'<text x="{x_of(tick):.1f}" y="{HEIGHT - BOTTOM + 16}" class="tick" text-anchor="middle">'
                    f"{_fmt(tick)}</text>")
    body.append(f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 8}" class="axis-label" text-anchor="middle">'
                "hours into the soak</text>")
    count = 0
    for index, item in enumerate(series):
        marked = item.name in flagged
        colour = FLAG if marked else PALETTE[index % len(PALETTE)]
        ordered = sorted(item.points)
        path = " ".join(f"{x_of(x):.1f},{y_of(y):.1f}" for x, y in ordered)
        body.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="{2 if marked else 1}"/>')
        for x, y in ordered:
            body.append(f'<circle class="point{" flagged" if marked else ""}" cx="{x_of(x):.1f}" cy="{y_of(y):.1f}" '
                        f'r="1.8" fill="{colour}"><title>{escape(item.name)} at {x:.2f} h: {_fmt(y)} '
                        f"{escape(y_label)}</title></circle>")
            count += 1
        if index < 14:  # the legend holds 14 names; the tooltips name every series
            legend_y = TOP + 14 * index
            body.append(f'<rect x="{WIDTH - RIGHT + 8}" y="{legend_y + 4}" width="10" height="10" fill="{colour}"/>'
                        f'<text x="{WIDTH - RIGHT + 22}" y="{legend_y + 13}" class="legend">{escape(item.name)}</text>')
    return _frame(title, count, body)


def projection(title: str, points: Sequence[tuple[float, float]], *, at_h: float, count: float, hours: float,
               low: float | None, high: float | None, threshold: float, y_label: str) -> str:
    """A forecast: the counted series (x in hours on its own clock), the threshold dashed, and the projection from
    the forecast's moment to the threshold at its projected hour, the interval's ends marked on the threshold line.
    The projection is drawn straight: it says where and when, the model's curve is in its text."""
    if not points:
        return _frame(title, 0, [f'<text x="{LEFT}" y="60" class="empty">no measurements</text>'])
    reach = at_h + hours
    ends = [reach] + [at_h + value for value in (low, high) if value is not None]
    x_low, x_high = min(x for x, _ in points), max(max(x for x, _ in points), *ends)
    x_high = max(x_high, x_low + 1e-9)
    y_low, y_high = _span([y for _, y in points] + [count], threshold)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(value: float) -> float:
        return LEFT + (value - x_low) / (x_high - x_low) * plot_w

    def y_of(value: float) -> float:
        return TOP + plot_h - (value - y_low) / (y_high - y_low) * plot_h

    body = _y_axis(y_low, y_high, y_label, y_of)
    body.append(f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" class="axis"/>')
    for tick in _ticks(x_low, x_high):
        body.append(f'<text x="{x_of(tick):.1f}" y="{HEIGHT - BOTTOM + 16}" class="tick" text-anchor="middle">'
                    f"{_fmt(tick)}</text>")
    body.append(f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 8}" class="axis-label" text-anchor="middle">'
                "hours</text>")
    body += _threshold(threshold, f"threshold {_fmt(threshold)}", y_of, y_low, y_high)
    ordered = sorted(points)
    path = " ".join(f"{x_of(x):.1f},{y_of(y):.1f}" for x, y in ordered)
    body.append(f'<polyline points="{path}" fill="none" stroke="{PALETTE[0]}" stroke-width="1.5"/>')
    for x, y in ordered:
        body.append(f'<circle class="point" cx="{x_of(x):.1f}" cy="{y_of(y):.1f}" r="1.8" fill="{PALETTE[0]}">'
                    f"<title>{x:.2f} h: {_fmt(y)} {escape(y_label)}</title></circle>")
    body.append(f'<line x1="{x_of(at_h):.1f}" y1="{y_of(count):.1f}" x2="{x_of(reach):.1f}" '
                f'y2="{y_of(threshold):.1f}" stroke="{FLAG}" stroke-width="1.5" stroke-dasharray="6 4" '
                f'class="projection"><title>projected: {_fmt(threshold)} at {reach:.1f} h</title></line>')
    for value in (low, high):
        if value is not None:
            body.append(f'<circle class="interval" cx="{x_of(at_h + value):.1f}" cy="{y_of(threshold):.1f}" r="3" '
                        f'fill="none" stroke="{FLAG}"><title>interval end: {at_h + value:.1f} h</title></circle>')
    return _frame(title, len(ordered), body)


def thin(points: Sequence[tuple[float, float]], buckets: int = 60) -> list[tuple[float, float]]:
    """At most two points per bucket of time, its lowest and its highest, in time order: a spike or a sag of a
    single poll survives the thinning, which an every-n-th sample would drop."""
    if len(points) <= 2 * buckets:
        return list(points)
    ordered = sorted(points)
    start, span = ordered[0][0], (ordered[-1][0] - ordered[0][0]) or 1.0
    grouped: dict[int, list[tuple[float, float]]] = {}
    for point in ordered:
        grouped.setdefault(min(int((point[0] - start) / span * buckets), buckets - 1), []).append(point)
    kept: list[tuple[float, float]] = []
    for members in grouped.values():
        low, high = min(members, key=lambda p: p[1]), max(members, key=lambda p: p[1])
        kept += sorted({low, high})
    return kept
