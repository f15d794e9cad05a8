"""The node stage's judgements and NCCL's transport, as pure functions of what the workers reported.

Each worker of a node reports one record (``fabric_tests/node_test.py``): its device, the matmul dtype and
shapes it swept with the best TFLOPS among them, the digest of an identical computation, its device memory copy
bandwidth and the intra-node all-reduce bus bandwidth. On a GPU the figures are judged against the GPU model's
catalog figures times the spec's efficiencies *and* against the node-mates; on the CPU backend (CI, the
simulated cluster) only the comparisons that hold on any device are judged.

The catalog's matmul peak is **dense bf16**: a figure measured in another dtype cannot be held against it (an
fp32 matmul reaches ~6% of it on an H100), so such a record makes the absolute check ``unknown`` rather than
failing every node of the fleet.
"""

from __future__ import annotations

import statistics
from typing import Any

from provision.checks.outcome import CheckResult, Outcome
from provision.facts.nccl_debug import parse_nccl_debug

#: The dtype the catalog's matmul peak is stated in.
PEAK_DTYPE = "bfloat16"


def on_gpu(records: list[dict[str, Any]]) -> bool:
    return bool(records) and all(str(record["device"]).startswith("cuda") for record in records)


def judge_bit_exact(records: list[dict[str, Any]]) -> CheckResult:
    digests = [record["digest"] for record in records]
    majority = max(set(digests), key=digests.count)
    odd = [record["local_rank"] for record in records if record["digest"] != majority]
    return CheckResult(
        "bit_exact", Outcome.FAILED if odd else Outcome.OK,
        f"GPU(s) {odd} computed a different result from identical inputs (silent data corruption)" if odd
        else f"{len(records)} GPUs computed bit-identical results",
        "run dcgmi diag -r 4 on the node; RMA the GPU if it repeats" if odd else "",
        [f"GPU {record['local_rank']}: {record['digest'][:16]}" for record in records])


def judge_matmul(records: list[dict[str, Any]], limits: dict[str, float]) -> CheckResult:
    """Every GPU within ``matmul_peer_fraction`` of its node-mates' median and, on a GPU measured in bf16,
    above ``matmul_tflops`` (catalog dense bf16 peak x efficiency)."""
    tflops = [record["tflops"] for record in records]
    median = statistics.median(tflops)
    floor = limits["matmul_peer_fraction"] * median
    slow = [f"GPU {record['local_rank']} at {record['tflops'] / median:.0%} of its node-mates' matmul throughput"
            for record in records if record["tflops"] < floor]
    evidence = [f"GPU {record['local_rank']}: {record['tflops']:.4g} TFLOPS"
                + (f" ({record['dtype']}, best of n={record.get('shapes')} at n={record.get('best_n')})"
                   if "dtype" in record else "") for record in records]
    remediation = "check clocks and throttle reasons under load; reseat or RMA the GPU"
    if on_gpu(records):
        dtypes = sorted({str(record.get("dtype", "float32")) for record in records})
        if dtypes != [PEAK_DTYPE]:
            if slow:
                return CheckResult("matmul", Outcome.FAILED, slow[0], remediation, evidence)
            return CheckResult("matmul", Outcome.UNKNOWN, f"matmul measured in {', '.join(dtypes)}; the limit "
                               f"{limits['matmul_tflops']:g} TFLOPS is a dense {PEAK_DTYPE} figure",
                               "run the node stage of this release (it measures in bf16 on GPUs)", evidence)
        slow += [f"GPU {record['local_rank']}: {record['tflops']:.0f} TFLOPS {PEAK_DTYPE}, below "
                 f"{limits['matmul_tflops']:g}" for record in records if record["tflops"] < limits["matmul_tflops"]]
    if slow:
        return CheckResult("matmul", Outcome.FAILED, slow[0], remediation, evidence)
    return CheckResult("matmul", Outcome.OK, f"matmul median {median:.4g} TFLOPS, every GPU within "
                       f"{1 - limits['matmul_peer_fraction']:.0%} of it", "", evidence)


