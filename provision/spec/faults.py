"""The fault catalog: every fault the simulated cluster can inject, and who must catch it.

Each entry is named, parameterised (with defaults and ranges checked when the
spec is validated) and says in one line how the pipeline is expected to notice
it: the stage and check. End-to-end tests assert against these statements.
``layer`` says which part of the simulator injects it: ``node`` faults live in
a host's hardware root, ``fabric`` faults in the simulated InfiniBand fabric,
``rank`` faults in the processes of a distributed test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Param:
    kind: type
    default: Any
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()


@dataclass(frozen=True)
class FaultKind:
    name: str
    layer: str  # node | fabric | rank
    target: str  # node | gpu | hca | bridge | cable
    stage: str
    check: str
    statement: str
    params: dict[str, Param] = field(default_factory=dict)
    #: The platforms whose hosts can have it: a GPU's NVLink partition or IMEX exists on a compute tray only.
    platforms: tuple[str, ...] = ("hgx", "nvl72")


#: Faults of a rack's shared hardware, named by one tray: the simulator gives them to every tray of its domain.
DOMAIN_FAULTS = ("degraded_switch_tray",)


_GPU, _HCA = "gpu", "hca"
CATALOG: dict[str, FaultKind] = {kind.name: kind for kind in (
    FaultKind("acs_enabled", "node", "bridge", "provision", "pcie_acs",
              "firmware leaves ACS redirect bits on; the pcie_acs role clears them and the boot unit keeps them off"),
    FaultKind("peermem_missing", "node", "node", "provision", "gpudirect",
              "nvidia-peermem was not built with the driver; reinstalling the driver builds it, the gpudirect role "
              "loads and verifies it"),
    FaultKind("peermem_unregistered", "node", "node", "provision", "gpudirect",
              "nvidia-peermem loads but never registers with ib_core; the gpudirect role's registration check fails"),
    FaultKind("wrong_driver", "node", "node", "provision", "gpu_driver",
              "a different driver branch is installed and held; the gpu_driver role replaces it and reboots",
              {"version": Param(str, "550.54.15")}),
    FaultKind("reboot_hang", "node", "node", "provision", "reboot",
              "the host does not come back from its next reboot (hung in POST or at a kernel panic) until its BMC "
              "power-cycles it; the provisioning phase power-cycles it through the BMC and finishes it, and with the "
              "BMC unreachable quarantines it as unreachable"),
    FaultKind("pin_unavailable", "node", "node", "provision", "gpu_driver",
              "the host's package mirror lacks the pinned driver (a stale or mis-pointed apt source); the gpu_driver "
              "role's install fails with apt's 'Version ... was not found' and nothing is half-installed"),
    FaultKind("gpu_missing", "node", _GPU, "provision", "preflight",
              "a GPU fell off the bus: absent from lspci and nvidia-smi; the playbook's preflight role refuses the "
              "host, and on a host that lost it after provisioning burn-in preflight's gpu_count fails"),
    FaultKind("pcie_downtrained", "node", "gpu_or_hca", "preflight", "pcie_link",
              "a GPU or HCA link trained below spec; preflight's PCIe width/speed check and 'limited by' scan fail",
              {"width": Param(int, 8, choices=(1, 2, 4, 8, 16)), "gen": Param(int, 0, 0, 6)}),
    FaultKind("xid", "node", _GPU, "preflight", "xid",
              "an Xid in the kernel log; preflight fails hardware-class codes and warns on benign ones",
              {"code": Param(int, 79, 1, 200),
               # again: the GPU's fault logs it at every boot; cleared: an event the next boot's log no longer holds
               "after_boot": Param(str, "again", choices=("again", "cleared"))}),
    FaultKind("ecc_uncorrectable", "node", _GPU, "preflight", "ecc",
              "volatile uncorrectable ECC errors; preflight's ECC check fails",
              {"count": Param(int, 2, 1, 10_000)}),
    FaultKind("row_remap_pending", "node", _GPU, "preflight", "row_remap",
              "a row remap waits for a GPU reset; preflight's remapped-rows check fails"),
    FaultKind("nvlink_errors_growing", "node", _GPU, "preflight", "nvlink_errors",
              "one NVLink lane of a GPU keeps failing its CRC (the count grows by per_hour, some of it replayed); "
              "preflight's NVLink error-counter check fails the node past thresholds.nvlink_errors",
              {"link": Param(int, 3, 0, 17), "per_hour": Param(float, 3600.0, 1.0, 1e7)}),
    FaultKind("thermal_throttle", "node", _GPU, "preflight", "throttle",
              "thermal slowdown active at 91 C; preflight's throttle-reason check fails",
              {"temperature_c": Param(int, 91, 60, 120)}),
    FaultKind("slow_gpu", "rank", _GPU, "node", "matmul",
              "one GPU computes at a fraction of its peers; the node stage's matmul throughput check fails",
              {"factor": Param(float, 0.5, 0.01, 0.99)}),
    FaultKind("fabricmanager_down", "node", "node", "preflight", "fabric_manager",
              "nvidia-fabricmanager starts and dies on an NVSwitch board (systemctl start says nothing, the unit "
              "ends failed): CUDA would report error 802 to every worker; preflight's fabric-manager check fails"),
    FaultKind("application_clocks_low", "node", _GPU, "preflight", "clocks",
              "a GPU left at lowered application clocks (nvidia-smi -ac by a previous tenant or a tuning script); "
              "preflight's clocks check fails it", {"mhz": Param(int, 1200, 210, 1980)}),
    FaultKind("mig_enabled", "node", _GPU, "preflight", "mig",
              "a GPU left in MIG mode; preflight's MIG check fails (the burn-in measures and admits whole GPUs)"),
    FaultKind("perftest_without_cuda", "node", "node", "pairs", "perftest",
              "the host's perftest was built without CUDA, so ib_write_bw refuses --use_cuda; with GPUDirect on, "
              "the pairs stage fails the node with the reason instead of measuring host memory"),
    FaultKind("rails_swapped", "node", _HCA, "preflight", "rail_map",
              "two HCAs come up under each other's names (probe order, or cards in each other's slots), so the "
              "spec's rail map pairs each GPU with an HCA behind another PCIe switch; preflight's rail-map check "
              "names both paths",
              {"with": Param(str, "")}),
    FaultKind("hca_port_down", "node", _HCA, "preflight", "ib_ports",
              "an HCA port stays down (polling); preflight's IB port check fails"),
    FaultKind("ib_link_low_rate", "node", _HCA, "preflight", "ib_ports",
              "an HCA port trained below the design rate; preflight's IB rate check fails",
              {"rate": Param(str, "HDR", choices=("EDR", "HDR"))}),
    FaultKind("flapping_cable", "fabric", "cable", "fabric", "flaps",
              "a cable goes down and up; topology flaps names it from events and counters",
              {"flaps_per_hour": Param(float, 4.0, 0.1, 600.0)}),
    FaultKind("miswired_cable", "fabric", "cable", "fabric", "audit",
              "two cables are swapped; the topology audit reports both as miswired, each the other's partner",
              {"partner": Param(str, "")}),
    FaultKind("missing_cable", "fabric", "cable", "fabric", "audit",
              "a designed cable is absent; the topology audit reports it missing"),
    FaultKind("degraded_link", "fabric", "cable", "pairs", "tomography",
              "a link carries a fraction of its bandwidth; pair tests and tomography locate it",
              {"factor": Param(float, 0.5, 0.01, 0.99)}),
    FaultKind("degraded_hca_port", "rank", _HCA, "collectives", "rail_busbw",
              "one HCA's data path (a port passing traffic with link-level retries, or the PCIe path between the "
              "GPU and its HCA) carries GPU traffic at a fraction of its speed while its port reads ACTIVE at full "
              "rate: every collective on that rail is slow for all its members and nobody is a straggler; the "
              "collectives stage finds the slow rail and pairs nodes to name the one behind it",
              {"factor": Param(float, 0.1, 0.01, 0.9)}),
    FaultKind("rank_hang", "rank", "node", "collectives", "watchdog",
              "one rank stops inside a collective; the watchdog names its host and rank",
              {"local_rank": Param(int, 0, 0, 15), "after_ops": Param(int, 2, 0, 1000)}),
    FaultKind("rank_slow", "rank", "node", "collectives", "outliers",
              "one rank is slow in collectives; fleet outlier detection flags its host",
              {"factor": Param(float, 0.5, 0.01, 0.99), "local_rank": Param(int, 0, 0, 15)}),
    FaultKind("collective_corruption", "rank", "node", "collectives", "correctness",
              "one rank's contribution to every inter-node all_reduce is corrupted, so every member's sum is "
              "wrong and no rank can be named from the output; adaptive group testing isolates its host",
              {"local_rank": Param(int, 0, 0, 15)}),
    FaultKind("step_slowdown", "rank", "node", "training", "step_time",
              "one rank's training step is slow every few steps (a background job, a throttling cycle); the "
              "training stage reports the slowness as periodic and fails the host",
              {"local_rank": Param(int, 0, 0, 15), "period": Param(int, 5, 2, 1000),
               "extra_ms": Param(float, 60.0, 1.0, 10_000.0)}),
    FaultKind("worker_error", "rank", "node", "collectives", "collectives",
              "one worker of the named test fails: it raises at init as NCCL does when it cannot build its "
              "communicator ('init'), exits cleanly without a result ('exit'), or finishes with its output lost "
              "('silent'); the stage that ran the test (node: node_test, collectives, training: training) fails "
              "that node for want of its own measurements, the others' timeouts are not held against them, and "
              "the fault on every node stops the run as systemic",
              {"when": Param(str, "init", choices=("init", "exit", "silent")),
               "test": Param(str, "collectives", choices=("node", "collectives", "training")),
               "local_rank": Param(int, 0, 0, 15)}),
    FaultKind("rank_wrong_result", "rank", "node", "node", "bit_exact",
              "one rank returns corrupted results; the bit-exact cross-check fails its host",
              {"local_rank": Param(int, 0, 0, 15)}),
    FaultKind("unknown_kernel_log_line", "node", "node", "preflight", "kernel_log",
              "a kernel message outside the allowlist; preflight's kernel-log check warns",
              {"line": Param(str, "mce: [Hardware Error]: Machine check events logged")}),
    FaultKind("disk_full", "node", "node", "preflight", "disk",
              "a filesystem is nearly full; preflight's disk check fails",
              {"mount": Param(str, "/"), "percent": Param(float, 99.0, 0, 100)}),
    FaultKind("gpu_memory_mismatch", "node", _GPU, "dcgm", "dcgm_memtest",
              "a marginal memory cell returns a wrong value with no ECC error counted (silent corruption): "
              "nothing an idle GPU reports shows it; DCGM's memtest (run level 4) fails the GPU"),
    FaultKind("gpu_power_low", "node", _GPU, "dcgm", "dcgm_targeted_power",
              "the GPU cannot draw its target power under load (power delivery, a power brake): idle it looks "
              "healthy; DCGM's targeted power test (run level 3) fails it below 75% of the target",
              {"max_w": Param(float, 410.0, 50.0, 1500.0)}),
    FaultKind("pcie_replays", "node", _GPU, "dcgm", "dcgm_pcie",
              "the GPU's PCIe link retrains and replays under traffic at full width and speed: idle it looks "
              "healthy; DCGM's PCIe test (run level 2) fails it on the corrected-error rate",
              {"per_minute": Param(int, 400, 1, 1_000_000)}),
    FaultKind("thermal_throttle_after", "node", _GPU, "soak", "soak_throttle",
              "healthy in every short test, the GPU throttles thermally once it has run after_h hours (a fan that "
              "fails, paste that dries); the soak's throttle trend fails it",
              {"after_h": Param(float, 2.0, 0.0, 2000.0), "temperature_c": Param(int, 92, 60, 120)}),
    FaultKind("clock_sag", "node", _GPU, "soak", "soak_clocks",
              "healthy in every short test, the GPU's SM clock under load sags to factor of its node-mates' once it "
              "has run after_h hours, with no clock-event reason the driver names (a voltage regulator, firmware); "
              "its matmul slows alike; the soak's clock trend fails it",
              {"after_h": Param(float, 2.0, 0.0, 2000.0), "factor": Param(float, 0.8, 0.1, 0.95)}),
    FaultKind("symbol_errors_growing", "node", _HCA, "soak", "soak_ib_errors",
              "the HCA port's symbol errors grow by per_hour (a marginal cable or transceiver): a few in any "
              "short test; the soak's counter trend fails the node. With doubling_h, the rate doubles every "
              "doubling_h hours (a link degrading, as the GB200 NVLink of marin-community/marin #8934 did over "
              "five days): the soak's forecast flags it before its count passes the allowance",
              {"per_hour": Param(float, 500.0, 0.01, 1e9), "doubling_h": Param(float, 0.0, 0.0, 2000.0)}),
    FaultKind("nvlink_recovery_growing", "node", _GPU, "soak", "soak_nvlink_recovery",
              "one NVLink of the GPU keeps retraining: its recovery events grow by per_hour from the fault's start "
              "(Blackwell's Link recovery successful events, Hopper's Recovery Errors), as a GB200 NVL72 link's did "
              "for five days before its Xid 149 (marin-community/marin #8934); none at preflight, the soak's "
              "recovery trend fails the node",
              {"link": Param(int, 5, 0, 17), "per_hour": Param(float, 6.0, 0.01, 1e7)}),
    # A GB200/GB300 compute tray's own faults (field guide 8.2-8.3): caught by preflight's NVLink-domain checks.
    FaultKind("fabric_insufficient_resources", "node", _GPU, "preflight", "gpu_fabric",
              "the switch trays' NMX could not place the GPU in an NVLink partition: its Fabric block reads State "
              "Completed, Status Insufficient Resources, CliqueId 0 and the zero ClusterUUID (azhpc-images #506); "
              "preflight's GPU fabric check fails the tray", platforms=("nvl72",)),
    FaultKind("fabric_unhealthy", "node", _GPU, "preflight", "gpu_fabric",
              "the GPU joined its partition (Completed, Success) but its fabric Health Summary reads Unhealthy "
              "(k8s-dra-driver-gpu #626): preflight's GPU fabric check fails the tray, not only on State and Status",
              platforms=("nvl72",)),
    FaultKind("foreign_partition", "node", "node", "preflight", "nvlink_domain",
              "the tray is cabled into another rack's NVLink partition: every GPU shows that partition's ClusterUUID "
              "and CliqueId, unlike the rest of its domain; the domain check names it as another rack's",
              platforms=("nvl72",)),
    FaultKind("nvlink_xid149", "node", _GPU, "preflight", "nvlink5_xid",
              "the GPU's NVLink 5 NETIR unit logs a fatal Xid 149 and, microseconds later, the tray's other GPUs each "
              "a non-fatal Xid 145 on the link that reached it (the GB200 lines gpud quotes, NVIDIA/gpud #1174): "
              "preflight's NVLink 5 check fails the tray and blames the 145s on the 149's GPU",
              {"after_boot": Param(str, "again", choices=("again", "cleared"))}, platforms=("nvl72",)),
    FaultKind("degraded_switch_tray", "rank", "node", "nvlink_domain", "domain_busbw",
              "an NVLink switch tray of the node's rack runs degraded (a failed NVSwitch ASIC, a bad spine "
              "cartridge): every collective over the rack's NVLink runs at factor of its speed on every tray of the "
              "domain alike; the nvlink_domain stage finds the domain slow with no tray to blame, quarantines none "
              "and holds the domain's trays", {"factor": Param(float, 0.2, 0.01, 0.9)}, platforms=("nvl72",)),
    FaultKind("imex_down", "node", "node", "preflight", "imex",
              "the tray's IMEX daemon exits once started (systemctl says nothing, the unit ends failed): its own "
              "status is not READY and every peer's domain view lists it unavailable; preflight's IMEX check fails "
              "this tray and names it on the others", platforms=("nvl72",)),
)}


def resolve_params(kind: FaultKind, given: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Defaults filled in; problems as (param name, message)."""
    problems = [(name, f"unknown parameter for {kind.name}; allowed: {', '.join(kind.params) or 'none'}")
                for name in given if name not in kind.params]
    values = {}
    for name, spec in kind.params.items():
        value: Any = given.get(name, spec.default)
        if spec.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, spec.kind) or isinstance(value, bool):
            problems.append((name, f"must be a {spec.kind.__name__}"))
            continue
        if spec.choices and value not in spec.choices:
            problems.append((name, f"must be one of {', '.join(map(str, spec.choices))}"))
        numeric = float(value) if isinstance(value, int | float) else None
        if numeric is not None and spec.low is not None and spec.high is not None \
                and not spec.low <= numeric <= spec.high:
            problems.append((name, f"must be between {spec.low:g} and {spec.high:g}"))
        values[name] = value
    return values, problems


def target_problem(kind: FaultKind, target: str | None, gpus: int, hcas: list[str]) -> str | None:
    """Why ``target`` cannot be hit by ``kind`` on a host with these GPUs and HCAs, or None."""
    if target is None:
        return "needs a target cable (SWITCH/PORT)" if kind.target == "cable" else None
    gpu = re.fullmatch(r"gpu(\d+)", target)
    if kind.target in (_GPU, "gpu_or_hca") and gpu:
        return None if int(gpu.group(1)) < gpus else f"has GPUs 0-{gpus - 1}, not {target}"
    if kind.target in (_HCA, "gpu_or_hca") and re.fullmatch(r"mlx5_\d+", target):
        return None if target in hcas else f"has no compute HCA {target} (its HCAs: {', '.join(hcas)})"
    if kind.target == "bridge" and re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", target):
        return None
    if kind.target == "cable" and re.fullmatch(r"[A-Za-z0-9._-]+/\d+", target):
        return None
    expected = {"gpu": "gpuN", "hca": "mlx5_N", "gpu_or_hca": "gpuN or mlx5_N", "bridge": "a PCI address",
                "node": "no target", "cable": "SWITCH/PORT"}[kind.target]
    return f"{kind.name} takes {expected} as target, not {target!r}"
