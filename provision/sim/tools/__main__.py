"""Entry point of every stand-in: ``python -m provision.sim.tools --root ROOT TOOL ARGS...``.

The per-node ``bin/`` scripts call this with their node's hardware root, so the
same stand-in serves every node and never guesses which node it is.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from provision.sim.host import ensure_host
from provision.sim.tools import apt, ib, nvidia_smi, pci, perftest, portstate, system
from provision.sim.tools.common import ToolError

TOOLS: dict[str, Callable[[Path, list[str]], int]] = {
    "nvidia-smi": nvidia_smi.main,
    "lspci": pci.lspci,
    "setpci": pci.setpci,
    "ibstat": ib.ibstat,
    "modprobe": system.modprobe,
    "lsmod": system.lsmod,
    "modinfo": system.modinfo,
    "dmesg": system.dmesg,
    "systemctl": system.systemctl,
    "df": system.df,
    "reboot": system.reboot,
    "update-grub": system.update_grub,
    "swapoff": system.swapoff,
    "shutdown": system.reboot,
    "dpkg-query": apt.dpkg_query,
    "apt-get": apt.apt_get,
    "apt-mark": apt.apt_mark,
    "ib_write_bw": perftest.ib_write_bw,
    "ibportstate": portstate.ibportstate,
}

#: Commands a playbook might call on a real host that must never reach this
#: machine's real binaries from a simulated node: they fail loudly instead.
GUARDED = ("dkms", "update-initramfs", "mlnxofedinstall", "nvidia-installer", "flint", "mlxconfig", "mlxlink",
           "ipmitool", "dpkg", "apt", "poweroff", "halt", "init", "kexec", "sysctl", "ofed_info",
           "hca_self_test.ofed", "dcgmi", "nvidia-bug-report.sh", "rmmod", "insmod", "ip", "ifdown", "ifup")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "--root":
        print("usage: python -m provision.sim.tools --root ROOT TOOL [ARGS...]", file=sys.stderr)
        return 64
    root, tool, args = Path(argv[1]), argv[2], argv[3:]
    handler = TOOLS.get(tool)
    try:
        root = ensure_host(root.resolve().parent)  # a host is built the first time anything touches it
        if handler is None:
            raise ToolError(f"not simulated: {' '.join([tool, *args])}", 64)
        return handler(root, args)
    except ToolError as error:
        print(error.message, file=sys.stderr)
        return error.code
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
