#!/usr/bin/python
"""Ansible module: the host settings the spec asks for, now and at every boot, in one call.

Each setting carries its reason in the role defaults; this module only applies them.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: host_tuning
short_description: memlock limits for RDMA, NUMA balancing, CPU governor and swap, applied and persisted
description:
  - One module call for all host tunables (Ansible costs ~0.15 s per module call per host).
    Writes files under C(root) atomically, writes C(/proc/sys) and cpufreq values in place as the kernel
    requires, turns swap off with swapoff and comments swap out of fstab. Supports check mode and diff.
options:
  root:
    description: Hardware root that stands where C(/) stands (empty on a real host).
    type: str
    default: ""
  memlock_unlimited:
    description: Unlimited locked memory for all users (RDMA registers large pinned buffers).
    type: bool
    default: true
  numa_balancing:
    description: Whether automatic NUMA balancing stays on (off stops page migration under pinned buffers).
    type: bool
    default: false
  cpu_governor:
    description: cpufreq governor to set on every CPU, or C(unchanged).
    type: str
    default: performance
  swap:
    description: C(off) to disable swap now and at boot, or C(unchanged).
    type: str
    default: "off"
author: provision
"""

EXAMPLES = r"""
- name: Tune the host
  host_tuning:
    root: "{{ hw_root }}"
"""

RETURN = r"""
changes:
  description: What was changed.
  returned: always
  type: list
"""

import glob  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

LIMITS = "/etc/security/limits.d/99-provision-rdma.conf"
SYSCTL = "/etc/sysctl.d/99-provision.conf"
MEMLOCK = "# provision: RDMA registers large pinned buffers\n* soft memlock unlimited\n* hard memlock unlimited\n"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def _replace(path: str, content: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".provision-tmp", "w", encoding="utf-8") as handle:
        handle.write(content)
    os.replace(path + ".provision-tmp", path)


def active_swaps(proc_swaps: str) -> list[str]:
    return [line.split()[0] for line in proc_swaps.splitlines()[1:] if line.strip()]


def fstab_without_swap(fstab: str) -> str:
    lines = []
    for line in fstab.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "swap" and not line.lstrip().startswith("#"):
            line = "# disabled by provision (swap off): " + line
        lines.append(line)
    return "\n".join(lines) + ("\n" if lines else "")


def main() -> None:  # noqa: C901 - an Ansible module: one main that reads its arguments and acts on each
    module = AnsibleModule(
        argument_spec={"root": {"type": "str", "default": ""},
                       "memlock_unlimited": {"type": "bool", "default": True},
                       "numa_balancing": {"type": "bool", "default": False},
                       "cpu_governor": {"type": "str", "default": "performance"},
                       "swap": {"type": "str", "default": "off", "choices": ["off", "unchanged"]}},
        supports_check_mode=True,
    )
    root, params, check = module.params["root"], module.params, module.check_mode
    changes: list[str] = []
    if params["memlock_unlimited"] and _read(root + LIMITS) != MEMLOCK:
        changes.append(f"write {LIMITS}")
        if not check:
            _replace(root + LIMITS, MEMLOCK)
    numa = "1" if params["numa_balancing"] else "0"
    sysctl = f"# provision: NUMA page migration stalls pinned GPU/RDMA buffers\nkernel.numa_balancing = {numa}\n"
    if _read(root + SYSCTL) != sysctl:
        changes.append(f"write {SYSCTL}")
        if not check:
            _replace(root + SYSCTL, sysctl)
    live = root + "/proc/sys/kernel/numa_balancing"
    if (_read(live) or "").strip() not in ("", numa):
        changes.append(f"kernel.numa_balancing = {numa}")
        if not check:
            with open(live, "w", encoding="utf-8") as handle:  # /proc is written in place
                handle.write(numa + "\n")
    if params["cpu_governor"] != "unchanged":
        for path in sorted(glob.glob(root + "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor")):
            if (_read(path) or "").strip() != params["cpu_governor"]:
                changes.append(f"governor {params['cpu_governor']} on {path.split('/')[-3]}")
                if not check:
                    with open(path, "w", encoding="utf-8") as handle:
                        handle.write(params["cpu_governor"] + "\n")
    if params["swap"] == "off":
        swaps = active_swaps(_read(root + "/proc/swaps") or "")
        if swaps:
            changes.append(f"swapoff {' '.join(swaps)}")
            if not check:
                rc, _out, err = module.run_command(["swapoff", "-a"])
                if rc != 0:
                    module.fail_json(msg=f"swapoff -a failed: {err.strip()}")
        fstab = _read(root + "/etc/fstab")
        if fstab is not None and fstab_without_swap(fstab) != fstab:
            changes.append("comment swap out of /etc/fstab")
            if not check:
                _replace(root + "/etc/fstab", fstab_without_swap(fstab))
    module.exit_json(changed=bool(changes), changes=changes,
                     diff={"before": "", "after": "".join(change + "\n" for change in changes)})


if __name__ == "__main__":
    main()
