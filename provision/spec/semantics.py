"""Checks that need more than one field, and the resolved node list they produce.

A spec that passes here must never make a later phase crash, so everything a
phase will rely on is resolved now: hostlists expanded, profiles and addresses
assigned, fabric dimensions computed, fault targets found.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from provision.catalog import (
    DCGM_LEVEL_TESTS,
    DCGM_OPTIONAL_TESTS,
    GPU_MODELS,
    NVSWITCH_BRIDGE_MODELS,
    dcgm_tests,
)
from provision.hostmodel.devices import describe
from provision.spec.acceptance import required_node_hours, required_soak_hours
from provision.spec.faults import CATALOG, FaultKind, resolve_params, target_problem
from provision.spec.issues import did_you_mean
from provision.spec.keys import key_form
from provision.spec.model import ClusterSpec, HardwareProfile, NodeOverride, NodeRuntime, NvlinkDomain
from provision.spec.source import Path_
from topology import hostlist
from topology.design import DesignError, FabricDimensions, FabricParameters, dimension
from topology.fattree import HostRails, Naming, build_design


@dataclass(frozen=True)
class ResolvedNode:
    name: str
    group: str
    hardware: str
    address: str
    bmc_address: str | None
    position: int  # rank order across the whole spec
    scalable_unit: int  # 1-based


@dataclass(frozen=True)
class Problem:
    """A cross-field problem before it is given a file position."""

    path: Path_
    message: str
    hint: str = ""
    column: int | None = None  # 1-based column inside the scalar at ``path``


@dataclass
class Resolution:
    nodes: list[ResolvedNode]
    fabric: FabricDimensions | None
    problems: list[Problem]


def resolve(spec: ClusterSpec, spec_dir: Path) -> Resolution:
    """Run every cross-field check; sections that failed validation are ``None`` and skipped."""
    problems: list[Problem] = []
    if spec.nodes is None or spec.hardware is None:
        _check_paths(spec, spec_dir, problems)
        if spec.hardware is not None:
            _check_profiles(spec, problems)
        if spec.software is not None and spec.hardware is not None:
            _check_software(spec, problems)
        return Resolution([], None, problems)
    hosts_by_group = _expand_groups(spec, problems)
    profiles = _assign_profiles(spec, hosts_by_group, problems)
    overrides = _expand_overrides(spec, hosts_by_group, problems)
    for name, override in overrides.items():
        if override[1].hardware is not None:
            profiles[name] = override[1].hardware
    _check_profiles(spec, problems)
    if spec.software is not None:
        _check_software(spec, problems)
    nodes = _build_nodes(spec, hosts_by_group, profiles, overrides, problems)
    if not problems:
        _check_domains(spec, nodes, problems)
    fabric = _check_fabric(spec, len(nodes), spec_dir, problems)
    _check_paths(spec, spec_dir, problems)
    _check_faults(spec, {node.name: node for node in nodes}, problems)
    _check_checkpoint_dir(spec, len(nodes), problems)
    _check_dcgm(spec, problems)
    _check_soak(spec, len(nodes), problems)
    if spec.burnin is not None and spec.burnin.launcher == "slurm" and spec.slurm is None:
        problems.append(Problem(("burnin", "launcher"), "the slurm launcher starts the agents with srun, which "
                                "needs a slurm: section (its conf, at least)", "add slurm: {conf: ...} or use "
                                "launcher: ssh"))
    if spec.watch is not None and spec.watch.revalidate is not None and spec.slurm is None:
        problems.append(Problem(("watch", "revalidate"), "revalidation jobs are submitted to Slurm, which needs a "
                                "slurm: section", "add slurm: {conf: ...} or remove watch.revalidate"))
    _refuse_unread_keys(spec, problems)
    if fabric is not None and not problems:
        _check_cable_targets(spec, nodes, fabric, problems)
    return Resolution(nodes, fabric, problems)


NOT_YET = "not supported yet"


def _refuse_unread_keys(spec: ClusterSpec, problems: list[Problem]) -> None:
    """Keys the schema knows but nothing acts on yet: refused where they are written, never silently ignored
    (docs/spec.md lists each with what it will do)."""
    if spec.burnin is not None:
        given = spec.burnin.thresholds.model_fields_set
        if "flaps_per_24h" in given:
            problems.append(Problem(("burnin", "thresholds", "flaps_per_24h"), "flapping is judged by "
                                    "fabric.link_health (flaps within window_hours), which topology flaps reads; "
                                    "this key is read by nothing", "write fabric.link_health: {flaps: 5, "
                                    "window_hours: 24}"))
        if spec.burnin.repetitions != 1:
            problems.append(Problem(("burnin", "repetitions"), f"{NOT_YET}: each stage runs its measurements "
                                    "once (the collectives stage repeats a suspect run by itself)",
                                    "remove the key or write repetitions: 1"))
    if spec.bmc is not None and spec.bmc.protocol == "ipmi":
        problems.append(Problem(("bmc", "protocol"), f"{NOT_YET}: power control speaks Redfish", "write protocol: "
                                "redfish (every current BMC serves it)"))
    for index, domain in enumerate(spec.nvlink_domains or []):
        for key in sorted({"switch_trays", "chassis_serial"} & domain.model_fields_set):
            problems.append(Problem(("nvlink_domains", index, key), f"{NOT_YET}: nothing reads it until a tray's "
                                    "preflight runs (trays are not burned in yet)", "remove the key"))
    if spec.software is not None and spec.software.nccl is not None:
        problems.append(Problem(("software", "nccl"), f"{NOT_YET}: NCCL comes with the nodes' torch wheel and no "
                                "check compares its version with a pin yet", "remove the key"))


def _expand_groups(spec: ClusterSpec, problems: list[Problem]) -> dict[str, list[str]]:
    hosts_by_group: dict[str, list[str]] = {}
    first_seen: dict[str, tuple[int, str]] = {}
    group_names: dict[str, int] = {}
    for index, group in enumerate(spec.nodes.groups):
        path: Path_ = ("nodes", "groups", index, "hosts")
        if group.name in group_names:
            problems.append(Problem(("nodes", "groups", index, "name"),
                                    f"group name {group.name!r} is also used by groups[{group_names[group.name]}]"))
        group_names.setdefault(group.name, index)
        try:
            names = hostlist.expand(group.hosts)
        except hostlist.HostlistError as error:
            problems.append(Problem(path, error.message, column=error.column))
            continue
        for name in names:
            if name in first_seen:
                other_index, other_group = first_seen[name]
                where = "earlier in this group" if other_index == index else f"in group {other_group!r}"
                problems.append(Problem(path, f"host {name} is listed twice (also {where})",
                                        "each host belongs to exactly one group, once"))
                break
            first_seen[name] = (index, group.name)
        hosts_by_group[group.name] = names
    return hosts_by_group


def _assign_profiles(
    spec: ClusterSpec, hosts_by_group: dict[str, list[str]], problems: list[Problem]
) -> dict[str, str]:
    profiles: dict[str, str] = {}
    for index, group in enumerate(spec.nodes.groups):
        profile = group.hardware
        if profile is None:
            if len(spec.hardware) > 1:
                problems.append(Problem(("nodes", "groups", index),
                                        "this group names no hardware profile and the spec has several",
                                        f"add hardware: one of {', '.join(sorted(spec.hardware))}"))
                continue
            profile = next(iter(spec.hardware))
        elif profile not in spec.hardware:
            problems.append(Problem(("nodes", "groups", index, "hardware"), f"no hardware profile named {profile!r}",
                                    f"defined profiles: {', '.join(sorted(spec.hardware))}"))
            continue
        for host in hosts_by_group.get(group.name, []):
            profiles[host] = profile
    return profiles


def _expand_overrides(spec: ClusterSpec, hosts_by_group: dict[str, list[str]],
                      problems: list[Problem]) -> dict[str, tuple[str, NodeOverride]]:
    known = {host for hosts in hosts_by_group.values() for host in hosts}
    resolved: dict[str, tuple[str, NodeOverride]] = {}
    for expression, override in spec.nodes.overrides.items():
        path: Path_ = ("nodes", "overrides", expression)
        try:
            names = hostlist.expand(expression)
        except hostlist.HostlistError as error:
            problems.append(Problem(path, f"override key: {error.message}"))
            continue
        unknown = [name for name in names if name not in known]
        if unknown:
            problems.append(Problem(path, f"override names hosts that are in no group: {hostlist.compress(unknown)}"))
        if override.hardware is not None and override.hardware not in spec.hardware:
            problems.append(Problem((*path, "hardware"), f"no hardware profile named {override.hardware!r}",
                                    f"defined profiles: {', '.join(sorted(spec.hardware))}"))
        if len(names) > 1 and (override.address or override.bmc_address):
            problems.append(Problem(path, "an address override must name a single host"))
        for name in names:
            if name in known:
                resolved[name] = (expression, override)
    return resolved


def _check_profiles(spec: ClusterSpec, problems: list[Problem]) -> None:
    for name, profile in spec.hardware.items():
        base: Path_ = ("hardware", name)
        gpus = profile.gpu.count
        seen: dict[int, str] = {}
        for hca, gpu in profile.rails.items():
            if not 0 <= gpu < gpus:
                problems.append(Problem((*base, "rails", hca), f"GPU index {gpu} does not exist: the profile has "
                                        f"{gpus} GPUs (0-{gpus - 1})"))
            elif gpu in seen:
                problems.append(Problem((*base, "rails", hca), f"GPU {gpu} is already the rail of {seen[gpu]}",
                                        "each rail pairs one HCA with one GPU"))
            seen.setdefault(gpu, hca)
        if spec.fabric is not None and spec.fabric.rails is not None and len(profile.rails) != spec.fabric.rails:
            problems.append(Problem((*base, "rails"), f"{len(profile.rails)} HCAs in the rail map but "
                                    f"fabric.rails is {spec.fabric.rails}",
                                    "every rail needs exactly one HCA per host"))
        if profile.nvlink.nvswitch and not profile.nvlink.present:
            problems.append(Problem((*base, "nvlink", "nvswitch"), "NVSwitch without NVLink is not a real system"))
        _check_platform(base, profile, problems)


#: Grace-Blackwell tray GPUs: only ever on a compute tray of an NVL72 rack (``platform: nvl72``). Judged as an HGX
#: host a healthy tray would be quarantined: it is aarch64, runs no fabric manager, reads PCIe Gen4 x1 (its GPUs
#: reach Grace over NVLink-C2C) and GPU-NIC affinity SYS everywhere (field guide 8.1-8.3).
NVL_TRAY_MODELS = frozenset({"GB200-186GB", "GB300-288GB"})
#: HGX Blackwell boards: their fabric manager starts NVLSM (field guide 8.1).
NVLSM_MODELS = NVSWITCH_BRIDGE_MODELS


def _check_platform(base: Path_, profile: HardwareProfile, problems: list[Problem]) -> None:
    """What a platform cannot be: a Grace-Blackwell GPU on an HGX baseboard, an x86 tray, a tray with NVSwitches
    of its own, a tray's GPU PCIe link judged."""
    tray_gpu = profile.gpu.model in NVL_TRAY_MODELS
    if profile.platform == "hgx" and tray_gpu:
        problems.append(Problem((*base, "gpu", "model"), f"{profile.gpu.model} is the GPU of a GB200/GB300 compute "
                                "tray, not of an HGX baseboard", "write platform: nvl72 and group the trays into "
                                "nvlink_domains (docs/blackwell.md)"))
    if profile.platform != "nvl72":
        if profile.arch == "aarch64":
            problems.append(Problem((*base, "arch"), "an HGX baseboard sits in an x86_64 host",
                                    "leave arch out (x86_64), or write platform: nvl72 for a Grace tray"))
        return
    if not tray_gpu:
        problems.append(Problem((*base, "gpu", "model"), f"{profile.gpu.model} is not the GPU of an NVL72 compute "
                                f"tray", f"one of {', '.join(sorted(NVL_TRAY_MODELS))}"))
    if profile.architecture != "aarch64":
        problems.append(Problem((*base, "arch"), "a GB200/GB300 compute tray is Grace: aarch64",
                                "leave arch out on platform: nvl72 (aarch64)"))
    if profile.nvlink.nvswitch or not profile.nvlink.present:
        problems.append(Problem((*base, "nvlink"), "a compute tray's GPUs reach the rack's NVLink switch trays; "
                                "it has no NVSwitch of its own (and no fabric manager runs on it)",
                                "write nvlink: {present: true, nvswitch: false}"))
    if "gpu" in profile.pcie.model_fields_set:
        problems.append(Problem((*base, "pcie", "gpu"), "a tray's GPUs reach Grace over NVLink-C2C: their PCIe link "
                                "reads Gen4 x1 while healthy and is not judged", "remove pcie.gpu"))


