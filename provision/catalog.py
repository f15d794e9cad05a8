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


GPU_MODELS: dict[str, GpuModel] = {
    model.name: model
    for model in (
        GpuModel("A100-SXM4-80GB", 80, 312.0, 2039.0, 12, 25.0, 234.0, "20b2", "2.0.15"),
        GpuModel("H100-SXM-80GB", 80, 989.0, 3350.0, 18, 26.562, 370.0, "2330", "3.1.6"),
        GpuModel("H200-SXM-141GB", 141, 989.0, 4800.0, 18, 26.562, 370.0, "2335", "3.3.5"),
        GpuModel("B200-SXM-180GB", 180, 2250.0, 8000.0, 18, 53.125, 740.0, "2901", "4.1.1"),
    )
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
