#!/usr/bin/python
"""Ansible module: a kernel module loaded now and at every boot, and (for peer-memory clients) registered."""

from __future__ import annotations

DOCUMENTATION = r"""
module: kernel_module
short_description: Load a kernel module, persist it in modules-load.d, and verify it registered
description:
  - Loads with modprobe when /proc/modules lacks it, writes C(<root>/etc/modules-load.d/<name>.conf), and when
    C(registration) paths are given fails unless one of them exists afterwards (lsmod listing a module is not
    proof that nvidia-peermem registered with ib_core). Supports check mode and diff.
options:
  root:
    description: Hardware root that stands where C(/) stands (empty on a real host).
    type: str
    default: ""
  name:
    description: Module name as modprobe takes it (dashes or underscores).
    type: str
    required: true
  persist:
    description: Load it at every boot through modules-load.d.
    type: bool
    default: true
  registration:
    description: Paths (relative to root) of which one must exist once the module is loaded.
    type: list
    elements: str
    default: []
author: provision
"""

EXAMPLES = r"""
- name: GPUDirect RDMA
  kernel_module:
    name: nvidia-peermem
    registration: [/sys/kernel/mm/memory_peers/nv_mem/version]
"""

RETURN = r"""
loaded:
  description: Whether this call loaded the module.
  returned: always
  type: bool
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402


def loaded_modules(text: str) -> set[str]:
    return {line.split()[0] for line in text.splitlines() if line.strip()}


def main() -> None:
    module = AnsibleModule(
        argument_spec={"root": {"type": "str", "default": ""}, "name": {"type": "str", "required": True},
                       "persist": {"type": "bool", "default": True},
                       "registration": {"type": "list", "elements": "str", "default": []}},
        supports_check_mode=True,
    )
    root, name = module.params["root"], module.params["name"]
    canonical = name.replace("-", "_")
    try:
        with open(root + "/proc/modules", encoding="utf-8") as handle:
            is_loaded = canonical in loaded_modules(handle.read())
    except OSError as error:
        module.fail_json(msg=f"cannot read /proc/modules: {error}")
    conf = f"{root}/etc/modules-load.d/{name}.conf"
    wanted = f"{name}\n"
    current = ""
    if os.path.exists(conf):
        with open(conf, encoding="utf-8") as handle:
            current = handle.read()
    persist_change = module.params["persist"] and current != wanted
    changed = not is_loaded or persist_change
    diff = {"before": f"loaded={is_loaded}\n{conf}: {current!r}\n", "after": f"loaded=True\n{conf}: {wanted!r}\n"}
    if module.check_mode:
        module.exit_json(changed=changed, loaded=not is_loaded, diff=diff)
    if not is_loaded:
        rc, _out, err = module.run_command(["modprobe", name])
        if rc != 0:
            module.fail_json(msg=f"modprobe {name} failed: {err.strip()}", not_found="not found" in err)
    if persist_change:
        os.makedirs(os.path.dirname(conf), exist_ok=True)
        temporary = conf + ".provision-tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(wanted)
        os.replace(temporary, conf)
    paths = module.params["registration"]
    if paths and not any(os.path.exists(root + path) for path in paths):
        module.fail_json(msg=f"{name} is loaded but not registered: none of {', '.join(paths)} exists "
                             "(GPUDirect RDMA will be disabled; reinstall the driver after the OFED stack)")
    module.exit_json(changed=changed, loaded=not is_loaded, diff=diff)


if __name__ == "__main__":
    main()
