"""What we know about GPU models: thresholds default from these, and the simulator builds from them.

Pure data with no dependencies, so the tool stand-ins can import it cheaply.

Figures are the vendor/field numbers collected in ``shared/FIELD_GUIDE.md``
(dense bf16 peak, HBM bandwidth, NVLink layout, measured 8-GPU ring all-reduce
bus bandwidth). Thresholds are fractions of these, never the raw spec values,
because a healthy node never reaches the datasheet figure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_gib: int
    bf16_dense_tflops: float
    hbm_gbps: float  # GB/s
    nvlink_links: int
    nvlink_link_gbps: float  # GB/s per link per direction, as nvidia-smi nvlink -s prints it
    ring_allreduce_busbw: float  # GB/s, 8 GPUs, large messages, no NVLS
    pci_device_id: str
    #: The first DCGM release whose diagnostic knows this GPU (its SKU in nvvs/diag-skus.yaml.in, NVIDIA/DCGM's
    #: public tags; A100 80GB from the 2.0.15 release notes): an older DCGM runs its tests with no parameters for it.
    dcgm_min: str
    #: The framebuffer nvidia-smi reports (``memory.total``, MiB), where a public capture gives it.
    framebuffer_mib: int | None = None


GPU_MODELS: dict[str, GpuModel] = {
    model.name: model
    for model in (
        GpuModel("A100-SXM4-80GB", 80, 312.0, 2039.0, 12, 25.0, 234.0, "20b2", "2.0.15"),
        GpuModel("H100-SXM-80GB", 80, 989.0, 3350.0, 18, 26.562, 370.0, "2330", "3.1.6"),
        GpuModel("H200-SXM-141GB", 141, 989.0, 4800.0, 18, 26.562, 370.0, "2335", "3.3.5"),
        GpuModel("B200-SXM-180GB", 180, 2250.0, 8000.0, 18, 53.125, 740.0, "2901", "4.1.1"),
        # Blackwell Ultra and the Grace-Blackwell trays (field guide 8; figures and sources in docs/blackwell.md):
        # HGX B300: 2.25 PF dense bf16, 288 GB / 8 TB/s HBM3e, 275040 MiB and 834.8 GB/s 8-GPU all_reduce busbw
        # (OCI's B300 quickstart, NCCL 2.28.9), PCI 0x3182 (open-gpu-kernel-modules' README), DCGM 4.4.1.
        GpuModel("B300-SXM-288GB", 288, 2250.0, 8000.0, 18, 53.125, 834.0, "3182", "4.4.1", 275040),
        # A GB200 tray's GPU: 2.5 PF dense bf16 (NVIDIA's DGX GB200 figure at 1200 W; 2.25 is also quoted), 186 GB
        # / 8 TB/s, 189471 MiB, four GPUs a tray: 680 GB/s all_reduce over one tray (Azure), PCI 0x2941, DCGM 4.2.3.
        GpuModel("GB200-186GB", 186, 2500.0, 8000.0, 18, 53.125, 680.0, "2941", "4.2.3", 189471),
        # A GB300 tray's GPU: 2.5 PF dense bf16, 288 GB / 8 TB/s, 284208 MiB, 685.2 GB/s over one 4-GPU tray (OCI's
        # GB300 quickstart, NCCL 2.28.7), PCI 0x31c2, DCGM 4.4.1.
        GpuModel("GB300-288GB", 288, 2500.0, 8000.0, 18, 53.125, 685.0, "31c2", "4.4.1", 284208),
    )
}

#: HGX Blackwell boards whose NVSwitches the fabric manager reaches through a ConnectX-7 bridge on the baseboard and
#: NVLSM, not through PCIe (field guide 8.1): the bridge's functions show in ``ibstat`` beside the rails.
NVSWITCH_BRIDGE_MODELS = frozenset({"B200-SXM-180GB", "B300-SXM-288GB"})

#: Blackwell GPUs (NVLink 5): ``nvidia-smi nvlink -e`` prints their counters under other names than Hopper's (the
#: errors, the recovery events, and statistics beside them: field guide 8.3).
NVLINK5_MODELS = frozenset({"B200-SXM-180GB", "B300-SXM-288GB", "GB200-186GB", "GB300-288GB"})

#: NCCL all_reduce busbw over one whole NVLink domain (MNNVL with NVLS), by GPUs in the domain, large messages:
#: what a domain's collectives stage is judged against (field guide 8.4): GB200, 72 GPUs, 839 GB/s out of place at
#: 4 GB (CoreWeave's nccl-tests README, NCCL 2.26.2); 64 GPUs (16 trays), 932 GB/s at 32 GB (OCI via dranet);
#: GB300, 64 GPUs, 930.5 GB/s at 16 GB (OCI's GB300 quickstart). NVIDIA's own cluster validation sets 700 with a floor
#: of 630 for an NVLS all_reduce.
DOMAIN_ALLREDUCE_BUSBW: dict[str, dict[int, float]] = {
    "GB200-186GB": {72: 839.0, 64: 932.0},
    "GB300-288GB": {64: 930.5},
}


#: What each ``dcgmi diag -r N`` adds (NVIDIA/DCGM nvvs/src/NvidiaValidationSuite.cpp, FillTestVectors, 3.3.9 and
#: 4.2.3), by DCGM 4's plugin names.
DCGM_LEVEL_TESTS: dict[int, tuple[str, ...]] = {
    1: ("software",),
    2: ("pcie", "memory"),
    3: ("diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth"),
    4: ("memtest", "pulse_test"),
}
#: Tests a level 3 or 4 also runs where their packages are installed (the EUD plugins ship apart): judged when
#: reported, never required.
DCGM_OPTIONAL_TESTS = ("eud", "cpu_eud", "nvbandwidth")


def dcgm_tests(level: int) -> tuple[str, ...]:
    """The tests ``dcgmi diag -r level`` must report."""
    return tuple(test for step in range(1, level + 1) for test in DCGM_LEVEL_TESTS[step])
