"""Kernel log lines from ``dmesg``, ``dmesg -T``, ``/dev/kmsg`` records or syslog, and the Xids in them.

All four prefixes are stripped to one ``KernelLine`` so the Xid scan and the
allowlist work the same whichever source a host offers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from provision.facts import fact

_MONOTONIC = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")
_CTIME = re.compile(r"^\[(\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?(.*)$")
_KMSG = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")
_SYSLOG = re.compile(r"^(\w{3} [ \d]\d \d\d:\d\d:\d\d) (\S+) (?:kernel: (?:\[\s*[\d.]+\] )?)?(.*)$")
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:]+)\): (\d+),\s*"
                  r"(?:pid=(\d+|'<unknown>'),\s*)?(?:name=([^,]*),\s*)?(.*)")


@dataclass(frozen=True)
class KernelLine:
    message: str
    seconds: float | None = None  # since boot, when the source says
    stamp: str | None = None  # wall-clock text, when the source says


@dataclass(frozen=True)
class Xid:
    pci: str
    code: int
    pid: str | None
    process: str | None
    detail: str


def parse_kernel_log(text: str) -> list[KernelLine]:
    lines = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        if not raw.strip():
            continue
        if match := _MONOTONIC.match(raw):
            lines.append(KernelLine(match.group(2), seconds=float(match.group(1))))
        elif match := _CTIME.match(raw):
            lines.append(KernelLine(match.group(2), stamp=match.group(1)))
        elif match := _KMSG.match(raw):
            lines.append(KernelLine(match.group(4), seconds=int(match.group(3)) / 1e6))
        elif match := _SYSLOG.match(raw):
            lines.append(KernelLine(match.group(3), stamp=match.group(1)))
        else:
            lines.append(KernelLine(raw.rstrip()))
    return lines


def find_xids(lines: list[KernelLine]) -> list[Xid]:
    found = []
    for line in lines:
        match = _XID.search(line.message)
        if match:
            found.append(Xid(match.group(1).lower(), int(match.group(2)), match.group(3), match.group(4),
                             match.group(5).strip()))
    return found


#: Refused to an unprivileged user where ``kernel.dmesg_restrict=1`` (Ubuntu's default).
KERNEL_LOG = fact.command("kernel_log", ["dmesg"], parse_kernel_log, needs_root=True)