def _check_domains(spec: ClusterSpec, nodes: list[ResolvedNode], problems: list[Problem]) -> None:
    """Every NVL72 tray in exactly one domain of trays of one profile; a domain's trays x GPUs its size."""
    by_name = {node.name: node for node in nodes}
    trays = {node.name for node in nodes if spec.hardware[node.hardware].platform == "nvl72"}
    placed: dict[str, str] = {}
    domains = spec.nvlink_domains or []  # None: the section failed validation (a partial spec)
    for index, domain in enumerate(domains):
        base: Path_ = ("nvlink_domains", index)
        try:
            names = hostlist.expand(domain.hosts)
        except hostlist.HostlistError as error:
            problems.append(Problem((*base, "hosts"), f"not a hostlist: {error}"))
            continue
        strangers = [name for name in names if name not in by_name]
        if strangers:
            problems.append(Problem((*base, "hosts"), f"trays that are in no node group: "
                                    f"{hostlist.compress(strangers)}"))
            continue
        twice = [name for name in names if name in placed]
        if twice:
            problems.append(Problem((*base, "hosts"), f"{hostlist.compress(twice)} already in domain "
                                    f"{placed[twice[0]]!r}: a tray's GPUs join one NVLink domain"))
        placed.update(dict.fromkeys(names, domain.name))
        profiles = sorted({by_name[name].hardware for name in names})
        if len(profiles) != 1 or spec.hardware[profiles[0]].platform != "nvl72":
            problems.append(Problem((*base, "hosts"), f"a domain's trays share one platform: nvl72 profile; these "
                                    f"have {', '.join(profiles)}"))
            continue
        gpus = spec.hardware[profiles[0]].gpu.count
        if len(names) * gpus != domain.size:
            problems.append(Problem((*base, "size"), f"{len(names)} trays x {gpus} GPUs = {len(names) * gpus}, "
                                    f"not {domain.size}", "size counts the domain's GPUs: 72 for 18 trays of 4"))
        if len(names) > 18:
            problems.append(Problem((*base, "hosts"), f"{len(names)} trays: an NVL72 rack's NVLink domain joins at "
                                    "most 18 compute trays"))
        if domain.min_trays is not None and (domain.on_tray_failure != "shrink" or domain.min_trays > len(names)):
            problems.append(Problem((*base, "min_trays"), "min_trays is the smallest domain on_tray_failure: shrink "
                                    f"admits (at most its {len(names)} trays)", "write on_tray_failure: shrink, or "
                                    "remove min_trays"))
    loose = sorted(trays - set(placed))
    if loose:
        problems.append(Problem(("nvlink_domains",), f"NVL72 trays in no NVLink domain: {hostlist.compress(loose)}",
                                "list each rack's trays under nvlink_domains"))
    if domains and not trays:
        problems.append(Problem(("nvlink_domains",), "no hardware profile is platform: nvl72: an HGX node is its own "
                                "NVLink domain", "remove nvlink_domains"))


