"""``ibstat`` over the simulated ``sys/class/infiniband`` tree (the same files the kernel exposes)."""

from __future__ import annotations

from pathlib import Path

from provision.sim.tools.common import ToolError, not_simulated

STATES = {"1": "Down", "2": "Initializing", "3": "Armed", "4": "Active"}
PHYSICAL = {"1": "Sleep", "2": "Polling", "3": "Disabled", "4": "PortConfigurationTraining", "5": "LinkUp",
            "6": "LinkErrorRecovery", "7": "Phy Test"}


def _read(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


def ibstat(root: Path, args: list[str]) -> int:
    if any(arg.startswith("-") for arg in args):
        not_simulated("ibstat", " ".join(args))
    base = root / "sys" / "class" / "infiniband"
    names = sorted(path.name for path in base.iterdir()) if base.is_dir() else []
    if args:
        missing = [name for name in args[:1] if name not in names]
        if missing:
            raise ToolError(f"ibpanic: [{__import__('os').getpid()}] main: '{missing[0]}' IB device can't be found: "
                            "No such file or directory", 255)
        names = args[:1]
    blocks = []
    for name in names:
        device = base / name
        guid = "0x" + _read(device / "node_guid").replace(":", "")
        lines = [f"CA '{name}'", f"\tCA type: {_read(device / 'hca_type')}", "\tNumber of ports: 1",
                 f"\tFirmware version: {_read(device / 'fw_ver')}", "\tHardware version: 0",
                 f"\tNode GUID: {guid}", f"\tSystem image GUID: 0x{_read(device / 'sys_image_guid').replace(':', '')}"]
        port = device / "ports" / "1"
        state = _read(port / "state").split(":")[0]
        physical = _read(port / "phys_state").split(":")[0]
        lines += ["\tPort 1:", f"\t\tState: {STATES.get(state, 'Unknown')}",
                  f"\t\tPhysical state: {PHYSICAL.get(physical, 'Unknown')}",
                  f"\t\tRate: {_read(port / 'rate').split()[0]}", f"\t\tBase lid: {int(_read(port / 'lid'), 16)}",
                  f"\t\tLMC: {_read(port / 'lid_mask_count')}", f"\t\tSM lid: {int(_read(port / 'sm_lid'), 16)}",
                  f"\t\tCapability mask: {_read(port / 'cap_mask')}", f"\t\tPort GUID: {guid}",
                  f"\t\tLink layer: {_read(port / 'link_layer')}"]
        blocks.append("\n".join(lines))
    print("\n".join(blocks))
    return 0
