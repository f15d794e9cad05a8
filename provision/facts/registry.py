"""Every fact the tool reads from a host, by name: what the data-driven fact tests walk."""

from __future__ import annotations

from typing import Any

from provision.facts import (
    dcgm,
    imex,
    infiniband,
    kernel_log,
    lspci,
    nccl_tests,
    nvidia_smi,
    packages,
    slurm,
    system,
)
from provision.facts.fact import Fact

_ALL: tuple[Fact[Any], ...] = (
    nvidia_smi.GPUS, nvidia_smi.TELEMETRY, nvidia_smi.GPU_QUERY_FIELDS, nvidia_smi.REMAPPED_ROWS,
    nvidia_smi.RETIRED_PAGES, nvidia_smi.NVLINK,
    nvidia_smi.NVLINK_ERRORS, nvidia_smi.TOPOLOGY, kernel_log.KERNEL_LOG, kernel_log.KERNEL_LOG_ISO, lspci.LSPCI,
    lspci.PCI_DEVICES,
    infiniband.IBSTAT, infiniband.INFINIBAND, system.DF, system.SWAPS, system.CMDLINE, system.MACHINE,
    packages.MODULES,
    packages.PEERMEM_REGISTRATION, packages.FABRIC_MANAGER, packages.DPKG_STATUS,
    nccl_tests.ALL_REDUCE_PERF, slurm.SLURM_NODES, slurm.SLURM_JOBS, slurm.SINFO, nvidia_smi.QUERY_XML,
    *dcgm.DIAG.values(),
    dcgm.VERSION, nvidia_smi.GPU_FABRIC, imex.IMEX_STATUS, imex.IMEX_NODES, imex.IMEX_CONFIG, imex.IMEX_PEERS,
    imex.IMEX_CHANNELS, packages.NVLSM_START,
)
FACTS: dict[str, Fact[Any]] = {fact.name: fact for fact in _ALL}
