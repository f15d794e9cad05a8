#!/usr/bin/python
"""Ansible module: the node's wheel cache, holding the wheels the controller sends (with its action plugin).

``copy`` of a folder costs a ``stat`` and a write, two module calls, per file: a Python process on the node and a
round trip through the bastion each. A CUDA torch wheelhouse is twenty-odd wheels, so a fresh node paid some forty
module calls before pip could start (measured on four simulated hosts behind a bastion: 28 s for 11 wheels, 3 s
for the one fabric_tests wheel). The action plugin (``playbooks/action_plugins/wheel_cache.py``) asks this module
once which wheels the node lacks, puts only those (one sftp transfer each, no module call), and calls it a second
time to move them into place.

A wheel the node has is one of the same name, size and modification time: rsync's quick check. Wheel names carry
their version, and an interrupted transfer never reaches the cache (a file is renamed into it only whole).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: wheel_cache
short_description: Fill a folder on the node with the controller's wheels, sending only the ones it lacks
description:
  - The action plugin of the same name lists the top-level files of each I(src) (a folder, as pip's
    C(--find-links) reads it, or one file), asks the node which it lacks (absent, or another size or modification
    time), transfers those and moves them into I(path) whole (a temporary name, then a rename). Files already
    in I(path) that the controller does not name are left alone. Supports check mode.
options:
  src:
    description: Folders and files on the controller (read by the action plugin; the module never sees them).
    type: list
    elements: str
    required: false
  path:
    description: The folder on the node (created with mode 0755).
    type: str
    required: true
  mode:
    description: Permission bits of each wheel written (octal string).
    type: str
    default: "0644"
  files:
    description: Set by the action plugin, each C(name), C(size) and C(mtime) (seconds) of a wanted file.
    type: list
    elements: dict
    required: false
  staged:
    description: Set by the action plugin, the node's temporary folder holding the transferred files.
    type: str
    required: false
author: provision
"""

EXAMPLES = r"""
- name: Send the node the wheels it lacks
  wheel_cache:
    src: [/srv/wheelhouse, /tmp/provision_fabric_tests-0.4.0-py3-none-any.whl]
    path: /var/cache/provision/wheels
"""

RETURN = r"""
missing:
  description: The names the node lacked, and so were (or, in check mode, would be) sent.
  returned: always
  type: list
machine:
  description: The node's machine architecture (C(uname -m)), by which the action plugin picks the wheels to send.
  returned: always
  type: str
skipped:
  description: Set by the action plugin, the wheels built for another architecture than the node's, not sent.
  returned: when any
  type: list
"""

import os  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402


def kernel_machine() -> str:
    """The machine the node's kernel runs (``uname -m``'s word): ``/proc/sys/kernel/arch`` where the kernel
    has it (newer kernels do), else Python's own ``uname``. The file comes first because it is the host's: a simulated
    Grace tray presents ``aarch64`` there while the Python running this module is the controller's x86_64."""
    try:
        with open("/proc/sys/kernel/arch", encoding="ascii") as handle:
            return handle.read().strip() or os.uname().machine
    except OSError:
        return os.uname().machine


def present(path: str) -> dict[str, tuple[int, int]]:
    """Each regular file in ``path`` (not below it): its size and whole-second modification time."""
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return {}
    found = {}
    for entry in entries:
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISREG(info.st_mode):
            found[entry.name] = (info.st_size, int(info.st_mtime))
    return found


def missing(wanted: list[dict], have: dict[str, tuple[int, int]]) -> list[str]:
    """The wanted names the node does not have at the same size and modification time, in the order given."""
    return [entry["name"] for entry in wanted
            if have.get(entry["name"]) != (int(entry["size"]), int(entry["mtime"]))]


def place(staged: str, path: str, entry: dict, mode: int) -> None:
    """Move one transferred file into the cache whole: beside its final name first (the cache may be on another
    filesystem than the login user's temporary folder), then renamed; owned by whoever runs this (root under
    become), with the controller's modification time so the next quick check finds it."""
    name = entry["name"]
    temporary = os.path.join(path, f".{name}.provision-tmp")
    shutil.move(os.path.join(staged, name), temporary)
    os.chown(temporary, os.geteuid(), os.getegid())
    os.chmod(temporary, mode)
    os.utime(temporary, (int(entry["mtime"]), int(entry["mtime"])))
    os.replace(temporary, os.path.join(path, name))


def main() -> None:
    module = AnsibleModule(
        argument_spec={"src": {"type": "list", "elements": "str", "required": False},
                       "path": {"type": "str", "required": True},
                       "mode": {"type": "str", "default": "0644"},
                       "files": {"type": "list", "elements": "dict", "required": False},
                       "staged": {"type": "str", "required": False}},
        supports_check_mode=True,
    )
    path, staged = module.params["path"], module.params["staged"]
    wanted = module.params["files"] or []
    try:
        mode = int(module.params["mode"], 8)
    except ValueError:
        module.fail_json(msg=f"wheel_cache: mode must be an octal string such as '0644', got {module.params['mode']!r}")
    if not os.path.isabs(path):
        module.fail_json(msg=f"wheel_cache: path must be absolute, got {path!r}")
    lacking = missing(wanted, present(path))
    if staged and lacking and not module.check_mode:
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
            for entry in wanted:
                if entry["name"] in lacking:
                    place(staged, path, entry, mode)
        except OSError as error:
            module.fail_json(msg=f"wheel_cache: cannot place the wheels in {path}: {error}", missing=lacking)
    module.exit_json(changed=bool(lacking), missing=lacking, machine=kernel_machine())


if __name__ == "__main__":
    main()
