"""``dcgmi``: NVIDIA DCGM's command line on a simulated host (``-v`` and ``diag -r N -j``), DCGM 4's behaviour.

What it reports is the host's own state as DCGM's plugins would find it (read in NVIDIA/DCGM at v4.2.3: the
plugin each finding comes from, its ``dcgm_errors.h`` id, severity, category and message), not a verdict we
chose: pending row remaps fail ``software``'s Page Retirement/Row Remap check, a GPU without persistence mode its
Persistence Mode check, a link narrower than its maximum ``pcie``, uncorrectable ECC errors ``memory`` and
``memtest``, thermal clock events the stress plugins. A GPU off the bus is simply absent from every test. As real
``dcgmi diag``, it runs with no host engine (an embedded one, silently); only ``-v`` tells whether one answered.
The JSON is printed as dcgmi prints it (jsoncpp's styled writer); the exit status is DCGM's: 0, 226 for a
failure, 205 for a failure of the isolate class.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from provision.sim.node import load_state
from provision.sim.tools.apt import read_status
from provision.sim.tools.common import ToolError, not_simulated, privileged, service_active

CORE, PLUGINS = "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"
VERSION = "4.2.3"
#: The pcie plugin's ``min_pci_width`` by GPU: what nvvs/diag-skus.yaml.in sets for boards of PCIe-attached SXM
#: GPUs (x16, as its A100-era SXM entries do; the simulator held every GPU to 16 before this table). A GPU the
#: table does not list gets the plugin's own default, 1 (NVIDIA/DCGM's Pcie plugin parameters): a GB200/GB300
#: tray's GPU, which reaches Grace over NVLink-C2C at a healthy Gen4 x1 (field guide 8.1).
MIN_PCI_WIDTH = {"A100-SXM4-80GB": 16, "H100-SXM-80GB": 16, "H200-SXM-141GB": 16, "B200-SXM-180GB": 16,
                 "B300-SXM-288GB": 16}
PLUGIN_MIN_PCI_WIDTH = 1
SYSTEM_TRIAGE = "Run a field diagnostic on the GPU."
COOLING = ("Verify that the cooling on this machine is functional, including external, thermal material interface, "
           "fans, and any other components.")
#: id: (severity, category) from dcgm_errors.c at v4.2.3
ERRORS = {4: (2, 10), 6: (6, 10), 10: (1, 9), 29: (5, 8), 46: (5, 13), 52: (2, 10), 58: (2, 10), 63: (4, 14),
          85: (6, 10), 107: (2, 13)}
#: The H100 SXM's parameters in nvvs/diag-skus.yaml.in (v4.2.3): targeted_power's target (W), of which the test
#: must reach target_power_min_ratio (0.75, TargetedPower_wrapper.cpp); pcie's max_pcie_replays per test (Pcie.cpp).
TARGET_POWER_W, MIN_POWER_RATIO, MAX_PCIE_REPLAYS = 700.0, 0.75, 80
LEVELS = {1: ("software",), 2: ("memory", "pcie"),
          3: ("diagnostic", "memory_bandwidth", "targeted_stress", "targeted_power"), 4: ("memtest", "pulse_test")}
CATEGORY = {"software": "Deployment", "memory": "Hardware", "diagnostic": "Hardware", "pulse_test": "Hardware",
            "pcie": "Integration", "memory_bandwidth": "Stress", "targeted_stress": "Stress",
            "targeted_power": "Stress", "memtest": "Stress"}


def dcgmi(root: Path, args: list[str]) -> int:
    from provision.sim.tools.nvidia_smi import Smi

    packages = read_status(root)
    if CORE not in packages:
        raise ToolError("dcgmi: command not found", 127)
    state = load_state(root)
    engine = service_active(state, "nvidia-dcgm")
    version = packages[CORE].get("Version", VERSION).partition(":")[2].rsplit("-", 1)[0] or VERSION  # 1:4.2.3-1
    if args == ["-v"]:
        print(_build_info(version))
        if engine:
            print("\nHostengine build info:\n" + _build_info(version))
        return 0
    if args[:1] != ["diag"] or "-j" not in args or "-r" not in args:
        not_simulated("dcgmi", " ".join(args))
    level = args[args.index("-r") + 1] if args.index("-r") + 1 < len(args) else ""
    if level not in ("1", "2", "3", "4") or len(args) != 4:
        not_simulated("dcgmi", " ".join(args))
    if PLUGINS not in packages:
        not_simulated("dcgmi", f"diag without {PLUGINS}")
    if not privileged():
        not_simulated("dcgmi", "diag as a user other than root")
    smi = Smi(root)
    report, severities = _diag(smi, int(level), version)
    print(styled(report))
    if 2 in severities:
        return 205
    return 226 if severities else 0


def _diag(smi: Any, level: int, version: str) -> tuple[dict[str, Any], set[int]]:
    severities: set[int] = set()
    persistence = service_active(smi.state, "nvidia-persistenced")
    categories: dict[str, list[dict[str, Any]]] = {}
    for step in range(1, level + 1):
        for plugin in LEVELS[step]:
            results = []
            for gpu in smi.gpus:
                found = _findings(smi, gpu, plugin, persistence)
                result: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu["index"],
                                          "status": "Fail" if found else "Pass"}
                if found:
                    result["warnings"] = [_warning(error, text) for error, text in found]
                    severities |= {ERRORS[error][0] for error, _ in found}
                results.append(result)
            failed = any(result["status"] == "Fail" for result in results)
            categories.setdefault(CATEGORY[plugin], []).append(
                {"name": plugin, "results": results, "test_summary": {"status": "Fail" if failed else "Pass"}})
    document = {"DCGM Diagnostic": {"test_categories": [{"category": name, "tests": tests}
                                                        for name, tests in categories.items()]},
                "entity_groups": [{"entities": [{"device_id": "2330", "entity_id": gpu["index"],
                                                 "serial_num": gpu["serial"]} for gpu in smi.gpus],
                                   "entity_group": "GPU", "entity_group_id": 1}],
                "metadata": {"Driver Version Detected": smi.driver, "version": version}}
    return document, severities


def _findings(smi: Any, gpu: dict[str, Any], plugin: str, persistence: bool) -> list[tuple[int, str]]:
    index = gpu["index"]
    found: list[tuple[int, str]] = []
    if plugin == "software":
        if not persistence:
            found.append((29, f"Persistence Mode: Persistence mode for GPU {index} is disabled. Enable persistence "
                              "mode by running \"nvidia-smi -i <gpuId> -pm 1 \" as root."))
        if gpu["remap_pending"]:
            found.append((85, f"Page Retirement/Row Remap: GPU {index} had memory errors and row remappings are "
                              f"pending {SYSTEM_TRIAGE}"))
        elif gpu["retired_pending"]:
            found.append((6, f"Page Retirement/Row Remap: Pending page retirements detected in GPU {index}. "
                             "Monitor - this GPU can still perform workload"))
    elif plugin == "pcie":
        _max_gen, _max_width, _gen, width = smi.link(gpu)
        minimum = MIN_PCI_WIDTH.get(smi.model.name, PLUGIN_MIN_PCI_WIDTH)
        if width < minimum:
            found.append((46, f"GPU {index} is running at PCI link width {width}X, which is below the minimum "
                              f"allowed link generation of {minimum} (parameter 'min_pci_width')"))
        replays = gpu.get("pcie_replays_per_minute_under_load", 0)  # the test's traffic runs about a minute
        if replays > MAX_PCIE_REPLAYS:
            found.append((107, f"Detected {replays} pcie_replay_counter for GPU {index} which is above the "
                               f"threshold {MAX_PCIE_REPLAYS}"))
    elif plugin in ("memory", "memtest") and gpu["ecc_uncorrected_volatile"]:
        if plugin == "memory":
            found.append((4, f"Detected {gpu['ecc_uncorrected_volatile']} volatile double-bit ECC error(s) in GPU "
                             f"{index}. Drain the GPU and reset it or reboot the node."))
        else:
            found.append((52, f"Found {gpu['ecc_uncorrected_volatile']} faulty memory elements on GPU {index} "
                              f"{SYSTEM_TRIAGE}"))
    if plugin == "memtest" and gpu.get("memory_mismatch"):
        found.append((58, f"A memory mismatch was detected on GPU {index}, but no error was reported by CUDA or "
                          "NVML."))
    if plugin == "targeted_power" and gpu.get("max_power_under_load_w", TARGET_POWER_W) < \
            MIN_POWER_RATIO * TARGET_POWER_W:
        found.append((63, f"Max power of {gpu['max_power_under_load_w']:.1f} did not reach desired power minimum "
                          f"target_power_min_ratio of {MIN_POWER_RATIO * TARGET_POWER_W:.1f} for GPU {index}"))
    if plugin in ("targeted_stress", "targeted_power", "diagnostic") and \
            {"hw_thermal_slowdown", "sw_thermal_slowdown"} & set(gpu["throttle_reasons"]):
        found.append((10, f"Detected clocks event due to thermal violation in GPU {index}. {COOLING}"))
    return found


def _warning(error: int, text: str) -> dict[str, Any]:
    severity, category = ERRORS[error]
    return {"error_category": category, "error_id": error, "error_severity": severity, "warning": text}


def _build_info(version: str) -> str:
    return "\n".join(f"{name} : {value}" for name, value in (
        ("Version", version), ("Build ID", "3"), ("Build Date", "2025-04-25"), ("Build Type", "Release"),
        ("Commit ID", "6e947dcac9b3160d61d98fea4741d51d4bec5c1f"), ("Branch Name", "rel_dcgm_4_2"),
        ("CPU Arch", "x86_64"), ("Build Platform", "Linux 4.15.0-180-generic #189-Ubuntu SMP x86_64")))


def styled(value: Any, depth: int = 0) -> str:
    """JSON as jsoncpp's ``toStyledString`` writes it (what dcgmi prints): keys sorted, a tab per level, ``" : "``,
    an object or array value on the line after its key, every non-empty array one element a line."""
    pad = "\t" * depth
    if isinstance(value, dict) and value:
        items = []
        for key, item in sorted(value.items()):
            nested = isinstance(item, (dict, list)) and bool(item)
            items.append(f"{pad}\t{json.dumps(key)} : " + (f"\n{pad}\t" if nested else "") + styled(item, depth + 1))
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and value:
        return "[\n" + ",\n".join(f"{pad}\t{styled(item, depth + 1)}" for item in value) + f"\n{pad}]"
    return json.dumps(value)
