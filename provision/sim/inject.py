"""Node-layer faults, applied to a freshly materialised host before anything runs on it.

Each injector changes the host the way the real defect would show: in sysfs,
config space, NVML's view, the kernel log, the package database. Nothing here
is read by the pipeline directly; the pipeline sees it only through the files
and the tool stand-ins, exactly as it would on a real host.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from provision.hostmodel.devices import NodeHardware
from provision.hostmodel.pciconfig import ACS_ENABLED_DEFAULT, CAP_EXP, ECAP_ACS, capabilities, extended_capabilities
from provision.hostmodel.pciconfig import read as read_config
from provision.hostmodel.pciconfig import write as write_config
from provision.sim import kernel_log
from provision.sim.develop import schedule
from provision.sim.files import replace_file
from provision.sim.node import ACS_STATE_KEY, BOOT_LINES_KEY, append_kernel_log, link_speed_text, sysfs_path, write
from provision.sim.tools.apt import package_entry, read_status, write_status
from provision.sim.tools.system import write_modules

Injector = Callable[["NodeContext", dict[str, Any], str | None], None]


class NodeContext:
    def __init__(self, root: Path, hardware: NodeHardware, state: dict[str, Any], link_rate: str) -> None:
        self.root, self.hardware, self.state, self.link_rate = root, hardware, state, link_rate

    def log(self, lines: list[str], *, every_boot: bool = True) -> None:
        """Lines into the host's kernel ring now; ``every_boot``: a condition of the hardware, which the host logs
        again at each boot as its driver probes the device (kept in the state, logged by ``power_on``), as opposed
        to an event that the next boot's ring no longer holds."""
        append_kernel_log(self.root, lines)
        if every_boot:
            self.state.setdefault(BOOT_LINES_KEY, []).extend(lines)

    def gpu(self, target: str | None) -> dict[str, Any]:
        index = int((target or "gpu0")[3:])
        return next(gpu for gpu in self.state["gpus"] if gpu["index"] == index)

    def bdf_of(self, target: str | None) -> str:
        if target and target.startswith("mlx5_"):
            return next(hca.bdf for hca in self.hardware.hcas if hca.name == target)
        return cast(str, self.gpu(target)["bdf"])

    def device_dir(self, bdf: str) -> Path:
        return self.root / "sys" / sysfs_path(self.hardware, bdf)

    def ib_port(self, target: str | None) -> Path:
        name = target or self.hardware.hcas[0].name
        return self.root / "sys" / "class" / "infiniband" / name / "ports" / "1"

    def set_acs(self, bdf: str, control: int) -> None:
        path = self.device_dir(bdf) / "config"
        space = path.read_bytes()
        offset = extended_capabilities(space)[ECAP_ACS][0]
        replace_file(path, write_config(space, offset + 6, 2, control))
        self.state[ACS_STATE_KEY][bdf] = control


