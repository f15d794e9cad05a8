"""One simulated host on disk: a hardware root in real Linux formats, and its device state.

The root stands where ``/`` stands on a real host: ``sys/`` (PCI devices with
binary config spaces, InfiniBand ports and counters, modules, peer-memory
registration), ``proc/`` (modules, boot id, driver version), ``etc/`` and
``var/`` (kernel log ring, dpkg status). What no file in a real ``/`` holds --
NVML's view of the GPUs, the package repository, running services -- lives in
``var/lib/provision-sim/node.json``, read and written only by the tool stand-ins.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from provision.sim.files import replace_file

if TYPE_CHECKING:  # every stand-in reads the state through here: the hardware model is the builder's alone
    from provision.hostmodel.devices import NodeHardware, PciDevice

STATE_FILE = "var/lib/provision-sim/node.json"
#: Node-state key: bridge BDF -> the ACS control value its firmware sets at every boot.
ACS_STATE_KEY = "acs_firmware"
RING_FILE = "var/log/dmesg"
#: The state's kernel lines of conditions the hardware has (a GPU that falls off the bus, a link trained short):
#: logged again at every boot, where an event's line is in the ring of the boot it happened in only.
BOOT_LINES_KEY = "boot_kernel_lines"

IB_COUNTERS = (
    "VL15_dropped", "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
    "local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets", "port_rcv_constraint_errors",
    "port_rcv_data", "port_rcv_errors", "port_rcv_packets", "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors", "port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards",
    "port_xmit_packets", "port_xmit_wait", "symbol_error", "unicast_rcv_packets", "unicast_xmit_packets",
)
IB_RATES = {"EDR": "100 Gb/sec (4X EDR)", "HDR": "200 Gb/sec (4X HDR)", "NDR": "400 Gb/sec (4X NDR)",
            "XDR": "800 Gb/sec (4X XDR)"}
#: What the HCAs' drivers load at boot, and the stack they come from before any OFED is installed.
HCA_MODULES = ("mlx5_core", "ib_core", "mlx5_ib", "ib_uverbs")
INBOX = "inbox"
#: A GB200 tray GPU's VBIOS, as the real tray prints it (../shared/fixtures/blackwell/nvidia_smi_q).
TRAY_VBIOS = "97.00.B9.00.23"
#: A tray GPU's Fabric block when its NVLink partition is set up (field guide 8.2): ``state``/``status`` as
#: printed, Health's ``summary`` and ``bandwidth``, and the Health flags that are ``True`` (none here).
FABRIC_HEALTHY: dict[str, Any] = {"state": "Completed", "status": "Success", "summary": "Healthy",
                                  "bandwidth": "Full", "flags": []}


def sysfs_path(hardware: NodeHardware, bdf: str) -> str:
    """``devices/pci0000:15/0000:15:01.0/0000:16:00.0/…/<bdf>``: the real nesting under ``/sys``, the root bus
    named with its domain (``pci0008:00`` on a GB200 tray)."""
    chain = [*reversed(hardware.ancestors(bdf)), bdf]
    return "devices/pci" + chain[0][:7] + "/" + "/".join(chain)


def write(path: Path, content: str | bytes) -> None:
    replace_file(path, content)


def link_speed_text(gen: int) -> str:
    from provision.hostmodel.pciconfig import SPEEDS

    return f"{SPEEDS[gen]:.1f} GT/s PCIe"


def materialize_shared(root: Path, hardware: NodeHardware, *, kernel: str, link_rate: str,
                       boot_lines: list[str]) -> None:
    """Everything every host of this hardware profile has in common (the template).

    Firmware on a healthy host leaves ACS off; the ``acs_enabled`` fault turns it on.
    """
    sys_root = root / "sys"
    for device in hardware.devices:
        _write_pci_device(sys_root, hardware, device)
    for hca in hardware.hcas + hardware.bridge_ports:
        device_dir = sys_root / sysfs_path(hardware, hca.bdf) / "infiniband" / hca.name
        _write_ib_device(device_dir, link_rate)
        (sys_root / "class" / "infiniband").mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(device_dir, sys_root / "class" / "infiniband"),
                   sys_root / "class" / "infiniband" / hca.name)
    for directory in ("etc/modules-load.d", "etc/modprobe.d", "etc/systemd/system", "etc/apt/preferences.d",
                      "etc/apt/apt.conf.d", "etc/apt/sources.list.d", "etc/apt/keyrings", "etc/default/grub.d",
                      "etc/security/limits.d", "etc/sysctl.d",
                      "usr/lib/modules", "usr/local/sbin", "tmp", "sys/module"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    write(root / "etc/os-release", 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
                                   'VERSION="22.04.4 LTS (Jammy Jellyfish)"\nID=ubuntu\nID_LIKE=debian\n')
    write(root / "proc/cmdline", f"BOOT_IMAGE=/vmlinuz-{kernel} {ROOT_ARGS} {BOOT_ARGS}\n")
    write(root / GRUB_DEFAULTS, GRUB_TEXT)
    write(root / RING_FILE, "".join(f"[{seconds:12.6f}] {line}\n" for seconds, line in _stamped(boot_lines)))
    write(root / "var/lib/dpkg/status", "")


#: What a stock install's GRUB gives every boot: the root filesystem, and the IOMMU on (as HGX BIOSes ship it).
ROOT_ARGS = "root=/dev/nvme0n1p2 ro"
BOOT_ARGS = "intel_iommu=on"
GRUB_DEFAULTS = "etc/default/grub"
GRUB_CONFIG = "boot/grub/grub.cfg"
GRUB_TEXT = ("# If you change this file, run 'update-grub' afterwards to update\n# /boot/grub/grub.cfg.\n"
             'GRUB_DEFAULT=0\nGRUB_TIMEOUT_STYLE=hidden\nGRUB_TIMEOUT=0\nGRUB_CMDLINE_LINUX_DEFAULT=""\n'
             f'GRUB_CMDLINE_LINUX="{BOOT_ARGS}"\n')


#: CPUs a simulated host shows in sysfs (a real HGX host has ~200; a few are enough to tune and check).
SIM_CPUS = 8


def materialize_host(root: Path, hardware: NodeHardware, *, lid_base: int, kernel: str) -> None:
    """The files that make a host itself (name, boot id, HCA identities, cards' VPD) and the runtime files a real host
    changes in place (``/proc/sys``, cpufreq), which therefore must never be shared with the template."""
    import uuid

    from provision.hostmodel import vpd

    write(root / "etc/hostname", hardware.host + "\n")
    write(root / "etc/fstab", "/dev/nvme0n1p2 / ext4 defaults 0 1\n/swap.img none swap sw 0 0\n")
    write(root / "proc/sys/kernel/random/boot_id", f"{uuid.uuid4()}\n")
    write(root / "proc/sys/kernel/osrelease", kernel + "\n")
    write(root / "proc/sys/kernel/arch", hardware.machine + "\n")  # the kernel's word for uname -m
    write(root / "proc/sys/kernel/numa_balancing", "1\n")
    write(root / "proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
                              "/swap.img                               file\t\t8388604\t\t0\t\t-2\n")
    write(root / "proc/modules", "")
    for cpu in range(SIM_CPUS):
        write(root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", "schedutil\n")
    for offset, hca in enumerate(hardware.hcas + hardware.bridge_ports):
        device_dir = root / "sys" / "class" / "infiniband" / hca.name
        raw = hca.node_guid.removeprefix("0x")
        dotted = ":".join(raw[index : index + 4] for index in range(0, 16, 4))
        for name, value in {"node_guid": dotted, "sys_image_guid": dotted,
                            "node_desc": f"{hardware.host} {hca.name}",
                            "ports/1/lid": f"0x{lid_base + offset:x}"}.items():
            write(device_dir / name, value + "\n")
    for device in hardware.devices:  # a card's product data names its serial number: this host's, never shared
        if device.vpd:  # the kernel serves it as read through the card's VPD capability
            (_, product), *fields = device.vpd
            write(root / "sys" / sysfs_path(hardware, device.bdf) / "vpd", vpd.encode(product, list(fields)))


def initial_state(hardware: NodeHardware, kernel: str) -> dict[str, Any]:
    """The device state of a freshly delivered, healthy host (NVML's view, services, disks)."""
    from dataclasses import asdict

    return {
        "host": hardware.host,
        "kernel": kernel,
        "boot_count": 1,
        "uptime_s": 3600.0,
        # the wall-clock moment the kernel ring's seconds count from (delivered booted an hour ago); it stays at
        # reboots, as the ring keeps earlier boots' lines: its seconds are one clock, the lines' times true
        "ring_epoch": time.time() - 3600.0,
        "gpus": [{**asdict(gpu), "present": True, "temperature_c": 34, "ecc_mode": "Enabled",
                  "ecc_uncorrected_volatile": 0, "ecc_corrected_volatile": 0, "retired_sbe": 0, "retired_dbe": 0,
                  "retired_pending": False, "remap_pending": False, "remap_failure": False, "remapped_correctable": 0,
                  "remapped_uncorrectable": 0, "throttle_reasons": [], "compute_scale": 1.0,
                  "vbios": "96.00.89.00.01" if hardware.platform == "hgx" else TRAY_VBIOS, "nvlink_inactive": [],
                  **({"fabric": {**FABRIC_HEALTHY, "flags": []}} if hardware.platform == "nvl72" else {})}
                 for gpu in hardware.gpus],
        "gpu_model": hardware.gpu_model,
        "nvswitches": hardware.nvswitches,
        "machine": hardware.machine,
        "platform": hardware.platform,
        "driver_loaded": None,
        "peermem_registers": True,
        "packages_available": {},
        "services": {},
        ACS_STATE_KEY: {device.bdf: 0 for device in hardware.devices if device.has_acs},
        "hcas": [asdict(hca) for hca in hardware.hcas],
        #: udev loads the HCAs' drivers at boot: the kernel's own (inbox) InfiniBand stack on a stock image.
        "modules": list(HCA_MODULES) if hardware.hcas else [],
        "ib_stack_loaded": INBOX,
        "disks": [{"filesystem": "/dev/nvme0n1p2", "mount": "/", "size_kb": 1_844_000_000, "used_kb": 212_000_000},
                  {"filesystem": "/dev/md0", "mount": "/scratch", "size_kb": 28_000_000_000,
                   "used_kb": 1_100_000_000}],
        "swap_kb": 0,
    }


def _write_pci_device(sys_root: Path, hardware: NodeHardware, device: PciDevice) -> None:
    directory = sys_root / sysfs_path(hardware, device.bdf)
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "vendor": f"0x{device.vendor:04x}\n",
        "device": f"0x{device.device:04x}\n",
        "class": f"0x{device.class_code:06x}\n",
        "numa_node": f"{device.numa_node}\n",
        "current_link_speed": link_speed_text(device.link.gen) + "\n",
        "current_link_width": f"{device.link.width}\n",
        "max_link_speed": link_speed_text(device.link.max_gen) + "\n",
        "max_link_width": f"{device.link.max_width}\n",
    }
    for name, value in files.items():
        write(directory / name, value)
    write(directory / "config", device.config(0))
    driver_dir = sys_root / "bus" / "pci" / "drivers" / device.driver
    driver_dir.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(driver_dir, directory), directory / "driver")
    bus_dir = sys_root / "bus" / "pci" / "devices"
    bus_dir.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(directory, bus_dir), bus_dir / device.bdf)


