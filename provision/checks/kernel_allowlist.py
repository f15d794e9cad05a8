"""Kernel-log allowlisting: normalise away what varies between hosts and boots, then match known messages.

A message is judged only after addresses, numbers that change per boot and device instance names are replaced
by placeholders, so one allowlist entry covers every host of a model. The built-in list covers the boot and
driver-load messages of an HGX host on Ubuntu; teams replace it with their own (``burnin.kernel_log_allowlist``,
one regular expression per line over normalised messages), generated from their first known-good batch.
"""

from __future__ import annotations

import re
from pathlib import Path

#: (pattern, placeholder), applied in order; the order matters (UUIDs before hex, PCI addresses before numbers).
_RAW_REWRITES = (
    (r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "UUID"),
    (r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", "UUID"),
    (r"\b(?:[0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}\b", "MAC"),
    (r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b", "ADDR"),
    (r"\b[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b", "ADDR"),
    (r"\b\d{2}:\d{2}:\d{2}\b", "TIME"),
    (r"\b\d{1,2}/\d{1,2}/\d{4}\b", "DATE"),
    (r"0x[0-9a-fA-F]+", "HEX"),
    (r"\bpid=\d+", "pid=N"),
    (r"\b(nvme|sg|mem|CPU|cpu|irq |host|ib|eth|veth|mlx5_|card|renderD|loop|sd)\d+", r"\1N"),
    (r"\b\d+(\.\d+)?\b", "N"),
)
REWRITES = tuple((re.compile(pattern), placeholder) for pattern, placeholder in _RAW_REWRITES)


def normalize(message: str) -> str:
    for pattern, placeholder in REWRITES:
        message = pattern.sub(placeholder, message)
    return " ".join(message.split())


BUILTIN = r"""
Linux version .*
Command line: .*
KERNEL supported cpus:
(Intel GenuineIntel|AMD AuthenticAMD|Hygon HygonGenuine|Centaur CentaurHauls|zhaoxin Shanghai)
BIOS-provided physical RAM map:
BIOS-e820: \[mem HEX-HEX\] (usable|reserved|ACPI data|ACPI NVS)
DMI: .*
tsc: (Detected|Refined TSC clocksource calibration:) .*
ACPI: .*
NUMA: .*
smpboot: .*
DMAR: .*
pci ADDR: \[HEX:HEX\] type N class HEX
pci ADDR: .*
pcieport ADDR: (AER|DPC|PME|pciehp): enabled.*
pcieport ADDR: pciehp: Slot\(N\): (Attention button|Power Control|MRL Sensor|Power Indicator|Attention Indicator).*
pcieport ADDR: pciehp: Slot\(N\): (Card present|Link Up)
iommu: Default domain type: .*
NET: Registered PF_\w+ protocol family
nvme nvmeN: .*
EXT\d-fs \(\w+\): mounted filesystem .*
systemd\[N\]: .*
Adding \w+ swap on .*
mlx5_core ADDR: firmware version: .*
mlx5_core ADDR: N Gb/s available PCIe bandwidth \(N GT/s PCIe x\d+ link\)
mlx5_core ADDR: Port module event: module N, Cable plugged
mlx5_core ADDR: (E-Switch|MLX5E|Rate limit|mlx5_pcie_event|Supported tc offload range|Flow counters).*
mlx5_ib: Mellanox Connect-IB Infiniband driver .*
nvidia: loading out-of-tree module taints kernel\.
nvidia: module verification failed: signature and/or required key missing - tainting kernel
nvidia-nvlink: Nvlink Core is being initialized, major device number N
NVRM: loading NVIDIA UNIX (x86_64 Kernel Module|Open Kernel Module for (x86_64|aarch64)) .*
nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms .*
\[drm\] \[nvidia-drm\] \[GPU ID HEX\] Loading driver
\[drm\] Initialized nvidia-drm .*
nvidia_peermem: loading out-of-tree module taints kernel\.
nvidia-nvswitchN: .*(Probing|loaded).*
audit: type=N audit\(N:N\): .*
IPv6: ADDRCONF\(NETDEV_CHANGE\): .*
"""


def load(path: Path | None) -> list[re.Pattern[str]]:
    """The spec's allowlist file, or the built-in one; blank lines and ``#`` comments are skipped."""
    text = path.read_text() if path else BUILTIN
    patterns = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        try:
            patterns.append(re.compile(entry))
        except re.error as error:
            raise ValueError(f"{path or 'built-in allowlist'}:{number}: not a regular expression: {error}") from None
    return patterns


def unexpected(messages: list[str], patterns: list[re.Pattern[str]]) -> list[str]:
    """Messages no pattern matches in full, each once, in first-seen order (raw text kept for evidence)."""
    seen: set[str] = set()
    left = []
    for message in messages:
        normal = normalize(message)
        if normal in seen or any(pattern.fullmatch(normal) for pattern in patterns):
            continue
        seen.add(normal)
        left.append(message)
    return left