def judge_intranode_allreduce(records: list[dict[str, Any]], gpus: int, limits: dict[str, float]) -> CheckResult:
    wrong = [record["local_rank"] for record in records if not record["allreduce_correct"]]
    busbw = min(record["allreduce_busbw_gbps"] for record in records)
    if wrong:
        return CheckResult("intranode_allreduce", Outcome.FAILED, f"all_reduce returned wrong sums on GPUs {wrong}",
                           "check NVLink and nvidia-fabricmanager")
    if on_gpu(records) and gpus > 1 and busbw < limits["intranode_allreduce_busbw_gbps"]:
        return CheckResult("intranode_allreduce", Outcome.FAILED, f"intra-node all_reduce busbw {busbw:.0f} GB/s, "
                           f"below {limits['intranode_allreduce_busbw_gbps']:g}",
                           "check NVLink status and the fabric manager")
    judged = on_gpu(records)
    return CheckResult("intranode_allreduce", Outcome.OK if judged else Outcome.SILENCED,
                       f"all_reduce correct, busbw {busbw:.3g} GB/s" + ("" if judged else " (CPU backend: not judged)"))


def judge_memory_bandwidth(records: list[dict[str, Any]], limits: dict[str, float]) -> CheckResult:
    memory = min(record["memory_gbps"] for record in records)
    if on_gpu(records) and memory < limits["memory_bandwidth_gbps"]:
        slowest = min(records, key=lambda record: record["memory_gbps"])
        return CheckResult("memory_bandwidth", Outcome.FAILED, f"GPU {slowest['local_rank']}: device memory copy "
                           f"{memory:.0f} GB/s, below {limits['memory_bandwidth_gbps']:g}",
                           "reset the GPU; RMA if it repeats")
    judged = on_gpu(records)
    return CheckResult("memory_bandwidth", Outcome.OK if judged else Outcome.SILENCED,
                       f"slowest device copy {memory:.3g} GB/s" + ("" if judged else " (CPU backend: not judged)"))


def judge_peer_copy(records: list[dict[str, Any]], limits: dict[str, float]) -> CheckResult:
    """Each GPU's copy to its neighbour against the median of the node's pairs (``peer_copy_fraction``): a tray's or
    a board's pairs share one design, so a pair well below its mates has an NVLink down, retraining or at a lower
    width (the field guide's rule for NVLink 5: compare across the GPUs, never against a fixed rate, which drivers
    print differently). No public device-to-device figure per platform is held, so there is no absolute floor: a
    node whose every pair is slow alike passes here and is the intra-node all_reduce's finding."""
    if not on_gpu(records) or len(records) < 2:
        return CheckResult("peer_copy", Outcome.SILENCED, "no device-to-device copy to measure (CPU workers, or one "
                           "GPU)")
    missing = [record["local_rank"] for record in records if record.get("peer_copy_gbps") is None]
    if missing:  # a GPU worker that reported no copy: not measured, never taken as a healthy pair
        return CheckResult("peer_copy", Outcome.UNKNOWN, f"no device-to-device copy reported by GPU(s) {missing}",
                           "re-run the node stage; a check that cannot run is never taken as healthy")
    median = statistics.median(record["peer_copy_gbps"] for record in records)
    floor = limits["peer_copy_fraction"] * median
    slow = [f"GPU {record['local_rank']} -> GPU {record['peer']}: device-to-device copy {record['peer_copy_gbps']:.0f} "
            f"GB/s, below {limits['peer_copy_fraction']:g} x the median {median:.0f} GB/s of the node's pairs"
            for record in records if record["peer_copy_gbps"] < floor]
    if slow:
        return CheckResult("peer_copy", Outcome.FAILED, slow[0], "nvidia-smi nvlink -s on both GPUs (an <inactive> "
                           "link), nvlink -e for recovery events; reset them, then the NVLink cartridge or the switch "
                           "tray", slow)
    return CheckResult("peer_copy", Outcome.OK, f"{len(records)} GPU pairs copy within "
                       f"{limits['peer_copy_fraction']:g} of their median {median:.0f} GB/s")