def _check_software(spec: ClusterSpec, problems: list[Problem]) -> None:
    pins = spec.software
    has_nvswitch = any(profile.nvlink.nvswitch for profile in spec.hardware.values())
    if has_nvswitch and pins.fabric_manager is not None and pins.fabric_manager != pins.gpu_driver:
        problems.append(Problem(("software", "fabric_manager"),
                                f"fabric manager {pins.fabric_manager} differs from driver {pins.gpu_driver}; "
                                "NVSwitch systems refuse to start it",
                                "leave it out: it defaults to the driver version"))
    managed = sorted(name for name, profile in spec.hardware.items() if profile.platform == "hgx"
                     and profile.nvlink.nvswitch and profile.gpu.model in NVLSM_MODELS)
    if managed and pins.nvlsm is None:
        problems.append(Problem(("software",), f"HGX B200/B300 profiles ({', '.join(managed)}) need NVLSM: their "
                                "fabric manager manages the NVSwitches through it and exits without it (CUDA then "
                                "fails with error 802)", "add nvlsm: <version> (NVIDIA's nvlsm package)"))
    if pins.nvlsm is not None and not managed:
        problems.append(Problem(("software", "nvlsm"), "NVLSM manages the NVSwitches of HGX B200/B300 hosts; no "
                                "profile here is one", "remove nvlsm"))
    trays = sorted(name for name, profile in spec.hardware.items() if profile.platform == "nvl72")
    if trays and pins.fabric_manager is not None:
        problems.append(Problem(("software", "fabric_manager"), f"no fabric manager runs on a compute tray "
                                f"({', '.join(trays)}): the rack's runs on its switch trays (NMX-C), and starting "
                                "one on a tray fails", "remove fabric_manager"))


