"""The report's plots: SVG drawn from the figures, a threshold line where one is given, "no measurements" when
there is nothing to draw (never an empty frame that looks like a flat line)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from provision.report.plots import Series, lines

pytestmark = pytest.mark.fast


def test_lines_over_message_size_with_their_threshold() -> None:
    svg = lines("all_reduce busbw", [Series("sim01", [(1 << 20, 40.0), (1 << 30, 180.0)]),
                                     Series("sim02", [(1 << 20, 38.0), (1 << 30, 60.0)])],
                y_label="GB/s", threshold=150.0, threshold_label="minimum")
    root = ET.fromstring(svg)  # well-formed
    assert root.tag.endswith("svg")
    assert "all_reduce busbw" in svg and "sim01" in svg and "sim02" in svg and "minimum" in svg
    assert svg.count("<polyline") >= 2 or svg.count("<path") >= 2


def test_nothing_to_draw_says_so() -> None:
    svg = lines("all_reduce busbw", [Series("sim01", [])], y_label="GB/s")
    ET.fromstring(svg)
    assert "no measurements" in svg


def test_a_forecast_draws_its_series_the_threshold_and_the_projection_to_it() -> None:
    from provision.report.plots import projection

    svg = projection("sim03 mlx5_0/symbol_error", [(0.0, 0.0), (6.0, 20.0), (11.0, 66.0)], at_h=11.0, count=66.0,
                     hours=7.9, low=5.0, high=12.0, threshold=240.0, y_label="count")
    root = ET.fromstring(svg)
    ns = {"svg": "http://www.w3.org/2000/svg"}
    projected = [line for line in root.iter() if line.get("class") == "projection"]
    assert len(projected) == 1 and "240 at 18.9 h" in svg
    assert len([item for item in root.iter() if item.get("class") == "interval"]) == 2
    assert len([item for item in root.iter() if item.get("class") == "point"]) == 3 and "threshold 240" in svg
    assert root.find("svg:polyline", ns) is not None or "<polyline" in svg
    assert "no measurements" in projection("x", [], at_h=0, count=0, hours=1, low=None, high=None, threshold=1,
                                           y_label="count")
