"""Ansible action plugin: the controller's half of ``wheel_cache`` (see ``playbooks/library/wheel_cache.py``).

It lists the wheels on the controller, asks the node in one module call which it lacks, puts only those (sftp over
the shared connection: no Python started on the node), and places them with a second module call. A node that has
every wheel costs one module call; a fresh one two, plus one transfer per wheel.

A wheelhouse may hold wheels for several architectures (x86_64 HGX hosts and aarch64 Grace trays of one site):
the node's first answer names its machine, and a wheel built for another is never sent; a distribution with no
wheel for the node's machine at all fails the task by name, before anything is sent.
"""

from __future__ import annotations

import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


def local_files(sources: list[str]) -> dict[str, str]:
    """Each file to send, by its name on the node: a folder gives its top-level regular files (what pip's
    ``--find-links`` reads; hidden files and subfolders are not wheels), a file gives itself. Two sources naming
    the same file name are refused: which one the node got would depend on their order."""
    found: dict[str, str] = {}
    for source in sources:
        if os.path.isdir(source):
            paths = sorted(entry.path for entry in os.scandir(source)
                           if not entry.name.startswith(".") and entry.is_file())
        elif os.path.isfile(source):
            paths = [source]
        else:
            raise AnsibleActionFail(f"wheel_cache: {source} is neither a folder nor a file on the controller")
        for path in paths:
            name = os.path.basename(path)
            if name in found and os.path.realpath(found[name]) != os.path.realpath(path):
                raise AnsibleActionFail(f"wheel_cache: {found[name]} and {path} are both named {name}")
            found[name] = path
    return found


#: Architectures a wheel's platform tag can end in, by ``uname -m``'s name for them (PEP 425 / the manylinux tags).
ARCHITECTURES = ("x86_64", "aarch64", "ppc64le", "s390x", "i686", "armv7l", "riscv64")


def architectures(name: str) -> set[str] | None:
    """The machines a wheel file runs on, from its platform tag (``..._aarch64.whl``): None for any machine (a
    pure ``any`` wheel) and for a file that is not a wheel (pip decides what it is)."""
    if not name.endswith(".whl"):
        return None
    platform = name[:-4].split("-")[-1]
    if platform == "any":
        return None
    return {arch for tag in platform.split(".") for arch in ARCHITECTURES if tag.endswith("_" + arch)} or None


def for_machine(names: list[str], machine: str) -> tuple[list[str], list[str]]:
    """The files to send a node of ``machine`` and the ones built for another; a distribution (the name before
    the first dash) whose every wheel is for another machine is refused: pip would fail on the node later, for a
    reason the node cannot name."""
    kept, skipped = [], []
    for name in names:
        machines = architectures(name)
        (kept if machines is None or machine in machines else skipped).append(name)
    distributions = {name.split("-")[0].lower() for name in kept}
    lacking = sorted({name.split("-")[0] for name in skipped if name.split("-")[0].lower() not in distributions})
    if lacking:
        built = sorted({arch for name in skipped for arch in architectures(name) or ()})
        raise AnsibleActionFail(f"wheel_cache: no wheel of {', '.join(lacking)} for this node's {machine} (only for "
                                f"{', '.join(built)}): add the {machine} wheels to the wheelhouse (pip download "
                                f"--platform manylinux_2_28_{machine} ...)")
    return kept, skipped


def described(files: dict[str, str]) -> list[dict[str, Any]]:
    """What the module compares: name, size and whole-second modification time (rsync's quick check)."""
    return [{"name": name, "size": (info := os.stat(path)).st_size, "mtime": int(info.st_mtime)}
            for name, path in files.items()]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False  # the node's temporary folder is made only when a wheel is to be sent

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        sources = args.pop("src", None) or []
        if isinstance(sources, str):
            sources = [sources]
        for internal in ("files", "staged"):
            if internal in args:
                raise AnsibleActionFail(f"wheel_cache: {internal} is set by the action plugin, not by a task")
        files = local_files([self._find_needle("files", source) for source in sources])
        args["files"] = described(files)
        listed = self._execute_module(module_name="wheel_cache", module_args=args, task_vars=task_vars)
        if listed.get("failed"):
            result.update(listed)
            return result
        kept, skipped = for_machine(sorted(files), str(listed.get("machine", "")))
        if skipped:  # the node compares, and is sent, only what it can run
            files = {name: files[name] for name in kept}
            args["files"] = described(files)
            listed["missing"] = [name for name in listed.get("missing", []) if name in files]
            listed["changed"] = bool(listed["missing"])
            listed["skipped"] = skipped
        if not listed.get("missing") or self._task.check_mode:
            result.update(listed)
            return result
        staged = self._make_tmp_path()
        try:
            remote = [self._connection._shell.join_path(staged, name) for name in listed["missing"]]
            for name, path in zip(listed["missing"], remote, strict=True):
                self._transfer_file(files[name], path)
            self._fixup_perms2([staged, *remote], execute=False)  # root reads them as they are: no round trip
            placed = self._execute_module(module_name="wheel_cache", module_args={**args, "staged": staged},
                                          task_vars=task_vars)
        finally:
            self._remove_tmp_path(staged)
        result.update(placed)
        if skipped:
            result["skipped"] = skipped
        return result
