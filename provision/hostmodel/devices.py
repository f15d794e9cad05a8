"""What one simulated host contains, derived from the spec's hardware profile.

The layout copies a real HGX H100 server (the Dell XE9680 in the gpud fixture):
each GPU shares a PCIe Gen5 switch with its rail HCA, under a CPU root port;
the NVSwitches hang off their own root port; GPUs 0-3 sit on NUMA node 0 and 4-7
on node 1. Identities (UUIDs, serials, GUIDs) are derived from the cluster
seed and host name, so every ``sim up`` of the same spec gives the same host.

A GB200/GB300 compute tray (``platform: nvl72``) is laid out as the real tray's ``nvidia-smi -q`` shows it
(../shared/fixtures/blackwell/nvidia_smi_q, field guide 8.2): each GPU alone in a PCI domain of its own (0008,
0009, 0018, 0019), at ``01:00.0`` under a Grace root port, its PCIe link Gen4 x1 (the GPU talks to Grace over
NVLink-C2C), no PCIe switch and no NVSwitch; Module Id 2, 1, 4, 3 in PCI order; the two GPUs of a superchip share
a serial number. Its NICs sit in domains of their own too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from provision.catalog import GPU_MODELS, NVSWITCH_BRIDGE_MODELS
from provision.hostmodel import pciconfig
from provision.hostmodel.pciconfig import DOWNSTREAM, ENDPOINT, ROOT_PORT, UPSTREAM, LinkConfig


class _Gpu(Protocol):
    @property
    def count(self) -> int: ...
    @property
    def model(self) -> str: ...


class _Link(Protocol):
    @property
    def gen(self) -> int: ...
    @property
    def width(self) -> int: ...


class _Pcie(Protocol):
    @property
    def gpu(self) -> _Link: ...
    @property
    def hca(self) -> _Link: ...


class _Nvlink(Protocol):
    @property
    def nvswitch(self) -> bool: ...


class HardwareProfile(Protocol):
    """What a host's layout reads of the spec's hardware profile (``provision.spec.model.HardwareProfile`` is one):
    named here so the spec, which derives hosts from this module, is not imported back by it."""

    @property
    def gpu(self) -> _Gpu: ...
    @property
    def pcie(self) -> _Pcie: ...
    @property
    def nvlink(self) -> _Nvlink: ...
    @property
    def rails(self) -> Mapping[str, int]: ...
    @property
    def platform(self) -> str: ...
    @property
    def architecture(self) -> str: ...

NVIDIA, MELLANOX, BROADCOM, INTEL = 0x10DE, 0x15B3, 0x1000, 0x8086
#: Bus numbers of the eight GPU/HCA PCIe switch complexes (as on the XE9680).
COMPLEX_BUSES = (0x15, 0x37, 0x48, 0x59, 0x97, 0xB7, 0xC7, 0xD7, 0x25, 0x65, 0x75, 0x85, 0xA5, 0xE5, 0xF0, 0x0A)
NVSWITCH_BUS = 0x04
HCA_DEVICE_ID = 0x1021  # ConnectX-7, shown by lspci as "MT2910 Family [ConnectX-7]"
NVSWITCH_DEVICE_ID = 0x22A3
#: A GB200 tray's GPUs: the PCI domain of each, in PCI order, and the Module Id its Platform Info prints (the real
#: tray: domains 0008/0009/0018/0019 -> modules 2/1/4/3, not in PCI order). The first two are one Grace's (NUMA 0).
TRAY_GPU_DOMAINS = ((0x0008, 2), (0x0009, 1), (0x0018, 4), (0x0019, 3))
#: The tray's NICs' PCI domains, one per NIC (no public listing of a tray's NIC addresses was at hand: the
#: simulator's own choice, read by nothing that judges a node; what matters is that they are not domain 0000 only).
TRAY_NIC_DOMAINS = (0x0000, 0x0002, 0x0010, 0x0012, 0x0001, 0x0003, 0x0011, 0x0013)
#: The Grace root ports' device id: no check reads a root port's id; this one is the simulator's placeholder.
GRACE_ROOT_PORT_ID = 0x22B2


@dataclass(frozen=True)
class PciDevice:
    bdf: str
    kind: str  # root_port | switch_up | switch_down | gpu | hca | nvswitch
    vendor: int
    device: int
    class_code: int
    numa_node: int
    parent: str | None
    link: LinkConfig
    has_acs: bool
    driver: str
    secondary_bus: int = 0
    port_number: int = 0
    #: The card's Vital Product Data: its product name, then its read-only fields (keyword, value); empty for a
    #: device without (``vpd.encode`` writes them as the firmware would, sysfs ``vpd``).
    vpd: tuple[tuple[str, str], ...] = ()

    @property
    def is_bridge(self) -> bool:
        return self.kind in ("root_port", "switch_up", "switch_down")

    @property
    def port_type(self) -> int:
        return {"root_port": ROOT_PORT, "switch_up": UPSTREAM, "switch_down": DOWNSTREAM}.get(self.kind, ENDPOINT)

    def config(self, acs_control: int) -> bytes:
        return pciconfig.build(
            vendor=self.vendor, device=self.device, class_code=self.class_code, bridge=self.is_bridge,
            port_type=self.port_type, link=self.link, port_number=self.port_number,
            acs_control=acs_control if self.has_acs else None, primary_bus=int(self.bdf[5:7], 16),
            secondary_bus=self.secondary_bus, subordinate_bus=self.secondary_bus, vpd=bool(self.vpd),
        )


@dataclass(frozen=True)
class Gpu:
    index: int
    bdf: str
    uuid: str
    serial: str
    numa_node: int
    #: Platform Info's Module Id (a tray's GPUs: 1-4, not in PCI order); 0 where the layout does not model it.
    module_id: int = 0


@dataclass(frozen=True)
class Hca:
    name: str
    bdf: str
    gpu: int
    node_guid: str
    serial: str
    numa_node: int


@dataclass
class NodeHardware:
    host: str
    gpu_model: str
    gpus: list[Gpu] = field(default_factory=list)
    hcas: list[Hca] = field(default_factory=list)
    devices: list[PciDevice] = field(default_factory=list)
    nvswitches: int = 0
    #: ``uname -m``: what the host's kernel says it runs on.
    machine: str = "x86_64"
    platform: str = "hgx"
    #: An HGX B200/B300 baseboard's ConnectX-7 bridge to its NVSwitches (``bridge_ports``): four functions in
    #: ``ibstat`` that are no rail and no cable of the fabric.
    bridge_ports: list[Hca] = field(default_factory=list)

    def device(self, bdf: str) -> PciDevice:
        return next(device for device in self.devices if device.bdf == bdf)

    def ancestors(self, bdf: str) -> list[str]:
        """Upstream bridges of ``bdf``, nearest first (what ``readlink -f`` of its sysfs path shows)."""
        chain = []
        parent = self.device(bdf).parent
        while parent is not None:
            chain.append(parent)
            parent = self.device(parent).parent
        return chain


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("\x1f".join(str(part) for part in parts).encode()).digest()


def hca_guid(seed: int, host: str, hca: str) -> str:
    """The HCA's node GUID (16 hex digits): the same in the host's sysfs and in the fabric dump."""
    return _digest(seed, host, "hca", hca)[:8].hex()


def _gpu_identity(seed: int, host: str, index: int) -> tuple[str, str]:
    """A GPU's UUID and serial number, the same at every ``sim up`` of the spec."""
    digest = _digest(seed, host, "gpu", index)
    uuid = digest[:16].hex()
    return (f"GPU-{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}",
            str(1650000000000 + int.from_bytes(digest[16:20], "big") % 10**9))