def judge_gpu_runtime(records: list[dict[str, Any]]) -> CheckResult:
    """A GPU node runs on its GPUs or fails: a worker of a CUDA build of torch that ran on the CPU could not use its
    GPU (fabric manager down, driver and library out of step, a GPU lost), and every figure it measured is a CPU's.
    A CPU build (CI, the simulated cluster) runs on the CPU by design and is judged as such."""
    lost = [f"GPU {record['local_rank']}: ran on the CPU, torch built for CUDA {record['cuda_build']}: "
            f"{record.get('cuda_error', 'CUDA not available')}" for record in records
            if str(record.get("device", "")).startswith("cpu") and record.get("cuda_build")]
    if lost:
        return CheckResult("gpu_runtime", Outcome.FAILED, lost[0], "check nvidia-fabricmanager (systemctl status; "
                           "CUDA error 802 until it runs), nvidia-smi, and that the driver matches its libraries",
                           lost)
    builds = sorted({str(record.get("cuda_build")) for record in records})
    return CheckResult("gpu_runtime", Outcome.OK, "every worker on its GPU" if any(
        str(record.get("device", "")).startswith("cuda") for record in records)
        else f"CPU workers of a CPU build of torch (cuda_build {', '.join(builds)})")


def judge_node_records(records: list[dict[str, Any]], gpus: int, limits: dict[str, float]) -> list[CheckResult]:
    """A node's checks, a GPU that could not be used first, then a wrong answer (it outranks a slow one)."""
    records = sorted(records, key=lambda record: record["local_rank"])
    runtime = judge_gpu_runtime(records)
    if runtime.outcome is Outcome.FAILED:  # a CPU's figures say nothing of the GPU
        return [runtime]
    return [runtime, judge_bit_exact(records), judge_matmul(records, limits),
            judge_intranode_allreduce(records, gpus, limits), judge_memory_bandwidth(records, limits),
            judge_peer_copy(records, limits)]


def judge_nccl_transport(text: str, devices: set[str], *, gpudirect: bool) -> CheckResult:
    """The transport NCCL chose, from its NCCL_DEBUG=INFO lines: InfiniBand, and GPUDirect RDMA where the spec
    enables it; sockets fail the node. Gloo (the CPU backend) has no such choice to check."""
    if not any(device.startswith("cuda") for device in devices):
        return CheckResult("nccl_transport", Outcome.SILENCED, "gloo backend (no GPU): no NCCL transport to check")
    found = parse_nccl_debug(text)
    evidence = [f"networks {sorted(found.networks)}, IB devices {found.ib_devices}, channels via IB "
                f"{found.channels_ib} (GDRDMA {found.channels_ib_gdr}), via sockets {found.channels_socket}"]
    if not found.lines:
        return CheckResult("nccl_transport", Outcome.UNKNOWN, "no NCCL INFO lines in the workers' output (is "
                           "NCCL_DEBUG overridden in burnin.nccl_env?)", "leave NCCL_DEBUG unset in the spec",
                           evidence)
    if "Socket" in found.networks or found.channels_socket:
        return CheckResult("nccl_transport", Outcome.FAILED, "NCCL fell back to TCP sockets instead of InfiniBand",
                           "check NCCL_IB_HCA, that the HCAs are ACTIVE and that libibverbs is installed", evidence)
    if gpudirect and found.channels_ib and found.channels_ib_gdr < found.channels_ib:
        return CheckResult("nccl_transport", Outcome.FAILED, f"{found.channels_ib - found.channels_ib_gdr} of "
                           f"{found.channels_ib} IB channels without GPUDirect RDMA (no GDRDMA)",
                           "check that nvidia-peermem is loaded and PCIe ACS is off on the GPU-HCA paths", evidence)
    return CheckResult("nccl_transport", Outcome.OK, "NCCL used InfiniBand" + (" with GPUDirect RDMA" if gpudirect
                                                                              else ""), "", evidence)
