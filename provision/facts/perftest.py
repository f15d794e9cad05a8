"""Parse perftest bandwidth output (``ib_write_bw`` and friends).

The result rows follow a ``#bytes #iterations BW peak[...] BW average[...]
MsgRate[Mpps]`` header; the unit is MB/sec unless ``--report_gbits`` gave
Gb/sec. Server and client often share one stream (the real fixture interleaves
their banners and even their header lines), so identical rows are kept once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(?P<unit>[MG]b?B?/sec)\]")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


@dataclass(frozen=True)
class BandwidthRow:
    size: int
    iterations: int
    peak_gbps: float
    average_gbps: float
    message_rate_mpps: float


def _to_gbps(value: float, unit: str) -> float:
    # MB = 10**6 bytes: with 2**20 the HDR fixture's 24,057 MB/s would be 201.8 Gb/s, above HDR's 200 Gb/s data
    # rate, which no link can carry; with 10**6 it is 192.5 Gb/s.
    return value * 8 / 1000 if unit == "MB/sec" else value


def parse_bandwidth(text: str) -> list[BandwidthRow]:
    rows: list[BandwidthRow] = []
    unit: str | None = None
    for line in text.replace("\r\n", "\n").split("\n"):
        header = _HEADER.search(line)
        if header:
            unit = header["unit"]
            continue
        match = _ROW.match(line)
        if match and unit:
            row = BandwidthRow(int(match[1]), int(match[2]), round(_to_gbps(float(match[3]), unit), 3),
                               round(_to_gbps(float(match[4]), unit), 3), float(match[5]))
            if row not in rows:
                rows.append(row)
    return rows


def largest_message_average_gbps(rows: list[BandwidthRow]) -> float | None:
    """The figure to gate on: average bandwidth at the largest message size measured."""
    return max(rows, key=lambda row: row.size).average_gbps if rows else None
