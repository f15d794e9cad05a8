"""Host-side link flaps from syslog: systemd-networkd's ``ibN: lost carrier`` / ``Gained carrier`` lines.

Syslog's classic timestamp (``Aug 17 06:18:01``) has no year and no zone; the caller says which year
the log ends in, and a month that runs backwards (December, then January) starts the next year.
Each ``lost carrier`` is one flap of that IPoIB device's cable, as AzNHC counts them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

_LINE = re.compile(r"^(\w{3})\s+(\d{1,2}) (\d\d:\d\d:\d\d)(?:\.\d+)? (\S+) [^:]*: (ib[\w.-]*): (lost|gained) carrier",
                   re.IGNORECASE)
_MONTHS = {name: number for number, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}


@dataclass(frozen=True)
class CarrierEvent:
    time: float
    host: str
    device: str  # the IPoIB netdev: ib6, or a predictable name such as ibp12s0
    up: bool
    line: str


def parse_syslog(text: str, *, year: int, timezone: str = "UTC") -> list[CarrierEvent]:
    """Carrier changes in a syslog text; every other line is someone else's business."""
    zone = ZoneInfo(timezone)
    found: list[CarrierEvent] = []
    matches = [match for match in map(_LINE.match, text.splitlines()) if match]
    months = [_MONTHS.get(match.group(1).lower(), 0) for match in matches]
    # the log ends in ``year``: count the year-rollovers before each line, backwards from the end
    years, current = [0] * len(matches), year
    for index in range(len(matches) - 1, -1, -1):
        if index + 1 < len(matches) and months[index] > months[index + 1]:
            current -= 1
        years[index] = current
    for match, month, when_year in zip(matches, months, years, strict=True):
        if not month:
            continue
        stamp = datetime.strptime(f"{when_year}-{month:02d}-{int(match.group(2)):02d} {match.group(3)}",
                                  "%Y-%m-%d %H:%M:%S").replace(tzinfo=zone)
        found.append(CarrierEvent(stamp.timestamp(), match.group(4), match.group(5),
                                  match.group(6).lower() == "gained", match.group(0)))
    return found


#: A syslog line, whatever it says: the classic BSD timestamp and a host (``Nov 28 01:12:09 sim01 ...``), or an
#: RFC 5424 / ISO 8601 one (``2026-11-28T01:12:09.123+00:00 sim01 ...``), as rsyslog and journald export them.
_SYSLOG_FORM = re.compile(r"^(?:\w{3}\s+\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?"  # Nov 28 01:12:09
                          r"|<\d+>\d? ?\S+"  # <PRI>VERSION TIMESTAMP, as sent on the wire
                          r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*)"  # ISO 8601
                          r" \S+ ")


def syslog_lines(text: str) -> tuple[int, int, list[str]]:
    """(non-blank lines, lines in a syslog form, up to three samples of the others): a syslog with no carrier line
    is a syslog that saw no flap; a file with no syslog line is not a syslog at all."""
    lines = [line for line in text.splitlines() if line.strip()]
    other = [line for line in lines if not _SYSLOG_FORM.match(line)]
    return len(lines), len(lines) - len(other), other[:3]
