"""Parse ``df -P``, ``/proc/swaps``, ``/proc/cmdline`` and ``uname -m``: the disk, swap, boot and architecture facts
of a host. Pure functions."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from provision.facts import fact


@dataclass(frozen=True)
class Filesystem:
    source: str
    size_kb: int
    used_kb: int
    available_kb: int
    percent: int  # as df rounds it: up
    mount: str


def parse_df(text: str) -> list[Filesystem]:
    """POSIX ``df -P`` (1024-byte blocks); a mount point may contain spaces, so split from the left only."""
    lines = text.replace("\r\n", "\n").split("\n")
    if not lines[0].startswith("Filesystem"):
        raise ValueError(f"not df -P's header: {lines[0][:120]!r}")
    filesystems = []
    for line in lines[1:]:
        if not line.strip():
            continue
        fields = line.split(None, 5)
        if len(fields) != 6 or not fields[4].endswith("%"):
            raise ValueError(f"not a df -P line: {line!r}")
        source, size, used, available, percent, mount = fields
        filesystems.append(Filesystem(source, int(size), int(used), int(available), int(percent[:-1]), mount))
    if not any(fs.mount == "/" for fs in filesystems):  # every host has a root filesystem: a list without it was cut
        raise ValueError(f"df -P listed no root filesystem ({len(filesystems)} lines)")
    return filesystems


@dataclass(frozen=True)
class SwapArea:
    name: str
    kind: str
    size_kb: int
    used_kb: int


def parse_swaps(text: str) -> list[SwapArea]:
    areas = []
    for line in text.replace("\r\n", "\n").split("\n")[1:]:
        fields = line.split()
        if len(fields) >= 4:
            areas.append(SwapArea(fields[0], fields[1], int(fields[2]), int(fields[3])))
    return areas


@dataclass(frozen=True)
class KernelCommandLine:
    """The parameters the running kernel was booted with, in order (a later one of a name wins, as the kernel
    reads them)."""

    words: tuple[str, ...]

    def value(self, name: str) -> str | None:
        """``name=value``'s value, ``""`` for a bare flag, None when absent; the last occurrence wins."""
        found = None
        for word in self.words:
            key, equals, value = word.partition("=")
            if key == name:
                found = value if equals else ""
        return found


#: A parameter's name (``nvme_core.default_ps_max_latency_us``, ``rd.driver.blacklist``, ``--`` before init's).
PARAMETER_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def parse_cmdline(text: str) -> KernelCommandLine:
    """One line, words split as the kernel splits them (double quotes may hold spaces: ``param="a b"``)."""
    lines = text.splitlines()
    if len(lines) != 1 or not lines[0].strip():
        raise ValueError(f"not one command line: {len(lines)} line(s)")
    try:
        words = shlex.split(lines[0], posix=True)
    except ValueError as error:
        raise ValueError(f"unbalanced quotes in the command line: {error}") from error
    odd = [word for word in words if not PARAMETER_NAME.match(word.partition("=")[0])]
    if odd:  # a prefix added on the way (``host17 | ...``) or another file: not a parameter the kernel takes
        raise ValueError(f"not a kernel parameter: {odd[0][:40]!r}")
    return KernelCommandLine(tuple(words))


#: ``uname -m``'s word: lower-case letters, digits and underscores (x86_64, aarch64, ppc64le).
MACHINE_WORD = re.compile(r"^[a-z][a-z0-9_]*$")


def parse_machine(text: str) -> str:
    """``uname -m``: the one word naming the kernel's machine (``x86_64`` on an HGX host, ``aarch64`` on a Grace
    tray). Nothing, two lines or a prefix a collector added is not read as any machine."""
    lines = [line for line in text.replace("\r\n", "\n").split("\n") if line.strip()]
    if len(lines) != 1 or not MACHINE_WORD.match(lines[0].strip()):
        raise ValueError(f"not uname -m's one word: {text[:80]!r}")
    return lines[0].strip()


DF = fact.command("df", ["df", "-P"], parse_df)
MACHINE = fact.command("machine", ["uname", "-m"], parse_machine)
SWAPS = fact.file("swaps", "/proc/swaps", parse_swaps)
CMDLINE = fact.file("cmdline", "/proc/cmdline", parse_cmdline)
