#!/usr/bin/python
"""Ansible module: what GPU host this is, read from sysfs, checked against what the spec says."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_host_facts
short_description: Inventory GPUs, HCAs and the kernel of a GPU host and fail early when they differ from the spec
description:
  - Reads the PCI devices under the host's sysfs and its InfiniBand class tree; read-only, so check mode is exact.
options:
  root:
    description: Hardware root that stands where C(/) stands (empty on a real host).
    type: str
    default: ""
  expected_gpus:
    description: GPUs the spec says the host has.
    type: int
    required: true
  expected_hcas:
    description: Compute HCAs the spec's rail map names (mlx5_N).
    type: list
    elements: str
    required: true
  expected_kernel:
    description: The kernel release the spec pins (C(uname -r)); empty to accept any.
    type: str
    default: ""
author: provision
"""

EXAMPLES = r"""
- name: Check the host against the spec
  gpu_host_facts:
    root: "{{ hw_root }}"
    expected_gpus: 8
    expected_hcas: [mlx5_0, mlx5_3]
"""

RETURN = r"""
ansible_facts:
  description: C(provision_host) with gpus, hcas, kernel.
  returned: always
  type: dict
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

NVIDIA, MELLANOX = "0x10de", "0x15b3"


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def inventory(root: str) -> dict:
    devices_dir = os.path.join(root + "/sys/bus/pci/devices")
    gpus, hcas = [], {}
    for bdf in sorted(os.listdir(devices_dir)) if os.path.isdir(devices_dir) else []:
        device = os.path.join(devices_dir, bdf)
        vendor, klass = read(device + "/vendor"), read(device + "/class")
        if vendor == NVIDIA and klass.startswith("0x0302"):
            gpus.append(bdf)
    ib_dir = root + "/sys/class/infiniband"
    for name in sorted(os.listdir(ib_dir)) if os.path.isdir(ib_dir) else []:
        hcas[name] = {"state": read(f"{ib_dir}/{name}/ports/1/state"), "rate": read(f"{ib_dir}/{name}/ports/1/rate")}
    return {"gpus": gpus, "hcas": hcas, "kernel": read(root + "/proc/sys/kernel/osrelease") or os.uname().release}


def mismatches(found: dict, expected_gpus: int, expected_hcas: list[str], expected_kernel: str = "") -> list[str]:
    problems = []
    if expected_kernel and found["kernel"] != expected_kernel:
        problems.append(f"it runs kernel {found['kernel']}, the spec pins {expected_kernel} (software.kernel): "
                        "install it and make it the default boot entry")
    if len(found["gpus"]) != expected_gpus:
        problems.append(f"{len(found['gpus'])} GPUs on the PCI bus, the spec says {expected_gpus}")
    missing = [hca for hca in expected_hcas if hca not in found["hcas"]]
    if missing:
        problems.append(f"HCAs named in the rail map are absent: {', '.join(missing)}")
    return problems


def main() -> None:
    module = AnsibleModule(
        argument_spec={"root": {"type": "str", "default": ""}, "expected_gpus": {"type": "int", "required": True},
                       "expected_hcas": {"type": "list", "elements": "str", "required": True},
                       "expected_kernel": {"type": "str", "default": ""}},
        supports_check_mode=True,
    )
    found = inventory(module.params["root"])
    problems = mismatches(found, module.params["expected_gpus"], module.params["expected_hcas"],
                          module.params["expected_kernel"])
    if problems:
        module.fail_json(msg="host is not what the spec says: " + "; ".join(problems), provision_host=found)
    module.exit_json(changed=False, ansible_facts={"provision_host": found})


if __name__ == "__main__":
    main()
