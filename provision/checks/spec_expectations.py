"""What the spec says a node is, as preflight's :class:`~provision.checks.preflight.Expectations`: the one
place the controller turns its spec into the checks' terms (preflight over SSH, and the check file
``provision node-check`` reads on the node, where no spec and no pydantic are).
"""

from __future__ import annotations

from provision.catalog import GPU_MODELS, NVSWITCH_BRIDGE_MODELS
from provision.checks import kernel_allowlist
from provision.checks.preflight import Expectations
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode, tray_place
from provision.spec.thresholds import effective_thresholds


def expectations(loaded: LoadedSpec, node: ResolvedNode) -> Expectations:
    spec = loaded.spec
    profile = spec.hardware[node.hardware]
    gpu = GPU_MODELS[profile.gpu.model]
    allowlist_file = spec.burnin.kernel_log_allowlist
    if allowlist_file is not None and not allowlist_file.is_absolute():
        allowlist_file = loaded.path.parent / allowlist_file
    limits = effective_thresholds(profile, spec.fabric, spec.burnin.thresholds)
    place = tray_place(loaded.spec.nvlink_domains or [], loaded.nodes, node.name)
    tray_index, chassis_serial, imex_peers = place.index, place.chassis_serial, place.peers
    return Expectations(
        gpu_count=profile.gpu.count, gpu_model=gpu.name, driver=spec.software.gpu_driver,
        gpu_pcie=(profile.pcie.gpu.gen, profile.pcie.gpu.width),
        hca_pcie=(profile.pcie.hca.gen, profile.pcie.hca.width),
        rail_hcas=tuple(hca for hca, _ in sorted(profile.rails.items(), key=lambda item: item[1])),
        link_gbps=spec.fabric.link_gbps, nvlink_links=gpu.nvlink_links if profile.nvlink.present else 0,
        gpudirect=spec.host.gpudirect, acs_disable=spec.host.pcie_acs.disable, acs_scope=spec.host.pcie_acs.scope,
        iommu=spec.host.iommu,
        thresholds={name: threshold.value for name, threshold in limits.items()},
        uuid_blocklist=frozenset(uuid.upper() for uuid in spec.burnin.uuid_blocklist),
        allowlist=tuple(kernel_allowlist.load(allowlist_file)),
        rails=tuple(sorted(profile.rails.items(), key=lambda item: item[1])),
        nvswitch=profile.nvlink.present and profile.nvlink.nvswitch,
        nvswitch_bridge=profile.nvlink.nvswitch and profile.gpu.model in NVSWITCH_BRIDGE_MODELS,
        # DCGM is checked where the burn-in runs its diagnostic or the spec pins it (its host engine serves more than
        # the burn-in: dcgm-exporter, health watches)
        dcgm_min=gpu.dcgm_min if "dcgm" in spec.burnin.stages or spec.software.dcgm else "",
        dcgm_version=spec.software.dcgm or "",
        arch=profile.architecture,
        platform=profile.platform,
        tray_index=tray_index, chassis_serial=chassis_serial, imex_peers=imex_peers,
    )
