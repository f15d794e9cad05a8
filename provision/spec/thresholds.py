"""Burn-in thresholds: defaults derived from the GPU model and link rate, each overridable.

A fixed number copied from one SKU quarantines good nodes of another (the field
guide's "thresholds set too high … you run out of nodes"), so every default is a
stated fraction of a stated figure, and the reason travels with the value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from provision.catalog import GPU_MODELS
from provision.spec.model import FabricDesign, HardwareProfile, Thresholds

if TYPE_CHECKING:  # the loaded spec's types, for annotations only (the loader imports this module)
    from provision.spec.loader import LoadedSpec
    from provision.spec.semantics import ResolvedNode

#: Fractions applied to catalog figures when the spec does not override them.
DEFAULT_MATMUL_EFFICIENCY = 0.70  # MAMF scans reach ~0.80 of peak; leave room for healthy spread
DEFAULT_MEMORY_EFFICIENCY = 0.80
DEFAULT_INTRANODE_FRACTION = 0.85  # of the measured 8-GPU ring all-reduce busbw
DEFAULT_IB_WRITE_FRACTION = 0.90  # "happy above 360 Gb/s" on NDR
DEFAULT_RAIL_BUSBW_FRACTION = 0.80  # nccl-tests: below 80% of the link at large sizes is a problem
#: Rails of one fabric measured together agree within a few percent on GPUs; a port trained or retrying down to
#: half its rate gives 0.5. 0.7 leaves room for the noise of CPU workers sharing cores (the simulated cluster).
DEFAULT_RAIL_PEER_FRACTION = 0.70
#: An NVLink domain's all_reduce against its published figure: NVIDIA's cluster validation floors an NVL72's NVLS
#: all_reduce at 630 GB/s, 0.75 of the 839 a 72-GPU domain measures (catalog.DOMAIN_ALLREDUCE_BUSBW).
DEFAULT_DOMAIN_BUSBW_FRACTION = 0.75


@dataclass(frozen=True)
class Threshold:
    value: float
    reason: str


def effective_thresholds(
    profile: HardwareProfile, fabric: FabricDesign, overrides: Thresholds
) -> dict[str, Threshold]:
    """Every threshold the burn-in uses, with where its value came from."""
    gpu = GPU_MODELS[profile.gpu.model]
    link_gbps = fabric.link_gbps
    given = overrides.model_dump(exclude_none=True)

    matmul_eff = given.get("matmul_efficiency", DEFAULT_MATMUL_EFFICIENCY)
    memory_eff = given.get("memory_bandwidth_efficiency", DEFAULT_MEMORY_EFFICIENCY)
    derived = {
        "matmul_tflops": Threshold(
            round(gpu.bf16_dense_tflops * matmul_eff, 1),
            f"{matmul_eff:g} x {gpu.bf16_dense_tflops:g} TFLOPS dense bf16 ({gpu.name})",
        ),
        "matmul_peer_fraction": Threshold(
            0.95, "a GPU 5% slower than the median of its node-mates is flagged (MAMF practice)"),
        "memory_bandwidth_gbps": Threshold(
            round(gpu.hbm_gbps * memory_eff, 1), f"{memory_eff:g} x {gpu.hbm_gbps:g} GB/s HBM ({gpu.name})"
        ),
        "intranode_allreduce_busbw_gbps": Threshold(
            round(gpu.ring_allreduce_busbw * DEFAULT_INTRANODE_FRACTION, 1),
            f"{DEFAULT_INTRANODE_FRACTION:g} x {gpu.ring_allreduce_busbw:g} GB/s 8-GPU ring all-reduce ({gpu.name})",
        ),
        "ib_write_bw_gbps": Threshold(
            link_gbps * DEFAULT_IB_WRITE_FRACTION,
            f"{DEFAULT_IB_WRITE_FRACTION:g} x {link_gbps} Gb/s {fabric.link_rate}, unidirectional per HCA",
        ),
        "rail_busbw_gbps": Threshold(
            link_gbps / 8 * DEFAULT_RAIL_BUSBW_FRACTION,
            f"{DEFAULT_RAIL_BUSBW_FRACTION:g} x {link_gbps / 8:g} GB/s per {fabric.link_rate} rail",
        ),
        "world_busbw_gbps": Threshold(
            len(profile.rails) * link_gbps / 8 * DEFAULT_RAIL_BUSBW_FRACTION,
            f"{DEFAULT_RAIL_BUSBW_FRACTION:g} x {len(profile.rails)} rails x {link_gbps / 8:g} GB/s: a node's traffic "
            "leaves through its rails (world all_reduce, judged on GPUs at 1 GiB and up)",
        ),
        "rail_peer_fraction": Threshold(
            DEFAULT_RAIL_PEER_FRACTION, "a rail below this share of the median of the node's other rails, measured "
            "in the same launch, is slow (judged on any device)"),
        "domain_busbw_fraction": Threshold(
            DEFAULT_DOMAIN_BUSBW_FRACTION, "an NVLink domain's all_reduce below this share of the published figure "
            "for its size is slow (NVIDIA's validation floor: 630 of 839 GB/s; judged on GPUs)"),
        "peer_copy_fraction": Threshold(
            0.8, "a GPU's device-to-device copy to its neighbour below this share of the median of its node's (a "
            "tray's) GPU pairs is slow: an NVLink down or retraining shows as one slow pair (judged on GPUs)"),
        "outlier_mad": Threshold(5.0, "robust z-score (median/MAD) against the fleet, per rail and leaf"),
        "disk_usage_percent": Threshold(95.0, "cluster-health: any filesystem at 95% is an error"),
        "gpu_temperature_c": Threshold(84.0, "gcm example limit; throttling starts near 84-90 C"),
        "corrected_ecc": Threshold(2e7, "AzNHC corrected volatile ECC warning level"),
        "nvlink_errors": Threshold(100, "NVLink replay + recovery + CRC errors per link since the driver loaded; "
                                   "Imbue reports 5 as a silenced warning, gcm's example flit limit is 30"),
        "step_time_cv": Threshold(0.25, "spread of per-step training time (std/median)"),
        "collective_timeout_s": Threshold(60.0, "far below NCCL's 10-30 min default so hangs surface fast"),
    }
    for name, value in given.items():
        if name in derived:
            derived[name] = Threshold(value, "set in the spec")
    if "matmul_efficiency" in given:
        derived["matmul_tflops"] = Threshold(derived["matmul_tflops"].value, "spec efficiency x catalog peak")
    return derived


def stage_limits(loaded: LoadedSpec, node: ResolvedNode) -> dict[str, float]:
    """Each threshold's value for the node's hardware profile: what the burn-in's stages judge the node against and
    the report shows beside its figures (so the report reads them here, not from the stages)."""
    spec = loaded.spec
    return {name: threshold.value for name, threshold in effective_thresholds(
        spec.hardware[node.hardware], spec.fabric, spec.burnin.thresholds).items()}