def _hca(seed: int, host: str, name: str, bdf: str, gpu: int, numa: int) -> Hca:
    digest = _digest(seed, host, "hca", name)
    return Hca(name, bdf, gpu, "0x" + hca_guid(seed, host, name), "MT23" + digest[8:12].hex().upper()[:8], numa)


#: A rail's ConnectX-7 card as ``lspci -vv`` prints its VPD (the fields and their order as a CX7 HHHL card's in a
#: public capture: linux-pci's VPD thread and NVIDIA/DOCA issue outputs; the part is the single-port NDR OSFP card).
RAIL_CARD = ("NVIDIA ConnectX-7 HHHL adapter Card, 400GbE / NDR IB (default mode), Single-port OSFP, PCIe 5.0 x16, "
             "Crypto Disabled, Secure Boot Enabled", "MCX75310AAS-NEAT", "CX75310A")
#: The HGX B200/B300 baseboard's ConnectX-7 bridge. Its four functions' VPD carries ``SMDL=SW_MNG``, the field by
#: which NVIDIA's fabric manager start script tells an NVSwitch management function (LPF) from a NIC (the FM user
#: guide, as siderolabs/extensions' nvidia-fabricmanager-wrapper replicates it: it searches the raw VPD bytes, so
#: which keyword holds it is ours to choose; here the ``VA`` list). Four LPFs named after the rails, mlx5_8-11 on
#: an 8-rail host, as siderolabs/extensions#893 shows an HGX B200's.
BRIDGE_CARD = ("NVIDIA ConnectX-7 NVSwitch bridge, HGX baseboard", "699-2G1xx-0000-000", "CX7BRIDGE")
BRIDGE_BUS = 0x0C
BRIDGE_FUNCTIONS = 4


