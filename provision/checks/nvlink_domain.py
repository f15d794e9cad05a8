"""The judgements of an NVLink domain (GB200/GB300 NVL72, field guide 8.2-8.4), as pure functions of the facts.

A GB200 tray's health is not the Hopper host's: no fabric manager runs on it, its PCIe reads Gen4 x1 and every
GPU-NIC pair reads ``SYS`` while healthy. What says a tray can serve is each GPU's Fabric block (registered with
the domain, with full bandwidth and no route in trouble), the domain every GPU names (one ClusterUUID and CliqueId
across the trays of a rack), where the tray sits (Platform Info against the spec), IMEX (every tray of the domain
connected, at the driver's version) and the NVLink 5 Xids, whose sub-code says fatal or not and whose downstream
lines name the Xid that caused them.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from provision.checks.outcome import CheckResult, Outcome
from provision.facts.imex import CONNECTION_STATES, ImexDomain
from provision.facts.kernel_log import Xid
from provision.facts.lspci import PciDeviceFacts
from provision.facts.nvidia_smi import FABRIC_HEALTH_FLAGS, GpuFabric
from provision.facts.packages import NvlsmStart

#: A ClusterUUID of zeros, or CliqueId 0: the GPU is in no NVLink partition (azhpc-images #506).
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
#: The NVLink 5 Xids (144-150: a sub-unit and a per-sub-code severity in the line itself).
NVLINK5_XIDS = range(144, 151)
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)", re.IGNORECASE)
_FATAL = re.compile(r"\bFatal\b")
_NONFATAL = re.compile(r"\bNon-?fatal\b", re.IGNORECASE)


def _result(check: str, problems: list[str], ok: str, remediation: str,
            outcome: Outcome = Outcome.FAILED) -> CheckResult:
    if problems:
        return CheckResult(check, outcome, problems[0], remediation, problems)
    return CheckResult(check, Outcome.OK, ok)


def judge_gpu_fabric(gpus: list[GpuFabric]) -> CheckResult:
    """Each GPU registered with its domain: ``Completed`` / ``Success``, a non-zero domain, and every Health key
    the driver printed healthy (``Summary: Healthy``, ``Bandwidth: Full``, the flags ``False``). ``In Progress``
    is the fabric manager or NVLSM not done; ``Insufficient Resources`` with CliqueId 0 a GPU left out of any
    partition; ``Completed``/``Success`` with ``Summary: Unhealthy`` still fails (k8s-dra-driver-gpu #626)."""
    if not gpus:
        return CheckResult("gpu_fabric", Outcome.UNKNOWN, "nvidia-smi -q reported no GPU", "re-run nvidia-smi -q")
    problems = []
    for gpu in gpus:
        name = f"GPU {gpu.pci} ({gpu.uuid})"
        if gpu.state != "Completed":
            problems.append(f"{name}: fabric state {gpu.state or 'not printed'}"
                            + (" (the fabric manager or NVLSM has not finished)" if gpu.state == "In Progress" else ""))
            continue
        if gpu.status != "Success":
            problems.append(f"{name}: fabric status {gpu.status or 'not printed'}")
        if gpu.clique_id in ("", "0", "N/A") or gpu.cluster_uuid in ("", ZERO_UUID, "N/A"):
            problems.append(f"{name}: in no NVLink partition (CliqueId {gpu.clique_id or '-'}, ClusterUUID "
                            f"{gpu.cluster_uuid or '-'})")
        summary = gpu.health.get("Summary")
        if summary not in (None, "Healthy", "N/A"):
            problems.append(f"{name}: fabric health {summary}")
        bandwidth = gpu.health.get("Bandwidth")
        if bandwidth not in (None, "Full", "N/A"):
            problems.append(f"{name}: fabric bandwidth {bandwidth}")
        problems += [f"{name}: {flag}" for flag in FABRIC_HEALTH_FLAGS if gpu.health.get(flag) == "True"]
    return _result("gpu_fabric", problems, f"all {len(gpus)} GPUs registered with their NVLink domain, healthy",
                   "check the domain's switch trays (NMX) and the fabric manager / NVLSM there; reset the GPU, "
                   "then power-cycle the tray if it stays")


def judge_domain_membership(trays: dict[str, list[GpuFabric]]) -> dict[str, CheckResult]:
    """The trays the spec puts in one NVLink domain name one domain: the ClusterUUID and CliqueId most of them
    print. A tray whose GPUs name another (cabled into another rack's domain, or a partition of its own) is
    named, with what it printed; a tray whose GPUs disagree among themselves is named too. Trays are judged only
    against each other, so a domain of one tray has nothing to disagree with."""
    identity: dict[str, tuple[str, str] | None] = {}
    for tray, gpus in trays.items():
        seen = {(gpu.cluster_uuid, gpu.clique_id) for gpu in gpus}
        identity[tray] = seen.pop() if len(seen) == 1 else None
    common = Counter(value for value in identity.values() if value is not None).most_common(2)
    majority = common[0][0] if common and (len(common) == 1 or common[0][1] > common[1][1]) else None
    results = {}
    for tray, value in identity.items():
        if value is None:
            pairs = sorted({f"{gpu.cluster_uuid}/{gpu.clique_id}" for gpu in trays[tray]})
            results[tray] = CheckResult("nvlink_domain", Outcome.FAILED,
                                        f"{tray}'s GPUs name different NVLink domains: {', '.join(pairs)}",
                                        "check the tray's NVLink cartridges and the switch trays' partitions")
        elif majority is None:
            results[tray] = CheckResult("nvlink_domain", Outcome.UNKNOWN,
                                        f"no domain most of the trays agree on; {tray} names {value[0]}/{value[1]}",
                                        "read the Fabric block on every tray of the domain")
        elif value != majority:
            results[tray] = CheckResult(
                "nvlink_domain", Outcome.FAILED,
                f"{tray} is in another NVLink domain (ClusterUUID {value[0]}, CliqueId {value[1]}) than the rest of "
                f"its rack ({majority[0]}, CliqueId {majority[1]}): cabled into another rack's domain?",
                "check the tray's rack and NVLink cabling against the spec; re-partition at the switch trays")
        else:
            results[tray] = CheckResult("nvlink_domain", Outcome.OK,
                                        f"in the domain's ClusterUUID {value[0]}, CliqueId {value[1]}")
    return results


@dataclass(frozen=True)
class TrayPlace:
    """Where the spec says a compute tray sits: its rack's chassis serial, its tray index and its slot (``None``:
    the spec does not say)."""

    chassis_serial: str | None = None
    tray_index: int | None = None
    slot: int | None = None


def judge_platform(gpus: list[GpuFabric], place: TrayPlace) -> CheckResult:
    """Platform Info against the spec: every GPU of the tray in the chassis, tray index and slot the spec gives
    (a tray racked in the wrong slot, or in another rack, is found before its domain is judged)."""
    problems = []
    for gpu in gpus:
        for what, printed, expected in (("chassis serial", gpu.chassis_serial, place.chassis_serial),
                                        ("tray index", gpu.tray_index, place.tray_index),
                                        ("slot", gpu.slot, place.slot)):
            if expected is not None and printed != str(expected):
                problems.append(f"GPU {gpu.pci}: {what} {printed or 'not printed'}, the spec says {expected}")
    return _result("platform", problems, "the tray is where the spec says",
                   "check the tray's rack and slot against the delivery's cabling plan, or correct the spec")


def judge_imex(status: str, domain: ImexDomain, peers: list[str], driver_version: str, own: str = "") -> CheckResult:
    """IMEX serving the domain: ``-q`` says READY; ``-N`` lists exactly the spec's trays (``peers``), each READY,
    at this tray's driver version, every pair connected (``C``), and ``Domain State: UP``.

    ``own``: this tray's address. A peer that is not READY, its pairs and the domain state it brings down are that
    peer's finding (its own ``imex`` check fails it), named here and not held against this tray: a tray fails only
    on its own measurements, so one tray's daemon exiting does not quarantine its rack."""
    problems: list[str] = []
    noted: list[str] = []
    if status != "READY":
        problems.append(f"nvidia-imex-ctl -q: {status}")
    listed = {node.address: node for node in domain.nodes}
    missing = [peer for peer in peers if peer not in listed]
    extra = sorted(set(listed) - set(peers))
    if missing:
        problems.append(f"IMEX does not list {', '.join(missing)} (nodes_config.cfg differs from the spec?)")
    if extra:
        problems.append(f"IMEX lists {', '.join(extra)}, which the spec does not put in this domain")
    down = {node.address for node in domain.nodes if node.state != "READY" and own and node.address != own}
    for node in domain.nodes:
        if node.state != "READY":
            (noted if node.address in down else problems).append(
                f"IMEX node #{node.index} {node.address}: {node.state}"
                + (" (that tray's own imex check fails it)" if node.address in down else ""))
        if driver_version and node.version and node.version != driver_version:
            problems.append(f"IMEX node #{node.index} {node.address} at {node.version}, this tray's driver is "
                            f"{driver_version}")
    by_index = {node.index: node.address for node in domain.nodes}
    for source, row in sorted(domain.matrix.items()):
        for target, cell in sorted(row.items()):
            if cell != "C":
                pair = (by_index.get(source, source), by_index.get(target, target))
                line = f"IMEX {pair[0]} -> {pair[1]}: {CONNECTION_STATES.get(cell, cell)}"
                (noted if down & set(pair) else problems).append(line)
    if domain.domain_state != "UP":
        (noted if down else problems).append(f"IMEX domain state {domain.domain_state}")
    if problems:
        return CheckResult("imex", Outcome.FAILED, problems[0], "restart nvidia-imex on the trays named; make "
                           "nodes_config.cfg identical on every tray of the domain; check the driver version on each",
                           problems + noted)
    if noted:
        return CheckResult("imex", Outcome.OK, f"IMEX READY here; {len(down)} peer(s) not serving: "
                           f"{', '.join(sorted(down))} (their own imex check)", "", noted)
    return CheckResult("imex", Outcome.OK, f"IMEX READY, {len(domain.nodes)} trays connected, domain UP")


@dataclass(frozen=True)
class NvlinkXid:
    """An NVLink 5 Xid with what its line says: fatal or not, and the Xid that caused it (downstream lines)."""

    xid: Xid
    fatal: bool
    caused_by: int | None


def read_nvlink5(xid: Xid) -> NvlinkXid:
    cause = _CAUSED_BY.search(xid.detail)
    fatal = bool(_FATAL.search(xid.detail)) and not _NONFATAL.search(xid.detail)
    return NvlinkXid(xid, fatal, int(cause.group(1)) if cause else None)


#: How soon after a GPU's fatal NVLink Xid another GPU's non-fatal one (with no "caused by" of its own) is read as its
#: consequence: the gpud-quoted GB200 tray logged its Xid 145 139 us after the Xid 149 (field guide 8.4).
CONSEQUENCE_WINDOW_S = 1.0


def _consequence_of(entry: NvlinkXid, fatal: list[NvlinkXid]) -> NvlinkXid | None:
    """The fatal NVLink Xid on another GPU that ``entry`` (non-fatal, naming no cause) followed within
    :data:`CONSEQUENCE_WINDOW_S`, if any: the latest such."""
    if entry.fatal or entry.caused_by is not None or entry.xid.code not in NVLINK5_XIDS or entry.xid.seconds is None:
        return None
    before = [root for root in fatal if root.xid.pci != entry.xid.pci and root.xid.seconds is not None
              and 0 <= entry.xid.seconds - root.xid.seconds <= CONSEQUENCE_WINDOW_S]
    return max(before, key=lambda root: root.xid.seconds or 0.0) if before else None


def judge_nvlink5_xids(xids: list[Xid]) -> CheckResult:
    """Xids 144-150 by what their line says: a fatal sub-code fails the GPU that logged it; a non-fatal one warns;
    a line "caused by previous Xid N" (N one of them; the line may be another Xid, e.g. 45) is blamed on the GPU
    that logged Xid N (the root), never on the GPU that reported the consequence; a non-fatal one that names no
    cause but came within :data:`CONSEQUENCE_WINDOW_S` of another GPU's fatal one is listed as that GPU's
    consequence. Other Xids are the ``xid`` check's."""
    # an NVLink 5 Xid, or any Xid one of them caused (an Xid 45 after an Xid 149)
    read = [entry for entry in map(read_nvlink5, xids)
            if entry.xid.code in NVLINK5_XIDS or entry.caused_by in NVLINK5_XIDS]
    if not read:
        return CheckResult("nvlink5_xid", Outcome.OK, "no NVLink 5 Xid in the kernel log")
    roots = {entry.xid.code: entry.xid.pci for entry in read if entry.caused_by is None}
    fatal = [entry for entry in read if entry.fatal and entry.caused_by is None]
    blamed: dict[str, list[str]] = {}
    warned = []
    for entry in read:
        cause = _consequence_of(entry, fatal)
        if cause is not None:  # a non-fatal NVLink error right after another GPU's fatal one: its link's far end
            gap = (entry.xid.seconds or 0.0) - (cause.xid.seconds or 0.0)
            blamed.setdefault(f"GPU {cause.xid.pci}", []).append(
                f"Xid {entry.xid.code} on GPU {entry.xid.pci}: {entry.xid.detail}, {gap * 1e6:.0f} us after GPU "
                f"{cause.xid.pci}'s Xid {cause.xid.code}: its consequence, nothing of its own")
        elif entry.caused_by is not None:
            root = roots.get(entry.caused_by) or next((xid.pci for xid in xids if xid.code == entry.caused_by), None)
            where = f"GPU {root}" if root else "a GPU whose Xid is not in this log"
            blamed.setdefault(where, []).append(f"Xid {entry.xid.code} on GPU {entry.xid.pci} caused by Xid "
                                                f"{entry.caused_by}")
        elif entry.fatal:
            blamed.setdefault(f"GPU {entry.xid.pci}", []).insert(0, f"Xid {entry.xid.code} {entry.xid.detail}")
        else:
            warned.append(f"Xid {entry.xid.code} on GPU {entry.xid.pci}: {entry.xid.detail}")
    if blamed:
        problems = [f"{where}: {'; '.join(lines)}" for where, lines in blamed.items()]
        return CheckResult("nvlink5_xid", Outcome.FAILED, problems[0],
                           "reset the root GPU; if the Xid repeats, check its NVLink cartridge and the switch tray "
                           "(NMX); the GPUs whose Xids it caused need nothing of their own", problems + warned)
    return CheckResult("nvlink5_xid", Outcome.WARNING, warned[0],
                       "a non-fatal NVLink 5 error: watch the link's recovery events (nvidia-smi nvlink -e)", warned)


def judge_imex_peers(peers: list[str], expected: list[str]) -> CheckResult:
    """``nodes_config.cfg`` lists exactly the domain's trays, in the spec's order: every tray must hold the same
    file, and a tray whose list differs is cut off from the others (``!M!``)."""
    if peers == expected:
        return CheckResult("imex_peers", Outcome.OK, f"nodes_config.cfg lists the domain's {len(expected)} trays")
    missing = [peer for peer in expected if peer not in peers]
    extra = [peer for peer in peers if peer not in expected]
    detail = "; ".join(part for part in (f"missing {', '.join(missing)}" if missing else "",
                                         f"not in the domain: {', '.join(extra)}" if extra else "",
                                         "" if missing or extra else "in another order") if part)
    return CheckResult("imex_peers", Outcome.FAILED, f"nodes_config.cfg differs from the domain's trays: {detail}",
                       "rewrite nodes_config.cfg from the spec (provision apply) and restart nvidia-imex")


def judge_imex_channel(links: dict[str, str]) -> CheckResult:
    """The IMEX channel device NCCL's multi-node NVLink opens; absent after a boot without
    ``NVreg_CreateImexChannel0=1``, and MNNVL then fails with "unhandled system error"."""
    if "channel0" in links:
        return CheckResult("imex_channel", Outcome.OK, "/dev/nvidia-caps-imex-channels/channel0 exists")
    return CheckResult("imex_channel", Outcome.FAILED, "no /dev/nvidia-caps-imex-channels/channel0",
                       "set NVreg_CreateImexChannel0=1 for the nvidia module (the imex role does) and reboot")


def judge_nvlsm(start: NvlsmStart, rails: list[str]) -> CheckResult:
    """On HGX B200/B300: the fabric manager found its ConnectX bridge ports, manages the NVSwitches through one of
    them, and started NVLSM; and no bridge port is counted as a compute rail (they show in ``ibstat``)."""
    problems = []
    if not start.bridge_ports:
        problems.append("the fabric manager found no NVSwitch bridge port (mlx5_ib and ib_umad loaded?)")
    if start.management_guid and start.management_guid not in start.bridge_ports.values():
        problems.append(f"the management port {start.management_guid} is none of the bridge ports found")
    if not start.nvlsm_command or not start.opensm_version:
        problems.append("NVLSM did not start (the fabric manager exits NV_WARN_NOTHING_TO_DO without it and the "
                        "GPUs stay In Progress)")
    bridged_rails = sorted(set(rails) & set(start.bridge_ports))
    if bridged_rails:
        problems.append(f"the spec counts the NVSwitch bridge port(s) {', '.join(bridged_rails)} as rails")
    return _result("nvlsm", problems, f"NVLSM {start.opensm_version} started through "
                   f"{len(start.bridge_ports)} bridge ports", "install NVLSM at the fabric manager's version, load "
                   "mlx5_ib and ib_umad, and list only compute HCAs as rails")


#: The field NVIDIA's fabric manager start script looks for in a ConnectX function's VPD to tell an NVSwitch
#: management function (LPF) of an HGX Blackwell baseboard's bridge from a NIC (docs/blackwell.md, HGX row).
MANAGEMENT_VPD = "SMDL=SW_MNG"


def judge_nvswitch_bridge(devices: list[PciDeviceFacts], ib_addresses: dict[str, str], rails: list[str],
                          ) -> CheckResult:
    """On HGX B200/B300: the baseboard's ConnectX bridge to the NVSwitches is there (its functions' VPD says
    ``SMDL=SW_MNG``), and no ``mlx5_*`` device of it is counted as a rail. Its ports show in ``ibstat`` like any
    NIC's and take the names a site gives rails (mlx5_0-3 on a DGX B200), but carry no cable of the fabric: a
    rail named on one sends the burn-in's traffic nowhere. A card's functions share its slot, so a rail on any
    function of the bridge's slot is one. ``ib_addresses``: each ``/sys/class/infiniband`` name's PCI address."""
    if any(device.access_denied for device in devices):
        return CheckResult("nvswitch_bridge", Outcome.UNKNOWN, "lspci ran without root: no VPD was read",
                           "run preflight with root (become)")
    if not any(device.vpd for device in devices):
        return CheckResult("nvswitch_bridge", Outcome.UNKNOWN, "lspci printed no device's Vital Product Data",
                           "re-run; a check that cannot run is never taken as healthy")
    bridges = sorted({device.slot for device in devices
                      if any(MANAGEMENT_VPD in value for value in device.vpd.values())})
    unread = [device.address for device in devices if "Mellanox" in device.description and not device.vpd]
    if not bridges and unread:
        return CheckResult("nvswitch_bridge", Outcome.UNKNOWN, f"no bridge function found, and the VPD of "
                           f"{', '.join(unread)} was not read (lspci: Not readable)", "read lspci -vvv by hand")
    if not bridges:
        return CheckResult("nvswitch_bridge", Outcome.FAILED, f"no ConnectX function says {MANAGEMENT_VPD} in its "
                           "VPD: the fabric manager has no port to reach the NVSwitches through",
                           "check the baseboard's bridge in lspci and its firmware; NVIDIA support if absent")
    slot_of = {name: address.rsplit(".", 1)[0] for name, address in ib_addresses.items() if address}
    unplaced = [rail for rail in rails if not slot_of.get(rail)]
    if unplaced:  # a rail with no sysfs device (mlx5_ib not loaded, a card gone) is placed on no slot: not judged
        return CheckResult("nvswitch_bridge", Outcome.UNKNOWN, f"{', '.join(unplaced)} not in /sys/class/infiniband: "
                           "which card it is cannot be told", "load mlx5_ib (ib_ports names a rail that is gone)")
    ports = sorted((name for name, slot in slot_of.items() if slot in bridges), key=ib_addresses.__getitem__)
    counted = [rail for rail in rails if slot_of.get(rail) in bridges]
    problems = [f"the spec counts {', '.join(counted)} as rail(s): function(s) of the NVSwitch bridge "
                f"{', '.join(bridges)} ({MANAGEMENT_VPD}), cabled to no leaf"] if counted else []
    return _result("nvswitch_bridge", problems, f"NVSwitch bridge {', '.join(bridges)}: {', '.join(ports) or 'no'} "
                   "IB device(s), none a rail", "list the compute NICs as rails (ibstat's devices on the GPUs' "
                   "PCIe switches), not the bridge's")