def _write_ib_device(directory: Path, link_rate: str) -> None:
    port = directory / "ports" / "1"
    files = {
        "fw_ver": "28.41.1000", "hca_type": "MT4129", "board_id": "MT_0000000838", "node_type": "1: CA",
        "ports/1/state": "4: ACTIVE", "ports/1/phys_state": "5: LinkUp", "ports/1/rate": IB_RATES[link_rate],
        "ports/1/link_layer": "InfiniBand", "ports/1/sm_lid": "0x1", "ports/1/lid_mask_count": "0",
        "ports/1/cap_mask": "0xa751e848",
    }
    for name, value in files.items():
        write(directory / name, value + "\n")
    for counter in IB_COUNTERS:
        write(port / "counters" / counter, "0\n")


def _stamped(lines: list[str]) -> list[tuple[float, str]]:
    return [(0.000001 * index if index < 40 else 1.5 + 0.37 * index, line) for index, line in enumerate(lines)]


def load_state(root: Path) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads((root / STATE_FILE).read_text()))


def save_state(root: Path, state: dict[str, Any]) -> None:
    replace_file(root / STATE_FILE, json.dumps(state, indent=1, sort_keys=True))  # never half a state


def ring_position(root: Path) -> float:
    """The stamp of the ring's last line (0 for an empty ring): where a boot begins, for what came after it."""
    ring = root / RING_FILE
    existing = ring.read_text() if ring.exists() else ""
    if not existing.strip():
        return 0.0
    tail = existing.rstrip("\n").rsplit("\n", 1)[-1]
    return float(tail[1 : tail.index("]")])