def card_vpd(card: tuple[str, str, str], serial: str, function: int, *, management: bool = False,
             ) -> tuple[tuple[str, str], ...]:
    """A ConnectX card's VPD fields (``PciDevice.vpd``): the product name first, then the read-only fields."""
    product, part, model = card
    vendor_list = f"MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL={model}" + (":SMDL=SW_MNG" if management else "")
    return (("", product), ("PN", part), ("EC", "A7"), ("V2", part), ("SN", serial),
            ("V3", _digest(serial).hex()[:32]), ("VA", vendor_list), ("V0", "PCIeGen5 x16"),
            ("VU", f"{serial}MLNXS0D0F{function}"))


def _bridge(hardware: NodeHardware, seed: int, first_index: int) -> None:
    """The NVSwitch bridge of an HGX Blackwell baseboard (``BRIDGE_CARD``): a root port and the card's four
    functions, each an ``mlx5_*`` device with a port of its own (``NodeHardware.bridge_ports``)."""
    root = f"0000:{BRIDGE_BUS:02x}:01.0"
    hardware.devices.append(PciDevice(root, "root_port", INTEL, 0x352A, 0x060400, 0, None, LinkConfig(5, 16, 5, 16),
                                      True, "pcieport", secondary_bus=BRIDGE_BUS + 1, port_number=1))
    serial = "MT24" + _digest(seed, hardware.host, "bridge")[:4].hex().upper()
    for function in range(BRIDGE_FUNCTIONS):
        bdf = f"0000:{BRIDGE_BUS + 1:02x}:00.{function}"
        hardware.devices.append(PciDevice(bdf, "hca", MELLANOX, HCA_DEVICE_ID, 0x020700, 0, root,
                                          LinkConfig(5, 16, 5, 16), False, "mlx5_core",
                                          vpd=card_vpd(BRIDGE_CARD, serial, function, management=True)))
        hardware.bridge_ports.append(_hca(seed, hardware.host, f"mlx5_{first_index + function}", bdf, -1, 0))


