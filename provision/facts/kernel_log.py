"""Kernel log lines from ``dmesg`` (any time format), ``/dev/kmsg``, syslog or ``journalctl -k``; the Xids and the
lost GPUs in them.

Every prefix is stripped to one ``KernelLine`` so the Xid scan and the allowlist work the same whichever source a
host offers. Xids are read in every form drivers have printed (with and without ``PCI:``, with and without
``pid=``/``name=``, MIG's ``GPU-I``); a GPU that fell off the bus or failed to initialise is found also where the
driver printed no Xid at all (its probe-time report is one record over three lines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from provision.facts import fact

_MONOTONIC = re.compile(r"^\[\s*(\d+\.\d+)(?:\s*<\s*[\d.]+>)?\]\s?(.*)$")  # dmesg; --show-delta adds <delta>
_DELTA_ONLY = re.compile(r"^\[<\s*[\d.]+>\]\s?(.*)$")  # dmesg --time-format delta
_CTIME = re.compile(r"^\[(\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?(.*)$")  # dmesg -T
_RELTIME = re.compile(r"^\[(\w{3}\s?\d{1,2} \d\d:\d\d|\s*\+\d+\.\d+)\]\s?(.*)$")  # dmesg --time-format reltime
_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:[+-]\d\d:?\d\d|Z)?) (.*)$")  # dmesg iso, RFC3339
_KMSG = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")  # /dev/kmsg records
_SYSLOG = re.compile(r"^(\w{3} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?) (.*)$")  # syslog, journalctl short(-precise)
_DECODED = re.compile(r"^[a-z0-9]+\s*:\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*: (.*)$")  # --decode
_HOST_KERNEL = re.compile(r"^(\S+) kernel: (?:\[\s*(\d+\.\d+)\] ?)?(.*)$")  # syslog and journalctl's "host kernel:"
_CONTINUED = re.compile(r"^\s+(\S.*)$")  # dmesg and journalctl indent a record's further lines
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}|[0-9a-fA-F]{4}:[0-9a-fA-F]{2})"
                  r"(?: GPU-I:\d+)?(?: GPU-CI:\d+)?\): (\d+),\s*"
                  r"(?:pid=(\d+|'<unknown>'),\s*)?(?:name=([^,]*),\s*)?(.*)")
#: A GPU the driver lost, in the forms drivers 515-595 print (open-gpu-kernel-modules: osapi.c's probe-time
#: three-line record, osHandleGpuLost's NV_DEV_PRINTF, RmInitAdapter's failure) and the single line of old drivers.
_PROBE_LOST = re.compile(r"NVRM: The NVIDIA GPU ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])")
_DEVICE_LOST = re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?):? "
                          r"(?:GPU )?has fallen off the bus")
_INIT_FAILED = re.compile(r"NVRM: GPU ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): RmInitAdapter failed! "
                          r"\(([^)]*)\)")
_LOST_TEXT = ("fallen off the bus", "RmInitAdapter", "rm_init_adapter", "NVRM: The NVIDIA GPU",
              "NVRM: (PCI ID:")


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
    seconds: float | None = None  # since boot, where the log says: how far apart two Xids of one node were


def _kernel_line(raw: str) -> KernelLine | None:
    """One line with its tool's prefix stripped, or None when it has no prefix this parser knows."""
    if match := _KMSG.match(raw):
        return KernelLine(match.group(4), seconds=int(match.group(3)) / 1e6)
    decoded = _DECODED.match(raw)
    text = decoded.group(1) if decoded else raw
    seconds: float | None = None
    stamp: str | None = None
    if match := _MONOTONIC.match(text):
        seconds, text = float(match.group(1)), match.group(2)
    elif match := _CTIME.match(text):
        stamp, text = match.group(1), match.group(2)
    elif match := _DELTA_ONLY.match(text):
        text = match.group(1)
    elif match := _RELTIME.match(text):
        stamp, text = match.group(1).strip(), match.group(2)
    elif (match := _ISO.match(text)) or (match := _SYSLOG.match(text)):
        stamp, text = match.group(1), match.group(2)
    elif not decoded:
        return None
    if (stamp is not None or seconds is not None) and (host := _HOST_KERNEL.match(text)):
        seconds = float(host.group(2)) if host.group(2) else seconds
        text = host.group(3)
    return KernelLine(text.rstrip(), seconds=seconds, stamp=stamp)


