"""Parse nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ...): the per-size table and its footer.

Columns differ between versions and collectives (a ``root`` column, a ``redop`` that ``alltoall`` leaves
blank, ``#wrong`` or ``error``), so a row is read from both ends: size and count first, then the eight
out-of-place and in-place figures last. Gate on per-size rows, never on the footer's "Avg bus bandwidth",
the mean over every size (the field guide, 5.3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provision.facts import fact

_AVERAGE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)")
#: What a launcher writes before each line: ``srun -l`` ("0: ", " 12: ") and ``mpirun --tag-output``
#: ("[1,0]<stdout>:").
_LAUNCHER_TAG = re.compile(r"^(\s*\d+: ?|\[\d+,\d+\]<std(?:out|err)>: ?)")
#: nccl-tests' own failure lines (src/common.h): "<host>: Test NCCL failure common.cu:1204 '...'",
#: "<host>: Test CUDA failure ...", " .. <host> pid N: Test failure common.cu:915".
_FAILURE = re.compile(r"Test (?:NCCL |CUDA )?failure")


@dataclass(frozen=True)
class NcclTestRow:
    size_bytes: int
    count: int
    dtype: str
    time_us: float  # out-of-place
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None  # None when the run did not validate (-c 0: "N/A") or predates the count (before 2.13)
    in_place_busbw_gbps: float
    max_error: float | None = None  # before 2.13 the column was the largest deviation ("error": 2e-07)


@dataclass(frozen=True)
class NcclTestReport:
    rows: list[NcclTestRow]
    average_busbw_gbps: float | None
    out_of_bounds: int | None
    passed: bool  # rows, the footer, no wrong element, no FAILED footer, no failure line
    failures: list[str] = field(default_factory=list)


def _check_cell(text: str) -> tuple[int | None, float | None]:
    """The ``#wrong`` count (2.13 on), or the old ``error`` deviation; (None, None) for ``N/A``."""
    if text == "N/A":
        return None, None
    if text.isdigit():
        return int(text), None
    return None, float(text)


def _untagged(lines: list[str]) -> list[str]:
    """The lines without the launcher's tags; where several ranks printed result rows, only the first one's."""
    tagged = [(match.group(1).strip(), line[match.end():]) if (match := _LAUNCHER_TAG.match(line)) else (None, line)
              for line in lines]
    if all(tag is None for tag, _ in tagged):
        return lines
    row_tags = [tag for tag, line in tagged if tag is not None and line.strip()[:1].isdigit()]
    first = row_tags[0] if row_tags else None
    return [line for tag, line in tagged if tag in (None, first) or not line.strip()[:1].isdigit()]


def parse_nccl_tests(text: str) -> NcclTestReport:
    """The table, footer and failure lines; plain, or tagged per line by ``srun -l`` or ``mpirun --tag-output``.
    Output with no result row is refused (ValueError): silence is not a pass."""
    rows, average, out_of_bounds, failed, failures = [], None, None, False, []
    for raw in _untagged(text.replace("\r\n", "\n").split("\n")):
        line = raw.strip()
        if (match := _AVERAGE.match(line)) is not None:
            average = float(match[1])
            failed |= "FAILED" in line
            continue
        if (match := _OUT_OF_BOUNDS.match(line)) is not None:
            out_of_bounds, failed = int(match[1]), failed or match[2] == "FAILED"
            continue
        if _FAILURE.search(line):
            failures.append(line)
            continue
        cells = line.split()
        if len(cells) < 10 or not cells[0].isdigit() or not cells[1].isdigit():
            continue  # headers, NCCL INFO lines, the device list
        try:
            wrong, error = _check_cell(cells[-5])
            in_place_wrong, _ = _check_cell(cells[-1])
            row = NcclTestRow(int(cells[0]), int(cells[1]), cells[2], float(cells[-8]), float(cells[-7]),
                              float(cells[-6]), wrong, float(cells[-2]), error)
        except ValueError as error:
            raise ValueError(f"nccl-tests row not understood (expected size, count, type, then time, algbw, busbw "
                             f"and #wrong or error, out-of-place and in-place): {line!r}") from error
        rows.append(row)
        failed |= bool(row.wrong) or bool(in_place_wrong)
    if not rows:
        shown = next((line.strip() for line in text.splitlines() if line.strip()), "")
        raise ValueError(f"no nccl-tests result row in the output{f' (it begins {shown[:80]!r})' if shown else ''}"
                         + (f"; it reports {failures[0]}" if failures else ""))
    complete = average is not None or out_of_bounds is not None
    return NcclTestReport(rows, average, out_of_bounds, complete and not failed and not failures, failures)


def busbw_at(report: NcclTestReport, size_bytes: int) -> float | None:
    """The best of out-of-place and in-place busbw at exactly ``size_bytes`` (None if that size was not run)."""
    found = [max(row.busbw_gbps, row.in_place_busbw_gbps) for row in report.rows if row.size_bytes == size_bytes]
    return max(found) if found else None


#: The single-node sweep the field guide gives for an 8-GPU host (32 KiB to 16 GiB, powers of two).
ALL_REDUCE_PERF = fact.command("nccl_all_reduce_perf", ["all_reduce_perf", "-b", "32K", "-e", "16G", "-f", "2",
                                                        "-g", "8", "-n", "50"], parse_nccl_tests)
