#!/usr/bin/python
"""Ansible module: exact package versions installed and held, through dpkg-query, apt-get and apt-mark."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pinned_packages
short_description: Install exact versions of packages and hold them
description:
  - Compares installed versions (dpkg-query) with the pins; installs what differs in one apt-get call (allowing
    downgrades and changes to held packages, since a pin is the decision), then holds them. A pin matches an
    installed version equal to it or starting with it and a dash (C(535.183.01) matches C(535.183.01-1)).
    When apt does not know a pinned package or version, its lists are refreshed (apt-get update) and the install
    tried once more: a repository was just added or changed, or the lists are stale. A converged node is never
    sent to the network. apt's lists and archives locks (taken without waiting, unlike dpkg's: a fresh node's
    first boot refreshes the lists) are waited for, as dpkg's is, up to 15 minutes. Supports check mode and diff.
options:
  packages:
    description: Package name to pinned version.
    type: dict
    required: true
  hold:
    description: Hold the packages (apt-mark hold) so upgrades cannot drift them.
    type: bool
    default: true
  reinstall:
    description: Reinstall even when the version matches (rebuilds DKMS modules, e.g. after an OFED change).
    type: bool
    default: false
author: provision
"""

EXAMPLES = r"""
- name: Pin the driver
  pinned_packages:
    packages: {nvidia-driver-535: "535.183.01"}
"""

RETURN = r"""
installed:
  description: Packages installed or changed by this call.
  returned: always
  type: list
"""

import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402


def matches(installed: str | None, pin: str) -> bool:
    """``*`` accepts any installed version; otherwise equal, or the pin followed by a Debian revision."""
    if installed is None:
        return False
    return pin == "*" or installed == pin or installed.startswith(pin + "-")


def parse_query(output: str) -> dict[str, tuple[str, bool]]:
    """``name<TAB>version<TAB>abbrev`` lines -> name: (version, held) for installed packages."""
    found = {}
    for line in output.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2].strip()[1:2] == "i":
            found[parts[0]] = (parts[1], parts[2].strip().startswith("h"))
    return found


#: How long apt-get waits for dpkg's lock (unattended-upgrades on a fresh node's first boot) before failing.
LOCK_TIMEOUT_S = 900

#: apt's own locks, which apt-get takes without waiting (DPkg::Lock::Timeout is dpkg's lock only, apt 2.4 on Ubuntu
#: 22.04): the lists (held by apt-daily's refresh on a fresh node's first boot) and the archives (its downloads).
APT_LOCKS = ("Could not get lock /var/lib/apt/lists/lock", "Could not get lock /var/cache/apt/archives/lock")
LOCK_POLL_S = 2.0

#: What apt-get says when its lists lack a package or a version (a refresh may bring it).
NOT_IN_LISTS = ("Unable to locate package", "was not found", "has no installation candidate")


def not_in_lists(output: str) -> bool:
    return any(marker in output for marker in NOT_IN_LISTS)


def run_apt(module: AnsibleModule, command: list[str], environment: dict[str, str],
            deadline: float) -> tuple[int, str, str]:
    """``command``, run again while it fails only because apt's lists or archives are locked, until ``deadline``."""
    while True:
        rc, out, err = module.run_command(command, environ_update=environment)
        if rc == 0 or not any(lock in err + out for lock in APT_LOCKS) or time.monotonic() >= deadline:
            return rc, out, err
        time.sleep(LOCK_POLL_S)


def plan(current: dict[str, tuple[str, bool]], pins: dict[str, str], hold: bool,
         reinstall: bool) -> tuple[list[str], list[str]]:
    install = [name for name, pin in pins.items() if reinstall or not matches(current.get(name, (None,))[0], pin)]
    to_hold = [name for name in pins if hold and (name in install or not current.get(name, ("", False))[1])]
    return install, to_hold


def main() -> None:
    module = AnsibleModule(
        argument_spec={"packages": {"type": "dict", "required": True}, "hold": {"type": "bool", "default": True},
                       "reinstall": {"type": "bool", "default": False}},
        supports_check_mode=True,
    )
    pins = {name: str(version) for name, version in module.params["packages"].items()}
    rc, out, err = module.run_command(["dpkg-query", "-W", "-f=${Package}\\t${Version}\\t${db:Status-Abbrev}\\n",
                                       *pins])
    if rc not in (0, 1):
        module.fail_json(msg=f"dpkg-query failed: {err.strip()}")
    current = parse_query(out)
    install, to_hold = plan(current, pins, module.params["hold"], module.params["reinstall"])
    diff = {"before": "".join(f"{name}={current.get(name, ('absent',))[0]}\n" for name in sorted(pins)),
            "after": "".join(f"{name}={pins[name]}{' (held)' if module.params['hold'] else ''}\n"
                             for name in sorted(pins))}
    changed = bool(install or to_hold)
    if module.check_mode or not changed:
        module.exit_json(changed=changed, installed=install, held=to_hold, diff=diff)
    environment = {"DEBIAN_FRONTEND": "noninteractive"}
    if install:
        # a fresh node's first boot runs unattended-upgrades, which holds dpkg's lock for minutes: wait for it
        command = ["apt-get", "-o", f"DPkg::Lock::Timeout={LOCK_TIMEOUT_S}", "install", "-y", "--allow-downgrades",
                   "--allow-change-held-packages"]
        if module.params["reinstall"]:
            command.append("--reinstall")
        command += [name if pins[name] == "*" else f"{name}={pins[name]}*" for name in install]
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        rc, out, err = run_apt(module, command, environment, deadline)
        if rc != 0 and not_in_lists(err + out):
            rc, out, err = run_apt(module, ["apt-get", "update"], environment, deadline)
            if rc != 0:
                module.fail_json(msg=f"apt-get update failed: {(err or out).strip()}")
            rc, out, err = run_apt(module, command, environment, deadline)
        if rc != 0:
            hint = (" (is the repository that carries it configured? software.repositories)"
                    if not_in_lists(err + out) else "")
            module.fail_json(msg=f"apt-get could not install {', '.join(install)}: {(err or out).strip()}{hint}")
    if to_hold:
        rc, _out, err = module.run_command(["apt-mark", "hold", *to_hold])
        if rc != 0:
            module.fail_json(msg=f"apt-mark hold failed: {err.strip()}")
    module.exit_json(changed=True, installed=install, held=to_hold, diff=diff)


if __name__ == "__main__":
    main()
