"""Preflight: the node checks, each a command, a pure parser and an evaluation against the spec.

``PROBES``, ``FILES`` and ``LINKS`` say which facts are read from a host (commands and files, all read-only; each
fact's command and parser live together in :mod:`provision.facts`); :func:`collect` gathers them in
parallel over the host's one session; :func:`evaluate` turns the gathered text into one :class:`CheckResult`
per check. A probe that fails makes the checks that need it ``unknown``, never ``ok``.

What a node must be arrives as :class:`Expectations`, made from the spec on the controller
(:mod:`provision.checks.spec_expectations`) or read from the node's check file: this module runs on the node
too, from the burn-in's runtime (standard library only, Python 3.10).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

from provision.checks import kernel_allowlist, nvlink_domain
from provision.checks.outcome import CheckResult, Outcome
from provision.facts import dcgm, imex, infiniband, kernel_log, lspci, nvidia_smi, packages, system
from provision.facts.fact import Fact, Parsed
from provision.facts.session import CommandResult, HostSession, ReadFailed

#: What preflight reads from a host; each fact's command (or file) and parser live in its own module.
PROBES: tuple[Fact[Any], ...] = (nvidia_smi.GPUS, nvidia_smi.REMAPPED_ROWS, nvidia_smi.RETIRED_PAGES, nvidia_smi.NVLINK,
                            nvidia_smi.NVLINK_ERRORS, nvidia_smi.TOPOLOGY, kernel_log.KERNEL_LOG, lspci.LSPCI,
                            infiniband.IBSTAT, system.DF, packages.FABRIC_MANAGER, dcgm.VERSION, system.MACHINE)
FILES: tuple[Fact[Any], ...] = (system.SWAPS, packages.PEERMEM_REGISTRATION, packages.MODULES, packages.DPKG_STATUS,
                                system.CMDLINE)
LINKS: tuple[Fact[Any], ...] = (lspci.PCI_DEVICES, infiniband.INFINIBAND)
#: What a GB200/GB300 compute tray is read for besides (field guide 8.2-8.3): each GPU's Fabric block and Platform
#: Info, IMEX's status and its view of the domain, the peers it is configured with, and its channel device.
TRAY_PROBES: tuple[Fact[Any], ...] = (nvidia_smi.GPU_FABRIC, imex.IMEX_STATUS, imex.IMEX_NODES)
TRAY_FILES: tuple[Fact[Any], ...] = (imex.IMEX_PEERS,)
TRAY_LINKS: tuple[Fact[Any], ...] = (imex.IMEX_CHANNELS,)
GPU_FIELDS, REMAP_FIELDS = nvidia_smi.GPU_FIELDS, nvidia_smi.REMAP_FIELDS

#: Imbue's hardware set (field guide 3.2): these Xids fail a node; any other Xid is a warning.
HARDWARE_XIDS = frozenset({48, *range(56, 59), *range(62, 65), *range(68, 78), *range(79, 87), 88, 89, 92,
                           *range(94, 106), *range(110, 121), *range(122, 126)})
XID_REMEDIATION = {
    48: "double-bit ECC: reset the GPU; RMA if it repeats",
    63: "row remap recorded: reset the GPU to activate it, then re-test",
    64: "row remap failed: RMA the GPU",
    74: "NVLink error: read nvidia-smi nvlink -e, reseat the baseboard if it repeats",
    79: "GPU fell off the bus: reboot; reseat or RMA if it repeats",
    94: "contained ECC error: reset the GPU",
    95: "uncontained ECC error: reset the GPU",
    119: "GSP timeout: reset the GPU",
    120: "GSP error: reset the GPU",
}
#: Clock-event bits that mean the GPU is being slowed by heat or power hardware, not by idling or a power cap.
THROTTLE_BITS = {0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                 0x80: "hw_power_brake_slowdown"}
GT_PER_GEN = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


@dataclass(frozen=True)
class Expectations:
    """What the spec says this node is; the checks compare against nothing else."""

    gpu_count: int
    gpu_model: str
    driver: str
    gpu_pcie: tuple[int, int]  # gen, width
    hca_pcie: tuple[int, int]
    rail_hcas: tuple[str, ...]
    link_gbps: int
    nvlink_links: int  # per GPU; 0 without NVLink
    gpudirect: str
    acs_disable: bool
    acs_scope: str
    thresholds: dict[str, float]
    uuid_blocklist: frozenset[str] = frozenset()
    allowlist: tuple[re.Pattern[str], ...] = ()
    rails: tuple[tuple[str, int], ...] = ()  # (HCA, the GPU index the spec pairs it with)
    nvswitch: bool = False  # an NVSwitch board: CUDA needs nvidia-fabricmanager running
    iommu: str = "unchanged"  # host.iommu: ``passthrough`` means the kernel must have booted with iommu=pt
    #: DCGM is expected (the dcgm stage runs its diagnostic, or software.dcgm pins it): the oldest DCGM that knows
    #: the GPU (empty: not expected), and software.dcgm's pin (empty: the image's DCGM, any version from that one).
    dcgm_min: str = ""
    dcgm_version: str = ""
    arch: str = "x86_64"  # the profile's architecture: what the runtime's wheels were chosen for
    #: ``nvl72``: a GB200/GB300 compute tray, read for its NVLink domain as well (``TRAY_PROBES``), its GPUs' PCIe
    #: not judged (NVLink-C2C: Gen4 x1 is healthy) and its rails paired with GPUs by NUMA node.
    platform: str = "hgx"
    tray_index: int = 0  # where the spec puts the tray in its domain (Platform Info's Tray Index, 1-based)
    chassis_serial: str = ""  # the rack's serial where the spec names it (nvlink_domains[].chassis_serial)
    imex_peers: tuple[str, ...] = ()  # the domain's trays' addresses, in the spec's order (nodes_config.cfg)
    #: An HGX B200/B300 baseboard: its NVSwitches are reached through a ConnectX bridge whose ports are no rails.
    nvswitch_bridge: bool = False


@dataclass
class Gathered:
    """Raw text read from one host; ``problems`` says which probes could not be read and why."""

    outputs: dict[str, str] = field(default_factory=dict)
    files: dict[str, str | None] = field(default_factory=dict)
    links: dict[str, dict[str, str]] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    #: Probes whose command the host does not have (the shell's exit status 127): a fact about the host.
    missing: set[str] = field(default_factory=set)
    parsed: dict[str, Any] = field(default_factory=dict, repr=False)  # each output parsed once, for every check
    #: The exit status of each probe that ran to an end (not lost, timed out or refused): a non-zero one is the
    #: host's own answer (an IMEX daemon that does not serve), where a lost one says nothing about the host.
    exits: dict[str, int] = field(default_factory=dict)
    #: Judge only the kernel records stamped after this (seconds since boot): the re-validation after a GPU
    #: reset, whose earlier records (the Xid that began the episode) were judged already and stay in the ring.
    kernel_after_s: float | None = None


COMMAND_NOT_FOUND = 127  # the shell's exit status for a command it cannot find

#: Probes run at once over a host's one connection: sshd refuses channels past its MaxSessions (10 by default) with
#: "Connect failed" (and counts a finished channel until it has closed it), and a probe refused so would be unknown
#: for a reason that is ours, not the node's.
CHANNELS_AT_ONCE = 4


def collect(session: HostSession, timeout_s: float, *, platform: str = "hgx") -> Gathered:
    """Every probe of a host at once, over its one session (a compute tray's own as well)."""
    tray = platform == "nvl72"
    gathered = Gathered()

    def command(probe: Fact[Any]) -> tuple[str, CommandResult]:
        return probe.name, session.run(probe.argv, timeout_s, become=probe.needs_root)

    asked = session.run(nvidia_smi.GPU_QUERY_FIELDS.argv, timeout_s)  # the names this driver gives its fields
    try:
        accepted = nvidia_smi.parse_help_query(asked.stdout) if asked.ok else None
    except ValueError:
        accepted = None
    probes = [nvidia_smi.gpus_command(accepted) if probe is nvidia_smi.GPUS else probe
              for probe in (*PROBES, *(TRAY_PROBES if tray else ()))]
    with ThreadPoolExecutor(max_workers=min(len(probes), CHANNELS_AT_ONCE)) as pool:
        results = list(pool.map(command, probes))
        for probe in (*FILES, *(TRAY_FILES if tray else ())):  # unreadable: a problem of its probe, never absent
            try:
                gathered.files[probe.name] = session.read_text(probe.path)
            except ReadFailed as failed:
                gathered.problems[probe.name] = str(failed)
        for probe in (*LINKS, *(TRAY_LINKS if tray else ())):
            try:
                gathered.links[probe.name] = session.resolve_links(probe.path)
            except ReadFailed as failed:
                gathered.problems[probe.name] = str(failed)
    for name, result in results:
        if not (result.lost or result.timed_out or result.refused_root):
            gathered.exits[name] = result.rc
        if result.ok:
            gathered.outputs[name] = result.stdout
        else:
            gathered.problems[name] = result.problem()
            if result.rc == COMMAND_NOT_FOUND and not (result.lost or result.timed_out or result.refused_root):
                gathered.missing.add(name)
    return gathered


class Unknown(Exception):
    """A check's input is missing: the check ends ``unknown`` with this message."""


Evaluator = Callable[[Gathered, Expectations], list[CheckResult]]


def _need(gathered: Gathered, *names: str) -> list[str]:
    for name in names:
        if name in gathered.problems:
            raise Unknown(gathered.problems[name])
    return [gathered.outputs[name] for name in names]


def _parse(gathered: Gathered, probe: Fact[Parsed]) -> Parsed:
    """The probe's parser over its output, once per host however many checks read it."""
    if probe.name not in gathered.parsed:
        (text,) = _need(gathered, probe.name)
        if text and not text.endswith("\n"):  # every tool read here ends its output with a newline
            raise Unknown(f"{' '.join(probe.argv)[:60]} printed a last line with no end: cut short "
                          f"({text.splitlines()[-1][-80:]!r})")
        gathered.parsed[probe.name] = probe.parse(text)
    return cast(Parsed, gathered.parsed[probe.name])


def _kernel_lines(gathered: Gathered) -> list[kernel_log.KernelLine]:
    return _parse(gathered, kernel_log.KERNEL_LOG)


def _pci_devices(gathered: Gathered) -> dict[str, lspci.PciDeviceFacts]:
    devices = {device.address: device for device in _parse(gathered, lspci.LSPCI)}
    denied = [address for address, device in devices.items() if device.access_denied]
    if denied:  # link widths and ACS bits were never read: the checks that need them cannot say "ok"
        raise Unknown(f"needs root: lspci -vvv printed 'Capabilities: <access denied>' for {len(denied)} "
                      f"device(s), e.g. {denied[0]}")
    return devices


def _result(check: str, failures: list[str], ok: str, remediation: str, *, outcome: Outcome = Outcome.FAILED,
            evidence: list[str] | None = None) -> CheckResult:
    if not failures:
        return CheckResult(check, Outcome.OK, ok)
    message = failures[0] if len(failures) == 1 else f"{failures[0]} (and {len(failures) - 1} more)"
    return CheckResult(check, outcome, message, remediation, evidence if evidence is not None else failures)


def _gpus(gathered: Gathered) -> list[nvidia_smi.Gpu]:
    return _parse(gathered, nvidia_smi.GPUS)


def check_gpu_count(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    gpus = _gpus(gathered)
    failures = []
    if len(gpus) != expect.gpu_count:
        failures.append(f"{len(gpus)} GPUs visible, the spec says {expect.gpu_count}")
    failures += [f"GPU {gpu.index} ({gpu.bus_id}) has blocklisted UUID {gpu.uuid}" for gpu in gpus
                 if gpu.uuid.upper() in expect.uuid_blocklist]
    result = _result("gpu_count", failures, f"{len(gpus)} GPUs", "reseat the missing GPU or RMA the board; "
                     "a blocklisted GPU must be replaced")
    result.evidence += [f"{gpu.index} {gpu.bus_id} {gpu.uuid} {gpu.serial}" for gpu in gpus]
    return [result]


def check_driver(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    gpus = _gpus(gathered)
    failures = [f"GPU {gpu.index} runs driver {gpu.driver_version}, the spec pins {expect.driver}"
                for gpu in gpus if gpu.driver_version != expect.driver]
    results = [_result("driver", failures[:1], f"driver {expect.driver}", "re-run provision apply (gpu_driver)")]
    vbios = sorted({gpu.vbios_version for gpu in gpus})
    if len(vbios) > 1:
        results.append(CheckResult("vbios", Outcome.WARNING, f"GPUs carry {len(vbios)} VBIOS versions: "
                                   f"{', '.join(vbios)}", "flash every GPU to one VBIOS",
                                   [f"GPU {gpu.index}: {gpu.vbios_version}" for gpu in gpus]))
    else:
        results.append(CheckResult("vbios", Outcome.OK, f"one VBIOS {vbios[0] if vbios else '-'}"))
    return results


def check_ecc(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    gpus = _gpus(gathered)
    failures = []
    for gpu in gpus:
        if gpu.ecc_mode != "Enabled" or gpu.ecc_mode_pending != "Enabled":
            failures.append(f"GPU {gpu.index}: ECC {gpu.ecc_mode} (pending {gpu.ecc_mode_pending})")
        if _int(gpu.ecc_uncorrected_volatile) > 0:
            failures.append(f"GPU {gpu.index}: {gpu.ecc_uncorrected_volatile} uncorrectable "
                            "volatile ECC errors")
    result = _result("ecc", failures, "ECC on, no uncorrectable errors",
                     "nvidia-smi -e 1 and reboot if ECC is off; reset the GPU, RMA if errors return")
    if result.outcome is Outcome.OK:
        limit = expect.thresholds["corrected_ecc"]
        noisy = [f"GPU {gpu.index}: {gpu.ecc_corrected_volatile} corrected ECC errors"
                 for gpu in gpus if _int(gpu.ecc_corrected_volatile) > limit]
        result = _result("ecc", noisy, result.message, "watch the corrected-error rate; RMA if it keeps rising",
                         outcome=Outcome.WARNING)
    return [result]


def check_row_remap(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    remapped, retired = _parse(gathered, nvidia_smi.REMAPPED_ROWS), _parse(gathered, nvidia_smi.RETIRED_PAGES)
    failures = []
    for row in remapped:
        if row.failure in ("1", "Yes"):
            failures.append(f"GPU {row.bus_id}: row remapping failed (RMA)")
        if row.pending in ("1", "Yes"):
            failures.append(f"GPU {row.bus_id}: a row remap is pending")
    for bus_id, tree in retired.gpus.items():
        pages = tree.get("Retired Pages")  # a one-line "N/A" on a GPU without page retirement
        if isinstance(pages, dict) and "Yes" in (pages.get("Pending Page Blacklist"), pages.get("Pending")):
            failures.append(f"GPU {bus_id}: a page retirement is pending")
    return [_result("row_remap", failures, "no pending remaps or retirements",
                    "reset the GPU (or reboot) to apply the remap, then re-test; a failure or a repeat is an RMA")]


def _kernel_lines_read(gathered: Gathered) -> list[kernel_log.KernelLine]:
    """The kernel log, which a running host never has empty (the boot alone writes hundreds of lines): an empty
    one was not read, and says nothing about Xids."""
    lines = _kernel_lines(gathered)
    if not lines:
        raise Unknown("the kernel log came back empty (a cleared ring buffer, or the read lost its output)")
    bare = next((line.message for line in lines if line.seconds is None and line.stamp is None), None)
    if bare is not None:  # dmesg stamps every record: a line without one is a format we do not know, or cut
        raise Unknown(f"a kernel log line without the time dmesg prints: {bare[:120]!r}")
    after = gathered.kernel_after_s
    if after is None:
        return lines
    if all(line.seconds is None for line in lines):  # wall-clock stamps only: "after" cannot be told, all judged
        return lines
    return [line for line in lines if line.seconds is not None and line.seconds > after]


def _nvlink5(xid: kernel_log.Xid) -> bool:
    """An NVLink 5 Xid (144-150), or one whose line says an NVLink 5 Xid caused it: ``nvlink5_xid``'s to judge."""
    read = nvlink_domain.read_nvlink5(xid)
    return xid.code in nvlink_domain.NVLINK5_XIDS or read.caused_by in nvlink_domain.NVLINK5_XIDS


def check_nvlink5_xid(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    """Xids 144-150 (NVLink 5: Blackwell's HGX boards and NVL72 trays) by what their lines say, fatal sub-codes
    failing the GPU that logged them and consequences blamed on their root (``nvlink_domain.judge_nvlink5_xids``).
    The generic ``xid`` check, which knows none of these codes, leaves them here."""
    return [nvlink_domain.judge_nvlink5_xids(kernel_log.find_xids(_kernel_lines_read(gathered)))]


def check_xid(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    lines = _kernel_lines_read(gathered)
    every = kernel_log.find_xids(lines)
    xids = [xid for xid in every if not _nvlink5(xid)]
    lost = kernel_log.find_lost_gpus(lines)
    hardware = [xid for xid in xids if xid.code in HARDWARE_XIDS]
    chosen, outcome = (hardware, Outcome.FAILED) if hardware or lost else (xids, Outcome.WARNING)
    failures = [f"Xid {xid.code} on GPU {xid.pci}: {xid.detail}" for xid in chosen]
    failures += [f"GPU {gpu.pci} {gpu.what}: {gpu.line}" for gpu in lost  # unless its Xid said so already
                 if not any(xid.code == 79 and gpu.pci.startswith(xid.pci) for xid in chosen)]
    remediation = {XID_REMEDIATION.get(xid.code, "see NVIDIA's Xid catalog") for xid in chosen}
    if lost:  # the hardware class of Xid 79, whether or not the driver printed one
        remediation.add(XID_REMEDIATION[79])
    clean = "no Xid in the kernel log" if len(xids) == len(every) else \
        f"no Xid but {len(every) - len(xids)} NVLink 5 one(s), nvlink5_xid's to judge"
    return [_result("xid", failures, clean, "; ".join(sorted(remediation)), outcome=outcome)]


def _owned_elsewhere(message: str) -> bool:
    """Lines another check judges (Xids and lost GPUs, PCIe 'limited by') are not judged twice."""
    return "NVRM: Xid" in message or "limited by" in message or kernel_log.about_a_lost_gpu(message)


def check_kernel_log(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    messages = [line.message for line in _kernel_lines_read(gathered) if not _owned_elsewhere(line.message)]
    left = kernel_allowlist.unexpected(messages, list(expect.allowlist))
    result = _result("kernel_log", [f"{len(left)} kernel message(s) outside the allowlist: {left[0]}"] if left else [],
                     f"{len(messages)} kernel messages, all allowlisted",
                     "investigate the lines; if they are harmless on this hardware, add them to the allowlist",
                     outcome=Outcome.WARNING, evidence=left[:5])
    return [result]


def _links(gathered: Gathered, name: str) -> dict[str, str]:
    """A folder's links as read; a folder that could not be read, or whose targets are not paths, makes the check
    unknown, never empty."""
    if name in gathered.problems:
        raise Unknown(gathered.problems[name])
    links = gathered.links.get(name) or {}
    for entry, target in links.items():  # as sysfs lists them: absolute, or relative to the folder
        if not target.startswith(("/", "../")) or any(character.isspace() for character in target):
            raise Unknown(f"{name}: {entry} leads to {target[:80]!r}, not a path")
    return links


def _hca_addresses(gathered: Gathered) -> dict[str, str]:
    """mlx5_N -> PCI address, from where the class link points (``.../<bdf>/infiniband/mlx5_N``)."""
    addresses = {}
    for name, target in _links(gathered, "infiniband").items():
        parts = target.rstrip("/").split("/")
        if len(parts) >= 3 and parts[-2] == "infiniband":
            addresses[name] = parts[-3]
    return addresses


def check_pcie_link(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    devices, lines = _pci_devices(gathered), _kernel_lines_read(gathered)
    gpus = [device for device in devices.values() if device.kind == "3D controller" and "NVIDIA" in device.description]
    hca_addresses = _hca_addresses(gathered)
    failures = []
    c2c = expect.platform == "nvl72"  # a tray's GPU talks to Grace over NVLink-C2C: its PCIe link says nothing
    for device in [] if c2c else gpus:
        # GPUs lower their link speed when idle: judge width here, speed from nvidia-smi's trained maximum
        if device.link_status and device.link_status.width < expect.gpu_pcie[1]:
            failures.append(f"GPU {device.address} link x{device.link_status.width}, the spec says "
                            f"x{expect.gpu_pcie[1]}")
    if "gpus" not in gathered.problems and not c2c:
        for gpu in _gpus(gathered):
            if _int(gpu.pcie_gen_max) < expect.gpu_pcie[0]:
                failures.append(f"GPU {gpu.index} ({gpu.bus_id}) can train only to Gen"
                                f"{gpu.pcie_gen_max}, the spec says Gen{expect.gpu_pcie[0]}")
    unmeasured = []
    for hca in expect.rail_hcas:
        if hca not in hca_addresses:  # not listed: its link was not measured (ib_ports fails an HCA that is gone)
            unmeasured.append(hca)
            continue
        found = devices.get(hca_addresses[hca])
        if found is None or found.link_status is None:
            continue  # a missing HCA is the IB port check's finding
        gen, width = expect.hca_pcie
        if found.link_status.width < width or found.link_status.speed_gts < GT_PER_GEN[gen]:
            failures.append(f"{hca} ({found.address}) link {found.link_status.speed_gts:g} GT/s "
                            f"x{found.link_status.width}, the spec says {GT_PER_GEN[gen]:g} GT/s x{width}")
    limited = [line.message for line in lines if "limited by" in line.message]
    failures += [f"kernel: {message}" for message in limited]
    if unmeasured and not failures:  # a failure measured stands; otherwise what was not measured is not at spec
        raise Unknown(f"{', '.join(unmeasured)}: no /sys/class/infiniband entry, its PCIe link was not read")
    judged = (f"{len(expect.rail_hcas)} HCA links at spec (the GPUs' own, over NVLink-C2C, not judged)" if c2c
              else f"{len(gpus)} GPU and {len(expect.rail_hcas)} HCA links at spec")
    return [_result("pcie_link", failures, judged, "reboot to retrain the link; reseat the card or riser if it "
                    "stays low")]


def _pci_chain(target: str) -> list[str]:
    """The PCI addresses on a sysfs device path, root port first (``.../pci0000:15/0000:15:01.0/0000:16:00.0/...``)."""
    return [part for part in target.split("/") if part.count(":") == 2 and "." in part]


def _bus_id(nvidia_smi_bus_id: str) -> str:
    """nvidia-smi's ``00000000:18:00.0`` as sysfs names it (``0000:18:00.0``)."""
    domain, _, rest = nvidia_smi_bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def check_rail_map(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    """Each rail's HCA must be its GPU's nearest: the one whose PCIe path shares the deepest bridge with the GPU's
    (the PCIe switch both hang off, what ``nvidia-smi topo -m`` shows as PIX/PXB). A map that pairs a GPU with a
    farther HCA sends GPUDirect traffic across a root complex or a socket, and names the wrong HCA on tickets."""
    if not expect.rails:
        return [CheckResult("rail_map", Outcome.SILENCED, "the spec maps no rails")]
    if expect.platform == "nvl72":
        return [_rail_map_by_numa(gathered, expect)]
    unread = ""
    try:
        devices = _links(gathered, "pci_devices")
        hca_chains = {hca: _pci_chain(target) for hca, target in _links(gathered, "infiniband").items()}
    except Unknown as problem:  # the PCIe tree not read: nvidia-smi topo -m alone judges the map, below
        devices, hca_chains, unread = {}, {}, f"{problem}; "
    gpu_bus = {int(gpu.index): _bus_id(gpu.bus_id) for gpu in _gpus(gathered)}
    rail_hcas = [hca for hca, _ in expect.rails if hca_chains.get(hca)]
    failures, judged = [], 0
    for hca, index in expect.rails:
        gpu_chain = _pci_chain(devices.get(gpu_bus.get(index, ""), ""))
        if not gpu_chain or hca not in rail_hcas:
            continue  # a GPU or HCA that is not there is gpu_count's and ib_ports' finding
        judged += 1

        def shared(other: str, gpu_chain: list[str] = gpu_chain) -> int:
            chain = hca_chains[other]
            return next((depth for depth, (a, b) in enumerate(zip(gpu_chain, chain, strict=False)) if a != b),
                        min(len(gpu_chain), len(chain)))

        nearest = max(rail_hcas, key=lambda other: (shared(other), other == hca))
        if shared(nearest) > shared(hca):
            bridge = gpu_chain[shared(nearest) - 1]
            failures.append(f"GPU {index} ({gpu_chain[-1]}) sits beside {nearest} (under {bridge}); the spec pairs it "
                            f"with {hca} ({hca_chains[hca][-1]}), {shared(hca)} bridge(s) up instead of "
                            f"{shared(nearest)}")
    topo = _topology(gathered)
    if not judged and topo is not None:
        failures, judged = _rail_map_from_topology(topo, expect)
    if not judged:
        raise Unknown(f"{unread}no rail's GPU and HCA were found on the PCIe tree (pci_devices and infiniband "
                      "links) or in nvidia-smi topo -m")
    result = _result("rail_map", failures, f"{judged} rails: each HCA beside its GPU",
                     "fix hardware.<profile>.rails in the spec (nvidia-smi topo -m shows which NIC is PIX/PXB to each "
                     "GPU), or the cabling if the HCAs were swapped in their slots")
    result.evidence += [f"GPU {index} {' / '.join(_pci_chain(devices.get(gpu_bus.get(index, ''), '')))}; {hca} "
                        f"{' / '.join(hca_chains.get(hca, []))}" for hca, index in expect.rails][:8]
    if topo is not None:
        by_name = {topo.name(device): device for device in topo.devices}
        result.evidence.append("nvidia-smi topo -m: " + ", ".join(
            f"GPU{index}-{hca} {topo.relation.get(f'GPU{index}', {}).get(by_name.get(hca, ''), '?')}"
            for hca, index in expect.rails))
    return [result]


def _rail_map_by_numa(gathered: Gathered, expect: Expectations) -> CheckResult:
    """A compute tray's rails: each NIC on its GPU's NUMA node (its Grace). Every GPU hangs off Grace over C2C and
    no PCIe switch joins a GPU to a NIC (``topo -m`` prints ``SYS`` for every pair, healthy), so the nearest NIC
    is the one on the same Grace, as NCCL pairs them (field guide 8.3)."""
    devices = _pci_devices(gathered)
    hca_addresses = _hca_addresses(gathered)
    gpu_bus = {int(gpu.index): _bus_id(gpu.bus_id) for gpu in _gpus(gathered)}
    failures, evidence = [], []
    for hca, index in expect.rails:
        gpu, nic = devices.get(gpu_bus.get(index, "")), devices.get(hca_addresses.get(hca, ""))
        if gpu is None or nic is None:
            continue  # a GPU or NIC that is not there is gpu_count's and ib_ports' finding
        if gpu.numa_node is None or nic.numa_node is None:
            raise Unknown(f"lspci printed no NUMA node for {gpu.address if gpu.numa_node is None else nic.address}")
        evidence.append(f"GPU {index} ({gpu.address}) NUMA {gpu.numa_node}; {hca} ({nic.address}) NUMA "
                        f"{nic.numa_node}")
        if gpu.numa_node != nic.numa_node:
            failures.append(f"GPU {index} is on NUMA node {gpu.numa_node}; the spec pairs it with {hca}, on NUMA "
                            f"node {nic.numa_node}")
    if not evidence:
        raise Unknown("no rail's GPU and NIC were found in lspci")
    result = _result("rail_map", failures, f"{len(evidence)} rails: each NIC on its GPU's Grace (NUMA node)",
                     "fix hardware.<profile>.rails in the spec: pair each GPU with a NIC of its NUMA node")
    result.evidence += evidence[:8]
    return result


def _topology(gathered: Gathered) -> nvidia_smi.TopoMatrix | None:
    """``nvidia-smi topo -m`` when it was read and understood: corroboration, never required."""
    if "topology" not in gathered.outputs:
        return None
    try:
        return _parse(gathered, nvidia_smi.TOPOLOGY)
    except (Unknown, ValueError):
        return None


def _rail_map_from_topology(topo: nvidia_smi.TopoMatrix, expect: Expectations) -> tuple[list[str], int]:
    """The rail-map judgement from the driver's own matrix (PIX nearer than PXB, then PHB, NODE, SYS)."""
    by_name = {topo.name(device): device for device in topo.devices}
    failures, judged = [], 0
    rails = [hca for hca, _ in expect.rails if hca in by_name]
    for hca, index in expect.rails:
        row = topo.relation.get(f"GPU{index}")
        if row is None or hca not in by_name:
            continue
        judged += 1
        rank = {other: nvidia_smi.TOPO_RANK.get(row[by_name[other]], 9) for other in rails}
        nearest = min(rails, key=lambda other: (rank[other], other != hca))
        if rank[nearest] < rank[hca]:
            failures.append(f"GPU {index} is {row[by_name[nearest]]} to {nearest} in nvidia-smi topo -m; the spec "
                            f"pairs it with {hca} ({row[by_name[hca]]})")
    return failures, judged


def check_peermem(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    if expect.gpudirect != "peermem":
        return [CheckResult("peermem", Outcome.SILENCED, f"host.gpudirect is {expect.gpudirect}: not checked")]
    if gathered.files.get("nv_mem") is not None:
        return [CheckResult("peermem", Outcome.OK, "nvidia-peermem registered (nv_mem "
                            f"{(gathered.files['nv_mem'] or '').strip()})")]
    for name in ("nv_mem", "modules"):  # not read is not absent: the module may well be registered
        if name in gathered.problems:
            raise Unknown(gathered.problems[name])
    modules = packages.MODULES.parse(gathered.files.get("modules") or "")
    why = ("nvidia_peermem is loaded but not registered with ib_core" if "nvidia_peermem" in modules
           else "nvidia_peermem is not loaded")
    return [CheckResult("peermem", Outcome.FAILED, why, "re-run provision apply (gpudirect); a module that loads "
                        "but never registers was built against another OFED: rebuild the driver after OFED",
                        ["/sys/kernel/mm/memory_peers/nv_mem/version is absent"])]


def check_acs(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    if not expect.acs_disable:
        return [CheckResult("acs", Outcome.SILENCED, "host.pcie_acs.disable is false: not checked")]
    devices = _pci_devices(gathered)
    endpoints = [device.address for device in devices.values()
                 if (device.kind == "3D controller" and "NVIDIA" in device.description)
                 or device.kind == "Infiniband controller"]
    if expect.acs_scope == "all_bridges":
        scope = {address for address, device in devices.items() if device.is_bridge}
    else:
        paths = _links(gathered, "pci_devices")
        unread = [endpoint for endpoint in endpoints if not _pci_chain(paths.get(endpoint, ""))]
        if unread:  # a bridge not listed is not a bridge with ACS off
            raise Unknown(f"the PCIe path of {', '.join(unread[:4])} was not read (/sys/bus/pci/devices)")
        scope = {part for endpoint in endpoints for part in paths.get(endpoint, "").split("/")
                 if part.count(":") == 2 and part != endpoint}
    failures = [f"bridge {address}: ACS {'+'.join(devices[address].acs_redirects)} on"
                for address in sorted(scope) if address in devices and devices[address].acs_redirects]
    return [_result("acs", failures, f"ACS redirects off on {len(scope)} bridge(s)",
                    "re-run provision apply (pcie_acs); check that provision-acs.service ran at boot")]


def check_iommu(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    """The mode the running kernel booted with, read back from ``/proc/cmdline``: a GRUB setting written but never
    booted into (no reboot, ``update-grub`` not run) leaves the translated IOMMU on every DMA of GPUDirect RDMA."""
    if expect.iommu == "unchanged":
        return [CheckResult("iommu", Outcome.SILENCED, "host.iommu is unchanged: not checked")]
    text = gathered.files.get("cmdline")
    if text is None or "cmdline" in gathered.problems:
        raise Unknown(gathered.problems.get("cmdline", "/proc/cmdline could not be read"))
    mode = system.CMDLINE.parse(text).value("iommu")
    booted = f"iommu={mode}" if mode else "no iommu="
    failures = [] if mode == "pt" else [f"the kernel booted with {booted} where host.iommu is passthrough (iommu=pt)"]
    return [_result("iommu", failures, "booted with iommu=pt",
                    "re-run provision apply (kernel_cmdline): the host must reboot into it",
                    evidence=[text.strip()[:300]])]


def check_dcgm(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    """Before the dcgm stage: DCGM installed, its host engine answering at the client's version (an engine left
    running across an upgrade refuses the new client), and new enough for the GPU, at the pin when there is one."""
    if not expect.dcgm_min:
        return [CheckResult("dcgm", Outcome.SILENCED, "no dcgm stage and no software.dcgm: not checked")]
    if dcgm.VERSION.name in gathered.missing:
        return [CheckResult("dcgm", Outcome.FAILED, "DCGM is not installed (dcgmi: command not found)",
                            "pin it in software.dcgm (provision apply installs it) or install it in the image")]
    version = _parse(gathered, dcgm.VERSION)
    failures = []
    if version.hostengine is None:
        failures.append(f"DCGM {version.client}'s host engine does not answer (dcgmi -v names none)")
    elif version.hostengine != version.client:
        failures.append(f"DCGM's host engine runs {version.hostengine} beside dcgmi {version.client}: restart it")
    if _release(version.client) < _release(expect.dcgm_min):
        failures.append(f"DCGM {version.client} predates this GPU ({expect.gpu_model}): its diagnostic knows it "
                        f"from {expect.dcgm_min}")
    if expect.dcgm_version and version.client != expect.dcgm_version:
        failures.append(f"DCGM {version.client} installed where software.dcgm pins {expect.dcgm_version}")
    return [_result("dcgm", failures, f"DCGM {version.client} with its host engine running",
                    "systemctl enable --now nvidia-dcgm; re-run provision apply (the dcgm role installs the pin)")]


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def check_ib_ports(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    hcas = _parse(gathered, infiniband.IBSTAT)
    failures = []
    for name in expect.rail_hcas:
        device = hcas.get(name)
        if device is None:
            failures.append(f"{name} is missing")
            continue
        for number, port in sorted(device.ports.items()):
            label = f"{name} port {number}"
            if port.state.upper() != "ACTIVE" or port.physical_state != "LinkUp":
                failures.append(f"{label} is {port.state}/{port.physical_state}")
            elif port.rate_gbps is not None and port.rate_gbps < expect.link_gbps:
                failures.append(f"{label} runs at {port.rate_gbps:g} Gb/s, the design says {expect.link_gbps}")
            elif port.link_layer and port.link_layer != "InfiniBand":
                failures.append(f"{label} link layer is {port.link_layer}")
    return [_result("ib_ports", failures, f"{len(expect.rail_hcas)} rail ports ACTIVE at {expect.link_gbps} Gb/s",
                    "clean and reseat the transceivers; replace the cable if the port stays down or slow")]


def _omitted(listed: list[int], expect: Expectations) -> list[int]:
    """The spec's GPU indices a per-GPU listing does not name (a cut output, or a GPU the driver lost)."""
    return [index for index in range(expect.gpu_count) if index not in set(listed)]


def check_nvlink(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    """Each GPU the listing names is judged on its own links; a GPU of the spec the listing omits is unknown, said
    in the same result's evidence (a partial listing that shows dead links fails the node for those, and does not
    hide them behind the GPU it left out)."""
    if not expect.nvlink_links:
        return [CheckResult("nvlink", Outcome.SILENCED, "no NVLink in the spec")]
    listed = _parse(gathered, nvidia_smi.NVLINK)
    failures = []
    for gpu in listed:
        if gpu.all_inactive:
            failures.append(f"GPU {gpu.index}: all NVLinks inactive")
        elif gpu.inactive_links or len(gpu.links) < expect.nvlink_links:
            inactive = f" (inactive: link {', '.join(map(str, gpu.inactive_links))})" if gpu.inactive_links else ""
            failures.append(f"GPU {gpu.index}: {len(gpu.links) - len(gpu.inactive_links)} of "
                            f"{expect.nvlink_links} NVLinks active{inactive}")
    omitted = _omitted([gpu.index for gpu in listed], expect)
    unknown = [f"GPU {index}: not in nvidia-smi nvlink -s (unknown)" for index in omitted]
    remediation = "check nvidia-fabricmanager; reseat the baseboard if links stay down"
    if failures:
        return [_result("nvlink", failures, "", remediation, evidence=failures + unknown)]
    if omitted:  # every GPU it named is healthy: what it left out is not known to be
        return [CheckResult("nvlink", Outcome.UNKNOWN, f"nvidia-smi nvlink -s listed {len(listed)} of "
                            f"{expect.gpu_count} GPUs; those it named have {expect.nvlink_links} NVLinks up",
                            "read nvidia-smi nvlink -s by hand; a GPU missing from it may have fallen off the bus",
                            unknown)]
    return [CheckResult("nvlink", Outcome.OK, f"{expect.nvlink_links} NVLinks up on every GPU")]


#: Imbue's cluster-health reports a link at this many errors (as a silenced warning: "doesn't seem to impact
#: training"); the spec's ``thresholds.nvlink_errors`` is where a node fails.
NVLINK_ERRORS_NOTED = 5


def check_nvlink_errors(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    """Each link's counters against ``thresholds.nvlink_errors``; a GPU of the spec the listing omits, a GPU with
    counters for fewer links than the spec's, and lines not recognised are said in the result: unknown where they
    are all there is to say, in the evidence of a failure otherwise."""
    if not expect.nvlink_links:
        return [CheckResult("nvlink_errors", Outcome.SILENCED, "no NVLink in the spec")]
    read = _parse(gathered, nvidia_smi.NVLINK_ERRORS)
    listed = read.gpus
    limit = expect.thresholds["nvlink_errors"]
    counted = [(gpu, link, gpu.total(link)) for gpu in listed for link in sorted(gpu.links)]
    over = [f"GPU {gpu.index} link {link}: {total} errors since the driver loaded ("
            + ", ".join(f"{count} {name.removesuffix(' Errors').lower()}" for name, count in gpu.links[link].items()
                        if count) + f"; limit {limit:g})" for gpu, link, total in counted if total > limit]
    unknown = [f"GPU {index}: not in nvidia-smi nvlink -e (unknown)"
               for index in _omitted([gpu.index for gpu in listed], expect)]
    unknown += [f"GPU {gpu.index}: counters for {len(gpu.links)} of {expect.nvlink_links} links (the others unknown)"
                for gpu in listed if len(gpu.links) < expect.nvlink_links]
    if read.unrecognised:
        unknown.append(f"{read.unrecognised} line(s) not recognised, e.g. {read.samples[0]!r}")
    remediation = ("reset the GPU and re-test; reseat the baseboard or RMA if the count grows again "
                   "(nvidia-smi nvlink -e)")
    if over:
        return [_result("nvlink_errors", over, "", remediation, evidence=over + unknown)]
    if unknown:
        return [CheckResult("nvlink_errors", Outcome.UNKNOWN, f"{unknown[0]}"
                            + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "")
                            + "; the counters read are within the limit", "read nvidia-smi nvlink -e by hand",
                            unknown)]
    noted = [f"GPU {gpu.index} link {link}: {total} errors" for gpu, link, total in counted
             if total >= NVLINK_ERRORS_NOTED]
    return [_result("nvlink_errors", noted, f"NVLink error counters within {limit:g} per link on every GPU",
                    "watch the counters; the node fails past thresholds.nvlink_errors", outcome=Outcome.WARNING)]


def check_fabric_manager(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    """On an NVSwitch board CUDA does not start until nvidia-fabricmanager has set up the fabric (error 802,
    "system not yet initialized"), and a fabric manager of another version than the driver refuses to start."""
    if not expect.nvswitch:
        return [CheckResult("fabric_manager", Outcome.SILENCED, "no NVSwitch in the spec: no fabric manager needed")]
    unit = _parse(gathered, packages.FABRIC_MANAGER)
    if unit.load_state == "not-found":
        return [CheckResult("fabric_manager", Outcome.FAILED, "nvidia-fabricmanager is not installed",
                            "re-run provision apply (gpu_driver installs it at the driver's version)")]
    failures = []
    if unit.active_state != "active":
        failures.append(f"nvidia-fabricmanager is {unit.active_state} ({unit.sub_state or '?'}): CUDA sees no "
                        "GPU on an NVSwitch board until it runs (error 802)")
    text = gathered.files.get(packages.DPKG_STATUS.name)
    if text is None:
        raise Unknown(gathered.problems.get(packages.DPKG_STATUS.name, f"could not read {packages.DPKG_STATUS.path}"))
    installed = {name: package for name, package in packages.parse_dpkg_status(text).items()
                 if name.startswith("nvidia-fabricmanager-") and package.installed}
    versions = sorted({package.version.split("-")[0] for package in installed.values()})
    if not versions:
        failures.append("no nvidia-fabricmanager package installed")
    elif versions != [expect.driver]:
        failures.append(f"nvidia-fabricmanager {', '.join(versions)} beside driver {expect.driver}: it refuses to "
                        "start at another version")
    return [_result("fabric_manager", failures, f"nvidia-fabricmanager {expect.driver} active",
                    "journalctl -u nvidia-fabricmanager; install it at the driver's version and start it (re-run "
                    "provision apply); a board whose NVSwitches fail to train needs the vendor")]


def check_gpu_modes(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    """The applied clocks at their default (a GPU left at lowered application clocks computes slower for every job),
    persistence mode on (the driver keeps the GPUs initialised between jobs; nvidia-persistenced) and MIG off: the
    burn-in measures, and admits, whole GPUs at their clocks."""
    gpus = _gpus(gathered)
    off = [f"GPU {gpu.index}: persistence mode {gpu.persistence_mode}" for gpu in gpus
           if gpu.persistence_mode != "Enabled"]
    mig = [f"GPU {gpu.index}: MIG {gpu.mig_mode}" for gpu in gpus
           if gpu.mig_mode not in ("Disabled", "[N/A]", "N/A")]
    lowered = [f"GPU {gpu.index}: application clocks {gpu.application_clock_mhz} MHz, below the "
               f"default {gpu.default_application_clock_mhz} MHz" for gpu in gpus
               if gpu.application_clock_mhz.isdigit()
               and gpu.default_application_clock_mhz.isdigit()
               and int(gpu.application_clock_mhz) < int(gpu.default_application_clock_mhz)]
    return [_result("clocks", lowered, "application clocks at their default on every GPU",
                    "nvidia-smi -rac (reset application clocks) and -rgc (locked clocks); find what set them"),
            _result("persistence", off, "persistence mode on every GPU",
                    "systemctl enable --now nvidia-persistenced (re-run provision apply)"),
            _result("mig", mig, "MIG off on every GPU (whole GPUs are burned in and admitted)",
                    "nvidia-smi -mig 0 on each GPU, then reset the GPUs or reboot")]


def check_throttle(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    failures = []
    for gpu in _gpus(gathered):
        mask = int(gpu.clocks_event_reasons, 16)
        reasons = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
        if reasons:
            failures.append(f"GPU {gpu.index} slowed: {', '.join(reasons)} at {gpu.temperature_c} C")
        elif _int(gpu.temperature_c) > expect.thresholds["gpu_temperature_c"]:
            failures.append(f"GPU {gpu.index} at {gpu.temperature_c} C (limit "
                            f"{expect.thresholds['gpu_temperature_c']:g} C)")
    return [_result("throttle", failures, "no thermal or power slowdown",
                    "check airflow, fans and the GPU's heatsink contact; re-test under load")]


def check_disk(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    limit = expect.thresholds["disk_usage_percent"]
    failures = [f"{fs.mount} is {fs.percent}% full ({fs.source})" for fs in _parse(gathered, system.DF)
                if fs.percent >= limit]
    results = [_result("disk", failures, f"every filesystem below {limit:g}%", "free space on the filesystem")]
    text = gathered.files.get(system.SWAPS.name)
    swaps = system.SWAPS.parse(text) if text is not None else None
    if swaps is None:  # an unreadable /proc/swaps says nothing about swap: never "no swap"
        results.append(CheckResult("swap", Outcome.UNKNOWN,
                                   gathered.problems.get(system.SWAPS.name, f"could not read {system.SWAPS.path}"),
                                   "re-run; a check that cannot run is never taken as healthy"))
    elif swaps:
        results.append(CheckResult("swap", Outcome.SILENCED, f"swap on: {', '.join(area.name for area in swaps)}",
                                   "host_tuning turns swap off when host.tuning.swap is off"))
    else:
        results.append(CheckResult("swap", Outcome.OK, "no swap"))
    return results


def check_arch(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    """The host is the machine its hardware profile says (an aarch64 Grace tray, an x86_64 HGX host): the burn-in's
    runtime and every wheel sent to it were chosen by that."""
    machine = _parse(gathered, system.MACHINE)
    failures = [] if machine == expect.arch else [f"the host is {machine}; its hardware profile says {expect.arch}"]
    return [_result("arch", failures, f"{machine}, as the profile says", "put the host in a profile of its "
                    "platform (hardware.<profile>.platform and arch), or check what was delivered")]


def check_tray(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    """A compute tray's own health (field guide 8.2-8.3): its GPUs' Fabric block, where Platform Info says it sits,
    IMEX serving the domain the spec gives it, IMEX's configured peers and its channel device. An HGX host has none
    of these (its NVSwitches are the fabric manager's: ``fabric_manager``)."""
    if expect.platform != "nvl72":
        return []
    gpus = _parse(gathered, nvidia_smi.GPU_FABRIC)
    return [nvlink_domain.judge_gpu_fabric(gpus),
            nvlink_domain.judge_platform(gpus, nvlink_domain.TrayPlace(expect.chassis_serial or None,
                                                                       expect.tray_index or None, None))]


def check_imex(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    """IMEX on a compute tray: the daemon READY, every tray of the spec's domain connected (``-N``); the peers in
    ``nodes_config.cfg`` exactly the domain's trays; the channel device NCCL's MNNVL opens."""
    if expect.platform != "nvl72":
        return []
    return [_imex_serving(gathered, expect), _imex_peers(gathered, expect), _imex_channel(gathered)]


def _imex_serving(gathered: Gathered, expect: Expectations) -> CheckResult:
    name = imex.IMEX_STATUS.name
    if name in gathered.missing:
        return CheckResult("imex", Outcome.FAILED, "nvidia-imex-ctl is not installed: IMEX joins no domain here",
                           "re-run provision apply (the imex role installs it at the driver's version)")
    if name not in gathered.outputs and gathered.exits.get(name, 0) != 0:
        # the tool ran and said no (the daemon stopped, crashed, or its command service off): the tray's answer
        return CheckResult("imex", Outcome.FAILED, f"IMEX does not serve: {gathered.problems.get(name, '')}",
                           "journalctl -u nvidia-imex; restart it (re-run provision apply) and check its peers")
    status = _parse(gathered, imex.IMEX_STATUS)
    domain = _parse(gathered, imex.IMEX_NODES)
    driver = ".".join(expect.driver.split(".")[:2])  # -N prints a node's version as 570.172
    peers = list(expect.imex_peers)
    own = peers[expect.tray_index - 1] if 0 < expect.tray_index <= len(peers) else ""
    return nvlink_domain.judge_imex(status, domain, peers, driver, own)


def _imex_peers(gathered: Gathered, expect: Expectations) -> CheckResult:
    text = gathered.files.get(imex.IMEX_PEERS.name)
    if text is None:
        problem = gathered.problems.get(imex.IMEX_PEERS.name, f"could not read {imex.IMEX_PEERS.path}")
        return CheckResult("imex_peers", Outcome.UNKNOWN, problem, "re-run; a check that cannot run is never "
                           "taken as healthy")
    try:
        peers = imex.IMEX_PEERS.parse(text)
    except ValueError as error:
        return CheckResult("imex_peers", Outcome.FAILED, f"nodes_config.cfg: {error}",
                           "rewrite nodes_config.cfg from the spec (provision apply) and restart nvidia-imex")
    return nvlink_domain.judge_imex_peers(peers, list(expect.imex_peers))


def _imex_channel(gathered: Gathered) -> CheckResult:
    links = gathered.links.get(imex.IMEX_CHANNELS.name)
    if links is None:
        problem = gathered.problems.get(imex.IMEX_CHANNELS.name, f"could not read {imex.IMEX_CHANNELS.path}")
        return CheckResult("imex_channel", Outcome.UNKNOWN, problem, "re-run; a check that cannot run is never "
                           "taken as healthy")
    return nvlink_domain.judge_imex_channel(links)


def check_nvswitch_bridge(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    """HGX B200/B300: the NVSwitch bridge found by its VPD and none of its ports a rail of the spec (other boards
    have no such bridge)."""
    if not expect.nvswitch_bridge:
        return []
    addresses = {name: (_pci_chain(target) or [""])[-1] for name, target in _links(gathered, "infiniband").items()}
    return [nvlink_domain.judge_nvswitch_bridge(_parse(gathered, lspci.LSPCI), addresses, list(expect.rail_hcas))]


def _int(text: str) -> int:
    try:
        return int(float(text))
    except ValueError:
        return 0


#: check name(s) -> evaluator; the names are what fault statements and the spec refer to.
CHECKS: dict[tuple[str, ...], Evaluator] = {
    ("gpu_count",): check_gpu_count,
    ("driver", "vbios"): check_driver,
    ("ecc",): check_ecc,
    ("row_remap",): check_row_remap,
    ("xid",): check_xid,
    ("nvlink5_xid",): check_nvlink5_xid,
    ("kernel_log",): check_kernel_log,
    ("pcie_link",): check_pcie_link,
    ("rail_map",): check_rail_map,
    ("peermem",): check_peermem,
    ("acs",): check_acs,
    ("iommu",): check_iommu,
    ("ib_ports",): check_ib_ports,
    ("nvlink",): check_nvlink,
    ("nvlink_errors",): check_nvlink_errors,
    ("throttle",): check_throttle,
    ("fabric_manager",): check_fabric_manager,
    ("dcgm",): check_dcgm,
    ("clocks", "persistence", "mig"): check_gpu_modes,
    ("disk", "swap"): check_disk,
    ("arch",): check_arch,
    ("gpu_fabric", "platform"): check_tray,
    ("imex", "imex_peers", "imex_channel"): check_imex,
    ("nvswitch_bridge",): check_nvswitch_bridge,
}


def evaluate(gathered: Gathered, expect: Expectations) -> list[CheckResult]:
    results = []
    for names, evaluator in CHECKS.items():
        try:
            results += evaluator(gathered, expect)
        except Unknown as missing:
            results += [CheckResult(name, Outcome.UNKNOWN, f"could not read: {missing}", "re-run; a check that "
                                    "cannot run is never taken as healthy") for name in names]
        except (ValueError, KeyError, IndexError) as error:
            results += [CheckResult(name, Outcome.UNKNOWN, f"unexpected output: {error}", "re-run; report the "
                                    "output if it repeats") for name in names]
    return results


def run(session: HostSession, expect: Expectations, timeout_s: float) -> list[CheckResult]:
    return evaluate(collect(session, timeout_s, platform=expect.platform), expect)

