"""Installed packages (``/var/lib/dpkg/status``) and loaded kernel modules (``/proc/modules``)."""

from __future__ import annotations

from dataclasses import dataclass

from provision.facts import fact


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    installed: bool
    held: bool


def parse_dpkg_status(text: str) -> dict[str, Package]:
    packages = {}
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if ": " in line and not line.startswith((" ", "\t")):
                key, value = line.split(": ", 1)
                fields[key] = value
        if "Package" not in fields:
            continue
        want, _flag, status = [*fields.get("Status", "unknown ok not-installed").split(), "", ""][:3]
        packages[fields["Package"]] = Package(fields["Package"], fields.get("Version", ""), status == "installed",
                                              want == "hold")
    return packages


@dataclass(frozen=True)
class Module:
    name: str
    size: int
    users: tuple[str, ...]
    state: str


def parse_proc_modules(text: str) -> dict[str, Module]:
    modules = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 5:
            continue
        users = tuple(user for user in parts[3].split(",") if user and user != "-")
        modules[parts[0]] = Module(parts[0], int(parts[1]), users, parts[4])
    return modules


MODULES = fact.file("modules", "/proc/modules", parse_proc_modules)
#: Present only once nvidia-peermem has registered with ib_core as a peer-memory client (a module that loads but
#: never registers leaves it absent; its own /sys/module/nvidia_peermem/version proves nothing).
PEERMEM_REGISTRATION = fact.file("nv_mem", "/sys/kernel/mm/memory_peers/nv_mem/version", str.strip)