def _build_nodes(spec: ClusterSpec, hosts_by_group: dict[str, list[str]], profiles: dict[str, str],
                 overrides: dict[str, tuple[str, NodeOverride]], problems: list[Problem]) -> list[ResolvedNode]:
    nodes: list[ResolvedNode] = []
    used_addresses: dict[str, str] = {}
    per_su = (spec.fabric.hosts_per_su if spec.fabric is not None else None) or 1
    for index, group in enumerate(spec.nodes.groups):
        names = hosts_by_group.get(group.name)
        if names is None:
            continue
        for offset, name in enumerate(names):
            override = overrides.get(name, (None, None))[1]
            address = _allocate(group.address_start, offset, ("nodes", "groups", index, "address_start"), problems)
            bmc = _allocate(group.bmc_address_start, offset, ("nodes", "groups", index, "bmc_address_start"), problems)
            if override is not None:
                address = override.address or address
                bmc = override.bmc_address or bmc
            address = address or name
            if address in used_addresses and used_addresses[address] != name:
                problems.append(Problem(("nodes", "groups", index),
                                        f"{name} and {used_addresses[address]} share address {address}"))
            used_addresses[address] = name
            position = len(nodes)
            nodes.append(ResolvedNode(name, group.name, profiles.get(name, ""), address, bmc, position,
                                      position // per_su + 1))
    return nodes


def _allocate(start: ipaddress.IPv4Address | None, offset: int, path: Path_, problems: list[Problem]) -> str | None:
    if start is None:
        return None
    value = int(start) + offset
    if value > int(ipaddress.IPv4Address("255.255.255.254")):
        problems.append(Problem(path, f"allocating {offset + 1} addresses from {start} runs past the IPv4 space"))
        return None
    return str(ipaddress.IPv4Address(value))


def _check_fabric(spec: ClusterSpec, host_count: int, spec_dir: Path,
                  problems: list[Problem]) -> FabricDimensions | None:
    fabric = spec.fabric
    if fabric is None or fabric.cabling_file is not None:
        return None
    missing = [name for name in ("rails", "hosts_per_su", "switch_radix") if getattr(fabric, name) is None]
    for name in missing:
        problems.append(Problem(("fabric",), f"{name} is required to design the fat tree",
                                "give the design parameters, or a cabling_file"))
    if missing or host_count == 0:
        return None
    try:
        return dimension(FabricParameters(
            hosts=host_count,
            rails=fabric.rails or 0,
            hosts_per_su=fabric.hosts_per_su or 0,
            switch_radix=fabric.switch_radix or 0,
            link_rate=fabric.link_rate,
            oversubscription=fabric.oversubscription_ratio,
            tiers=None if fabric.tiers == "auto" else int(fabric.tiers),
            spine_groups=fabric.spine_groups,
        ))
    except DesignError as error:
        path: Path_ = ("nodes", "groups") if error.parameter == "nodes" else ("fabric", error.parameter)
        problems.append(Problem(path, f"the fabric cannot be built non-blocking: {error.message}"))
        return None


#: Folders every Linux host has on its own disk or in memory: never storage the nodes share.
NODE_LOCAL_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")


def _check_checkpoint_dir(spec: ClusterSpec, host_count: int, problems: list[Problem]) -> None:
    """A multi-node training stage saves a sharded checkpoint that other processes load: on real hosts the
    folder must be shared. A node-local folder is refused here; the training stage also proves it at run time.
    The simulated cluster's hosts share one machine, so any folder is shared there."""
    burnin = spec.burnin
    if burnin is None or spec.simulation is not None or host_count < 2 or "training" not in burnin.stages:
        return
    folder = burnin.workload.checkpoint_dir.rstrip("/") or "/"
    local = next((root for root in NODE_LOCAL_DIRS if folder == root or folder.startswith(root + "/")), None)
    if local is not None:
        problems.append(Problem(("burnin", "workload", "checkpoint_dir"),
                                f"{folder} is on each node's own {local}: the training stage's sharded checkpoint "
                                "must be read back by other processes on other nodes",
                                "name a folder every node mounts (NFS, Lustre, ...), "
                                "e.g. /shared/provision/checkpoints"))


def _check_paths(spec: ClusterSpec, spec_dir: Path, problems: list[Problem]) -> None:
    candidates: list[tuple[tuple[str, ...], Path | None]] = []
    if spec.fabric is not None:
        candidates.append((("fabric", "cabling_file"), spec.fabric.cabling_file))
        if spec.fabric.routing_tables is not None:
            candidates += [(("fabric", "routing_tables", "lfts"), spec.fabric.routing_tables.lfts),
                           (("fabric", "routing_tables", "discovery"), spec.fabric.routing_tables.discovery)]
    if spec.burnin is not None:
        candidates.append((("burnin", "kernel_log_allowlist"), spec.burnin.kernel_log_allowlist))
    for path, value in candidates:
        if value is not None and not (spec_dir / value).expanduser().is_file():
            problems.append(Problem(path, f"file {str(value)!r} not found (relative to the spec's folder)"))
    runtime = spec.software.runtime if spec.software is not None else None
    if runtime is not None:
        _check_runtime(spec, runtime, spec_dir, problems)
    for index, repository in enumerate(spec.software.repositories if spec.software is not None else []):
        where = ("software", "repositories", index, "key")
        key = (spec_dir / repository.key).expanduser()
        if not key.is_file():
            problems.append(Problem(where, f"file {str(repository.key)!r} not found (relative to the spec's folder)"))
        elif key_form(key.read_bytes()) is None:
            problems.append(Problem(where, f"{str(repository.key)!r} is not an OpenPGP public key (neither armored "
                                           "nor a binary key packet)",
                                    "download the repository's public key again and check its fingerprint"))


#: The oldest torch the node tests (fabric_tests) are run on by ``make test``: constraints.txt's pin. The spec's
#: runtime may not pin an older one.
OLDEST_TORCH = "2.13.0"


def _check_dcgm(spec: ClusterSpec, problems: list[Problem]) -> None:
    """``burnin.dcgm`` acts only through the dcgm stage; a skip allowed for a test the level never runs would
    silence nothing; a pinned DCGM older than a GPU's support runs its diagnostic with no parameters for it."""
    burnin = spec.burnin
    if burnin is not None and burnin.dcgm is not None:
        if "dcgm" not in burnin.stages:
            problems.append(Problem(("burnin", "dcgm"), "the burn-in has no dcgm stage: these settings would be "
                                    "read by nothing", "add dcgm to burnin.stages (after node) or remove burnin.dcgm"))
        level = burnin.dcgm.level
        runs = {*dcgm_tests(level), *(DCGM_OPTIONAL_TESTS if level >= 3 else ())}
        for index, test in enumerate(burnin.dcgm.allowed_skips):
            if test not in runs:
                first = next(step for step, tests in DCGM_LEVEL_TESTS.items() if test in tests) \
                    if test not in DCGM_OPTIONAL_TESTS else 3
                problems.append(Problem(("burnin", "dcgm", "allowed_skips", index), f"{test} runs from level "
                                        f"{first}, not at level {level}: there is no skip of it to allow",
                                        f"remove it, or set burnin.dcgm.level to {first}"
                                        + (" or more" if first < 4 else "")))
    if spec.software is None or spec.software.dcgm is None or spec.hardware is None:
        return
    for name, profile in spec.hardware.items():
        model = GPU_MODELS.get(profile.gpu.model)
        if model is not None and _release(spec.software.dcgm) < _release(model.dcgm_min):
            problems.append(Problem(("software", "dcgm"), f"DCGM {spec.software.dcgm} predates {model.name} "
                                    f"(hardware.{name}): its diagnostic knows the GPU from {model.dcgm_min}",
                                    f"pin DCGM {model.dcgm_min} or later"))


def _check_soak(spec: ClusterSpec, nodes: int, problems: list[Problem]) -> None:
    """The soak has no default length (hours to days are the site's choice); its settings and the acceptance it
    demonstrates act only through the soak stage; a soak too short for the declared MTBF is refused with the
    length it needs."""
    burnin, acceptance = spec.burnin, spec.admission.acceptance if spec.admission is not None else None
    if burnin is None:
        return
    listed = "soak" in burnin.stages
    if listed and burnin.soak is None:
        problems.append(Problem(("burnin", "stages"), "the soak stage needs its length", "add burnin.soak: "
                                "{duration: 24h} (or the length admission.acceptance needs)"))
    if burnin.soak is not None and not listed:
        problems.append(Problem(("burnin", "soak"), "the burn-in has no soak stage: these settings would be read by "
                                "nothing", "add soak to burnin.stages (last) or remove burnin.soak"))
    if acceptance is None:
        return
    if not listed or burnin.soak is None:
        problems.append(Problem(("admission", "acceptance"), "an MTBF is demonstrated by the soak, which the burn-in "
                                "does not run", "add soak to burnin.stages with burnin.soak.duration"))
        return
    needed = required_soak_hours(acceptance.mtbf_hours, acceptance.confidence, nodes)
    if burnin.soak.hours < needed:
        problems.append(Problem(("burnin", "soak", "duration"), f"{burnin.soak.duration} on {nodes} node(s) is "
                                f"{burnin.soak.hours * nodes:,.0f} node-hours; MTBF >= {acceptance.mtbf_hours:,.0f} h "
                                f"at {acceptance.confidence:.0%} confidence needs "
                                f"{required_node_hours(acceptance.mtbf_hours, acceptance.confidence):,.0f}",
                                f"soak at least {math.ceil(needed)}h, or lower admission.acceptance"))


def _release(version: str) -> tuple[int, ...]:
    """``2.13.0+cu126`` -> (2, 13, 0)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def _check_runtime(spec: ClusterSpec, runtime: NodeRuntime, spec_dir: Path, problems: list[Problem]) -> None:
    """The node runtime names the nodes' Python (burnin.python must not name another) and, with a wheelhouse,
    its pinned torch must be in it: found now rather than by a failed install on every node."""
    if spec.burnin is not None and "python" in spec.burnin.model_fields_set:
        problems.append(Problem(("burnin", "python"), "software.runtime installs the nodes' Python at "
                                f"{runtime.path}/bin/python, and the burn-in uses it", "remove burnin.python"))
    if _release(runtime.torch) < _release(OLDEST_TORCH):
        problems.append(Problem(("software", "runtime", "torch"), f"torch {runtime.torch} is older than "
                                f"{OLDEST_TORCH}, the oldest torch the node tests are run on in CI (constraints.txt): "
                                "an older one is untested (the training stage's FSDP2 is public only from 2.6)",
                                f"pin torch {OLDEST_TORCH} or later (a CUDA build for your driver)"))
    if runtime.wheelhouse is None:
        return
    folder = (spec_dir / runtime.wheelhouse).expanduser()
    where = ("software", "runtime", "wheelhouse")
    if not folder.is_dir():
        problems.append(Problem(where, f"folder {str(runtime.wheelhouse)!r} not found (relative to the spec's "
                                "folder)", "fill it with: pip download torch==VERSION -d FOLDER"))
    elif not any(wheel.name.split("-")[1].split("+")[0] == runtime.torch for wheel in folder.glob("torch-*.whl")):
        found = sorted(wheel.name for wheel in folder.glob("torch-*.whl"))
        problems.append(Problem(where, f"no torch {runtime.torch} wheel in {str(runtime.wheelhouse)!r} (found: "
                                f"{', '.join(found) or 'no torch wheel'})",
                                f"pip download torch=={runtime.torch} -d {runtime.wheelhouse}"))


def _check_faults(spec: ClusterSpec, nodes: dict[str, ResolvedNode], problems: list[Problem]) -> None:
    if spec.simulation is None:
        return
    if spec.simulation.presentation == "namespace" and spec.connection.transport != "ssh":
        problems.append(Problem(("simulation", "presentation"), "the namespace presentation reaches each host "
                                "over SSH (an sshd started in the host's namespace)", "set connection.transport: ssh"))
    for index, fault in enumerate(spec.simulation.faults):
        path: Path_ = ("simulation", "faults", index)
        kind = CATALOG.get(fault.kind)
        if kind is None:
            problems.append(Problem((*path, "kind"), f"unknown fault kind {fault.kind!r}",
                                    did_you_mean(fault.kind, CATALOG)))
            continue
        for name, message in resolve_params(kind, fault.params)[1]:
            problems.append(Problem((*path, "params", name) if name in fault.params else (*path, "params"),
                                    f"{name}: {message}"))
        if kind.target == "cable":
            if fault.node is not None:
                problems.append(Problem((*path, "node"), f"{kind.name} is a fabric fault: name the cable in target, "
                                        "not a node"))
            if (problem := target_problem(kind, fault.target, 0, [])) is not None:
                problems.append(Problem((*path, "target") if fault.target else path, problem))
            continue
        if fault.node is None:
            problems.append(Problem(path, f"{kind.name} needs the node it happens on", "add node: HOSTNAME"))
            continue
        node = nodes.get(fault.node)
        if node is None:
            problems.append(Problem((*path, "node"), f"no node named {fault.node!r} in the spec",
                                    did_you_mean(fault.node, nodes, list_all=False)))
            continue
        profile = spec.hardware.get(node.hardware)
        if profile is not None and (problem := _node_target_problem(spec, node, profile, kind, fault.target)):
            problems.append(Problem((*path, "target") if fault.target else path, f"{node.name}: {problem}"))


def domain_trays(domain: NvlinkDomain) -> list[str]:
    """A domain's compute trays in tray order (Platform Info's Tray Index 1, 2, ...): its ``hosts`` expanded."""
    return hostlist.expand(domain.hosts)


@dataclass(frozen=True)
class TrayPlace:
    """Where the spec puts a compute tray: its index in its domain (1-based, the domain's ``hosts`` order; 0 for a
    node in no domain), the rack's chassis serial where the spec names it, and the addresses of its domain's
    trays in tray order (IMEX's ``nodes_config.cfg``, the same on every tray)."""

    index: int = 0
    chassis_serial: str = ""
    peers: tuple[str, ...] = ()


def tray_place(domains: Sequence[NvlinkDomain], nodes: Sequence[ResolvedNode], name: str) -> TrayPlace:
    """The one reading of a tray's place, for what provisioning writes (IMEX's peers) and what preflight
    expects (Platform Info's tray index and chassis serial, the peers IMEX reports) alike."""
    addresses = {node.name: node.address for node in nodes}
    for domain in domains:
        trays = domain_trays(domain)
        if name in trays:
            return TrayPlace(trays.index(name) + 1, domain.chassis_serial or "",
                             tuple(addresses[tray] for tray in trays if tray in addresses))
    return TrayPlace()


def _node_target_problem(spec: ClusterSpec, node: ResolvedNode, profile: HardwareProfile, kind: FaultKind,
                         target: str | None) -> str | None:
    """Why a node fault's target cannot act on that node's hardware: a GPU, rail or bridge it does not have, or a
    rail whose rank the burn-in never starts."""
    if profile.platform not in kind.platforms:
        return (f"{kind.name} happens on a {' or '.join(kind.platforms)} host, and {node.name}'s hardware profile "
                f"is platform: {profile.platform}")
    problem = target_problem(kind, target, profile.gpu.count, list(profile.rails))
    if problem is None and kind.target == "bridge" and target is not None:
        bridges = [device.bdf for device in describe(node.name, profile, 0).devices if device.has_acs]
        if target not in bridges:
            problem = f"has no ACS-capable bridge {target}"
    if problem is None and kind.layer == "rank" and kind.target == "hca" and spec.burnin is not None:
        hca = target or min(profile.rails, key=profile.rails.__getitem__)  # the injector's default
        ranks = spec.burnin.ranks_per_node or profile.gpu.count
        if profile.rails[hca] >= ranks:  # its rail's rank is never started: the fault could not act
            problem = (f"{hca} is the rail of GPU {profile.rails[hca]}, but the burn-in starts {ranks} rank(s) "
                       "a node (burnin.ranks_per_node): no test would use it")
    return problem


def _check_cable_targets(spec: ClusterSpec, nodes: list[ResolvedNode], dims: FabricDimensions,
                         problems: list[Problem]) -> None:
    """Cable faults must name a cabled port of the design (built only when such faults exist)."""
    if spec.simulation is None:
        return
    cable_faults = [(index, fault) for index, fault in enumerate(spec.simulation.faults)
                    if CATALOG[fault.kind].target == "cable" and fault.target]
    if not cable_faults:
        return
    fabric = spec.fabric
    hosts = [HostRails(node.name, tuple(hca for hca, _gpu in sorted(spec.hardware[node.hardware].rails.items(),
                                                                    key=lambda item: item[1]))) for node in nodes]
    naming = Naming(fabric.naming.leaf, fabric.naming.spine, fabric.naming.core)
    design = build_design(dims, hosts, fabric.hosts_per_su or 1, fabric.rails or 1, naming=naming)
    for index, fault in cable_faults:
        for where, text in ((("target",), fault.target), (("params", "partner"), fault.params.get("partner"))):
            if not text:
                continue
            switch, _, port = str(text).rpartition("/")
            if not port.isdigit() or design.cable_at((switch, int(port))) is None:
                known = switch in design.graph
                problems.append(Problem(("simulation", "faults", index, *where),
                                        f"no cable at {text} in the designed fabric" +
                                        (f" ({switch} has ports {min(design.ports_of(switch))}-"
                                         f"{max(design.ports_of(switch))})" if known else ""),
                                        "" if known else did_you_mean(switch, design.graph.nodes, list_all=False)))