def describe_tray(host: str, profile: HardwareProfile, seed: int) -> NodeHardware:
    """A GB200/GB300 compute tray (module docstring): up to four GPUs, each in its PCI domain behind a Grace root
    port at Gen4 x1, NICs in domains of their own, two Graces (NUMA 0 and 1), aarch64 unless the profile says
    otherwise. Refused past four GPUs or eight NICs: no tray has more."""
    model = GPU_MODELS[profile.gpu.model]
    if profile.gpu.count > len(TRAY_GPU_DOMAINS) or len(profile.rails) > len(TRAY_NIC_DOMAINS):
        raise ValueError(f"{host}: a compute tray has at most {len(TRAY_GPU_DOMAINS)} GPUs and "
                         f"{len(TRAY_NIC_DOMAINS)} NICs")
    hardware = NodeHardware(host, model.name, machine=profile.architecture, platform="nvl72")
    c2c = LinkConfig(4, 16, 4, 1)  # Gen4 x1 of a possible Gen4 x16, as the real tray's GPU Link Info reads
    serial = ""
    for index in range(profile.gpu.count):
        domain, module = TRAY_GPU_DOMAINS[index]
        numa = index // 2
        root, gpu_bdf = f"{domain:04x}:00:00.0", f"{domain:04x}:01:00.0"
        hardware.devices += [
            PciDevice(root, "root_port", NVIDIA, GRACE_ROOT_PORT_ID, 0x060400, numa, None, LinkConfig(4, 16, 4, 16),
                      True, "pcieport", secondary_bus=1),
            PciDevice(gpu_bdf, "gpu", NVIDIA, int(model.pci_device_id, 16), 0x030200, numa, root, c2c, False,
                      "nvidia"),
        ]
        uuid, own_serial = _gpu_identity(seed, host, index)
        serial = own_serial if index % 2 == 0 else serial  # a superchip's two GPUs share one serial number
        hardware.gpus.append(Gpu(index, gpu_bdf, uuid, serial, numa, module))
    for position, (name, gpu) in enumerate(sorted(profile.rails.items(), key=lambda item: item[1])):
        domain, numa = TRAY_NIC_DOMAINS[position], min(1, gpu // 2)
        root, hca_bdf = f"{domain:04x}:00:00.0", f"{domain:04x}:01:00.0"
        hca = _hca(seed, host, name, hca_bdf, gpu, numa)
        hardware.devices += [
            PciDevice(root, "root_port", NVIDIA, GRACE_ROOT_PORT_ID, 0x060400, numa, None, LinkConfig(5, 16, 5, 16),
                      True, "pcieport", secondary_bus=1),
            PciDevice(hca_bdf, "hca", MELLANOX, HCA_DEVICE_ID, 0x020700, numa, root,
                      LinkConfig(profile.pcie.hca.gen, profile.pcie.hca.width, profile.pcie.hca.gen,
                                 profile.pcie.hca.width), False, "mlx5_core",
                      vpd=card_vpd(RAIL_CARD, hca.serial, 0)),
        ]
        hardware.hcas.append(hca)
    hardware.hcas.sort(key=lambda hca: int(hca.name.split("_")[1]))
    return hardware


def describe(host: str, profile: HardwareProfile, seed: int) -> NodeHardware:
    if profile.platform == "nvl72":
        return describe_tray(host, profile, seed)
    model = GPU_MODELS[profile.gpu.model]
    count = profile.gpu.count
    hardware = NodeHardware(host, model.name)
    hca_of_gpu = {gpu: name for name, gpu in profile.rails.items()}
    gpu_gen = 5 if profile.pcie.gpu.gen >= 5 else profile.pcie.gpu.gen
    hca_gen = profile.pcie.hca.gen
    for index in range(count):
        bus = COMPLEX_BUSES[index]
        numa = 0 if index < max(1, count // 2) else 1
        root, upstream = f"0000:{bus:02x}:01.0", f"0000:{bus + 1:02x}:00.0"
        gpu_port, hca_port = f"0000:{bus + 2:02x}:00.0", f"0000:{bus + 2:02x}:01.0"
        switch_link = LinkConfig(5, 16, 5, 16)
        hardware.devices += [
            PciDevice(root, "root_port", INTEL, 0x352A, 0x060400, numa, None, switch_link, True, "pcieport",
                      secondary_bus=bus + 1, port_number=1),
            PciDevice(upstream, "switch_up", BROADCOM, 0xC030, 0x060400, numa, root, switch_link, False, "pcieport",
                      secondary_bus=bus + 2, port_number=200),
            PciDevice(gpu_port, "switch_down", BROADCOM, 0xC030, 0x060400, numa, upstream,
                      LinkConfig(5, profile.pcie.gpu.width, 5, profile.pcie.gpu.width), True, "pcieport",
                      secondary_bus=bus + 3, port_number=0),
        ]
        gpu_bdf = f"0000:{bus + 3:02x}:00.0"
        gpu_link = LinkConfig(gpu_gen, profile.pcie.gpu.width, gpu_gen, profile.pcie.gpu.width)
        hardware.devices.append(PciDevice(gpu_bdf, "gpu", NVIDIA, int(model.pci_device_id, 16), 0x030200, numa,
                                          gpu_port, gpu_link, False, "nvidia"))
        hardware.gpus.append(Gpu(index, gpu_bdf, *_gpu_identity(seed, host, index), numa))
        if index in hca_of_gpu:
            hardware.devices.append(PciDevice(hca_port, "switch_down", BROADCOM, 0xC030, 0x060400, numa, upstream,
                                              LinkConfig(5, profile.pcie.hca.width, 5, profile.pcie.hca.width), True,
                                              "pcieport", secondary_bus=bus + 4, port_number=1))
            hca_bdf = f"0000:{bus + 4:02x}:00.0"
            hca_link = LinkConfig(hca_gen, profile.pcie.hca.width, hca_gen, profile.pcie.hca.width)
            hca = _hca(seed, host, hca_of_gpu[index], hca_bdf, index, numa)
            hardware.devices.append(PciDevice(hca_bdf, "hca", MELLANOX, HCA_DEVICE_ID, 0x020700, numa, hca_port,
                                              hca_link, False, "mlx5_core", vpd=card_vpd(RAIL_CARD, hca.serial, 0)))
            hardware.hcas.append(hca)
    hardware.hcas.sort(key=lambda hca: int(hca.name.split("_")[1]))
    if profile.gpu.model in NVSWITCH_BRIDGE_MODELS and profile.nvlink.nvswitch:
        _bridge(hardware, seed, 1 + max((int(name.split("_")[1]) for name in profile.rails), default=-1))
    if profile.nvlink.nvswitch:
        hardware.nvswitches = 4 if model.nvlink_links >= 18 else 6
        root = f"0000:{NVSWITCH_BUS:02x}:01.0"
        hardware.devices.append(PciDevice(root, "root_port", INTEL, 0x352A, 0x060400, 0, None,
                                          LinkConfig(4, 4, 4, 4), True, "pcieport", secondary_bus=NVSWITCH_BUS + 1))
        for number in range(hardware.nvswitches):
            hardware.devices.append(PciDevice(f"0000:{NVSWITCH_BUS + 1:02x}:{number:02x}.0", "nvswitch", NVIDIA,
                                              NVSWITCH_DEVICE_ID, 0x068000, 0, root, LinkConfig(4, 2, 4, 2), False,
                                              "nvidia-nvswitch"))
    return hardware