def parse_kernel_log(text: str) -> list[KernelLine]:
    """Every line of ``dmesg`` (plain, ``-T``, ``--time-format iso|reltime|delta``, ``--decode``), ``/dev/kmsg``,
    syslog (RFC 3164 or RFC 3339, with or without the kernel's uptime) or ``journalctl -k`` (short, -precise,
    -iso, -monotonic). A record's indented further lines (dmesg and journalctl indent them to the message column;
    /dev/kmsg escapes them as ``\x0a``) keep their record's time. A line with no prefix this parser knows is
    kept whole (``dmesg -t`` prints none), so the allowlist sees it and an Xid in it is still found."""
    lines: list[KernelLine] = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        if not raw.strip():
            continue
        continued = _CONTINUED.match(raw) if lines else None
        if continued and _kernel_line(continued.group(1)) is None:
            lines.append(KernelLine(continued.group(1).rstrip(), seconds=lines[-1].seconds, stamp=lines[-1].stamp))
            continue
        line = _kernel_line(raw) or KernelLine(raw.strip())
        for part in line.message.split("\\x0a"):
            if part.strip():
                lines.append(KernelLine(part.rstrip(), seconds=line.seconds, stamp=line.stamp))
    return lines


def find_xids(lines: list[KernelLine]) -> list[Xid]:
    found = []
    for line in lines:
        match = _XID.search(line.message)
        if match:
            found.append(Xid(match.group(1).lower(), int(match.group(2)), match.group(3), match.group(4),
                             match.group(5).strip(), line.seconds))
    return found


#: Refused to an unprivileged user where ``kernel.dmesg_restrict=1`` (Ubuntu's default).
KERNEL_LOG = fact.command("kernel_log", ["dmesg"], parse_kernel_log, needs_root=True)
#: The same ring with each line's wall-clock time and zone (util-linux ``--time-format=iso``): what a failed job's
#: window is matched against (``provision triage --job``); seconds since boot would need the boot's own time.
KERNEL_LOG_ISO = fact.command("kernel_log_iso", ["dmesg", "--time-format=iso"], parse_kernel_log, needs_root=True)


@dataclass(frozen=True)
class GpuLost:
    """A GPU the driver says it lost: fell off the bus (with or without an Xid line) or failed to initialise."""

    pci: str
    what: str
    line: str


def find_lost_gpus(lines: list[KernelLine]) -> list[GpuLost]:
    """Every GPU the kernel log says was lost, once per GPU and kind. Drivers print the probe-time loss as one
    record of three lines ("NVRM: The NVIDIA GPU <bdf>" ... "fallen off the bus"), with no Xid."""
    found: dict[tuple[str, str], GpuLost] = {}
    for index, line in enumerate(lines):
        message = line.message
        probe = _PROBE_LOST.search(message)
        if probe and not any("fallen off the bus" in later.message for later in lines[index:index + 3]):
            probe = None
        if fallen := probe or _DEVICE_LOST.search(message):
            pci = fallen.group(1).lower()
            found.setdefault((pci, "bus"), GpuLost(pci, "fell off the bus", message))
        elif failed := _INIT_FAILED.search(message):
            pci = failed.group(1).lower()
            found.setdefault((pci, "init"), GpuLost(pci, f"failed to initialise (RmInitAdapter {failed.group(2)})",
                                                    message))
    return list(found.values())


def about_a_lost_gpu(message: str) -> bool:
    """A line that belongs to a lost GPU's report (judged with the Xids, not by the allowlist)."""
    return any(text in message for text in _LOST_TEXT)