def acs_enabled(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    bridges = [target] if target else [bdf for bdf in node.state[ACS_STATE_KEY]]
    for bdf in bridges:
        node.set_acs(bdf, ACS_ENABLED_DEFAULT)


def _install(node: NodeContext, names: list[str], version: str, *, held: bool) -> None:
    packages = read_status(node.root)
    for name in names:
        packages[name] = package_entry(name, version, held=held)
    write_status(node.root, packages)


def _driver_packages(version: str) -> list[str]:
    branch = version.split(".")[0]
    return [f"nvidia-driver-{branch}", f"nvidia-utils-{branch}", f"nvidia-fabricmanager-{branch}"]


def _boot_with_driver(node: NodeContext, version: str) -> None:
    node.state["driver_installed"] = node.state["driver_loaded"] = version
    node.state["modules"] = [*node.state["modules"], "nvidia", "nvidia_uvm", "nvidia_modeset"]
    node.state["services"].update({"nvidia-persistenced": {"enabled": True, "active": True},
                                   "nvidia-fabricmanager": {"enabled": True, "active": True}})
    write_modules(node.root, node.state)
    # the next boot loads what is installed then
    node.log(kernel_log.driver_load_lines(version, node.hardware.machine), every_boot=False)


def wrong_driver(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    version = params["version"]
    _install(node, _driver_packages(version), f"{version}-1", held=True)
    _boot_with_driver(node, version)


def peermem_missing(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    pinned = node.state["pinned_driver"]
    _install(node, _driver_packages(pinned), f"{pinned}-1", held=False)
    _boot_with_driver(node, pinned)
    node.state["peermem_missing"] = True


def pin_unavailable(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    pinned = f"{node.state['pinned_driver']}-1"
    branch, minor, *rest = node.state["pinned_driver"].split(".")
    neighbour = ".".join([branch, str(int(minor) - 1), *rest]) + "-1"  # the mirror has the branch, not the pin
    node.state["packages_available"] = {
        origin: {name: [neighbour if version == pinned else version for version in versions]
                 for name, versions in offered.items()}
        for origin, offered in node.state["packages_available"].items()}


def reboot_hang(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.state["hang_on_reboot"] = True


def peermem_unregistered(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.state["peermem_registers"] = False


def gpu_missing(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    gpu = node.gpu(target)
    bdf = gpu["bdf"]
    shutil.rmtree(node.device_dir(bdf))
    (node.root / "sys" / "bus" / "pci" / "devices" / bdf).unlink()
    node.log([f"pcieport {node.hardware.device(bdf).parent}: pciehp: Slot(28): Link Down",
                                  f"NVRM: GPU {bdf}: RmInitAdapter failed! (0x22:0x56:667)",
                                  f"nvidia {bdf}: probe with driver nvidia failed with error -1"])


def pcie_downtrained(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    bdf = node.bdf_of(target)
    device = node.hardware.device(bdf)
    directory = node.device_dir(bdf)
    space = (directory / "config").read_bytes()
    offset = capabilities(space)[CAP_EXP]
    status = read_config(space, offset + 0x12, 2)
    gen = params["gen"] or (status & 0xF)
    width = min(params["width"], device.link.max_width)
    replace_file(directory / "config", write_config(space, offset + 0x12, 2, (status & ~0x3FF) | gen | (width << 4)))
    write(directory / "current_link_speed", link_speed_text(gen) + "\n")
    write(directory / "current_link_width", f"{width}\n")
    node.log([kernel_log.limited_by_line(device.driver, bdf, gen, width, device.link.max_gen,
                                                             device.link.max_width, device.parent or bdf)])


def xid(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.log(kernel_log.xid_lines(node.gpu(target)["bdf"], params["code"]), every_boot=params["after_boot"] == "again")


def ecc_uncorrectable(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    gpu = node.gpu(target)
    gpu["ecc_uncorrected_volatile"] = params["count"]
    gpu["retired_dbe"] = min(params["count"], 64)
    gpu["retired_pending"] = True
    node.log(kernel_log.xid_lines(gpu["bdf"], 48))


def nvlink_errors_growing(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.gpu(target)["nvlink_error_growth"] = {"link": params["link"], "per_hour": params["per_hour"],
                                               "since": time.time() - 3600}


def nvlink_recovery_growing(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    """From now on the simulated clock, the GPU's ``link`` retrains ``per_hour`` times an hour (nvidia-smi
    nvlink -e counts them as recovery events)."""
    node.gpu(target)["nvlink_recovery_growth"] = {"link": params["link"], "per_hour": params["per_hour"],
                                                  "since": time.time()}


def row_remap_pending(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    gpu = node.gpu(target)
    gpu["remap_pending"] = True
    gpu["remapped_uncorrectable"] = 1
    node.log(kernel_log.xid_lines(gpu["bdf"], 63))


def thermal_throttle(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    gpu = node.gpu(target)
    gpu["temperature_c"] = params["temperature_c"]
    gpu["throttle_reasons"] = ["sw_thermal_slowdown", "hw_slowdown", "hw_thermal_slowdown"]


def hca_port_down(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    port = node.ib_port(target)
    write(port / "state", "1: DOWN\n")
    write(port / "phys_state", "2: Polling\n")
    write(port / "rate", "10 Gb/sec (4X SDR)\n")
    hca = next(hca for hca in node.hardware.hcas if hca.name == (target or node.hardware.hcas[0].name))
    node.log([f"mlx5_core {hca.bdf}: Port module event: module 0, Cable unplugged"])


def ib_link_low_rate(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    rates = {"EDR": "100 Gb/sec (4X EDR)", "HDR": "200 Gb/sec (4X HDR)"}
    write(node.ib_port(target) / "rate", rates[params["rate"]] + "\n")


def unknown_kernel_log_line(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.log([params["line"]])


def disk_full(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    disk = next((disk for disk in node.state["disks"] if disk["mount"] == params["mount"]), node.state["disks"][0])
    disk["used_kb"] = int(disk["size_kb"] * params["percent"] / 100)


def gpu_memory_mismatch(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.gpu(target)["memory_mismatch"] = True  # seen only by a test that writes and reads back its memory


def gpu_power_low(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.gpu(target)["max_power_under_load_w"] = params["max_w"]  # idle draw is far below either way


def pcie_replays(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.gpu(target)["pcie_replays_per_minute_under_load"] = params["per_minute"]


def thermal_throttle_after(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    """Healthy until the simulated clock has run ``after_h`` hours: then thermal slowdown, and it stays."""
    node.gpu(target)["throttle_after"] = {"since": time.time(), "after_h": params["after_h"],
                                          "temperature_c": params["temperature_c"]}
    schedule(node.root)


def clock_sag(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    """Healthy until the simulated clock has run ``after_h`` hours: then the GPU clocks at ``factor`` under load, and
    nothing names why. nvidia-smi reports the sagged clock while a worker computes on it; the rank shim slows that
    worker's matmul alike, from the same moment."""
    gpu = node.gpu(target)
    sag = {"since": time.time(), "after_h": params["after_h"], "factor": params["factor"]}
    gpu["clock_sag"] = sag
    node.state.setdefault("rank_faults", []).append({"kind": "clock_sag", "local_rank": gpu["index"], **sag})


def symbol_errors_growing(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    """The HCA port's symbol errors grow by ``per_hour`` on the simulated clock (a marginal cable or transceiver),
    that rate doubling every ``doubling_h`` hours when given (a link degrading)."""
    name = target or node.hardware.hcas[0].name
    counter = node.ib_port(name) / "counters" / "symbol_error"
    node.state.setdefault("ib_counter_growth", []).append(
        {"hca": name, "counter": "symbol_error", "per_hour": params["per_hour"], "since": time.time(),
         "doubling_h": params.get("doubling_h", 0.0),
         "base": int(counter.read_text().strip() or 0) if counter.exists() else 0})
    schedule(node.root)


def rank_fault(kind: str) -> Injector:
    """Rank-layer faults live in the processes of a test; the host records them for its Python's fault shim."""
    def inject(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
        local_rank = int(target[3:]) if target and target.startswith("gpu") else int(params.get("local_rank", 0))
        node.state.setdefault("rank_faults", []).append({"kind": kind, "local_rank": local_rank, **params})
    return inject


def fabricmanager_down(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    """nvidia-fabricmanager starts and dies (an NVSwitch that fails to train, a fabric manager of another build):
    systemctl start says nothing, the unit ends up failed, as after every later start."""
    node.state.setdefault("units_crash_after_start", []).append("nvidia-fabricmanager")
    service = node.state.setdefault("services", {}).get("nvidia-fabricmanager")
    if service is not None and service.get("active"):
        service.update(active=False, crashed=True)


def perftest_without_cuda(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.state["perftest_without_cuda"] = True


def application_clocks_low(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.gpu(target)["application_clock_mhz"] = params["mhz"]


def mig_enabled(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.gpu(target)["mig_mode"] = "Enabled"


def rails_swapped(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    """Two HCAs come up under each other's names (the driver probed them in another order, or the cards sit in
    each other's slots): each class link points at the other's PCI device, so the spec's rail map is wrong."""
    names = [hca.name for hca in node.hardware.hcas]
    first = target or names[0]
    second = params["with"] or names[(names.index(first) + 1) % len(names)]
    links = node.root / "sys" / "class" / "infiniband"
    one, other = os.readlink(links / first), os.readlink(links / second)
    for name, pointed in ((first, other), (second, one)):
        (links / name).unlink()
        os.symlink(pointed, links / name)


def degraded_hca_port(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    """Nothing a host tool reads changes (the port is ACTIVE at its rate): the slowness is in the data path of the
    rail's rank, which the rank shim applies to every inter-node collective it takes part in."""
    hca = next(hca for hca in node.hardware.hcas if hca.name == (target or node.hardware.hcas[0].name))
    node.state.setdefault("rank_faults", []).append({"kind": "degraded_hca_port", "local_rank": hca.gpu,
                                                     "hca": hca.name, **params})


def fabric_insufficient_resources(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    """NMX placed the GPU in no partition: nvidia-smi prints CliqueId 0 and the zero ClusterUUID for it."""
    node.gpu(target)["fabric"].update(state="Completed", status="Insufficient Resources")


def fabric_unhealthy(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.gpu(target)["fabric"]["summary"] = "Unhealthy"


def foreign_partition(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    """Every GPU of the tray in another rack's partition: that partition's ClusterUUID and CliqueId."""
    from provision.sim.nvl72 import partition_of

    cluster_uuid, clique_id = partition_of(0, "another rack than " + node.state["nvlink_domain"]["domain"])
    for gpu in node.state["gpus"]:
        gpu["fabric"].update(cluster_uuid=cluster_uuid, clique_id=clique_id)


def nvlink_xid149(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    root = node.gpu(target)
    others = [gpu["bdf"] for gpu in node.state["gpus"] if gpu["index"] != root["index"]]
    node.log(kernel_log.nvlink5_xid_lines(root["bdf"], others), every_boot=params["after_boot"] == "again")


def degraded_switch_tray(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    """Every GPU of the tray reaches the rack's NVLink through the degraded switch tray: each rank's collectives
    complete at ``factor`` of their speed, on the wire (no rank a straggler: the whole domain alike)."""
    faults = node.state.setdefault("rank_faults", [])
    for gpu in range(len(node.hardware.gpus)):
        faults.append({"kind": "degraded_switch_tray", "local_rank": gpu, "factor": params["factor"]})


def imex_down(node: NodeContext, params: dict[str, Any], target: str | None) -> None:
    node.state.setdefault("units_crash_after_start", []).append("nvidia-imex")


INJECTORS: dict[str, Injector] = {
    **{kind: rank_fault(kind) for kind in ("slow_gpu", "rank_hang", "rank_slow", "rank_wrong_result",
                                                 "collective_corruption", "step_slowdown",
                                                 "worker_error")},
    "acs_enabled": acs_enabled, "wrong_driver": wrong_driver, "pin_unavailable": pin_unavailable,
    "reboot_hang": reboot_hang, "degraded_hca_port": degraded_hca_port,
    "peermem_missing": peermem_missing,
    "peermem_unregistered": peermem_unregistered, "gpu_missing": gpu_missing, "pcie_downtrained": pcie_downtrained,
    "xid": xid, "ecc_uncorrectable": ecc_uncorrectable, "row_remap_pending": row_remap_pending,
    "thermal_throttle": thermal_throttle, "nvlink_errors_growing": nvlink_errors_growing,
    "nvlink_recovery_growing": nvlink_recovery_growing,
    "hca_port_down": hca_port_down, "ib_link_low_rate": ib_link_low_rate, "rails_swapped": rails_swapped,
    "fabricmanager_down": fabricmanager_down, "mig_enabled": mig_enabled,
    "perftest_without_cuda": perftest_without_cuda, "application_clocks_low": application_clocks_low,
    "unknown_kernel_log_line": unknown_kernel_log_line, "disk_full": disk_full,
    "gpu_memory_mismatch": gpu_memory_mismatch, "gpu_power_low": gpu_power_low, "pcie_replays": pcie_replays,
    "thermal_throttle_after": thermal_throttle_after, "symbol_errors_growing": symbol_errors_growing,
    "clock_sag": clock_sag,
    "fabric_insufficient_resources": fabric_insufficient_resources, "fabric_unhealthy": fabric_unhealthy,
    "foreign_partition": foreign_partition, "imex_down": imex_down, "degraded_switch_tray": degraded_switch_tray,
    "nvlink_xid149": nvlink_xid149,
}
