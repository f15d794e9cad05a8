"""Parse ``nvidia-smi`` output: CSV queries, the ``-q`` report, and ``nvlink --status``.

Pure functions. The ``-q`` report is an indentation tree of ``Key : Value``
lines; it is returned as nested dicts keyed by GPU bus id, because checks address
GPUs by bus id (the one identity lspci, the kernel log and NVML share).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from provision.facts import fact

_UNIT = re.compile(r"\s*\[[^\]]*\]$")


def parse_query_csv(text: str, fields: list[str] | None = None) -> list[dict[str, str]]:
    """``--query-* --format=csv``; with ``noheader`` pass the ``fields`` that were asked for."""
    lines = [line for line in text.replace("\r\n", "\n").split("\n") if line.strip()]
    if fields is None:
        if not lines:
            return []
        fields = [_UNIT.sub("", name.strip()) for name in lines[0].split(",")]
        lines = lines[1:]
    rows = []
    for line in lines:
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(fields):
            raise ValueError(f"expected {len(fields)} columns, got {len(cells)}: {line!r}")
        rows.append(dict(zip(fields, cells, strict=True)))
    return rows


@dataclass
class SmiReport:
    header: dict[str, str] = field(default_factory=dict)
    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)  # bus id -> tree


def parse_query_report(text: str) -> SmiReport:
    """``nvidia-smi -q [-d ...]``."""
    report = SmiReport()
    stack: list[tuple[int, dict[str, Any]]] = []
    current_gpu: dict[str, Any] | None = None
    for raw in text.replace("\r\n", "\n").split("\n"):
        if not raw.strip() or raw.startswith("=="):
            continue
        gpu = re.match(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$", raw)
        if gpu:
            current_gpu = {}
            report.gpus[gpu.group(1)] = current_gpu
            stack = [(0, current_gpu)]
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        key, colon, value = raw.strip().partition(":")
        key, value = key.strip(), value.strip()
        if current_gpu is None or indent == 0:
            if colon:
                report.header[key] = value
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else current_gpu
        if colon and value:
            parent[key] = value
        else:
            child: dict[str, Any] = {}
            parent[key] = child
            stack.append((indent, child))
    return report


@dataclass
class NvlinkGpu:
    index: int
    name: str
    uuid: str
    links: dict[int, float | None] = field(default_factory=dict)  # GB/s, None when inactive
    all_inactive: bool = False

    @property
    def inactive_links(self) -> list[int]:
        return [link for link, speed in self.links.items() if speed is None]


def parse_nvlink_status(text: str) -> list[NvlinkGpu]:
    """``nvidia-smi nvlink --status``; empty output means no NVLink (a PCIe GPU)."""
    gpus: list[NvlinkGpu] = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        head = re.match(r"^GPU (\d+): (.*) \(UUID: (GPU-[0-9a-fA-F-]+)\)$", line)
        if head:
            gpus.append(NvlinkGpu(int(head.group(1)), head.group(2), head.group(3)))
            continue
        if not gpus:
            continue
        if "all links are inactive" in line:
            gpus[-1].all_inactive = True
            continue
        link = re.match(r"^Link (\d+): (?:([\d.]+) GB/s|<inactive>)$", line)
        if link:
            gpus[-1].links[int(link.group(1))] = float(link.group(2)) if link.group(2) else None
    return gpus


#: The GPU fields preflight asks for (one CSV row per GPU, in this order).
GPU_FIELDS = ["index", "uuid", "serial", "pci.bus_id", "driver_version", "vbios_version", "ecc.mode.current",
              "ecc.mode.pending", "ecc.errors.uncorrected.volatile.total", "ecc.errors.corrected.volatile.total",
              "temperature.gpu", "pcie.link.gen.max", "pcie.link.width.current", "clocks_event_reasons.active"]
REMAP_FIELDS = ["gpu_bus_id", "remapped_rows.failure", "remapped_rows.pending", "remapped_rows.correctable",
                "remapped_rows.uncorrectable"]

GPUS = fact.command("gpus", ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"],
                    lambda text: parse_query_csv(text, GPU_FIELDS))
REMAPPED_ROWS = fact.command("remapped_rows", ["nvidia-smi", f"--query-remapped-rows={','.join(REMAP_FIELDS)}",
                                               "--format=csv,noheader"],
                             lambda text: parse_query_csv(text, REMAP_FIELDS))
RETIRED_PAGES = fact.command("retired_pages", ["nvidia-smi", "-q", "-d", "PAGE_RETIREMENT"], parse_query_report)
NVLINK = fact.command("nvlink", ["nvidia-smi", "nvlink", "-s"], parse_nvlink_status)
