"""Parse nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ...): the per-size table and its footer.

Columns differ between versions and collectives (a ``root`` column, a ``redop`` that ``alltoall`` leaves
blank, ``#wrong`` or ``error``), so a row is read from both ends: size and count first, then the eight
out-of-place and in-place figures last. Gate on per-size rows, never on the footer's "Avg bus bandwidth",
the mean over every size (the field guide, 5.3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from provision.facts import fact

_AVERAGE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)")


@dataclass(frozen=True)
class NcclTestRow:
    size_bytes: int
    count: int
    dtype: str
    time_us: float  # out-of-place
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None  # None when the run did not validate (-c 0: "N/A")
    in_place_busbw_gbps: float


@dataclass(frozen=True)
class NcclTestReport:
    rows: list[NcclTestRow]
    average_busbw_gbps: float | None
    out_of_bounds: int | None
    passed: bool  # no wrong element and no FAILED footer


def _wrong(text: str) -> int | None:
    return None if text == "N/A" else int(text)


def parse_nccl_tests(text: str) -> NcclTestReport:
    rows, average, out_of_bounds, failed = [], None, None, False
    for raw in text.splitlines():
        line = raw.strip()
        if (match := _AVERAGE.match(line)) is not None:
            average = float(match[1])
            failed |= "FAILED" in line
            continue
        if (match := _OUT_OF_BOUNDS.match(line)) is not None:
            out_of_bounds, failed = int(match[1]), failed or match[2] == "FAILED"
            continue
        cells = line.split()
        if len(cells) < 11 or not cells[0].isdigit() or not cells[1].isdigit():
            continue  # headers, NCCL INFO lines, the device list
        try:
            row = NcclTestRow(int(cells[0]), int(cells[1]), cells[2], float(cells[-8]), float(cells[-7]),
                              float(cells[-6]), _wrong(cells[-5]), float(cells[-2]))
        except ValueError as error:
            raise ValueError(f"nccl-tests row not understood: {line!r}") from error
        rows.append(row)
        failed |= bool(row.wrong) or bool(_wrong(cells[-1]))
    return NcclTestReport(rows, average, out_of_bounds, not failed)


def busbw_at(report: NcclTestReport, size_bytes: int) -> float | None:
    """The best of out-of-place and in-place busbw at exactly ``size_bytes`` (None if that size was not run)."""
    found = [max(row.busbw_gbps, row.in_place_busbw_gbps) for row in report.rows if row.size_bytes == size_bytes]
    return max(found) if found else None


#: The single-node sweep the field guide gives for an 8-GPU host (32 KiB to 16 GiB, powers of two).
ALL_REDUCE_PERF = fact.command("nccl_all_reduce_perf", ["all_reduce_perf", "-b", "32K", "-e", "16G", "-f", "2",
                                                        "-g", "8", "-n", "50"], parse_nccl_tests)
