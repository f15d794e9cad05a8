"""Entry point of every stand-in: ``python -m provision.sim.tools --root ROOT TOOL ARGS...``.

The per-node ``bin/`` scripts call this with their node's hardware root, so the
same stand-in serves every node and never guesses which node it is.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

#: Each stand-in by name, as ``module:function`` under ``provision.sim.tools``. Imported only when called: a host
#: runs hundreds of stand-ins per play (a setpci per bridge, an nvidia-smi per check), and each starts a fresh
#: interpreter, so it loads the one module it needs.
TOOLS: dict[str, str] = {
    "nvidia-smi": "nvidia_smi:main",
    "lspci": "pci:lspci",
    "setpci": "pci:setpci",
    "ibstat": "ib:ibstat",
    "modprobe": "system:modprobe",
    "lsmod": "system:lsmod",
    "modinfo": "system:modinfo",
    "dmesg": "system:dmesg",
    "systemctl": "system:systemctl",
    "df": "system:df",
    "uname": "system:uname",
    "reboot": "system:reboot",
    "update-grub": "system:update_grub",
    "swapoff": "system:swapoff",
    "shutdown": "system:reboot",
    "dpkg-query": "apt:dpkg_query",
    "apt-get": "apt:apt_get",
    "apt-mark": "apt:apt_mark",
    "ib_write_bw": "perftest:ib_write_bw",
    "ibportstate": "portstate:ibportstate",
    "dcgmi": "dcgm:dcgmi",
    "nvidia-imex-ctl": "imex:imex_ctl",
}

#: Commands a playbook might call on a real host that must never reach this
#: machine's real binaries from a simulated node: they fail loudly instead.
GUARDED = ("dkms", "update-initramfs", "mlnxofedinstall", "nvidia-installer", "flint", "mlxconfig", "mlxlink",
           "ipmitool", "dpkg", "apt", "poweroff", "halt", "init", "kexec", "sysctl", "ofed_info",
           "hca_self_test.ofed", "nvidia-bug-report.sh", "rmmod", "insmod", "ip", "ifdown", "ifup")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "--root":
        print("usage: python -m provision.sim.tools --root ROOT TOOL [ARGS...]", file=sys.stderr)
        return 64
    from provision.sim.tools.common import ToolError

    root, tool, args = Path(argv[1]), argv[2], argv[3:]
    try:
        root = _built(root.resolve())
        from provision.sim.develop import advance

        advance(root)  # the host's clock: faults that develop over time reach the present before any tool reads
        if tool not in TOOLS:
            raise ToolError(f"not simulated: {' '.join([tool, *args])}", 64)
        module, function = TOOLS[tool].split(":")
        handler = getattr(importlib.import_module(f"provision.sim.tools.{module}"), function)
        code: int = handler(root, args)
        return code
    except ToolError as error:
        print(error.message, file=sys.stderr)
        return error.code
    except BrokenPipeError:
        return 0


def _built(root: Path) -> Path:
    """The host's root, built from its recipe the first time anything touches it (the builder, and all it
    imports, loaded only then)."""
    from provision.sim.tools.common import READY

    if (root / READY).exists():
        return root
    from provision.sim.host import ensure_host

    return ensure_host(root.parent)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
