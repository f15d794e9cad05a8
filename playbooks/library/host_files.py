#!/usr/bin/python
"""Ansible module: a role's small files on the node, written in one module call.

``template``/``copy`` cost two module calls per file (a ``stat``, then the write), each a Python process on the
node (~0.3 s of its CPU) and a round trip through the bastion; a role that installs a script and its unit paid
four, and a fresh host ~20 in all. Here the controller renders the contents (the ``template`` lookup) and one
call compares and writes them all.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: host_files
short_description: Write several small files (rendered on the controller) atomically, in one module call
description:
  - Each file is compared with what is on the node (content and mode) and rewritten only when it differs:
    a temporary file beside it, then a rename, so a reader never sees half a file. Missing parent folders are
    created (mode 0755). Supports check mode and diff.
options:
  root:
    description: Hardware root that stands where C(/) stands (empty on a real host).
    type: str
    default: ""
  files:
    description: The files, each C(path) (absolute), C(mode) (octal string) and C(content) or C(content_base64).
    type: list
    elements: dict
    required: true
author: provision
"""

EXAMPLES = r"""
- name: Install the boot-time script and its unit
  host_files:
    root: "{{ hw_root | default('') }}"
    files:
      - path: /usr/local/sbin/provision-acs-disable
        mode: "0755"
        content: "{{ lookup('ansible.builtin.template', 'provision-acs-disable.sh.j2') }}"
"""

RETURN = r"""
written:
  description: The paths (as given, without the root) that were or, in check mode, would be rewritten.
  returned: always
  type: list
"""

import base64  # noqa: E402
import binascii  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402
from dataclasses import dataclass  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

#: How much of a file's text goes into --diff (a key or a wheel is not worth showing).
DIFF_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Wanted:
    path: str
    mode: int
    content: bytes


def wanted(entry: dict) -> Wanted:
    """One entry of ``files`` read and checked; ValueError names what is wrong with it."""
    path, mode = entry.get("path"), entry.get("mode")
    if not isinstance(path, str) or not path.startswith("/") or path.endswith("/"):
        raise ValueError(f"path must be an absolute file path, got {path!r}")
    try:
        mode_bits = int(str(mode), 8)
    except ValueError:
        raise ValueError(f"{path}: mode must be an octal string such as '0644', got {mode!r}") from None
    if ("content" in entry) == ("content_base64" in entry):
        raise ValueError(f"{path}: give exactly one of content and content_base64")
    if "content" in entry:
        return Wanted(path, mode_bits, str(entry["content"]).encode())
    try:
        return Wanted(path, mode_bits, base64.b64decode(str(entry["content_base64"]), validate=True))
    except binascii.Error as error:
        raise ValueError(f"{path}: content_base64 is not base64 ({error})") from None


def current(path: str) -> tuple[bytes, int] | None:
    """What the file holds and its permission bits, or None when there is no file."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(path)
    with open(path, "rb") as handle:
        return handle.read(), stat.S_IMODE(info.st_mode)


def write(path: str, content: bytes, mode: int) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    temporary = os.path.join(directory, f".{os.path.basename(path)}.provision-tmp")
    with open(temporary, "wb") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(temporary, mode)
    os.replace(temporary, path)


def _text(content: bytes | None) -> str:
    if content is None:
        return ""
    if len(content) > DIFF_LIMIT:
        return f"({len(content)} bytes)\n"
    try:
        return content.decode()
    except UnicodeDecodeError:
        return f"({len(content)} bytes of binary)\n"


def main() -> None:
    module = AnsibleModule(
        argument_spec={"root": {"type": "str", "default": ""},
                       "files": {"type": "list", "elements": "dict", "required": True}},
        supports_check_mode=True,
    )
    root = module.params["root"].rstrip("/")
    try:
        files = [wanted(entry) for entry in module.params["files"]]
    except ValueError as error:
        module.fail_json(msg=f"host_files: {error}")
    written: list[str] = []
    diffs: list[dict[str, str]] = []
    for file in files:
        target = root + file.path
        try:
            now = current(target)
        except IsADirectoryError:
            module.fail_json(msg=f"host_files: {file.path} is a folder on the node, not a file")
        if now == (file.content, file.mode):
            continue
        written.append(file.path)
        if now is None or now[0] != file.content:
            before, after = _text(now[0] if now else None), _text(file.content)
        else:  # the same content: only the mode differs
            before, after = f"mode {now[1]:04o}\n", f"mode {file.mode:04o}\n"
        diffs.append({"before_header": file.path, "after_header": file.path, "before": before, "after": after})
        if not module.check_mode:
            try:
                write(target, file.content, file.mode)
            except OSError as error:
                module.fail_json(msg=f"host_files: cannot write {file.path}: {error}", written=written[:-1])
    module.exit_json(changed=bool(written), written=written, diff=diffs)


if __name__ == "__main__":
    main()
