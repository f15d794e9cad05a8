"""``nvidia-smi`` over a simulated host, in the real tool's formats.

Supported: ``-L``; ``-q`` with ``-d`` sections and ``-i``; ``--query-gpu`` and
``--query-remapped-rows`` with ``--format=csv[,noheader][,nounits]``;
``nvlink -s`` / ``-e``; ``topo -m``. GPUs are the ones present in sysfs, so a
GPU that fell off the bus disappears here and from ``lspci`` alike. Without
the driver package the command does not exist; with a driver installed but an
older module still loaded, NVML reports the version mismatch until a reboot.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, cast

from provision.catalog import GPU_MODELS, NVLINK5_MODELS
from provision.hostmodel import pciconfig
from provision.sim.develop import hours_since
from provision.sim.node import lines_since_boot, load_state, save_state
from provision.sim.tools.apt import installed_version
from provision.sim.tools.common import ToolError, not_simulated, service_active

PRODUCT_NAMES = {"H100-SXM-80GB": "NVIDIA H100 80GB HBM3", "H200-SXM-141GB": "NVIDIA H200",
                 "A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB", "B200-SXM-180GB": "NVIDIA B200",
                 "B300-SXM-288GB": "NVIDIA B300", "GB200-186GB": "NVIDIA GB200", "GB300-288GB": "NVIDIA GB300"}
#: The Fabric block's Health flags in the order driver 595 prints them (the real GB200 tray), and the two it
#: prints ``N/A`` for there.
FABRIC_FLAGS = ("Route Recovery in progress", "Route Unhealthy", "Access Timeout Recovery")
FABRIC_NOT_AVAILABLE = ("Incorrect Configuration", "Partition Assigned")
THROTTLE_REASONS = (  # (-q label, query field suffix, state name)
    ("Idle", "gpu_idle", "gpu_idle"),
    ("Applications Clocks Setting", "applications_clocks_setting", "applications_clocks"),
    ("SW Power Cap", "sw_power_cap", "sw_power_cap"),
    ("HW Slowdown", "hw_slowdown", "hw_slowdown"),
    ("HW Thermal Slowdown", "hw_thermal_slowdown", "hw_thermal_slowdown"),
    ("HW Power Brake Slowdown", "hw_power_brake_slowdown", "hw_power_brake"),
    ("Sync Boost", "sync_boost", "sync_boost"),
    ("SW Thermal Slowdown", "sw_thermal_slowdown", "sw_thermal_slowdown"),
)
THROTTLE_BITS = {"gpu_idle": 0x1, "applications_clocks": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
                 "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40, "hw_power_brake": 0x80}
#: The simulated GPUs' default application (graphics) clock.
DEFAULT_APPLICATION_MHZ = 1980
#: Per model: the SM clock's maximum (MHz) and the board's power limit (W), as NVIDIA's datasheets give them, and
#: what an idle board shows (the H100's 345 MHz, ~70 W).
CLOCK_AND_POWER = {"H100-SXM-80GB": (1980, 700.0), "H200-SXM-141GB": (1980, 700.0), "A100-SXM4-80GB": (1410, 400.0),
                   "B200-SXM-180GB": (1965, 1000.0)}
IDLE_MHZ, IDLE_W = 345, 71.3
#: Where a test's worker marks the GPU it computes on (``<pid>`` holding its local rank): the GPU is busy while that
#: process lives, as NVML sees a context on it.
BUSY = "var/lib/provision-sim/busy"
#: What a thermally slowed GPU clocks at under load.
THROTTLED_MHZ = 1410
#: The driver branch whose nvidia-smi names clock event reasons (the throttle names stay as aliases).
EVENT_NAMES_FROM = 535
SECTIONS = {"MEMORY", "UTILIZATION", "ECC", "TEMPERATURE", "POWER", "CLOCK", "COMPUTE", "PIDS", "PERFORMANCE",
            "SUPPORTED_CLOCKS", "PAGE_RETIREMENT", "ACCOUNTING", "ENCODER_STATS", "FBC_STATS", "ROW_REMAPPER"}


class Smi:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = load_state(root)
        self.installed = installed_version(root, "nvidia-utils-")
        if self.installed is None:
            raise ToolError("nvidia-smi: command not found", 127)
        loaded = self.state.get("driver_loaded")
        if loaded is None:
            raise ToolError("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
                            "that the latest NVIDIA driver is installed and running.", 9)
        if loaded != self.installed:
            raise ToolError(f"Failed to initialize NVML: Driver/library version mismatch\n"
                            f"NVML library version: {self.installed.rsplit('.', 1)[0]}", 18)
        self.driver = loaded
        self.model = GPU_MODELS[self.state["gpu_model"]]
        devices = self.root / "sys" / "bus" / "pci" / "devices"
        self.gpus = [gpu for gpu in self.state["gpus"] if (devices / gpu["bdf"] / "config").exists()]
        self.busy = self._busy_indices()

    def _busy_indices(self) -> set[int]:
        """The GPUs a live test worker computes on (a marker whose process has ended is left over: not busy)."""
        busy: set[int] = set()
        try:
            markers = list((self.root / BUSY).iterdir())
        except OSError:
            return busy
        for marker in markers:
            if not marker.name.isdigit():
                continue
            try:
                os.kill(int(marker.name), 0)
            except ProcessLookupError:
                marker.unlink(missing_ok=True)  # its worker has ended
                continue
            except PermissionError:  # another user's live process
                pass
            try:
                busy.add(int(marker.read_text().strip()))
            except (OSError, ValueError):
                continue
        return busy

    def active_reasons(self, gpu: dict[str, Any]) -> set[str]:
        """The clock-event reasons in force: the state's, else idle unless a worker computes on the GPU."""
        return set(gpu["throttle_reasons"]) or (set() if gpu["index"] in self.busy else {"gpu_idle"})

    def sm_clock_and_power(self, gpu: dict[str, Any]) -> tuple[int, float]:
        """The SM clock (MHz) and board power (W) now: idle figures unless a worker computes on the GPU; under load
        the application clock, a thermal slowdown's clock, or a sagged clock (the ``clock_sag`` fault, which the
        driver names no reason for), and power with the clock, up to what the board can draw."""
        top, limit = CLOCK_AND_POWER.get(self.model.name, (DEFAULT_APPLICATION_MHZ, 700.0))
        if gpu["index"] not in self.busy and not gpu["throttle_reasons"]:
            return IDLE_MHZ, IDLE_W
        mhz = int(gpu.get("application_clock_mhz", top))
        if {"hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake"} & set(gpu["throttle_reasons"]):
            mhz = min(mhz, THROTTLED_MHZ)
        sag = gpu.get("clock_sag")
        if sag and hours_since(self.state, sag["since"]) >= sag["after_h"]:
            mhz = int(mhz * sag["factor"])
        watts = min(limit * 0.985 * mhz / top, float(gpu.get("max_power_under_load_w", limit)))
        return mhz, round(watts, 2)

    def link(self, gpu: dict[str, Any]) -> tuple[int, int, int, int]:
        space = (self.root / "sys/bus/pci/devices" / gpu["bdf"] / "config").read_bytes()
        offset = pciconfig.capabilities(space)[pciconfig.CAP_EXP]
        cap, sta = pciconfig.read(space, offset + 0x0C, 4), pciconfig.read(space, offset + 0x12, 2)
        return cap & 0xF, (cap >> 4) & 0x3F, sta & 0xF, (sta >> 4) & 0x3F

    def bus_id(self, gpu: dict[str, Any]) -> str:
        return "0000" + cast(str, gpu["bdf"]).upper()

    def name(self) -> str:
        return PRODUCT_NAMES[self.model.name]

    def select(self, index: str | None) -> list[dict[str, Any]]:
        if index is None:
            return self.gpus
        chosen = [gpu for gpu in self.gpus if str(gpu["index"]) == index or gpu["uuid"] == index]
        if not chosen:
            raise ToolError("No devices were found", 6)
        return chosen

    def lost(self, gpu: dict[str, Any]) -> bool:
        """Fallen off the bus (Xid 79, or the driver's "fallen off the bus" record) since the host last booted:
        only a reboot brings it back."""
        pci = cast(str, gpu["bdf"]).lower()
        xid = re.compile(rf"NVRM: Xid \(PCI:{re.escape(pci[: pci.rindex('.')])}\): 79,", re.IGNORECASE)
        return any(xid.search(line) or (pci in line.lower() and "fallen off the bus" in line)
                   for line in lines_since_boot(self.root))

    # -- -r ------------------------------------------------------------------------
    def reset(self, index: str | None) -> int:
        """``nvidia-smi -r -i GPU``, in the words NVIDIA's tool prints (recorded in NVIDIA/NVSentinel #1690 and
        #1692): a GPU fallen off the bus since the last boot is lost, in the words nvidia-smi prints for one
        (JosephKJ/OWOD #81, NVIDIA/nvidia-docker #1553), exit 15 (nvidia-smi(1): "the GPU has fallen off the bus
        or has otherwise become inaccessible"); refused while anything holds the device (the persistence daemon, a
        process computing on it), exit 255; else the GPU is reset, its volatile ECC counts cleared and a pending
        row remap or page retirement applied. Every GPU at once (no ``-i``) is not simulated: the tool's words for
        several GPUs are not recorded here."""
        if index is None:
            not_simulated("nvidia-smi -r", "without -i (the output for every GPU at once is not recorded)")
        chosen = self.select(index)
        gpu = chosen[0]
        if self.lost(gpu):
            print(f"Unable to determine the device handle for GPU {cast(str, gpu['bdf']).upper()}: GPU is lost. "
                  "Reboot the system to recover this GPU")
            return 15
        if service_active(self.state, "nvidia-persistenced") or gpu["index"] in self.busy:
            print("The following GPUs could not be reset:")
            print(f"  GPU {self.bus_id(gpu)}: In use by another client")
            print()
            print("1 device is currently being used by one or more other processes (e.g. Fabric")
            print("Manager, CUDA application, graphics application such as an X server, or a")
            print("monitoring application such as another instance of nvidia-smi). Please first kill")
            print("all processes using this device and all compute applications running in the")
            print("system.")
            return 255
        state = load_state(self.root)
        stored = next(item for item in state["gpus"] if item["bdf"] == gpu["bdf"])
        # what was pending takes effect at the reset (NVIDIA's page retirement and row remapping notes: "on the
        # next GPU reset or driver reload"): the remap applied, the pages retired
        stored.update(ecc_uncorrected_volatile=0, ecc_corrected_volatile=0, remap_pending=False,
                      retired_pending=False)
        save_state(self.root, state)
        print(f"GPU {self.bus_id(gpu)} was successfully reset.")
        return 0

    # -- -L ------------------------------------------------------------------------
    def list_gpus(self) -> None:
        for position, gpu in enumerate(self.gpus):
            print(f"GPU {position}: {self.name()} (UUID: {gpu['uuid']})")

    # -- -q -------------------------------------------------------------------------
    def query(self, sections: set[str], index: str | None) -> None:
        out = ["", "==============NVSMI LOG==============", "",
               _kv(0, "Timestamp", time.strftime("%a %b %d %H:%M:%S %Y")),
               _kv(0, "Driver Version", self.driver), _kv(0, "CUDA Version", "12.2"), "",
               _kv(0, "Attached GPUs", str(len(self.gpus)))]
        for gpu in self.select(index):
            out.append(f"GPU {self.bus_id(gpu)}")
            out += self._gpu_tree(gpu, sections)
            out.append("")
        print("\n".join(out))

    def _gpu_tree(self, gpu: dict[str, Any], sections: set[str]) -> list[str]:
        everything = not sections
        lines: list[str] = []
        if everything:
            max_gen, max_width, gen, width = self.link(gpu)
            lines += [
                _kv(1, "Product Name", self.name()), _kv(1, "Product Brand", "NVIDIA"),
                _kv(1, "Persistence Mode",
                    "Enabled" if service_active(self.state, "nvidia-persistenced") else "Disabled"),
                _kv(1, "Serial Number", gpu["serial"]), _kv(1, "GPU UUID", gpu["uuid"]),
                _kv(1, "Minor Number", str(gpu["index"])), _kv(1, "VBIOS Version", gpu["vbios"]),
            ]
            lines += self._platform_info(gpu)
            lines += [
                "    PCI", _kv(2, "Bus", "0x" + gpu["bdf"][5:7]), _kv(2, "Device", "0x00"),
                _kv(2, "Domain", "0x" + gpu["bdf"][:4]),
                _kv(2, "Device Id", f"0x{self.model.pci_device_id.upper()}10DE"),
                _kv(2, "Bus Id", self.bus_id(gpu)), "        GPU Link Info", "            PCIe Generation",
                _kv(4, "Max", str(max_gen)), _kv(4, "Current", str(gen)), "            Link Width",
                _kv(4, "Max", f"{max_width}x"), _kv(4, "Current", f"{width}x"),
            ]
        if everything or "PERFORMANCE" in sections:
            active = self.active_reasons(gpu)
            lines += [_kv(1, "Performance State", "P0"), "    Clocks Event Reasons"]
            for label, _field, key in THROTTLE_REASONS:
                depth = 3 if key in ("hw_thermal_slowdown", "hw_power_brake") else 2
                lines.append(_kv(depth, label, "Active" if key in active else "Not Active"))
        if everything or "ECC" in sections:
            dram_u, dram_c = gpu["ecc_uncorrected_volatile"], gpu["ecc_corrected_volatile"]
            lines += ["    ECC Mode", _kv(2, "Current", gpu["ecc_mode"]), _kv(2, "Pending", gpu["ecc_mode"]),
                      "    ECC Errors", "        Volatile", _kv(3, "SRAM Correctable", "0"),
                      _kv(3, "SRAM Uncorrectable", "0"), _kv(3, "DRAM Correctable", str(dram_c)),
                      _kv(3, "DRAM Uncorrectable", str(dram_u)), "        Aggregate",
                      _kv(3, "SRAM Correctable", "0"), _kv(3, "SRAM Uncorrectable", "0"),
                      _kv(3, "DRAM Correctable", str(dram_c)), _kv(3, "DRAM Uncorrectable", str(dram_u))]
        if everything or "PAGE_RETIREMENT" in sections:
            lines += ["    Retired Pages", _kv(2, "Single Bit ECC", str(gpu["retired_sbe"])),
                      _kv(2, "Double Bit ECC", str(gpu["retired_dbe"])),
                      _kv(2, "Pending Page Blacklist", "Yes" if gpu["retired_pending"] else "No")]
        if everything or "ROW_REMAPPER" in sections:
            lines += ["    Remapped Rows", _kv(2, "Correctable Error", str(gpu["remapped_correctable"])),
                      _kv(2, "Uncorrectable Error", str(gpu["remapped_uncorrectable"])),
                      _kv(2, "Pending", "Yes" if gpu["remap_pending"] else "No"),
                      _kv(2, "Remapping Failure Occurred", "Yes" if gpu["remap_failure"] else "No")]
        if everything or "TEMPERATURE" in sections:
            lines += ["    Temperature", _kv(2, "GPU Current Temp", f"{gpu['temperature_c']} C"),
                      _kv(2, "GPU Shutdown Temp", "92 C"), _kv(2, "GPU Slowdown Temp", "89 C"),
                      _kv(2, "GPU Max Operating Temp", "87 C")]
        if everything:
            lines += self._fabric(gpu)
            lines.append(_kv(1, "Processes", "None"))
        return lines

    def _platform_info(self, gpu: dict[str, Any]) -> list[str]:
        """A tray GPU's Platform Info (where the rack says it sits) and its C2C mode, in the real tray's order; an
        HGX board's output here prints neither."""
        place = self.state.get("nvlink_domain")
        if self.state.get("platform") != "nvl72" or place is None:
            return []
        return ["    Platform Info", _kv(2, "Chassis Serial Number", place["chassis_serial"]),
                _kv(2, "Slot Number", str(place["slot"])), _kv(2, "Tray Index", str(place["tray_index"])),
                _kv(2, "Host ID", str(place["host_id"])), _kv(2, "Peer Type", "Switch Connected"),
                _kv(2, "Module Id", str(gpu["module_id"])), _kv(2, "GPU Fabric GUID", _fabric_guid(gpu)),
                _kv(1, "GPU C2C Mode", "Enabled")]

    def _fabric(self, gpu: dict[str, Any]) -> list[str]:
        """A tray GPU's Fabric block (field guide 8.2). A partition not set up (``In Progress``, ``Insufficient
        Resources``) has CliqueId 0 and the all-zero ClusterUUID, as a GPU outside any partition prints them."""
        fabric, place = gpu.get("fabric"), self.state.get("nvlink_domain")
        if fabric is None or place is None:
            return []
        joined = fabric["state"] == "Completed" and fabric["status"] == "Success"
        cluster_uuid = fabric.get("cluster_uuid", place["cluster_uuid"]) if joined else ZERO_UUID
        clique_id = str(fabric.get("clique_id", place["clique_id"])) if joined else "0"
        lines = ["    Fabric", _kv(2, "State", fabric["state"]), _kv(2, "Status", fabric["status"]),
                 _kv(2, "CliqueId", clique_id), _kv(2, "ClusterUUID", cluster_uuid),
                 "        Health", _kv(3, "Summary", fabric["summary"]), _kv(3, "Bandwidth", fabric["bandwidth"])]
        lines += [_kv(3, flag, str(flag in fabric["flags"])) for flag in FABRIC_FLAGS]
        lines += [_kv(3, flag, "N/A") for flag in FABRIC_NOT_AVAILABLE]
        return lines

    # -- --query-gpu ------------------------------------------------------------------
    def gpu_field(self, gpu: dict[str, Any], field: str) -> tuple[str, str]:
        """(value, unit) of one ``--query-gpu`` field."""
        max_gen, max_width, gen, width = self.link(gpu)
        active = self.active_reasons(gpu)
        mask = sum(THROTTLE_BITS[name] for name in active)
        mhz, watts = self.sm_clock_and_power(gpu)
        top, limit = CLOCK_AND_POWER.get(self.model.name, (DEFAULT_APPLICATION_MHZ, 700.0))
        values: dict[str, tuple[str, str]] = {
            "index": (str(gpu["index"]), ""), "uuid": (gpu["uuid"], ""), "serial": (gpu["serial"], ""),
            "name": (self.name(), ""), "pci.bus_id": (self.bus_id(gpu), ""), "driver_version": (self.driver, ""),
            "vbios_version": (gpu["vbios"], ""), "temperature.gpu": (str(gpu["temperature_c"]), ""),
            "ecc.mode.current": (gpu["ecc_mode"], ""), "ecc.mode.pending": (gpu["ecc_mode"], ""),
            "ecc.errors.uncorrected.volatile.total": (str(gpu["ecc_uncorrected_volatile"]), ""),
            "ecc.errors.corrected.volatile.total": (str(gpu["ecc_corrected_volatile"]), ""),
            "memory.total": (str(self.model.framebuffer_mib or self.model.memory_gib * 1024 - 373), " MiB"),
            "pcie.link.gen.current": (str(gen), ""), "pcie.link.gen.max": (str(max_gen), ""),
            "pcie.link.width.current": (str(width), ""), "pcie.link.width.max": (str(max_width), ""),
            "persistence_mode": ("Enabled" if service_active(self.state, "nvidia-persistenced") else "Disabled", ""),
            "clocks_throttle_reasons.active": (f"0x{mask:016X}", ""),
            "mig.mode.current": (gpu.get("mig_mode", "Disabled"), ""),
            "clocks.applications.graphics": (str(gpu.get("application_clock_mhz", DEFAULT_APPLICATION_MHZ)), " MHz"),
            "clocks.default_applications.graphics": (str(DEFAULT_APPLICATION_MHZ), " MHz"),
            "clocks.sm": (str(mhz), " MHz"), "clocks.current.sm": (str(mhz), " MHz"),
            "clocks.max.sm": (str(top), " MHz"), "power.draw": (f"{watts:.2f}", " W"),
            "power.limit": (f"{limit:.2f}", " W"),
        }
        for _label, suffix, key in THROTTLE_REASONS:
            values[f"clocks_throttle_reasons.{suffix}"] = ("Active" if key in active else "Not Active", "")
        if self.branch >= EVENT_NAMES_FROM:  # 535 renamed throttle reasons to event reasons, keeping the old names
            values.update({name.replace("clocks_throttle_reasons.", "clocks_event_reasons."): value
                           for name, value in list(values.items()) if name.startswith("clocks_throttle_reasons.")})
        if field not in values:
            raise ToolError(f'Field "{field}" is not a valid field to query.', 2)
        return values[field]

    @property
    def branch(self) -> int:
        return int(self.driver.split(".")[0])

    def help_query_gpu(self) -> None:
        """``--help-query-gpu`` as the driver's branch prints it: each field's quoted name (with its older alias
        after " or "), a line saying what it is, a blank line."""
        print('List of valid properties to query for the switch "--query-gpu":\n')
        for name in self._field_names():
            if name.startswith("clocks_event_reasons."):
                continue
            if name.startswith("clocks_throttle_reasons.") and self.branch >= EVENT_NAMES_FROM:
                shown = f'"{name.replace("clocks_throttle_reasons.", "clocks_event_reasons.")}" or "{name}"'
            elif name == "clocks.sm":
                shown = '"clocks.current.sm" or "clocks.sm"'
            else:
                shown = f'"{name}"'
            print(f"{shown}\nThe simulated value of {name}.\n")

    def _field_names(self) -> list[str]:
        values = ["index", "uuid", "serial", "name", "pci.bus_id", "driver_version", "vbios_version",
                  "temperature.gpu", "ecc.mode.current", "ecc.mode.pending", "ecc.errors.uncorrected.volatile.total",
                  "ecc.errors.corrected.volatile.total", "memory.total", "pcie.link.gen.current", "pcie.link.gen.max",
                  "pcie.link.width.current", "pcie.link.width.max", "persistence_mode",
                  "clocks_throttle_reasons.active", "mig.mode.current", "clocks.applications.graphics",
                  "clocks.default_applications.graphics", "clocks.sm", "clocks.max.sm", "power.draw", "power.limit"]
        return values + [f"clocks_throttle_reasons.{suffix}" for _label, suffix, _key in THROTTLE_REASONS]

    def query_gpu(self, fields: list[str], options: set[str], index: str | None) -> None:
        rows = []
        if "noheader" not in options:
            header = []
            for field in fields:
                unit = self.gpu_field(self.gpus[0], field)[1] if self.gpus else ""
                header.append(field + (f" [{unit.strip()}]" if unit and "nounits" not in options else ""))
            rows.append(", ".join(header))
        for gpu in self.select(index):
            cells = []
            for field in fields:
                value, unit = self.gpu_field(gpu, field)
                cells.append(value + ("" if "nounits" in options else unit))
            rows.append(", ".join(cells))
        print("\n".join(rows))

    def query_remapped_rows(self, fields: list[str], options: set[str]) -> None:
        rows = [] if "noheader" in options else [", ".join(fields)]
        for gpu in self.gpus:
            values = {"gpu_bus_id": self.bus_id(gpu), "gpu_uuid": gpu["uuid"],
                      "remapped_rows.failure": "1" if gpu["remap_failure"] else "0",
                      "remapped_rows.pending": "1" if gpu["remap_pending"] else "0",
                      "remapped_rows.correctable": str(gpu["remapped_correctable"]),
                      "remapped_rows.uncorrectable": str(gpu["remapped_uncorrectable"])}
            unknown = [field for field in fields if field not in values]
            if unknown:
                raise ToolError(f'Field "{unknown[0]}" is not a valid field to query.', 2)
            rows.append(", ".join(values[field] for field in fields))
        print("\n".join(rows))

    # -- nvlink / topo ------------------------------------------------------------------
    def nvlink(self, args: list[str]) -> None:
        mode = args[0] if args else "-s"
        out = []
        for gpu in self.gpus:
            out.append(f"GPU {gpu['index']}: {self.name()} (UUID: {gpu['uuid']})")
            inactive = set(gpu["nvlink_inactive"])
            links = range(self.model.nvlink_links)
            if mode in ("-s", "--status"):
                if len(inactive) >= self.model.nvlink_links:
                    out.append("NVML: Unable to retrieve NVLink information as all links are inactive")
                    continue
                for link in links:
                    speed = "<inactive>" if link in inactive else f"{self.model.nvlink_link_gbps:g} GB/s"
                    out.append(f"\t Link {link}: {speed}")
            elif mode in ("-e", "--errorcounters"):
                for link in links:
                    crc = self._grown(gpu.get("nvlink_error_growth"), link)  # a failing lane: errors pile up
                    recoveries = self._grown(gpu.get("nvlink_recovery_growth"), link)  # a link that keeps retraining
                    hopper = [("Replay Errors", crc // 10), ("Recovery Errors", recoveries), ("CRC Errors", crc)]
                    counters = (self._nvlink5_counters(link, crc, recoveries) if self.model.name in NVLINK5_MODELS
                                else hopper)
                    out += [f"\t Link {link}: {kind}: {count}" for kind, count in counters]
            else:
                not_simulated("nvidia-smi nvlink", mode)
        print("\n".join(out))

    def _grown(self, growth: dict[str, Any] | None, link: int) -> int:
        """A fault's count on ``link`` by now: ``per_hour`` on the simulated clock since it began."""
        if not growth or growth["link"] != link:
            return 0
        return int(growth["per_hour"] * hours_since(self.state, growth["since"]))

    def _nvlink5_counters(self, link: int, errors: int, recoveries: int) -> list[tuple[str, object]]:
        """A Blackwell link's counters as driver 595 prints them (the names a B300 printed, field guide 8.3): the
        errors, the recovery events and their total, then what is no error: traffic, corrected codewords by the
        symbols fixed (bucket 0 in the billions on a healthy link), the BER floor, raw pre-correction lane counts
        (non-zero on a healthy link) and PLR blocks."""
        uptime = float(self.state.get("uptime_s", 3600.0))
        corrected = int(uptime * 10_000_000) + 1009 * link
        return [("Tx packets", int(uptime * 1e6)), ("Rx packets", int(uptime * 1e6)),
                ("Malformed packet Errors", 0), ("Buffer overrun Errors", 0), ("Rx Errors", errors),
                ("Rx remote Errors", 0), ("Rx General Errors", 0), ("Local link integrity Errors", 0),
                ("Tx discards", 0), ("Link recovery successful events", recoveries),
                ("Link recovery failed events", 0), ("Total link recovery events", recoveries),
                ("Effective Errors", 0), ("Effective BER", "15e-255"), ("Symbol Errors", errors // 10),
                ("Symbol BER", "15e-255"), *((f"FEC Errors - {bucket}", corrected if bucket == 0 else 0)
                                              for bucket in range(16)),
                ("Raw BER Lane 0", 2061), ("Raw BER Lane 1", 1038), ("Raw BER Total", 1037),
                ("Raw Errors Lane 0", 82), ("Raw Errors Lane 1", 4), ("PLR Xmit Blocks", int(uptime * 1e4))]

    def topo(self, args: list[str]) -> None:
        """``topo -m`` as the driver works it out: from where each GPU and HCA sits on the host's PCIe tree (the
        sysfs device links) and which NUMA node it hangs off, the HCAs named as /sys/class/infiniband names them.
        Nothing here reads the spec's rail map: a map that is wrong disagrees with this."""
        if args != ["-m"]:
            not_simulated("nvidia-smi topo", " ".join(args))
        sys_dir = self.root / "sys"
        class_dir = sys_dir / "class" / "infiniband"
        names = sorted(os.listdir(class_dir), key=lambda name: [int(part) if part.isdigit() else part
                                                                 for part in re.split(r"(\d+)", name)])
        hcas = [(name, os.readlink(class_dir / name).split("/")[-3]) for name in names]
        gpus = [(f"GPU{gpu['index']}", gpu["bdf"]) for gpu in self.gpus]
        everything = gpus + [(f"NIC{number}", bdf) for number, (_name, bdf) in enumerate(hcas)]

        def place(bdf: str) -> tuple[str, list[str], str]:
            target = os.readlink(sys_dir / "bus" / "pci" / "devices" / bdf)
            parts = target.split("/")
            host_bridge = next(part for part in parts if part.startswith("pci"))
            numa = (sys_dir / "bus" / "pci" / "devices" / bdf / "numa_node").read_text().strip()
            return host_bridge, [part for part in parts if part.count(":") == 2 and "." in part], numa

        def relation(one: str, other: str) -> str:
            (bridge_a, chain_a, numa_a), (bridge_b, chain_b, numa_b) = place(one), place(other)
            common = next((depth for depth, (a, b) in enumerate(zip(chain_a, chain_b, strict=False)) if a != b),
                          min(len(chain_a), len(chain_b)))
            if common == 0:
                return "PHB" if bridge_a == bridge_b else ("NODE" if numa_a == numa_b else "SYS")
            return "PIX" if common == len(chain_a) - 1 == len(chain_b) - 1 else "PXB"

        link = f"NV{self.model.nvlink_links}"
        tray = self.state.get("platform") == "nvl72"
        columns = [name for name, _bdf in everything]
        out = ["\t" + "\t".join(columns) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
        for row, bdf in everything:
            cells = []
            for column, other in everything:
                if column == row:
                    cells.append(" X ")
                elif row.startswith("GPU") and column.startswith("GPU"):
                    cells.append(link)
                elif tray and (row.startswith("GPU") or column.startswith("GPU")):
                    cells.append("SYS")  # a tray GPU reaches PCIe only through Grace, over NVLink-C2C
                else:
                    cells.append(relation(bdf, other))
            if row.startswith("GPU"):
                numa = place(bdf)[2]
                cpus = ("0-71" if numa == "0" else "72-143") if tray else (
                    "0-51,104-155" if numa == "0" else "52-103,156-207")
                out.append(f"{row}\t" + "\t".join(cells) + f"\t{cpus}\t{numa}\t\tN/A")
            else:
                out.append(f"{row}\t" + "\t".join(cells))
        out += ["", "Legend:", "", "  X    = Self",
                "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
                "(e.g., QPI/UPI)",
                "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
                "within a NUMA node",
                "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
                "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
                "  PIX  = Connection traversing at most a single PCIe bridge",
                "  NV#  = Connection traversing a bonded set of # NVLinks", "", "NIC Legend:", ""]
        out += [f"  NIC{number}: {name}" for number, (name, _bdf) in enumerate(hcas)]
        print("\n".join(out))


ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def _fabric_guid(gpu: dict[str, Any]) -> str:
    """The GPU's fabric GUID, which the real tray prints equal to its PDI: derived from its UUID here."""
    return "0x" + str(gpu["uuid"]).removeprefix("GPU-").replace("-", "")[:16]


def _kv(depth: int, key: str, value: str) -> str:
    return f"{'    ' * depth}{key}".ljust(42) + f": {value}"


def _csv_options(args: list[str]) -> set[str]:
    for arg in args:
        if arg.startswith("--format="):
            options = set(arg.split("=", 1)[1].split(","))
            if "csv" not in options:
                not_simulated("nvidia-smi", arg)
            return options
    raise ToolError('"--format" option is required for query options.', 2)


def main(root: Path, args: list[str]) -> int:
    if args[:1] == ["nvlink"]:
        Smi(root).nvlink(args[1:])
        return 0
    if args[:1] == ["topo"]:
        Smi(root).topo(args[1:])
        return 0
    index = None
    if "-i" in args:
        position = args.index("-i")
        index = args[position + 1] if position + 1 < len(args) else None
        args = args[:position] + args[position + 2 :]
    if args == ["-L"]:
        Smi(root).list_gpus()
        return 0
    if args in (["-r"], ["--gpu-reset"]):
        return Smi(root).reset(index)
    if args and args[0] in ("-q", "--query"):
        sections: set[str] = set()
        rest = args[1:]
        if rest[:1] == ["-d"] and len(rest) > 1:
            sections = {part.strip().upper() for part in rest[1].split(",")}
            unknown = sections - SECTIONS
            if unknown:
                raise ToolError("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.", 2)
            rest = rest[2:]
        if rest:
            not_simulated("nvidia-smi -q", " ".join(rest))
        Smi(root).query(sections, index)
        return 0
    if args == ["--help-query-gpu"]:
        Smi(root).help_query_gpu()
        return 0
    query = next((arg for arg in args if arg.startswith("--query-gpu=")), None)
    if query is not None:
        Smi(root).query_gpu(query.split("=", 1)[1].split(","), _csv_options(args), index)
        return 0
    remapped = next((arg for arg in args if arg.startswith("--query-remapped-rows=")), None)
    if remapped is not None:
        Smi(root).query_remapped_rows(remapped.split("=", 1)[1].split(","), _csv_options(args))
        return 0
    not_simulated("nvidia-smi", " ".join(args))