def ring_since_boot(root: Path) -> list[tuple[float, str]]:
    """The ring's lines logged since the host last booted, (stamp, message) each: what ``dmesg`` shows (the
    kernel's ring starts empty at each boot; ``boot_ring_s`` is where this boot's lines begin in the file, which
    keeps earlier boots' as ``journalctl -k`` would). Every line for a host that has not rebooted since it was
    built."""
    ring = root / RING_FILE
    since = float(load_state(root).get("boot_ring_s", -1.0))
    found = []
    for line in (ring.read_text() if ring.exists() else "").splitlines():
        if line.startswith("[") and "]" in line and float(line[1 : line.index("]")]) > since:
            found.append((float(line[1 : line.index("]")]), line[line.index("]") + 2 :]))
    return found


def lines_since_boot(root: Path) -> list[str]:
    """The messages of :func:`ring_since_boot`."""
    return [message for _, message in ring_since_boot(root)]


def append_kernel_log(root: Path, lines: list[str], *, at_s: float | None = None) -> None:
    """Add lines to the ring with monotonic timestamps after the last one: at this moment on the ring's clock
    (``ring_epoch``) unless ``at_s`` says when, so ``dmesg --time-format=iso`` shows when they were logged."""
    ring = root / RING_FILE
    existing = ring.read_text() if ring.exists() else ""
    last = 0.0
    if existing.strip():
        tail = existing.rstrip("\n").rsplit("\n", 1)[-1]
        last = float(tail[1 : tail.index("]")])
    if at_s is None and (root / STATE_FILE).exists() and (epoch := load_state(root).get("ring_epoch")) is not None:
        at_s = time.time() - float(epoch)
    stamp = max(last + 0.000001, at_s or 0.0)
    added = []
    for line in lines:
        added.append(f"[{stamp:12.6f}] {line}\n")
        stamp += 0.000113
    write(ring, existing + "".join(added))
