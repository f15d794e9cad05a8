#!/usr/bin/python
"""Ansible module: PCIe ACS off on the bridges that matter, verified by reading the control register back."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pcie_acs
short_description: Disable PCIe Access Control Services on GPU/HCA paths (or every bridge) and verify it
description:
  - Walks each bridge's extended capability list in its sysfs config space to find ACS, decides which bridges
    sit between a GPU and an HCA (their common upstream path, from the sysfs device nesting), clears the ACS
    control word with setpci and reads it back. Supports check mode and diff.
options:
  root:
    description: Hardware root that stands where C(/) stands (empty on a real host).
    type: str
    default: ""
  scope:
    description: C(gpu_hca_paths) touches bridges above a GPU or an HCA; C(all_bridges) every bridge with ACS.
    type: str
    choices: [gpu_hca_paths, all_bridges]
    default: gpu_hca_paths
author: provision
"""

EXAMPLES = r"""
- name: ACS off on GPU/HCA paths
  pcie_acs:
    root: "{{ hw_root }}"
"""

RETURN = r"""
bridges:
  description: Every bridge in scope with its ACS control word before and after.
  returned: always
  type: list
"""

import os  # noqa: E402
import struct  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

ECAP_ACS = 0x000D
NVIDIA, MELLANOX = "0x10de", "0x15b3"


def acs_offset(config: bytes) -> int | None:
    """Offset of the ACS extended capability, walking the list from 0x100 (None without one)."""
    offset, seen = 0x100, 0
    while offset and len(config) >= offset + 8 and seen < 64:
        (header,) = struct.unpack_from("<I", config, offset)
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ECAP_ACS:
            return offset
        offset, seen = (header >> 20) & 0xFFC, seen + 1
    return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def endpoints_and_bridges(root: str) -> tuple[list[str], dict[str, list[str]]]:
    """GPU/HCA addresses, and for each device its upstream bridges (from the real sysfs nesting)."""
    devices_dir = root + "/sys/bus/pci/devices"
    endpoints, upstream = [], {}
    for bdf in sorted(os.listdir(devices_dir)) if os.path.isdir(devices_dir) else []:
        path = os.path.realpath(os.path.join(devices_dir, bdf))
        upstream[bdf] = [part for part in path.split(os.sep)[:-1] if part.count(":") == 2 and part != bdf]
        vendor, klass = _read(path + "/vendor"), _read(path + "/class")
        if (vendor == NVIDIA and klass.startswith("0x0302")) or (vendor == MELLANOX and klass[:6] in ("0x0207",
                                                                                                    "0x0200")):
            endpoints.append(bdf)
    return endpoints, upstream


def bridges_in_scope(root: str, scope: str) -> list[str]:
    endpoints, upstream = endpoints_and_bridges(root)
    if scope == "all_bridges":
        return sorted(upstream)
    chosen = set()
    for endpoint in endpoints:
        chosen.update(upstream.get(endpoint, []))
    return sorted(chosen)


def current_controls(root: str, bridges: list[str]) -> dict[str, tuple[int, int]]:
    """Bridge -> (ACS offset, control word) for the bridges that have ACS."""
    found = {}
    for bdf in bridges:
        try:
            with open(f"{root}/sys/bus/pci/devices/{bdf}/config", "rb") as handle:
                config = handle.read()
        except OSError:
            continue
        offset = acs_offset(config)
        if offset is not None:
            (control,) = struct.unpack_from("<H", config, offset + 6)
            found[bdf] = (offset, control)
    return found


def main() -> None:
    module = AnsibleModule(
        argument_spec={"root": {"type": "str", "default": ""},
                       "scope": {"type": "str", "default": "gpu_hca_paths", "choices": ["gpu_hca_paths",
                                                                                         "all_bridges"]}},
        supports_check_mode=True,
    )
    root = module.params["root"]
    before = current_controls(root, bridges_in_scope(root, module.params["scope"]))
    to_clear = sorted(bdf for bdf, (_offset, control) in before.items() if control != 0)
    report = [{"bridge": bdf, "before": f"{control:04x}"} for bdf, (_offset, control) in sorted(before.items())]
    diff = {"before": "".join(f"{bdf} ACSCtl={control:04x}\n" for bdf, (_o, control) in sorted(before.items())),
            "after": "".join(f"{bdf} ACSCtl=0000\n" for bdf in sorted(before))}
    if not to_clear or module.check_mode:
        module.exit_json(changed=bool(to_clear), bridges=report, cleared=to_clear, diff=diff)
    for bdf in to_clear:
        rc, _out, err = module.run_command(["setpci", "-s", bdf, "ECAP_ACS+0x6.w=0000"])
        if rc != 0:
            module.fail_json(msg=f"setpci could not clear ACS on {bdf}: {err.strip()}", bridges=report)
    after = current_controls(root, sorted(before))
    still = sorted(bdf for bdf, (_offset, control) in after.items() if control != 0)
    if still:
        module.fail_json(msg=f"ACS still enabled after writing 0000 on: {', '.join(still)}", bridges=report)
    module.exit_json(changed=True, bridges=report, cleared=to_clear, diff=diff)


if __name__ == "__main__":
    main()
