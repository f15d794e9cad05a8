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
