"""Kernel messages of a simulated host: the boot noise every HGX host prints, and fault lines.

The noise matters: an allowlist-based kernel-log check is only tested if the
log it reads looks like a real boot (ACPI, PCI enumeration, mlx5 and NVRM
probes), not an empty file.
"""

from __future__ import annotations

from provision.hostmodel.devices import NodeHardware
from provision.hostmodel.pciconfig import SPEEDS

DELL_DMI = "Dell Inc. PowerEdge XE9680/0NVY8P, BIOS 1.6.10 12/08/2023"


def boot_lines(hardware: NodeHardware, kernel: str) -> list[str]:
    lines = [
        f"Linux version {kernel} (buildd@lcy02-amd64-051) (x86_64-linux-gnu-gcc-11 (Ubuntu 11.4.0-1ubuntu1~22.04) "
        "11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #122-Ubuntu SMP Thu May 23 07:48:21 UTC 2024 (Ubuntu)",
        f"Command line: BOOT_IMAGE=/vmlinuz-{kernel} root=/dev/nvme0n1p2 ro intel_iommu=on",
        "KERNEL supported cpus:",
        "  Intel GenuineIntel",
        "BIOS-provided physical RAM map:",
        "BIOS-e820: [mem 0x0000000000000000-0x000000000009ffff] usable",
        f"DMI: {DELL_DMI}",
        "tsc: Detected 2000.000 MHz processor",
        "ACPI: RSDP 0x00000000692B9014 000024 (v02 DELL  )",
        "NUMA: Initialized distance table, cnt=2",
        "smpboot: Allowing 224 CPUs, 0 hotplug CPUs",
        "DMAR: IOMMU enabled",
        "pci 0000:00:00.0: [8086:09a2] type 00 class 0x088000",
    ]
    for device in hardware.devices:
        lines.append(f"pci {device.bdf}: [{device.vendor:04x}:{device.device:04x}] type "
                     f"{'01' if device.is_bridge else '00'} class 0x{device.class_code:06x}")
    lines += [
        "iommu: Default domain type: Translated",
        "NET: Registered PF_INET protocol family",
        "nvme nvme0: 32/0/0 default/read/poll queues",
        "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
        f"systemd[1]: Detected architecture {'arm64' if hardware.machine == 'aarch64' else 'x86-64'}.",
        "Adding 0k swap on /swap.img.  Priority:-2 extents:1 across:0k SSFS",
    ]
    for hca in hardware.hcas:
        lines += [
            f"mlx5_core {hca.bdf}: firmware version: 28.41.1000",
            f"mlx5_core {hca.bdf}: 504.112 Gb/s available PCIe bandwidth (32.0 GT/s PCIe x16 link)",
            f"mlx5_core {hca.bdf}: Port module event: module 0, Cable plugged",
        ]
    lines += ["mlx5_ib: Mellanox Connect-IB Infiniband driver v5.15-1.0"]
    return lines


def driver_banner(version: str, machine: str) -> str:
    """The module's own words for itself, as ``/proc/driver/nvidia/version`` and the load line print them: an x86
    host's proprietary module, and on a Grace tray (aarch64) the open module, the only one Grace runs ("NVIDIA UNIX
    Open Kernel Module for aarch64  550.144.03  Release Build  (dvs-builder@...)", as in NVIDIA/gpud's and others'
    public parsers' test data)."""
    if machine == "aarch64":
        return (f"NVIDIA UNIX Open Kernel Module for aarch64  {version}  Release Build  (dvs-builder@U16-I2-C01-12-4)  "
                "Wed Jun 12 00:36:21 UTC 2024")
    return f"NVIDIA UNIX x86_64 Kernel Module  {version}  Wed Jun 12 00:36:21 UTC 2024"


def driver_load_lines(version: str, machine: str = "x86_64") -> list[str]:
    return [
        "nvidia: loading out-of-tree module taints kernel.",
        "nvidia: module verification failed: signature and/or required key missing - tainting kernel",
        "nvidia-nvlink: Nvlink Core is being initialized, major device number 234",
        f"NVRM: loading {driver_banner(version, machine)}",
        "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  "
        f"{version}  Wed Jun 12 00:01:28 UTC 2024",
        "[drm] [nvidia-drm] [GPU ID 0x00001900] Loading driver",
    ]


def xid_lines(bdf: str, code: int, pid: int = 48213) -> list[str]:
    """The NVRM line as real drivers print it (bus id without the function number)."""
    pci = bdf[: bdf.rindex(".")]
    detail = {
        79: "GPU has fallen off the bus.",
        48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
            "subpartition 0.",
        63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
        64: "Row Remapper Error: Failed to remap a row",
        13: "Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Illegal Instruction Encoding",
        31: "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f4a_00000000. "
            "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
        94: "Contained: SM (0x1). RST: No, D-RST: No",
        95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
        119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL).",
    }.get(code, "Unspecified error")
    return [f"NVRM: Xid (PCI:{pci}): {code}, pid={pid}, name=python3, {detail}"]


def limited_by_line(driver: str, bdf: str, gen: int, width: int, max_gen: int, max_width: int, port: str) -> str:
    """``pcie_print_link_status``: what the kernel prints for a link trained below its capability."""
    def bandwidth(g: int, w: int) -> float:
        encoding = 128 / 130 if g >= 3 else 0.8
        return SPEEDS[g] * encoding * w

    return (f"{driver} {bdf}: {bandwidth(gen, width):.3f} Gb/s available PCIe bandwidth, limited by "
            f"{SPEEDS[gen]:.1f} GT/s PCIe x{width} link at {port} (capable of "
            f"{bandwidth(max_gen, max_width):.3f} Gb/s with {SPEEDS[max_gen]:.1f} GT/s PCIe x{max_width} link)")


def peermem_symbol_lines() -> list[str]:
    return [
        "nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client",
        "nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -22)",
    ]


THERMAL_LINE = "CPU0: Package temperature above threshold, cpu clock throttled (total events = 1)"


def nvlink5_xid_lines(root_bdf: str, others: list[str]) -> list[str]:
    """An NVLink 5 fault as a GB200 tray logs it (NVIDIA/gpud #1174: ``149, NETIR Fatal XC0 i0 Link -1`` then
    ``145, RLW_RXPIPE Nonfatal XC0 i0 Link 13`` on another GPU 139 us later): the root's fatal line, then one
    non-fatal line on each GPU whose link the fault reached, naming no cause (the driver does not)."""
    def pci(bdf: str) -> str:
        return bdf[: bdf.rindex(".")]

    lines = [f"NVRM: Xid (PCI:{pci(root_bdf)}): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 "
             "0x00000000 0x00000000 0x00000000)"]
    for link, bdf in enumerate(others, start=13):
        lines.append(f"NVRM: Xid (PCI:{pci(bdf)}): 145, RLW_RXPIPE Nonfatal XC0 i0 Link {link} (0x0409a0c2 "
                     "0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)")
    return lines
