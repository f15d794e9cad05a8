"""``nvidia-imex-ctl`` over a simulated GB200/GB300 tray, in the real tool's format (field guide 8.3; the real
``-N`` of an 18-tray domain is ../shared/fixtures/blackwell/imex).

The daemon serves when its unit runs, the driver is loaded and its command service is on (``IMEX_CMD_ENABLED=1``
in ``/etc/nvidia-imex/config.cfg``). ``-N`` lists the nodes of *this* tray's ``nodes_config.cfg`` in its order and
asks each one, as the daemon asks its peers: a peer is another simulated tray found by its address (the rack's
map of its domain, :mod:`provision.sim.nvl72`); its cells read ``C`` when both serve with the same node map and
version, ``!M!`` when their maps differ, ``!V!`` when their versions do; a peer that does not serve has a row of
``I`` and is ``N`` to the others.

Not recorded in any public output we hold, so the simulator's own words: a node that does not serve is listed
``UNAVAILABLE`` with no version, a domain with any such node or cell is ``DEGRADED``, and ``-q`` on a tray whose
daemon does not serve fails with a message of ours. Every check reads these as "not READY", "not UP", "failed":
no judgement depends on the exact word.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from provision.sim.node import load_state
from provision.sim.tools.apt import IMEX_CONFIG as CONFIG
from provision.sim.tools.apt import IMEX_NODES_CONFIG as NODES_CONFIG
from provision.sim.tools.apt import installed_version
from provision.sim.tools.common import READY, ToolError, not_simulated, service_active

LEGEND = """Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Connection was lost, and clean up has been triggreed.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation
"""


def _settings(root: Path) -> dict[str, str]:
    path = root / CONFIG
    if not path.exists():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines()
             if "=" in line and not line.lstrip().startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def _node_map(root: Path, settings: dict[str, str]) -> list[str]:
    path = root / settings.get("IMEX_NODE_CONFIG_FILE", NODES_CONFIG).lstrip("/")
    if not path.exists():
        return []
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


class Tray:
    """One tray's IMEX as its peers see it: whether it serves, its node map and its version."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.built = (root / READY).exists()
        self.state: dict[str, Any] = load_state(root) if self.built else {}
        self.settings = _settings(root) if self.built else {}
        self.version = installed_version(root, "nvidia-imex-") if self.built else None

    @property
    def serving(self) -> bool:
        return (self.version is not None and service_active(self.state, "nvidia-imex")
                and self.state.get("driver_loaded") is not None and self.settings.get("IMEX_CMD_ENABLED") == "1")

    @property
    def node_map(self) -> list[str]:
        return _node_map(self.root, self.settings)

    @property
    def short_version(self) -> str:
        """``570.172``: the driver branch and release, as ``-N`` prints a node's version."""
        return ".".join((self.version or "").split(".")[:2])


def _peer(root: Path, place: dict[str, Any] | None, address: str) -> Tray | None:
    host = (place or {}).get("peers", {}).get(address)
    return Tray(root.parent.parent / host / "root") if host else None


def _cell(one: Tray | None, other: Tray | None, same: bool) -> str:
    if one is None or not one.serving:
        return "I"
    if other is None or not other.serving:
        return "N"
    if same:
        return "C"
    if one.node_map != other.node_map:
        return "!M!"
    return "C" if one.short_version == other.short_version else "!V!"


def domain_status(root: Path) -> str:
    """``nvidia-imex-ctl -N`` of the tray at ``root``."""
    here = Tray(root)
    addresses = here.node_map
    if not addresses:
        raise ToolError(f"nvidia-imex-ctl: no node listed in {here.settings.get('IMEX_NODE_CONFIG_FILE', NODES_CONFIG)}"
                        " (the simulator's words)", 1)
    own = here.state.get("address")
    trays = [here if address == own else _peer(root, here.state.get("nvlink_domain"), address) for address in addresses]
    now = time.time()
    stamp = time.strftime("%-m/%-d/%Y %H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
    lines = [LEGEND, stamp, "Nodes:"]
    for index, (address, tray) in enumerate(zip(addresses, trays, strict=True)):
        serving = tray is not None and tray.serving
        state, version = ("READY", tray.short_version) if serving and tray else ("UNAVAILABLE", "")
        lines.append(f"Node #{index:<4}- {address:<16}- {state:<21}- Version: {version}".rstrip())
    lines.append("")
    lines.append(" Nodes From\\To  " + "".join(f"{index:<4}" for index in range(len(addresses))).rstrip())
    cells_all: list[str] = []
    for row, tray in enumerate(trays):
        cells = [_cell(tray, other, row == column) for column, other in enumerate(trays)]
        cells_all += cells
        lines.append(f"{row:>8}        " + "".join(f"{cell:<4}" for cell in cells).rstrip())
    up = all(cell == "C" for cell in cells_all)
    lines += ["", f"Domain State: {'UP' if up else 'DEGRADED'}"]
    return "\n".join(lines)


def imex_ctl(root: Path, args: list[str]) -> int:
    """``nvidia-imex-ctl -q`` (``READY`` when the daemon serves) and ``-N`` (the domain's status)."""
    here = Tray(root)
    if here.version is None:
        raise ToolError("nvidia-imex-ctl: command not found", 127)
    if args == ["-q"]:
        if not here.serving:
            raise ToolError("nvidia-imex-ctl: cannot reach the IMEX daemon's command service (the simulator's "
                            "words)", 1)
        print("READY")
        return 0
    if args == ["-N"]:
        if not here.serving:
            raise ToolError("nvidia-imex-ctl: cannot reach the IMEX daemon's command service (the simulator's "
                            "words)", 1)
        print(domain_status(root))
        return 0
    not_simulated("nvidia-imex-ctl", " ".join(args))
